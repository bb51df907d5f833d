"""The Airflow DAGs: they load, declare tags and retries, and run under dag.test()."""

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from jobs.feed import feed
from jobs.tables import DeltaTables
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
    from jobs.stream.run import run_job

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


def test_the_data_quality_dag_passes_on_reconciled_tables_and_fails_on_broken_ones(
    spark, dagbag, stream_tables
):
    import shutil

    import pyarrow as pa

    from jobs.tables import QUARANTINE_SCHEMA

    tmp, _ = stream_tables
    dag = dagbag.get_dag("awm_data_quality")
    assert dag.test(logical_date=this_hour(), run_conf=run_conf(tmp)).state == "success"

    broken = tmp / "broken"
    shutil.copytree(tmp / "out", broken)
    odd = pa.Table.from_pylist([{"raw": "x", "reason": "gremlins"}], schema=QUARANTINE_SCHEMA)
    DeltaTables(str(broken), "vandal", spark).append("quarantine", odd, 0, schema=QUARANTINE_SCHEMA)
    conf = run_conf(tmp) | {"tables": str(broken)}
    assert dag.test(logical_date=this_hour() + timedelta(minutes=1), run_conf=conf).state == "failed"


def test_the_retuning_dag_keeps_the_running_version_when_history_is_short_and_pushes_its_outcome(
    dagbag, stream_tables, tmp_path
):
    import urllib.request

    from monitoring.local import start_pushgateway

    tmp, _ = stream_tables
    dag = dagbag.get_dag("awm_watermark_retuning")
    before = load_config(tmp / "watermark.json")
    gateway = start_pushgateway(tmp_path / "pushgateway")
    try:
        conf = run_conf(tmp) | {"min_events": 1_000_000, "pushgateway": gateway.url}
        run = dag.test(logical_date=ending_tomorrow(), run_conf=conf)
        with urllib.request.urlopen(gateway.url + "/metrics", timeout=10) as response:
            pushed = response.read().decode()
    finally:
        gateway.stop()
    assert run.state == "success"
    lines = [x for x in pushed.splitlines() if x.startswith("awm_tuning_")]
    assert any(x.startswith("awm_tuning_last_run_ok{") and x.endswith(" 1") for x in lines), lines
    assert any(x.startswith("awm_tuning_published{") and x.endswith(" 0") for x in lines), lines
    assert any(x.startswith("awm_tuning_config_version{") and x.endswith(" 1") for x in lines), lines
    assert load_config(tmp / "watermark.json") == before
    report = json.loads(next((tmp / "reports").glob("retune-*.json")).read_text())
    assert report["decision"] == "skipped" and "at least 1,000,000" in report["reason"]


def test_a_version_published_by_the_retuning_dag_is_applied_by_the_running_job(dagbag, spark, tmp_path):
    import threading
    import time

    from jobs.stream.options import JobOptions
    from jobs.stream.run import run_job
    from tests.test_stream import config

    records = iot_records(4_000)
    inp = tmp_path / "in"
    feed(records.slice(0, 2_000), inp, rows_per_file=500)
    cfg_path = tmp_path / "watermark.json"
    write_config(cfg_path, config(params={"delay_ms": 5_000, "period_ms": 200}))  # safe but slow
    opts = JobOptions(
        input=str(inp),
        output=str(tmp_path / "out"),
        checkpoint=str(tmp_path / "ck"),
        config=load_config(cfg_path),
        config_path=str(cfg_path),
        trigger="interval=500 milliseconds",
        max_files_per_trigger=1,
        progress=False,
    )
    worker = threading.Thread(target=run_job, args=(spark, opts), daemon=True)
    worker.start()
    stage = tmp_path / "ck" / "stage"

    def wait_for(predicate, what, seconds=180):
        deadline = time.monotonic() + seconds
        while not predicate():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.2)

    try:
        wait_for(lambda: (stage / "state-000000000003").exists(), "the first 4 batches")
        conf = run_conf(tmp_path) | {"min_events": 500, "strategies": "periodic,adaptive,percentile"}
        run = dagbag.get_dag("awm_watermark_retuning").test(logical_date=ending_tomorrow(), run_conf=conf)
        assert run.state == "success"
        published = load_config(cfg_path)
        assert published.version == 2 and published.window.window_ms == 1_000
        report = json.loads(next((tmp_path / "reports").glob("retune-*.json")).read_text())
        assert report["decision"] == "published" and report["config_version"] == 2
        assert report["chosen"]["emit_latency_ms"]["mean"] < report["running"]["emit_latency_ms"]["mean"]
        assert Path(report["plot"]).stat().st_size > 10_000

        feed(records.slice(2_000, 2_000), inp, rows_per_file=500)

        def applied():
            if not DeltaTables(opts.output, "r").exists("watermark_log"):
                return False
            log = DeltaTables(opts.output, "r").read("watermark_log").to_pylist()
            return any(r["config_version"] == 2 for r in log)

        wait_for(applied, "a batch under version 2")
    finally:
        for query in spark.streams.active:
            query.stop()
        worker.join(timeout=60)
    log = DeltaTables(opts.output, "r").read("watermark_log").to_pylist()
    by_batch = {}
    for row in log:
        by_batch.setdefault(row["batch_id"], set()).add((row["config_version"], row["strategy"]))
    first_v2 = min(b for b, v in by_batch.items() if any(ver == 2 for ver, _ in v))
    assert first_v2 >= 4  # a batch boundary after the publication
    assert all(len(v) == 1 for v in by_batch.values())  # a batch runs under one version
    assert by_batch[first_v2] == {(2, published.strategy)}
    assert all(next(iter(by_batch[b]))[0] == 1 for b in by_batch if b < first_v2)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_real_scheduler_completes_a_scheduled_run_of_the_backfill_dag(stream_tables, tmp_path):
    import os
    import signal
    import sqlite3
    import subprocess
    import sys
    import time

    from tests.conftest import airflow_environment

    tmp, _ = stream_tables
    folder = tmp_path / "dags"  # only the backfill DAG, so the scheduler runs nothing else
    folder.mkdir()
    (folder / "late_data_backfill.py").symlink_to(ROOT / "dags" / "late_data_backfill.py")
    home = tmp_path / "airflow"
    port = free_port()
    env = os.environ | airflow_environment(home, ROOT)
    env |= {
        "AIRFLOW__CORE__DAGS_FOLDER": str(folder),
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        "AWM_TABLES": str(tmp / "out"),
        "AWM_CONFIG": str(tmp / "watermark.json"),
        "AWM_REPORTS": str(tmp_path / "reports"),
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }
    log = (tmp_path / "standalone.log").open("w")
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "airflow"), "standalone"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    runs = []
    try:
        deadline = time.monotonic() + 420
        while time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / "standalone.log").read_text()[-3000:]
            if (home / "airflow.db").exists():
                try:
                    with sqlite3.connect(f"file:{home}/airflow.db?mode=ro", uri=True, timeout=5) as db:
                        runs = db.execute(
                            "select run_id, run_type, state, data_interval_start, data_interval_end "
                            "from dag_run where dag_id = 'awm_late_data_backfill'"
                        ).fetchall()
                except sqlite3.OperationalError:  # tables not migrated yet, or locked
                    runs = []
            if runs and runs[0][2] in ("success", "failed"):
                break
            time.sleep(2)
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
    assert runs, "the scheduler created no run of the backfill DAG"
    run_id, run_type, state, _, _ = runs[0]
    assert (run_type, state) == ("scheduled", "success"), (tmp_path / "standalone.log").read_text()[-5000:]
    reports = list((tmp_path / "reports" / "backfill").glob("*.json"))
    assert len(reports) == 1
    report = json.loads(reports[0].read_text())
    assert report["run_id"] == run_id
    assert report["interval_end_ms"] - report["interval_start_ms"] == 3_600_000
