"""The streaming job on local Spark: conservation, bad input, replay parity, batch-size invariance."""

import json
import os
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from jobs.common.schemas import QUARANTINE_REASONS
from jobs.common.tables import DeltaTables
from jobs.stream.options import JobOptions
from jobs.stream.run import run_job
from tests.landing import folder_job, good, write_lines
from tests.samples import IOT
from tools.feed.landing import feed
from tools.feed.records import records_from_file
from watermark.config import PipelineConfig
from watermark.evaluation.replay import WindowSpec, replay

ROOT = Path(__file__).resolve().parents[3]


def config(strategy="periodic", params=None, window_ms=1_000, version=1):
    # No idle timeout: the library replays these runs are compared with have none.
    return PipelineConfig.from_dict(
        {"version": version, "strategy": strategy, "params": params or {}, "window_ms": window_ms}
        | {"idle_timeout_ms": None}
    )


def run(spark, tmp, inp, cfg, **kw):
    opts = folder_job(tmp, cfg, input=str(inp), **kw)
    reports = run_job(spark, opts)
    return DeltaTables(opts.output, "test-reader"), reports


def iot_records(rows):
    rec = records_from_file(
        IOT,
        event_time="S.Client.Detection.Time",
        arrival_time="S.Message.received.time.ms",
        partition="S.Device.ID",
        delimiter=";",
    )
    return rec.slice(0, rows)


def test_bad_input_is_quarantined_with_reasons_and_every_valid_row_is_accounted_for(spark, tmp_path):
    base = 1_600_000_000_000
    lines = [good(i, base + 10 * i, base + 10 * i + 5) for i in range(50)]
    lines += [
        "{not json",
        "",
        json.dumps({"key": "k", "event_time_ms": base, "value": 1}),  # no event_id
        json.dumps({"event_id": "x1", "event_time_ms": base, "value": 1}),  # no key
        json.dumps({"event_id": "x2", "key": "k", "value": 1}),  # no event time
        json.dumps({"event_id": "x3", "key": "k", "event_time_ms": "yesterday", "value": 1}),
        json.dumps({"event_id": "x4", "key": "k", "event_time_ms": -5, "value": 1}),
        json.dumps(
            {"event_id": "x5", "key": "k", "event_time_ms": 4_102_444_800_000, "value": 1}
        ),  # year 2100
        json.dumps(
            {"event_id": "x6", "key": "k", "event_time_ms": base, "arrival_time_ms": "soon", "value": 1}
        ),
        json.dumps({"event_id": "x7", "key": "k", "event_time_ms": base, "value": "many"}),
        json.dumps({"event_id": "x8", "key": "k", "event_time_ms": base}),  # no value
        json.dumps({"event_id": "x9", "key": "k" * 1_100_000, "event_time_ms": base, "value": 1}),
        "{" + "x" * 2_000_000,  # a huge malformed line
        json.dumps({"event_id": None, "key": "k", "event_time_ms": base, "value": 1}),  # null id
        json.dumps(
            {
                "event_id": "ok-iso",
                "key": "k",
                "partition": "p",
                "event_time_ms": "2020-09-13T12:26:40Z",
                "arrival_time_ms": base + 600,
                "value": 2.5,
            }
        ),
    ]
    write_lines(tmp_path / "in" / "a.json", lines[:30])
    write_lines(tmp_path / "in" / "b.json", lines[30:])
    sink, reports = run(
        spark, tmp_path, tmp_path / "in", config(params={"delay_ms": 0, "period_ms": 10}), flush_at_end=True
    )
    quarantine = sink.read("quarantine").to_pylist()
    reasons = sorted(r["reason"] for r in quarantine)
    assert reasons == sorted(
        [
            "malformed_json",
            "malformed_json",
            "missing_event_id",
            "missing_key",
            "missing_event_time",
            "bad_event_time",
            "event_time_before_1970",
            "event_time_in_future",
            "bad_arrival_time",
            "bad_value",
            "missing_value",
            "record_too_long",
            "missing_event_id",
        ]
    )
    assert set(reasons) <= set(QUARANTINE_REASONS)
    assert all(r["raw"] is not None and r["file"].endswith(".json") for r in quarantine)
    # A JSON record with a field of the wrong type keeps its line as it was.
    by_reason = {r["reason"]: r for r in quarantine}
    assert json.loads(by_reason["bad_event_time"]["raw"])["event_time_ms"] == "yesterday"
    # Conservation: 51 valid rows are each in exactly one aggregate count or in late_events.
    agg = sink.read("aggregates")
    late = sink.read("late_events")
    assert int(np.sum(agg.column("count").to_numpy())) + late.num_rows == 51
    assert sum(r.quarantined for r in reports) == 13
    # The blank line is not a record (JSON Lines); records are numbered from 0 in their file.
    where = {r["reason"]: (r["file"].rsplit("/", 1)[-1], r["line"]) for r in quarantine}
    assert where["malformed_json"][0] == "b.json" and where["missing_key"] == ("b.json", 22)


#: The real stream's run that two tests read: 1,000 records in 4 landing files of 250, one file a trigger.
REAL_RECORDS, REAL_PARAMS = 1_000, {"delay_ms": 100, "period_ms": 50}


@pytest.fixture(scope="module")
def four_batches(spark_sessions, tmp_path_factory):
    """The job's run on the real stream in 4 micro-batches of 250 (the stage's state carried across three
    batch boundaries), computed once per module: (tables, reports, landing folder). The stream's late rows
    (14 with these settings) all fall in its first 750 records, so more records add batches, not cases."""
    tmp = tmp_path_factory.mktemp("four-batches")
    feed(iot_records(REAL_RECORDS), tmp / "in", rows_per_file=250)
    cfg = config(params=REAL_PARAMS)
    sink, reports = run(
        spark_sessions.get(), tmp, tmp / "in", cfg, max_files_per_trigger=1, flush_at_end=True
    )
    return sink, reports, tmp / "in"


def test_job_matches_the_library_replay_on_a_real_stream(four_batches):
    records = iot_records(REAL_RECORDS)
    params = REAL_PARAMS
    sink, reports, _ = four_batches
    assert len(reports) == 4
    expected = replay(
        records.column("event_time_ms").to_numpy(),
        records.column("arrival_time_ms").to_numpy(),
        strategy="periodic",
        params=params,
        window=WindowSpec(1_000),
        partition=np.asarray(records.column("partition").to_pylist(), dtype=object),
        key=np.asarray(records.column("key").to_pylist(), dtype=object),
    )
    ids = np.asarray(records.column("event_id").to_pylist(), dtype=object)
    late = sink.read("late_events")
    assert sorted(late.column("event_id").to_pylist()) == sorted(ids[expected.late_rows].tolist())
    assert late.num_rows > 0
    agg = sink.read("aggregates").to_pylist()
    got = {(r["key"], r["window_start_ms"]): (r["count"], r["trigger_watermark_ms"]) for r in agg}
    w = expected.windows
    want = {
        (expected.keys[k], int(s)): (int(c), int(t) if f else None)
        # The job dates a window at the instant the batch's timeline reaches its end (a periodic timer
        # between arrivals included): the replay's fire_wm_ms, the one time convention.
        for k, s, c, f, t in zip(w.key, w.start_ms, w.count, w.fired, w.fire_wm_ms, strict=True)
    }
    assert got == want


PROCESSING_TIME = {"emitted_at_ms", "processed_at_ms", "ingested_at_ms", "batch_id", "file", "line"}


def stable(table: pa.Table, order):
    keep = [c for c in table.schema.names if c not in PROCESSING_TIME]
    return table.select(keep).sort_by([(c, "ascending") for c in order]).to_pylist()


def test_tables_do_not_depend_on_how_the_input_is_cut_into_batches(spark, tmp_path, four_batches):
    # the four batches of the module's run against one, 14 late rows among the 1,000 (the stream's late rows
    # are in its first 750); the library's cuts of every strategy:
    # tests/unit/watermark/strategies/test_contract.py
    one, rep_one, inp = four_batches
    all_, rep_all = run(spark, tmp_path / "all", inp, config(params=REAL_PARAMS), flush_at_end=True)
    assert len(rep_one) == 4 and len(rep_all) == 1
    assert one.read("late_events").num_rows > 0  # the comparison is not vacuous
    assert stable(one.read("aggregates"), ["window_start_ms", "key"]) == stable(
        all_.read("aggregates"), ["window_start_ms", "key"]
    )
    assert stable(one.read("late_events"), ["event_id"]) == stable(all_.read("late_events"), ["event_id"])


def test_a_new_configuration_version_applies_at_a_batch_boundary_without_restart(spark, tmp_path):
    import threading

    from jobs.stream.run import run_job
    from watermark.config import load_config, write_config

    records = iot_records(2_000)
    inp = tmp_path / "in"
    feed(records.slice(0, 1_000), inp, rows_per_file=500)
    cfg_path = tmp_path / "watermark.json"
    write_config(cfg_path, config(params={"delay_ms": 100}))
    opts = folder_job(
        tmp_path,
        load_config(cfg_path),
        config_path=str(cfg_path),
        trigger="interval=500 milliseconds",
        max_files_per_trigger=1,
    )
    worker = threading.Thread(target=run_job, args=(spark, opts), daemon=True)
    worker.start()
    stage = tmp_path / "ck" / "stage"

    def wait_for(predicate):
        # no deadline of its own (the test's timeout ends a hang): the job must keep running meanwhile
        while not predicate():
            assert worker.is_alive(), "the streaming job ended"
            time.sleep(0.2)

    wait_for(lambda: (stage / "state-000000000001").exists())
    write_config(cfg_path, config("adaptive", {"warmup": 100, "heartbeat_ms": 200}, version=2))
    feed(records.slice(1_000, 1_000), inp, rows_per_file=500)
    wait_for(lambda: (stage / "state-000000000003").exists())
    for query in spark.streams.active:
        query.stop()
    worker.join(timeout=60)

    log = DeltaTables(opts.output, "r").read("watermark_log").to_pylist()
    versions = {row["batch_id"]: (row["config_version"], row["strategy"]) for row in log}
    assert versions[0] == (1, "periodic") and versions[1] == (1, "periodic")
    assert versions[3] == (2, "adaptive")


#: The records the CSV and Parquet landing files hold, and the job's settings for them and for JSON.
FORMAT_RECORDS, FORMAT_PARAMS = 1_000, {"delay_ms": 200}


@pytest.fixture(scope="module")
def json_tables(spark_sessions, tmp_path_factory):
    """The JSON landing files' tables, the reference of both formats' runs (computed once per module)."""
    tmp = tmp_path_factory.mktemp("json-reference")
    feed(iot_records(FORMAT_RECORDS), tmp / "json", rows_per_file=500)
    want, _ = run(
        spark_sessions.get(), tmp / "a", tmp / "json", config(params=FORMAT_PARAMS), flush_at_end=True
    )
    return want


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_csv_and_parquet_landing_files_give_the_same_tables_as_json(spark, tmp_path, json_tables, fmt):
    records = iot_records(FORMAT_RECORDS)
    feed(records, tmp_path / fmt, rows_per_file=500, fmt=fmt)
    cfg = config(params=FORMAT_PARAMS)
    want = json_tables
    got, reports = run(spark, tmp_path / "b", tmp_path / fmt, cfg, flush_at_end=True, format=fmt)
    assert sum(r.rows for r in reports) == FORMAT_RECORDS
    assert stable(got.read("aggregates"), ["window_start_ms", "key"]) == stable(
        want.read("aggregates"), ["window_start_ms", "key"]
    )
    late = got.read("late_events")
    assert late.num_rows > 0
    assert stable(late, ["event_id"]) == stable(want.read("late_events"), ["event_id"])
    assert all(path.endswith(f".{fmt}") for path in late.column("file").to_pylist())


def test_a_malformed_csv_row_is_quarantined_and_the_others_counted(spark, tmp_path):
    base = 1_600_000_000_000
    header = "event_id,key,partition,event_time_ms,arrival_time_ms,value"
    rows = [f"{i},k,p,{base + 10 * i},{base + 10 * i + 5},1.5" for i in range(20)]
    rows.insert(7, "7x,k,p")  # too few columns
    rows.insert(9, f"9x,k,p,{base},{base},lots")  # a value that is not a number
    write_lines(tmp_path / "in" / "a.csv", [header, *rows])
    sink, _ = run(
        spark, tmp_path, tmp_path / "in", config(params={"delay_ms": 0}), flush_at_end=True, format="csv"
    )
    quarantine = {r["reason"]: r for r in sink.read("quarantine").to_pylist()}
    assert set(quarantine) == {"malformed_csv", "bad_value"}
    assert quarantine["malformed_csv"]["raw"] == "7x,k,p" and quarantine["malformed_csv"]["line"] == 7
    agg, late = sink.read("aggregates"), sink.read("late_events")
    assert int(np.sum(agg.column("count").to_numpy())) + late.num_rows == 20


def test_the_rate_source_runs_a_bounded_load_test_and_accounts_for_every_row(spark, tmp_path):
    from jobs.stream.options import RateOptions

    sink, reports = run(
        spark,
        tmp_path,
        "",
        config(params={"delay_ms": 500, "period_ms": 100}),
        format="rate",
        rate=RateOptions(rows_per_second=2_000, keys=50, partitions=4, max_delay_ms=1_000),
        trigger="interval=1s",
        max_batches=3,
        flush_at_end=True,
    )
    assert len(reports) >= 3
    rows = sum(r.rows for r in reports)
    assert rows > 0 and sum(r.quarantined for r in reports) == 0
    agg, late = sink.read("aggregates"), sink.read("late_events")
    assert int(np.sum(agg.column("count").to_numpy())) + late.num_rows == rows
    assert set(sink.read("watermark_log").column("partition").to_pylist()) == {"0", "1", "2", "3"}


def test_after_a_flush_a_later_run_treats_the_flushed_windows_as_closed(spark, tmp_path):
    base = 1_600_000_000_000
    first = [good(i, base + 100 * i, base + 100 * i) for i in range(30)]  # windows up to base + 3 s
    write_lines(tmp_path / "in" / "a.json", first)
    cfg = config(params={"delay_ms": 10_000, "period_ms": 10})  # nothing closes by the watermark
    sink, _ = run(spark, tmp_path, tmp_path / "in", cfg, flush_at_end=True)
    flushed = sink.read("aggregates")
    assert all(flushed.column("flushed").to_pylist()) and sum(flushed.column("count").to_pylist()) == 30
    # More data, some of it for the flushed windows: late, not a second row for the same window.
    more = [good(100 + i, base + 500 + i, base + 4_000 + i) for i in range(5)]
    more += [good(200 + i, base + 5_000 + i, base + 5_000 + i) for i in range(5)]
    write_lines(tmp_path / "in" / "b.json", more)
    sink, _ = run(spark, tmp_path, tmp_path / "in", cfg, flush_at_end=True)
    agg = sink.read("aggregates")
    windows = [(r["key"], r["window_start_ms"]) for r in agg.to_pylist()]
    assert len(windows) == len(set(windows))
    late = sink.read("late_events")
    assert sorted(late.column("event_id").to_pylist()) == [str(100 + i) for i in range(5)]
    assert min(late.column("watermark_ms").to_pylist()) == base + 3_000
    assert sum(agg.column("count").to_pylist()) + late.num_rows == 40


def test_a_run_killed_while_writing_its_first_offset_restarts(spark, tmp_path):
    write_lines(
        tmp_path / "in" / "a.json", [good(i, 1_600_000_000_000 + i, 1_600_000_000_000 + i) for i in range(5)]
    )
    offsets = tmp_path / "ck" / "query" / "offsets"
    offsets.mkdir(parents=True)
    # What a SIGKILL between Spark's temporary write and its rename leaves behind.
    (offsets / ".0.ff0cd3d8-0c52-4998-916c-7d380c48d2c0.tmp").write_text("")
    (offsets / "..0.ff0cd3d8-0c52-4998-916c-7d380c48d2c0.tmp.crc").write_text("")
    sink, reports = run(spark, tmp_path, tmp_path / "in", config(), flush_at_end=True)
    assert sum(r.rows for r in reports) == 5
    assert sum(sink.read("aggregates").column("count").to_pylist()) + sink.read("late_events").num_rows == 5


@pytest.mark.parametrize("strategy", ["periodic", "ingestion"])
def test_the_late_expression_selects_exactly_the_stage_late_rows_with_tied_arrival_times(spark, strategy):
    from jobs.stream.stage.driver import run_stage
    from jobs.stream.stage.labelling import late_expression
    from watermark.partitions.combine import PartitionedWatermark

    rng = np.random.default_rng(5)
    n = 3_000
    tp = np.sort(rng.integers(0, 3_000, n)).astype(np.int64)  # about one tie per row: struct comparisons
    te = tp - rng.integers(0, 400, n)
    rows = pa.table(
        {
            "partition": rng.choice(["a", "b"], n).tolist(),
            "event_time_ms": te,
            "arrival_time_ms": tp,
            "file": pa.array(rng.integers(0, 3, n), pa.int32()),
            "line": rng.permutation(n).astype(np.int64),
        }
    )
    # periodic moves the watermark at ticks (a new arrival time), ingestion at any row (often a tie).
    params = {"delay_ms": 100, "period_ms": 50} if strategy == "periodic" else {"max_event_time_lag_ms": 100}
    result = run_stage(PartitionedWatermark(strategy, params), rows, straggler_ms=0)
    assert 0 < result.n_late < n
    expr = late_expression(rows, result.order, result.late, te, result.wm_at_arrival)
    assert expr is not None
    picked = spark.createDataFrame(rows.to_pandas()).filter(expr).select("line").toArrow()
    expected = rows.column("line").filter(result.late).to_pylist()
    assert sorted(picked.column("line").to_pylist()) == sorted(expected)


def arrow_input(tmp_path):
    """Clean JSON files with tied arrival times, several partitions and non-integral values."""
    rng = np.random.default_rng(11)
    base = 1_700_000_000_000
    for f in range(4):
        lines = []
        for i in range(400):
            tp = base + f * 2_000 + (i // 4) * 20  # four rows per arrival time
            lines.append(
                json.dumps(
                    {
                        "event_id": f"{f}-{i}",
                        "key": f"k{int(rng.integers(0, 5))}",
                        "partition": f"p{i % 3}",
                        "event_time_ms": int(tp - rng.integers(0, 900 if rng.random() < 0.9 else 4_000)),
                        "arrival_time_ms": tp,
                        "value": float(rng.integers(0, 1_000)) / 8,
                    }
                )
            )
        write_lines(tmp_path / "in" / f"part-{f:02d}.json", lines)
    return tmp_path / "in"


#: The settings of the Arrow path's comparisons with Spark's reader, per strategy.
ARROW_PARAMS = {
    "periodic": {"delay_ms": 300, "period_ms": 50},
    "adaptive": {"warmup": 50, "heartbeat_ms": 100, "skew": "mean"},
}


@pytest.fixture(scope="module")
def spark_reader_periodic(spark_sessions, tmp_path_factory):
    """Spark's reader on :func:`arrow_input` under ``periodic``, two files a trigger: the reference of the
    Arrow path's run and of the mixed run (computed once per module): (tables, reports)."""
    tmp = tmp_path_factory.mktemp("spark-reader")
    cfg = config("periodic", ARROW_PARAMS["periodic"])
    kw = {"max_files_per_trigger": 2, "flush_at_end": True}
    return run(spark_sessions.get(), tmp / "spark", arrow_input(tmp), cfg, reader="spark", **kw)


@pytest.mark.parametrize("strategy", ["periodic", "adaptive"])
def test_the_arrow_path_gives_the_tables_of_spark_reader(spark, tmp_path, strategy, request):
    inp = arrow_input(tmp_path)
    cfg = config(strategy, ARROW_PARAMS[strategy])
    kw = {"max_files_per_trigger": 2, "flush_at_end": True}
    arrow, rep_arrow = run(spark, tmp_path / "arrow", inp, cfg, **kw)
    if strategy == "periodic":
        plain, rep_plain = request.getfixturevalue("spark_reader_periodic")
    else:
        plain, rep_plain = run(spark, tmp_path / "spark", inp, cfg, reader="spark", **kw)
    assert [r.path for r in rep_arrow] == ["arrow", "arrow"]
    assert [r.path for r in rep_plain] == ["spark", "spark"]
    assert sum(r.late for r in rep_arrow) > 0
    for table, order in [
        ("aggregates", ["window_start_ms", "key"]),
        ("late_events", ["event_id"]),
        ("watermark_log", ["partition", "global_watermark_ms", "partition_watermark_ms", "events", "late"]),
        ("quarantine", ["raw"]),
    ]:
        assert stable(arrow.read(table), order) == stable(plain.read(table), order), table

    # Record numbers are the same too (the stable comparison leaves file and line out); the runs' landing
    # folders differ, their files' names do not.
    def record_keys(sink):
        rows = sink.read("late_events").select(["event_id", "file", "line"]).sort_by("event_id").to_pylist()
        return [(r["event_id"], r["file"].rsplit("/", 1)[-1], r["line"]) for r in rows]

    assert record_keys(arrow) == record_keys(plain)


def test_a_batch_with_a_record_to_judge_is_read_by_spark_and_the_others_by_arrow(
    spark, tmp_path, spark_reader_periodic
):
    inp = arrow_input(tmp_path)
    bad = inp / "part-01.json"
    stamp = bad.stat()
    bad.write_text(bad.read_text() + '{"event_id": "x", "key": "k", "event_time_ms": "soon"}\n')
    os.utime(bad, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # keep the files' order
    cfg = config("periodic", ARROW_PARAMS["periodic"])
    mixed, reports = run(spark, tmp_path / "mixed", inp, cfg, max_files_per_trigger=1, flush_at_end=True)
    # The reference: Spark's reader on the same records without the bad line, two files a trigger (the
    # tables do not depend on the cut; a quarantined record moves no clock).
    plain, _ = spark_reader_periodic
    assert [r.path for r in reports] == ["arrow", "spark", "arrow", "arrow"]
    quarantine = mixed.read("quarantine").to_pylist()
    assert [(q["reason"], q["line"]) for q in quarantine] == [("bad_event_time", 400)]
    for table, order in [("aggregates", ["window_start_ms", "key"]), ("late_events", ["event_id"])]:
        assert stable(mixed.read(table), order) == stable(plain.read(table), order), table


def test_a_checkpoint_reset_against_existing_tables_is_refused_by_the_job(spark, tmp_path):
    inp = tmp_path / "in"
    write_lines(inp / "a.json", [good(i, 1_000 * i, 1_000 * i + 5) for i in range(20)])
    opts = dict(input=str(inp), output=str(tmp_path / "out"), config=config(), progress=False)
    run_job(spark, JobOptions(checkpoint=str(tmp_path / "ck"), **opts))
    before = DeltaTables(str(tmp_path / "out"), "reader").read("arrivals").num_rows
    with pytest.raises(ValueError, match="new checkpoint"):
        run_job(spark, JobOptions(checkpoint=str(tmp_path / "ck-reset"), **opts))
    assert DeltaTables(str(tmp_path / "out"), "reader").read("arrivals").num_rows == before == 20


def test_an_arrival_time_in_the_year_10000_is_quarantined_and_windows_go_on_firing(spark, tmp_path):
    base = 1_600_000_000_000
    year_10000 = 253_402_300_800_000
    first = [good(i, base + 100 * i, base + 100 * i + 5) for i in range(30)]
    bad = json.dumps(
        {"event_id": "far", "key": "k", "event_time_ms": base, "arrival_time_ms": year_10000, "value": 1}
    )
    later = [good(100 + i, base + 3_000 + 100 * i, base + 3_000 + 100 * i + 5) for i in range(30)]
    write_lines(tmp_path / "in" / "a.json", [*first, bad])
    write_lines(tmp_path / "in" / "b.json", later)
    cfg = config(params={"delay_ms": 0, "period_ms": 10})
    sink, reports = run(spark, tmp_path, tmp_path / "in", cfg, max_files_per_trigger=1)
    assert [r["reason"] for r in sink.read("quarantine").to_pylist()] == ["arrival_time_in_future"]
    assert reports[-1].fired > 0  # the ingestion clock was not moved: the second file's windows fire
    assert reports[-1].watermark_ms < year_10000
