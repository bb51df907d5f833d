"""A local Prometheus and Pushgateway on 127.0.0.1 (Debian's packages), for the demo and the tests.

Each runs in the foreground as a child process with its own data folder, and :meth:`LocalServer.stop`
ends it. :func:`prometheus_config` writes a scrape configuration for given targets with the project's rule
files, so a test can point a real Prometheus at a real run of the job.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.local.processes import free_port, terminate

INSTALL_HINT = "install it with: apt-get install -y prometheus prometheus-pushgateway"


def binary(name: str) -> str:
    """Path of ``name``, or a clear error saying how to install it."""
    path = shutil.which(name)
    if path is None:
        msg = f"{name} not found; {INSTALL_HINT}"
        raise FileNotFoundError(msg)
    return path


@dataclass
class LocalServer:
    """A child server process listening on ``127.0.0.1:port``."""

    name: str
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def url(self) -> str:
        """Base URL."""
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, path: str = "/-/ready", timeout_s: float = 30.0) -> None:
        """Wait until ``path`` answers 200, or raise with the server's log."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                with urllib.request.urlopen(self.url + path, timeout=1) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.1)
        log = self.log_path.read_text(errors="replace")[-3000:] if self.log_path.exists() else ""
        self.stop()
        msg = f"{self.name} on port {self.port} did not become ready; its log ends:\n{log}"
        raise RuntimeError(msg)

    def stop(self) -> None:
        """Terminate the process (kill it if it does not stop within 10 s)."""
        if self.process.poll() is None:
            terminate(self.process.pid, 10, child=self.process)

    def get_json(self, path: str, **params: str) -> Any:
        """GET ``path`` with query ``params``; the decoded JSON body (also for 4xx answers)."""
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return json.loads(exc.read())


def _start(name: str, args: Sequence[str], port: int, workdir: Path) -> LocalServer:
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / f"{name}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [binary(name), *args], stdout=log, stderr=subprocess.STDOUT, cwd=workdir, start_new_session=True
        )
    return LocalServer(name, port, process, log_path)


def start_pushgateway(workdir: Path, port: int | None = None) -> LocalServer:
    """A Pushgateway on 127.0.0.1 keeping its metrics in memory only, ready.

    Debian's build persists to ``/var/lib/prometheus/pushgateway.data`` by default, which every gateway
    started on the machine would then share (a test would read another run's pushes): the persistence file
    is switched off explicitly.
    """
    port = port or free_port()
    args = [f"--web.listen-address=127.0.0.1:{port}", "--persistence.file="]
    server = _start("prometheus-pushgateway", args, port, workdir)
    server.wait_ready()
    return server


def start_prometheus(config: Path, workdir: Path, port: int | None = None) -> LocalServer:
    """A Prometheus on 127.0.0.1 with ``config`` and its own TSDB under ``workdir``, ready."""
    port = port or free_port()
    args = [
        f"--config.file={config}",
        f"--web.listen-address=127.0.0.1:{port}",
        f"--storage.tsdb.path={workdir / 'tsdb'}",
        "--web.enable-lifecycle",
    ]
    server = _start("prometheus", args, port, workdir)
    server.wait_ready()
    return server


def prometheus_config(
    path: Path,
    targets: Mapping[str, str],
    rule_files: Sequence[Path] = (),
    interval: str = "15s",
    honor_labels: Sequence[str] = ("pushgateway",),
    alertmanagers: Sequence[str] = (),
) -> Path:
    """Write a Prometheus configuration scraping ``targets`` (job name -> ``host:port``) with ``rule_files``.

    Its alerts go to ``alertmanagers`` (``host:port`` each; see :mod:`tools.local.alertmanager`), if any.
    JSON is valid YAML, so the file is written as JSON.
    """
    scrape = []
    for job, target in targets.items():
        entry: dict[str, Any] = {"job_name": job, "static_configs": [{"targets": [target]}]}
        if job in honor_labels:
            entry["honor_labels"] = True
        scrape.append(entry)
    doc: dict[str, Any] = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": scrape,
    }
    if alertmanagers:
        doc["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": list(alertmanagers)}]}]}
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return path
