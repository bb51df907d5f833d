"""Issue 29, items 10 and 11 (part), on the job: one record far ahead of its own arrival time is quarantined
(``event_time_ahead_of_arrival``) instead of making its partition's later records late, on every read path;
a line too long to read whole is quarantined (``record_too_long``) and the file's other records are read.
The rules without Spark: tests/unit/jobs/stream/sources/test_record_bounds.py."""

import json

import numpy as np
import pytest

from jobs.common.tables import DeltaTables
from jobs.stream.options import Fields
from jobs.stream.run import run_job
from jobs.stream.sources.validate import CORRUPT, SOURCE_COLUMNS, typed_json_schema, validate
from tests.integration.spark.test_source_hardening import land, read
from tests.landing import folder_job
from tests.samples import BASE_MS as BASE
from watermark.config import PipelineConfig

HOUR = 3_600_000


def periodic():
    return PipelineConfig.from_dict(
        {"version": 1, "strategy": "periodic", "params": {"delay_ms": 0, "period_ms": 10}, "window_ms": 1_000}
    )


def record(i, ahead_ms=0):
    """The partition's i-th record, in order, 5 ms after its event; ``ahead_ms`` moves its event time."""
    return {
        "event_id": f"e{i}",
        "key": "k",
        "partition": "p",
        "event_time_ms": BASE + 10 * i + ahead_ms,
        "arrival_time_ms": BASE + 10 * i + 5,
        "value": 1.0,
    }


def run(spark, tmp, **kw):
    opts = folder_job(tmp, periodic(), flush_at_end=True, **kw)
    reports = run_job(spark, opts)
    return DeltaTables(opts.output, "test-reader"), reports


@pytest.mark.parametrize("reader", ["arrow", "spark"])
def test_one_record_23_hours_ahead_is_quarantined_and_the_partition_s_later_records_are_on_time(
    spark, tmp_path, reader
):
    # Within the future bound (a day), so it used to pass validation: periodic's watermark then jumped 23 h
    # and every one of the partition's 149 later records was late.
    records = [record(i, ahead_ms=23 * HOUR if i == 50 else 0) for i in range(200)]
    land(tmp_path / "in", {"a.json": records})
    tables, reports = run(spark, tmp_path, reader=reader)
    quarantine = read(tables, "quarantine").to_pylist()
    assert [(r["reason"], r["line"]) for r in quarantine] == [("event_time_ahead_of_arrival", 50)]
    assert json.loads(quarantine[0]["raw"])["event_id"] == "e50"
    assert sum(r.late for r in reports) == 0  # it used to be 149
    assert read(tables, "late_events").num_rows == 0
    aggregates = read(tables, "aggregates")
    assert int(np.sum(aggregates.column("count").to_numpy())) == 199
    assert sum(r.quarantined for r in reports) == 1
    assert {r.path for r in reports} == {"spark"}  # the Arrow path passes the batch to Spark's reader


def test_the_skew_bound_is_the_flag_s_and_the_arrival_time_is_the_record_s_own_or_the_ingestion_time(
    spark,
):
    ingest = BASE + 10 * HOUR
    rows = [
        ("f", 0, "a", "k", "p", BASE + 1_000, BASE, 1.0, None),  # 1000 ms ahead: the bound, valid
        ("f", 1, "b", "k", "p", BASE + 1_001, BASE, 1.0, None),  # 1001 ms ahead
        ("f", 2, "c", "k", "p", ingest + 1_000, None, 1.0, None),  # no arrival time: the ingestion time
        ("f", 3, "d", "k", "p", ingest + 1_001, None, 1.0, None),
        ("f", 4, "e", "k", "p", BASE - HOUR, BASE, 1.0, None),  # behind its arrival: any amount
    ]
    schema = "file string, line bigint, event_id string, key string, partition string, "
    schema += f"event_time_ms bigint, arrival_time_ms bigint, value double, {CORRUPT} string"
    frame = spark.createDataFrame(rows, schema)
    common = {"ingest_ms": ingest, "future_bound_ms": 86_400_000, "max_field_bytes": 1_000}
    got = validate(frame, Fields(), max_event_ahead_ms=1_000, **common).collect()
    assert [r["reason"] for r in got] == [
        None,
        "event_time_ahead_of_arrival",
        None,
        "event_time_ahead_of_arrival",
        None,
    ]
    # 0 ms: an event time may equal its arrival time, never pass it
    got = validate(frame, Fields(), max_event_ahead_ms=0, **common).collect()
    assert [r["reason"] for r in got] == ["event_time_ahead_of_arrival"] * 4 + [None]


def test_on_kafka_the_arrival_time_is_the_record_timestamp_not_the_value_s(spark):
    """The Kafka source's records (jobs.stream.sources.kafka_topic.kafka_stream): the value parsed with the
    typed schema, the partition and the record timestamp in :data:`SOURCE_COLUMNS`."""
    from pyspark.sql import functions as F

    ts = BASE
    values = [
        # the value claims an arrival 23 h later; the timestamp, 23 h earlier than the event, is the arrival
        {
            "event_id": "a",
            "key": "k",
            "event_time_ms": ts + 23 * HOUR,
            "arrival_time_ms": ts + 23 * HOUR,
            "value": 1,
        },
        {"event_id": "b", "key": "k", "event_time_ms": ts + 300_000, "value": 1},
    ]
    frame = spark.createDataFrame([(json.dumps(v), i) for i, v in enumerate(values)], "v string, line bigint")
    parsed = F.from_json("v", typed_json_schema(Fields()), {"columnNameOfCorruptRecord": CORRUPT}).alias("r")
    names = list(dict.fromkeys(vars(Fields()).values()))
    records = frame.select(F.lit("t/0").alias("file"), "line", parsed).select(
        "file",
        "line",
        *[F.col(f"r.`{n}`").alias(n) for n in names],
        F.col(f"r.{CORRUPT}").alias(CORRUPT),
        F.lit("0").alias(SOURCE_COLUMNS["partition"]),
        F.lit(ts).cast("bigint").alias(SOURCE_COLUMNS["tp"]),
    )
    got = validate(
        records,
        Fields(),
        ingest_ms=ts + 24 * HOUR,
        future_bound_ms=86_400_000,
        max_field_bytes=1_000,
        reread_corrupt=True,
    ).collect()
    assert [(r["arrival_time_ms"], r["reason"]) for r in got] == [
        (ts, "event_time_ahead_of_arrival"),
        (ts, None),  # 5 minutes ahead: the default bound
    ]


# --------------------------------------------------------------------------------------------------
# Item 11 (part): a line too long to read whole

MIB = 1 << 20


def write_with_long_lines(path, before, after, long_bytes, tail_bytes):
    """``before`` records, a 64 MiB record (a JSON record whose extra field pads it: valid but for its
    length), ``after`` records, and a last line of ``tail_bytes`` without a newline. Streamed to disk."""
    with path.open("wb") as out:
        for i in range(before):
            out.write(json.dumps(record(i)).encode() + b"\n")
        head = json.dumps(record(before))[:-1].encode() + b', "pad": "'
        out.write(head)
        pad = long_bytes - len(head) - 2
        block = b"x" * MIB
        while pad > 0:
            out.write(block[: min(pad, MIB)])
            pad -= MIB
        out.write(b'"}\n')
        for i in range(before + 1, before + 1 + after):
            out.write(json.dumps(record(i)).encode() + b"\n")
        for _ in range(tail_bytes // MIB):
            out.write(block)
    return head


@pytest.mark.parametrize("reader", ["arrow", "spark"])
def test_a_64_mib_line_is_quarantined_as_record_too_long_and_the_file_s_other_records_are_counted(
    spark, tmp_path, reader
):
    """The bound is 4 MiB: neither reader holds a longer line (the Arrow path stops reading it at the bound
    and passes the batch on; the driver's screen reads the file 1 MiB at a time and gives Spark a copy
    with a placeholder in its place: jobs/stream/sources/long_lines.py). Memory is not measured here."""
    (tmp_path / "in").mkdir()
    path = tmp_path / "in" / "a.json"
    head = write_with_long_lines(path, before=30, after=40, long_bytes=64 * MIB, tail_bytes=8 * MIB)
    tables, reports = run(spark, tmp_path, reader=reader, max_record_bytes=4 * MIB)
    quarantine = sorted(read(tables, "quarantine").to_pylist(), key=lambda r: r["line"])
    assert [(r["reason"], r["line"]) for r in quarantine] == [
        ("record_too_long", 30),
        ("record_too_long", 71),
    ]
    first, last = quarantine
    assert first["raw"].startswith(head.decode()) and first["raw"].endswith(f"…[truncated, {64 * MIB} bytes]")
    assert last["raw"] == "x" * 1_024 + f"…[truncated, {8 * MIB} bytes]"
    assert {r["file"] for r in quarantine} == {f"file://{path}"}  # the landing file, not the copy
    aggregates = read(tables, "aggregates")
    late = read(tables, "late_events")
    counted = int(np.sum(aggregates.column("count").to_numpy())) + (late.num_rows if late is not None else 0)
    assert counted == 70  # every other record of the file
    assert sum(r.rows for r in reports) == 72 and sum(r.quarantined for r in reports) == 2
    assert {r.path for r in reports} == {"spark"}
    assert not any((tmp_path / "ck" / "stage" / "screened").glob("batch-*"))  # the copies are removed


def test_a_csv_line_too_long_is_quarantined_too(spark, tmp_path):
    (tmp_path / "in").mkdir()
    path = tmp_path / "in" / "a.csv"
    rows = [f"e{i},k,p,{BASE + 10 * i},{BASE + 10 * i + 5},1" for i in range(6)]
    long_row = "big,k,p,1,1," + "9" * (3 * MIB)
    text = "event_id,key,partition,event_time_ms,arrival_time_ms,value\n" + "\n".join(
        rows[:2] + [long_row] + rows[2:]
    )
    path.write_text(text + "\n")
    tables, reports = run(spark, tmp_path, format="csv", max_record_bytes=MIB)
    quarantine = read(tables, "quarantine").to_pylist()
    assert [(r["reason"], r["line"]) for r in quarantine] == [("record_too_long", 2)]
    assert quarantine[0]["raw"].startswith("big,k,p,1,1,999")
    assert int(np.sum(read(tables, "aggregates").column("count").to_numpy())) == 6


@pytest.mark.parametrize("reader", ["arrow", "spark"])
def test_one_record_arriving_23_hours_ahead_of_ingestion_is_quarantined_and_the_ingestion_clock_stays(
    spark, tmp_path, reader
):
    # Issue 51: live records (arriving now), one of them with its event and arrival times both 23 h ahead.
    # Within the future bound (a day), it used to pass: ingestion's watermark (the arrival clock less the lag)
    # then jumped 23 h and every one of the 149 records after it was late.
    import time

    now = int(time.time() * 1000) - 60_000  # a minute ago: behind the batch's ingestion time
    records = [
        {
            "event_id": f"e{i}",
            "key": "k",
            "partition": "p",
            "event_time_ms": now + 10 * i + (23 * HOUR if i == 50 else 0),
            "arrival_time_ms": now + 10 * i + 5 + (23 * HOUR if i == 50 else 0),
            "value": 1.0,
        }
        for i in range(200)
    ]
    land(tmp_path / "in", {"a.json": records})
    config = PipelineConfig.from_dict(
        {"version": 1, "strategy": "ingestion", "params": {"max_event_time_lag_ms": 100}, "window_ms": 1_000}
    )
    opts = folder_job(tmp_path, config, flush_at_end=True, reader=reader)
    reports = run_job(spark, opts)
    tables = DeltaTables(opts.output, "test-reader")
    quarantine = read(tables, "quarantine").to_pylist()
    assert [(r["reason"], r["line"]) for r in quarantine] == [("arrival_time_in_future", 50)]
    assert sum(r.late for r in reports) == 0  # it used to be 149
    assert int(np.sum(read(tables, "aggregates").column("count").to_numpy())) == 199
