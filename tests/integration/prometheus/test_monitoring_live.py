"""A real Prometheus (with the Pushgateway and Alertmanager) on 127.0.0.1 scraping a real run of the job.

One run, two phases. Healthy: four partitions send live data; every dashboard panel query, every recording
rule and every alert expression parses in Prometheus and every metric each reads has data, no alert fires,
and on-call's last word on anything is "resolved" (a test-scale stall while the first batch runs may page
and resolve). Then one partition falls silent while the others keep sending: its watermark
stops, holds the global one back, the holding-back and stalled-watermark alerts fire (rules rendered with
short ``for`` durations and thresholds scaled to a test's seconds), and Alertmanager (the project's
configuration, with grouping delays of a second) delivers each to the webhook of its severity with its
runbook and grouping labels. A failed query pages, and mutes the job-down alert it causes.
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from jobs.stream.run import run_job
from monitoring import dashboards, rules
from monitoring.metrics import JobMetrics
from monitoring.push import push_outcome
from monitoring.server import serve
from tests.integration.spark.test_stream import config
from tests.landing import folder_job
from tests.unit.monitoring.test_dashboards import metric_names as dashboard_metric_names
from tools.local.alertmanager import WebhookReceiver, alertmanager_config, start_alertmanager
from tools.local.prometheus import prometheus_config, start_prometheus, start_pushgateway

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1_200)]

PARTITIONS = ("p0", "p1", "p2", "p3")
SILENT = "p3"
#: Test-scale thresholds: seconds of a test, not minutes of production.
TEST_FOR = "2s"
TEST_THRESHOLDS = rules.TEST_THRESHOLDS


class LiveSource:
    """Writes a landing file of fresh events (arrival = now, event time up to 300 ms earlier) every 0.5 s."""

    def __init__(self, landing: Path, partitions: tuple[str, ...]) -> None:
        self.landing = landing
        self.partitions = set(partitions)
        self.stopped = threading.Event()
        self.files = 0
        self._thread = threading.Thread(target=self._run, daemon=True)
        landing.mkdir(parents=True, exist_ok=True)

    def start(self) -> None:
        self._thread.start()

    def silence(self, partition: str) -> None:
        self.partitions = self.partitions - {partition}

    def _run(self) -> None:
        rng = random.Random(7)
        seq = 0
        while not self.stopped.is_set():
            now = int(time.time() * 1000)
            lines = []
            for i in range(200):
                part = sorted(self.partitions)[i % len(self.partitions)]
                tp = now - 200 + i
                record = {
                    "event_id": f"e{seq}",
                    "key": f"k{seq % 20}",
                    "partition": part,
                    "event_time_ms": tp - rng.randint(0, 300),
                    "arrival_time_ms": tp,
                    "value": float(seq % 7),
                }
                lines.append(json.dumps(record))
                seq += 1
            tmp = self.landing / f".live-{self.files:06d}.tmp"
            tmp.write_text("\n".join(lines) + "\n")
            tmp.rename(self.landing / f"live-{self.files:06d}.json")
            self.files += 1
            self.stopped.wait(0.5)

    def stop(self) -> None:
        self.stopped.set()
        self._thread.join(timeout=10)


def wait_until(predicate, what: str, stopped):
    """Poll ``predicate`` until it holds; fail if ``stopped()`` names something that stopped meanwhile.

    No deadline of its own: how long a scrape, a window or an alert takes on a busy machine is no test's
    subject (the test's timeout ends a hang)."""
    while True:
        value = predicate()
        if value:
            return value
        problem = stopped()
        assert not problem, f"{problem} while waiting for {what}"
        time.sleep(0.5)


def metric_names(expr: str) -> set[str]:
    """Metric names an expression reads (``awm_*`` and ``up``)."""
    names = dashboard_metric_names(expr)
    if re.search(r"\bup\s*\{", expr):
        names.add("up")
    return names


def query(prom, expr: str) -> dict:
    return prom.get_json("/api/v1/query", query=expr)


def firing(prom) -> set[str]:
    alerts = prom.get_json("/api/v1/alerts")["data"]["alerts"]
    return {a["labels"]["alertname"] for a in alerts if a["state"] == "firing"}


@pytest.fixture
def on_call(local_server, tmp_path):
    """Alertmanager with the project's configuration (grouping delays of a second) posting to a webhook
    receiver of the test: ``(alertmanager, webhook)``."""
    webhook = WebhookReceiver()
    manager = None
    try:
        config = alertmanager_config(
            tmp_path / "alertmanager.yml", webhook.url, group_wait="1s", group_interval="1s"
        )
        manager = start_alertmanager(config, tmp_path / "alertmanager", port=local_server.free_port())
        yield manager, webhook
    finally:
        if manager is not None:
            manager.stop()
        webhook.stop()


def received(webhook, name: str, since: int = 0) -> list[tuple[str, dict, dict]]:
    """``(path, alert, notification)`` of each firing ``name`` in the webhook's notifications from
    the ``since``-th on."""
    return [
        (path, a, payload)
        for path, payload in webhook.notifications[since:]
        for a in payload["alerts"]
        if a["status"] == "firing" and a["labels"]["alertname"] == name
    ]


def still_firing(webhook) -> set[str]:
    """Alerts whose last notification to the webhook says firing."""
    last = {}
    for _, payload in webhook.notifications:
        for a in payload["alerts"]:
            last[a["fingerprint"]] = (a["labels"]["alertname"], a["status"])
    return {name for name, status in last.values() if status == "firing"}


def test_prometheus_scraping_a_live_job_evaluates_every_query_and_a_silent_partition_reaches_on_call(
    spark, tmp_path, local_server, on_call
):
    manager, webhook = on_call
    gateway = start_pushgateway(tmp_path / "pushgateway", port=local_server.free_port())
    servers = [gateway]
    source = LiveSource(tmp_path / "landing", PARTITIONS)
    registry = CollectorRegistry()
    metrics = JobMetrics(registry)
    endpoint = serve(registry, 0)
    worker = None
    try:
        push_outcome(
            gateway.url,
            "backfill",
            ok=True,
            values={"corrected_windows": 3, "reconciled_events": 12, "late_events_read": 12},
            duration_s=4.2,
        )
        push_outcome(
            gateway.url,
            "tuning",
            ok=True,
            values={
                "published": 1,
                "config_version": 2,
                "dropped_ratio": 0.004,
                "emit_latency_seconds": 1.1,
                "running_emit_latency_seconds": 1.6,
            },
            duration_s=30.0,
        )
        push_outcome(
            gateway.url,
            "quality",
            ok=True,
            values={"expectations": 20, "failed_expectations": 0, "rows_checked": 4_800},
            duration_s=6.0,
        )
        push_outcome(
            gateway.url,
            "maintenance",
            ok=True,
            values={"files_before": 120, "files_after": 9, "files_vacuumed": 111, "arrivals_deleted": 0},
            duration_s=40.0,
        )
        rule_dir = tmp_path / "rules"
        rule_dir.mkdir()
        alert_file = rule_dir / "alerts.yml"
        alert_file.write_text(rules.render_alert_rules(for_override=TEST_FOR, thresholds=TEST_THRESHOLDS))
        recording_file = rule_dir / "recording.yml"
        recording_file.write_text(rules.render_recording_rules())
        cfg = prometheus_config(
            tmp_path / "prometheus.json",
            {"awm_job": f"127.0.0.1:{endpoint.port}", "pushgateway": f"127.0.0.1:{gateway.port}"},
            rule_files=[recording_file, alert_file],
            interval="1s",
            alertmanagers=[f"127.0.0.1:{manager.port}"],
        )
        prom = start_prometheus(cfg, tmp_path / "prometheus", port=local_server.free_port())
        servers.append(prom)

        source.start()
        opts = folder_job(
            tmp_path,
            config("adaptive", {"warmup": 50, "heartbeat_ms": 200}).with_version(1, late_slo_pct=5.0),
            input=str(source.landing),
            trigger="interval=1 second",
        )
        worker = threading.Thread(target=run_job, args=(spark, opts, metrics), daemon=True)
        worker.start()

        def stopped() -> str:
            if not worker.is_alive():
                return "the job ended"
            if manager.process.poll() is not None:
                return f"Alertmanager exited ({manager.process.returncode})"
            return "" if prom.process.poll() is None else f"Prometheus exited ({prom.process.returncode})"

        # Healthy: wait for windows to fire and for the rate windows to fill.
        wait_until(
            lambda: query(prom, "awm_window_emit_latency_seconds_count > 0")["data"]["result"],
            "windows to fire",
            stopped,
        )
        time.sleep(12)
        expressions = {
            f"dashboard {uid} / {title}": expr for uid, title, expr in dashboards.prometheus_queries()
        }
        expressions |= {
            f"alert {name}": expr for name, expr in rules.all_alert_expressions(TEST_THRESHOLDS).items()
        }
        expressions |= {f"record {name}": expr for name, expr in rules.all_recording_rules().items()}
        expressions |= {  # parsed and fed, not required to return data (no configuration change yet)
            f"annotation {uid} / {name}": expr for uid, name, expr in dashboards.annotation_queries()
        }
        problems = []
        for label, expr in expressions.items():
            answer = query(prom, expr)
            if answer.get("status") != "success":
                problems.append(f"{label}: {answer.get('error')} in {expr}")
                continue
            for name in metric_names(expr):
                if not query(prom, f'count({{__name__="{name}"}})')["data"]["result"]:
                    problems.append(f"{label}: no data for {name}")
        for name in rules.all_recording_rules():
            if not query(prom, name)["data"]["result"]:
                problems.append(f"record {name}: no data")
        assert not problems, "\n".join(problems)
        dashboard_data = [
            (label, expr) for label, expr in expressions.items() if label.startswith("dashboard")
        ]
        empty = [label for label, expr in dashboard_data if not query(prom, expr)["data"]["result"]]
        assert not empty, f"dashboard panels with no data: {empty}"
        assert firing(prom) == set(), "a healthy run fires no alert"
        # at the test's scale a slow first batch can stall the watermark for a few seconds (a transient
        # AwmWatermarkStalled); whatever reached on-call, its last word on each alert is "resolved"
        wait_until(lambda: not still_firing(webhook), "on-call to hear every alert resolved", stopped)

        # A silent partition: its watermark stops and holds the global one back.
        healthy = len(webhook.notifications)
        source.silence(SILENT)
        fired = wait_until(
            lambda: (
                firing(prom) & set(rules.SILENT_PARTITION_ALERTS) == set(rules.SILENT_PARTITION_ALERTS)
                and firing(prom)
            ),
            f"{rules.SILENT_PARTITION_ALERTS} to fire",
            stopped,
        )
        assert set(rules.SILENT_PARTITION_ALERTS) <= fired
        holding = query(prom, "awm_partition_holds_back == 1")["data"]["result"]
        assert [r["metric"]["partition"] for r in holding] == [SILENT]

        # Alertmanager routes each by severity, grouped by pipeline and partition, to the webhook
        wait_until(
            lambda: all(received(webhook, name, healthy) for name in rules.SILENT_PARTITION_ALERTS),
            f"{rules.SILENT_PARTITION_ALERTS} at the webhook",
            stopped,
        )
        expected = {
            "AwmWatermarkStalled": ("page", {"pipeline": "stream"}),
            "AwmPartitionHoldingBackWatermark": ("ticket", {"pipeline": "stream", "partition": SILENT}),
        }
        assert set(expected) == set(rules.SILENT_PARTITION_ALERTS)
        for name, (severity, group) in expected.items():
            for path, alert, payload in received(webhook, name, healthy):
                assert (path, payload["receiver"]) == (f"/alerts/{severity}", f"awm-{severity}")
                assert payload["groupLabels"] == group
                assert alert["labels"]["severity"] == severity
                assert alert["labels"]["job"] == "awm_job"
                assert alert["labels"]["instance"] == f"127.0.0.1:{endpoint.port}"
                assert alert["annotations"]["runbook_url"] == rules.runbook_url(name)
                assert alert["annotations"]["dashboard_url"] == rules.dashboard_url(name)
    finally:
        source.stop()
        for query_ in spark.streams.active:
            query_.stop()
        if worker is not None:
            worker.join(timeout=60)
        endpoint.stop()
        for server in servers:
            server.stop()


def test_a_failed_streaming_query_is_scraped_before_the_job_exits_and_pages_muting_the_job_down_alert(
    spark, tmp_path, local_server, on_call
):
    """The query fails in its first batch (its output is a file, not a folder): the job's metrics server
    keeps serving until Prometheus has scraped the failure, then the job is gone and the alert fires. The
    job being gone fires AwmJobDown too, which Alertmanager inhibits: on-call is paged for the cause."""
    from tests.integration.spark.test_stream import iot_records
    from tools.feed.landing import feed

    manager, webhook = on_call
    port = local_server.free_port()
    alert_file = tmp_path / "alerts.yml"
    # the failure stays in the query-failed alert's range for 10 min: it still fires when the job-down
    # alert does, however long the machine takes to get there
    thresholds = {**TEST_THRESHOLDS, "rate_window": "10m"}
    alert_file.write_text(rules.render_alert_rules(for_override=TEST_FOR, thresholds=thresholds))
    cfg = prometheus_config(
        tmp_path / "prometheus.json",
        {"awm_job": f"127.0.0.1:{port}"},
        rule_files=[alert_file],
        interval="1s",
        alertmanagers=[f"127.0.0.1:{manager.port}"],
    )
    prom = start_prometheus(cfg, tmp_path / "prometheus", port=local_server.free_port())

    def stopped() -> str:
        if manager.process.poll() is not None:
            return f"Alertmanager exited ({manager.process.returncode})"
        return "" if prom.process.poll() is None else f"Prometheus exited ({prom.process.returncode})"

    try:
        feed(iot_records(400), tmp_path / "in", rows_per_file=200)
        (tmp_path / "out").write_text("a file where the tables should be\n")
        opts = folder_job(tmp_path, config(), metrics_port=port)
        with pytest.raises(Exception):  # noqa: B017, PT011 - whatever Spark raises for the failed query
            run_job(spark, opts)
        # run_job has returned: its server is down, so only what was scraped before counts
        with pytest.raises(OSError):
            import urllib.request

            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)

        def failures_scraped():
            got = query(prom, "max_over_time(awm_query_terminated_with_error_total[5m])")["data"]["result"]
            return [float(r["value"][1]) for r in got]

        assert wait_until(failures_scraped, "the scraped failure in Prometheus's storage", stopped) == [1.0]
        wait_until(
            lambda: "AwmStreamingQueryFailed" in firing(prom), "AwmStreamingQueryFailed to fire", stopped
        )
        # the job is gone: AwmJobDown fires too, and Alertmanager mutes it as the failure's consequence
        wait_until(lambda: "AwmJobDown" in firing(prom), "AwmJobDown to fire", stopped)

        def job_down_inhibited():
            got = {a["labels"]["alertname"]: a for a in manager.get_json("/api/v2/alerts")}
            down, failed = got.get("AwmJobDown"), got.get("AwmStreamingQueryFailed")
            return (
                down is not None
                and failed is not None
                and down["status"]["state"] == "suppressed"
                and down["status"]["inhibitedBy"] == [failed["fingerprint"]]
            )

        wait_until(job_down_inhibited, "AwmJobDown inhibited in Alertmanager", stopped)
        wait_until(
            lambda: received(webhook, "AwmStreamingQueryFailed"), "the failure paged at the webhook", stopped
        )
        path, alert, payload = received(webhook, "AwmStreamingQueryFailed")[0]
        assert (path, payload["receiver"], payload["groupLabels"]) == (
            "/alerts/page",
            "awm-page",
            {"pipeline": "stream"},
        )
        assert alert["annotations"]["runbook_url"] == rules.runbook_url("AwmStreamingQueryFailed")
        assert not received(webhook, "AwmJobDown"), "the job-down alert is muted by its cause"
    finally:
        prom.stop()
