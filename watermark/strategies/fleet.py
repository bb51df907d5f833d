"""A per-key lateness model with one shared late budget: the fleet watermark.

Every key (a device; a partition in the combination's ``scoped`` mode) fires its windows by its own
watermark ``W_k = F_k - D_k``, its *frontier* minus its delay. The keys' models live in one :class:`Fleet`
(:class:`SharedFleet`) that the generators of a :class:`~watermark.partitions.combine.PartitionedWatermark`
share; docs/library.md gives the reasons.

* **Frontier.** A key's *reference* is its largest event time since its last re-base. A key is *live* while
  ``tp - ref`` is at most its transit baseline (its low ``tp - te``) plus ``lead`` event-time gaps; its
  frontier is then ``max(ref, min(t - baseline, ref + lead * gap))``, ``t`` its last arrival time (with
  ``follow_clock = 1`` the current instant: between arrivals the watermark follows the clock), ``gap`` its
  recent mean event-time step; otherwise its reference. ``lead = 0``: always the reference.
* **Lags.** An arrival's lag is how far its event time is behind its key's frontier just before it (0 when
  ahead). Each key keeps a decayed histogram of its lags (log-spaced bins, 8 a doubling, 273 bins; decay
  over ``memory`` of its arrivals), learnt while the key is live (every arrival with ``lead = 0``).
* **Clock steps.** ``step_run`` lags in a row beyond ``max(step_min_ms, 4 D_k)`` re-base the key (reference:
  the run's largest event time; baseline: the new offset) and are dropped; a shorter run is learnt.
* **Pooling.** A key's lag survival function is shrunk toward the fleet's (every key's lags, memory 8 times
  longer) by ``prior / (n_k + prior)`` (``n_k``: its effective history); a key the fleet has not seen yet
  starts with the fleet's quantile at the budget.
* **One late budget.** At the first arrival at or past each instant of a grid of ingestion time
  (``period_ms``) the delays are chosen together: minimise ``sum_k D_k`` subject to the expected late
  arrivals ``sum_k r_k S_k(D_k)`` (``r_k`` the key's recent arrival rate) being at most ``late_slo_pct`` of
  all arrivals: ``D_k = argmin_d [d + lambda r_k S_k(d)]`` over the bins' edges, ``lambda`` by bisection on
  its logarithm; what the multiplier's choice leaves of the budget is spent key by key, the most latency
  saved per expected late arrival first. The budget tightens while the realised late share is above target
  (won back over 2,000 arrivals, to half the target at most); the initial delay fades over the fleet's
  first 200 arrivals.
* **Guard.** An arrival that moves a key's reference further than the clock moved since the key's last
  arrival, by more than ``max(guard_min_ms, 3 D_k + 100)`` below the key's recent typical transit (the end
  of a congestion, a device back from offline), starts a guard: until the key's first arrival at least
  ``G - (tp - te) + D_k`` after it, its frontier is at most ``t - G`` (``G`` the held records' transit) and
  at least the held records' progress (the largest event time that came in behind the reference since);
  once they filled the gap to two event-time gaps below the fresh record, the guard ends after ``D_k``
  (lags are measured against the guarded frontier). The first record after a silence longer than its own
  excess transit (and 4 gaps) sets the key's recent transit at once.
* **Congestion.** The median over keys of the recent (4 arrivals) transit spread (change of ``tp - te``)
  beyond twice its long-run one (``memory``), times ``3 * congestion``, is added to every key's delay; the
  same median of the transit level above the baseline, times ``congestion``, to the live keys' delays.
  Both unwind at half the pace of time; the lags they cover are not learnt.
* **Surge** (``surge > 0``). The median of the transits above their keys' baselines of the fleet's last
  live arrivals of three different keys, past 4 calm medians (the *threshold*, from a decayed histogram of
  the calm arrivals, at each allocation), makes the fleet surge: each live key's delay is at least ``surge``
  times that median (the *cover*, averaged over the surge's detections) until one cover after the last
  detection. While calm, a live key's delay is at least 2.5 thresholds.

**Shared state and determinism.** It all runs in arrival order over every key's arrivals (compiled:
:mod:`watermark.strategies.fleet_kernel`). A combination (``min`` or ``scoped`` mode) builds one fleet
(:meth:`FleetWatermark.shared_state`), joins each partition's generator to it, runs it over the whole batch
before the generators read their proposals (:meth:`Fleet.prepare`), forgets evicted partitions and holds it
once in its snapshot: a batch gives the same decisions whole, in cuts or tuple by tuple. One partition's
decisions depend on the others' arrivals: the executors' stage (partitions run apart) cannot run it. Alone
(a bare generator, ``global`` mode) a generator has a fleet of its own with one key.

**Snapshots.** Version 4; version 1 loads with no guard in force and the newer figures at zero, version 2
with a guard in force ending by its time only, version 3 with no surge seen yet.

Parameters
----------
late_slo_pct
    Target share of late tuples over all keys, in percent, in ``(0, 100)``.
initial_delay_ms
    Delay before the fleet has data (fading over its first 200 arrivals), >= 0.
period_ms
    Ingestion time between two allocations of the budget, >= 1.
memory
    Arrivals of a key over which its histogram decays (by ``1/e``), >= 10 (the fleet's: 8 times more).
prior
    Weight of the fleet's lag distribution in a key's, in pseudo-arrivals, >= 0.
congestion
    Weight of the fleet's excess transit level (live keys) and, times 3, of its excess transit spread (every
    key) in the keys' delays, in ``[0, 4]`` (0: no congestion delay; the guard is apart).
step_min_ms
    A lag must exceed this (and 4 times the key's delay) to count toward a clock step, >= 1.
step_run
    Lags beyond the threshold in a row that make a clock step, in ``[1, 16]``.
lead
    Event-time gaps a live key's frontier may run ahead of its reference, in ``[0, 100]`` (0: never).
follow_clock
    1: between arrivals a live key's frontier follows the ingestion clock (timers); 0: it moves at arrivals.
guard_min_ms
    Smallest fall of a key's transit (ms) that starts a guard after a congestion, >= 0 (0: no guard).
surge
    A live key's delay while the fleet surges, in medians of the surge's transits above their keys'
    baselines, in ``[0, 16]`` (0: no surge).

Examples
--------
One key whose tuples trail its frontier by up to 40 ms: the budget of 1 % is met at a delay of about 30 ms.

>>> import numpy as np
>>> from watermark.strategies.fleet import FleetWatermark
>>> rng = np.random.default_rng(1)
>>> n = 20_000
>>> tp = 1_700_000_000_000 + np.arange(n) * 5
>>> te = tp - rng.integers(0, 40, n)
>>> gen = FleetWatermark(late_slo_pct=1.0)
>>> wm = gen.process(te, tp)
>>> round(100 * gen.n_late / n, 1) <= 1.1, 30 <= gen.delay_ms <= 45
(True, True)

"""

from __future__ import annotations

import base64
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, ClassVar, Protocol

import numpy as np
from numpy.typing import NDArray

from watermark.base import I64, Idx, SharedState, WatermarkGenerator, check_float, check_int
from watermark.strategies import fleet_kernel as fk
from watermark.strategies import fleet_trace_kernel
from watermark.timeline import NO_RISE
from watermark.timeutil import NO_WATERMARK

#: Widths of a key's state rows in a version-1 snapshot (the guard's and the transit figures came after).
V1_KINTS, V1_KFLOATS = 13, 7
#: ... and in a version-2 snapshot (the guard's progress came after).
V2_KINTS, V2_KFLOATS = 15, 11


def _encode_f64(values: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(values, "<f8").tobytes()).decode("ascii")


def _decode_f64(text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype="<f8").astype(np.float64)


class SharedFleet(SharedState, Protocol):
    """What a combination's generators share (:class:`Fleet`, from :meth:`FleetWatermark.shared_state`).

    The combination's :class:`~watermark.base.SharedState`, and what the keys' generators read of it.
    """

    def prepare(
        self, keys: list[Hashable], codes: np.ndarray, te: I64, tp: I64, clocks: Mapping[Hashable, int | None]
    ) -> None:
        """Run a whole batch of every key in arrival order, for the keys' generators to read."""

    def proposals(self, key: Hashable, te: I64, tp: I64) -> tuple[I64, I64, I64]:
        """``key``'s arrivals ``te``: its proposal and clock ramp ``(proposal, off, cap)`` per arrival."""

    def forget(self, key: Hashable) -> None:
        """Drop a key (its partition was evicted)."""

    def delays_ms(self) -> dict[Hashable, int]:
        """Each key's delay in force."""

    @property
    def new_key_delay_ms(self) -> int:
        """The delay a key the fleet has not seen yet starts with."""

    def diagnostics(self) -> dict[str, Any]:
        """The fleet's figures."""

    def snapshot(self) -> dict[str, Any]:
        """JSON-serialisable state."""

    def load(self, snap: Mapping[str, Any]) -> None:
        """Take the state of :meth:`snapshot`."""


class Fleet:
    """The shared state of a fleet of keys (:class:`SharedFleet`): lag models, congestion, guards, budget.

    Built by :meth:`FleetWatermark.shared_state` (one per combination) or by a lone generator for itself.
    Keys are the partition keys (strings or integers).
    """

    _kints: NDArray[np.int64]
    _kfloats: NDArray[np.float64]
    _hist: NDArray[np.float64]
    _pend: NDArray[np.int64]

    def __init__(self, params: Mapping[str, Any]) -> None:
        self.params = dict(params)
        self._iparams = np.zeros(fk.N_IPARAMS, np.int64)
        self._iparams[fk.P_PERIOD] = params["period_ms"]
        self._iparams[fk.P_INITIAL] = params["initial_delay_ms"]
        self._iparams[fk.P_STEP_RUN] = params["step_run"]
        self._iparams[fk.P_STEP_MIN] = params["step_min_ms"]
        self._iparams[fk.P_MEMORY] = params["memory"]
        self._iparams[fk.P_GUARD_MIN] = params["guard_min_ms"]
        self._fparams = np.zeros(fk.N_FPARAMS, np.float64)
        self._fparams[fk.P_TARGET] = params["late_slo_pct"] / 100.0
        self._fparams[fk.P_PRIOR] = params["prior"]
        self._fparams[fk.P_CONGESTION] = params["congestion"]
        self._fparams[fk.P_LEAD] = params["lead"]
        self._fparams[fk.P_FOLLOW] = params["follow_clock"]
        self._fparams[fk.P_SURGE] = params["surge"]
        self._fints = np.zeros(fk.N_FINTS, np.int64)
        self._fints[fk.G_NEW_DELAY] = params["initial_delay_ms"]
        self._ffloats = np.zeros(fk.N_FFLOATS, np.float64)
        self._ffloats[fk.H_INC] = 1.0
        self._fhist = np.zeros(fk.N_BINS, np.float64)
        self._slots: dict[Hashable, int] = {}
        self._alloc(4)
        #: Proposals :meth:`prepare` computed for the generators to read, by key.
        self._prepared: dict[Hashable, tuple[I64, I64, I64, I64]] = {}
        #: How many of each key's prepared arrivals its generator has read (it may read them in parts).
        self._read: dict[Hashable, int] = {}

    def _alloc(self, capacity: int, *, keep: bool = True) -> None:
        old = getattr(self, "_kints", None) if keep else None
        kints = np.zeros((capacity, fk.N_KINTS), np.int64)
        kints[:, fk.K_REF] = NO_WATERMARK
        kints[:, fk.K_WM] = NO_WATERMARK
        kints[:, fk.K_GUARD_END] = NO_WATERMARK
        kfloats = np.zeros((capacity, fk.N_KFLOATS), np.float64)
        hist = np.zeros((capacity, fk.N_BINS), np.float64)
        pend = np.zeros((capacity, fk.MAX_STEP_RUN), np.int64)
        if old is not None:
            k = old.shape[0]
            kints[:k], kfloats[:k], hist[:k], pend[:k] = self._kints, self._kfloats, self._hist, self._pend
        self._kints, self._kfloats, self._hist, self._pend = kints, kfloats, hist, pend

    def slot(self, key: Hashable) -> int:
        """The state row of ``key`` (a new key gets the next one)."""
        if isinstance(key, np.generic):
            key = key.item()
        s = self._slots.get(key)
        if s is None:
            s = self._slots[key] = len(self._slots)
            if s >= self._kints.shape[0]:
                self._alloc(2 * self._kints.shape[0])
            self._fints[fk.G_KEYS] = len(self._slots)
        return s

    # -- running ------------------------------------------------------------------------------------------
    def run(
        self, slots: np.ndarray, te: I64, tp: I64, clocks: np.ndarray | None = None
    ) -> tuple[I64, I64, I64]:
        """Arrivals of any keys (their slots) in arrival order: each one's key's proposal and clock ramp.

        Returns ``(proposal, off, cap)`` per arrival: the key's watermark right after it is at least
        ``proposal``, and until the key's next arrival ``W(t) >= min(t - off, cap)`` (``cap`` is
        ``NO_WATERMARK`` where it does not follow the clock).
        """
        out = np.empty(te.size, np.int64)
        off = np.empty(te.size, np.int64)
        cap = np.empty(te.size, np.int64)
        if clocks is None:
            clocks = np.full(max(1, len(self._slots)), NO_WATERMARK, np.int64)
        fk.run(
            np.ascontiguousarray(slots, np.int64),
            np.ascontiguousarray(te, np.int64),
            np.ascontiguousarray(tp, np.int64),
            clocks,
            self._kints,
            self._kfloats,
            self._hist,
            self._pend,
            self._fints,
            self._ffloats,
            self._fhist,
            self._iparams,
            self._fparams,
            out,
            off,
            cap,
        )
        return out, off, cap

    def prepare(
        self,
        keys: list[Hashable],
        codes: np.ndarray,
        te: I64,
        tp: I64,
        clocks: Mapping[Hashable, int | None],
    ) -> None:
        """Run a whole batch of every key in arrival order; each key's generator then reads its proposals.

        ``codes[i]`` is the index in ``keys`` of arrival ``i``'s key; ``tp`` the arrival times as the keys'
        generators will see them; ``clocks`` each generator's clock before the batch.
        """
        slot_of = np.array([self.slot(key) for key in keys], np.int64)
        clock_arr = np.full(len(self._slots), NO_WATERMARK, np.int64)
        for key, clock in clocks.items():
            if clock is not None and key in self._slots:
                clock_arr[self._slots[key]] = clock
        out, off, cap = self.run(slot_of[codes], te, tp, clock_arr)
        self._prepared, self._read = {}, {}
        if len(keys) == 1:
            self._prepared[keys[0]] = (te, out, off, cap)
            return
        order = np.argsort(codes, kind="stable")
        bounds = np.concatenate([[0], np.cumsum(np.bincount(codes, minlength=len(keys)))])
        for code, key in enumerate(keys):
            rows = order[bounds[code] : bounds[code + 1]]
            self._prepared[key] = (te[rows], out[rows], off[rows], cap[rows])

    def proposals(self, key: Hashable, te: I64, tp: I64) -> tuple[I64, I64, I64]:
        """``key``'s arrivals ``te``: :meth:`run`'s answer that :meth:`prepare` computed, else run now.

        A generator may read its prepared arrivals in consecutive parts (a partition that returns from
        idleness within the batch runs in segments).
        """
        ready = self._prepared.get(key)
        if ready is not None:
            start = self._read[key] if key in self._read else 0
            stop = start + te.size
            if stop <= ready[0].size and np.array_equal(ready[0][start:stop], te):
                self._read[key] = stop
                if stop == ready[0].size:
                    del self._prepared[key]
                return ready[1][start:stop], ready[2][start:stop], ready[3][start:stop]
        s = self.slot(key)
        return self.run(np.full(te.size, s, np.int64), te, tp)

    def forget(self, key: Hashable) -> None:
        """Drop a key (its partition was evicted): its row is cleared for reuse by a new key."""
        s = self._slots.pop(key, None)
        if s is None:
            return
        last = len(self._slots)  # move the last row into the hole, keeping slots dense
        moved = [k for k, v in self._slots.items() if v == last]
        for arr in (self._kints, self._kfloats, self._hist, self._pend):
            arr[s] = arr[last]
        if moved:
            self._slots[moved[0]] = s
        self._kints[last] = 0
        self._kints[last, fk.K_REF] = NO_WATERMARK
        self._kints[last, fk.K_WM] = NO_WATERMARK
        self._kints[last, fk.K_GUARD_END] = NO_WATERMARK
        self._kfloats[last] = 0.0
        self._hist[last] = 0.0
        self._pend[last] = 0
        self._fints[fk.G_KEYS] = len(self._slots)

    # -- read-only ------------------------------------------------------------------------------------------
    def delays_ms(self) -> dict[Hashable, int]:
        """Each key's delay in force: its allocated delay plus the congestion delay.

        (A live key also has :attr:`level_ms`; a guarded one's frontier follows its held records.)
        """
        extra = self.congestion_ms
        return {k: int(self._kints[s, fk.K_DELAY]) + extra for k, s in self._slots.items()}

    @property
    def congestion_ms(self) -> int:
        """The congestion delay in force, added to every key's delay."""
        return int(np.ceil(self._ffloats[fk.H_CONGESTION]))

    @property
    def level_ms(self) -> int:
        """The congestion delay of a raised transit level in force, added to live keys' delays."""
        return int(np.ceil(self._ffloats[fk.H_LEVEL]))

    @property
    def surge_ms(self) -> int:
        """The surge's cover, the least delay of live keys, while the fleet surges at its clock; else 0."""
        if self._fints[fk.G_HAS_CLOCK] and self._fints[fk.G_CLOCK] < self._ffloats[fk.H_SURGE_UNTIL]:
            return int(np.ceil(self._ffloats[fk.H_SURGE_COVER]))
        return 0

    def guarded(self) -> list[Hashable]:
        """The keys whose watermark is guarded after a congestion (their held records may be in flight)."""
        return [k for k, s in self._slots.items() if self._kints[s, fk.K_GUARD_END] != NO_WATERMARK]

    @property
    def new_key_delay_ms(self) -> int:
        """The delay a key the fleet has not seen yet starts with."""
        return int(self._fints[fk.G_NEW_DELAY])

    def steps(self) -> dict[Hashable, int]:
        """Clock steps detected per key."""
        return {k: int(self._kints[s, fk.K_STEPS]) for k, s in self._slots.items()}

    def diagnostics(self) -> dict[str, Any]:
        """Keys, allocations, congestion delays, guarded keys, late share of the keys' own proposals."""
        arrivals = int(self._fints[fk.G_ARRIVALS])
        return {
            "keys": len(self._slots),
            "allocations": int(self._fints[fk.G_ALLOCATIONS]),
            "congestion_ms": self.congestion_ms,
            "level_ms": self.level_ms,
            "surge_ms": self.surge_ms,
            "guarded_keys": len(self.guarded()),
            "late_share": int(self._fints[fk.G_LATE]) / arrivals if arrivals else 0.0,
            "clock_steps": int(self._kints[: len(self._slots), fk.K_STEPS].sum()),
        }

    # -- checkpoints ----------------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """JSON-serialisable state (the histograms as base64 of their float64 bytes, exact)."""
        n = len(self._slots)
        return {
            "kind": "fleet",
            "version": 4,
            "keys": list(self._slots),
            "kints": self._kints[:n].tolist(),
            "kfloats": _encode_f64(self._kfloats[:n]),
            "hist": _encode_f64(self._hist[:n]),
            "pend": self._pend[:n].tolist(),
            "fints": self._fints.tolist(),
            "ffloats": _encode_f64(self._ffloats),
            "fhist": _encode_f64(self._fhist),
        }

    def load(self, snap: Mapping[str, Any]) -> None:
        """Take the state of :meth:`snapshot` (of a fleet with the same parameters).

        A version-1 snapshot (before the guard) loads with no guard in force and the new figures at zero; in
        a version-2 one (before the guard's progress) a guard in force ends by its time only; a version-3 one
        (before the surge) with no surge seen yet.
        """
        version = snap.get("version")
        if snap.get("kind") != "fleet" or version not in (1, 2, 3, 4):
            msg = "not a version-1, 2, 3 or 4 fleet snapshot"
            raise ValueError(msg)
        n_kints, n_kfloats = {1: (V1_KINTS, V1_KFLOATS), 2: (V2_KINTS, V2_KFLOATS)}.get(
            version, (fk.N_KINTS, fk.N_KFLOATS)
        )
        keys = list(snap["keys"])
        n = len(keys)
        self._alloc(max(4, n), keep=False)
        if n:
            self._kints[:n, :n_kints] = np.array(snap["kints"], np.int64).reshape(n, n_kints)
            self._kfloats[:n, :n_kfloats] = _decode_f64(snap["kfloats"]).reshape(n, n_kfloats)
            self._hist[:n] = _decode_f64(snap["hist"]).reshape(n, fk.N_BINS)
            self._pend[:n] = np.array(snap["pend"], np.int64).reshape(n, fk.MAX_STEP_RUN)
            if version < 3:  # no progress known: the gap behind a guard's fresh record never counts filled
                self._kints[:n, fk.K_GUARD_FILL] = NO_WATERMARK
                self._kints[:n, fk.K_GUARD_TOP] = np.iinfo(np.int64).max
        self._slots = {key: i for i, key in enumerate(keys)}
        self._fints[:] = np.array(snap["fints"], np.int64)
        ffloats = _decode_f64(snap["ffloats"])
        self._ffloats[:] = 0.0
        self._ffloats[: ffloats.size] = ffloats
        self._fhist[:] = _decode_f64(snap["fhist"])
        self._prepared, self._read = {}, {}


class FleetWatermark(WatermarkGenerator):
    """One key's watermark in a fleet that shares a late budget (see the module docstring)."""

    name = "fleet"
    param_types: ClassVar[Mapping[str, Any]] = {
        "late_slo_pct": float,
        "initial_delay_ms": int,
        "period_ms": int,
        "memory": int,
        "prior": float,
        "congestion": float,
        "step_min_ms": int,
        "step_run": int,
        "lead": float,
        "follow_clock": int,
        "guard_min_ms": int,
        "surge": float,
    }

    # its defaults, following the clock, never ahead of the reference, and the surge 4 gaps ahead
    search_space: ClassVar[Sequence[Mapping[str, Any]]] = [
        {},
        {"follow_clock": 1},
        {"lead": 0.0},
        {"surge": 4.0, "lead": 4.0},
        {"surge": 5.0, "lead": 4.0},
    ]

    @classmethod
    def test_settings(cls, pick: Callable[[Sequence[Any]], Any]) -> dict[str, Any]:
        """The contract tests' parameters (:meth:`watermark.base.WatermarkGenerator.test_settings`)."""
        return {
            "late_slo_pct": pick([0.5, 5.0, 30.0]),
            "initial_delay_ms": pick(range(301)),
            "period_ms": pick(range(1, 301)),
            "memory": pick(range(10, 101)),
            "prior": pick([0.0, 5.0, 50.0]),
            "congestion": pick([0.0, 1.0, 2.0]),
            "step_min_ms": pick(range(1, 501)),
            "step_run": pick(range(1, 7)),
            "lead": pick([0.0, 1.0, 2.0, 10.0]),
            "follow_clock": pick([0, 1]),
            "surge": pick([0.0, 2.0, 5.0]),
        }

    def __init__(
        self,
        late_slo_pct: float,
        initial_delay_ms: int = 2_000,
        period_ms: int = 1_000,
        memory: int = 500,
        prior: float = 50.0,
        congestion: float = 1.5,
        step_min_ms: int = 1_000,
        step_run: int = 5,
        lead: float = 1.0,
        follow_clock: int = 1,
        guard_min_ms: int = 500,
        surge: float = 0.0,
    ) -> None:
        self.late_slo_pct = check_float("late_slo_pct", late_slo_pct, 0.0, 100.0, low_open=True)
        if self.late_slo_pct >= 100.0:
            msg = f"late_slo_pct must be below 100, got {self.late_slo_pct}"
            raise ValueError(msg)
        self.initial_delay_ms = check_int("initial_delay_ms", initial_delay_ms, 0)
        self.period_ms = check_int("period_ms", period_ms, 1)
        self.memory = check_int("memory", memory, 10)
        self.prior = check_float("prior", prior, 0.0, 1e9)
        self.congestion = check_float("congestion", congestion, 0.0, 4.0)
        self.step_min_ms = check_int("step_min_ms", step_min_ms, 1)
        self.step_run = check_int("step_run", step_run, 1, fk.MAX_STEP_RUN)
        self.lead = check_float("lead", lead, 0.0, 100.0)
        self.follow_clock = check_int("follow_clock", follow_clock, 0, 1)
        self.guard_min_ms = check_int("guard_min_ms", guard_min_ms, 0)
        self.surge = check_float("surge", surge, 0.0, 16.0)
        super().__init__()

    @classmethod
    def shared_state(cls, params: Mapping[str, Any]) -> SharedFleet:
        """The state the generators of one combination share, from validated ``params`` (built once by it)."""
        return Fleet(params)

    def _reset_state(self) -> None:
        self._fleet: SharedFleet = Fleet(self.params)
        self._key: Hashable = 0
        self._joined = False
        #: After the key's last arrival, ``W(t) >= min(t - off, cap)`` (``cap`` NO_WATERMARK: no ramp).
        self._ramp = (0, NO_WATERMARK)

    def join(self, fleet: SharedFleet, key: Hashable) -> None:
        """Make this generator key ``key`` of the shared ``fleet`` (its own fleet is dropped)."""
        self._fleet, self._key, self._joined = fleet, key, True

    @property
    def fleet(self) -> SharedFleet:
        """The fleet this generator's key belongs to."""
        return self._fleet

    @property
    def delay_ms(self) -> int:
        """The key's delay in force (the fleet's congestion delay included)."""
        return self._fleet.delays_ms().get(self._key, self._fleet.new_key_delay_ms)

    def diagnostics(self) -> dict[str, Any]:
        """The key's delay and the fleet's figures."""
        return {"delay_ms": self.delay_ms, **self._fleet.diagnostics()}

    # -- the rule -------------------------------------------------------------------------------------------
    def _advance(self, now: int, *, arrival: bool) -> None:
        off, cap = self._ramp
        if cap != NO_WATERMARK:
            self._raise(min(now - off, cap))

    def _observe(self, te: int, tp: int, late: bool) -> None:
        one = np.array([te], np.int64)
        proposal, off, cap = self._fleet.proposals(self._key, one, np.array([tp], np.int64))
        self._raise(int(proposal[0]))
        self._ramp = (int(off[0]), int(cap[0]))

    def _run_timed(self, te: I64, tp: I64, arrivals: Idx | None) -> tuple[I64, I64, I64, I64 | None]:
        n = te.size
        if arrivals is None:
            is_arrival = np.ones(n, np.bool_)
            proposals, offs, caps = self._fleet.proposals(self._key, te, tp)
        else:
            is_arrival = np.zeros(n, np.bool_)
            is_arrival[arrivals] = True
            proposals, offs, caps = self._fleet.proposals(self._key, te[arrivals], tp[arrivals])
        clock = self._clock
        state = np.array(
            [self._wm, self._ramp[0], self._ramp[1], clock is not None, 0 if clock is None else clock],
            np.int64,
        )
        pre = np.empty(n, np.int64)
        post = np.empty(n, np.int64)
        rise = np.full(n, NO_RISE, np.int64)
        offset = np.zeros(n, np.int64)
        tp_c = np.ascontiguousarray(tp, np.int64)
        fleet_trace_kernel.trace(tp_c, is_arrival, proposals, offs, caps, state, pre, post, rise, offset)
        self._wm = int(state[0])
        self._ramp = (int(state[1]), int(state[2]))
        self._clock = int(tp[-1])
        return pre, post, rise, offset

    def _run(self, te: I64, tp: I64, arrivals: Idx | None) -> tuple[I64, I64]:
        pre, post, _, _ = self._run_timed(te, tp, arrivals)
        return pre, post

    # -- checkpoints ----------------------------------------------------------------------------------------
    def _state_dict(self) -> dict[str, Any]:
        # A generator of a shared fleet is restored by its combination, which holds the fleet once.
        return {
            "key": self._key,
            "ramp": list(self._ramp),
            "fleet": None if self._joined else self._fleet.snapshot(),
        }

    def _load_state(self, state: Mapping[str, Any]) -> None:
        self._key = state["key"]
        self._ramp = (int(state["ramp"][0]), int(state["ramp"][1]))
        if state["fleet"] is not None:
            self._fleet.load(state["fleet"])
