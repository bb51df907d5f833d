"""### Delta table maintenance (daily)

Keeps the pipeline's Delta tables fast to read and bounded on disk (`jobs/batch/maintenance.py`), submitted
with `spark-submit` like the backfill. Its work follows what was written since its last run, not the tables'
age (every table is partitioned by a UTC date):

1. `arrivals` retention: the dates (`arrival_date`) that ended more than `awm_arrivals_retain_days`
   (Variable, default 30) ago are dropped, from the Delta log alone (a delete on the partition column
   rewrites no file);
2. `OPTIMIZE` only the dates written since the last run (found in the Delta commits since the version the
   last run handled, kept in `<tables>/_maintenance/optimized.json`): the stream's small per-batch files
   are compacted and Z-ordered by the columns its readers filter on (window start and batch for
   `aggregates`, ingestion time for `arrivals`, ...); other dates' files are left as they are;
3. `VACUUM ... LITE` with `awm_vacuum_retain_hours` (Variable, default 168: Delta's 7 days, also the floor:
   a lower retention fails the run unless the Variable `awm_vacuum_allow_below_floor` is `true`, and is
   then logged as a warning each run): the files to delete come from the Delta log, not from a listing.
   Retentions and Spark's Python are Variables only: a run's conf may give only the DAG's Params
   (`tables`, `config`).

A table created before its date partition (an older version's `arrivals`, `quarantine`, `watermark_log`)
is optimized whole and its expired arrivals deleted row by row, with a warning naming the migration
(`python -m jobs.batch.maintenance --tables ... --migrate-layout`, streaming job stopped).

No row changes except the expired arrivals. The report goes to `<tables>/_reports/maintenance/`, and
`publish` pushes `awm_maintenance_*` (files before and after, files vacuumed, arrivals deleted); a failure
or a timeout is pushed by `dags/outcome.py` (alert `AwmMaintenanceFailing`).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.sdk import CronDataIntervalTimetable, dag, task

from dags import outcome
from dags import pipeline_settings as settings

REPORT = settings.report_path("maintenance")


@dag(
    dag_id="awm_table_maintenance",
    schedule=CronDataIntervalTimetable("30 3 * * *", timezone="UTC"),  # daily, off the hour
    start_date=settings.START,
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(hours=4),
    default_args=settings.default_args("maintenance"),
    on_failure_callback=outcome.PushOutcome("maintenance"),
    tags=[*settings.TAGS, "maintenance", "delta"],
    doc_md=__doc__,
    params=settings.location_params(),
)
def awm_table_maintenance() -> None:
    """Daily table maintenance (see the module docstring)."""

    @task(execution_timeout=timedelta(minutes=2))
    def settings_(**context: Any) -> dict[str, str]:
        return settings.resolve_run(context)

    @task(execution_timeout=timedelta(minutes=2))
    def check_spark_connection() -> dict[str, str]:
        return settings.check_spark_connection()

    submit = settings.spark_job(
        "maintenance",
        "maintenance.py",
        "awm-table-maintenance",
        [
            "--tables",
            settings.xcom("tables"),
            "--retain-hours",
            settings.xcom("vacuum_retain_hours"),
            "--arrivals-retain-days",
            settings.xcom("arrivals_retain_days"),
        ],
        timedelta(hours=3),
    )

    @task(retries=0, execution_timeout=timedelta(minutes=2))
    def publish(report_path: str, **context: Any) -> dict[str, Any]:
        report = settings.read_report(report_path, context["run_id"], "the maintenance")
        tables = report["tables"].values()
        vacuumed = sum(max(0, t["files_on_disk_before"] - t["files_on_disk_after"]) for t in tables)
        values = {
            "files_before": sum(t["files_before"] for t in tables),
            "files_after": sum(t["files_after"] for t in tables),
            "files_vacuumed": vacuumed,
            "arrivals_deleted": report["tables"].get("arrivals", {}).get("rows_deleted", 0),
        }
        took = float(report["seconds"])
        print(outcome.report_outcome("maintenance", ok=True, values=values, duration_s=took))
        return report

    resolved = settings_.override(task_id="settings")()
    resolved >> check_spark_connection() >> submit >> publish(REPORT)


awm_table_maintenance()
