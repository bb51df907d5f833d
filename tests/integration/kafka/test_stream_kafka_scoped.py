"""The streaming job reading Kafka in the partition-scoped mode (a real local broker): a stream cut into any
batches gives identical tables, and the stage in the executors quarantines bad values and settles a key
two partitions claim. (The rest of the job on Kafka: ``test_stream_kafka.py``.)
"""

import json
from types import SimpleNamespace

import numpy as np
import pytest

from tests.integration.kafka.test_stream_kafka import PARAMS, PARTITIONS, produce_raw, run_kafka
from tests.integration.spark.test_stream import iot_records
from tools.feed.kafka import feed_kafka, kafka_partition_map
from watermark.evaluation.replay import WindowSpec, replay

pytestmark = pytest.mark.slow


def comparable(tables):
    """The tables' content without what names the micro-batch (batch ids, ingestion and emission times)."""
    agg = tables.read("aggregates").drop_columns(["batch_id", "emitted_at_ms"]).to_pylist()
    late = tables.read("late_events").select(["event_id", "watermark_ms", "late_by_ms", "file", "line"])
    return sorted(agg, key=lambda r: (r["key"], r["window_start_ms"])), sorted(
        late.to_pylist(), key=lambda r: r["event_id"]
    )


#: The topic's records: the IoT sample's first RECORDS, then at its end a key two partitions claim (SHARED:
#: two rows in partition 1, then two in partition 3, 5 ms later) and two bad values (partition 0).
RECORDS = 1_200
SHARED = [(0, 1, 0), (1, 1, 0), (2, 3, 5), (3, 3, 5)]  # (event id s<i>, Kafka partition, arrival - base)
#: The runs of the module's topic: (name, --max-offsets-per-trigger, stage_in). One batch with the stage in
#: the executors (the default for scoped Kafka), then two different cuts of the same 1,206 offsets (each
#: ending the 4 partitions at other offsets): 410 a batch with the stage in the executors, 450 with the stage
#: on the driver as a peer (3 batches each; each batch costs seconds here, so no more of them).
RUNS = [("whole", None, "auto"), ("cut", 410, "auto"), ("driver", 450, "driver")]


@pytest.fixture(scope="module")
def scoped_runs(spark_sessions, tmp_path_factory, kafka_broker):
    """The job's runs of :data:`RUNS` over one topic: name -> (comparable tables, quarantine, reports,
    arrivals). Both tests of the module read them (three runs of the job, 7 batches in all)."""
    spark = spark_sessions.get()  # the session of the tests (a fixture of the module's scope)
    tmp = tmp_path_factory.mktemp("kafka-scoped")
    servers = kafka_broker.bootstrap_servers
    records = iot_records(RECORDS)
    kafka_broker.create_topic("scoped", PARTITIONS)
    feed_kafka(records, servers, "scoped", partitions=PARTITIONS)
    base = int(records.column("arrival_time_ms").to_numpy().max()) + 1
    te = int(records.column("event_time_ms").to_numpy().max())
    for partition, after in ((1, 0), (3, 5)):
        shared = [
            json.dumps({"event_id": f"s{i}", "key": "shared", "event_time_ms": te + i, "value": 1}).encode()
            for i, p, _ in SHARED
            if p == partition
        ]
        produce_raw(servers, "scoped", shared, partition=partition, timestamp_ms=base + after)
    bad = [b"{not json", json.dumps({"event_id": "x2", "key": "k", "event_time_ms": -5, "value": 1}).encode()]
    produce_raw(servers, "scoped", bad, partition=0, timestamp_ms=base)
    runs = {}
    for name, per_trigger, stage_in in RUNS:
        tables, reports = run_kafka(
            spark,
            tmp / name,
            servers,
            "scoped",
            max_offsets_per_trigger=per_trigger,
            mode="scoped",
            stage_in=stage_in,
        )
        quarantine = sorted(
            (q["reason"], q["file"], q["line"]) for q in tables.read("quarantine").to_pylist()
        )
        runs[name] = (comparable(tables), quarantine, reports, tables.read("arrivals"))
    return SimpleNamespace(records=records, base=base, te=te, runs=runs)


# Three runs of the job, 7 batches in all, made by the first of the tests to run: minutes on a machine under
# load (over pytest-timeout's default 10 seen with 14 batches): a timeout of its own, as the other slow tests
# have.
@pytest.mark.timeout(1_200)
def test_a_scoped_kafka_stream_cut_into_any_batches_gives_identical_tables(scoped_runs):
    # Batches cut by offsets end each partition at a different time. In partition-scoped mode no partition
    # waits for another, so each Kafka partition's decisions depend on its own records only. Each cut must
    # give the one batch's tables.
    runs, records = scoped_runs.runs, scoped_runs.records
    for name, _, stage_in in RUNS:
        expected_site = "driver" if stage_in == "driver" else "executors"
        assert {r.stage_in for r in runs[name][2]} == {expected_site}
    assert len(runs["whole"][2]) == 1 and min(len(runs[name][2]) for name in ("cut", "driver")) >= 3
    whole = runs["whole"][0]
    assert whole[0] and whole[1]  # windows fired and late rows: the comparison is not vacuous
    for name in ("cut", "driver"):
        assert runs[name][0] == whole
        assert runs[name][1] == runs["whole"][1]  # the same bad values quarantined, at the same offsets

    # Replay parity: the library's partition-scoped replay, with the Kafka partition as the partition. The
    # library takes each key to live in one partition: the shared key's rows in partition 3, foreign in the
    # job (late whatever their event time, but moving partition 3's watermark), are its own key there.
    mapping = kafka_partition_map(records.column("partition"), PARTITIONS)
    kpart = np.array(
        [mapping[p] for p in records.column("partition").to_pylist()] + [p for _, p, _ in SHARED]
    )
    te = np.concatenate(
        [records.column("event_time_ms").to_numpy(), [scoped_runs.te + i for i, _, _ in SHARED]]
    )
    tp = np.concatenate(
        [records.column("arrival_time_ms").to_numpy(), [scoped_runs.base + a for *_, a in SHARED]]
    )
    foreign_key = "shared@3"
    keys = records.column("key").to_pylist() + ["shared" if p == 1 else foreign_key for _, p, _ in SHARED]
    expected = replay(
        te,
        tp,
        strategy="periodic",
        params=PARAMS,
        window=WindowSpec(1_000),
        partition=kpart.astype(str).astype(object),
        key=np.asarray(keys, dtype=object),
        partition_mode="scoped",
    )
    ids = np.asarray(records.column("event_id").to_pylist() + [f"s{i}" for i, _, _ in SHARED], dtype=object)
    late_ids = set(ids[expected.order][expected.late_rows].tolist()) | {"s2", "s3"}
    assert sorted(r["event_id"] for r in whole[1]) == sorted(late_ids)
    w = expected.windows
    # A fired window is dated where its owner partition's watermark reached its end: the periodic timer
    # between two arrivals of that partition, not the next arrival (the replay's fire_tp_ms / fire_wm_ms).
    want = {
        (expected.keys[k], int(s)): (int(c), int(wm) if f else None, int(t) if f else None)
        for k, s, c, f, wm, t in zip(
            w.key, w.start_ms, w.count, w.fired, w.fire_wm_ms, w.fire_tp_ms, strict=True
        )
        if expected.keys[k] != foreign_key
    }
    got = {
        (r["key"], r["window_start_ms"]): (r["count"], r["trigger_watermark_ms"], r["fire_arrival_ms"])
        for r in whole[0]
    }
    assert got == want
    assert np.any(w.fire_tp_ms[w.fired] < w.arrival_fire_tp_ms[w.fired])  # timers made a difference


@pytest.mark.timeout(1_200)
def test_the_stage_in_the_executors_quarantines_bad_values_and_settles_a_key_two_partitions_claim(
    scoped_runs,
):
    # The executor path (the default for a scoped Kafka stream) on one batch with bad values and a key that
    # first arrives in two partitions at once (in the same batch), against the driver path on the same
    # records: only the partition of its first arrival owns it, the other partition's rows of it are late
    # (foreign), and nothing else differs. The driver path's run is cut in batches; the shared key's rows
    # are in one of them, so that it settles the claim of two partitions in one batch too.
    runs, base = scoped_runs.runs, scoped_runs.base
    executors, driver = runs["whole"], runs["driver"]
    assert len(executors[2]) == 1 and {r.stage_in for r in executors[2]} == {"executors"}
    assert {r.stage_in for r in driver[2]} == {"driver"}
    for name in ("whole", "driver"):
        arrivals = runs[name][3]
        shared_batches = {r["batch_id"] for r in arrivals.to_pylist() if r["arrival_time_ms"] >= base}
        assert len(shared_batches) == 1, (name, shared_batches)  # the four rows of the shared key: one batch
    assert executors[0] == driver[0] and executors[1] == driver[1]
    assert [reason for reason, _, _ in executors[1]] == ["event_time_before_1970", "malformed_json"]
    aggregates, late = executors[0]
    assert {r["event_id"] for r in late} >= {"s2", "s3"}  # partition 3's rows of the key partition 1 owns
    assert not {r["event_id"] for r in late} & {"s0", "s1"}
    assert sum(r["count"] for r in aggregates) + len(late) == scoped_runs.records.num_rows + len(SHARED)
    report = executors[2][0]
    totals = [sum(getattr(r, field) for r in driver[2]) for field in ("rows", "quarantined", "late")]
    assert [report.rows, report.quarantined, report.late] == totals
    # The executors send the driver less than the driver path collects for the same records.
    assert report.driver_bytes < sum(r.driver_bytes for r in driver[2])
