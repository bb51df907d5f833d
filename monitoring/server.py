"""The job's metrics endpoint: ``/metrics`` over HTTP, on 127.0.0.1 unless told otherwise.

A job that ends with an error must not take the evidence with it: when :meth:`MetricsServer.stop` runs
while an exception propagates (the job's ``finally``), it counts the failure in
``awm_query_terminated_with_error_total`` (unless Spark's listener already did) and keeps serving until
Prometheus has scraped it once more, at most ``linger_s`` (``AWM_METRICS_LINGER_SECONDS``, default 60: a
scrape interval or two). The alert ``AwmStreamingQueryFailed`` then sees the counter rise.
"""

from __future__ import annotations

import errno
import logging
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server

log = logging.getLogger(__name__)


#: After the scrape that collected a failure, how long the server stays up so that its response is sent.
SCRAPE_GRACE_S = 1.0


class MetricsPortBusy(RuntimeError):
    """The metrics port is taken by another process."""


@dataclass
class MetricsServer:
    """A running ``/metrics`` server; :meth:`stop` shuts it down."""

    host: str
    port: int
    _server: Any
    _thread: Any
    registry: CollectorRegistry | None = None

    @property
    def url(self) -> str:
        """Where Prometheus scrapes it."""
        return f"http://{self.host}:{self.port}/metrics"

    def stop(self, linger_s: float | None = None) -> None:
        """Stop serving and free the port; after a failure, once Prometheus has seen it (module docstring)."""
        failure = sys.exc_info()[1]
        if isinstance(failure, Exception) and self.registry is not None:
            self.report_failure(failure, linger_s)
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def report_failure(self, failure: BaseException, linger_s: float | None = None) -> bool:
        """Count ``failure`` as the query's and wait for a scrape; True if one came within ``linger_s``."""
        from monitoring.metrics import job_metrics_of

        metrics = job_metrics_of(self.registry) if self.registry is not None else None
        if metrics is None:
            return False
        metrics.query_failed()
        wait = linger_s if linger_s is not None else float(os.environ.get("AWM_METRICS_LINGER_SECONDS", "60"))
        log.error(
            "the job ended with an error (%s); serving %s until Prometheus scrapes it (at most %.0f s)",
            str(failure).splitlines()[0][:200] if str(failure) else type(failure).__name__,
            self.url,
            wait,
        )
        seen = metrics.wait_until_scraped(wait)
        if not seen:
            log.error("no scrape within %.0f s: the failure may not reach Prometheus", wait)
        else:  # the scrape has collected the failure; let its response reach Prometheus before shutting down
            time.sleep(SCRAPE_GRACE_S)
        return seen


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
    return MetricsServer(host, bound, server, thread, registry)
