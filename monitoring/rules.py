"""Prometheus recording and alert rules for the job, generated from one spec.

    python -m monitoring.rules --write    # regenerate infra/prometheus/{recording,alert}_rules.yml
    python -m monitoring.rules --check    # exit 1 if the committed files differ from this spec
    python -m monitoring.rules --write --runbook-base URL --grafana-url URL   # links of your deployment

Runbook and dashboard links are settings: ``--runbook-base`` (or ``AWM_RUNBOOK_BASE_URL``) is where
``docs/runbooks/`` is served, ``--grafana-url`` (or ``AWM_GRAFANA_URL``) the Grafana holding the
dashboards; each alert's annotations carry ``runbook_url`` and ``dashboard_url`` (the dashboard showing
its metrics), and each runbook links back to that dashboard.

Every alert has a severity (``page``: someone acts now; ``ticket``: next working day), a ``pipeline``
label (``stream``, or the DAG's task: ``backfill``, ``quality``, ``tuning``, ``maintenance``; Alertmanager
groups and inhibits by it, ``infra/alertmanager/``), a summary, a description and a runbook
(``docs/runbooks/<alert>.md``). Expressions are templates over named thresholds,
so a test can render the same rules with thresholds and ``for`` durations scaled to seconds.

The rules tell delayed data from a stuck system the way Streaming Systems (chapter 3) does: the event-time
watermark lag (measured against the ingestion clock, the latest arrival time read, so that idle input does
not grow it) rises in both cases; the processing-time watermark lag only when the job itself is behind.
Idle input fires nothing: no rate, no lag growth, no stall (a stall needs input flowing).

Examples
--------
>>> sorted(all_alert_expressions())[:3]
['AwmBackfillFailing', 'AwmBackfillOverdue', 'AwmBatchOutcomeAbsent']
>>> all_alert_expressions()["AwmProcessingTimeLagHigh"]
'max by (job, instance) (awm_processing_time_watermark_lag_seconds) > 300'

"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
RULES_DIR = ROOT / "infra" / "prometheus"
#: Defaults of the link settings (the committed files use them).
DEFAULT_RUNBOOK_BASE = "https://github.com/adaptive-watermarks/adaptive-watermarks/blob/main/docs/runbooks"
DEFAULT_GRAFANA_URL = "http://127.0.0.1:3000"


def runbook_base() -> str:
    """Where ``docs/runbooks/`` is served: ``AWM_RUNBOOK_BASE_URL``, else :data:`DEFAULT_RUNBOOK_BASE`."""
    return (os.environ.get("AWM_RUNBOOK_BASE_URL") or DEFAULT_RUNBOOK_BASE).rstrip("/")


def grafana_url() -> str:
    """The Grafana serving the dashboards: ``AWM_GRAFANA_URL``, else :data:`DEFAULT_GRAFANA_URL`."""
    return (os.environ.get("AWM_GRAFANA_URL") or DEFAULT_GRAFANA_URL).rstrip("/")


#: Production thresholds (seconds, ratios, PromQL ranges).
THRESHOLDS: dict[str, float | str] = {
    "rate_window": "5m",  # range of rate() in alert expressions
    "stall_window": "10m",  # the watermark must move within this range while input flows
    "event_time_lag_s": 600,  # data-time lag of the global watermark (ingestion clock)
    "processing_lag_s": 300,  # oldest unprocessed input waiting this long = stuck
    "holdback_s": 300,  # slowest partition this far behind the fastest active one
    "quarantine_ratio": 0.05,  # share of input quarantined
    "quarantine_min_rate": 1,  # quarantined rows per second, so a handful of bad rows pages no one
    "backfill_overdue_s": 3 * 3600,  # hourly DAG: three missed runs
    "tuning_overdue_s": 2 * 86400,  # daily DAG: two missed runs
    "config_refused_window": "15m",  # a refused configuration version stays visible this long
    "hourly_outcome_window": "3h",  # no outcome of an hourly DAG (backfill, data quality) pushed in this long
    "daily_outcome_window": "2d",  # no outcome of a daily DAG (tuning, maintenance) pushed in this long
}
#: The same rules at a test's scale (seconds), for a live run against a real Prometheus.
TEST_THRESHOLDS: dict[str, float | str] = {
    **THRESHOLDS,
    "rate_window": "30s",
    "stall_window": "8s",
    "processing_lag_s": 60,
    "holdback_s": 5,
}
#: Alerts a partition falling silent (while the others keep sending) must fire.
SILENT_PARTITION_ALERTS = ("AwmPartitionHoldingBackWatermark", "AwmWatermarkStalled")

VALID = 'outcome=~"on_time|straggler|late"'


@dataclass(frozen=True)
class Alert:
    """One alert rule; ``expr`` is a template over :data:`THRESHOLDS` names."""

    name: str
    severity: str  # page | ticket
    expr: str
    for_: str
    summary: str
    description: str
    #: The part of the pipeline it concerns (Alertmanager groups and inhibits by it): ``stream`` for the
    #: streaming job, the task's name for a DAG's (``{{ $labels.task }}`` where one rule covers several).
    pipeline: str = "stream"

    def render(self, thresholds: Mapping[str, float | str]) -> str:
        """The PromQL expression with ``thresholds`` filled in."""
        return self.expr.format(**{k: _fmt(v) for k, v in thresholds.items()})


def _fmt(value: float | str) -> str:
    if isinstance(value, str):
        return value
    return f"{value:g}"


ALERTS: tuple[Alert, ...] = (
    Alert(
        "AwmJobDown",
        "page",
        'up{{job="awm_job"}} == 0',
        "2m",
        "The streaming job's metrics endpoint is down",
        "Prometheus cannot scrape {{{{ $labels.instance }}}}: the job is not running, or is wedged before "
        "serving. Nothing is being aggregated.",
    ),
    Alert(
        "AwmStreamingQueryFailed",
        "page",
        # max_over_time, not increase(): a job that fails before its first scrape has one sample only. The
        # job exits after a failure (a restart counts from 0), and serves until the failure is scraped.
        "max_over_time(awm_query_terminated_with_error_total[{rate_window}]) > 0",
        "0m",
        "The streaming query ended with an error",
        "Spark's streaming query on {{{{ $labels.instance }}}} terminated with an exception; no batch runs "
        "until it is restarted from its checkpoint.",
    ),
    Alert(
        "AwmWatermarkStalled",
        "page",
        "(changes(awm_event_time_watermark_seconds[{stall_window}]) == 0)"
        " and on (job, instance) (increase(awm_input_rows_total[{stall_window}]) > 0)",
        "5m",
        "Input flows but the event-time watermark does not move",
        "Rows keep arriving on {{{{ $labels.instance }}}} but the global watermark has not advanced for "
        "{stall_window}: windows stop firing. Usually one partition has gone silent without being declared "
        "idle (see awm_partition_holds_back), or its event times stopped advancing.",
    ),
    Alert(
        "AwmEventTimeLagHigh",
        "ticket",
        'max by (job, instance) (awm_event_time_watermark_lag_seconds{{clock="ingestion"}})'
        " > {event_time_lag_s}",
        "10m",
        "The event-time watermark lags the ingestion clock",
        "The watermark is {{{{ $value | humanizeDuration }}}} behind the latest arrival time read: results "
        "are emitted late. If the processing-time lag is low too, the data is delayed (or the watermark is "
        "conservative), not the system.",
    ),
    Alert(
        "AwmProcessingTimeLagHigh",
        "page",
        "max by (job, instance) (awm_processing_time_watermark_lag_seconds) > {processing_lag_s}",
        "5m",
        "The job is stuck or falling behind its input",
        "The oldest input not yet processed has waited {{{{ $value | humanizeDuration }}}}: the system, not "
        "the data, is late (a batch hangs, or batches take longer than input arrives).",
    ),
    Alert(
        "AwmLateRateOverSlo",
        "ticket",
        f'sum by (job, instance) (rate(awm_events_total{{{{outcome="late"}}}}[{{rate_window}}]))'
        f" / sum by (job, instance) (rate(awm_events_total{{{{{VALID}}}}}[{{rate_window}}]))"
        " > on (job, instance) max by (job, instance) (awm_late_slo_ratio)",
        "10m",
        "Late events exceed the late-rate SLO",
        "{{{{ $value | humanizePercentage }}}} of valid events are late (missed the watermark) on "
        "{{{{ $labels.instance }}}}, above the configuration's SLO. The backfill reconciles them, but "
        "results are revised afterwards.",
    ),
    Alert(
        "AwmPartitionHoldingBackWatermark",
        "ticket",
        "(awm_partition_holds_back == 1) * on (job, instance) group_left () awm_watermark_holdback_seconds"
        " > {holdback_s}",
        "10m",
        "Partition {{{{ $labels.partition }}}} holds the watermark back",
        "The global watermark is {{{{ $value | humanizeDuration }}}} behind the fastest active partition "
        "because partition {{{{ $labels.partition }}}} is slow or silent.",
    ),
    Alert(
        "AwmQuarantineSpike",
        "ticket",
        'sum by (job, instance) (rate(awm_events_total{{outcome="quarantined"}}[{rate_window}]))'
        " > {quarantine_ratio} * sum by (job, instance) (rate(awm_events_total[{rate_window}]))"
        ' and sum by (job, instance) (rate(awm_events_total{{outcome="quarantined"}}[{rate_window}]))'
        " > {quarantine_min_rate}",
        "5m",
        "Many input rows are quarantined",
        "{{{{ $value | humanize }}}} rows/s go to the quarantine table on {{{{ $labels.instance }}}}: a "
        "producer sends malformed or out-of-range records.",
    ),
    Alert(
        "AwmBackfillFailing",
        "ticket",
        'awm_backfill_last_run_ok{{job="awm_batch_tasks"}} == 0',
        "0m",
        "The late-data backfill failed",
        "The last backfill run failed; late events stay unreconciled and aggregates unrevised until one "
        "succeeds.",
        pipeline="backfill",
    ),
    Alert(
        "AwmBackfillOverdue",
        "ticket",
        'time() - awm_backfill_last_success_timestamp_seconds{{job="awm_batch_tasks"}}'
        " > {backfill_overdue_s}",
        "0m",
        "No successful late-data backfill for too long",
        "The last successful backfill ended {{{{ $value | humanizeDuration }}}} ago.",
        pipeline="backfill",
    ),
    Alert(
        "AwmDataQualityFailing",
        "ticket",
        'awm_quality_last_run_ok{{job="awm_batch_tasks"}} == 0',
        "0m",
        "A data-quality check failed",
        "The last data-quality run of a backfilled interval failed (broken expectations, an error or a "
        "timeout): its task log lists each broken expectation with examples.",
        pipeline="quality",
    ),
    Alert(
        "AwmMaintenanceFailing",
        "ticket",
        'awm_maintenance_last_run_ok{{job="awm_batch_tasks"}} == 0',
        "0m",
        "Delta table maintenance failed",
        "The last OPTIMIZE / VACUUM / retention run failed; small files and old versions accumulate until "
        "one succeeds.",
        pipeline="maintenance",
    ),
    Alert(
        "AwmConfigRefused",
        "ticket",
        "increase(awm_config_refused_total[{config_refused_window}]) > 0",
        "0m",
        "The streaming job refused a configuration version",
        "{{{{ $labels.instance }}}} refused a published watermark configuration (invalid, not newer, or a "
        "window change) and keeps running the previous version.",
    ),
    Alert(
        "AwmBatchOutcomeAbsent",
        "ticket",
        'absent_over_time(awm_backfill_last_run_timestamp_seconds{{job="awm_batch_tasks", task="backfill"}}'
        "[{hourly_outcome_window}])"
        ' or absent_over_time(awm_quality_last_run_timestamp_seconds{{job="awm_batch_tasks", task="quality"}}'
        "[{hourly_outcome_window}])"
        ' or absent_over_time(awm_tuning_last_run_timestamp_seconds{{job="awm_batch_tasks", task="tuning"}}'
        "[{daily_outcome_window}])"
        " or absent_over_time(awm_maintenance_last_run_timestamp_seconds"
        '{{job="awm_batch_tasks", task="maintenance"}}[{daily_outcome_window}])',
        "0m",
        "A DAG's outcome is not reaching Prometheus",
        "No {{{{ $labels.task }}}} outcome has been scraped from the Pushgateway for a whole schedule "
        "window: the DAG is paused or not running, its Pushgateway connection is missing, or the "
        "Pushgateway lost its state.",
        pipeline="{{ $labels.task }}",
    ),
    Alert(
        "AwmTuningFailing",
        "ticket",
        'awm_tuning_last_run_ok{{job="awm_batch_tasks"}} == 0',
        "0m",
        "Watermark threshold tuning failed",
        "The last tuning run failed; the job keeps its current configuration.",
        pipeline="tuning",
    ),
    Alert(
        "AwmTuningOverdue",
        "ticket",
        'time() - awm_tuning_last_success_timestamp_seconds{{job="awm_batch_tasks"}} > {tuning_overdue_s}',
        "0m",
        "No successful watermark tuning for too long",
        "The last successful tuning run ended {{{{ $value | humanizeDuration }}}} ago.",
        pipeline="tuning",
    ),
)

#: Recording rules the dashboards and ad-hoc queries can reuse.
RECORDING_RULES: dict[str, str] = {
    "awm:input_rows:rate5m": "sum by (job, instance) (rate(awm_input_rows_total[5m]))",
    "awm:late_ratio:rate5m": (
        'sum by (job, instance) (rate(awm_events_total{outcome="late"}[5m]))'
        f" / sum by (job, instance) (rate(awm_events_total{{{VALID}}}[5m]))"
    ),
    "awm:straggler_ratio:rate5m": (
        'sum by (job, instance) (rate(awm_events_total{outcome="straggler"}[5m]))'
        f" / sum by (job, instance) (rate(awm_events_total{{{VALID}}}[5m]))"
    ),
    "awm:quarantine_ratio:rate5m": (
        'sum by (job, instance) (rate(awm_events_total{outcome="quarantined"}[5m]))'
        " / sum by (job, instance) (rate(awm_events_total[5m]))"
    ),
    "awm:window_emit_latency_seconds:p50_5m": (
        "histogram_quantile(0.5, sum by (job, instance, le)"
        " (rate(awm_window_emit_latency_seconds_bucket[5m])))"
    ),
    "awm:window_emit_latency_seconds:p99_5m": (
        "histogram_quantile(0.99, sum by (job, instance, le)"
        " (rate(awm_window_emit_latency_seconds_bucket[5m])))"
    ),
    "awm:batch_duration_seconds:p99_5m": (
        "histogram_quantile(0.99, sum by (job, instance, le) (rate(awm_batch_duration_seconds_bucket[5m])))"
    ),
}


def runbook_url(name: str, base: str | None = None) -> str:
    """Where an alert's runbook lives (``base``: the runbook base URL setting)."""
    return f"{(base or runbook_base()).rstrip('/')}/{name}.md"


#: The dashboard each alert's metrics are on (its ``dashboard_url``; the runbooks link to it too).
ALERT_DASHBOARDS: dict[str, str] = {
    "AwmPartitionHoldingBackWatermark": "awm-watermark",
    "AwmWatermarkStalled": "awm-watermark",
    "AwmBackfillFailing": "awm-watermark",
    "AwmBackfillOverdue": "awm-watermark",
    "AwmTuningFailing": "awm-watermark",
    "AwmTuningOverdue": "awm-watermark",
    "AwmDataQualityFailing": "awm-watermark",
    "AwmMaintenanceFailing": "awm-watermark",
    "AwmBatchOutcomeAbsent": "awm-watermark",
    "AwmConfigRefused": "awm-watermark",
}


def dashboard_uid(alert: str) -> str:
    """The uid of the dashboard showing ``alert``'s metrics (``awm-overview`` unless said otherwise)."""
    return ALERT_DASHBOARDS.get(alert, "awm-overview")


def dashboard_url(alert: str, grafana: str | None = None) -> str:
    """Link to the dashboard showing ``alert``'s metrics (``grafana``: the Grafana URL setting)."""
    return f"{(grafana or grafana_url()).rstrip('/')}/d/{dashboard_uid(alert)}"


def all_alert_expressions(thresholds: Mapping[str, float | str] | None = None) -> dict[str, str]:
    """Alert name -> PromQL expression."""
    values = {**THRESHOLDS, **(thresholds or {})}
    return {a.name: a.render(values) for a in ALERTS}


def all_recording_rules() -> dict[str, str]:
    """Recorded series name -> PromQL expression."""
    return dict(RECORDING_RULES)


def render_alert_rules(
    for_override: str | None = None,
    thresholds: Mapping[str, float | str] | None = None,
    annotations: bool = True,
    runbooks: str | None = None,
    grafana: str | None = None,
) -> str:
    """The alert rule file; ``for_override`` replaces every ``for`` duration (tests).

    ``annotations=False`` leaves the annotations out (same expressions, durations and labels): the
    ``promtool`` unit tests run against that variant, since promtool compares annotations verbatim and
    they hold rendered values.
    """
    values = {**THRESHOLDS, **(thresholds or {})}
    fill = {k: _fmt(v) for k, v in values.items()}
    rules = []
    for alert in ALERTS:
        rule: dict[str, object] = {
            "alert": alert.name,
            "expr": alert.render(values),
            "for": for_override or alert.for_,
            "labels": {"severity": alert.severity, "pipeline": alert.pipeline},
        }
        if annotations:
            rule["annotations"] = {
                "summary": alert.summary.format(**fill),
                "description": alert.description.format(**fill),
                "runbook_url": runbook_url(alert.name, runbooks),
                "dashboard_url": dashboard_url(alert.name, grafana),
            }
        rules.append(rule)
    doc = {"groups": [{"name": "awm-alerts", "rules": rules}]}
    return _HEADER + yaml.safe_dump(doc, sort_keys=False, width=100)


def render_recording_rules() -> str:
    """The recording rule file."""
    rules = [{"record": name, "expr": expr} for name, expr in RECORDING_RULES.items()]
    doc = {"groups": [{"name": "awm-recording", "rules": rules}]}
    return _HEADER + yaml.safe_dump(doc, sort_keys=False, width=100)


_HEADER = "# Generated by `python -m monitoring.rules --write` from monitoring/rules.py; do not edit.\n"

FILES = {
    "alert_rules.yml": render_alert_rules,
    "recording_rules.yml": render_recording_rules,
    "tests/alert_rules_without_annotations.yml": lambda: render_alert_rules(annotations=False),
}


def main(argv: list[str] | None = None) -> int:
    """Write or check the committed rule files."""
    parser = argparse.ArgumentParser(prog="python -m monitoring.rules", description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="regenerate the rule files")
    mode.add_argument("--check", action="store_true", help="exit 1 if a committed file differs")
    parser.add_argument("--runbook-base", help="URL of docs/runbooks/ (default: $AWM_RUNBOOK_BASE_URL)")
    parser.add_argument("--grafana-url", help="Grafana's URL (default: $AWM_GRAFANA_URL)")
    args = parser.parse_args(argv)
    if args.runbook_base:
        os.environ["AWM_RUNBOOK_BASE_URL"] = args.runbook_base
    if args.grafana_url:
        os.environ["AWM_GRAFANA_URL"] = args.grafana_url
    stale = []
    for name, render in FILES.items():
        path = RULES_DIR / name
        text = render()
        if args.write:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
        elif not path.exists() or path.read_text() != text:
            stale.append(str(path.relative_to(ROOT)))
    if stale:
        print(f"out of date (run python -m monitoring.rules --write): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
