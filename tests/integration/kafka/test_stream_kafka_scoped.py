"""The streaming job reading Kafka in the partition-scoped mode (a real local broker): a stream cut into any
batches gives identical tables, and the stage in the executors quarantines bad values and settles a key
two partitions claim. (The rest of the job on Kafka: ``test_stream_kafka.py``.)
"""

import json

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


# Three runs of the job, 9 batches in all: minutes on a machine under load (over pytest-timeout's default 10
# seen with 14 batches): a timeout of its own, as the other slow tests have.
@pytest.mark.timeout(1_200)
def test_a_scoped_kafka_stream_cut_into_any_batches_gives_identical_tables(spark, tmp_path, kafka_broker):
    # Batches cut by offsets end each partition at a different time. In partition-scoped mode no partition
    # waits for another, so each Kafka partition's decisions depend on its own records only.
    servers = kafka_broker.bootstrap_servers
    records = iot_records(1_200)
    kafka_broker.create_topic("cut", PARTITIONS)
    feed_kafka(records, servers, "cut", partitions=PARTITIONS)
    runs = []
    # One batch, then two cuts: 400 offsets a batch with the stage in the executors (the default for scoped
    # Kafka), 350 with the stage on the driver as a peer (4 batches each: two different cuts, each ending
    # the 4 partitions at other offsets; each batch costs seconds here, so no more of them). Each must give
    # the one batch's tables.
    for n, (per_trigger, stage_in) in enumerate([(None, "auto"), (400, "auto"), (350, "driver")]):
        tables, reports = run_kafka(
            spark,
            tmp_path / str(n),
            servers,
            "cut",
            max_offsets_per_trigger=per_trigger,
            mode="scoped",
            stage_in=stage_in,
        )
        runs.append((comparable(tables), len(reports)))
        expected_site = "driver" if stage_in == "driver" else "executors"
        assert {r.stage_in for r in reports} == {expected_site}
    assert [batches for _, batches in runs][0] == 1 and min(b for _, b in runs[1:]) >= 3
    whole = runs[0][0]
    assert whole[0] and whole[1]  # windows fired and late rows: the comparison is not vacuous
    for cut, _ in runs[1:]:
        assert cut == whole

    # Replay parity: the library's partition-scoped replay, with the Kafka partition as the partition.
    mapping = kafka_partition_map(records.column("partition"), PARTITIONS)
    kpart = np.array([mapping[p] for p in records.column("partition").to_pylist()])
    expected = replay(
        records.column("event_time_ms").to_numpy(),
        records.column("arrival_time_ms").to_numpy(),
        strategy="periodic",
        params=PARAMS,
        window=WindowSpec(1_000),
        partition=kpart.astype(str).astype(object),
        key=np.asarray(records.column("key").to_pylist(), dtype=object),
        partition_mode="scoped",
    )
    ids = np.asarray(records.column("event_id").to_pylist(), dtype=object)[expected.order]
    assert sorted(r["event_id"] for r in whole[1]) == sorted(ids[expected.late_rows].tolist())
    w = expected.windows
    # A fired window is dated where its owner partition's watermark reached its end: the periodic timer
    # between two arrivals of that partition, not the next arrival (the replay's fire_tp_ms / fire_wm_ms).
    want = {
        (expected.keys[k], int(s)): (int(c), int(wm) if f else None, int(t) if f else None)
        for k, s, c, f, wm, t in zip(
            w.key, w.start_ms, w.count, w.fired, w.fire_wm_ms, w.fire_tp_ms, strict=True
        )
    }
    got = {
        (r["key"], r["window_start_ms"]): (r["count"], r["trigger_watermark_ms"], r["fire_arrival_ms"])
        for r in whole[0]
    }
    assert got == want
    assert np.any(w.fire_tp_ms[w.fired] < w.arrival_fire_tp_ms[w.fired])  # timers made a difference


def test_the_stage_in_the_executors_quarantines_bad_values_and_settles_a_key_two_partitions_claim(
    spark, tmp_path, kafka_broker
):
    # The executor path (the default for a scoped Kafka stream) against the driver path on one batch with
    # bad values and a key that first arrives in two partitions at once: only the partition of its first
    # arrival owns it, the other partition's rows of it are late (foreign), and nothing else differs.
    servers = kafka_broker.bootstrap_servers
    records = iot_records(1_500)
    kafka_broker.create_topic("mixed", PARTITIONS)
    feed_kafka(records, servers, "mixed", partitions=PARTITIONS)
    base = int(records.column("arrival_time_ms").to_numpy().max()) + 1
    te = int(records.column("event_time_ms").to_numpy().max())

    def event(i, key):
        return json.dumps({"event_id": f"s{i}", "key": key, "event_time_ms": te + i, "value": 1}).encode()

    produce_raw(servers, "mixed", [event(0, "shared"), event(1, "shared")], partition=1, timestamp_ms=base)
    produce_raw(
        servers, "mixed", [event(2, "shared"), event(3, "shared")], partition=3, timestamp_ms=base + 5
    )
    bad = [b"{not json", json.dumps({"event_id": "x2", "key": "k", "event_time_ms": -5, "value": 1}).encode()]
    produce_raw(servers, "mixed", bad, partition=0, timestamp_ms=base)

    runs = {}
    for stage_in in ("auto", "driver"):
        tables, reports = run_kafka(
            spark, tmp_path / stage_in, servers, "mixed", mode="scoped", stage_in=stage_in
        )
        assert len(reports) == 1
        quarantine = sorted(
            (q["reason"], q["file"], q["line"]) for q in tables.read("quarantine").to_pylist()
        )
        runs[stage_in] = (comparable(tables), quarantine, reports[0])
    executors, driver = runs["auto"], runs["driver"]
    assert executors[2].stage_in == "executors" and driver[2].stage_in == "driver"
    assert executors[0] == driver[0] and executors[1] == driver[1]
    assert [reason for reason, _, _ in executors[1]] == ["event_time_before_1970", "malformed_json"]
    aggregates, late = executors[0]
    assert {r["event_id"] for r in late} >= {"s2", "s3"}  # partition 3's rows of the key partition 1 owns
    assert not {r["event_id"] for r in late} & {"s0", "s1"}
    assert sum(r["count"] for r in aggregates) + len(late) == records.num_rows + 4
    report = executors[2]
    assert (report.rows, report.quarantined, report.late) == (
        driver[2].rows,
        driver[2].quarantined,
        driver[2].late,
    )
    assert report.driver_bytes < driver[2].driver_bytes
