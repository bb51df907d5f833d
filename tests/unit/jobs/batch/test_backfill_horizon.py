"""When the backfill takes a window not in the aggregates for closed: rules (b) and (c) of
``jobs.batch.backfill_plan`` (the lowest watermark of a live partition in ``watermark_log``, the flushed
windows), on pyarrow rows and on small Delta tables written by delta-rs (no JVM). The job and the backfill
together in partition-scoped mode: tests/integration/spark/test_backfill_scoped.py."""

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from jobs.batch.backfill_plan import (
    LOG_SCHEMA,
    DuplicateWindows,
    check_unique_windows,
    latest_rows,
    log_ranges,
    log_through_batch,
    lowest_live_watermark,
    pending_windows,
    read_lowest_live_watermark,
)
from jobs.common.schemas import AGGREGATES_SCHEMA, WATERMARK_LOG_SCHEMA
from watermark.timeutil import NO_WATERMARK
from watermark.windowspec import WindowSpec


def log(*rows):
    """watermark_log rows (partition, batch_id, partition_watermark_ms)."""
    return pa.Table.from_pylist(
        [dict(zip(LOG_SCHEMA.names, row, strict=True)) for row in rows], schema=LOG_SCHEMA
    )


def test_the_lowest_watermark_is_the_slowest_live_partitions_latest():
    rows = log(("fast", 1, 5_000), ("slow", 1, 100), ("fast", 2, 7_000), ("slow", 2, 150))
    assert lowest_live_watermark(rows) == 150
    # not the latest batch's rows only: a partition without a row since batch 1 still holds its windows
    assert lowest_live_watermark(log(("fast", 9, 7_000), ("idle", 1, 300), ("fast", 8, 6_000))) == 300


def test_an_evicted_partition_is_left_out_and_one_without_a_watermark_closes_nothing():
    evicted = log(("fast", 1, 5_000), ("gone", 1, 10), ("fast", 2, 7_000), ("gone", 2, None))
    assert lowest_live_watermark(evicted) == 7_000
    # evicted, then back: its latest row counts
    back = pa.concat_tables([evicted, log(("gone", 3, 20))])
    assert lowest_live_watermark(back) == 20
    # a live partition with no watermark yet: int64 min, below every window end
    fresh = pa.concat_tables([evicted, log(("new", 2, NO_WATERMARK))])
    assert lowest_live_watermark(fresh) == NO_WATERMARK
    # no live partition (none yet, or all evicted): None, which closes nothing (a partition may come)
    assert lowest_live_watermark(log()) is None
    assert lowest_live_watermark(log(("gone", 1, 10), ("gone", 2, None))) is None


def test_latest_rows_keep_a_live_row_over_a_null_one_of_the_same_batch_and_reduce_in_parts():
    assert latest_rows(log(("p", 3, None), ("p", 3, 40), ("p", 2, 90))).to_pylist() == [
        {"partition": "p", "batch_id": 3, "partition_watermark_ms": 40}
    ]
    rows = log(("a", 1, 1), ("b", 1, 5), ("a", 2, 3), ("b", 3, None), ("c", 2, NO_WATERMARK), ("c", 4, 8))
    whole = latest_rows(rows).sort_by("partition")
    parts = latest_rows(pa.concat_tables([latest_rows(rows.slice(0, 3)), latest_rows(rows.slice(3))]))
    assert parts.sort_by("partition").equals(whole)
    assert lowest_live_watermark(rows) == 3


def test_pending_windows_are_the_late_rows_windows_not_in_the_aggregates_sliding_too():
    late = pa.table({"key": ["k", "k", "j"], "event_time_ms": [500, 1_500, 1_200], "batch_id": [4, 5, 6]})
    current = pa.table({"key": ["k"], "window_start_ms": [0]})
    tumbling = pending_windows(late, current, WindowSpec(1_000)).sort_by("key").to_pylist()
    assert [(r["key"], r["window_start_ms"], r["window_end_ms"], r["batch_id"]) for r in tumbling] == [
        ("j", 1_000, 2_000, 6),
        ("k", 1_000, 2_000, 5),
    ]
    sliding = pending_windows(late, current, WindowSpec(1_000, 500))
    got = sorted(zip(*(sliding.column(c).to_pylist() for c in ("key", "window_start_ms")), strict=True))
    # te 500 is in [0, 1000) (in the aggregates) and [500, 1500); te 1500 in [1000, 2000) and [1500, 2500)
    assert got == [("j", 500), ("j", 1_000), ("k", 500), ("k", 1_000), ("k", 1_500)]


def test_two_current_rows_of_one_window_are_refused_with_the_window_named():
    rows = pa.table({"key": ["k", "k", "j"], "window_start_ms": [0, 0, 0], "window_end_ms": [1_000] * 3})
    with pytest.raises(DuplicateWindows, match=r"1 window\(s\) more than once.*'k' \[0, 1000\) x2"):
        check_unique_windows(rows, "aggregates")
    check_unique_windows(rows.slice(1), "aggregates")


def write_log(path, batches):
    """A watermark_log written by delta-rs, one data file per batch: {batch_id: [(partition, wm), ...]}."""
    for batch, rows in batches.items():
        table = pa.Table.from_pylist(
            [{"batch_id": batch, "partition": p, "partition_watermark_ms": wm} for p, wm in rows],
            schema=WATERMARK_LOG_SCHEMA,
        )
        write_deltalake(str(path), table, mode="append")
    return DeltaTable(str(path))


def test_the_log_is_read_newest_first_in_chunks_and_no_further_back_than_decides(tmp_path):
    path = tmp_path / "watermark_log"
    batches = {b: [("fast", 1_000 * b), ("slow", 100 * b)] for b in range(1, 7)}
    batches[7] = [("fast", 7_000), ("slow", None)]  # slow evicted
    batches[8] = [("fast", 8_000), ("new", NO_WATERMARK)]  # an uncommitted batch's rows: not counted
    dt = write_log(path, batches)
    every = pa.concat_tables([log(*((p, b, wm) for p, wm in rows)) for b, rows in batches.items() if b <= 7])
    ranges = log_ranges(dt, 7, chunk_rows=4)
    assert ranges[0] == (6, 7) and ranges[-1][0] is None and len(ranges) >= 3
    assert read_lowest_live_watermark(dt, str(path), 7, below_ms=0, chunk_rows=4) == 7_000
    assert lowest_live_watermark(every) == 7_000
    assert read_lowest_live_watermark(dt, str(path), 8, below_ms=0, chunk_rows=4) == NO_WATERMARK
    # through batch 5, slow is live at 500: below 1_000 nothing can close, so the older files are not read
    actions = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
    for action in actions:
        if action["max.batch_id"] <= 3:
            (path / action["path"]).unlink()
    assert read_lowest_live_watermark(dt, str(path), 5, below_ms=1_000, chunk_rows=4) == 500
    with pytest.raises(OSError):  # the older files were needed to be sure 500 is the lowest
        read_lowest_live_watermark(dt, str(path), 5, below_ms=400, chunk_rows=4)


def aggregates_row(batch_id, trigger, flushed=False, start=0):
    row = {name: None for name in AGGREGATES_SCHEMA.names}
    row |= {"key": "k", "window_start_ms": start, "window_end_ms": start + 1_000, "count": 1, "revision": 0}
    row |= {"batch_id": batch_id, "trigger_watermark_ms": trigger, "flushed": flushed, "late_count": 0}
    return pa.Table.from_pylist([row], schema=AGGREGATES_SCHEMA)


def test_the_newest_log_batch_counts_once_its_aggregates_are_committed(tmp_path):
    log_path, agg_path = tmp_path / "watermark_log", tmp_path / "aggregates"
    log_dt = write_log(log_path, {3: [("p", 10)], 4: [("p", 20)]})
    write_deltalake(str(agg_path), aggregates_row(3, trigger=2_000), mode="append")
    # a window a backfill inserted carries its late row's batch, but no trigger: it proves nothing
    write_deltalake(str(agg_path), aggregates_row(4, trigger=None, start=5_000), mode="append")
    agg = DeltaTable(str(agg_path))
    assert log_through_batch(log_dt, str(log_path), agg, str(agg_path)) == 3
    write_deltalake(str(agg_path), aggregates_row(4, trigger=None, flushed=True, start=9_000), mode="append")
    agg = DeltaTable(str(agg_path))
    assert log_through_batch(log_dt, str(log_path), agg, str(agg_path)) == 4
