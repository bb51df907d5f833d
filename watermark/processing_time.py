"""The processing-time watermark: ingestion time of the oldest input not yet fully processed.

Streaming Systems (chapter 3) tells a *stuck system* from *delayed data* with it: the event-time watermark
lag grows in both cases, the processing-time watermark lag only when work is stuck. Work items (a
micro-batch, a file, a backfill interval) are registered with the ingestion time of their oldest input when
they start and removed when they complete.

* With work in flight the watermark is the oldest in-flight input's ingestion time, whatever was reported
  before: a batch that starts with input older than an earlier reading (a file source discovers files only
  when it plans a batch) shows that wait in full. There is no never-decreasing rule; the value is a lag
  measure, and hiding an older batch's wait is the one thing it must not do.
* With nothing in flight, all that is known is that the system was caught up at the last instant it said
  so: a completed item, or a trigger that found nothing to do (:meth:`caught_up`). The watermark is that
  instant and the lag grows with the time since, so a trigger stuck before it starts a batch does not look
  caught up, which is the case the metric exists for. Before any report the lag counts from ``start_ms``
  (if given), else it is 0.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any


class ProcessingTimeWatermark:
    """Track in-flight work and report the processing-time watermark and its lag.

    Parameters
    ----------
    start_ms
        When tracking began (the job's start); the lag before any report counts from it.

    Examples
    --------
    >>> from watermark.processing_time import ProcessingTimeWatermark
    >>> ptw = ProcessingTimeWatermark()
    >>> ptw.started("batch-7", oldest_tp_ms=1_000)
    >>> ptw.lag_ms(now_ms=4_000)   # batch 7 still running: its oldest input waits for 3 s
    3000
    >>> ptw.completed("batch-7", now_ms=5_000)
    >>> ptw.lag_ms(now_ms=5_000)   # caught up at 5 s
    0
    >>> ptw.lag_ms(now_ms=9_000)   # no batch since: nothing shows the system is still moving
    4000
    >>> ptw.caught_up(now_ms=9_500)   # a trigger found no input
    >>> ptw.lag_ms(now_ms=9_600)
    100

    """

    def __init__(self, start_ms: int | None = None) -> None:
        self._pending: dict[Hashable, int] = {}
        self._caught_up: int | None = None if start_ms is None else int(start_ms)

    @property
    def in_flight(self) -> dict[Hashable, int]:
        """Work items not yet completed, with the ingestion time of their oldest input."""
        return dict(self._pending)

    @property
    def caught_up_ms(self) -> int | None:
        """The last instant the system was known to be caught up (None: never reported)."""
        return self._caught_up

    def started(self, work_id: Hashable, oldest_tp_ms: int) -> None:
        """Register work whose oldest input was ingested at ``oldest_tp_ms``."""
        if work_id in self._pending:
            msg = f"work item {work_id!r} is already in flight"
            raise ValueError(msg)
        self._pending[work_id] = int(oldest_tp_ms)

    def completed(self, work_id: Hashable, now_ms: int | None = None) -> None:
        """Mark work done at ``now_ms``; unknown ids raise, since they mean lost bookkeeping.

        Without ``now_ms`` the completion does not count as a caught-up instant (the idle lag then keeps
        counting from the previous one).
        """
        try:
            del self._pending[work_id]
        except KeyError:
            msg = f"work item {work_id!r} is not in flight"
            raise ValueError(msg) from None
        if now_ms is not None and not self._pending:
            self.caught_up(now_ms)

    def caught_up(self, now_ms: int) -> None:
        """Report that at ``now_ms`` nothing was waiting (a trigger that found no new input)."""
        now = int(now_ms)
        if self._caught_up is None or now > self._caught_up:
            self._caught_up = now

    def watermark_ms(self, now_ms: int) -> int:
        """Oldest in-flight ingestion time; with nothing in flight the last caught-up instant (or now)."""
        if self._pending:
            return min(self._pending.values())
        return int(now_ms) if self._caught_up is None else min(int(now_ms), self._caught_up)

    def lag_ms(self, now_ms: int) -> int:
        """``now_ms`` minus the processing-time watermark."""
        return max(0, int(now_ms) - self.watermark_ms(now_ms))

    def snapshot(self) -> dict[str, Any]:
        """JSON-serialisable state (work ids must be strings or integers)."""
        return {"pending": [[k, v] for k, v in self._pending.items()], "caught_up": self._caught_up}

    @classmethod
    def from_snapshot(cls, snap: Mapping[str, Any]) -> ProcessingTimeWatermark:
        """Rebuild from :meth:`snapshot` (snapshots of the earlier layout, with ``last``, load too)."""
        obj = cls()
        obj._pending = {k: int(v) for k, v in snap["pending"]}
        caught = snap.get("caught_up")
        obj._caught_up = None if caught is None else int(caught)
        return obj
