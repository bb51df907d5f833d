"""The watermark as a function of the ingestion clock, and the instant at which it first reaches a value.

A generator's watermark moves at arrivals (an observed tuple raises it) and between them (a periodic timer,
an idle advance: what ``on_idle`` does). A run (``process_trace``) records, for each event ``j`` at
ingestion time ``t_j``, the watermark in force when it arrived (``pre``) and right after it (``post``), and
how the watermark rose during the gap ``(t_{j-1}, t_j]`` before it: from the instant ``rise[j]`` on, either a
*step* to ``pre[j]`` (a timer) or a *ramp* ``W(t) = t - offset[j]`` capped at ``pre[j]`` (an advance that
follows the clock). ``on_idle`` is path independent, so this describes the watermark at *every* instant.

A window ``[start, end)`` fires at the earliest ingestion-clock instant at which ``W >= end``, whether an
arrival or a timer raised it (:meth:`Timeline.fire`). A partition combination's timeline holds one component
per partition: the global value at ``t`` is the running maximum of the minimum over the partitions active at
``t`` (a partition stops counting at ``dropout``, its last arrival plus the idle timeout).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from watermark.timeutil import INT64_MAX, NO_WATERMARK

I64 = NDArray[np.int64]

#: ``rise`` of a gap in which time alone never moves the watermark.
NO_RISE = INT64_MAX


@dataclass(frozen=True)
class Component:
    """One generator's watermark over the events of a run.

    Attributes
    ----------
    before
        Watermark before the first event.
    pre, post
        Watermark at and right after each event.
    rise
        First instant in the gap before each event at which time alone raises the watermark (``NO_RISE``:
        never; a rise at the event itself is then credited to the event).
    offset
        ``None``: the rise is a step to ``pre``; else, from ``rise`` on,
        ``W(t) = min(pre, max(W, t - offset))``.
    dropout
        Per event: the instant from which the component stops counting in a combination (``INT64_MAX``:
        never; ``NO_WATERMARK``: it does not count in that gap at all). ``None``: always counts.

    """

    before: int
    pre: I64
    post: I64
    rise: I64
    offset: I64 | None = None
    dropout: I64 | None = None

    def reach(self, end: I64, j: NDArray[np.intp]) -> I64:
        """Earliest instant in the gap before event ``j`` at which the watermark is ``>= end``.

        ``NO_WATERMARK`` if it already is before the gap, ``INT64_MAX`` if it is not by the event.
        """
        before = np.where(j > 0, self.post[np.maximum(j - 1, 0)], self.before)
        pre = self.pre[j]
        at = self.rise[j]
        if self.offset is not None:
            off = self.offset[j]
            ramp = np.where(at == NO_RISE, at, end + off)
            at = np.maximum(at, ramp)
        return np.where(end <= before, NO_WATERMARK, np.where(end <= pre, at, INT64_MAX))

    def value_at(self, t: I64, tp: I64, j: NDArray[np.intp]) -> I64:
        """The watermark at instant ``t`` of the gap before event ``j`` (``t == tp[j]``: at the event)."""
        before = np.where(j > 0, self.post[np.maximum(j - 1, 0)], self.before)
        pre = self.pre[j]
        rise = self.rise[j]
        if self.offset is None:
            inside = np.where(t >= rise, pre, before)
        else:
            ramp = np.minimum(pre, np.maximum(before, t - self.offset[j]))
            inside = np.where(t >= rise, ramp, before)
        return np.where(t >= tp[j], pre, inside)

    def counts_at(self, t: I64, j: NDArray[np.intp]) -> NDArray[np.bool_]:
        """Whether the component counts in the combination at instant ``t`` of the gap before ``j``."""
        if self.dropout is None:
            return np.ones(t.shape, np.bool_)
        flags: NDArray[np.bool_] = t < self.dropout[j]
        return flags


@dataclass(frozen=True)
class Timeline:
    """The watermark of a run at every ingestion-clock instant between its first and last event.

    Attributes
    ----------
    tp
        Ingestion time of each event (nondecreasing).
    pre, post
        The (combined) watermark at and right after each event.
    before
        The watermark before the first event.
    parts
        One component (a single generator) or one per partition of a combination.

    """

    tp: I64
    pre: I64
    post: I64
    before: int
    parts: tuple[Component, ...]

    def fire(self, end: I64) -> tuple[NDArray[np.bool_], I64, I64]:
        """For each window end: fired by the last event, the instant it fired and the watermark then.

        A window fires at the earliest instant at which ``W >= end``; where it did not fire, the instant and
        watermark are undefined (0).

        Examples
        --------
        A periodic timer every 100 ms from ``t = 0`` raises the watermark to ``1_300 - 100`` at the grid
        instant 1_400, before the arrival at 1_420 that would have been credited with it:

        >>> import numpy as np
        >>> from watermark.strategies.periodic import Periodic
        >>> trace = Periodic(delay_ms=100, period_ms=100).process_trace([0, 1_300, 1_400], [0, 1_310, 1_420])
        >>> fired, t, w = trace.timeline.fire(np.array([1_000, 5_000]))
        >>> fired.tolist(), int(t[0]), int(w[0])
        ([True, False], 1400, 1200)

        """
        end = np.asarray(end, np.int64)
        n = self.tp.size
        levels = np.empty(2 * n, np.int64)
        levels[0::2] = self.pre
        levels[1::2] = self.post
        k = np.searchsorted(levels, end, side="left")
        fired = k < 2 * n
        j = np.minimum(k // 2, max(n - 1, 0)).astype(np.intp)
        t = np.zeros(end.size, np.int64)
        w = np.zeros(end.size, np.int64)
        if n == 0:
            return fired, t, w
        by_arrival = fired & (k % 2 == 1)
        t[by_arrival] = self.tp[j[by_arrival]]
        w[by_arrival] = self.post[j[by_arrival]]
        gap = np.flatnonzero(fired & (k % 2 == 0))
        if gap.size:
            tg, wg = self._solve(end[gap], j[gap])
            t[gap], w[gap] = tg, wg
        return fired, t, w

    def fire_at_arrivals(self, end: I64) -> tuple[NDArray[np.bool_], I64, I64]:
        """Like :meth:`fire` for a consumer that only fires windows at arrivals (never at a timer).

        The first event after which ``W >= end``, its instant and the watermark right after it: what a job
        that fires only at the end of each arrival's processing records. Never earlier than :meth:`fire`'s
        instant; the same windows fire by the last event.
        """
        end = np.asarray(end, np.int64)
        n = self.tp.size
        at = np.searchsorted(self.post, end, side="left")
        fired = at < n
        safe = np.minimum(at, max(n - 1, 0))
        if n == 0:
            return fired, np.zeros(end.size, np.int64), np.zeros(end.size, np.int64)
        return fired, np.where(fired, self.tp[safe], 0), np.where(fired, self.post[safe], 0)

    def _solve(self, end: I64, j: NDArray[np.intp]) -> tuple[I64, I64]:
        """Fire instants of windows whose end the watermark reached in the gap before event ``j``."""
        at = np.full(end.size, NO_WATERMARK, np.int64)
        for part in self.parts:
            reach = part.reach(end, j)
            if part.dropout is not None:
                reach = np.minimum(reach, part.dropout[j])
            np.maximum(at, reach, out=at)
        tp_j = self.tp[j]
        at = np.where((at > tp_j) | (at == NO_WATERMARK), tp_j, at)
        low = np.full(end.size, INT64_MAX, np.int64)
        for part in self.parts:
            value = part.value_at(at, self.tp, j)
            np.minimum(low, np.where(part.counts_at(at, j), value, INT64_MAX), out=low)
        before = np.where(j > 0, self.post[np.maximum(j - 1, 0)], self.before)
        w = np.where(low == INT64_MAX, before, np.maximum(before, low))
        return at, w
