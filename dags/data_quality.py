"""### Data quality (hourly, at half past)

Great Expectations suites on the pipeline's Delta tables (`jobs/quality.py`): `aggregates` (keys not
null, window end after start, counts positive, revisions and late counts non-negative, one row per
window), `late_events`, `quarantine` (reasons from the known set) and the conservation of counts across
tables after reconciliation. A broken expectation fails the task at once (no retry: the data would not
change); its log and error list each one with its table, the rule, how many rows break it and examples.

Runs at half past the hour, after the hourly backfill. Params: `tables`, `config` (sliding windows skip
the one-window-per-late-row total).
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import Param, dag, task

from dags import pipeline_settings as settings


@dag(
    dag_id="awm_data_quality",
    schedule="30 * * * *",
    start_date=settings.START,
    catchup=False,
    max_active_runs=1,
    default_args=settings.DEFAULT_ARGS,
    tags=[*settings.TAGS, "data-quality"],
    doc_md=__doc__,
    params={
        "tables": Param(settings.TABLES, type="string", description="the streaming job's --output"),
        "config": Param(settings.CONFIG, type="string", description="the job's --config (window spec)"),
    },
)
def awm_data_quality() -> None:
    """Hourly data-quality checks (see the module docstring)."""

    @task
    def check_tables(**context: Any) -> dict[str, Any]:
        import os

        from airflow.sdk.exceptions import AirflowFailException

        from jobs.quality import check_tables
        from watermark.config import load_config

        params = context["params"]
        sliding = False
        if os.path.exists(params["config"]):
            window = load_config(params["config"]).window
            sliding = window.slide_ms is not None and window.slide_ms != window.window_ms
        report = check_tables(params["tables"], sliding=sliding)
        print(report.summary())
        if not report.success:  # the data will not change by retrying: fail at once
            raise AirflowFailException(report.summary())
        return report.as_dict()

    check_tables()


awm_data_quality()
