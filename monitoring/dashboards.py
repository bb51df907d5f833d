"""Grafana dashboards as code: an on-call overview and a watermark deep-dive, generated as JSON.

    python -m monitoring.dashboards --write    # regenerate infra/grafana/dashboards/*.json
    python -m monitoring.dashboards --check    # exit 1 if the committed files differ

Plain dicts in Grafana's dashboard JSON model (schema 39), no SDK. Each panel links to the runbooks of
the alerts whose metrics it shows (``docs/runbooks/``, base URL: ``AWM_RUNBOOK_BASE_URL``, see
:mod:`monitoring.rules`), and the alerts and runbooks link back to the dashboard. Configuration changes
(``awm_config_version`` moving) are annotations on every time series. Every query selects
``instance=~"$instance"`` so one Grafana serves several jobs; :func:`prometheus_queries` substitutes the
variables so that a test can run every panel's query through a real Prometheus's HTTP API.

Examples
--------
>>> boards = build_dashboards()
>>> sorted(boards)
['awm-overview.json', 'awm-watermark.json']
>>> all("$" not in expr for _, _, expr in prometheus_queries())
True

"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from monitoring.rules import all_alert_expressions, runbook_base, runbook_url

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD_DIR = ROOT / "infra" / "grafana" / "dashboards"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
#: What each Grafana variable becomes when a query goes straight to Prometheus.
SUBSTITUTIONS = {
    "$__rate_interval": "1m",
    "$__interval": "15s",
    "$__range": "1h",
    "$instance": ".*",
    "$partition": ".*",
}
I = 'instance=~"$instance"'  # noqa: E741 (the selector every query carries)
P = 'partition=~"$partition"'
VALID = 'outcome=~"on_time|straggler|late"'
RATE = "$__rate_interval"


@dataclass
class Panel:
    """One panel: kind, size, queries (expr, legend) and display settings."""

    title: str
    description: str
    targets: list[tuple[str, str]] = field(default_factory=list)
    kind: str = "timeseries"
    unit: str = "short"
    width: int = 12
    height: int = 8
    thresholds: list[tuple[float | None, str]] | None = None
    instant: bool = False
    content: str = ""  # text panels
    #: Series (by legend) whose unit differs from the panel's ``unit``.
    units: dict[str, str] = field(default_factory=dict)

    def model(self, panel_id: int, x: int, y: int) -> dict[str, Any]:
        """The panel's JSON model at grid position ``(x, y)``."""
        out: dict[str, Any] = {
            "id": panel_id,
            "type": self.kind,
            "title": self.title,
            "description": self.description,
            "gridPos": {"x": x, "y": y, "w": self.width, "h": self.height},
        }
        if self.kind == "text":
            out["options"] = {"mode": "markdown", "content": self.content}
            return out
        steps = [{"color": "green", "value": None}]
        if self.thresholds:
            steps = [{"color": color, "value": value} for value, color in self.thresholds]
        out["datasource"] = DATASOURCE
        out["fieldConfig"] = {
            "defaults": {"unit": self.unit, "thresholds": {"mode": "absolute", "steps": steps}},
            "overrides": [
                {"matcher": {"id": "byName", "options": name}, "properties": [{"id": "unit", "value": unit}]}
                for name, unit in sorted(self.units.items())
            ],
        }
        links = panel_runbooks(self.targets)
        if links:
            out["links"] = [
                {"title": f"Runbook: {name}", "url": runbook_url(name), "targetBlank": True} for name in links
            ]
        out["targets"] = [
            {
                "refId": chr(ord("A") + i),
                "datasource": DATASOURCE,
                "expr": expr,
                "legendFormat": legend,
                "instant": self.instant,
                "range": not self.instant,
                **({"format": "table"} if self.kind == "table" else {}),
            }
            for i, (expr, legend) in enumerate(self.targets)
        ]
        if self.kind == "stat":
            out["options"] = {
                "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                "colorMode": "background",
                "graphMode": "none",
                "textMode": "value",
            }
        elif self.kind == "timeseries":
            out["options"] = {
                "legend": {"displayMode": "list", "placement": "bottom"},
                "tooltip": {"mode": "multi"},
            }
        return out


def _layout(panels: list[Panel]) -> list[dict[str, Any]]:
    """Panels left to right on Grafana's 24-column grid, a new row when one is full."""
    out, x, y, row_height = [], 0, 0, 0
    for i, panel in enumerate(panels, start=1):
        if x + panel.width > 24:
            x, y, row_height = 0, y + row_height, 0
        out.append(panel.model(i, x, y))
        x += panel.width
        row_height = max(row_height, panel.height)
    return out


def _variables(partition: bool) -> list[dict[str, Any]]:
    variables: list[dict[str, Any]] = [
        {
            "name": "datasource",
            "label": "Prometheus",
            "type": "datasource",
            "query": "prometheus",
            "current": {},
        },
        {
            "name": "instance",
            "label": "Job instance",
            "type": "query",
            "datasource": DATASOURCE,
            "query": {"query": "label_values(awm_config_version, instance)", "refId": "instance"},
            "definition": "label_values(awm_config_version, instance)",
            "refresh": 2,
            "includeAll": True,
            "allValue": ".*",
            "multi": True,
            "current": {"text": "All", "value": "$__all"},
        },
    ]
    if partition:
        query = f"label_values(awm_partition_holds_back{{{I}}}, partition)"
        variables.append(
            {
                "name": "partition",
                "label": "Partition",
                "type": "query",
                "datasource": DATASOURCE,
                "query": {"query": query, "refId": "partition"},
                "definition": query,
                "refresh": 2,
                "includeAll": True,
                "allValue": ".*",
                "multi": True,
                "current": {"text": "All", "value": "$__all"},
            }
        )
    return variables


def _dashboard(
    uid: str, title: str, description: str, panels: list[Panel], partition: bool
) -> dict[str, Any]:
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["adaptive-watermarks", "streaming"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "editable": False,
        "graphTooltip": 1,
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "30s",
        "annotations": {"list": [CONFIG_ANNOTATION]},
        "links": [
            {
                "title": "Runbooks",
                "type": "link",
                "url": runbook_base() + "/",
                "icon": "doc",
                "targetBlank": True,
            }
        ],
        "templating": {"list": _variables(partition)},
        "panels": _layout(panels),
    }


#: Every configuration change (a new version applied, or refused) marked on the time series.
CONFIG_ANNOTATION: dict[str, Any] = {
    "name": "Configuration changes",
    "datasource": DATASOURCE,
    "enable": True,
    "iconColor": "purple",
    "expr": f"changes(max by (instance) (awm_config_version{{{I}}})[5m:1m]) > 0"
    f" or increase(awm_config_refused_total{{{I}}}[5m]) > 0",
    "step": "1m",
    "titleFormat": "configuration change on {{instance}}",
    "textFormat": "config version applied or refused (awm_config_version, awm_config_refused_total)",
}


def _metrics(expr: str) -> set[str]:
    """The ``awm_*`` metric names ``expr`` reads (label values such as ``job="awm_job"`` are not)."""
    return set(re.findall(r'(?<![\w"])(awm_[a-z0-9_]+)(?![\w"])', expr))


def _base_metric(name: str) -> str:
    return re.sub(r"_(bucket|count|sum)$", "", name)


def panel_runbooks(targets: list[tuple[str, str]]) -> list[str]:
    """Alerts (sorted) reading a metric some query of the panel reads: the panel links their runbooks."""
    shown = {_base_metric(m) for expr, _ in targets for m in _metrics(expr)}
    return sorted(
        name
        for name, expr in all_alert_expressions().items()
        if shown & {_base_metric(m) for m in _metrics(expr)}
    )


#: The DAGs pushing their outcome (``awm_<task>_last_run_ok``).
BATCH_TASKS = ("backfill", "quality", "tuning", "maintenance")


def _ratio(outcome: str, window: str) -> str:
    return (
        f'sum(rate(awm_events_total{{{I}, outcome="{outcome}"}}[{window}]))'
        f" / sum(rate(awm_events_total{{{I}, {VALID}}}[{window}]))"
    )


def _quantile(q: float, histogram: str) -> str:
    return f"histogram_quantile({q}, sum by (le) (rate({histogram}_bucket{{{I}}}[{RATE}])))"


STUCK_OR_LATE = """**Is the data late, or is the system stuck?**

* **Event-time lag up, processing-time lag flat:** the data is delayed or out of order (or the watermark is
  conservative). The job keeps up; results come later. Usually a ticket, not a page.
* **Both up:** the system is stuck or overloaded: a batch hangs or batches are too slow. Page.
* **Idle input:** both stay flat (the event-time lag is measured against the ingestion clock, which stops
  with the input).

Runbooks: `docs/runbooks/` in the repository, one per alert."""


def overview() -> dict[str, Any]:
    """The on-call overview."""
    panels = [
        Panel(
            "Job up",
            "Whether Prometheus can scrape the streaming job (1 = up).",
            [(f'min(up{{job="awm_job", {I}}})', "up")],
            "stat",
            "none",
            4,
            4,
            [(None, "red"), (1, "green")],
        ),
        Panel(
            "Query failures",
            "Streaming queries that ended with an error in the last hour (the job keeps serving its metrics "
            "until Prometheus has scraped the failure).",
            [(f"sum(max_over_time(awm_query_terminated_with_error_total{{{I}}}[1h]))", "failures")],
            "stat",
            "short",
            4,
            4,
            [(None, "green"), (1, "red")],
        ),
        Panel(
            "Last batch",
            "Seconds since the job last completed a micro-batch (grows on idle input too).",
            [(f"time() - max(awm_last_batch_timestamp_seconds{{{I}}})", "age")],
            "stat",
            "s",
            4,
            4,
        ),
        Panel(
            "Event-time lag",
            "Latest arrival time read minus the global event-time watermark: how far results trail the data.",
            [(f'max(awm_event_time_watermark_lag_seconds{{{I}, clock="ingestion"}})', "lag")],
            "stat",
            "s",
            4,
            4,
            [(None, "green"), (300, "orange"), (600, "red")],
        ),
        Panel(
            "Processing-time lag",
            "How long the oldest input taken up but not yet processed has waited (0 when caught up).",
            [(f"max(awm_processing_time_watermark_lag_seconds{{{I}}})", "lag")],
            "stat",
            "s",
            4,
            4,
            [(None, "green"), (60, "orange"), (300, "red")],
        ),
        Panel(
            "Late rate (5m)",
            "Share of valid events that missed the watermark over the last 5 minutes.",
            [(_ratio("late", "5m"), "late")],
            "stat",
            "percentunit",
            4,
            4,
            [(None, "green"), (0.01, "orange"), (0.05, "red")],
        ),
        Panel(
            "Config version",
            "Version of the watermark configuration in force.",
            [(f"max(awm_config_version{{{I}}})", "version")],
            "stat",
            "none",
            4,
            4,
        ),
        Panel(
            "Late data or stuck system?",
            "How to read the two lags side by side.",
            kind="text",
            width=8,
            height=8,
            content=STUCK_OR_LATE,
        ),
        Panel(
            "Event-time lag and processing-time lag",
            "Event-time watermark lag against the ingestion clock, and the processing-time watermark lag.",
            [
                (f'max(awm_event_time_watermark_lag_seconds{{{I}, clock="ingestion"}})', "event-time lag"),
                (f"max(awm_processing_time_watermark_lag_seconds{{{I}}})", "processing-time lag"),
            ],
            unit="s",
            width=16,
        ),
        Panel(
            "Events by outcome",
            "Input rows per second: on time, straggler (on time, close to the watermark), late, quarantined.",
            [(f"sum by (outcome) (rate(awm_events_total{{{I}}}[{RATE}]))", "{{outcome}}")],
            unit="short",
        ),
        Panel(
            "Late rate against the SLO",
            "Late share of valid events, with the configuration's late-rate SLO.",
            [(_ratio("late", RATE), "late rate"), (f"max(awm_late_slo_ratio{{{I}}})", "SLO")],
            unit="percentunit",
        ),
        Panel(
            "Window emit latency",
            "Ingestion time at which a window fired minus the window's end (windows the watermark closed).",
            [
                (_quantile(0.5, "awm_window_emit_latency_seconds"), "p50"),
                (_quantile(0.99, "awm_window_emit_latency_seconds"), "p99"),
            ],
            unit="s",
        ),
        Panel(
            "Quarantined rows",
            "Rows per second going to the quarantine table (malformed or out-of-range records).",
            [(f'sum(rate(awm_events_total{{{I}, outcome="quarantined"}}[{RATE}]))', "quarantined")],
            unit="short",
        ),
        Panel(
            "Batch duration",
            "Micro-batch duration from Spark's StreamingQueryListener.",
            [
                (_quantile(0.5, "awm_batch_duration_seconds"), "p50"),
                (_quantile(0.99, "awm_batch_duration_seconds"), "p99"),
            ],
            unit="s",
        ),
        Panel(
            "Rows per batch",
            "Mean input rows per micro-batch (valid or not).",
            [
                (
                    f"sum(rate(awm_batch_input_rows_sum{{{I}}}[{RATE}]))"
                    f" / sum(rate(awm_batch_input_rows_count{{{I}}}[{RATE}]))",
                    "rows",
                )
            ],
            unit="short",
        ),
    ]
    return _dashboard(
        "awm-overview",
        "Adaptive watermarks: overview",
        "On-call view: is the job healthy, is data late or is the system stuck.",
        panels,
        partition=False,
    )


def watermark_deep_dive() -> dict[str, Any]:
    """Per-partition watermarks, the adaptive generator, latencies, configuration, backfill and tuning."""
    tasks = 'job="awm_batch_tasks"'
    panels = [
        Panel(
            "Event-time watermarks",
            "Each partition's watermark and the global one (the minimum over active partitions).",
            [
                (
                    f"max by (partition) (awm_partition_event_time_watermark_seconds{{{I}, {P}}}) * 1000",
                    "{{partition}}",
                ),
                (f"max(awm_event_time_watermark_seconds{{{I}}}) * 1000", "global"),
            ],
            unit="dateTimeAsIso",
        ),
        Panel(
            "Watermark lag per partition",
            "Latest arrival time read minus each partition's watermark.",
            [
                (
                    "max by (partition) (awm_partition_event_time_watermark_lag_seconds"
                    f'{{{I}, {P}, clock="ingestion"}})',
                    "{{partition}}",
                )
            ],
            unit="s",
        ),
        Panel(
            "Holding the watermark back",
            "The partition whose watermark is the global one now.",
            [(f"max by (partition) (awm_partition_holds_back{{{I}}}) == 1", "{{partition}}")],
            "table",
            "none",
            8,
            8,
            instant=True,
        ),
        Panel(
            "Hold-back distance",
            "Fastest active partition's watermark minus the global watermark.",
            [(f"max(awm_watermark_holdback_seconds{{{I}}})", "hold-back")],
            unit="s",
            width=8,
        ),
        Panel(
            "Active partitions",
            "1 = takes part in the global watermark; 0 = idle (beyond the idle timeout).",
            [(f"max by (partition) (awm_partition_active{{{I}, {P}}})", "{{partition}}")],
            unit="none",
            width=8,
        ),
        Panel(
            "Learned delay",
            "Delay each partition's generator has learned (adaptive) or is set to (periodic).",
            [(f"max by (partition) (awm_learned_delay_seconds{{{I}, {P}}})", "{{partition}}")],
            unit="s",
            width=8,
        ),
        Panel(
            "Adaptive sensitivity",
            "ADWIN sensitivity (delta) of each partition's adaptive generator; lowered after late-heavy "
            "drifts.",
            [(f"max by (partition) (awm_adaptive_sensitivity{{{I}, {P}}})", "{{partition}}")],
            unit="none",
            width=8,
        ),
        Panel(
            "Drifts (last hour)",
            "Changes in the arrival-delay distribution ADWIN detected, per partition.",
            [(f"sum by (partition) (increase(awm_adaptive_drifts_total{{{I}, {P}}}[1h]))", "{{partition}}")],
            unit="short",
            width=8,
        ),
        Panel(
            "Late and straggler rates against the SLO",
            "Late and straggler shares of valid events, with the late-rate SLO.",
            [
                (_ratio("late", RATE), "late"),
                (_ratio("straggler", RATE), "straggler"),
                (f"max(awm_late_slo_ratio{{{I}}})", "SLO"),
            ],
            unit="percentunit",
        ),
        Panel(
            "Emit latency quantiles",
            "Window emit latency (ingestion time at fire minus window end).",
            [
                (_quantile(q, "awm_window_emit_latency_seconds"), f"p{round(q * 100)}")
                for q in (0.5, 0.9, 0.99)
            ],
            unit="s",
        ),
        Panel(
            "Trigger delay quantiles",
            "Watermark at fire minus window end.",
            [
                (_quantile(q, "awm_window_trigger_delay_seconds"), f"p{round(q * 100)}")
                for q in (0.5, 0.9, 0.99)
            ],
            unit="s",
        ),
        Panel(
            "Open windows",
            "Windows holding on-time rows and not yet closed by the watermark.",
            [(f"sum(awm_open_windows{{{I}}})", "open")],
            unit="short",
        ),
        Panel(
            "Configuration versions",
            "Version of the watermark configuration in force, its strategy, and versions the job refused "
            "(invalid, not newer, or a window change) in the last 15 minutes.",
            [
                (f"max(awm_config_version{{{I}}})", "version"),
                (f"max by (strategy) (awm_config_info{{{I}}})", "{{strategy}}"),
                (f"sum(increase(awm_config_refused_total{{{I}}}[15m]))", "refused (15 min)"),
            ],
            unit="none",
        ),
        Panel(
            "DAG outcomes",
            "Whether the last run of each DAG succeeded (1) or failed (0), as pushed by dags/outcome.py: "
            "backfill, data quality, tuning, table maintenance.",
            [(f"min(awm_{task}_last_run_ok{{{tasks}}})", task) for task in BATCH_TASKS],
            unit="bool_yes_no",
            width=8,
        ),
        Panel(
            "Backfill corrections",
            "What the last successful late-data backfill did.",
            [
                (f"max(awm_backfill_corrected_windows{{{tasks}}})", "windows corrected"),
                (f"max(awm_backfill_reconciled_events{{{tasks}}})", "late events reconciled"),
            ],
            unit="short",
        ),
        Panel(
            "Backfill health",
            "Seconds since the last successful backfill, and whether the last run succeeded (1).",
            [
                (
                    f"time() - max(awm_backfill_last_success_timestamp_seconds{{{tasks}}})",
                    "since last success",
                ),
                (f"min(awm_backfill_last_run_ok{{{tasks}}})", "last run ok"),
            ],
            unit="s",
            units={"last run ok": "bool_yes_no"},
            width=8,
        ),
        Panel(
            "Tuning results",
            "Whether the last tuning run published a new version, the version it left in force, whether it "
            "succeeded, and the time since the last success.",
            [
                (f"max(awm_tuning_published{{{tasks}}})", "published"),
                (f"max(awm_tuning_config_version{{{tasks}}})", "config version"),
                (f"min(awm_tuning_last_run_ok{{{tasks}}})", "last run ok"),
                (
                    f"time() - max(awm_tuning_last_success_timestamp_seconds{{{tasks}}})",
                    "since last success",
                ),
            ],
            unit="none",
            units={"last run ok": "bool_yes_no", "since last success": "s"},
            width=8,
        ),
        Panel(
            "Tuning: chosen against running setting",
            "Mean emit latency on the tuning history of the chosen and the running setting, and the chosen "
            "setting's late share.",
            [
                (f"max(awm_tuning_emit_latency_seconds{{{tasks}}})", "chosen emit latency"),
                (f"max(awm_tuning_running_emit_latency_seconds{{{tasks}}})", "running emit latency"),
                (f"max(awm_tuning_dropped_ratio{{{tasks}}})", "chosen late share"),
            ],
            unit="s",
            units={"chosen late share": "percentunit"},
            width=8,
        ),
    ]
    return _dashboard(
        "awm-watermark",
        "Adaptive watermarks: watermark deep-dive",
        "Per-partition watermarks, the adaptive generator, latencies, configuration, backfill and tuning.",
        panels,
        partition=True,
    )


def build_dashboards() -> dict[str, dict[str, Any]]:
    """File name -> dashboard JSON model."""
    return {"awm-overview.json": overview(), "awm-watermark.json": watermark_deep_dive()}


def _panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def panel_queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """``(panel title, expr)`` of every target of every panel."""
    return [(p["title"], t["expr"]) for p in _panels(dashboard) for t in p.get("targets", [])]


def annotation_queries() -> list[tuple[str, str, str]]:
    """``(dashboard uid, annotation name, expr)`` of every annotation query, variables substituted."""
    return [
        (board["uid"], a["name"], substitute(a["expr"]))
        for board in build_dashboards().values()
        for a in board["annotations"]["list"]
        if "expr" in a
    ]


def substitute(expr: str) -> str:
    """``expr`` with Grafana's variables replaced as :data:`SUBSTITUTIONS` says (longest names first)."""
    for name in sorted(SUBSTITUTIONS, key=len, reverse=True):
        expr = expr.replace(name, SUBSTITUTIONS[name])
    if re.search(r"\$\w", expr):
        msg = f"unknown variable left in {expr!r}"
        raise ValueError(msg)
    return expr


def prometheus_queries() -> list[tuple[str, str, str]]:
    """``(dashboard uid, panel title, expr)`` with every variable substituted, for Prometheus's HTTP API."""
    return [
        (board["uid"], title, substitute(expr))
        for board in build_dashboards().values()
        for title, expr in panel_queries(board)
    ]


def render(board: dict[str, Any]) -> str:
    """The committed form: sorted keys, two-space indent, trailing newline."""
    return json.dumps(board, indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write or check the committed dashboards."""
    parser = argparse.ArgumentParser(
        prog="python -m monitoring.dashboards", description=__doc__.splitlines()[0]
    )
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true")
    mode.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    stale = []
    for name, board in build_dashboards().items():
        path = DASHBOARD_DIR / name
        if args.write:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(render(board))
            print(f"wrote {path.relative_to(ROOT)}")
        elif not path.exists() or path.read_text() != render(board):
            stale.append(name)
    if stale:
        print(
            f"out of date (run python -m monitoring.dashboards --write): {', '.join(stale)}", file=sys.stderr
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
