"""Hindsight baselines: the best fixed delay for a stream, chosen knowing the stream, at a given late share.

A watermark strategy earns its keep only if it beats what a fixed delay would have done on the same data.
:class:`Hindsight` answers: on this stream, at a late share of at most ``r``, what is the lowest mean emit
latency a ``periodic`` watermark (``W = max te - delay`` every ``period_ms``) reaches, with the delay chosen
with hindsight, either

* **global** -- one generator for the whole stream, or
* **per key** -- one generator per key, firing that key's windows (partition = key, partition-scoped mode
  of :func:`~watermark.evaluation.replay.replay`),

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
from watermark.evaluation.replay import DEFAULT_STRAGGLER_MS, replay
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
    #: The same latency in true time (``Hindsight``'s ``clock_offset_ms``); None without clock offsets.
    true_latency_ms: float | None = None

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
        As in :func:`~watermark.evaluation.replay.replay`.
    clock_offset_ms
        Optional, one per row: the device clock minus the true clock (a benchmark that stepped clocks knows
        it). Each run then also measures its charged latency in true time (``true_latency_ms``:
        :meth:`~watermark.evaluation.replay.ReplayResult.charged_latency_ms`), and ``best(...,
        true_clock=True)`` ranks by it.

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
        clock_offset_ms: ArrayLike | None = None,
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
        self.offset = None if clock_offset_ms is None else np.asarray(clock_offset_ms, np.int64)
        if self.offset is not None and self.offset.shape != self.te.shape:
            msg = f"clock_offset_ms must have one value per row ({self.te.size}), got {self.offset.shape}"
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
            true_mean = None
            if self.offset is not None:
                charged = r.charged_latency_ms(self.offset)
                true_mean = float(charged.mean()) if charged.size else 0.0
            self._runs[memo] = FixedDelayRun(
                scope=scope,
                period_ms=period_ms,
                delay_ms=delay_ms,
                late_pct=float(s["dropped_pct"]),
                latency_ms=0.0 if mean is None else float(mean),
                stuck=int(s["windows_flushed"]),
                stuck_idle=s["windows_stuck_idle"],
                true_latency_ms=true_mean,
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

    def best(self, late_pct: float, *, true_clock: bool = False) -> FixedDelayRun | None:
        """The lowest charged latency of the scopes and periods, each at its smallest delay meeting it.

        ``true_clock``: the lowest in true time (``true_latency_ms``; needs ``clock_offset_ms``).
        """
        if true_clock and self.offset is None:
            msg = "best(true_clock=True) needs the clock offsets (Hindsight's clock_offset_ms)"
            raise ValueError(msg)

        def cost(r: FixedDelayRun) -> float:
            return float(r.true_latency_ms or 0.0) if true_clock else r.latency_ms

        out: FixedDelayRun | None = None
        for scope in SCOPES:
            for period in self.periods_ms:
                delay = self.smallest_delay(scope, period, late_pct)
                if delay is None:
                    continue
                r = self.run(scope, period, delay)
                if out is None or cost(r) < cost(out):
                    out = r
        return out


def latency_floor(
    te: ArrayLike,
    tp: ArrayLike,
    key: ArrayLike,
    *,
    window: WindowSpec,
    late_pct: float,
    clock_offset_ms: ArrayLike | None = None,
) -> float | None:
    """A lower bound on the mean emit latency of *any* watermark at a late share of at most ``late_pct``.

    Even a clairvoyant one: a window cannot fire before the last of its records it includes has arrived, so
    with the ``k`` last-arriving of its ``n`` records left out (late) a window ``[s, e)`` of a key fires at
    best at the arrival ``a_{n-k}`` of the one before them, latency ``max(0, a_{n-k} - e)`` (all ``n`` left
    out: the window is gone, counted as 0). Choosing ``k`` per window to minimise the total latency with at
    most ``floor(late_pct * N / 100)`` records left out is a multiple-choice knapsack; its Lagrangian dual,
    ``max over lambda of sum_w min_k (L_wk + lambda k) - lambda B``, is at most its optimum, so the returned
    mean (over the windows with a record) is a valid floor: a strategy, or a fixed delay, whose mean
    charged latency at that late share is ``x`` is at least this much; ``floor / baseline`` is the lowest
    ratio any strategy could reach against a baseline. It ignores causality (which windows will get a
    straggler is known), so it is far below what a real watermark reaches where lateness is unpredictable;
    where it is close to the baseline, no watermark can do much better (the latency is in the arrivals).

    Tumbling windows only (a record in several windows would be charged once per window). ``None`` for an
    empty stream. ``clock_offset_ms`` (one per row, device clock minus true clock) gives the floor in true
    time: a window ends when its key's clock reached its end, with the offset of its first arrival
    (:meth:`~watermark.evaluation.replay.ReplayResult.window_clock_offsets`).

    Examples
    --------
    Two windows of a key, complete 200 ms and 900 ms after they end (mean 550); with one record of the four
    allowed late, leaving out the one that arrives 900 ms after its window ends brings that window to its
    other record's arrival, 100 ms after its end: (200 + 100) / 2.

    >>> te = np.array([100, 500, 1_100, 1_500])
    >>> tp = np.array([1_100, 1_200, 2_100, 2_900])
    >>> latency_floor(te, tp, np.zeros(4, np.int64), window=WindowSpec(1_000), late_pct=0.0)
    550.0
    >>> latency_floor(te, tp, np.zeros(4, np.int64), window=WindowSpec(1_000), late_pct=25.0)
    150.0

    """
    if not window.tumbling:
        msg = "latency_floor takes tumbling windows (a record in several windows is charged once per window)"
        raise ValueError(msg)
    te_a, tp_a, key_a = np.asarray(te, np.int64), np.asarray(tp, np.int64), np.asarray(key)
    if not te_a.size == tp_a.size == key_a.size:
        msg = f"te, tp and key must be of one length, got {te_a.size}, {tp_a.size}, {key_a.size}"
        raise ValueError(msg)
    if te_a.size == 0:
        return None
    _, start = window.assign(te_a)
    _, key_codes = np.unique(key_a, return_inverse=True)
    # One group per (key, window); within it the arrivals ascending.
    order = np.lexsort((tp_a, start, key_codes))
    k_s, w_s, a_s = key_codes[order], start[order], tp_a[order]
    new = np.ones(order.size, np.bool_)
    new[1:] = (k_s[1:] != k_s[:-1]) | (w_s[1:] != w_s[:-1])
    group = np.cumsum(new) - 1
    firsts = np.flatnonzero(new)
    sizes = np.diff(np.append(firsts, order.size))
    rank = np.arange(order.size) - firsts[group]  # 0-based position by arrival within the window
    end = w_s + window.window_ms
    if clock_offset_ms is not None:
        off = np.asarray(clock_offset_ms, np.int64)
        if off.shape != te_a.shape:
            msg = f"clock_offset_ms must have one value per row ({te_a.size}), got {off.shape}"
            raise ValueError(msg)
        end = end - off[order][firsts][group]
    # Option "keep the first rank+1 records": fire at this arrival, leave out size - rank - 1; and "none".
    latency = np.maximum(a_s - end, 0).astype(np.float64)
    left_out = (sizes[group] - rank - 1).astype(np.float64)
    groups = firsts.size
    # ``late_pct`` as replays report it, rounded to 4 decimals: the rounding is given back to the budget (a
    # larger budget only lowers the floor), so that 1 of 3 records late, reported as 33.3333 %, allows 1.
    budget = float(np.floor(late_pct * te_a.size / 100.0 + te_a.size * 5e-7 + 1e-9))

    def inner(lam: float) -> tuple[float, float]:
        """``sum_w min_k (L + lam k)`` and the records left out at a minimiser."""
        value = latency + lam * left_out
        best = np.minimum.reduceat(value, firsts)
        gone = lam * sizes  # every record of the window left out: latency 0
        take_gone = gone < best
        total = float(np.where(take_gone, gone, best).sum())
        # records left out at the minimiser (the largest rank reaching the minimum: the fewest left out)
        at_min = value <= best[group] + 1e-9
        kept = np.maximum.reduceat(np.where(at_min, rank, -1), firsts)
        out = float(np.where(take_gone, sizes, sizes - kept - 1).sum())
        return total, out

    if inner(0.0)[1] <= budget:  # lambda = 0 (the unconstrained floor) already keeps the budget
        return inner(0.0)[0] / groups
    lo, hi = 0.0, 1.0
    while inner(hi)[1] > budget and hi < 1e15:
        hi *= 4.0
    best_value = -np.inf
    for lam in np.concatenate([np.linspace(lo, hi, 9), np.geomspace(max(hi / 1e9, 1e-9), hi, 40)]):
        total, _ = inner(float(lam))
        best_value = max(best_value, total - float(lam) * budget)
    for _ in range(60):  # the dual is concave in lambda: bisection on its slope (records left out - budget)
        mid = (lo + hi) / 2.0
        total, out = inner(mid)
        best_value = max(best_value, total - mid * budget)
        if out > budget:
            lo = mid
        else:
            hi = mid
    return max(0.0, best_value) / groups
