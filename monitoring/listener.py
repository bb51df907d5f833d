"""A ``StreamingQueryListener`` that feeds Spark's own batch figures into :class:`JobMetrics`."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

from pyspark.sql.streaming.listener import StreamingQueryListener

from monitoring.metrics import JobMetrics

log = logging.getLogger(__name__)


class MetricsListener(StreamingQueryListener):
    """Batch duration of every query progress; failed query terminations counted.

    Register with ``spark.streams.addListener(listener)``; remove with ``removeListener`` when the query is
    done. Only events of the query whose id is ``query_id`` count (set by :meth:`follow`), so that other
    queries of the same session do not pollute the job's figures.

    Spark calls it through :class:`_LeanJavaListener`, which reads from each event only what these methods
    use (PySpark's own adapter converts every event whole: dozens of calls into the JVM a batch).
    """

    @property
    def _jlistener(self) -> Any:
        """The JVM's side of this listener (what ``spark.streams.addListener`` registers)."""
        if not hasattr(self, "_lean_jlistener"):
            from pyspark import SparkContext

            jvm = SparkContext._jvm
            assert jvm is not None, "a listener is registered with a running SparkContext"
            self._lean_jlistener = jvm.PythonStreamingQueryListenerWrapper(_LeanJavaListener(self))
        return self._lean_jlistener

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


class _LeanJavaListener:
    """Spark's Java interface of a Python streaming listener, reading only what :class:`MetricsListener` uses.

    That is the query's id, a progress's batch duration and a termination's error. PySpark's adapter
    converts each event whole before calling the listener (ids, sources, sink, metrics maps): a few dozen
    calls into the JVM a micro-batch, some of which make py4j look classes up through every jar (a 39-batch
    job spent 5-6 % of its CPU there). These are four calls a progress.
    """

    def __init__(self, listener: MetricsListener) -> None:
        self.listener = listener

    def onQueryStarted(self, jevent: Any) -> None:  # noqa: N802 (Spark's name)
        """Nothing to count."""

    def onQueryProgress(self, jevent: Any) -> None:  # noqa: N802
        progress = jevent.progress()
        query_id = progress.id().toString()
        if self.listener._ours(query_id):
            self.listener.metrics.query_progress(float(progress.batchDuration()) / 1000)

    def onQueryIdle(self, jevent: Any) -> None:  # noqa: N802
        self.listener.onQueryIdle(SimpleNamespace(id=jevent.id().toString()))

    def onQueryTerminated(self, jevent: Any) -> None:  # noqa: N802
        jexception = jevent.exception()
        exception = jexception.get() if jexception.isDefined() else None
        self.listener.onQueryTerminated(SimpleNamespace(id=jevent.id().toString(), exception=exception))

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]
