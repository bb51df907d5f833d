"""Alertmanager's configuration (infra/alertmanager/): amtool's checks, each alert's route, the notification
texts, and a real Alertmanager inhibiting symptoms and delivering the rest to a webhook.

Prometheus evaluating the rules on a live run and Alertmanager delivering what fires:
tests/integration/prometheus/test_monitoring_live.py.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest
import yaml

from tests.unit.monitoring.test_alert_rules import PROM, ROOT
from tools.local.alertmanager import (
    CONFIG,
    DEFAULT_WEBHOOK,
    WebhookReceiver,
    alertmanager_config,
    post_alerts,
    start_alertmanager,
)

TEMPLATES = ROOT / "infra" / "alertmanager" / "templates"
RECEIVERS = {"page": "awm-page", "ticket": "awm-ticket"}


@pytest.fixture
def amtool(local_server):
    """``amtool(*args)``: runs amtool (a missing one fails the test naming bin/bootstrap.sh)."""
    path = local_server.binary("amtool")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([path, *args], capture_output=True, text=True, check=False)

    return run


def alert_rules() -> list[dict]:
    doc = yaml.safe_load((PROM / "alert_rules.yml").read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def test_the_alertmanager_config_and_its_templates_pass_amtool_check_config(amtool):
    result = amtool("check-config", str(CONFIG))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout and "1 templates" in result.stdout


def test_the_example_pagerduty_and_slack_receivers_fit_the_config(amtool, tmp_path):
    doc = yaml.safe_load(CONFIG.read_text())
    example = yaml.safe_load((CONFIG.parent / "receivers.example.yml").read_text())
    assert [r["name"] for r in example["receivers"]] == [r["name"] for r in doc["receivers"]]
    doc["receivers"] = example["receivers"]
    doc["templates"] = [str(TEMPLATES / "*.tmpl")]
    (tmp_path / "am.yml").write_text(yaml.safe_dump(doc))
    result = amtool("check-config", str(tmp_path / "am.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda rule: rule["alert"])
def test_every_alert_routes_to_the_receiver_of_its_severity(amtool, rule):
    labels = {**rule["labels"], "alertname": rule["alert"], "job": "awm_job", "instance": "h:9108"}
    labels["pipeline"] = labels["pipeline"].replace("{{ $labels.task }}", "backfill")
    expected = RECEIVERS[labels["severity"]]
    result = amtool(
        "config",
        "routes",
        "test",
        f"--config.file={CONFIG}",
        f"--verify.receivers={expected}",
        *(f"{k}={v}" for k, v in labels.items()),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == expected


@pytest.mark.parametrize(
    ("labels", "receiver"),
    [
        ({"alertname": "Anything", "severity": "page"}, "awm-page"),
        ({"alertname": "Anything", "severity": "ticket"}, "awm-ticket"),
        ({"alertname": "NoSeverity", "pipeline": "stream"}, "awm-ticket"),  # never dropped
        ({"alertname": "Unknown", "severity": "info"}, "awm-ticket"),
    ],
    ids=["page", "ticket", "no severity", "unknown severity"],
)
def test_an_alert_reaches_a_receiver_whatever_its_severity(amtool, labels, receiver):
    result = amtool(
        "config",
        "routes",
        "test",
        f"--config.file={CONFIG}",
        f"--verify.receivers={receiver}",
        *(f"{k}={v}" for k, v in labels.items()),
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_test_copy_posts_to_the_given_webhook_and_keeps_routes_and_inhibitions(amtool, tmp_path):
    copy = alertmanager_config(
        tmp_path / "am.yml", "http://127.0.0.1:1234/hook", group_wait="1s", group_interval="1s"
    )
    result = amtool("check-config", str(copy))
    assert result.returncode == 0, result.stdout + result.stderr
    doc, committed = yaml.safe_load(copy.read_text()), yaml.safe_load(CONFIG.read_text())
    urls = {r["name"]: [h["url"] for h in r["webhook_configs"]] for r in doc["receivers"]}
    assert urls == {
        "awm-page": ["http://127.0.0.1:1234/hook/page"],
        "awm-ticket": ["http://127.0.0.1:1234/hook/ticket"],
    }
    committed_urls = [h["url"] for r in committed["receivers"] for h in r["webhook_configs"]]
    assert all(url.startswith(DEFAULT_WEBHOOK) for url in committed_urls)
    assert (doc["route"]["group_wait"], doc["route"]["group_interval"]) == ("1s", "1s")
    assert doc["route"]["group_by"] == committed["route"]["group_by"] == ["pipeline", "partition"]
    assert doc["inhibit_rules"] == committed["inhibit_rules"]


def test_the_notification_texts_name_each_alert_with_its_runbook_and_dashboard(amtool, tmp_path):
    rule = next(r for r in alert_rules() if r["alert"] == "AwmPartitionHoldingBackWatermark")
    data = {
        "receiver": "awm-ticket",
        "status": "firing",
        "alerts": [
            {
                "status": "firing",
                "labels": {**rule["labels"], "alertname": rule["alert"], "partition": "p3"},
                "annotations": {**rule["annotations"], "summary": "Partition p3 holds the watermark back"},
            }
        ],
        "groupLabels": {"pipeline": "stream", "partition": "p3"},
        "commonLabels": {"alertname": rule["alert"]},
        "commonAnnotations": {},
        "externalURL": "http://127.0.0.1:9093",
    }
    (tmp_path / "data.json").write_text(json.dumps(data))
    result = amtool(
        "template",
        "render",
        f"--template.glob={TEMPLATES}/*.tmpl",
        '--template.text={{ template "awm.title" . }}\n{{ template "awm.text" . }}',
        f"--template.data={tmp_path / 'data.json'}",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    title, *text = result.stdout.splitlines()
    assert title == "[FIRING:1] awm stream partition p3: AwmPartitionHoldingBackWatermark"
    assert f"Runbook: {rule['annotations']['runbook_url']}" in text
    assert f"Dashboard: {rule['annotations']['dashboard_url']}" in text
    assert "AwmPartitionHoldingBackWatermark (ticket, firing): Partition p3 holds the watermark back" in text


def wait_for(predicate, server, timeout_s: float = 120.0):
    """Poll ``predicate`` until it holds (a generous deadline, not a timed assertion: the caller asserts
    on the last value); stop early if the server exits."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value or time.monotonic() > deadline or server.process.poll() is not None:
            return value
        time.sleep(0.2)


def alert(name: str, severity: str, pipeline: str, **labels: str) -> dict:
    rule = {r["alert"]: r for r in alert_rules()}[name]
    assert rule["labels"]["severity"] == severity
    return {
        "labels": {"alertname": name, "severity": severity, "pipeline": pipeline, **labels},
        "annotations": rule["annotations"],
    }


def test_alertmanager_inhibits_the_symptoms_of_a_cause_and_delivers_the_rest_grouped(local_server, tmp_path):
    stream_a = {"job": "awm_job", "instance": "a:9108"}
    batch = {"job": "awm_batch_tasks", "instance": "default"}
    sent = [
        alert("AwmStreamingQueryFailed", "page", "stream", **stream_a),
        alert("AwmJobDown", "page", "stream", **stream_a),  # the failed job exits
        alert("AwmWatermarkStalled", "page", "stream", **stream_a),
        alert("AwmEventTimeLagHigh", "ticket", "stream", **stream_a),
        alert("AwmWatermarkStalled", "page", "stream", job="awm_job", instance="b:9108"),  # another job
        alert("AwmBackfillFailing", "ticket", "backfill", task="backfill", **batch),
        alert("AwmBackfillOverdue", "ticket", "backfill", task="backfill", **batch),
        alert("AwmTuningOverdue", "ticket", "tuning", task="tuning", **batch),  # no tuning failure
    ]
    inhibited = {
        ("AwmJobDown", "a:9108"),
        ("AwmWatermarkStalled", "a:9108"),
        ("AwmEventTimeLagHigh", "a:9108"),
        ("AwmBackfillOverdue", "default"),
    }
    delivered = {(a["labels"]["alertname"], a["labels"]["instance"]) for a in sent} - inhibited
    webhook = WebhookReceiver()
    manager = None
    try:
        config = alertmanager_config(tmp_path / "am.yml", webhook.url, group_wait="1s", group_interval="1s")
        manager = start_alertmanager(config, tmp_path / "am", port=local_server.free_port())
        causes = ("AwmStreamingQueryFailed", "AwmBackfillFailing")
        post_alerts(manager.url, [a for a in sent if a["labels"]["alertname"] in causes])
        post_alerts(manager.url, [a for a in sent if a["labels"]["alertname"] not in causes])

        def states():
            got = manager.get_json("/api/v2/alerts")
            return {(a["labels"]["alertname"], a["labels"]["instance"]): a["status"] for a in got}

        def suppressed(status):
            return {key for key, s in status.items() if s["state"] == "suppressed" and s["inhibitedBy"]}

        def inhibition_applied():
            now = states()
            return now if suppressed(now) == inhibited else None

        status = wait_for(inhibition_applied, manager) or states()
        assert suppressed(status) == inhibited, status
        assert {key for key, s in status.items() if s["state"] == "active"} == delivered, status

        def received():
            return {(a["labels"]["alertname"], a["labels"]["instance"]) for _, a, _ in webhook.alerts()}

        wait_for(lambda: received() >= delivered, manager)
        assert received() == delivered, webhook.notifications
        for path, got, payload in webhook.alerts():
            severity = got["labels"]["severity"]
            assert (path, payload["receiver"]) == (f"/alerts/{severity}", RECEIVERS[severity])
            assert got["annotations"]["runbook_url"].endswith(
                f"/docs/runbooks/{got['labels']['alertname']}.md"
            )
            assert payload["groupLabels"] == {"pipeline": got["labels"]["pipeline"]}
        # grouped by pipeline (and partition): both jobs' pages in one group, each DAG's tickets apart
        groups: dict[tuple[str, str], set[tuple[str, str]]] = {}
        for _, payload in webhook.notifications:
            group = groups.setdefault((payload["receiver"], payload["groupLabels"]["pipeline"]), set())
            group |= {(a["labels"]["alertname"], a["labels"]["instance"]) for a in payload["alerts"]}
        assert groups == {
            ("awm-page", "stream"): {
                ("AwmStreamingQueryFailed", "a:9108"),
                ("AwmWatermarkStalled", "b:9108"),
            },
            ("awm-ticket", "backfill"): {("AwmBackfillFailing", "default")},
            ("awm-ticket", "tuning"): {("AwmTuningOverdue", "default")},
        }
    finally:
        if manager is not None:
            manager.stop()
        webhook.stop()
