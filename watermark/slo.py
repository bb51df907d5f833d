"""A watermark driven by a late-rate SLO: the delay the current lateness regime needs for a target late share.

Periodic watermarks need a delay chosen by hand, the faithful ADWIN algorithm (:mod:`watermark.adaptive`)
stops emitting on a steady stream and learns its delay as a maximum. This strategy takes the one thing a user
can state, the share of late tuples they accept, and meets it online.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right, insort
from collections import deque
from collections.abc import Mapping
from itertools import islice
from typing import Any, ClassVar

import numpy as np
from river.drift import ADWIN

from watermark.adwin_state import adwin_state, restore_adwin
from watermark.base import I64, Idx, WatermarkGenerator, check_float, check_int, optional_int
from watermark.timeline import NO_RISE
from watermark.timeutil import NO_WATERMARK, decode_i64, encode_i64

#: Arrivals over which an excess of late tuples is won back (the online SLO's horizon).
_PAYBACK = 1_000

#: Lateness values a sample needs before its scale sets a straggler cap.
_MIN_SCALE_SAMPLE = 50

#: Recent arrivals whose second largest lateness sets the guard after an upward regime change.
_SURGE_WINDOW = 50

#: Prior of the straggler share: this many arrivals at half the target, so a few early stragglers do not
#: lift the cap.
_PRIOR_ARRIVALS = 2_000

#: How the regular late budget is shared between regimes: a regime whose scale is ``x`` times the long-run
#: (geometric) average gets ``x ** _ALLOCATION`` times the budget (within 1/4 and 4, normalised by the
#: long-run average weight): a delay costs more latency per late tuple saved in a wide regime than in a
#: narrow one, so the wide one gets more of the budget.
_ALLOCATION = 1.0

#: Arrivals the long-run averages of the scale and of the weight reach back (exponential).
_LONG_RUN = 10_000

#: ``offset`` of a gap in which the watermark does not move (a step that never happens).
_STEP = -(2**62)


def _scaled(lateness_ms: int) -> float:
    """What ADWIN sees of a lateness: its logarithm, so a regime is a level whatever its scale."""
    return math.log1p(lateness_ms)


def _mean_log(values: list[int]) -> float:
    return sum(math.log1p(v) for v in values) / len(values)


class LateRateSLO(WatermarkGenerator):
    """``W = max(te) - D`` with ``D`` the online quantile of recent lateness that meets a late-share target.

    Each arrival's *lateness* is how far its event time is behind the largest event time seen before it,
    ``d = max(0, max te - te)`` (behind a frontier jump, the clock-paced frontier below); under
    ``W = max te - D`` a tuple is late exactly when ``d > D``. The
    generator keeps the recent lateness values (``sample_size``) and sets ``D`` to their
    ``(1 - late_slo_pct / 100)`` quantile (an upper order statistic, so the sample's late share is at most
    the target): a quantile, not the maximum, so one outlier costs one late tuple instead of a delay held for
    ever. The watermark is emitted at every arrival and follows the ingestion clock between arrivals
    (below), so it needs no emission period.

    * **Regime changes.** Every lateness value (clipped at ``2 * D + 50`` ms so that a short burst of
      outliers, which the late budget absorbs, is not taken for a regime) feeds river's ``ADWIN`` as
      ``log(1 + d)``: lateness is heavy-tailed and regimes differ by a factor (a 40 ms regime and a 400 ms
      one), so on the log scale a regime is a level whatever its scale and a few stragglers do not swamp
      the mean ADWIN compares.
      When it detects a change, the sample keeps only the values in ADWIN's window after the cut, the new
      regime, so the quantile forgets the old regime at once. ADWIN is rebuilt from the kept values (and
      whenever it has seen ``2 * sample_size`` values since its last rebuild), which bounds the state a
      snapshot must carry.
    * **A sample bounded in ingestion time** (``horizon_ms``, optional): the sample also drops the values
      of arrivals older than ``horizon_ms`` before the latest one, so what a change ADWIN does not flag
      (such as the tuples still in flight when a congested regime ends, whose lateness is large but few)
      is forgotten within the horizon instead of within ``sample_size`` arrivals. ``None`` (the default):
      only ``sample_size`` bounds the sample. The tuner searches both.
    * **Stragglers are budgeted, not chased.** A lateness beyond ``straggler_factor`` times the sample's
      scale (its ``1 - 2 * late_slo_pct / 100`` quantile, at least its median) is a straggler: a stationary
      tail no sane delay covers (a tuple delayed 25 times its regime's delay). The long-run share of
      stragglers (counted at their arrival, with a prior of 2,000 arrivals at half the target) is taken
      out of the budget, and the rest is spent on a quantile of the regular values only, so the delay is
      never above the cap. When the stragglers do not fit in the budget, or three of them come within 50
      arrivals (a burst, which is a regime, not stragglers), the quantile is over all values as before
      (for ``surge_arrivals`` arrivals after a burst).
    * **The budget follows the regime's width.** A delay costs more latency per late tuple saved in a wide
      regime (lateness in seconds) than in a narrow one (tens of ms), so a regime whose scale is ``x``
      times the long-run geometric average gets ``x`` times the regular late share (within 1/4 and 4,
      normalised by the long-run average of that weight, over about 10,000 arrivals): narrow regimes are
      covered more tightly, wide ones more loosely, for the same late share overall.
    * **Meeting the SLO online.** The quantile level tightens when the late share so far exceeds the
      target: the level aims at the late share the next 1,000 tuples may have for the whole stream to be
      back at the target (at most the target, at least a quarter of it; for the regular values, at least
      a tenth).
    * **A guard after an upward change.** When ADWIN cuts and the kept values are larger (on the log
      scale) than the dropped ones, the regime is rising and may still be rising (a congestion builds up
      over seconds): for ``surge_arrivals`` arrivals the delay is at least ``surge_factor`` times the
      second largest lateness of the last 50 arrivals (the second, so that one straggler does not set
      it). Without it each new record of a rising lateness is a late tuple.
    * **Warm-up without blackout.** From the first arrival on the delay is at least
      ``initial_delay_ms * (1 - k / warmup)`` after ``k`` arrivals: a safe default that fades as the
      sample fills, never a period without watermark.
    * **Frontier jumps follow the clock.** When an arrival moves the largest event time forward by more than
      ``3 * D + 100`` ms at once (a source that was held back starts delivering fresh data, such as after a
      network congestion), data from before the jump is probably still in flight: the watermark then
      advances from the old frontier at the pace of the ingestion clock, ``W(t) <= old max te + (t -
      t_jump) - D``, until the first arrival at least ``jump + D`` after the jump (the held data had its
      time to arrive) or until it meets ``max te - D``. Between arrivals it keeps following the clock along
      that line (the ramp of :mod:`watermark.timeline`); the guard ends at an arrival, so ``on_idle`` stays
      path independent. Without a jump the watermark only moves at arrivals.

    **Partitions.** Under :class:`~watermark.combine.PartitionedWatermark` each partition learns its own
    delay from its own lateness, and the combination is the minimum over active partitions; on sparse
    partitions (a device every 500 ms) that minimum waits for the slowest partition's next arrival and can
    be worse than one generator over the whole stream. The guarantee "never worse than one global
    generator" is therefore met by measurement, not by assumption: the replay evaluates three partition
    modes on the same stream (``global``: one generator for the stream; ``min``: the combination;
    ``scoped``: each partition fires the windows of the keys that live in it, as Kafka's keyed partitioning
    allows) and the tuner (:mod:`watermark.tune`) chooses among them on the recent history, the global
    generator being one of the candidates.

    Parameters
    ----------
    late_slo_pct
        Target share of late tuples, in percent, in ``(0, 100)`` (the configuration's ``late_slo_pct``).
    initial_delay_ms
        Delay during warm-up, fading as the sample fills, >= 0.
    warmup
        Arrivals over which the initial delay fades, >= 1.
    sample_size
        Recent lateness values the quantile is taken over, >= 10.
    adwin_delta
        ADWIN's confidence ``delta`` in ``(0, 1]``: smaller detects fewer, surer changes.
    horizon_ms
        Ingestion time the sample reaches back, >= 1, or ``None`` (only ``sample_size`` bounds it).
    straggler_factor
        A lateness beyond this many times the sample's scale is a straggler, >= 1 (very large: no cap).
    surge_factor
        Headroom over the recent second largest lateness after an upward change, >= 0 (0: no guard).
    surge_arrivals
        Arrivals the guard after an upward change (and the lifted cap after a burst) lasts, >= 0.

    Examples
    --------
    A steady stream whose tuples trail the frontier by up to 40 ms, then by up to 400 ms: the delay starts
    at the safe default, tightens to the first regime's quantile, and follows the second.

    >>> import numpy as np
    >>> from watermark.slo import LateRateSLO
    >>> rng = np.random.default_rng(3)
    >>> tp = np.arange(4_000) * 10
    >>> te = tp - np.concatenate([rng.integers(0, 40, 2_000), rng.integers(0, 400, 2_000)])
    >>> gen = LateRateSLO(late_slo_pct=1.0, initial_delay_ms=1_000, warmup=200)
    >>> wm = gen.process(te, tp)
    >>> int(wm[1] - te[:1].max()) <= -1_000 + 40, 20 <= int(te[:2_000].max() - wm[1_999]) < 60
    (True, True)
    >>> 300 <= gen.delay_ms <= 400, gen.n_drifts > 0
    (True, True)

    The switch costs a burst of late tuples before the new regime is learnt; the target then tightens the
    quantile level to win the excess back over the next 1,000 tuples.

    >>> round(100 * gen.n_late / len(te), 2)
    1.0

    """

    name = "slo"
    param_types: ClassVar[Mapping[str, Any]] = {
        "late_slo_pct": float,
        "initial_delay_ms": int,
        "warmup": int,
        "sample_size": int,
        "adwin_delta": float,
        "horizon_ms": optional_int,
        "straggler_factor": float,
        "surge_factor": float,
        "surge_arrivals": int,
    }

    def __init__(
        self,
        late_slo_pct: float,
        initial_delay_ms: int = 2_000,
        warmup: int = 200,
        sample_size: int = 10_000,
        adwin_delta: float = 0.002,
        horizon_ms: int | None = None,
        straggler_factor: float = 3.0,
        surge_factor: float = 2.0,
        surge_arrivals: int = 300,
    ) -> None:
        self.late_slo_pct = check_float("late_slo_pct", late_slo_pct, 0.0, 100.0, low_open=True)
        if self.late_slo_pct >= 100.0:
            msg = f"late_slo_pct must be below 100, got {self.late_slo_pct}"
            raise ValueError(msg)
        self.initial_delay_ms = check_int("initial_delay_ms", initial_delay_ms, 0)
        self.warmup = check_int("warmup", warmup, 1)
        self.sample_size = check_int("sample_size", sample_size, 10)
        self.adwin_delta = check_float("adwin_delta", adwin_delta, 0.0, 1.0, low_open=True)
        self.horizon_ms = None if horizon_ms is None else check_int("horizon_ms", horizon_ms, 1)
        self.straggler_factor = check_float("straggler_factor", straggler_factor, 1.0, 1e9)
        self.surge_factor = check_float("surge_factor", surge_factor, 0.0, 1e3)
        self.surge_arrivals = check_int("surge_arrivals", surge_arrivals, 0)
        super().__init__()

    def _reset_state(self) -> None:
        self._max_te = NO_WATERMARK
        self._recent: deque[int] = deque()  # lateness values of the current regime, oldest first
        self._recent_tp: deque[int] = deque()  # their arrival instants
        self._sorted: list[int] = []  # the same values, sorted
        self._fed = 0  # values fed to ADWIN since it was last rebuilt
        self._adwin = ADWIN(delta=self.adwin_delta)
        self._arrivals = 0
        self._late = 0
        self._delay = self.initial_delay_ms
        self._anchor: int | None = None  # guard after a frontier jump: W <= t + anchor - delay
        self._release = 0  # ingestion time from which the next arrival ends the guard
        self._drifts = 0
        self._jumps = 0
        self._extreme = 0  # arrivals whose lateness was beyond the straggler cap when they arrived
        self._surge_until = 0  # arrivals count up to which the guard after an upward change holds
        self._burst_until = 0  # arrivals count up to which the straggler cap is lifted (a burst)
        self._last_extreme = -(2**62)  # arrivals count at the last value beyond the cap
        self._prev_extreme = -(2**62)  # and at the one before
        self._log_scale_avg = 0.0
        self._weight = 1.0
        self._weight_avg = 1.0

    # -- read-only internals ---------------------------------------------------------------------------
    @property
    def delay_ms(self) -> int:
        """The delay ``D`` in force."""
        return self._delay

    @property
    def n_drifts(self) -> int:
        """Regime changes ADWIN detected."""
        return self._drifts

    def diagnostics(self) -> dict[str, Any]:
        """Delay, sample size, drifts, frontier jumps and whether the warm-up default still weighs in."""
        return {
            "delay_ms": self._delay,
            "sample": len(self._recent),
            "drifts": self._drifts,
            "jumps": self._jumps,
            "warming_up": self._arrivals < self.warmup,
        }

    # -- the rule --------------------------------------------------------------------------------------
    def _target(self, now: int) -> int:
        if self._max_te == NO_WATERMARK:
            return NO_WATERMARK
        frontier = self._max_te if self._anchor is None else min(self._max_te, now + self._anchor)
        return frontier - self._delay

    def _advance(self, now: int, *, arrival: bool) -> None:
        if self._anchor is None:
            return
        if arrival and now >= self._release:
            self._anchor = None  # data from before the jump had its time to arrive
        self._raise(self._target(now))

    def _observe(self, te: int, tp: int, late: bool) -> None:
        self._arrivals += 1
        self._late += late
        before = self._max_te
        if before == NO_WATERMARK:
            self._max_te = te
        else:
            # Lateness against the frontier the rule uses: behind a jump, the clock-paced one.
            front = before if self._anchor is None else min(before, tp + self._anchor)
            if te - before > 3 * self._delay + 100:
                self._jumps += 1
                if self._anchor is None or tp + self._anchor >= before:
                    self._anchor = before - tp
                self._release = tp + (te - before) + self._delay
            self._max_te = max(before, te)
            self._learn(max(0, front - te), tp)
        if self._anchor is not None and tp + self._anchor >= self._max_te:
            self._anchor = None  # caught up with the frontier
        self._delay = self._estimate()
        self._raise(self._target(tp))

    def _cap(self) -> int | None:
        """Lateness beyond which a value is a straggler: ``straggler_factor`` times the sample's scale."""
        k = len(self._sorted)
        if k < _MIN_SCALE_SAMPLE:
            return None
        scale = self._scale()
        return None if scale == 0 else math.ceil(self.straggler_factor * scale)

    def _scale(self) -> int:
        k = len(self._sorted)
        level = max(0.5, 1.0 - 2.0 * self.late_slo_pct / 100.0)
        return self._sorted[min(k - 1, int(level * (k - 1)))]

    def _learn(self, lateness: int, tp: int) -> None:
        cap = self._cap()
        if cap is not None and lateness > cap:
            self._extreme += 1
            if self._arrivals - self._prev_extreme <= _SURGE_WINDOW:
                # Three values beyond the cap close together are a burst, not stragglers: cover them.
                self._burst_until = self._arrivals + self.surge_arrivals
            self._prev_extreme = self._last_extreme
            self._last_extreme = self._arrivals
        self._recent.append(lateness)
        self._recent_tp.append(tp)
        insort(self._sorted, lateness)
        scale = self._scale()
        if scale:
            n = min(self._arrivals, _LONG_RUN)
            log_scale = math.log1p(scale)
            self._log_scale_avg += (log_scale - self._log_scale_avg) / n
            self._weight = min(4.0, max(0.25, math.exp(_ALLOCATION * (log_scale - self._log_scale_avg))))
            self._weight_avg += (self._weight - self._weight_avg) / n
        if len(self._recent) > self.sample_size:
            self._drop_oldest()
        if self.horizon_ms is not None:
            while self._recent_tp[0] <= tp - self.horizon_ms:
                self._drop_oldest()
        value = min(lateness, 2 * self._delay + 50)  # a burst of outliers is not a new regime
        self._fed += 1
        self._adwin.update(_scaled(value))
        if self._adwin.drift_detected:
            self._drifts += 1
            keep = max(1, min(len(self._recent), int(self._adwin.width)))
            old = list(self._recent)
            if keep < len(old) and _mean_log(old[-keep:]) > _mean_log(old[:-keep]):
                self._surge_until = self._arrivals + self.surge_arrivals  # the regime rose
            while len(self._recent) > keep:
                self._drop_oldest()
            self._rebuild(self._clipped(list(self._recent)))
        elif self._fed >= 2 * self.sample_size:
            self._rebuild(self._clipped(list(self._recent)))

    def _clipped(self, values: list[int]) -> list[int]:
        cap = 2 * self._delay + 50
        return [min(v, cap) for v in values]

    def _drop_oldest(self) -> None:
        old = self._recent.popleft()
        self._recent_tp.popleft()
        del self._sorted[bisect_left(self._sorted, old)]

    def _rebuild(self, values: list[int]) -> None:
        self._adwin = ADWIN(delta=self.adwin_delta)
        self._fed = 0
        for v in values:
            self._fed += 1
            self._adwin.update(_scaled(v))

    def _estimate(self) -> int:
        k = len(self._sorted)
        fade = 0.0 if self._arrivals >= self.warmup else 1.0 - self._arrivals / self.warmup
        floor = math.ceil(self.initial_delay_ms * fade)
        if k == 0:
            return max(floor, self.initial_delay_ms if self._arrivals < self.warmup else 0)
        target = self.late_slo_pct / 100.0
        horizon = _PAYBACK
        allowed = target * (self._arrivals + horizon) - self._late
        level = min(target, max(target / 4.0, allowed / horizon))
        share = (self._extreme + target / 2 * _PRIOR_ARRIVALS) / (self._arrivals + _PRIOR_ARRIVALS)
        cap = self._cap()
        if cap is not None and share < target and self._arrivals > self._burst_until:
            # Stragglers fit in the budget: leave them late, spend the rest on the regular values.
            k = bisect_right(self._sorted, cap)
            level = max(target / 10.0, (level - share) / (1.0 - share))
            level = min(target, level * self._weight / self._weight_avg)
        rank = min(k - 1, max(0, math.ceil((1.0 - level) * k) - 1))
        delay = self._sorted[rank]
        if self._arrivals <= self._surge_until:
            # Just after a rise the regime may still be rising: headroom over the recent high values.
            last = sorted(islice(reversed(self._recent), _SURGE_WINDOW))
            high = last[-2] if len(last) >= 2 else last[-1]
            delay = max(delay, math.ceil(self.surge_factor * high))
        return max(floor, delay)

    # -- vectorised path (the per-tuple rule, run once over the batch) ---------------------------------
    def _run_timed(self, te: I64, tp: I64, arrivals: Idx | None) -> tuple[I64, I64, I64, I64 | None]:
        n = te.size
        is_arrival = np.ones(n, np.bool_) if arrivals is None else np.zeros(n, np.bool_)
        if arrivals is not None:
            is_arrival[arrivals] = True
        pre = np.empty(n, np.int64)
        post = np.empty(n, np.int64)
        rise = np.full(n, NO_RISE, np.int64)
        offset = np.full(n, _STEP, np.int64)
        for j, (e, t, a) in enumerate(zip(te.tolist(), tp.tolist(), is_arrival.tolist(), strict=True)):
            if self._anchor is not None and self._clock is not None:
                rise[j] = self._clock + 1
                offset[j] = self._delay - self._anchor
            self._clock = t
            self._advance(t, arrival=a)
            pre[j] = self._wm
            if a:
                self._observe(e, t, e < self._wm)
            post[j] = self._wm
        return pre, post, rise, offset

    def _run(self, te: I64, tp: I64, arrivals: Idx | None) -> tuple[I64, I64]:
        pre, post, _, _ = self._run_timed(te, tp, arrivals)
        return pre, post

    # -- checkpoints -----------------------------------------------------------------------------------
    def _state_dict(self) -> dict[str, Any]:
        return {
            "max_te": self._max_te,
            "recent": encode_i64(np.array(self._recent, np.int64)),
            "recent_tp": encode_i64(np.array(self._recent_tp, np.int64)),
            # ADWIN's window buckets as plain data (watermark.adwin_state): O(log n), never a pickle, and
            # not the values it was fed (up to 2 * sample_size of them), so a snapshot stays small.
            "adwin": adwin_state(self._adwin),
            "fed": self._fed,
            "arrivals": self._arrivals,
            "late": self._late,
            "delay": self._delay,
            "anchor": self._anchor,
            "release": self._release,
            "drifts": self._drifts,
            "jumps": self._jumps,
            "extreme": self._extreme,
            "surge_until": self._surge_until,
            "burst_until": self._burst_until,
            "last_extreme": self._last_extreme,
            "prev_extreme": self._prev_extreme,
            "log_scale_avg": self._log_scale_avg,
            "weight": self._weight,
            "weight_avg": self._weight_avg,
        }

    def _load_state(self, state: Mapping[str, Any]) -> None:
        self._max_te = int(state["max_te"])
        recent = decode_i64(state["recent"]).tolist()
        self._recent = deque(recent)
        self._recent_tp = deque(decode_i64(state["recent_tp"]).tolist())
        self._sorted = sorted(recent)
        if "adwin" in state:
            self._adwin = restore_adwin(state["adwin"])
            self._fed = int(state["fed"])
        else:  # a snapshot from before ADWIN's state was kept: the values it was fed (re-feeding restores it)
            self._rebuild(decode_i64(state["fed"]).tolist())
        self._arrivals = int(state["arrivals"])
        self._late = int(state["late"])
        self._delay = int(state["delay"])
        self._anchor = None if state["anchor"] is None else int(state["anchor"])
        self._release = int(state["release"])
        self._drifts = int(state["drifts"])
        self._jumps = int(state["jumps"])
        self._extreme = int(state["extreme"])
        self._surge_until = int(state["surge_until"])
        self._burst_until = int(state["burst_until"])
        self._last_extreme = int(state["last_extreme"])
        self._prev_extreme = int(state["prev_extreme"])
        self._log_scale_avg = float(state["log_scale_avg"])
        self._weight = float(state["weight"])
        self._weight_avg = float(state["weight_avg"])
