"""A ``StreamingQueryListener`` that feeds Spark's own batch figures into :class:`JobMetrics`."""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener

from monitoring.metrics import JobMetrics

log = logging.getLogger(__name__)


class MetricsListener(StreamingQueryListener):  # type: ignore[misc]
    """Batch duration of every query progress; failed query terminations counted.

    Register with ``spark.streams.addListener(listener)``; remove with ``removeListener`` when the query is
    done. Only events of the query whose id is ``query_id`` count (set by :meth:`follow`), so that other
    queries of the same session do not pollute the job's figures.
    """

    def __init__(self, metrics: JobMetrics) -> None:
        self.metrics = metrics
        self.query_id: str | None = None

    def follow(self, query_id: str) -> None:
        """Count only the events of this query."""
        self.query_id = str(query_id)

    def _ours(self, query_id: Any) -> bool:
        return self.query_id is None or str(query_id) == self.query_id

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802 (Spark's name)
        """Nothing to count."""

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802
        """One micro-batch finished: its duration."""
        progress = event.progress
        if self._ours(progress.id):
            self.metrics.query_progress(float(progress.batchDuration) / 1000)

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802
        """A trigger found no new input: the job is caught up now (the processing-time lag restarts)."""
        if self._ours(event.id):
            self.metrics.query_idle()

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
        """The query ended; an exception counts as a failure."""
        if self._ours(event.id) and event.exception:
            self.metrics.query_failed()
            log.error("streaming query %s ended with an error: %s", event.id, event.exception[:500])
