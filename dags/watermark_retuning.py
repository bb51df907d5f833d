"""### Watermark threshold re-tuning (daily)

Runs the tuner on the last `history_hours` of the streaming job's arrival history (`jobs/batch/retune.py`)
and publishes a new configuration version only when it is valid and better than the running one on that
history: it meets the late-rate target and the running setting misses it or is slower by at least
`min_gain`. The streaming job applies the new version at its next batch boundary. A report (JSON) and the
trade-off plot (PNG) are kept under `reports` (Variable `awm_reports`); the outcome is passed by XCom
and pushed as `awm_tuning_*` metrics by `dags/outcome.py` (a failure or a timeout too: alert
`AwmTuningFailing`).

The report says whether the choice carries over: the tuner chooses on the history but its latest fifth,
preferring a setting that keeps the target on each of four sub-periods, then replays the choice on the
held-out fifth; `tuning` and `evaluation` give its late share, mean emit latency and ratio to the best fixed
delay on each (on the held-out fifth that delay is chosen with hindsight), `running_evaluation` the running
setting's there. A candidate is replayed on at most 240,000 arrivals (contiguous blocks of the sub-periods)
in one process per core, so the `retune` task (timeout 1 h) re-tunes a day of 10 million arrivals in
bounded time and memory (`benchmarks/tuner_scale.py`).

Params (empty: the Airflow Variables of `dags/pipeline_settings.py`): `tables`, `config`, `reports`,
`history_hours`, `target_late_pct` (empty: the
configuration's `late_slo_pct`), `strategies` (comma-separated; empty: all), `min_events`, `min_gain`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.sdk import CronDataIntervalTimetable, Param, dag, task

from dags import outcome
from dags import pipeline_settings as settings


@dag(
    dag_id="awm_watermark_retuning",
    schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),  # real data intervals
    start_date=settings.START,
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(hours=3),
    default_args=settings.default_args("tuning"),
    on_failure_callback=outcome.PushOutcome("tuning"),
    tags=[*settings.TAGS, "tuning", "watermark"],
    doc_md=__doc__,
    params=settings.location_params()
    | {
        "reports": Param("", type="string", description="reports and plots; empty: Variable awm_reports"),
        "history_hours": Param(24, type="number", exclusiveMinimum=0, description="history to tune on"),
        "target_late_pct": Param(
            None, type=["null", "number"], minimum=0, maximum=100, description="empty: the config's SLO"
        ),
        "strategies": Param("", type="string", description="comma-separated; empty: every strategy"),
        "min_events": Param(1_000, type="integer", minimum=1, description="skip with less history"),
        "min_gain": Param(0.02, type="number", minimum=0, maximum=1, description="required improvement"),
    },
)
def awm_watermark_retuning() -> None:
    """Daily re-tuning (see the module docstring)."""

    @task(execution_timeout=timedelta(minutes=2))
    def settings_(**context: Any) -> dict[str, str]:
        return settings.resolve_run(context)

    @task(execution_timeout=timedelta(hours=1))
    def retune(resolved: dict[str, str], **context: Any) -> dict[str, Any]:
        import time

        from jobs.batch.retune import RetuneOptions
        from jobs.batch.retune import retune as run

        params = context["params"]
        options = RetuneOptions(
            tables=resolved["tables"],
            config=resolved["config"],
            reports=resolved["reports"],
            end_ms=int(context["data_interval_end"].timestamp() * 1000),
            history_ms=int(float(params["history_hours"]) * 3_600_000),
            target_late_pct=params["target_late_pct"],
            strategies=tuple(s for s in params["strategies"].split(",") if s) or None,
            min_events=int(params["min_events"]),
            min_gain=float(params["min_gain"]),
        )
        started = time.monotonic()
        result = run(options)  # a failure or a timeout is pushed by the DAG's notifier
        took = time.monotonic() - started
        print(f"{result.decision}: {result.reason}")
        print(f"report {result.report}, plot {result.plot}")
        values = result.metric_values()
        print(outcome.report_outcome("tuning", ok=True, values=values, duration_s=took))
        return result.as_dict()

    retune(settings_.override(task_id="settings")())


awm_watermark_retuning()
