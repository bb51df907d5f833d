"""A local monitoring demo: Prometheus, the Pushgateway and Alertmanager on 127.0.0.1 watching a live run.

    python -m tools.demo [--speed 5] [--duration SECONDS] [--webhook-url URL]   (bin/monitor runs this)

It feeds the bundled IoT stream (``samples/ooo-iot-d1.csv``) into a landing directory in real time (times
``--speed``), runs the streaming job on it with an interval trigger and its metrics endpoint, and starts a
Prometheus with the project's recording and alert rules scraping the job and the Pushgateway and sending its
alerts to an Alertmanager with the project's configuration (``infra/alertmanager/``). Alertmanager's
webhooks post to a receiver of the demo that prints each notification (``--webhook-url`` sends them to an
endpoint of yours instead). It prints the addresses to open and runs until the stream ends (or
``--duration`` seconds, or Ctrl-C), then stops everything it started. Its files go to ``out/monitor/``.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from tools.local.alertmanager import WebhookReceiver, alertmanager_config, describe, start_alertmanager
from tools.local.prometheus import LocalServer, prometheus_config, start_prometheus, start_pushgateway

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "infra" / "prometheus"


def _port_free(port: int) -> bool:
    import socket

    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers bind (TIME_WAIT is fine)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


_PRINTING = threading.Lock()


def _print_notification(path: str, payload: dict[str, Any]) -> None:
    """What on-call would receive, one line per alert (notifications arrive on several threads)."""
    with _PRINTING:
        sys.stdout.write(describe(path, payload) + "\n")
        sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    """Run the demo; returns the process exit code."""
    p = argparse.ArgumentParser(prog="python -m tools.demo", description=__doc__.splitlines()[0])
    p.add_argument("--speed", type=float, default=5.0, help="replay speed of the recorded stream (default 5)")
    p.add_argument("--duration", type=float, help="stop after this many seconds (default: end of the stream)")
    p.add_argument("--prometheus-port", type=int, default=9090)
    p.add_argument("--pushgateway-port", type=int, default=9091)
    p.add_argument("--metrics-port", type=int, default=9108)
    p.add_argument("--alertmanager-port", type=int, default=9093)
    p.add_argument(
        "--webhook-port", type=int, default=9095, help="port of the demo's receiver printing notifications"
    )
    p.add_argument(
        "--webhook-url",
        help="post Alertmanager's notifications here (under /page and /ticket) instead of printing them",
    )
    p.add_argument("--out", default=str(ROOT / "out" / "monitor"))
    args = p.parse_args(argv)
    busy = [
        port
        for port in (
            args.prometheus_port,
            args.pushgateway_port,
            args.metrics_port,
            args.alertmanager_port,
            *(() if args.webhook_url else (args.webhook_port,)),
        )
        if not _port_free(port)
    ]
    if busy:
        print(f"error: port(s) {busy} on 127.0.0.1 are in use; pass other --*-port values", file=sys.stderr)
        return 2
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    servers: list[LocalServer] = []
    children: list[subprocess.Popen[bytes]] = []
    webhook = None
    try:
        servers.append(start_pushgateway(out / "pushgateway", args.pushgateway_port))
        webhook_url = args.webhook_url
        if not webhook_url:
            webhook = WebhookReceiver(args.webhook_port, _print_notification)
            webhook_url = webhook.url
        manager = start_alertmanager(
            alertmanager_config(out / "alertmanager.yml", webhook_url),
            out / "alertmanager",
            args.alertmanager_port,
        )
        servers.append(manager)
        config = prometheus_config(
            out / "prometheus.yml",
            {
                "awm_job": f"127.0.0.1:{args.metrics_port}",
                "pushgateway": f"127.0.0.1:{args.pushgateway_port}",
            },
            rule_files=[RULES / "recording_rules.yml", RULES / "alert_rules.yml"],
            interval="5s",
            alertmanagers=[f"127.0.0.1:{args.alertmanager_port}"],
        )
        prom = start_prometheus(config, out / "prometheus", args.prometheus_port)
        servers.append(prom)
        landing = out / "landing"
        feed = [
            sys.executable, "-m", "tools.feed", str(ROOT / "samples" / "ooo-iot-d1.csv"), "--delimiter", ";",
            "--event-time", "S.Client.Detection.Time", "--arrival-time", "S.Message.received.time.ms",
            "--partition", "S.Device.ID", "--out", str(landing), "--rows-per-file", "100",
            "--pace", "realtime", "--speed", str(args.speed), "--quiet",
        ]  # fmt: skip
        job = [
            sys.executable, "-m", "jobs.stream", "--input", str(landing), "--output", str(out / "tables"),
            "--checkpoint", str(out / "checkpoint"), "--strategy", "adaptive", "--set", "warmup=500",
            "--set", "heartbeat_ms=200", "--window-ms", "1000", "--trigger", "interval=2 seconds",
            "--metrics-port", str(args.metrics_port),
        ]  # fmt: skip
        landing.mkdir()
        feeder = subprocess.Popen(feed, cwd=ROOT)
        children.append(feeder)
        with (out / "job.log").open("wb") as log:
            children.append(subprocess.Popen(job, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT))
        print(
            f"Prometheus   {prom.url}  (alerts: {prom.url}/alerts, rules: {prom.url}/rules)\n"
            f"Pushgateway  {servers[0].url}\n"
            f"Alertmanager {manager.url}  (API: {manager.url}/api/v2/alerts; "
            f"amtool --alertmanager.url={manager.url} alert query)\n"
            f"on-call      {webhook_url}/{{page,ticket}}"
            f"{'' if args.webhook_url else '  (Alertmanager posts there; notifications print here)'}\n"
            f"job metrics  http://127.0.0.1:{args.metrics_port}/metrics   (job log: {out / 'job.log'})\n"
            f"Grafana      provision infra/grafana/ against {prom.url} to see the dashboards\n"
            "Ctrl-C stops the demo.",
            flush=True,
        )
        deadline = time.monotonic() + args.duration if args.duration else None
        while True:
            if deadline is not None and time.monotonic() >= deadline:
                break
            if feeder.poll() is not None and deadline is None:
                time.sleep(30)  # let the job take up the last files and Prometheus scrape them
                break
            if children[1].poll() is not None:
                print(
                    f"the job stopped (exit {children[1].returncode}); see {out / 'job.log'}", file=sys.stderr
                )
                return 1
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        for child in children:  # the feeder just ends; the job stops its query cleanly on SIGINT
            if child.poll() is None:
                child.send_signal(signal.SIGINT if child is not children[0] else signal.SIGTERM)
        for child in children:
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()
        for server in servers:
            server.stop()
        if webhook is not None:
            webhook.stop()
    print(f"stopped; tables under {out / 'tables'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
