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
from dataclasses import dataclass, field
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


@dataclass
class _Started:
    """What the demo started, for the stop at its end (servers in start order)."""

    servers: list[LocalServer] = field(default_factory=list)
    children: list[subprocess.Popen[bytes]] = field(default_factory=list)
    webhook: WebhookReceiver | None = None


def _parser() -> argparse.ArgumentParser:
    """The ``python -m tools.demo`` argument parser."""
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
    return p


def _busy_ports(args: argparse.Namespace) -> list[int]:
    """The ports the demo would listen on that are in use on 127.0.0.1."""
    return [
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


def _start_monitoring(
    args: argparse.Namespace, out: Path, started: _Started
) -> tuple[str, LocalServer, LocalServer]:
    """Start the Pushgateway, the webhook receiver, Alertmanager and Prometheus (each noted in ``started``).

    Returns the webhook URL, Alertmanager and Prometheus.
    """
    started.servers.append(start_pushgateway(out / "pushgateway", args.pushgateway_port))
    webhook_url = args.webhook_url
    if not webhook_url:
        started.webhook = WebhookReceiver(args.webhook_port, _print_notification)
        webhook_url = started.webhook.url
    manager = start_alertmanager(
        alertmanager_config(out / "alertmanager.yml", webhook_url),
        out / "alertmanager",
        args.alertmanager_port,
    )
    started.servers.append(manager)
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
    started.servers.append(prom)
    return webhook_url, manager, prom


def _start_feed_and_job(args: argparse.Namespace, out: Path, started: _Started) -> None:
    """Start the feeder (the IoT stream in real time) and the streaming job on its landing directory."""
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
    started.children.append(subprocess.Popen(feed, cwd=ROOT))
    with (out / "job.log").open("wb") as log:
        started.children.append(subprocess.Popen(job, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT))


def _print_addresses(
    args: argparse.Namespace,
    out: Path,
    pushgateway: LocalServer,
    manager: LocalServer,
    prom: LocalServer,
    webhook_url: str,
) -> None:
    """The addresses to open, and how to stop the demo."""
    print(
        f"Prometheus   {prom.url}  (alerts: {prom.url}/alerts, rules: {prom.url}/rules)\n"
        f"Pushgateway  {pushgateway.url}\n"
        f"Alertmanager {manager.url}  (API: {manager.url}/api/v2/alerts; "
        f"amtool --alertmanager.url={manager.url} alert query)\n"
        f"on-call      {webhook_url}/{{page,ticket}}"
        f"{'' if args.webhook_url else '  (Alertmanager posts there; notifications print here)'}\n"
        f"job metrics  http://127.0.0.1:{args.metrics_port}/metrics   (job log: {out / 'job.log'})\n"
        f"Grafana      provision infra/grafana/ against {prom.url} to see the dashboards\n"
        "Ctrl-C stops the demo.",
        flush=True,
    )


def _watch(
    args: argparse.Namespace, out: Path, feeder: subprocess.Popen[bytes], job: subprocess.Popen[bytes]
) -> int:
    """Wait for the end of the stream (or ``--duration``); 1 when the job stops first, else 0."""
    deadline = time.monotonic() + args.duration if args.duration else None
    while True:
        if deadline is not None and time.monotonic() >= deadline:
            return 0
        if feeder.poll() is not None and deadline is None:
            time.sleep(30)  # let the job take up the last files and Prometheus scrape them
            return 0
        if job.poll() is not None:
            print(f"the job stopped (exit {job.returncode}); see {out / 'job.log'}", file=sys.stderr)
            return 1
        time.sleep(1)


def _stop(started: _Started) -> None:
    """Stop the feeder and the job, then the servers, then the webhook receiver."""
    children = started.children
    for child in children:  # the feeder just ends; the job stops its query cleanly on SIGINT
        if child.poll() is None:
            child.send_signal(signal.SIGINT if child is not children[0] else signal.SIGTERM)
    for child in children:
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
    for server in started.servers:
        server.stop()
    if started.webhook is not None:
        started.webhook.stop()


def main(argv: list[str] | None = None) -> int:
    """Run the demo; returns the process exit code."""
    args = _parser().parse_args(argv)
    busy = _busy_ports(args)
    if busy:
        print(f"error: port(s) {busy} on 127.0.0.1 are in use; pass other --*-port values", file=sys.stderr)
        return 2
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    started = _Started()
    try:
        webhook_url, manager, prom = _start_monitoring(args, out, started)
        _start_feed_and_job(args, out, started)
        _print_addresses(args, out, started.servers[0], manager, prom, webhook_url)
        feeder, job = started.children
        if _watch(args, out, feeder, job) == 1:
            return 1
    except KeyboardInterrupt:
        pass
    finally:
        _stop(started)
    print(f"stopped; tables under {out / 'tables'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
