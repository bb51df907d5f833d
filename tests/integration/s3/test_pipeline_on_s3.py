"""The pipeline on object storage: landing files, tables, checkpoint, configuration and reports all on
``s3a://`` (a real S3 server, fixture s3_server). The job gives the tables of the same input on local disk;
the backfill's MERGE, data quality, re-tuning and maintenance work on them; a new checkpoint against them is
refused. (Two SIGKILLs of the job on S3: tests/system/test_stream_s3.py.)"""

import json
import os
import time
from dataclasses import replace

import pytest

from jobs.batch.backfill import BackfillOptions, run_backfill
from jobs.batch.maintenance import MaintenanceOptions, run_maintenance
from jobs.batch.quality import check_tables
from jobs.batch.retune import RetuneOptions, retune
from jobs.common.object_store import apply_s3a_settings
from jobs.common.tables import DeltaTables
from jobs.stream.options import JobOptions
from jobs.stream.run import run_job
from tests.integration.spark.test_stream import config, iot_records, stable
from tools.feed.landing import feed
from watermark import storage
from watermark.config import load_config, write_config
from watermark.evaluation.replay import WindowSpec

DAY_MS = 86_400_000
ROWS_PER_FILE = 500


def tables_of(root: str) -> dict[str, list]:
    sink = DeltaTables(root, "reader")
    return {
        "aggregates": stable(sink.read("aggregates"), ["window_start_ms", "key", "flushed"]),
        "late_events": stable(sink.read("late_events").drop_columns(["file"]), ["event_id"]),
        "quarantine": sink.read("quarantine").num_rows,
        "arrivals": sink.read("arrivals").num_rows,
    }


@pytest.fixture
def spark_on_s3(spark, s3_server):
    """The worker's shared session pointed at the S3 server, in its JVM and in its Python workers.

    The session may have been built before the server's environment was set (another file's test ran
    first on this xdist worker), and its Python workers, which the JVM starts with the environment it was
    started with, then lack it too. The JVM gets the s3a settings from :func:`apply_s3a_settings`; the
    Python workers, where the Arrow path reads landing files on S3 through pyarrow configured from their
    environment, get the server's variables through ``SparkContext.environment`` (which every Python
    task carries; Spark starts workers of their own for it). Without them a worker could not reach the
    server, took each file for changed since it was planned, and the batches went to Spark's reader
    (``['spark'] * 3``: the intermittent failure, which depended on the files run before on the worker).
    The environment is restored after the test.
    """
    apply_s3a_settings(spark, os.environ)
    environment = spark.sparkContext.environment
    saved = dict(environment)
    environment.update(s3_server.env())
    try:
        yield spark
    finally:
        environment.clear()
        environment.update(saved)


@pytest.mark.timeout(1_200)
def test_the_job_and_the_batch_jobs_run_with_every_location_on_s3(spark_on_s3, s3_server, tmp_path):
    spark = spark_on_s3
    root = f"s3a://{s3_server.new_bucket()}"
    # Two landing files, one a batch: the second batch reads the stage's state the first one left on S3.
    records = iot_records(2 * ROWS_PER_FILE)
    cfg = config("periodic", {"delay_ms": 200})  # late rows for the backfill to fold
    feed(records, f"{root}/in", rows_per_file=ROWS_PER_FILE)
    feed(records, tmp_path / "in", rows_per_file=ROWS_PER_FILE)
    write_config(f"{root}/watermark.json", cfg)
    options = JobOptions(
        input=f"{root}/in",
        output=f"{root}/tables",
        checkpoint=f"{root}/ck",
        config=cfg,
        config_path=f"{root}/watermark.json",
        max_files_per_trigger=1,
        progress=False,
    )
    reports = run_job(spark, options)
    # the landing files on S3 are read on the Arrow path too: ranged reads through pyarrow's S3 file system
    assert [r.path for r in reports] == ["arrow"] * 2
    local = replace(
        options,
        input=str(tmp_path / "in"),
        output=str(tmp_path / "tables"),
        checkpoint=str(tmp_path / "ck"),
        config_path=None,
    )
    run_job(spark, local)
    on_s3 = tables_of(f"{root}/tables")
    assert on_s3["aggregates"] and on_s3["late_events"] and on_s3["arrivals"] == records.num_rows
    assert on_s3 == tables_of(str(tmp_path / "tables"))  # row for row, the tables of local disk
    assert storage.walk_files(f"{root}/ck/stage")  # the stage's state is on S3 too

    # the backfill folds the late rows into the windows (a MERGE on S3)
    now = int(time.time() * 1000)
    report = run_backfill(
        spark,
        BackfillOptions(f"{root}/tables", now - DAY_MS, now + DAY_MS, WindowSpec(1_000), backoff_s=0.05),
    )
    assert report.folded_events == len(on_s3["late_events"]) > 0 and report.reconciled_events > 0
    assert DeltaTables(f"{root}/tables", "reader").read("aggregates").num_rows >= len(on_s3["aggregates"])

    quality = check_tables(f"{root}/tables")
    assert quality.expectations > 0 and not quality.failures, quality.summary()

    outcome = retune(
        RetuneOptions(
            tables=f"{root}/tables",
            config=f"{root}/watermark.json",
            reports=f"{root}/reports",
            end_ms=now + 60_000,
            strategies=("periodic",),
            min_events=100,
        )
    )
    assert outcome.decision in ("published", "kept"), outcome
    kept = json.loads(storage.read_text(outcome.report))
    assert kept["decision"] == outcome.decision and outcome.report.startswith(f"{root}/reports/retune-")
    assert load_config(f"{root}/watermark.json").version == (2 if outcome.decision == "published" else 1)

    maintained = run_maintenance(spark, MaintenanceOptions(f"{root}/tables", retain_hours=0.0))
    assert maintained.tables["aggregates"].rows_after == maintained.tables["aggregates"].rows_before > 0
    assert (
        maintained.tables["arrivals"].files_on_disk_after
        <= maintained.tables["arrivals"].files_on_disk_before
    )

    # a new checkpoint against these tables would write the input a second time: refused
    with pytest.raises(ValueError, match="already holds tables written from another one"):
        run_job(spark, replace(options, checkpoint=f"{root}/another-ck", app_id=None))
