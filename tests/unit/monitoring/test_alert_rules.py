"""Prometheus recording and alert rules: generated, unit-tested firing and silent, with runbooks and links
(promtool's checks and unit tests: tests/integration/prometheus/test_promtool.py)."""

import re
from pathlib import Path

import yaml

from monitoring import rules

ROOT = Path(__file__).resolve().parents[3]
PROM = ROOT / "infra" / "prometheus"
TESTS = sorted((PROM / "tests").glob("*_test.yml"))


def test_the_committed_rule_files_are_what_the_generator_writes():
    for name, render in rules.FILES.items():
        assert (PROM / name).read_text() == render(), f"run python -m monitoring.rules --write ({name})"
    assert rules.main(["--check"]) == 0


def test_every_alert_has_severity_summary_description_and_an_existing_runbook():
    doc = yaml.safe_load((PROM / "alert_rules.yml").read_text())
    alerts = [r for g in doc["groups"] for r in g["rules"]]
    assert len(alerts) == len(rules.ALERTS) >= 10
    for alert in alerts:
        assert alert["labels"]["severity"] in {"page", "ticket"}, alert["alert"]
        notes = alert["annotations"]
        assert notes["summary"] and notes["description"], alert["alert"]
        assert notes["runbook_url"].endswith(f"docs/runbooks/{alert['alert']}.md")
        runbook = ROOT / "docs" / "runbooks" / f"{alert['alert']}.md"
        assert runbook.exists(), f"missing runbook {runbook}"
        text = runbook.read_text()
        assert text.startswith(f"# {alert['alert']}") and "**What it means.**" in text and "**Do.**" in text
        # both ways: the alert links its dashboard, and the runbook links that dashboard back
        uid = rules.dashboard_uid(alert["alert"])
        assert notes["dashboard_url"] == f"{rules.DEFAULT_GRAFANA_URL}/d/{uid}"
        assert f"/d/{uid}" in text, f"{runbook.name} does not link its dashboard {uid}"


def test_every_alert_names_the_pipeline_it_concerns_for_alertmanager_to_group_by():
    """``stream`` for the streaming job's alerts; a DAG's alert names its task (the one rule covering
    every DAG takes the task label of the series it finds absent)."""
    doc = yaml.safe_load((PROM / "alert_rules.yml").read_text())
    for alert in (r for g in doc["groups"] for r in g["rules"]):
        pipeline = alert["labels"]["pipeline"]
        tasks = set(re.findall(r'task="(\w+)"', alert["expr"]))
        if 'job="awm_batch_tasks"' not in alert["expr"]:
            assert pipeline == "stream", alert["alert"]
        elif len(tasks) > 1:
            assert pipeline == "{{ $labels.task }}", alert["alert"]
        else:  # the task's metric: awm_<task>_...
            assert pipeline == re.search(r"\bawm_([a-z]+)_", alert["expr"]).group(1), alert["alert"]


def test_every_runbook_says_where_alertmanager_sends_it_and_what_mutes_it_as_the_config_does():
    """The runbook's **On-call.** paragraph names its receiver, the alerts it mutes and those muting it, as
    infra/alertmanager/alertmanager.yml's inhibit rules do (a pair counts within one pipeline: the rules
    match on it or on the job)."""
    config = yaml.safe_load((ROOT / "infra" / "alertmanager" / "alertmanager.yml").read_text())
    pipeline = {a.name: a.pipeline for a in rules.ALERTS}

    def alertnames(matchers: list[str]) -> set[str]:
        return {n for m in matchers for n in re.fullmatch(r'alertname=~?"(.*)"', m).group(1).split("|")}

    mutes: dict[str, set[str]] = {a.name: set() for a in rules.ALERTS}
    muted_by: dict[str, set[str]] = {a.name: set() for a in rules.ALERTS}
    for rule in config["inhibit_rules"]:
        for cause in alertnames(rule["source_matchers"]):
            for symptom in alertnames(rule["target_matchers"]):
                if cause != symptom and pipeline[cause] == pipeline[symptom]:
                    mutes[cause].add(symptom)
                    muted_by[symptom].add(cause)
    assert mutes["AwmStreamingQueryFailed"] >= {"AwmJobDown", "AwmWatermarkStalled"}
    for alert in rules.ALERTS:
        text = (ROOT / "docs" / "runbooks" / f"{alert.name}.md").read_text()
        on_call = text.split("**On-call.**", 1)[1].split("\n\n", 1)[0]
        assert f"`awm-{alert.severity}` receiver" in on_call, alert.name
        _, _, after_mutes = on_call.partition("While it fires, it mutes")
        named_mutes = set(re.findall(r"`(Awm\w+)`", after_mutes.partition("It is muted")[0]))
        named_by = set(re.findall(r"`(Awm\w+)`", on_call.partition("It is muted while")[2]))
        assert (named_mutes, named_by) == (mutes[alert.name], muted_by[alert.name]), alert.name


def test_every_runbook_is_linked_from_a_dashboard_panel_showing_its_metrics():
    from monitoring import dashboards

    linked = {
        link["url"].rsplit("/", 1)[-1].removesuffix(".md")
        for board in dashboards.build_dashboards().values()
        for panel in board["panels"]
        for link in panel.get("links", [])
    }
    by_board = {
        board["uid"]: {
            link["url"].rsplit("/", 1)[-1].removesuffix(".md")
            for panel in board["panels"]
            for link in panel.get("links", [])
        }
        for board in dashboards.build_dashboards().values()
    }
    missing = {a.name for a in rules.ALERTS} - linked - {"AwmJobDown", "AwmBatchOutcomeAbsent"}
    assert missing == set()
    for alert in rules.ALERTS:  # the dashboard an alert links to shows the alert's metrics, where any
        if alert.name in linked:
            assert alert.name in by_board[rules.dashboard_uid(alert.name)], alert.name


def test_the_link_bases_are_settings(monkeypatch):
    monkeypatch.setenv("AWM_RUNBOOK_BASE_URL", "https://wiki.example/runbooks/")
    monkeypatch.setenv("AWM_GRAFANA_URL", "https://grafana.example")
    doc = yaml.safe_load(rules.render_alert_rules())
    notes = doc["groups"][0]["rules"][0]["annotations"]
    assert notes["runbook_url"] == "https://wiki.example/runbooks/AwmJobDown.md"
    assert notes["dashboard_url"] == "https://grafana.example/d/awm-overview"


def test_every_alert_is_unit_tested_both_firing_and_silent():
    fired, silent = set(), set()
    for path in TESTS:
        for case in yaml.safe_load(path.read_text())["tests"]:
            for check in case.get("alert_rule_test", []):
                (fired if check.get("exp_alerts") else silent).add(check["alertname"])
    names = {a.name for a in rules.ALERTS}
    assert names - fired == set(), "alerts never shown firing"
    assert names - silent == set(), "alerts never shown silent"


def test_idle_input_is_checked_against_every_alert():
    cases = [
        c for p in TESTS for c in yaml.safe_load(p.read_text())["tests"] if c["name"].startswith("idle input")
    ]
    assert len(cases) == 1
    checked = {c["alertname"] for c in cases[0]["alert_rule_test"] if not c["exp_alerts"]}
    assert checked == {a.name for a in rules.ALERTS}


def test_test_scale_rendering_changes_durations_and_thresholds_only():
    production = yaml.safe_load(rules.render_alert_rules())["groups"][0]["rules"]
    scaled = yaml.safe_load(rules.render_alert_rules("2s", rules.TEST_THRESHOLDS))["groups"][0]["rules"]
    assert [r["alert"] for r in scaled] == [r["alert"] for r in production]
    assert {r["for"] for r in scaled} == {"2s"}
    assert "> 5" in next(r["expr"] for r in scaled if r["alert"] == "AwmPartitionHoldingBackWatermark")
    assert [r["labels"] for r in scaled] == [r["labels"] for r in production]
