"""### Late-data backfill (hourly)

Folds the late events of each hour into the windowed aggregates, exactly once (`jobs/batch/backfill.py`):
corrected windows get `revision + 1` and their `late_count`; windows with late rows only are inserted;
the late events are marked `reconciled`. A late row whose window is still open in the streaming job
waits for a later run. Re-running an interval changes nothing.

Tasks
1. `settings`: the tables, configuration and Spark's Python, from the run's params or the Airflow
   Variables (`dags/pipeline_settings.py`), passed on by XCom.
2. `check_spark_connection`: the Spark connection `awm_spark` exists (otherwise the provider would
   silently submit to YARN), and so do the jars the job needs (delta-spark).
3. `backfill`: `spark-submit --jars ... jobs/batch/backfill.py` against that connection (local mode, or a
   cluster master such as `spark://host:7077`, `yarn` or `k8s://...`). Its report goes to the tables'
   own storage (`<tables>/_reports/backfill/`), not to a worker's disk.
4. `publish`: checks the report is this run's, pushes `awm_backfill_*` to the Pushgateway and updates the
   Assets `awm_aggregates` and `awm_late_events` (their event names the interval): the data-quality DAG
   runs on them.

Every task has an `execution_timeout`, the run a `dagrun_timeout`; a failure anywhere is pushed by the
notifier of `dags/outcome.py` (alert `AwmBackfillFailing`).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.sdk import CronDataIntervalTimetable, dag, task

from dags import outcome
from dags import pipeline_settings as settings

REPORT = settings.report_path("backfill")


@dag(
    dag_id="awm_late_data_backfill",
    schedule=CronDataIntervalTimetable("0 * * * *", timezone="UTC"),  # real data intervals
    start_date=settings.START,
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(minutes=55),  # before the next hour's run
    default_args=settings.default_args("backfill"),
    on_failure_callback=outcome.PushOutcome("backfill"),
    tags=[*settings.TAGS, "backfill", "late-data"],
    doc_md=__doc__,
    params=settings.location_params(),
)
def awm_late_data_backfill() -> None:
    """Hourly late-data backfill (see the module docstring)."""

    @task(execution_timeout=timedelta(minutes=2))
    def settings_(**context: Any) -> dict[str, str]:
        return settings.resolve_run(context)

    @task(execution_timeout=timedelta(minutes=2))
    def check_spark_connection() -> dict[str, str]:
        return settings.check_spark_connection()

    submit = settings.spark_job(
        "backfill",
        "backfill.py",
        "awm-late-data-backfill",
        [
            "--tables",
            settings.xcom("tables"),
            "--config",
            settings.xcom("config"),
            "--interval-start",
            "{{ data_interval_start.isoformat() }}",
            "--interval-end",
            "{{ data_interval_end.isoformat() }}",
        ],
        timedelta(minutes=45),
    )

    @task(
        retries=0,
        execution_timeout=timedelta(minutes=2),
        outlets=[settings.AGGREGATES, settings.LATE_EVENTS],
    )
    def publish(report_path: str, **context: Any) -> dict[str, Any]:
        run_id = context["run_id"]
        report = settings.read_report(report_path, run_id, "the backfill of this interval")
        values = {
            "corrected_windows": report["corrected_windows"],
            "reconciled_events": report["reconciled_events"],
            "late_events_read": report["late_events_read"],
        }
        print(outcome.report_outcome("backfill", ok=True, values=values, duration_s=float(report["seconds"])))
        tables = settings.tables_of_report(report_path)
        extra = {
            "tables": tables,
            "interval_start_ms": report["interval_start_ms"],
            "interval_end_ms": report["interval_end_ms"],
            "through_batch": report["through_batch"],
            "run_id": run_id,
        }
        for asset in (settings.AGGREGATES, settings.LATE_EVENTS):
            context["outlet_events"][asset].extra = extra
        return report

    resolved = settings_.override(task_id="settings")()
    resolved >> check_spark_connection() >> submit >> publish(REPORT)


awm_late_data_backfill()
