"""The job's metrics endpoint: ``/metrics`` over HTTP, on 127.0.0.1 unless told otherwise."""

from __future__ import annotations

import errno
import logging
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server

log = logging.getLogger(__name__)


class MetricsPortBusy(RuntimeError):
    """The metrics port is taken by another process."""


@dataclass
class MetricsServer:
    """A running ``/metrics`` server; :meth:`stop` shuts it down."""

    host: str
    port: int
    _server: Any
    _thread: Any

    @property
    def url(self) -> str:
        """Where Prometheus scrapes it."""
        return f"http://{self.host}:{self.port}/metrics"

    def stop(self) -> None:
        """Stop serving and free the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def serve(registry: CollectorRegistry, port: int, host: str = "127.0.0.1") -> MetricsServer:
    """Serve ``registry`` at ``http://host:port/metrics`` (port 0: any free port) in a daemon thread."""
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            msg = f"metrics port {host}:{port} is in use: pass another --metrics-port, or 0 to serve on none"
            raise MetricsPortBusy(msg) from exc
        raise
    bound = server.server_address[1]
    log.info("metrics at http://%s:%d/metrics", host, bound)
    return MetricsServer(host, bound, server, thread)
