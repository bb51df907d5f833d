"""Periodic bounded-delay watermarks: the Flink/Spark default and the adaptive-watermarks paper's baseline."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from watermark.base import I64, Idx, WatermarkGenerator, check_int
from watermark.timeline import NO_RISE
from watermark.timeutil import NO_WATERMARK, running_max, sat_sub, shift_right


def grid_rises(tp: I64, arrivals: Idx | None, t0: int | None, clock: int | None, period_ms: int) -> I64:
    """First grid instant ``t0 + k * period_ms`` in the gap before each event (``NO_RISE`` before a grid).

    The grid starts at the first arrival (``t0``, or the first of ``arrivals`` when ``t0`` is None); the gap
    before event ``j`` is ``(tp[j-1], tp[j]]``, the first one starting at ``clock``.
    """
    n = tp.size
    first = -1
    if t0 is None:
        if arrivals is None:
            first = 0
        else:
            first = int(arrivals[0]) if arrivals.size else n
        if first >= n:
            return np.full(n, NO_RISE, np.int64)
        t0 = int(tp[first])
    prev = np.empty(n, np.int64)
    prev[0] = t0 if clock is None else clock
    prev[1:] = tp[:-1]
    rise = t0 + ((prev - t0) // period_ms + 1) * period_ms
    rise[: first + 1] = NO_RISE  # no grid before (and at) the first arrival
    return rise


class Periodic(WatermarkGenerator):
    """Every ``period_ms`` of ingestion time, ``W = max(te seen) - delay_ms``.

    Emission points lie on the grid ``t0 + k * period_ms`` of ingestion time, ``t0`` being the first
    arrival's ``tp``. A timer fires at each grid instant ``g`` (Flink's auto-watermark interval):
    ``W = max(W, max te of the tuples that arrived before g - delay_ms)``; an arrival at ``g`` is judged
    against the new ``W``. The emission happens at ``g`` itself, not at the next arrival: ``on_idle`` applies
    it, and the replay's timeline (:mod:`watermark.timeline`) credits windows it fires to ``g``. Several grid
    points without an arrival between them emit the same value.

    Parameters
    ----------
    delay_ms
        Bounded out-of-orderness ``m`` (Flink's ``maxOutOfOrderness``), >= 0.
    period_ms
        Emission period ``s`` in ingestion time (Flink's ``autoWatermarkInterval``), >= 1.

    Examples
    --------
    The periodic generator of the adaptive-watermarks paper's Figure 1 (``s = 3``, ``m = 5``) emits 95, 98
    and 101 at ``tp`` = 103, 106 and 109:

    >>> from watermark.strategies.periodic import Periodic
    >>> gen = Periodic(delay_ms=5, period_ms=3)
    >>> te = [94, 97, 100, 99, 103, 93, 102, 96, 106, 99, 109]
    >>> tp = [100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110]
    >>> gen.process(te, tp).tolist()[3:]
    [95, 95, 95, 98, 98, 98, 101, 101]
    >>> gen.watermark_ms
    101

    """

    name = "periodic"
    param_types: ClassVar[Mapping[str, Any]] = {"delay_ms": int, "period_ms": int}

    search_space: ClassVar[Sequence[Mapping[str, Any]]] = [
        {"delay_ms": d, "period_ms": p} for p in (10, 50, 200) for d in range(0, 5_001, 10)
    ]
    monotone_param: ClassVar[str | None] = "delay_ms"
    comparison_grid: ClassVar[Sequence[Mapping[str, Any]]] = [
        {"delay_ms": 0, "period_ms": 10},
        {"delay_ms": 100, "period_ms": 10},
        {"delay_ms": 1_000, "period_ms": 200},
        {"delay_ms": 10_000, "period_ms": 200},
        {"delay_ms": 600_000, "period_ms": 200},
    ]

    @classmethod
    def test_settings(cls, pick: Callable[[Sequence[Any]], Any]) -> dict[str, Any]:
        """The contract tests' parameters (:meth:`watermark.base.WatermarkGenerator.test_settings`)."""
        return {"delay_ms": pick(range(301)), "period_ms": pick(range(1, 121))}

    def __init__(self, delay_ms: int = 1000, period_ms: int = 200) -> None:
        self.delay_ms = check_int("delay_ms", delay_ms, 0)
        self.period_ms = check_int("period_ms", period_ms, 1)
        super().__init__()

    def _reset_state(self) -> None:
        self._t0: int | None = None
        self._last_bucket = 0
        self._max_te = NO_WATERMARK

    def _advance(self, now: int, *, arrival: bool) -> None:
        if self._t0 is None:
            if arrival:
                self._t0 = now
            return
        bucket = (now - self._t0) // self.period_ms
        if bucket > self._last_bucket:
            self._last_bucket = bucket
            if self._max_te != NO_WATERMARK:
                self._raise(self._max_te - self.delay_ms)

    def _observe(self, te: int, tp: int, late: bool) -> None:
        if te > self._max_te:
            self._max_te = te

    def _timers(self, tp: I64, arrivals: Idx | None) -> tuple[I64, I64 | None]:
        return grid_rises(tp, arrivals, self._t0, self._clock, self.period_ms), None

    def _run(self, te: I64, tp: I64, arrivals: Idx | None) -> tuple[I64, I64]:
        n = te.size
        if arrivals is None:
            te_in = te
            first = 0
        else:
            te_in = np.full(n, NO_WATERMARK, np.int64)
            te_in[arrivals] = te[arrivals]
            first = int(arrivals[0]) if arrivals.size else n
        t0 = self._t0
        if t0 is None and first < n:
            t0 = int(tp[first])
        if t0 is None:  # only ticks and no arrival ever: nothing can be emitted
            out = np.full(n, self._wm, np.int64)
            self._clock = int(tp[-1])
            return out, out.copy()
        bucket = (tp - t0) // self.period_ms
        if self._t0 is None:
            bucket[:first] = 0  # before the first arrival there is no grid yet
        emits = bucket > shift_right(bucket, self._last_bucket)
        max_te = running_max(te_in, self._max_te)
        before = shift_right(max_te, self._max_te)
        cand = np.where(emits, sat_sub(before, self.delay_ms), NO_WATERMARK)
        wm = running_max(cand, self._wm)
        self._t0 = t0
        self._last_bucket = int(bucket[-1])
        self._max_te = int(max_te[-1])
        self._wm = int(wm[-1])
        self._clock = int(tp[-1])
        return wm, wm.copy()

    def _state_dict(self) -> dict[str, Any]:
        return {"t0": self._t0, "last_bucket": self._last_bucket, "max_te": self._max_te}

    def _load_state(self, state: Mapping[str, Any]) -> None:
        self._t0 = None if state["t0"] is None else int(state["t0"])
        self._last_bucket = int(state["last_bucket"])
        self._max_te = int(state["max_te"])
