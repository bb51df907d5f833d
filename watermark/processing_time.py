"""The processing-time watermark: ingestion time of the oldest input not yet fully processed.

Streaming Systems (chapter 3) tells a *stuck system* from *delayed data* with it: the event-time watermark
lag grows in both cases, the processing-time watermark lag only when work is stuck. Work items (a
micro-batch, a file, a backfill interval) are registered with the ingestion time of their oldest input when
they start and removed when they complete. With nothing in flight the system is caught up: the watermark is
``now`` and the lag 0, so idle input pages no one.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from watermark.timeutil import NO_WATERMARK


class ProcessingTimeWatermark:
    """Track in-flight work and report the processing-time watermark and its lag.

    Examples
    --------
    >>> from watermark.processing_time import ProcessingTimeWatermark
    >>> ptw = ProcessingTimeWatermark()
    >>> ptw.started("batch-7", oldest_tp_ms=1_000)
    >>> ptw.lag_ms(now_ms=4_000)   # batch 7 still running: its oldest input waits for 3 s
    3000
    >>> ptw.completed("batch-7")
    >>> ptw.lag_ms(now_ms=9_000)   # nothing in flight: caught up
    0

    """

    def __init__(self) -> None:
        self._pending: dict[Hashable, int] = {}
        self._last = NO_WATERMARK

    @property
    def in_flight(self) -> dict[Hashable, int]:
        """Work items not yet completed, with the ingestion time of their oldest input."""
        return dict(self._pending)

    def started(self, work_id: Hashable, oldest_tp_ms: int) -> None:
        """Register work whose oldest input was ingested at ``oldest_tp_ms``."""
        if work_id in self._pending:
            msg = f"work item {work_id!r} is already in flight"
            raise ValueError(msg)
        self._pending[work_id] = int(oldest_tp_ms)

    def completed(self, work_id: Hashable) -> None:
        """Mark work done; unknown ids raise, since they mean lost bookkeeping."""
        try:
            del self._pending[work_id]
        except KeyError:
            msg = f"work item {work_id!r} is not in flight"
            raise ValueError(msg) from None

    def watermark_ms(self, now_ms: int) -> int:
        """Oldest in-flight ingestion time, or ``now_ms`` when nothing is in flight; never regresses."""
        value = min(self._pending.values()) if self._pending else int(now_ms)
        self._last = max(self._last, value)
        return self._last

    def lag_ms(self, now_ms: int) -> int:
        """``now_ms`` minus the processing-time watermark (0 when caught up)."""
        return max(0, int(now_ms) - self.watermark_ms(now_ms))

    def snapshot(self) -> dict[str, Any]:
        """JSON-serialisable state (work ids must be strings or integers)."""
        return {"pending": [[k, v] for k, v in self._pending.items()], "last": self._last}

    @classmethod
    def from_snapshot(cls, snap: Mapping[str, Any]) -> ProcessingTimeWatermark:
        """Rebuild from :meth:`snapshot`."""
        obj = cls()
        obj._pending = {k: int(v) for k, v in snap["pending"]}
        obj._last = int(snap["last"])
        return obj
