"""### Watermark threshold re-tuning (daily)

Runs the tuner on the last `history_hours` of the streaming job's arrival history (`jobs/retune.py`)
and publishes a new configuration version only when it is valid and better than the running one on that
history: it meets the late-rate target and the running setting misses it or is slower by at least
`min_gain`. The streaming job applies the new version at its next batch boundary. A report (JSON) and the
trade-off plot (PNG) are kept under `reports`; the outcome is pushed as `awm_tuning_*` metrics.

Params: `tables`, `config`, `reports`, `pushgateway`, `history_hours`, `target_late_pct` (empty: the
configuration's `late_slo_pct`), `strategies` (comma-separated; empty: all), `min_events`, `min_gain`.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import Param, dag, task
from airflow.timetables.interval import CronDataIntervalTimetable

from dags import pipeline_settings as settings


@dag(
    dag_id="awm_watermark_retuning",
    schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),  # real data intervals
    start_date=settings.START,
    catchup=False,
    max_active_runs=1,
    default_args=settings.DEFAULT_ARGS,
    tags=[*settings.TAGS, "tuning", "watermark"],
    doc_md=__doc__,
    params=settings.location_params("folder for re-tuning reports and plots")
    | {
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

    @task
    def retune(**context: Any) -> dict[str, Any]:
        import time

        from jobs.retune import RetuneOptions
        from jobs.retune import retune as run

        params = context["params"]
        options = RetuneOptions(
            tables=params["tables"],
            config=params["config"],
            reports=params["reports"],
            end_ms=int(context["data_interval_end"].timestamp() * 1000),
            history_ms=int(float(params["history_hours"]) * 3_600_000),
            target_late_pct=params["target_late_pct"],
            strategies=tuple(s for s in params["strategies"].split(",") if s) or None,
            min_events=int(params["min_events"]),
            min_gain=float(params["min_gain"]),
        )
        started = time.monotonic()
        try:
            outcome = run(options)
        except Exception:
            took = time.monotonic() - started
            print(settings.push(params["pushgateway"], "tuning", ok=False, values=None, duration_s=took))
            raise
        took = time.monotonic() - started
        print(f"{outcome.decision}: {outcome.reason}")
        print(f"report {outcome.report}, plot {outcome.plot}")
        values = outcome.metric_values()
        print(settings.push(params["pushgateway"], "tuning", ok=True, values=values, duration_s=took))
        return outcome.as_dict()

    retune()


awm_watermark_retuning()
