"""A watermark driven by a late-rate SLO: the delay the current lateness regime needs for a target late share.

Periodic watermarks need a delay chosen by hand, the faithful ADWIN algorithm
(:mod:`watermark.strategies.adaptive`) stops emitting on a steady stream and learns its delay as a maximum.
This strategy takes the one thing a user can state, the share of late tuples they accept, and meets it online.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from watermark.base import I64, Idx, WatermarkGenerator, check_float, check_int, optional_int
from watermark.strategies import slo_kernel as k
from watermark.strategies.adwin_state import adwin_state, new_adwin, restore_adwin
from watermark.timeline import NO_RISE
from watermark.timeutil import NO_WATERMARK, decode_i64, encode_i64

if TYPE_CHECKING:
    from river.drift import ADWIN

#: Unset arrival counts of the last two values beyond the straggler cap (far before any arrival).
_NEVER = -(2**62)
#: ADWIN updates the batch path queues before it checks them for a change (watermark.strategies.slo_kernel).
_SPECULATE = 512


def _feed(adwin: ADWIN, values: list[float], tick: int) -> int:
    """Feed ``adwin`` as river's ``ADWIN.update`` would, one value after another; its update count after.

    ``tick`` is the detector's update count before (river checks for a change when the count is a
    multiple of its ``clock``, and nowhere else). River's ``update`` starts a new window after an update
    that reported a change; this does the same, but calls the detector's compiled helper over runs of
    values that end at a check, in C (``map``), at a fraction of the cost of the Python method.
    """
    clock, done, n = adwin.clock, 0, len(values)
    drift = adwin.drift_detected
    while done < n:
        if drift:
            adwin._reset()
            tick = 0
        upto = min(n, done + clock - tick % clock)
        results = list(map(adwin._helper.update, values[done:upto]))
        drift = results[-1]
        tick += upto - done
        done = upto
    adwin._drift_detected = drift
    return tick


def _feed_to_change(adwin: ADWIN, values: list[float]) -> int:
    """Feed ``adwin`` ``values`` up to the first update that reports a change; that update's index, or -1.

    One ``map`` over the compiled helper for all of them, on the bet that none reports a change. When one
    does, the updates after it went into a window river would have restarted, so the detector is put back
    as it was and fed again up to that update: it ends exactly as :func:`_feed` leaves it there.
    """
    if not values:
        return -1
    if adwin.drift_detected:
        adwin._reset()
    blob = adwin._helper.__getstate__()
    results = list(map(adwin._helper.update, values))
    try:
        at = results.index(True)
    except ValueError:
        adwin._drift_detected = False
        return -1
    if at < len(values) - 1:
        adwin._helper.__setstate__(blob)
        results = list(map(adwin._helper.update, values[: at + 1]))
    adwin._drift_detected = results[-1]
    return at


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

    **Partitions.** Under :class:`~watermark.partitions.combine.PartitionedWatermark` each partition learns
    its own delay from its own lateness, and the combination is the minimum over active partitions; on sparse
    partitions (a device every 500 ms) that minimum waits for the slowest partition's next arrival and can
    be worse than one generator over the whole stream. The guarantee "never worse than one global
    generator" is therefore met by measurement, not by assumption: the replay evaluates three partition
    modes on the same stream (``global``: one generator for the stream; ``min``: the combination;
    ``scoped``: each partition fires the windows of the keys that live in it, as Kafka's keyed partitioning
    allows) and the tuner (:mod:`watermark.tuning.tune`) chooses among them on the recent history, the global
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
    >>> from watermark.strategies.slo import LateRateSLO
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

    search_space: ClassVar[Sequence[Mapping[str, Any]]] = [
        {"sample_size": 2_000},
        *({"sample_size": 10_000, "horizon_ms": h} for h in (None, 20_000, 60_000)),
        # the rule without the straggler cap and the guard after a rise, in case the stream's tail is no
        # straggler
        {"sample_size": 10_000, "straggler_factor": 1e9, "surge_factor": 0.0},
    ]
    comparison_grid: ClassVar[Sequence[Mapping[str, Any]]] = [{"late_slo_pct": pct} for pct in (0.5, 0.1)]

    @classmethod
    def test_settings(cls, pick: Callable[[Sequence[Any]], Any]) -> dict[str, Any]:
        """The contract tests' parameters (:meth:`watermark.base.WatermarkGenerator.test_settings`)."""
        return {
            "late_slo_pct": pick([0.5, 5.0, 30.0]),
            "initial_delay_ms": pick(range(301)),
            "warmup": pick(range(1, 31)),
            "sample_size": pick(range(10, 41)),
            "adwin_delta": pick([0.002, 0.5, 1.0]),
            "horizon_ms": pick([None, pick(range(1, 201))]),
            "straggler_factor": pick([1.0, 3.0, 1e9]),
            "surge_factor": pick([0.0, 2.0]),
            "surge_arrivals": pick(range(51)),
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
        # The rule's state, in the arrays the compiled rule (watermark.strategies.slo_kernel) works on.
        self._adwin = new_adwin(delta=self.adwin_delta)
        self._ints = np.zeros(k.N_INTS, np.int64)
        self._ints[k.MAX_TE] = NO_WATERMARK
        self._ints[k.DELAY] = self.initial_delay_ms
        self._ints[k.LAST_EXTREME] = self._ints[k.PREV_EXTREME] = _NEVER
        self._floats = np.zeros(k.N_FLOATS, np.float64)
        self._floats[k.WEIGHT] = self._floats[k.WEIGHT_AVG] = 1.0
        self._iparams = np.zeros(k.N_IPARAMS, np.int64)
        self._iparams[k.P_INITIAL] = self.initial_delay_ms
        self._iparams[k.P_WARMUP] = self.warmup
        self._iparams[k.P_SAMPLE] = self.sample_size
        self._iparams[k.P_HORIZON] = -1 if self.horizon_ms is None else self.horizon_ms
        self._iparams[k.P_SURGE_ARRIVALS] = self.surge_arrivals
        self._iparams[k.P_ADWIN_CLOCK] = self._adwin.clock
        self._fparams = np.array([self.late_slo_pct, self.straggler_factor, self.surge_factor], np.float64)
        # The recent lateness values (oldest first, a ring buffer from ints[HEAD]), their arrival
        # instants, and the same values sorted; ADWIN's pending input.
        self._set_sample(np.empty(0, np.int64), np.empty(0, np.int64))
        self._feed = np.zeros(_SPECULATE + self._adwin.clock + 1, np.float64)
        self._drifts = 0
        self._saved: list[np.ndarray] = []

    def _set_sample(self, values: I64, tps: I64) -> None:
        size = max(self.sample_size, values.size) + 1
        self._recent = np.zeros(size, np.int64)
        self._recent_tp = np.zeros(size, np.int64)
        self._sorted = np.zeros((k.block_rows(size), k.BLOCK + 1), np.int64)
        self._recent[: values.size] = values
        self._recent_tp[: values.size] = tps
        k.fill_blocks(self._ints, self._sorted, np.sort(values))
        self._ints[k.HEAD] = 0
        self._ints[k.COUNT] = values.size

    def _sample(self) -> tuple[I64, I64]:
        """The recent lateness values and their arrival instants, oldest first."""
        at = (self._ints[k.HEAD] + np.arange(self._ints[k.COUNT])) % self._recent.size
        return self._recent[at], self._recent_tp[at]

    # -- read-only internals ---------------------------------------------------------------------------
    @property
    def delay_ms(self) -> int:
        """The delay ``D`` in force."""
        return int(self._ints[k.DELAY])

    @property
    def n_drifts(self) -> int:
        """Regime changes ADWIN detected."""
        return self._drifts

    def diagnostics(self) -> dict[str, Any]:
        """Delay, sample size, drifts, frontier jumps and whether the warm-up default still weighs in."""
        return {
            "delay_ms": self.delay_ms,
            "sample": int(self._ints[k.COUNT]),
            "drifts": self._drifts,
            "jumps": int(self._ints[k.JUMPS]),
            "warming_up": int(self._ints[k.ARRIVALS]) < self.warmup,
        }

    # -- the rule (compiled in watermark.strategies.slo_kernel; ADWIN here)
    # ---------------------------------------
    def _sync_in(self) -> None:
        self._ints[k.WM] = self._wm
        self._ints[k.HAS_CLOCK] = self._clock is not None
        self._ints[k.CLOCK] = 0 if self._clock is None else self._clock

    def _sync_out(self) -> None:
        self._wm = int(self._ints[k.WM])
        self._clock = int(self._ints[k.CLOCK]) if self._ints[k.HAS_CLOCK] else None

    def _advance(self, now: int, *, arrival: bool) -> None:
        self._sync_in()
        k.advance(self._ints, now, arrival)
        self._sync_out()

    def _observe(self, te: int, tp: int, late: bool) -> None:
        self._sync_in()
        args = (self._ints, self._floats, self._iparams, self._fparams)
        if k.observe_head(*args, self._recent, self._recent_tp, self._sorted, self._feed, te, tp, late):
            self._adwin_checkpoint(self._feed_adwin())
        else:
            self._feed_adwin()
        k.observe_tail(*args, self._recent, self._sorted, tp)
        self._sync_out()

    def _feed_adwin(self) -> bool:
        """Feed ADWIN the values the rule queued; whether it reported a change at the last one."""
        ints = self._ints
        m = int(ints[k.N_FEED])
        ints[k.N_FEED] = 0
        _feed(self._adwin, self._feed[:m].tolist(), int(ints[k.TICK]) - m)
        return bool(self._adwin.drift_detected)

    def _adwin_checkpoint(self, change: bool) -> None:
        """At an arrival where ADWIN may report a change or must be rebuilt, once it has been fed.

        On a change (``change``: ADWIN reported one at this arrival) the sample keeps only the values in
        ADWIN's window after the cut (the new regime), a rise of the regime starts the guard, and ADWIN is
        rebuilt from the kept values; after ``2 * sample_size`` values since the last rebuild it is rebuilt
        too, which bounds its state.
        """
        ints = self._ints
        if change:
            self._drifts += 1
            values, tps = self._sample()
            keep = max(1, min(values.size, int(self._adwin.width)))
            cut = values.size - keep
            if cut > 0 and k.mean_log(values[cut:]) > k.mean_log(values[:cut]):
                ints[k.SURGE_UNTIL] = ints[k.ARRIVALS] + self.surge_arrivals  # the regime rose
            values, tps = values[cut:], tps[cut:]
            self._set_sample(values, tps)
            self._rebuild(values)
        elif ints[k.FED] >= 2 * self.sample_size:
            self._rebuild(self._sample()[0])

    def _rebuild(self, values: I64) -> None:
        """A new ADWIN fed the sample's values, clipped at ``2 * D + 50`` (a burst is not a regime)."""
        self._refeed(np.minimum(values, 2 * self._ints[k.DELAY] + 50))

    def _refeed(self, values: I64) -> None:
        self._adwin = new_adwin(delta=self.adwin_delta)
        logs = k.log1p_all(values).tolist()
        at = _feed_to_change(self._adwin, logs)
        if 0 <= at < len(logs) - 1:  # a change inside the kept values: river restarts the window there
            tick = _feed(self._adwin, logs[at + 1 :], 0)
        else:
            tick = len(logs)
        self._ints[k.FED] = values.size
        # (after a reported change, river starts a new window at the next update: its count restarts)
        self._ints[k.TICK] = 0 if self._adwin.drift_detected else tick

    # -- vectorised path (the compiled rule, run once over the batch) -----------------------------------
    def _run_timed(self, te: I64, tp: I64, arrivals: Idx | None) -> tuple[I64, I64, I64, I64 | None]:
        n = te.size
        is_arrival = np.ones(n, np.bool_) if arrivals is None else np.zeros(n, np.bool_)
        if arrivals is not None:
            is_arrival[arrivals] = True
        te = np.ascontiguousarray(te, np.int64)
        tp = np.ascontiguousarray(tp, np.int64)
        pre = np.empty(n, np.int64)
        post = np.empty(n, np.int64)
        rise = np.full(n, NO_RISE, np.int64)
        offset = np.full(n, k.STEP, np.int64)
        ints = self._ints
        state = (ints, self._floats, self._iparams, self._fparams)
        outputs = (pre, post, rise, offset)
        self._sync_in()
        at = 0
        ints[k.FEED_STOP] = _SPECULATE
        try:
            while True:
                # (after a change the sample's buffers are new arrays: read them again)
                buffers = (self._recent, self._recent_tp, self._sorted, self._feed)
                self._save(buffers)
                stop = k.run_events(te, tp, is_arrival, at, *state, *buffers, *outputs)
                queued = int(ints[k.N_FEED])
                change = self._feed_queued()
                if change >= 0 and (change < queued - 1 or not ints[k.PENDING]):
                    # ADWIN reported a change at a check the run went past: from the copy, run again up to
                    # that check (the same values, so ADWIN reports the change at the last of them).
                    self._restore(buffers)
                    ints[k.FEED_STOP] = change + 1
                    stop = k.run_events(te, tp, is_arrival, at, *state, *buffers, *outputs)
                    ints[k.FEED_STOP] = _SPECULATE
                    queued = int(ints[k.N_FEED])
                    change = self._feed_queued()
                    if change != queued - 1 or not ints[k.PENDING]:
                        msg = "LateRateSLO: a run again to ADWIN's change did not stop at it"
                        raise RuntimeError(msg)
                at = stop
                if not ints[k.PENDING]:
                    break
                self._adwin_checkpoint(change >= 0)
        finally:
            ints[k.FEED_STOP] = 0
        self._sync_out()
        return pre, post, rise, offset

    def _feed_queued(self) -> int:
        """Feed ADWIN the queued values up to its first reported change; that value's index, or -1."""
        ints = self._ints
        m = int(ints[k.N_FEED])
        ints[k.N_FEED] = 0
        return _feed_to_change(self._adwin, self._feed[:m].tolist())

    def _save(self, buffers: tuple[np.ndarray, ...]) -> None:
        """Copy the state a kernel run changes (and ADWIN's) into spare arrays, for :meth:`_restore`."""
        arrays = (self._ints, self._floats, *buffers[:3])
        if [a.shape for a in self._saved] != [a.shape for a in arrays]:
            self._saved = [np.empty_like(a) for a in arrays]
        for spare, array in zip(self._saved, arrays, strict=True):
            np.copyto(spare, array)
        self._saved_adwin = (self._adwin._helper.__getstate__(), self._adwin.drift_detected)

    def _restore(self, buffers: tuple[np.ndarray, ...]) -> None:
        """The state :meth:`_save` copied (ADWIN is the same detector: it is rebuilt only between runs)."""
        for spare, array in zip(self._saved, (self._ints, self._floats, *buffers[:3]), strict=True):
            np.copyto(array, spare)
        blob, drift = self._saved_adwin
        self._adwin._helper.__setstate__(blob)
        self._adwin._drift_detected = drift

    def _run(self, te: I64, tp: I64, arrivals: Idx | None) -> tuple[I64, I64]:
        pre, post, _, _ = self._run_timed(te, tp, arrivals)
        return pre, post

    # -- checkpoints -----------------------------------------------------------------------------------
    def _state_dict(self) -> dict[str, Any]:
        ints, floats = self._ints, self._floats
        recent, recent_tp = self._sample()
        return {
            "max_te": int(ints[k.MAX_TE]),
            "recent": encode_i64(recent),
            "recent_tp": encode_i64(recent_tp),
            # ADWIN's window buckets as plain data (watermark.strategies.adwin_state): O(log n), never a
            # pickle, and not the values it was fed (up to 2 * sample_size of them), so a snapshot stays
            # small.
            "adwin": adwin_state(self._adwin),
            "fed": int(ints[k.FED]),
            "arrivals": int(ints[k.ARRIVALS]),
            "late": int(ints[k.LATE]),
            "delay": int(ints[k.DELAY]),
            "anchor": int(ints[k.ANCHOR]) if ints[k.HAS_ANCHOR] else None,
            "release": int(ints[k.RELEASE]),
            "drifts": self._drifts,
            "jumps": int(ints[k.JUMPS]),
            "extreme": int(ints[k.EXTREME]),
            "surge_until": int(ints[k.SURGE_UNTIL]),
            "burst_until": int(ints[k.BURST_UNTIL]),
            "last_extreme": int(ints[k.LAST_EXTREME]),
            "prev_extreme": int(ints[k.PREV_EXTREME]),
            "log_scale_avg": float(floats[k.LOG_SCALE_AVG]),
            "weight": float(floats[k.WEIGHT]),
            "weight_avg": float(floats[k.WEIGHT_AVG]),
        }

    def _load_state(self, state: Mapping[str, Any]) -> None:
        ints, floats = self._ints, self._floats
        ints[k.MAX_TE] = int(state["max_te"])
        self._set_sample(decode_i64(state["recent"]), decode_i64(state["recent_tp"]))
        if "adwin" in state:
            self._adwin = restore_adwin(state["adwin"])
            ints[k.FED] = int(state["fed"])
            # ADWIN's update count since its window last started (a reported change restarts it).
            ints[k.TICK] = 0 if self._adwin.drift_detected else int(state["adwin"]["tick"])
        else:  # a snapshot from before ADWIN's state was kept: the values it was fed (re-feeding restores it)
            self._refeed(decode_i64(state["fed"]))
        ints[k.ARRIVALS] = int(state["arrivals"])
        ints[k.LATE] = int(state["late"])
        ints[k.DELAY] = int(state["delay"])
        ints[k.HAS_ANCHOR] = state["anchor"] is not None
        ints[k.ANCHOR] = 0 if state["anchor"] is None else int(state["anchor"])
        ints[k.RELEASE] = int(state["release"])
        self._drifts = int(state["drifts"])
        ints[k.JUMPS] = int(state["jumps"])
        ints[k.EXTREME] = int(state["extreme"])
        ints[k.SURGE_UNTIL] = int(state["surge_until"])
        ints[k.BURST_UNTIL] = int(state["burst_until"])
        ints[k.LAST_EXTREME] = int(state["last_extreme"])
        ints[k.PREV_EXTREME] = int(state["prev_extreme"])
        floats[k.LOG_SCALE_AVG] = float(state["log_scale_avg"])
        floats[k.WEIGHT] = float(state["weight"])
        floats[k.WEIGHT_AVG] = float(state["weight_avg"])
