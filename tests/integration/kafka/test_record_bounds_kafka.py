"""Issue 29 item 10 on a real Kafka topic: the arrival time is the record's timestamp, so an event time far
ahead of it is quarantined (``event_time_ahead_of_arrival``) whatever the value's own ``arrival_time_ms``
says, and the partition's later records stay on time (the stage in the executors and on the driver)."""

import json

import pytest

from jobs.common.tables import DeltaTables
from jobs.stream.options import KafkaOptions
from jobs.stream.run import run_job
from tests.landing import folder_job
from watermark.config import PipelineConfig

BASE = 1_600_000_000_000
HOUR = 3_600_000


@pytest.mark.parametrize("stage_in", ["auto", "driver"])
def test_a_kafka_record_23_hours_ahead_of_its_timestamp_is_quarantined(
    spark, tmp_path, kafka_broker, stage_in
):
    from confluent_kafka import Producer

    servers, topic = kafka_broker.bootstrap_servers, f"ahead-{stage_in}"
    kafka_broker.create_topic(topic, 1)
    producer = Producer({"bootstrap.servers": servers})
    for i in range(100):
        te = BASE + 10 * i + (23 * HOUR if i == 50 else 0)
        # The value's arrival time says after its event; Kafka's timestamp is the arrival, and wins.
        value = {"event_id": f"e{i}", "key": "k", "event_time_ms": te, "arrival_time_ms": te + 5, "value": 1}
        producer.produce(topic, value=json.dumps(value).encode(), partition=0, timestamp=BASE + 10 * i + 5)
    assert producer.flush() == 0
    config = PipelineConfig.from_dict(
        {"version": 1, "strategy": "periodic", "params": {"delay_ms": 0, "period_ms": 10}, "window_ms": 1_000}
        | {"partition_mode": "scoped", "idle_timeout_ms": None}
    )
    opts = folder_job(
        tmp_path,
        config,
        input="",
        format="kafka",
        kafka=KafkaOptions(bootstrap_servers=servers, topic=topic),
        flush_at_end=True,
        stage_in=stage_in,
    )
    reports = run_job(spark, opts)
    tables = DeltaTables(opts.output, "test-reader")
    quarantine = tables.read("quarantine").to_pylist()
    assert [(q["reason"], q["file"], q["line"]) for q in quarantine] == [
        ("event_time_ahead_of_arrival", f"{topic}/0", 50)
    ]
    assert sum(r.late for r in reports) == 0  # 49 of the partition's later records were late
    assert sum(r["count"] for r in tables.read("aggregates").to_pylist()) == 99
    assert {r.stage_in for r in reports} == {"executors" if stage_in == "auto" else "driver"}
