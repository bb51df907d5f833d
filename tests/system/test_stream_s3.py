"""Exactly once on object storage: the job with its landing files, tables and checkpoint on ``s3a://`` (a
real S3 server, fixture s3_server), SIGKILLed inside a micro-batch and restarted (in the worker's
session, its s3a settings applied), writes the
tables of an uninterrupted run on local disk (``tests/system/test_stream_exactly_once.py``: the helpers,
and the same on local disk, killed twice)."""

import pytest

from jobs.common.object_store import apply_s3a_settings
from tests.integration.spark.test_stream import iot_records
from tests.system.test_stream_exactly_once import (
    PER_BATCH,
    RECORDS,
    killed_and_restarted_gives_the_tables_of_one_run,
)
from tools.feed.landing import feed

pytestmark = pytest.mark.slow


# Three runs of the job, the killed one in a JVM of its own: minutes, more on a busy machine.
@pytest.mark.timeout(2_400)
def test_a_sigkill_on_s3_then_restart_gives_the_tables_of_a_run_on_local_disk(
    spark, tmp_path, s3_server, jvm_process
):
    records = iot_records(RECORDS)
    root = f"s3a://{s3_server.new_bucket()}"
    feed(records, tmp_path / "in", rows_per_file=PER_BATCH)  # 8 files, one per micro-batch
    feed(records, f"{root}/in", rows_per_file=PER_BATCH)  # the same 8 files on S3
    env = jvm_process.env | s3_server.env()
    apply_s3a_settings(spark, env)  # the restart runs in this session, on the killed runs' S3 checkpoint
    killed_and_restarted_gives_the_tables_of_one_run(
        spark, tmp_path, tmp_path / "in", env, crashed=f"{root}/crashed", crashed_input=f"{root}/in", kills=1
    )
