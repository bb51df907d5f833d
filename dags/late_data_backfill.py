"""### Late-data backfill (hourly)

Folds the late events of each hour into the windowed aggregates, exactly once (`jobs/backfill.py`):
corrected windows get `revision + 1` and their `late_count`; windows with late rows only are inserted;
the late events are marked `reconciled`. A late row whose window is still open in the streaming job
waits for a later run. Re-running an interval changes nothing.

Tasks
1. `check_spark_connection`: the Spark connection exists (otherwise the provider would silently submit
   to YARN), and so do the jars the job needs (delta-spark: `.jvm/spark` from the set-up, or
   `AWM_JARS_DIR`). The default connection, `awm_spark_local`, is local mode; `AWM_SPARK_CONN_ID` names
   a cluster's.
2. `backfill`: `spark-submit --jars ... jobs/backfill.py` against that connection (local mode by default;
   a cluster master such as `spark://host:7077`, `yarn` or `k8s://...` submits the same job there).
3. `push_outcome` (always runs): pushes `awm_backfill_*` metrics to the Pushgateway, and fails the run
   if the backfill did not succeed.

Params: `tables`, `config` (the job's, for the window spec), `reports`, `pushgateway`. Settings:
`dags/pipeline_settings.py`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import dag, task
from airflow.timetables.interval import CronDataIntervalTimetable

from dags import pipeline_settings as settings

REPORT = "{{ params.reports }}/backfill/{{ data_interval_start.strftime('%Y%m%dT%H%M%SZ') }}.json"


@dag(
    dag_id="awm_late_data_backfill",
    schedule=CronDataIntervalTimetable("0 * * * *", timezone="UTC"),  # real data intervals
    start_date=settings.START,
    catchup=False,
    max_active_runs=1,
    default_args=settings.DEFAULT_ARGS,
    tags=[*settings.TAGS, "backfill", "late-data"],
    doc_md=__doc__,
    params=settings.location_params("folder for backfill reports"),
)
def awm_late_data_backfill() -> None:
    """Hourly late-data backfill (see the module docstring)."""

    @task
    def check_spark_connection() -> dict[str, str]:
        from airflow.sdk import BaseHook

        from jobs.spark import project_jars

        try:
            conn = BaseHook.get_connection(settings.SPARK_CONN_ID)
        except Exception as exc:  # AirflowNotFoundException; its module moves between Airflow versions
            msg = (
                f"the Spark connection {settings.SPARK_CONN_ID!r} is not defined ({exc}). Create it, e.g. "
                f"airflow connections add {settings.SPARK_CONN_ID} --conn-type spark --conn-host 'local[*]' "
                "(local) or --conn-host spark://HOST --conn-port 7077 (a cluster); or set "
                f"AIRFLOW_CONN_{settings.SPARK_CONN_ID.upper()}"
            )
            raise RuntimeError(msg) from None
        try:
            jars = ",".join(project_jars())
        except FileNotFoundError as exc:
            raise RuntimeError(str(exc)) from None
        master = f"{conn.conn_type}://{conn.host or ''}{':' + str(conn.port) if conn.port else ''}"
        return {"master": master, "jars": jars}

    submit = SparkSubmitOperator(
        task_id="backfill",
        conn_id=settings.SPARK_CONN_ID,
        application=str(settings.ROOT / "jobs" / "backfill.py"),
        name="awm-late-data-backfill",
        jars="{{ ti.xcom_pull(task_ids='check_spark_connection')['jars'] }}",
        application_args=[
            "--tables",
            "{{ params.tables }}",
            "--config",
            "{{ params.config }}",
            "--interval-start",
            "{{ data_interval_start.isoformat() }}",
            "--interval-end",
            "{{ data_interval_end.isoformat() }}",
            "--report",
            REPORT,
            "--run-id",
            "{{ run_id }}",
        ],
        conf={
            "spark.pyspark.python": settings.PYTHON,
            "spark.pyspark.driver.python": settings.PYTHON,
        },
        env_vars={
            "PYTHONPATH": str(settings.ROOT),
            "PATH": os.pathsep.join([str(Path(settings.PYTHON).parent), os.environ.get("PATH", "")]),
            "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"),
        },
    )

    @task(trigger_rule="all_done", retries=0)
    def push_outcome(report_path: str, **context: Any) -> dict[str, Any]:
        import json

        params, run_id = context["params"], context["run_id"]
        path = Path(report_path)
        report = json.loads(path.read_text()) if path.exists() else None
        ok = report is not None and report.get("run_id") == run_id
        values = None
        if ok:
            assert report is not None
            values = {
                "corrected_windows": report["corrected_windows"],
                "reconciled_events": report["reconciled_events"],
                "late_events_read": report["late_events_read"],
            }
        duration = float(report["seconds"]) if ok and report is not None else 0.0
        print(settings.push(params["pushgateway"], "backfill", ok=ok, values=values, duration_s=duration))
        if not ok:
            msg = f"the backfill of this interval did not succeed (no report of run {run_id} at {path})"
            raise RuntimeError(msg)
        assert report is not None
        return report

    check_spark_connection() >> submit >> push_outcome(REPORT)


awm_late_data_backfill()
