"""The late-data backfill: exact reconciliation, idempotency, concurrent writers."""

import dataclasses

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from jobs.batch.backfill import BackfillError, BackfillOptions, run_backfill
from jobs.common.session import arrow_frame
from jobs.common.tables import DeltaTables
from jobs.stream.run import run_job
from tests.integration.spark.test_stream import config, iot_records
from tests.landing import folder_job, write_lines
from tools.feed.landing import feed
from watermark.evaluation.replay import WindowSpec

pytestmark = pytest.mark.slow

FAR_FUTURE_MS = 4_102_444_800_000  # 2100-01-01
AGGRESSIVE = {"delay_ms": 0, "period_ms": 10}  # a watermark at max(te): many late rows


def one_partition(records: pa.Table) -> pa.Table:
    """The IoT stream as one source partition: the watermark then follows the newest event of all devices."""
    i = records.schema.get_field_index("partition")
    return records.set_column(i, "partition", pa.array(["all"] * records.num_rows))


def job(tmp, **kw):
    return folder_job(tmp, config(params=AGGRESSIVE), max_files_per_trigger=2, **kw)


def batch_aggregation(spark, records: pa.Table) -> dict:
    """Count, sum, min and max per (key, 1 s window) of every valid record: a plain Spark batch job."""
    from pyspark.sql import functions as F

    df = arrow_frame(spark, records.select(["key", "event_time_ms", "value"]))
    start = F.floor(F.col("event_time_ms") / 1000).cast("long") * 1000
    rows = (
        df.groupBy("key", start.alias("start"))
        .agg(
            F.count("*").alias("n"),
            F.sum("value").alias("s"),
            F.min("value").alias("lo"),
            F.max("value").alias("hi"),
        )
        .collect()
    )
    return {(r["key"], r["start"]): (r["n"], round(r["s"], 6), r["lo"], r["hi"]) for r in rows}


def table_aggregates(tables) -> dict:
    rows = DeltaTables(str(tables), "test-reader").read("aggregates").to_pylist()
    out = {}
    for r in rows:
        window = (r["key"], r["window_start_ms"])
        assert window not in out, f"window {window} appears twice in the aggregates"
        out[window] = (r["count"], round(r["sum"], 6), r["min"], r["max"])
    return out


def versions(tables):
    return {name: DeltaTable(str(tables / name)).version() for name in ("aggregates", "late_events")}


def backfill(spark, tables, start_ms, end_ms, **kw):
    return run_backfill(
        spark, BackfillOptions(str(tables), start_ms, end_ms, WindowSpec(1_000), backoff_s=0.05), **kw
    )


def test_backfill_makes_every_window_equal_a_batch_aggregation_and_a_rerun_changes_nothing(spark, tmp_path):
    # 2,000 records in two batches of two files: late rows in both, so that each interval holds some
    records = one_partition(iot_records(2_000))
    feed(records, tmp_path / "in", rows_per_file=500)
    write_lines(tmp_path / "in" / "zz-bad.jsonl", ['{"event_id": "x", "key": "k"', "not json"])
    opts = job(tmp_path, flush_at_end=True)
    run_job(spark, opts)
    out = tmp_path / "out"
    late = DeltaTables(str(out), "r").read("late_events")
    assert late.num_rows > 300, "the aggressive watermark should make many rows late"
    assert table_aggregates(out) != batch_aggregation(spark, records)

    # Two hourly-like intervals, cut at the ingestion time of a middle batch.
    ingested = sorted(set(late.column("ingested_at_ms").to_pylist()))
    cut = ingested[len(ingested) // 2]
    first = backfill(spark, out, 0, cut)
    assert 0 < first.late_events_read < late.num_rows
    second = backfill(spark, out, cut, FAR_FUTURE_MS)
    assert first.folded_events + second.folded_events == late.num_rows
    assert second.deferred_events == 0

    assert table_aggregates(out) == batch_aggregation(spark, records)
    after = DeltaTables(str(out), "r").read("late_events")
    assert pc.all(after.column("reconciled")).as_py()
    agg = DeltaTables(str(out), "r").read("aggregates")
    assert pc.sum(agg.column("late_count")).as_py() == late.num_rows
    revised = agg.filter(pc.field("late_count") > 0)
    assert pc.min(revised.column("revision")).as_py() >= 1
    assert agg.filter(pc.field("late_count") == 0).column("revision").unique().to_pylist() == [0]

    before = versions(out)
    again = backfill(spark, out, cut, FAR_FUTURE_MS)
    assert (again.folded_events, again.reconciled_events, again.late_events_read) == (0, 0, 0)
    assert versions(out) == before
    assert backfill(spark, out, 0, cut).folded_events == 0
    assert versions(out) == before


def test_a_late_row_of_a_window_still_open_waits_for_a_later_run(spark, tmp_path):
    from tests.landing import good

    # te 500 arrives after te 1_900 has pushed the watermark to 1_900: late, but its window [0, 1000) is
    # closed only when the watermark passes 1000 -- which it has. The row at te 1_950 arriving after
    # te 2_600 is late for window [1000, 2000), closed too; the row at te 2_500 after te 2_600 is late
    # while its window [2000, 3000) is still open: deferred.
    rows = [(0, 100, 10), (1, 1_900, 20), (2, 500, 30), (3, 2_600, 40), (4, 1_950, 50), (5, 2_500, 60)]
    write_lines(tmp_path / "in" / "a.jsonl", [good(i, te, tp) for i, te, tp in rows])
    run_job(spark, job(tmp_path))
    out = tmp_path / "out"
    report = backfill(spark, out, 0, FAR_FUTURE_MS)
    assert (report.late_events_read, report.folded_events, report.deferred_events) == (3, 2, 1)
    late = DeltaTables(str(out), "r").read("late_events").sort_by("event_time_ms").to_pylist()
    assert [(r["event_time_ms"], r["reconciled"]) for r in late] == [
        (500, True),
        (1_950, True),
        (2_500, False),
    ]
    windows = table_aggregates(out)
    assert windows[("k", 0)][0] == 2 and windows[("k", 1_000)][0] == 2
    assert ("k", 2_000) not in windows  # still open in the stream: the backfill did not insert it

    # The stream goes on: its watermark closes [2000, 3000), and the next run folds the deferred row.
    write_lines(tmp_path / "in" / "b.jsonl", [good(6, 3_500, 70), good(7, 3_600, 90), good(8, 3_700, 110)])
    run_job(spark, job(tmp_path))
    report = backfill(spark, out, 0, FAR_FUTURE_MS)
    assert (report.folded_events, report.deferred_events) == (1, 0)
    assert table_aggregates(out)[("k", 2_000)][0] == 2  # the on-time 2_600 and the late 2_500


def test_a_backfill_before_the_stream_ran_says_what_to_do(spark, tmp_path):
    with pytest.raises(BackfillError, match="run the streaming job"):
        backfill(spark, tmp_path / "none", 0, 1)


def test_a_stream_without_late_rows_has_nothing_to_fold(spark, tmp_path):
    records = one_partition(iot_records(500))
    feed(records, tmp_path / "in", rows_per_file=500)
    patient = config(params={"delay_ms": 600_000, "period_ms": 10})  # nothing is late
    run_job(spark, dataclasses.replace(job(tmp_path, flush_at_end=True), config=patient))
    tables = DeltaTables(str(tmp_path / "out"), "r")
    assert not tables.exists("late_events") and tables.exists("aggregates")
    before = table_aggregates(tmp_path / "out")
    report = backfill(spark, tmp_path / "out", 0, FAR_FUTURE_MS)
    assert (report.late_events_read, report.folded_events, report.corrected_windows) == (0, 0, 0)
    assert table_aggregates(tmp_path / "out") == before
