"""Exactly once on Kafka: a job killed with SIGKILL inside a micro-batch (after batch 3) and restarted
writes the tables of an uninterrupted run, on a 4-partition topic of the local broker
(``tests/system/test_stream_exactly_once.py``: the same on landing files, killed twice, and the helpers)."""

import pytest

from tests.integration.spark.test_stream import iot_records
from tests.system.test_stream_exactly_once import killed_and_restarted_gives_the_tables_of_one_run
from tools.feed.kafka import feed_kafka

pytestmark = pytest.mark.slow

#: 5 micro-batches of 200 offsets, the fewest that leave a batch after the kill (after batch 3): a batch with
#: its stage in the executors costs seconds here, in the reference run and in the killed one alike. Late
#: rows (18, from the 600th record on) are pending in the checkpoint at the kill and come after it too.
RECORDS, PER_BATCH = 1_000, 200


# Three runs of the job, the killed one in a JVM of its own: minutes, more on a busy machine.
@pytest.mark.timeout(2_400)
def test_a_sigkill_on_a_kafka_topic_then_restart_gives_identical_tables(
    spark, tmp_path, kafka_broker, jvm_process
):
    records = iot_records(RECORDS)
    servers = kafka_broker.bootstrap_servers
    kafka_broker.create_topic("killed", 4)
    feed_kafka(records, servers, "killed", partitions=4)
    # 5 micro-batches of 200 offsets; a restart replays the offsets of its batch from Spark's checkpoint.
    source = ["--format", "kafka", "--kafka-bootstrap-servers", servers, "--topic", "killed"]
    killed_and_restarted_gives_the_tables_of_one_run(
        spark,
        tmp_path,
        [*source, "--max-offsets-per-trigger", str(PER_BATCH)],
        jvm_process.env,
        kills=1,
        records=RECORDS,
        per_batch=PER_BATCH,
    )
