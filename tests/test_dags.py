"""The Airflow DAGs: they load, declare tags and retries, and run under dag.test()."""

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from jobs.delta_sink import DeltaSink
from jobs.feed import feed
from tests.test_backfill import batch_aggregation, job, one_partition, table_aggregates
from tests.test_stream import iot_records, write_lines
from watermark.config import load_config, write_config

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
DAG_IDS = {"awm_late_data_backfill", "awm_watermark_retuning", "awm_data_quality"}


@pytest.fixture(scope="module")
def dagbag(airflow_home):
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(ROOT / "dags"))


def this_hour():
    return datetime.now(UTC).replace(minute=0, second=0, microsecond=0)


def ending_next_hour():
    """A manual run's data interval is the last whole one before its logical date: this hour's."""
    return this_hour() + timedelta(hours=1)


def ending_tomorrow():
    return this_hour().replace(hour=0) + timedelta(days=1)


def test_the_dag_folder_loads_without_import_errors(dagbag):
    assert dagbag.import_errors == {}
    assert set(dagbag.dag_ids) == DAG_IDS


def test_every_dag_has_tags_retries_docs_and_typed_params(dagbag):
    for dag_id in DAG_IDS:
        dag = dagbag.get_dag(dag_id)
        assert "awm" in dag.tags and len(dag.tags) >= 2, dag_id
        assert dag.default_args["retries"] >= 1, dag_id
        assert dag.doc_md and dag.doc_md.strip().startswith("###"), dag_id
        assert dag.catchup is False and dag.max_active_runs == 1, dag_id
        for name, param in dag.params.items():
            assert "type" in param.schema, f"{dag_id} param {name} has no type"
        work = [t for t in dag.tasks if t.task_id != "push_outcome"]
        assert all(t.retries >= 1 for t in work), dag_id


def test_importing_the_dags_starts_no_spark_and_reads_no_table(airflow_home):
    import subprocess
    import sys

    code = (
        "import sys, runpy\n"
        "for f in ['late_data_backfill', 'watermark_retuning', 'data_quality']:\n"
        "    runpy.run_path(f'dags/{f}.py')\n"
        "heavy = ('pyspark', 'deltalake', 'great_expectations', 'jobs.stream')\n"
        "heavy = [m for m in heavy if m in sys.modules]\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


@pytest.fixture(scope="module")
def stream_tables(spark, tmp_path_factory):
    """A finished run of the streaming job with an aggressive watermark (many late rows)."""
    from jobs.stream import run_job

    tmp = tmp_path_factory.mktemp("dags")
    records = one_partition(iot_records(3_000))
    feed(records, tmp / "in", rows_per_file=500)
    write_lines(tmp / "in" / "zz-bad.jsonl", ["not json"])
    opts = job(tmp, flush_at_end=True)
    write_config(tmp / "watermark.json", opts.config)
    run_job(spark, opts)
    return tmp, records


def run_conf(tmp):
    return {
        "tables": str(tmp / "out"),
        "config": str(tmp / "watermark.json"),
        "reports": str(tmp / "reports"),
    }


def test_the_backfill_dag_submits_the_spark_job_and_reconciles_exactly(dagbag, stream_tables, spark):
    tmp, records = stream_tables
    dag = dagbag.get_dag("awm_late_data_backfill")
    start = this_hour()
    run = dag.test(logical_date=ending_next_hour(), run_conf=run_conf(tmp))
    assert run.state == "success"
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states == {"check_spark_connection": "success", "backfill": "success", "push_outcome": "success"}
    report = json.loads((tmp / "reports" / "backfill" / f"{start:%Y%m%dT%H%M%SZ}.json").read_text())
    assert report["run_id"] == run.run_id and report["folded_events"] > 0
    assert table_aggregates(tmp / "out") == batch_aggregation(spark, records)


def test_the_data_quality_dag_passes_on_reconciled_tables_and_fails_on_broken_ones(dagbag, stream_tables):
    import shutil

    import pyarrow as pa

    from jobs.stream import QUARANTINE_SCHEMA

    tmp, _ = stream_tables
    dag = dagbag.get_dag("awm_data_quality")
    assert dag.test(logical_date=this_hour(), run_conf=run_conf(tmp)).state == "success"

    broken = tmp / "broken"
    shutil.copytree(tmp / "out", broken)
    odd = pa.Table.from_pylist([{"raw": "x", "reason": "gremlins"}], schema=QUARANTINE_SCHEMA)
    DeltaSink(str(broken), "vandal").append("quarantine", odd, 0, schema=QUARANTINE_SCHEMA)
    conf = run_conf(tmp) | {"tables": str(broken)}
    assert dag.test(logical_date=this_hour() + timedelta(minutes=1), run_conf=conf).state == "failed"


def test_the_retuning_dag_keeps_the_running_version_when_history_is_short(dagbag, stream_tables):
    tmp, _ = stream_tables
    dag = dagbag.get_dag("awm_watermark_retuning")
    before = load_config(tmp / "watermark.json")
    conf = run_conf(tmp) | {"min_events": 1_000_000}
    run = dag.test(logical_date=ending_tomorrow(), run_conf=conf)
    assert run.state == "success"
    assert load_config(tmp / "watermark.json") == before
    report = json.loads(next((tmp / "reports").glob("retune-*.json")).read_text())
    assert report["decision"] == "skipped" and "at least 1,000,000" in report["reason"]
