"""The Arrow path's pure parts: splits, the clean-record check, thresholds, window partials, passes."""

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobs.common.windows import table_partials
from jobs.stream.sources import arrow_reader
from jobs.stream.sources.arrow_reader import late_thresholds, narrow_of, plan_splits, spill_dir
from jobs.stream.stage.driver import label_thresholds, run_stage
from jobs.stream.workers import arrow_path
from jobs.stream.workers.arrow_path import (
    LateThresholds,
    RecordChecks,
    Split,
    aggregate_pass,
    collect_pass,
    from_blobs,
    parse_clean,
    read_split,
)
from watermark.evaluation.replay import WindowSpec
from watermark.partitions.combine import PartitionedWatermark

INGEST = 1_700_000_100_000
CHECKS = RecordChecks(
    "event_id",
    "key",
    "partition",
    "event_time_ms",
    "arrival_time_ms",
    "value",
    ingest_ms=INGEST,
    future_bound_ms=1_000,
    max_field_bytes=16,
    max_event_ahead_ms=50,
    max_record_bytes=1 << 20,
)


def line(**fields):
    record = {
        "event_id": "1",
        "key": "k",
        "partition": "p",
        "event_time_ms": 1_700_000_000_000,
        "arrival_time_ms": 1_700_000_000_005,
        "value": 1.5,
    }
    record.update(fields)
    return json.dumps({k: v for k, v in record.items() if v is not ...})


@given(
    st.lists(st.text(alphabet="ab{}\r", max_size=30), max_size=40),
    st.integers(1, 64),
    st.booleans(),
)
def test_every_line_of_a_file_is_read_by_exactly_one_split_in_order(
    tmp_path_factory, lines, size, newline_end
):
    path = tmp_path_factory.mktemp("splits") / "f.json"
    data = "\n".join(lines) + ("\n" if newline_end and lines else "")
    path.write_bytes(data.encode())
    length = path.stat().st_size
    splits = plan_splits([str(path)], [length], 4, min_bytes=size, max_bytes=size)
    assert b"".join(read_split(s) for s in splits) == data.encode()
    assert all(s.end - s.start <= size for s in splits)


def test_clean_records_come_back_as_the_spark_path_would_type_them():
    data = "\n".join(
        [
            line(),
            line(event_id="2", partition=None, arrival_time_ms=None),
            line(event_id="3", partition=..., value=7, arrival_time_ms=...),
        ]
    )
    records, why = parse_clean((data + "\n").encode(), CHECKS)
    assert why == "" and records is not None
    assert records.to_pylist() == [
        {
            "event_id": "1",
            "key": "k",
            "partition": "p",
            "event_time_ms": 1_700_000_000_000,
            "arrival_time_ms": 1_700_000_000_005,
            "value": 1.5,
        },
        {
            "event_id": "2",
            "key": "k",
            "partition": "",
            "event_time_ms": 1_700_000_000_000,
            "arrival_time_ms": INGEST,
            "value": 1.5,
        },
        {
            "event_id": "3",
            "key": "k",
            "partition": "",
            "event_time_ms": 1_700_000_000_000,
            "arrival_time_ms": INGEST,
            "value": 7.0,
        },
    ]


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (line(key=None), "missing key"),
        (line(key=""), "missing key"),
        (line(event_id=...), "missing event_id"),
        (line(key=" k"), "surrounding whitespace"),
        (line(partition="  "), "surrounding whitespace"),
        (line(key="x" * 17), "longer than 16 bytes"),
        (line(event_id=7), "not plain typed JSON"),
        (line(event_time_ms=1.5), "not plain typed JSON"),
        (line(event_time_ms="2023-11-14T22:13:20Z"), "not plain typed JSON"),
        (line(event_time_ms=-1), "before 1970"),
        (line(event_time_ms=INGEST + 1_001), "future bound"),
        (line(event_time_ms=None), "missing event_time_ms"),
        (line(arrival_time_ms=-5), "arrival_time_ms before 1970"),
        # more than the 5 minutes of --max-arrival-ahead-ms ahead of the ingestion time (within a day's bound)
        (line(arrival_time_ms=INGEST + 300_001), "more than 300000 ms ahead of ingestion"),
        # 51 ms ahead of its own arrival time (the bound is 50), well within the future bound
        (line(event_time_ms=1_700_000_000_056), "more than 50 ms ahead of arrival_time_ms"),
        # no arrival time: the ingestion time is its arrival
        (line(event_time_ms=INGEST + 51, arrival_time_ms=None), "more than 50 ms ahead of arrival_time_ms"),
        (line(value=None), "value"),
        (line().replace("1.5", "NaN"), "non-finite"),
        (line().replace("1.5", "1e400"), "not plain typed JSON"),
        ('{"event_id": "1", "event_id": "2"}', "not plain typed JSON"),
        ("{not json", "not plain typed JSON"),
        (line() + "\n", "blank lines"),
        (line() + line(), "several records on a line"),
    ],
)
def test_a_record_the_spark_path_must_judge_makes_the_split_unclean(text, why):
    records, reason = parse_clean((line() + "\n" + text + "\n").encode(), CHECKS)
    assert records is None
    assert why in reason


def test_an_event_time_up_to_the_skew_bound_ahead_of_its_arrival_is_clean():
    """Issue 29 item 10: the bound is inclusive, and measured against the record's own arrival time."""
    data = [line(event_time_ms=1_700_000_000_055), line(event_time_ms=INGEST + 50, arrival_time_ms=None)]
    records, why = parse_clean(("\n".join(data) + "\n").encode(), CHECKS)
    assert why == ""
    assert records.column("event_time_ms").to_pylist() == [1_700_000_000_055, INGEST + 50]


def test_an_empty_split_is_clean_and_a_blank_one_is_not():
    assert parse_clean(b"", CHECKS)[0].num_rows == 0
    assert parse_clean(b"\n\n", CHECKS)[0] is None


@given(st.integers(0, 2**16), st.sampled_from(["periodic", "ingestion", "sliding"]))
def test_thresholds_evaluated_per_split_give_exactly_the_stage_labels(seed, strategy):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    # Few distinct arrival times, so that many rows tie and pieces start mid-tie.
    tp = 1_000 + rng.integers(0, 40, n).astype(np.int64) * 10
    te = tp - rng.integers(0, 300, n)
    file = rng.integers(0, 3, n).astype(np.int32)
    ids = (rng.integers(0, 4, n).astype(np.int64) << 32) + rng.permutation(n).astype(np.int64)
    part = rng.choice(["a", "b"], n)
    narrow = pa.table(
        {"file": file, "line": ids, "partition": part, "event_time_ms": te, "arrival_time_ms": tp}
    )
    params = {"periodic": {"delay_ms": 50, "period_ms": 20}, "ingestion": {"max_event_time_lag_ms": 60}}
    result = run_stage(PartitionedWatermark(strategy, params.get(strategy, {})), narrow, 100)
    th = label_thresholds(te[result.order], result.late[result.order], result.wm_at_arrival)
    thresholds = late_thresholds(narrow, result.order, th.starts, th.values)
    # Each executor sees only its split's rows, in any order.
    for rows in np.array_split(rng.permutation(n), 3):
        got = thresholds.late(te[rows], tp[rows], file[rows].astype(np.int64), ids[rows])
        assert got.tolist() == result.late[rows].tolist()


def reference_partials(keys, te, values, window_ms, step_ms):
    out = {}
    for k, t, v in zip(keys, te, values, strict=True):
        start = t - t % step_ms
        while start > t - window_ms:
            c, s, lo, hi = out.get((k, start), (0, 0.0, np.inf, -np.inf))
            out[(k, start)] = (c + 1, s + v, min(lo, v), max(hi, v))
            start -= step_ms
    return {(k, s): (s + window_ms, *agg) for (k, s), agg in out.items()}


@pytest.mark.parametrize(("window_ms", "step_ms"), [(1_000, 1_000), (1_000, 300), (900, 300)])
def test_arrow_window_partials_match_a_plain_loop(window_ms, step_ms):
    rng = np.random.default_rng(5)
    n = 500
    keys = rng.choice(["a", "b", "c"], n).tolist()
    te = rng.integers(0, 10_000, n).astype(np.int64)
    values = rng.integers(-50, 50, n).astype(float)
    table = pa.table({"key": keys, "event_time_ms": te, "value": values})
    got = {
        (r["key"], r["window_start_ms"]): (r["window_end_ms"], r["count"], r["sum"], r["min"], r["max"])
        for r in table_partials(table, WindowSpec(window_ms, step_ms)).to_pylist()
    }
    assert got == reference_partials(keys, te.tolist(), values.tolist(), window_ms, step_ms)


def test_the_second_pass_gives_the_same_result_whether_or_not_a_worker_kept_the_split(tmp_path):
    path = tmp_path / "f.json"
    lines = [
        line(
            event_id=str(i),
            key=f"k{i % 3}",
            event_time_ms=1_700_000_000_000 + 10 * i,
            arrival_time_ms=1_700_000_000_005 + 10 * i,
            value=float(i),
        )
        for i in range(50)
    ]
    path.write_text("\n".join(lines) + "\n")
    size = path.stat().st_size
    splits = [Split(0, 0, str(path), 0, size // 2, size), Split(1, 0, str(path), size // 2, size, size)]
    job = str(tmp_path / "ck")
    folder = spill_dir(str(tmp_path / "local"))
    checks = replace(CHECKS, spill=str(folder))
    collected = list(collect_pass(iter(splits), checks, job, 7))
    assert [c.clean for c in collected] == [True, True]
    narrow = narrow_of(splits, collected)
    assert narrow.num_rows == 50 and len(set(narrow.column("line").to_pylist())) == 50
    assert sorted(p.name for p in folder.iterdir()) == ["b7-s0.arrow", "b7-s1.arrow"]
    te = narrow.column("event_time_ms").to_numpy()
    tp = narrow.column("arrival_time_ms").to_numpy()
    # Rows arriving from row 25 on are late below row 40's event time: rows 25..39.
    starts, below = np.array([tp[0], tp[25]]), np.array([0, te[40]])
    thresholds = LateThresholds(
        starts, np.zeros(2, np.int64), np.zeros(2, np.int64), below, np.zeros(2, bool)
    )

    def second_pass():
        out = list(aggregate_pass(iter(splits), checks, job, 7, thresholds, WindowSpec(1_000)))
        partials = pa.concat_tables(from_blobs(a.partials for a in out))
        late = pa.concat_tables(from_blobs(a.late for a in out))
        return [a.reparsed for a in out], partials, late

    kept, partials, late = second_pass()
    assert kept == [False, False] and list(folder.iterdir()) == []
    arrow_path._CACHE.clear()
    reparsed, partials_again, late_again = second_pass()
    assert reparsed == [True, True]
    assert partials_again.equals(partials) and late_again.equals(late)
    assert late.column("event_id").to_pylist() == [str(i) for i in range(25, 40)]
    assert sum(partials.column("count").to_pylist()) == 35


def test_kept_splits_live_in_a_private_folder_and_only_a_file_naming_its_split_is_taken(tmp_path):
    import os
    import stat

    path = tmp_path / "in.json"
    path.write_text(
        "\n".join(
            line(
                event_id=str(i),
                key="k",
                event_time_ms=1_700_000_000_000 + i,
                arrival_time_ms=1_700_000_000_005 + i,
                value=1.0,
            )
            for i in range(20)
        )
        + "\n"
    )
    size = path.stat().st_size
    split = Split(0, 0, str(path), 0, size, size)
    job = str(tmp_path / "ck-private")
    folder = spill_dir(str(tmp_path / "local"))
    checks = replace(CHECKS, spill=str(folder))
    assert [c.clean for c in collect_pass(iter([split]), checks, job, 3)] == [True]
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    assert os.stat(folder).st_uid == os.getuid()
    arrow_path._CACHE.clear()  # the second pass runs in another worker: it reads the kept file
    assert arrow_path._take(job, 3, split, str(folder)).num_rows == 20
    # A file in the folder that does not name this split (planted, or left from other input) is ignored.
    assert [c.clean for c in collect_pass(iter([split]), checks, job, 4)] == [True]
    arrow_path._CACHE.clear()
    other = Split(0, 0, str(path), 0, size // 2, size)
    assert arrow_path._take(job, 4, other, str(folder)) is None


def test_each_run_gets_its_own_unpredictable_private_spill_folder_under_spark_s_local_dir(
    tmp_path, monkeypatch
):
    import os
    import stat

    monkeypatch.delenv("SPARK_LOCAL_DIRS", raising=False)
    local = tmp_path / "spark-local"
    first, second = spill_dir(str(local)), spill_dir(str(local))
    assert first.parent == second.parent == local and first != second  # per run, not per user or job
    assert first.name.startswith("wm-arrow-") and len(first.name) == len("wm-arrow-") + 32
    for folder in (first, second):
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700 and os.stat(folder).st_uid == os.getuid()
    monkeypatch.setenv("SPARK_LOCAL_DIRS", f"{tmp_path / 'env-a'},{tmp_path / 'env-b'}")
    assert spill_dir(str(local)).parent == tmp_path / "env-a"  # Spark's own precedence
    monkeypatch.delenv("SPARK_LOCAL_DIRS")
    import tempfile

    assert arrow_reader.local_dir(None) == Path(tempfile.gettempdir())
    # A folder someone else made (or a loose mode) is not used: splits are then parsed again.
    loose = local / "wm-arrow-loose"
    loose.mkdir(mode=0o755)
    os.chmod(loose, 0o755)
    with pytest.raises(OSError, match="not a folder private"):
        arrow_path.private_folder(loose)
