"""Hindsight baselines: the best fixed delay for a stream, chosen knowing the stream, at a given late share.

A watermark strategy earns its keep only if it beats what a fixed delay would have done on the same data.
:class:`Hindsight` answers: on this stream, at a late share of at most ``r``, what is the lowest mean emit
latency a ``periodic`` watermark (``W = max te - delay`` every ``period_ms``) reaches, with the delay chosen
with hindsight, either

* **global** -- one generator for the whole stream, or
* **per key** -- one generator per key, firing that key's windows (partition = key, partition-scoped mode
  of :func:`~watermark.evaluate.replay`),

each at every emission period of ``periods_ms``. For a scope and a period, the late share does not grow as
the delay grows (a larger delay gives a lower-or-equal watermark at every instant), so the smallest delay
meeting ``r`` is found by binary search on a ``step_ms`` grid; it is taken as that side's best (the latency
grows with the delay). The latency is the charged one (``emit_latency_charged_ms``: a window stuck at the
end of input counts until the last arrival), so a side cannot look fast by leaving windows open.

Examples
--------
>>> import numpy as np
>>> from watermark.windowspec import WindowSpec
>>> tp = np.arange(0, 60_000, 50, dtype=np.int64)
>>> te = tp - 50 * (7 - (tp // 50) % 8)  # every 8th arrival 300 ms older than the newest before it
>>> h = Hindsight(te, tp, np.zeros(tp.size, np.int64), window=WindowSpec(1_000), periods_ms=(10,))
>>> h.smallest_delay("global", 10, 0.0), h.best(0.0).delay_ms
(300, 300)

"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from watermark.base import check_int
from watermark.evaluate import DEFAULT_STRAGGLER_MS, replay
from watermark.windowspec import WindowSpec

#: The scopes of a fixed delay: one generator for the stream, or one per key.
SCOPES = ("global", "per-key")


@dataclass(frozen=True)
class FixedDelayRun:
    """One fixed-delay replay: its setting and what it measured."""

    scope: str
    period_ms: int
    delay_ms: int
    late_pct: float
    latency_ms: float  # mean emit latency, stuck windows charged until the end of input
    stuck: int  # windows not fired before the end of input
    stuck_idle: int | None  # of which keys silent for at least the idle timeout (None without one)

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        return dict(self.__dict__)


class Hindsight:
    """Fixed-delay replays of one stream, memoised; the best at a late share (see the module doc).

    Parameters
    ----------
    te, tp, key
        The stream (any row order; replays sort by arrival) and each row's key.
    window
        The window specification.
    periods_ms
        Emission periods tried for each scope.
    step_ms
        Delay resolution of the search.
    max_delay_ms
        Largest delay tried; a late share no delay up to it reaches has no baseline.
    idle_timeout_ms, straggler_ms
        As in :func:`~watermark.evaluate.replay`.

    """

    def __init__(
        self,
        te: ArrayLike,
        tp: ArrayLike,
        key: ArrayLike,
        *,
        window: WindowSpec,
        periods_ms: tuple[int, ...] = (10, 50, 200),
        step_ms: int = 10,
        max_delay_ms: int = 1_200_000,
        idle_timeout_ms: int | None = None,
        straggler_ms: int = DEFAULT_STRAGGLER_MS,
    ) -> None:
        self.te = np.asarray(te)
        self.tp = np.asarray(tp)
        self.key = np.asarray(key)
        if not self.te.size == self.tp.size == self.key.size or self.te.size == 0:
            msg = f"te, tp and key must be non-empty and of one length, got {self.te.size}, {self.tp.size}, "
            msg += f"{self.key.size}"
            raise ValueError(msg)
        if not periods_ms:
            msg = "periods_ms must name at least one emission period"
            raise ValueError(msg)
        self.window = window
        self.periods_ms = tuple(check_int("periods_ms", p, 1) for p in periods_ms)
        self.step_ms = check_int("step_ms", step_ms, 1)
        self.max_delay_ms = check_int("max_delay_ms", max_delay_ms, 0)
        self.idle_timeout_ms = idle_timeout_ms
        self.straggler_ms = straggler_ms
        self._runs: dict[tuple[str, int, int], FixedDelayRun] = {}

    @property
    def replays(self) -> int:
        """Replays run so far."""
        return len(self._runs)

    def run(self, scope: str, period_ms: int, delay_ms: int) -> FixedDelayRun:
        """Replay ``periodic(delay_ms, period_ms)`` in ``scope`` (memoised)."""
        if scope not in SCOPES:
            msg = f"scope must be one of {', '.join(SCOPES)}, got {scope!r}"
            raise ValueError(msg)
        memo = (scope, period_ms, delay_ms)
        if memo not in self._runs:
            per_key = scope == "per-key"
            params = {"delay_ms": delay_ms, "period_ms": period_ms}
            r = replay(self.te, self.tp, strategy="periodic", params=params,
                       window=self.window, key=self.key, partition=self.key if per_key else None,
                       partition_mode="scoped" if per_key else "min", idle_timeout_ms=self.idle_timeout_ms,
                       straggler_ms=self.straggler_ms)  # fmt: skip
            s = r.summary()
            mean = s["emit_latency_charged_ms"]["mean"]
            self._runs[memo] = FixedDelayRun(
                scope=scope,
                period_ms=period_ms,
                delay_ms=delay_ms,
                late_pct=float(s["dropped_pct"]),
                latency_ms=0.0 if mean is None else float(mean),
                stuck=int(s["windows_flushed"]),
                stuck_idle=s["windows_stuck_idle"],
            )
        return self._runs[memo]

    def smallest_delay(self, scope: str, period_ms: int, late_pct: float) -> int | None:
        """The smallest delay on the ``step_ms`` grid with late share <= ``late_pct``; None if none.

        The delays replayed before bracket the search (the late share does not grow with the delay); without
        a delay known to meet it, doubling from 1 s finds one; then bisection narrows to the step.
        """
        step = self.step_ms
        top = self.max_delay_ms // step * step
        known = [(d, r.late_pct) for (sc, p, d), r in self._runs.items() if sc == scope and p == period_ms]
        meets = [d for d, late in known if late <= late_pct]
        fails = [d for d, late in known if late > late_pct]
        lo = max(fails, default=-step)  # invariant: lo fails (or lies below 0), hi meets the share
        if meets:
            hi = min(meets)
        else:
            hi = min(max(1_000 // step * step, lo + step), top)
            while self.run(scope, period_ms, hi).late_pct > late_pct:
                if hi >= top:
                    return None
                lo, hi = hi, min(2 * hi, top)
        while hi - lo > step:
            mid = max((lo + hi) // 2 // step * step, lo + step)
            if self.run(scope, period_ms, mid).late_pct <= late_pct:
                hi = mid
            else:
                lo = mid
        return hi

    def best(self, late_pct: float) -> FixedDelayRun | None:
        """The lowest charged latency of the scopes and periods, each at its smallest delay meeting it."""
        out: FixedDelayRun | None = None
        for scope in SCOPES:
            for period in self.periods_ms:
                delay = self.smallest_delay(scope, period, late_pct)
                if delay is None:
                    continue
                r = self.run(scope, period, delay)
                if out is None or r.latency_ms < out.latency_ms:
                    out = r
        return out
