"""Exactly once on Kafka: a job killed with SIGKILL inside a micro-batch (after batch 3) and restarted
writes the tables of an uninterrupted run, on a 4-partition topic of the local broker
(``tests/system/test_stream_exactly_once.py``: the same on landing files, killed twice, and the helpers)."""

import pytest

from tests.integration.spark.test_stream import iot_records
from tests.system.test_stream_exactly_once import (
    PER_BATCH,
    killed_and_restarted_gives_the_tables_of_one_run,
)
from tools.feed.kafka import feed_kafka

pytestmark = pytest.mark.slow

#: 6 micro-batches of 250 offsets (the landing files' test has 8): a batch with its stage in the executors
#: takes seconds here, in the reference run and in the killed ones alike.
RECORDS = 1_500


# Three runs of the job, the killed one in a JVM of its own: minutes, more on a busy machine.
@pytest.mark.timeout(2_400)
def test_a_sigkill_on_a_kafka_topic_then_restart_gives_identical_tables(
    spark, tmp_path, kafka_broker, jvm_process
):
    records = iot_records(RECORDS)
    servers = kafka_broker.bootstrap_servers
    kafka_broker.create_topic("killed", 4)
    feed_kafka(records, servers, "killed", partitions=4)
    # 6 micro-batches of 250 offsets; a restart replays the offsets of its batch from Spark's checkpoint.
    source = ["--format", "kafka", "--kafka-bootstrap-servers", servers, "--topic", "killed"]
    killed_and_restarted_gives_the_tables_of_one_run(
        spark,
        tmp_path,
        [*source, "--max-offsets-per-trigger", str(PER_BATCH)],
        jvm_process.env,
        kills=1,
        records=RECORDS,
    )
