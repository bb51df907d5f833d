"""The Airflow DAGs: they load, declare tags and retries, and run under dag.test()."""

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from jobs.common.tables import DeltaTables
from tests.integration.spark.test_backfill import batch_aggregation, job, one_partition, table_aggregates
from tests.integration.spark.test_stream import iot_records
from tests.landing import folder_job, write_lines
from tools.feed.landing import feed
from watermark.config import load_config, write_config

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
DAG_IDS = {"awm_late_data_backfill", "awm_watermark_retuning", "awm_data_quality", "awm_table_maintenance"}
DAG_FILES = ["late_data_backfill", "watermark_retuning", "data_quality", "table_maintenance"]


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
        work = [t for t in dag.tasks if t.task_id != "publish"]
        assert all(t.retries >= 1 for t in work), dag_id


def test_every_task_has_a_timeout_and_every_dag_a_run_timeout_and_one_failure_notifier(dagbag):
    from dags.outcome import PushOutcome

    reported = set()
    for dag_id in DAG_IDS:
        dag = dagbag.get_dag(dag_id)
        assert dag.dagrun_timeout is not None, dag_id
        dag_callbacks = (
            dag.on_failure_callback
            if isinstance(dag.on_failure_callback, list)
            else [dag.on_failure_callback]
        )
        assert any(isinstance(c, PushOutcome) for c in dag_callbacks), dag_id
        for t in dag.tasks:
            assert t.execution_timeout is not None and t.execution_timeout <= dag.dagrun_timeout, (
                dag_id,
                t.task_id,
            )
            callbacks = (
                t.on_failure_callback if isinstance(t.on_failure_callback, list) else [t.on_failure_callback]
            )
            notifiers = [c for c in callbacks if isinstance(c, PushOutcome)]
            assert len(notifiers) == 1, (dag_id, t.task_id)
            reported.add(notifiers[0].task)
    assert reported == {"backfill", "tuning", "quality", "maintenance"}


def test_the_backfill_output_is_an_asset_the_data_quality_dag_is_scheduled_on(dagbag):
    from dags.pipeline_settings import AGGREGATES, LATE_EVENTS

    backfill = dagbag.get_dag("awm_late_data_backfill")
    assert {a.name for a in backfill.get_task("publish").outlets} == {AGGREGATES.name, LATE_EVENTS.name}
    quality = dagbag.get_dag("awm_data_quality")
    scheduled_on = {asset.name for asset in quality.timetable.asset_condition.objects}
    assert scheduled_on == {AGGREGATES.name, LATE_EVENTS.name}


def test_importing_the_dags_starts_no_spark_reads_no_table_and_sets_no_environment(airflow_home):
    import subprocess
    import sys

    code = (
        "import os, sys, runpy\n"
        "before = dict(os.environ)\n"
        f"for f in {DAG_FILES!r}:\n"
        "    runpy.run_path(f'dags/{f}.py')\n"
        "heavy = ('pyspark', 'deltalake', 'great_expectations', 'jobs.stream')\n"
        "heavy = [m for m in heavy if m in sys.modules]\n"
        "print(heavy, dict(os.environ) == before)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[] True"
    sources = "\n".join(
        (ROOT / "dags" / f"{f}.py").read_text() for f in [*DAG_FILES, "pipeline_settings", "outcome"]
    )
    assert "os.environ.setdefault" not in sources and "from airflow.sdk" in sources
    private = [
        line
        for line in sources.splitlines()
        if line.lstrip().startswith(("from airflow.", "import airflow."))
    ]
    assert all(
        line.lstrip().startswith(("from airflow.sdk", "from airflow.providers.")) for line in private
    ), private


@pytest.fixture(scope="module")
def stream_tables(spark_sessions, tmp_path_factory):
    """A finished run of the streaming job with an aggressive watermark (many late rows)."""
    return build_stream_tables(spark_sessions.get(), tmp_path_factory.mktemp("dags"))


def build_stream_tables(spark, tmp: Path):
    """The job's tables of a run on 1,500 IoT records, and its configuration, in ``tmp``: (tmp, records).

    Two micro-batches (three files of 500, two a trigger, and a bad line's file): late rows for the backfill
    to fold, a quarantine, several files per table for the maintenance, a history too short to re-tune."""
    from jobs.stream.run import run_job

    records = one_partition(iot_records(1_500))
    feed(records, tmp / "in", rows_per_file=500)
    write_lines(tmp / "in" / "zz-bad.jsonl", ["not json"])
    opts = job(tmp, flush_at_end=True)
    write_config(tmp / "watermark.json", opts.config)
    run_job(spark, opts)
    return tmp, records


def run_conf(tmp):
    return {"tables": str(tmp / "out"), "config": str(tmp / "watermark.json")}


def test_the_backfill_dag_submits_the_spark_job_and_reconciles_exactly(dagbag, stream_tables, spark):
    tmp, records = stream_tables
    dag = dagbag.get_dag("awm_late_data_backfill")
    start = this_hour()
    run = dag.test(logical_date=ending_next_hour(), run_conf=run_conf(tmp))
    assert run.state == "success"
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert set(states.values()) == {"success"}
    assert set(states) == {"settings", "check_spark_connection", "backfill", "publish"}
    report_file = (
        tmp / "out" / "_reports" / "backfill" / f"{start:%Y%m%dT%H%M%SZ}.json"
    )  # the tables' storage
    report = json.loads(report_file.read_text())
    assert report["run_id"] == run.run_id and report["folded_events"] > 0
    assert table_aggregates(tmp / "out") == batch_aggregation(spark, records)


def test_a_manual_data_quality_interval_without_a_zone_is_utc_whatever_the_workers_zone(
    airflow_home, monkeypatch
):
    """The pipeline's one time rule (``watermark.streams.timeparse.instant_ms``): a time without a zone is
    UTC.

    The DAG used to read a manual interval in the worker's local time zone; now it reads it as the backfill
    and the streaming job do.
    """
    import time

    from dags.data_quality import checked_interval

    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    try:
        params = {"interval_start": "2026-11-22T10:00:00", "interval_end": "2026-11-22T11:00:00+00:00"}
        assert checked_interval({"params": params}) == ((1_795_341_600_000, 1_795_345_200_000), None)
    finally:
        monkeypatch.undo()
        time.tzset()


def test_the_data_quality_dag_passes_on_reconciled_tables_and_fails_on_broken_ones(
    spark, dagbag, stream_tables
):
    import shutil

    import pyarrow as pa

    from jobs.batch.quality_results import read_history
    from jobs.batch.quality_store import index_page, results_root, safe_run_name
    from jobs.common.schemas import QUARANTINE_SCHEMA

    tmp, _ = stream_tables
    dag = dagbag.get_dag("awm_data_quality")
    whole = run_conf(tmp) | {"whole_tables": True}
    run = dag.test(logical_date=this_hour(), run_conf=whole)
    assert run.state == "success"
    stored = read_history(results_root(str(tmp / "out")), 1)  # the run's results stay, by its run id
    assert {r.run_name for r in stored} == {safe_run_name(run.run_id)} and all(r.success for r in stored)
    assert Path(index_page(results_root(str(tmp / "out"))).key).is_file()
    hour = run_conf(tmp) | {
        "interval_start": this_hour().isoformat(),
        "interval_end": ending_next_hour().isoformat(),
    }
    run = dag.test(logical_date=this_hour() + timedelta(seconds=1), run_conf=hour)
    assert run.state == "success"

    broken = tmp / "broken"
    shutil.copytree(tmp / "out", broken)
    odd = pa.Table.from_pylist([{"raw": "x", "reason": "gremlins"}], schema=QUARANTINE_SCHEMA)
    DeltaTables(str(broken), "vandal", spark).append("quarantine", odd, 0, schema=QUARANTINE_SCHEMA)
    conf = whole | {"tables": str(broken)}
    run = dag.test(logical_date=this_hour() + timedelta(minutes=1), run_conf=conf)
    assert run.state == "failed"
    failed = [r for r in read_history(results_root(str(broken)), 1) if not r.success]
    assert [(r.run_name, r.suite) for r in failed] == [(safe_run_name(run.run_id), "quarantine")]
    assert failed[0].failures[0].examples == ["gremlins"] and Path(failed[0].page.key).is_file()
    pushed = failed_report(run)  # the failed task's XCom names the failed suite's page
    assert pushed["data_docs_pages"]["quarantine"] == failed[0].page.uri and not pushed["success"]


def failed_report(run) -> dict:
    """The XCom ``report`` the data-quality task of ``run`` pushed before failing."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        value = session.scalar(
            select(XComModel.value).where(
                XComModel.dag_id == run.dag_id, XComModel.run_id == run.run_id, XComModel.key == "report"
            )
        )
    return json.loads(value) if isinstance(value, str) else value


def pushed_lines(gateway) -> list[str]:
    return pushed(gateway)


def pushed(gateway) -> list[str]:
    import urllib.request

    with urllib.request.urlopen(gateway.url + "/metrics", timeout=10) as response:
        return [x for x in response.read().decode().splitlines() if x.startswith("awm_")]


def test_the_maintenance_dag_compacts_and_vacuums_through_spark_submit_and_pushes_its_outcome(
    dagbag, stream_tables, pushgateway, tmp_path, monkeypatch
):
    import shutil

    tmp, _ = stream_tables
    tables = tmp_path / "tables"
    for t in (
        "aggregates",
        "arrivals",
    ):  # two tables are enough here (tests/integration/spark/test_maintenance.py: all five)
        shutil.copytree(tmp / "out" / t, tables / t)
    before = {
        t: sorted(DeltaTables(str(tables), "r").read(t).to_pylist(), key=repr)
        for t in ("aggregates", "arrivals")
    }
    monkeypatch.setenv("AIRFLOW_VAR_AWM_VACUUM_RETAIN_HOURS", "0")  # settings are Airflow Variables
    monkeypatch.setenv("AIRFLOW_VAR_AWM_VACUUM_ALLOW_BELOW_FLOOR", "true")  # below 168 h: said explicitly
    # The arrivals' retention goes by arrival date, and the bundled recording arrived years ago: a retention
    # long enough to keep it, so that no row may change (tests/integration/spark/test_maintenance.py: the
    # retention dropping dates).
    monkeypatch.setenv("AIRFLOW_VAR_AWM_ARRIVALS_RETAIN_DAYS", "36500")
    dag = dagbag.get_dag("awm_table_maintenance")
    run = dag.test(logical_date=ending_tomorrow(), run_conf={"tables": str(tables)})
    assert run.state == "success"
    report = next((tables / "_reports" / "maintenance").glob("*.json"))
    tables_report = json.loads(report.read_text())["tables"]
    assert tables_report["arrivals"]["files_after"] <= tables_report["arrivals"]["files_before"]
    after = {
        t: sorted(DeltaTables(str(tables), "r").read(t).to_pylist(), key=repr)
        for t in ("aggregates", "arrivals")
    }
    assert after == before
    lines = pushed(pushgateway)
    assert any(x.startswith("awm_maintenance_last_run_ok{") and x.endswith(" 1") for x in lines), lines
    assert any(x.startswith("awm_maintenance_files_after{") for x in lines), lines


def test_the_retuning_dag_keeps_the_running_version_when_history_is_short_and_pushes_its_outcome(
    dagbag, stream_tables, pushgateway
):
    tmp, _ = stream_tables
    dag = dagbag.get_dag("awm_watermark_retuning")
    before = load_config(tmp / "watermark.json")
    conf = run_conf(tmp) | {"min_events": 1_000_000, "reports": str(tmp / "reports")}
    run = dag.test(logical_date=ending_tomorrow(), run_conf=conf)
    assert run.state == "success"
    lines = [x for x in pushed(pushgateway) if x.startswith("awm_tuning_")]
    assert any(x.startswith("awm_tuning_last_run_ok{") and x.endswith(" 1") for x in lines), lines
    assert any(x.startswith("awm_tuning_published{") and x.endswith(" 0") for x in lines), lines
    assert any(x.startswith("awm_tuning_config_version{") and x.endswith(" 1") for x in lines), lines
    assert load_config(tmp / "watermark.json") == before
    report = json.loads(next((tmp / "reports").glob("retune-*.json")).read_text())
    assert report["decision"] == "skipped" and "at least 1,000,000" in report["reason"]


def test_a_task_timeout_fails_the_run_and_its_failure_reaches_the_pushgateway(
    dagbag, stream_tables, pushgateway, monkeypatch
):
    import time

    import jobs.batch.quality

    slept = []

    def stuck(*args, **kwargs):
        time.sleep(60)
        slept.append("to the end")  # only if the task's timeout did not interrupt the sleep

    monkeypatch.setattr(jobs.batch.quality, "check_tables", stuck)  # the task imports it when it runs
    tmp, _ = stream_tables
    dag = dagbag.get_dag("awm_data_quality")
    task = dag.get_task("check_tables")
    monkeypatch.setattr(task, "execution_timeout", timedelta(seconds=2))
    monkeypatch.setattr(task, "retries", 0)
    run = dag.test(
        logical_date=this_hour() + timedelta(minutes=2), run_conf=run_conf(tmp) | {"whole_tables": True}
    )
    assert slept == []  # the timeout, not the end of the sleep, ended it (however busy the machine)
    assert run.state == "failed"
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states["check_tables"] == "failed"
    lines = pushed(pushgateway)
    assert any(x.startswith("awm_quality_last_run_ok{") and x.endswith(" 0") for x in lines), lines
    assert any(x.startswith("awm_quality_last_failure_timestamp_seconds{") for x in lines), lines
    assert not any(x.startswith("awm_quality_last_success_timestamp_seconds{") for x in lines), lines


def test_a_version_published_by_the_retuning_dag_is_applied_by_the_running_job(dagbag, spark, tmp_path):
    import threading
    import time

    from jobs.stream.options import DeferPolicy
    from jobs.stream.run import run_job
    from tests.integration.spark.test_stream import config

    records = iot_records(4_000)
    inp = tmp_path / "in"
    feed(records.slice(0, 2_000), inp, rows_per_file=500)
    cfg_path = tmp_path / "watermark.json"
    write_config(cfg_path, config(params={"delay_ms": 5_000, "period_ms": 200}))  # safe but slow
    opts = folder_job(
        tmp_path,
        load_config(cfg_path),
        config_path=str(cfg_path),
        trigger="interval=500 milliseconds",
        max_files_per_trigger=1,
        # the arrival history and the watermark log committed with every batch, not every 10: the DAG
        # reads the history while the job runs
        defer=DeferPolicy(batches=1),
    )
    worker = threading.Thread(target=run_job, args=(spark, opts), daemon=True)
    worker.start()
    stage = tmp_path / "ck" / "stage"

    def wait_for(predicate, what):
        # no deadline of its own (the test's timeout ends a hang): the job must keep running meanwhile
        while not predicate():
            assert worker.is_alive(), f"the job ended while waiting for {what}"
            time.sleep(0.2)

    try:
        wait_for(lambda: (stage / "state-000000000003").exists(), "the first 4 batches")
        conf = run_conf(tmp_path) | {
            "min_events": 500,
            "strategies": "periodic,adaptive,percentile",
            "reports": str(tmp_path / "reports"),
        }
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
