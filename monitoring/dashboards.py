"""Grafana dashboards as code: an on-call overview and a watermark deep-dive, generated as JSON.

    python -m monitoring.dashboards --write    # regenerate infra/grafana/dashboards/*.json
    python -m monitoring.dashboards --check    # exit 1 if the committed files differ

Built with Grafana's ``grafana-foundation-sdk`` (the build for Grafana 11.6, dashboard schema 41): its
dashboard, panel (stat, time series, table, text), Prometheus query, variable, annotation, link, override and
threshold builders, serialized by its JSON encoder. Panels are placed on the grid here (the SDK's automatic
placement does not wrap a panel that would overflow the row). The SDK's schema lacks a few fields Grafana
reads, so two small subclasses use its documented extension route (a type with its own ``to_json`` and a
builder for it): the annotation's Prometheus fields (``step``, ``titleFormat``, ``textFormat``) and the
query variables' ``definition``. Each panel links to the runbooks of the alerts whose metrics it shows
(``docs/runbooks/``, base URL: ``AWM_RUNBOOK_BASE_URL``, see :mod:`monitoring.rules`), and the alerts and
runbooks link back to the dashboard. Configuration changes (``awm_config_version`` moving) are annotations
on every time series. Every query selects ``instance=~"$instance"`` so one Grafana serves several jobs;
:func:`prometheus_queries` substitutes the variables so that a test can run every panel's query through a
real Prometheus's HTTP API.

Examples
--------
>>> boards = build_dashboards()
>>> sorted(boards)
['awm-overview.json', 'awm-watermark.json']
>>> boards["awm-overview.json"]["schemaVersion"]
41
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
from typing import Any, TypeVar, cast

from grafana_foundation_sdk.builders import common as common_builder
from grafana_foundation_sdk.builders import dashboard as dashboard_builder
from grafana_foundation_sdk.builders import prometheus, stat, table, text, timeseries
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common, units
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models.prometheus import PromQueryFormat
from grafana_foundation_sdk.models.text import TextMode

from monitoring.rules import all_alert_expressions, runbook_base, runbook_url

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD_DIR = ROOT / "infra" / "grafana" / "dashboards"
DATASOURCE = model.DataSourceRef(type_val="prometheus", uid="${datasource}")
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

#: The panel builders that show Prometheus queries.
DataPanel = TypeVar("DataPanel", stat.Panel, timeseries.Panel, table.Panel)


@dataclass
class Panel:
    """One panel: kind, size, queries (expr, legend) and display settings."""

    title: str
    description: str
    targets: list[tuple[str, str]] = field(default_factory=list)
    kind: str = "timeseries"
    unit: str = units.Short
    width: int = 12
    height: int = 8
    thresholds: list[tuple[float | None, str]] | None = None
    instant: bool = False
    content: str = ""  # text panels
    #: Series (by legend) whose unit differs from the panel's ``unit``.
    units: dict[str, str] = field(default_factory=dict)

    def builder(self, panel_id: int, x: int, y: int) -> Builder[model.Panel]:
        """The SDK builder of the panel at grid position ``(x, y)``."""
        if self.kind == "text":
            return (
                text.Panel()
                .id(panel_id)
                .title(self.title)
                .description(self.description)
                .grid_pos(model.GridPos(h=self.height, w=self.width, x=x, y=y))
                .mode(TextMode.MARKDOWN)
                .content(self.content)
            )
        if self.kind == "stat":
            return self._data_panel(
                stat.Panel()
                .reduce_options(
                    common_builder.ReduceDataOptions().calcs(["lastNotNull"]).fields("").values(False)
                )
                .color_mode(common.BigValueColorMode.BACKGROUND)
                .graph_mode(common.BigValueGraphMode.NONE)
                .text_mode(common.BigValueTextMode.VALUE),
                panel_id,
                x,
                y,
            )
        if self.kind == "table":
            return self._data_panel(table.Panel(), panel_id, x, y)
        if self.kind == "timeseries":
            return self._data_panel(
                timeseries.Panel()
                .legend(
                    common_builder.VizLegendOptions()
                    .display_mode(common.LegendDisplayMode.LIST)
                    .placement(common.LegendPlacement.BOTTOM)
                    .show_legend(True)
                )
                .tooltip(
                    common_builder.VizTooltipOptions()
                    .mode(common.TooltipDisplayMode.MULTI)
                    .sort(common.SortOrder.NONE)
                ),
                panel_id,
                x,
                y,
            )
        msg = f"unknown panel kind {self.kind!r}"
        raise ValueError(msg)

    def _data_panel(self, panel: DataPanel, panel_id: int, x: int, y: int) -> DataPanel:
        """``panel`` with what every panel showing queries carries: queries, unit, thresholds, runbooks."""
        steps = [
            model.Threshold(value=value, color=color) for value, color in self.thresholds or [(None, "green")]
        ]
        panel = (
            panel.id(panel_id)
            .title(self.title)
            .description(self.description)
            .grid_pos(model.GridPos(h=self.height, w=self.width, x=x, y=y))
            .datasource(DATASOURCE)
            .unit(self.unit)
            .thresholds(dashboard_builder.ThresholdsConfig().mode(model.ThresholdsMode.ABSOLUTE).steps(steps))
            .overrides(
                [
                    dashboard_builder.DashboardFieldConfigSourceOverrides()
                    .matcher(model.MatcherConfig(id_val="byName", options=name))
                    .properties([model.DynamicConfigValue(id_val="unit", value=unit)])
                    for name, unit in sorted(self.units.items())
                ]
            )
            .targets([self._query(i, expr, legend) for i, (expr, legend) in enumerate(self.targets)])
        )
        links = panel_runbooks(self.targets)
        if links:
            panel = panel.links(
                [
                    dashboard_builder.DashboardLink(f"Runbook: {name}")
                    .url(runbook_url(name))
                    .target_blank(True)
                    for name in links
                ]
            )
        return panel

    def _query(self, index: int, expr: str, legend: str) -> prometheus.Dataquery:
        query = (
            prometheus.Dataquery()
            .ref_id(chr(ord("A") + index))
            .datasource(DATASOURCE)
            .expr(expr)
            .legend_format(legend)
        )
        query = query.instant() if self.instant else query.range()
        return query.format(PromQueryFormat.TABLE) if self.kind == "table" else query


def _layout(panels: list[Panel]) -> list[Builder[model.Panel]]:
    """Panels left to right on Grafana's 24-column grid, a new row when the next one does not fit."""
    out, x, y, row_height = [], 0, 0, 0
    for i, panel in enumerate(panels, start=1):
        if x + panel.width > 24:
            x, y, row_height = 0, y + row_height, 0
        out.append(panel.builder(i, x, y))
        x += panel.width
        row_height = max(row_height, panel.height)
    return out


class _AnnotationQueryModel(model.AnnotationQuery):
    """The SDK's annotation model plus fields its schema lacks (the data source's own, e.g. Prometheus's)."""

    def __init__(self, raw: dict[str, object]) -> None:
        super().__init__()
        self.raw = raw

    def to_json(self) -> dict[str, object]:
        return super().to_json() | self.raw


class PrometheusAnnotationQuery(dashboard_builder.AnnotationQuery):
    """The SDK's annotation builder, with Prometheus's ``step``, ``titleFormat`` and ``textFormat``."""

    def __init__(self, step: str, title_format: str, text_format: str) -> None:
        super().__init__()
        self._internal = _AnnotationQueryModel(
            {"step": step, "titleFormat": title_format, "textFormat": text_format}
        )


class _QueryVariableModel(model.VariableModel):
    """The SDK's variable model plus ``definition`` (the query as the variable list shows it)."""

    def __init__(self, name: str, definition: str) -> None:
        super().__init__(type_val=model.VariableType.QUERY, name=name)
        self.definition = definition

    def to_json(self) -> dict[str, object]:
        return super().to_json() | {"definition": self.definition}


class QueryVariable(dashboard_builder.QueryVariable):
    """The SDK's query variable builder, recording the query as its ``definition`` too."""

    def __init__(self, name: str, query: str) -> None:
        super().__init__(name)
        self._internal = _QueryVariableModel(name, query)
        self.query({"query": query, "refId": name})


def _query_variable(name: str, label: str, query: str) -> QueryVariable:
    """A multi-value variable over the label values ``query`` lists, "All" (``.*``) by default."""
    return (
        QueryVariable(name, query)
        .label(label)
        .datasource(DATASOURCE)
        .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .include_all(True)
        .all_value(".*")
        .multi(True)
        .current(model.VariableOption(text="All", value="$__all"))
    )


def _variables(partition: bool) -> list[Builder[model.VariableModel]]:
    variables: list[Builder[model.VariableModel]] = [
        dashboard_builder.DatasourceVariable("datasource").label("Prometheus").type("prometheus"),
        _query_variable("instance", "Job instance", "label_values(awm_config_version, instance)"),
    ]
    if partition:
        query = f"label_values(awm_partition_holds_back{{{I}}}, partition)"
        variables.append(_query_variable("partition", "Partition", query))
    return variables


def _dashboard(
    uid: str, title: str, description: str, panels: list[Panel], partition: bool
) -> model.Dashboard:
    board = (
        dashboard_builder.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(["adaptive-watermarks", "streaming"])
        .timezone(common.TimeZoneBrowser)
        .version(1)
        .readonly()
        .tooltip(model.DashboardCursorSync.CROSSHAIR)
        .time("now-1h", "now")
        .refresh("30s")
        .annotation(config_annotation())
        .link(
            dashboard_builder.DashboardLink("Runbooks")
            .type(model.DashboardLinkType.LINK)
            .url(runbook_base() + "/")
            .icon("doc")
            .target_blank(True)
        )
        .variables(_variables(partition))
    )
    for panel in _layout(panels):
        board = board.with_panel(panel)
    return board.build()


#: Every configuration change (a new version applied, or refused) marked on the time series.
CONFIG_ANNOTATION_EXPR = (
    f"changes(max by (instance) (awm_config_version{{{I}}})[5m:1m]) > 0"
    f" or increase(awm_config_refused_total{{{I}}}[5m]) > 0"
)


def config_annotation() -> PrometheusAnnotationQuery:
    """The configuration-change annotation (a new version applied, or refused)."""
    return (
        PrometheusAnnotationQuery(
            step="1m",
            title_format="configuration change on {{instance}}",
            text_format="config version applied or refused (awm_config_version, awm_config_refused_total)",
        )
        .name("Configuration changes")
        .datasource(DATASOURCE)
        .enable(True)
        .icon_color("purple")
        .expr(CONFIG_ANNOTATION_EXPR)
    )


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


def overview() -> model.Dashboard:
    """The on-call overview."""
    panels = [
        Panel(
            "Job up",
            "Whether Prometheus can scrape the streaming job (1 = up).",
            [(f'min(up{{job="awm_job", {I}}})', "up")],
            "stat",
            units.NoUnit,
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
            units.Short,
            4,
            4,
            [(None, "green"), (1, "red")],
        ),
        Panel(
            "Last batch",
            "Seconds since the job last completed a micro-batch (grows on idle input too).",
            [(f"time() - max(awm_last_batch_timestamp_seconds{{{I}}})", "age")],
            "stat",
            units.Seconds,
            4,
            4,
        ),
        Panel(
            "Event-time lag",
            "Latest arrival time read minus the global event-time watermark: how far results trail the data.",
            [(f'max(awm_event_time_watermark_lag_seconds{{{I}, clock="ingestion"}})', "lag")],
            "stat",
            units.Seconds,
            4,
            4,
            [(None, "green"), (300, "orange"), (600, "red")],
        ),
        Panel(
            "Processing-time lag",
            "How long the oldest input taken up but not yet processed has waited (0 when caught up).",
            [(f"max(awm_processing_time_watermark_lag_seconds{{{I}}})", "lag")],
            "stat",
            units.Seconds,
            4,
            4,
            [(None, "green"), (60, "orange"), (300, "red")],
        ),
        Panel(
            "Late rate (5m)",
            "Share of valid events that missed the watermark over the last 5 minutes.",
            [(_ratio("late", "5m"), "late")],
            "stat",
            units.PercentUnit,
            4,
            4,
            [(None, "green"), (0.01, "orange"), (0.05, "red")],
        ),
        Panel(
            "Config version",
            "Version of the watermark configuration in force.",
            [(f"max(awm_config_version{{{I}}})", "version")],
            "stat",
            units.NoUnit,
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
            unit=units.Seconds,
            width=16,
        ),
        Panel(
            "Events by outcome",
            "Input rows per second: on time, straggler (on time, close to the watermark), late, quarantined.",
            [(f"sum by (outcome) (rate(awm_events_total{{{I}}}[{RATE}]))", "{{outcome}}")],
            unit=units.Short,
        ),
        Panel(
            "Late rate against the SLO",
            "Late share of valid events, with the configuration's late-rate SLO.",
            [(_ratio("late", RATE), "late rate"), (f"max(awm_late_slo_ratio{{{I}}})", "SLO")],
            unit=units.PercentUnit,
        ),
        Panel(
            "Window emit latency",
            "Ingestion time at which a window fired minus the window's end (windows the watermark closed).",
            [
                (_quantile(0.5, "awm_window_emit_latency_seconds"), "p50"),
                (_quantile(0.99, "awm_window_emit_latency_seconds"), "p99"),
            ],
            unit=units.Seconds,
        ),
        Panel(
            "Quarantined rows",
            "Rows per second going to the quarantine table (malformed or out-of-range records).",
            [(f'sum(rate(awm_events_total{{{I}, outcome="quarantined"}}[{RATE}]))', "quarantined")],
            unit=units.Short,
        ),
        Panel(
            "Batch duration",
            "Micro-batch duration from Spark's StreamingQueryListener.",
            [
                (_quantile(0.5, "awm_batch_duration_seconds"), "p50"),
                (_quantile(0.99, "awm_batch_duration_seconds"), "p99"),
            ],
            unit=units.Seconds,
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
            unit=units.Short,
        ),
    ]
    return _dashboard(
        "awm-overview",
        "Adaptive watermarks: overview",
        "On-call view: is the job healthy, is data late or is the system stuck.",
        panels,
        partition=False,
    )


def watermark_deep_dive() -> model.Dashboard:
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
            unit=units.DatetimeISO,
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
            unit=units.Seconds,
        ),
        Panel(
            "Holding the watermark back",
            "The partition whose watermark is the global one now.",
            [(f"max by (partition) (awm_partition_holds_back{{{I}}}) == 1", "{{partition}}")],
            "table",
            units.NoUnit,
            8,
            8,
            instant=True,
        ),
        Panel(
            "Hold-back distance",
            "Fastest active partition's watermark minus the global watermark.",
            [(f"max(awm_watermark_holdback_seconds{{{I}}})", "hold-back")],
            unit=units.Seconds,
            width=8,
        ),
        Panel(
            "Active partitions",
            "1 = takes part in the global watermark; 0 = idle (beyond the idle timeout).",
            [(f"max by (partition) (awm_partition_active{{{I}, {P}}})", "{{partition}}")],
            unit=units.NoUnit,
            width=8,
        ),
        Panel(
            "Learned delay",
            "Delay each partition's generator has learned (adaptive) or is set to (periodic).",
            [(f"max by (partition) (awm_learned_delay_seconds{{{I}, {P}}})", "{{partition}}")],
            unit=units.Seconds,
            width=8,
        ),
        Panel(
            "Adaptive sensitivity",
            "ADWIN sensitivity (delta) of each partition's adaptive generator; lowered after late-heavy "
            "drifts.",
            [(f"max by (partition) (awm_adaptive_sensitivity{{{I}, {P}}})", "{{partition}}")],
            unit=units.NoUnit,
            width=8,
        ),
        Panel(
            "Drifts (last hour)",
            "Changes in the arrival-delay distribution ADWIN detected, per partition.",
            [(f"sum by (partition) (increase(awm_adaptive_drifts_total{{{I}, {P}}}[1h]))", "{{partition}}")],
            unit=units.Short,
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
            unit=units.PercentUnit,
        ),
        Panel(
            "Emit latency quantiles",
            "Window emit latency (ingestion time at fire minus window end).",
            [
                (_quantile(q, "awm_window_emit_latency_seconds"), f"p{round(q * 100)}")
                for q in (0.5, 0.9, 0.99)
            ],
            unit=units.Seconds,
        ),
        Panel(
            "Trigger delay quantiles",
            "Watermark at fire minus window end.",
            [
                (_quantile(q, "awm_window_trigger_delay_seconds"), f"p{round(q * 100)}")
                for q in (0.5, 0.9, 0.99)
            ],
            unit=units.Seconds,
        ),
        Panel(
            "Open windows",
            "Windows holding on-time rows and not yet closed by the watermark.",
            [(f"sum(awm_open_windows{{{I}}})", "open")],
            unit=units.Short,
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
            unit=units.NoUnit,
        ),
        Panel(
            "DAG outcomes",
            "Whether the last run of each DAG succeeded (1) or failed (0), as pushed by dags/outcome.py: "
            "backfill, data quality, tuning, table maintenance.",
            [(f"min(awm_{task}_last_run_ok{{{tasks}}})", task) for task in BATCH_TASKS],
            unit=units.BoolYesNo,
            width=8,
        ),
        Panel(
            "Backfill corrections",
            "What the last successful late-data backfill did.",
            [
                (f"max(awm_backfill_corrected_windows{{{tasks}}})", "windows corrected"),
                (f"max(awm_backfill_reconciled_events{{{tasks}}})", "late events reconciled"),
            ],
            unit=units.Short,
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
            unit=units.Seconds,
            units={"last run ok": units.BoolYesNo},
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
            unit=units.NoUnit,
            units={"last run ok": units.BoolYesNo, "since last success": units.Seconds},
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
            unit=units.Seconds,
            units={"chosen late share": units.PercentUnit},
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


def build_models() -> dict[str, model.Dashboard]:
    """File name -> the SDK's dashboard model."""
    return {"awm-overview.json": overview(), "awm-watermark.json": watermark_deep_dive()}


def build_dashboards() -> dict[str, dict[str, Any]]:
    """File name -> dashboard JSON model (as the SDK's JSON encoder writes it)."""
    return {
        name: cast(dict[str, Any], json.loads(JSONEncoder().encode(board)))
        for name, board in build_models().items()
    }


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


def render(board: dict[str, Any] | model.Dashboard) -> str:
    """The committed form, by the SDK's JSON encoder: sorted keys, two-space indent, trailing newline."""
    return JSONEncoder(indent=2, sort_keys=True).encode(board) + "\n"


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
    for name, board in build_models().items():
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
