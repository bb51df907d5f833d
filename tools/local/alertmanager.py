"""A local Alertmanager on 127.0.0.1 (Debian's package) and a webhook receiver, for the demo and the tests.

:func:`alertmanager_config` writes a copy of ``infra/alertmanager/alertmanager.yml`` whose webhooks post to
a given base URL, with shorter grouping delays if asked (a test's seconds); :func:`start_alertmanager` runs
Alertmanager on it in the foreground as a child process with its own data folder and no cluster port;
:class:`WebhookReceiver` is the on-call end of a webhook: an HTTP server that records every notification.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from tools.local.processes import free_port
from tools.local.prometheus import LocalServer

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "infra" / "alertmanager" / "alertmanager.yml"
#: Where the committed configuration's webhooks post (``/page`` and ``/ticket`` under it).
DEFAULT_WEBHOOK = "http://127.0.0.1:9095/alerts"
#: Debian names the server ``prometheus-alertmanager``; upstream's release archive ``alertmanager``.
BINARIES = ("prometheus-alertmanager", "alertmanager")
INSTALL_HINT = "install it with: apt-get install -y prometheus-alertmanager"


def binary(names: tuple[str, ...] = BINARIES) -> str:
    """Path of the first of ``names`` on PATH, or a clear error saying how to install it."""
    for name in names:
        path = shutil.which(name)
        if path is not None:
            return path
    msg = f"{' or '.join(names)} not found; {INSTALL_HINT}"
    raise FileNotFoundError(msg)


def alertmanager_config(
    path: Path,
    webhook: str | None = None,
    *,
    group_wait: str | None = None,
    group_interval: str | None = None,
    repeat_interval: str | None = None,
    source: Path = CONFIG,
) -> Path:
    """Write ``source`` (the committed configuration) to ``path`` with its webhooks under ``webhook``.

    Each webhook URL keeps its path below :data:`DEFAULT_WEBHOOK` (``/page``, ``/ticket``) under the new
    base; the grouping delays replace those of every route that sets them; template globs become absolute
    (Alertmanager reads them relative to the configuration file).
    """
    doc = yaml.safe_load(source.read_text())
    if webhook is not None:
        for receiver in doc.get("receivers", []):
            for hook in receiver.get("webhook_configs", []):
                url = hook["url"]
                if not url.startswith(DEFAULT_WEBHOOK):
                    msg = f"webhook {url!r} of receiver {receiver['name']!r} is not under {DEFAULT_WEBHOOK}"
                    raise ValueError(msg)
                hook["url"] = webhook.rstrip("/") + url.removeprefix(DEFAULT_WEBHOOK)
    timings = {"group_wait": group_wait, "group_interval": group_interval, "repeat_interval": repeat_interval}
    routes = [doc["route"]]
    while routes:
        route = routes.pop()
        for key, value in timings.items():
            if value is not None and (key in route or route is doc["route"]):
                route[key] = value
        routes.extend(route.get("routes", []))
    doc["templates"] = [str((source.parent / glob).resolve()) for glob in doc.get("templates", [])]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def start_alertmanager(config: Path, workdir: Path, port: int | None = None) -> LocalServer:
    """An Alertmanager on 127.0.0.1 with ``config`` and its own data folder under ``workdir``, ready.

    Clustering is off (``--cluster.listen-address=``): a single local instance needs no gossip port.
    """
    port = port or free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / "alertmanager.log"
    args = [
        binary(),
        f"--config.file={config}",
        f"--web.listen-address=127.0.0.1:{port}",
        f"--storage.path={workdir / 'data'}",
        "--cluster.listen-address=",
    ]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, cwd=workdir, start_new_session=True
        )
    server = LocalServer("alertmanager", port, process, log_path)
    server.wait_ready()
    return server


def post_alerts(alertmanager: str, alerts: list[dict[str, Any]]) -> None:
    """Send ``alerts`` (``labels``, ``annotations``, optional times) to Alertmanager, as Prometheus does."""
    request = urllib.request.Request(
        f"{alertmanager.rstrip('/')}/api/v2/alerts",
        data=json.dumps(alerts).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()


class WebhookReceiver:
    """An HTTP server on 127.0.0.1 keeping every JSON notification POSTed to it, with its path.

    ``on_notification(path, payload)``, if given, is called for each (the demo prints them).
    """

    def __init__(
        self,
        port: int = 0,
        on_notification: Callable[[str, dict[str, Any]], None] | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self._received: list[tuple[str, dict[str, Any]]] = []
        self._on_notification = on_notification
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    payload = json.loads(body)
                except ValueError:
                    self.send_error(400, "not JSON")
                    return
                receiver._record(self.path, payload)
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
                """Quiet: the notifications are the output."""

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def _record(self, path: str, payload: dict[str, Any]) -> None:
        with self._lock:
            self._received.append((path, payload))
        if self._on_notification is not None:
            self._on_notification(path, payload)

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """Base URL; give it as ``webhook`` to :func:`alertmanager_config`."""
        return f"http://127.0.0.1:{self.port}/alerts"

    @property
    def notifications(self) -> list[tuple[str, dict[str, Any]]]:
        """What arrived so far: ``(path, payload)`` in arrival order."""
        with self._lock:
            return list(self._received)

    def alerts(self, status: str = "firing") -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
        """Every alert received with ``status``: ``(path, alert, its notification's payload)``."""
        return [
            (path, alert, payload)
            for path, payload in self.notifications
            for alert in payload.get("alerts", [])
            if alert.get("status") == status
        ]

    def stop(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


def describe(path: str, payload: dict[str, Any]) -> str:
    """One line per alert of a notification: what the demo prints."""
    lines = []
    for alert in payload.get("alerts", []):
        labels = alert.get("labels", {})
        where = ", ".join(f"{k}={v}" for k, v in sorted(payload.get("groupLabels", {}).items()))
        lines.append(
            f"[{payload.get('receiver')}] {alert.get('status', '?').upper()} {labels.get('alertname')}"
            f" ({labels.get('severity')}; {where}): {alert.get('annotations', {}).get('summary', '')}"
            f"  runbook: {alert.get('annotations', {}).get('runbook_url', '-')}"
        )
    return "\n".join(lines) or f"{path}: {payload}"
