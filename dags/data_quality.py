"""### Data quality (after each backfill)

Great Expectations suites on the pipeline's Delta tables (`jobs/batch/quality.py`): `aggregates` (keys not
null, window end after start, counts positive, revisions and late counts non-negative, one row per
window), `late_events`, `quarantine` (reasons from the known set) and the conservation of counts across
tables after reconciliation. A broken expectation fails the task at once (no retry: the data would not
change); its log and error list each one with its table, the rule, how many rows break it and examples.

**Scheduled on the Assets** `awm_aggregates` and `awm_late_events`: it runs when the backfill DAG has
updated them, and checks **that backfill's data interval only** (named by the Asset events; several
events: from the earliest start to the latest end), with every read pushed down to the files. A manual run
checks `interval_start`..`interval_end` (ISO-8601 or epoch ms; a time without a zone is UTC, as everywhere
in the pipeline), or the hour before its logical date, or with `whole_tables` every row.

**Results stay.** Each run's validation results and Data Docs are kept in a Great Expectations Data
Context under the tables' storage, `<tables>/_quality/gx/` (one Checkpoint per suite; the last
`awm_quality_keep_runs` runs, default 200: eight days of hourly runs). The task log, the failure message
and the XCom (`return_value`; `report` on a failure) name the run's Data Docs page of each failed suite
and the index;
`python -m jobs.batch.quality TABLES --history 10` lists the last runs with what failed.

The outcome is pushed as `awm_quality_*` (alert `AwmDataQualityFailing`) by `dags/outcome.py`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.sdk import Param, dag, task

from dags import outcome
from dags import pipeline_settings as settings

#: The Variable giving how many runs' results the quality store keeps (default: 200).
KEEP_RUNS_VARIABLE = "awm_quality_keep_runs"


@dag(
    dag_id="awm_data_quality",
    schedule=[settings.AGGREGATES, settings.LATE_EVENTS],
    start_date=settings.START,
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(minutes=30),
    default_args=settings.default_args("quality"),
    on_failure_callback=outcome.PushOutcome("quality"),
    tags=[*settings.TAGS, "data-quality"],
    doc_md=__doc__,
    params=settings.location_params()
    | {
        "interval_start": Param("", type="string", description="manual runs: start (ISO-8601, no zone: UTC)"),
        "interval_end": Param("", type="string", description="manual runs: end, exclusive (no zone: UTC)"),
        "whole_tables": Param(False, type="boolean", description="check every row, not one interval"),
    },
)
def awm_data_quality() -> None:
    """Data-quality checks of each backfilled interval (see the module docstring)."""

    @task(execution_timeout=timedelta(minutes=2))
    def settings_(**context: Any) -> dict[str, str]:
        return settings.resolve_run(context)

    @task(execution_timeout=timedelta(minutes=20))
    def check_tables(resolved: dict[str, str], **context: Any) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowFailException

        from jobs.batch.quality import check_tables
        from watermark.config import load_config

        sliding, window_ms = False, None
        if settings.object_path(resolved["config"]).exists():
            window = load_config(resolved["config"]).window
            sliding = window.slide_ms is not None and window.slide_ms != window.window_ms
            window_ms = window.window_ms
        interval, tables = checked_interval(context)
        tables = tables or resolved["tables"]
        report = check_tables(
            tables,
            sliding=sliding,
            interval=interval,
            window_ms=window_ms,
            run_name=context["run_id"],
            keep_runs=keep_runs(),
        )
        print(report.summary())
        print(report.data_docs())  # where on-call opens this run's results
        values = {
            "expectations": report.expectations,
            "failed_expectations": len(report.failures),
            "rows_checked": sum(report.rows.values()),
        }
        result = report.as_dict() | {"interval": list(interval) if interval else None}
        if not report.success:  # the data will not change by retrying: fail at once
            context["ti"].xcom_push(key="report", value=result)  # its Data Docs pages, in the UI's XCom tab
            msg = f"{report.summary()}\n{report.data_docs()}"
            raise AirflowFailException(msg)
        print(
            outcome.report_outcome("quality", ok=True, context=context, values=values, see=report.docs_index)
        )
        return result

    check_tables(settings_.override(task_id="settings")())


def keep_runs() -> int:
    """Runs whose results the store keeps (Variable ``awm_quality_keep_runs``, an integer >= 1)."""
    from airflow.sdk import Variable
    from airflow.sdk.exceptions import AirflowFailException

    from jobs.batch.quality_store import DEFAULT_KEEP_RUNS

    text = str(Variable.get(KEEP_RUNS_VARIABLE, default=str(DEFAULT_KEEP_RUNS))).strip()
    if not text.isdigit() or int(text) < 1:
        msg = f"the Variable {KEEP_RUNS_VARIABLE} must be an integer >= 1 (runs kept), got {text!r}"
        raise AirflowFailException(msg)
    return int(text)


def checked_interval(context: Any) -> tuple[tuple[int, int] | None, str | None]:
    """The interval to check (epoch ms; None: whole tables) and the tables the Asset events name."""
    from datetime import datetime, timedelta

    from watermark.streams.timeparse import instant_ms

    params = context["params"]
    if params.get("whole_tables"):
        return None, None
    events = [e for evs in (context.get("triggering_asset_events") or {}).values() for e in evs]
    extras = [e.extra for e in events if e.extra and "interval_start_ms" in e.extra]
    if extras:
        start = min(int(x["interval_start_ms"]) for x in extras)
        end = max(int(x["interval_end_ms"]) for x in extras)
        return (start, end), str(extras[-1].get("tables") or "") or None
    if params.get("interval_start") and params.get("interval_end"):
        return (instant_ms(params["interval_start"]), instant_ms(params["interval_end"])), None
    end_at = context["logical_date"] or datetime.now().astimezone()
    start_at = end_at - timedelta(hours=1)
    return (int(start_at.timestamp() * 1000), int(end_at.timestamp() * 1000)), None


awm_data_quality()
