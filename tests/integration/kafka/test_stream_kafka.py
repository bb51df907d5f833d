"""The streaming job reading Kafka (a real local broker): replay parity, conservation and bad input.

The partition-scoped mode (batch cuts, the stage in the executors) is ``test_stream_kafka_scoped.py``:
apart, so that the suite's workers run the two at once.
"""

import json
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest

from jobs.common.tables import DeltaTables
from jobs.stream.options import KafkaOptions
from jobs.stream.run import run_job
from tests.integration.spark.test_stream import iot_records
from tests.landing import folder_job
from tools.feed.kafka import feed_kafka, kafka_partition_map
from watermark.config import PipelineConfig
from watermark.evaluation.replay import WindowSpec, replay

pytestmark = pytest.mark.slow

PARTITIONS = 4
PARAMS = {"delay_ms": 100, "period_ms": 50}


def run_kafka(spark, tmp, servers, topic, mode="min", stage_in="auto", **kw):
    cfg = PipelineConfig.from_dict(
        # no idle timeout (the library replay it is compared with has none)
        {"version": 1, "strategy": "periodic", "params": PARAMS, "window_ms": 1_000, "partition_mode": mode}
        | {"idle_timeout_ms": None}
    )
    opts = folder_job(
        tmp,
        cfg,
        input="",
        format="kafka",
        kafka=KafkaOptions(bootstrap_servers=servers, topic=topic, **kw),
        flush_at_end=True,
        stage_in=stage_in,
    )
    reports = run_job(spark, opts)
    return DeltaTables(opts.output, "test-reader"), reports


def produce_raw(servers, topic, values, partition, timestamp_ms):
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": servers, "message.max.bytes": 8_000_000})
    for value in values:
        producer.produce(topic, value=value, partition=partition, timestamp=timestamp_ms)
    assert producer.flush() == 0  # every record delivered (however long a busy broker takes)


@pytest.fixture(scope="module")
def iot_run(spark_sessions, tmp_path_factory, kafka_broker):
    """One run of the job (one micro-batch) over a 4-partition topic of IoT records with bad values at the
    end of partition 2: its tables as they were after the run (the replay, quarantine and conservation test
    reads them), its topic and its checkpoint (the restart test feeds the topic more and resumes from it)."""
    spark = spark_sessions.get()  # the session of the tests (a fixture of the module's scope)
    tmp = tmp_path_factory.mktemp("kafka-iot")
    servers = kafka_broker.bootstrap_servers
    records = iot_records(RUN_RECORDS)
    topic = "iot"
    kafka_broker.create_topic(topic, PARTITIONS)
    feed_kafka(records, servers, topic, partitions=PARTITIONS)
    base = int(records.column("arrival_time_ms").to_numpy().max()) + 1
    bad = [
        b"{not json",  # not JSON
        json.dumps({"event_id": "x1", "event_time_ms": base, "value": 1}).encode(),  # no key
        json.dumps({"event_id": "x2", "key": "k", "event_time_ms": -5, "value": 1}).encode(),  # negative
        json.dumps({"event_id": "x3", "key": "k" * 2_000_000, "event_time_ms": base, "value": 1}).encode(),
        b'{"event_id": "x4", "key": "a\xffb", "event_time_ms": %d, "value": 1}' % base,  # not UTF-8
    ]
    produce_raw(servers, topic, bad, partition=2, timestamp_ms=base)
    # One micro-batch: a batch cut by offsets (--max-offsets-per-trigger) ends each partition at another
    # time, so the job then sees the stream in batch order, not in global timestamp order.
    sink, reports = run_kafka(spark, tmp, servers, topic)
    tables = {name: sink.read(name) for name in ("quarantine", "late_events", "aggregates", "arrivals")}
    return SimpleNamespace(tmp=tmp, topic=topic, records=records, base=base, tables=tables, reports=reports)


#: The records of :func:`iot_run`'s topic; the restart test feeds it the next RESUME_RECORDS of the sample.
RUN_RECORDS, RESUME_RECORDS = 2_000, 200


def test_a_kafka_topic_gives_the_library_replay_and_bad_values_are_quarantined(iot_run):
    records, base, tables = iot_run.records, iot_run.base, iot_run.tables
    assert len(iot_run.reports) == 1

    # Quarantine: every bad value, with its reason, topic/partition and offset.
    quarantine = tables["quarantine"].sort_by("line").to_pylist()
    assert [(q["reason"], q["file"]) for q in quarantine] == [
        ("malformed_json", "iot/2"),
        ("missing_key", "iot/2"),
        ("event_time_before_1970", "iot/2"),
        ("record_too_long", "iot/2"),
        ("bad_encoding", "iot/2"),
    ]
    fed_to_2 = sum(1 for p in kafka_partition_map(records.column("partition"), PARTITIONS).values() if p == 2)
    offsets = [q["line"] for q in quarantine]
    assert offsets == list(range(offsets[0], offsets[0] + 5)) and (fed_to_2 == 0 or offsets[0] > 0)
    assert quarantine[0]["raw"] == "{not json"  # a value that is not JSON is kept as it was
    assert len(quarantine[3]["raw"].encode()) < 1_100  # the 2 MB record is kept as its first KiB
    # Not UTF-8: kept with U+FFFD for the bad byte.
    assert (
        quarantine[4]["raw"]
        == f'{{"event_id": "x4", "key": "a\ufffdb", "event_time_ms": {base}, "value": 1}}'
    )

    # Replay parity: the library, fed in the job's arrival order (record timestamp, Kafka partition,
    # offset) with the Kafka partition as the watermark partition, gives the same late rows and windows.
    mapping = kafka_partition_map(records.column("partition"), PARTITIONS)
    kpart = np.array([mapping[p] for p in records.column("partition").to_pylist()])
    tp = records.column("arrival_time_ms").to_numpy()
    order = np.lexsort((np.arange(len(tp)), kpart, tp))
    te = records.column("event_time_ms").to_numpy()[order]
    expected = replay(
        te,
        tp[order],
        strategy="periodic",
        params=PARAMS,
        window=WindowSpec(1_000),
        partition=kpart[order].astype(str).astype(object),
        key=np.asarray(records.column("key").to_pylist(), dtype=object)[order],
    )
    ids = np.asarray(records.column("event_id").to_pylist(), dtype=object)[order]
    late = tables["late_events"]
    assert sorted(late.column("event_id").to_pylist()) == sorted(ids[expected.late_rows].tolist())
    assert late.num_rows > 0
    assert set(late.column("partition").to_pylist()) <= {str(p) for p in range(PARTITIONS)}

    # Conservation: every valid record is in a window's count or in late_events (windows flushed at the end).
    agg = tables["aggregates"]
    assert int(np.sum(agg.column("count").to_numpy())) + late.num_rows == records.num_rows
    got = {(r["key"], r["window_start_ms"]): r["count"] for r in agg.to_pylist()}
    w = expected.windows
    want = {(expected.keys[k], int(s)): int(c) for k, s, c in zip(w.key, w.start_ms, w.count, strict=True)}
    assert got == want
    arrivals = tables["arrivals"]
    assert arrivals.num_rows == records.num_rows
    assert sorted(arrivals.column("arrival_time_ms").to_pylist()) == sorted(tp.tolist())


def test_a_restarted_kafka_query_resumes_from_its_checkpoint_offsets(spark, iot_run, kafka_broker):
    # The job again on iot_run's checkpoint, after more records came to its topic: it reads the new ones
    # only, in a batch after the first run's.
    servers = kafka_broker.bootstrap_servers
    more = iot_records(RUN_RECORDS + RESUME_RECORDS).slice(RUN_RECORDS)  # the sample's next records
    feed_kafka(more, servers, iot_run.topic, partitions=PARTITIONS)
    again, _ = run_kafka(spark, iot_run.tmp, servers, iot_run.topic)
    arrivals = again.read("arrivals")
    # each record read once across the two runs
    assert (
        arrivals.num_rows
        == iot_run.tables["arrivals"].num_rows + more.num_rows
        == RUN_RECORDS + RESUME_RECORDS
    )
    assert pa.compute.max(arrivals.column("batch_id")).as_py() >= 1


@pytest.mark.parametrize("stage_in", ["auto", "driver"])
def test_on_the_wall_clock_a_window_fires_on_the_triggers_timer_when_no_record_comes(
    spark, tmp_path, kafka_broker, stage_in
):
    # Records stamped with the wall clock (as LogAppendTime stamps them) into a running query, then
    # silence. On the arrival clock nothing after them would move the watermark, so their windows would
    # wait for the next record; on the wall clock the timer source makes every trigger a batch, the clock
    # moves to each batch's boundary, and the ingestion watermark passes the windows' ends about lag +
    # idle time after the records.
    import threading
    import time

    servers = kafka_broker.bootstrap_servers
    topic = f"wall-{stage_in}"
    kafka_broker.create_topic(topic, 2)
    lag_ms, idle_ms, margin_ms = 500, 200, 100
    cfg = PipelineConfig.from_dict(
        {
            "version": 1,
            "strategy": "ingestion",
            "params": {"max_event_time_lag_ms": lag_ms, "max_watermark_lag_ms": idle_ms},
            "window_ms": 1_000,
            "partition_mode": "scoped",
            "idle_timeout_ms": None,
        }
    )
    opts = folder_job(
        tmp_path,
        cfg,
        input="",
        format="kafka",
        kafka=KafkaOptions(bootstrap_servers=servers, topic=topic),
        stage_in=stage_in,
        clock="wall",
        clock_margin_ms=margin_ms,
        trigger="interval=500 milliseconds",
        # every trigger is a batch (the timer source), records or not: the windows' ends + lag + idle time
        # + margin are at most 4 triggers of 500 ms after the records (fewer when batches take longer)
        max_batches=10,
    )
    reports: list = []
    worker = threading.Thread(target=lambda: reports.extend(run_job(spark, opts)), daemon=True)
    worker.start()
    commits = tmp_path / "ck" / "query" / "commits"
    while not (commits.exists() and len(list(commits.glob("[0-9]*"))) >= 2):  # two batches of timer rows
        assert worker.is_alive(), "the query ended before its second batch"
        time.sleep(0.2)
    now = int(time.time() * 1000)
    events = [
        json.dumps({"event_id": f"e{i}", "key": f"k{i % 2}", "event_time_ms": now - 100 + i, "value": i})
        for i in range(10)
    ]
    for partition in (0, 1):
        produce_raw(servers, topic, [e.encode() for e in events[partition::2]], partition, now)
    worker.join()  # the query stops after its 10 batches (a hang: the test's timeout)
    assert len(reports) == 10
    assert reports[0].rows == 0 and sum(r.rows for r in reports) == 10  # timer rows are no records
    assert reports[-1].stage_in == ("executors" if stage_in == "auto" else "driver")
    fired = DeltaTables(opts.output, "test-reader").read("aggregates").to_pylist()
    window_ends = {(now - 100 + i) // 1_000 * 1_000 + 1_000 for i in range(10)}
    assert {r["window_end_ms"] for r in fired} == window_ends
    assert sum(r["count"] for r in fired) == 10 and not any(r["flushed"] for r in fired)
    watermarks = {r.batch_id: r.watermark_ms for r in reports}
    for r in fired:
        # Fired by time at a batch boundary after the records (no arrival came after them), in the first
        # batch whose watermark (boundary - 1 - lag, once idle) reached the window's end. Checked on the job's
        # own clock, its batches: how long they take on a busy machine moves the boundaries, not this.
        assert r["fire_arrival_ms"] > now
        assert r["trigger_watermark_ms"] >= r["window_end_ms"]
        batch = r["batch_id"]
        assert watermarks[batch] >= r["window_end_ms"] > watermarks[batch - 1], (r, watermarks)
        assert r["emit_latency_ms"] > lag_ms  # the watermark trails the clock by the lag
