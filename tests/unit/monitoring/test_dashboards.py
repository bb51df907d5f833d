"""Grafana dashboards as code: committed JSON, panel hygiene, and metric names the job really exports."""

import json
import re
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from monitoring import dashboards
from monitoring.metrics import BatchObservation, JobMetrics, PartitionState
from monitoring.push import TASK_VALUES, outcome_registry

ROOT = Path(__file__).resolve().parents[3]
BOARDS = dashboards.build_dashboards()


def exported_names() -> set[str]:
    """Every sample name the job and the batch tasks export (histogram and counter suffixes included)."""
    registry = CollectorRegistry()
    metrics = JobMetrics(registry, clock=lambda: 1_000.0)
    metrics.batch_started(0, 990_000)
    metrics.query_progress(0.5)
    part = PartitionState("p0", 995_000, learned_delay_ms=800, sensitivity=0.5, drifts=1, holds_back=True)
    metrics.batch_done(
        BatchObservation(
            batch_id=0, on_time=3, watermark_ms=995_000, ingestion_clock_ms=999_000, partitions=[part],
            emit_latency_ms=[10], trigger_delay_ms=[5], config_version=1, strategy="adaptive",
        )
    )  # fmt: skip
    registries = [registry] + [
        outcome_registry(task, ok=ok, values=dict.fromkeys(values, 1.0), now_s=1.0, duration_s=1.0)
        for task, values in TASK_VALUES.items()
        for ok in (True, False)
    ]
    return {s.name for r in registries for m in r.collect() for s in m.samples} | {"up"}


def metric_names(expr: str) -> set[str]:
    """The ``awm_*`` metric names an expression reads (not label values such as ``job="awm_job"``)."""
    return set(re.findall(r'(?<![\w"])(awm_[a-z0-9_]+)(?![\w"])', expr))


def test_metric_names_skip_label_values():
    assert metric_names('up{job="awm_job"} + awm_x_total{job="awm_batch_tasks"}') == {"awm_x_total"}


def test_the_committed_dashboards_are_what_the_generator_writes():
    for name, board in BOARDS.items():
        assert (ROOT / "infra" / "grafana" / "dashboards" / name).read_text() == dashboards.render(board)
    assert dashboards.main(["--check"]) == 0


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_every_panel_has_a_title_a_description_a_unit_and_queries(name):
    board = BOARDS[name]
    assert board["schemaVersion"] == 41 and board["editable"] is False and board["uid"]
    variable = board["templating"]["list"][0]
    assert (variable["name"], variable["type"], variable["query"]) == (
        "datasource",
        "datasource",
        "prometheus",
    )
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        assert panel["title"] and panel["description"], panel
        if panel["type"] == "text":
            assert panel["options"]["content"]
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["fieldConfig"]["defaults"]["unit"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip() and target["refId"]
            assert 'instance=~"$instance"' in target["expr"] or 'job="awm_batch_tasks"' in target["expr"]


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_the_sdk_output_keeps_what_grafana_reads(name):
    board = BOARDS[name]
    (annotation,) = board["annotations"]["list"]  # Prometheus's fields, beyond the SDK's schema
    assert annotation["enable"] is True and annotation["datasource"]["uid"] == "${datasource}"
    assert annotation["step"] == "1m" and "{{instance}}" in annotation["titleFormat"]
    assert annotation["textFormat"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert set(variables) == {"datasource", "instance"} | (
        {"partition"} if name == "awm-watermark.json" else set()
    )
    for var in list(variables.values())[1:]:
        assert var["type"] == "query" and var["definition"] == var["query"]["query"]
        assert var["includeAll"] is True and var["multi"] is True and var["allValue"] == ".*"
    (link,) = board["links"]
    assert link["url"].endswith("/docs/runbooks/") and link["targetBlank"] is True
    for panel in board["panels"]:
        if panel["type"] == "timeseries":  # the SDK's default hides the legend
            assert panel["options"]["legend"]["showLegend"] is True
        for link in panel.get("links", []):
            assert (
                link["title"].startswith("Runbook: ") and link["url"].endswith(".md") and link["targetBlank"]
            )


def test_series_with_their_own_unit_carry_an_override():
    panels = {p["title"]: p for p in BOARDS["awm-watermark.json"]["panels"]}

    def units(title):
        config = panels[title]["fieldConfig"]
        for override in config["overrides"]:
            assert override["matcher"]["id"] == "byName"
            assert [prop["id"] for prop in override["properties"]] == ["unit"]
        series = {o["matcher"]["options"]: o["properties"][0]["value"] for o in config["overrides"]}
        return config["defaults"]["unit"], series

    assert units("Backfill health") == ("s", {"last run ok": "bool_yes_no"})
    assert units("Tuning results") == ("none", {"last run ok": "bool_yes_no", "since last success": "s"})
    assert units("Tuning: chosen against running setting") == ("s", {"chosen late share": "percentunit"})
    assert units("Event-time watermarks") == ("dateTimeAsIso", {})


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_no_two_panels_overlap_on_the_grid(name):
    cells = {}
    for panel in BOARDS[name]["panels"]:
        g = panel["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["title"]


def test_every_metric_a_panel_reads_is_exported_by_the_job_or_the_batch_tasks():
    names = exported_names()
    for _, title, expr in dashboards.prometheus_queries():
        for metric in metric_names(expr):
            assert metric in names, f"{title}: {metric} is not exported"


def test_queries_for_prometheus_have_no_grafana_variables_left():
    queries = dashboards.prometheus_queries()
    assert len(queries) >= 30
    assert all("$" not in expr for _, _, expr in queries)
    with pytest.raises(ValueError, match="unknown variable"):
        dashboards.substitute("rate(x[$unknown])")


def test_the_overview_answers_late_data_or_stuck_system():
    board = BOARDS["awm-overview.json"]
    text = next(p for p in board["panels"] if p["type"] == "text")["options"]["content"]
    assert "processing-time lag flat" in text and "Both up" in text
    exprs = " ".join(expr for _, expr in dashboards.panel_queries(board))
    assert "awm_processing_time_watermark_lag_seconds" in exprs and 'clock="ingestion"' in exprs


def test_provisioning_points_at_the_dashboards_and_a_prometheus_data_source():
    prov = ROOT / "infra" / "grafana" / "provisioning"
    assert "type: file" in (prov / "dashboards" / "awm.yml").read_text()
    assert "type: prometheus" in (prov / "datasources" / "prometheus.yml").read_text()
    for path in (ROOT / "infra" / "grafana" / "dashboards").glob("*.json"):
        assert json.loads(path.read_text())["uid"] == path.stem
