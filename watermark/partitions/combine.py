"""Combining per-partition generators into one watermark: minimum over active partitions, with idleness.

A stream has source partitions (files, Kafka partitions, devices). Each gets its own generator; the global
watermark is the minimum over the *active* partitions (Streaming Systems; Pravega's group watermark). A
partition with no arrival for ``idle_timeout_ms`` of ingestion time is excluded (Flink's ``withIdleness``),
so one silent partition cannot stall the stream; the global value never regresses when it returns, and its
old tuples are late. The partition at the minimum "holds the watermark back" and is reported.

At an arrival from partition ``q`` at ingestion time ``t``:

1. every other partition's generator sees ``on_idle(t)`` (time-driven strategies may advance);
2. ``q``'s generator advances to ``t`` and the global watermark in force is
   ``max(W, min over partitions active before t of their watermark at t)``; the tuple is judged against it;
3. after ``q`` observes the tuple (and is active again), ``W = max(W, min over active partitions)``.

A partition silent for a retention can be forgotten (:meth:`PartitionedWatermark.evict`): its generator and
last arrival go, so the state and the cost of a batch follow the partitions alive, not every partition ever
seen. What comes back after that is judged so that no window closes twice: in ``scoped`` mode one scalar,
the *eviction floor* (the highest watermark a forgotten partition had), is the starting watermark of every
partition new to the combination, and the floor of every key a partition claims while its own watermark is
below it (:meth:`PartitionedWatermark.hold_key_floors`); in ``min`` mode only idle partitions are forgotten
and the global watermark never goes back, so a returning partition is a new one; ``global`` mode only
tracks partitions.

In ``scoped`` mode with an idle timeout a silent partition's watermark follows the fleet's (the minimum
over the active partitions) once its timeout has elapsed, up to the end of its own last window: see
:class:`PartitionedWatermark`, *Notes*.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Mapping
from typing import Any, Self

import numpy as np
from numpy.typing import ArrayLike

from watermark.base import I64, Trace
from watermark.partitions.arrays import factorize, plain_key
from watermark.partitions.eviction import PartitionEviction
from watermark.partitions.idle import IdleLearning, dense, sparse
from watermark.partitions.minimum import MinimumCombination
from watermark.partitions.scoped import ScopedCombination
from watermark.partitions.scoped_idle import IdleScopedCombination
from watermark.partitions.state import AUTO, SCOPED_MODES
from watermark.strategies.registry import make, restore
from watermark.timeline import Timeline
from watermark.timeutil import NO_WATERMARK, as_ms_array
from watermark.windowspec import WindowSpec


class PartitionedWatermark(IdleScopedCombination, ScopedCombination, MinimumCombination, PartitionEviction):
    """Per-partition generators of one strategy, combined into a global watermark.

    Parameters
    ----------
    strategy
        Registered strategy name (see :data:`watermark.strategies.registry.STRATEGIES`).
    params
        Its parameters (strings are converted, as with ``--set``).
    idle_timeout_ms
        Ingestion time without arrivals after which a partition stops holding the watermark back; ``None``
        never excludes a partition.
    mode
        ``"min"`` (default): one generator per partition, the global watermark their minimum over active
        partitions. ``"global"``: one generator fed by every partition in arrival order (partitions are
        only tracked: last arrival, activity; ``generators`` maps each to that one generator and
        ``holdback_partition`` is ``None``). ``"scoped"``: one generator per partition that sees only its
        own arrivals, on its own clock (its arrival times), and judges only its own tuples; the windows of
        the keys living in a partition fire by that partition's watermark (Kafka's keyed partitioning).
        Without an idle timeout no partition waits for another, so a scoped stream cut into batches
        anywhere gives the same decisions even when its partitions are read at different speeds (Kafka
        batches cut by offsets); the global value (the minimum over partitions) is only reported. With
        one, a partition silent for its timeout follows the fleet (see *Idleness in scoped mode* below).
        The tuner measures all three and chooses. ``"keyed"``: scoped, where the caller passes each
        record's key as its partition (the job's key-scoped firing: each key's windows fire by its own
        watermark, several keys sharing a Kafka partition); the generators behave as in ``"scoped"``, the
        mode is kept apart so that a state of one is never resumed as the other.
    window
        The windows the partitions' watermarks fire (scoped mode with idleness): an idle partition is
        raised no higher than the end of its last window (*No higher than its own windows* below);
        ``None``: it follows the fleet.

    Notes
    -----
    **Idleness in scoped mode.** A partition (a device, a key's partition) that goes silent would keep its
    last window open until its next arrival, and a partition that stops would never emit it. With
    ``idle_timeout_ms``, a partition without an arrival for its timeout, measured on the combination's
    ingestion clock (the latest arrival of any partition: the rule ``min`` mode excludes idle partitions
    by), is *idle*, and its watermark is raised to the *fleet's*: the minimum over the active partitions'
    own watermarks, at the instant it falls idle and after every later arrival or partition falling idle
    while it stays idle. Never lowered (a raise is a floor of its generator,
    :meth:`~watermark.base.WatermarkGenerator.hold_floor`), never above what ``min`` mode would give (the
    minimum over the active partitions), and nothing moves while every partition is idle. Why the
    slowest active partition and not, say, the ingestion clock minus a lag: the fleet's minimum is a
    watermark every active partition already asserts, so an idle device's windows close no earlier than
    the slowest live device's would, which keeps the late rate of a returning device to what the fleet
    has already declared complete; following the clock would assert completeness for data no partition
    has seen. When it returns, its tuples below the raised watermark are late (the late table, the
    backfill), and its windows are emitted once. Each raise is a step in the partition's timeline
    (:attr:`~watermark.base.Trace.partition_timelines`), so a stopped partition's last window fires at
    the instant its timeout elapsed with the fleet past the window's end, in the replay and in the job.

    **No higher than its own windows.** Given the windows (``window``; the replay and the job give them),
    an idle partition is raised no higher than the end of the last window holding its largest event time:
    that fires every window it has data in, which is what idleness is for, and asserts nothing about event
    times beyond them. A device that goes offline and buffers (a phone in a tunnel, a gateway losing its
    uplink) sends, when it returns, event times later than its last window: following the fleet would make
    that whole backlog late, while capped only what falls in the window already fired is (in the
    ``offline-flush`` family of ``benchmarks/tuner_quality.py``, most of the late share). In scoped mode a
    partition's watermark fires only its own keys' windows, so holding an idle one lower delays nothing
    else. Without ``window`` (a combination built without it, or restored from a snapshot written before
    it) an idle partition follows the fleet.

    The timeout is fixed (milliseconds) or learned per partition from its own gaps between arrivals
    (``"auto"``, or an :class:`~watermark.partitions.idle.IdleLearning` for other settings): a multiple of a
    high quantile of its recent gaps, with a floor and a cap (:mod:`watermark.partitions.idle`), kept in the
    snapshot. In ``min`` and ``global`` modes ``"auto"`` is the cap, fixed (a replay of every mode with one
    configuration, as the tuner's, runs).

    What holds with idleness: the decisions depend on the other partitions' arrivals (when a partition
    falls idle, and the fleet's watermark then), so they are a function of the *arrival order* of the
    whole stream. For the same arrival order, one :meth:`process_trace` call, any cut into batches (with
    a snapshot between them) and :meth:`update` tuple by tuple give the same watermark for every tuple,
    the same partition watermarks and the same fire instants; a stream whose partitions are read at
    different speeds (so merged in another order) may differ where a partition's idleness does.
    :meth:`absorb_partitions` (partitions run apart, in executors) cannot raise within a batch: there
    the idle partitions are raised at the batch boundary (:meth:`advance_to`) or at the batch's clock
    (:meth:`raise_idle`).

    Examples
    --------
    Partition ``b`` holds the watermark back, then falls silent; after 1 s of ingestion time without an
    arrival it is excluded and the watermark follows ``a``.

    >>> from watermark.partitions.combine import PartitionedWatermark
    >>> pw = PartitionedWatermark("ingestion", {"max_event_time_lag_ms": 0}, idle_timeout_ms=1_000)
    >>> pw.process(["a", "b", "a"], [100, 100, 1_000], [100, 110, 1_000]).tolist()
    [-9223372036854775808, 99, 99]
    >>> pw.holdback_partition, pw.watermark_ms
    ('b', 109)
    >>> pw.process(["a"], [1_600], [1_600]).tolist()
    [999]
    >>> pw.holdback_partition, pw.watermark_ms
    ('a', 1599)

    Scoped: device ``b`` stops after one arrival; at 1100 it is idle and follows ``a``: raised to 999
    then, to 1999 by ``a``'s arrival at 2000, which fires ``b``'s window ``[0, 1000)``.

    >>> pw = PartitionedWatermark("ingestion", {"max_event_time_lag_ms": 0}, idle_timeout_ms=1_000,
    ...                           mode="scoped")
    >>> trace = pw.process_trace(["b", "a", "a"], [100, 1_000, 2_000], [100, 1_000, 2_000])
    >>> b = trace.partition_timelines["b"]
    >>> b.tp.tolist(), b.post.tolist()
    ([100, 1100, 2000], [99, 999, 1999])
    >>> fired, at, wm = b.fire(np.array([1_000]))
    >>> bool(fired[0]), int(at[0]), int(wm[0])
    (True, 2000, 1999)

    """

    # -- scalar path -----------------------------------------------------------------------------------
    def update(self, partition: Hashable, te_ms: int, tp_ms: int) -> Self:
        """One arrival from ``partition`` (reference path; :meth:`process` is the fast equivalent)."""
        key = plain_key(partition)
        te, now = int(te_ms), int(tp_ms)
        if self.mode in SCOPED_MODES:
            if self._idle_scoped():
                return self._update_scoped_idle(key, te, now)
            return self._update_scoped(key, te, now)
        if self._clock is not None and now < self._clock:
            now = self._clock
        if self._shared is not None:
            self._clock = now
            self._update_global(self._shared, key, te, now)
            return self
        return self._update_min(key, te, now)

    def on_idle(self, now_ms: int) -> Self:
        """Advance time without data: idle partitions drop out, time-driven generators advance."""
        now = int(now_ms)
        if self._clock is not None and now <= self._clock:
            return self
        if self._shared is not None:
            self._clock = now
            self._wm = max(self._wm, self._shared.on_idle(now).watermark_ms)
            return self
        if self.mode in SCOPED_MODES:  # each partition's time is its own arrivals': only idleness advances
            if self._idle_scoped():
                self._scoped_drop_until(now)
            self._clock = now
            return self
        self._last_count(now)
        self._clock = now
        for g in self._gens.values():
            g.on_idle(now)
        self._settle([p for p, last in self._last_tp.items() if self._is_active(now, last)])
        return self

    def advance_to(self, now_ms: int) -> Self:
        """Advance time to ``now_ms`` on a clock every partition shares (the wall clock of a live source).

        As :meth:`on_idle`, except that in ``scoped`` mode each partition's generator advances too: with
        arrival times stamped by one clock (Kafka's ``LogAppendTime``), a partition that has had no
        arrival since its last one has still lived until ``now_ms``. A time at or before a partition's own
        clock changes nothing for it.

        >>> params = {"max_event_time_lag_ms": 100, "max_watermark_lag_ms": 500}
        >>> pw = PartitionedWatermark("ingestion", params, mode="scoped")
        >>> _ = pw.process(["a", "b"], [1_000, 2_000], [1_000, 2_000])
        >>> pw.partition_watermarks
        {'a': 899, 'b': 1899}
        >>> pw.advance_to(3_000).partition_watermarks
        {'a': 2899, 'b': 2899}
        """
        now = int(now_ms)
        if self.mode not in SCOPED_MODES:
            return self.on_idle(now)
        if self._idle_scoped():
            self._scoped_drop_until(now)
        for gen in self._gens.values():
            if gen.clock_ms is None or now > gen.clock_ms:
                gen.on_idle(now)
        if self._clock is None or now > self._clock:
            self._clock = now
        if self._idle_scoped():
            self._scoped_raise_idle(self._clock)
        self._settle([p for p, last in self._last_tp.items() if self._is_active(now, last, p)])
        return self

    # -- vectorised path -------------------------------------------------------------------------------
    def process(self, partition: ArrayLike, te: ArrayLike, tp: ArrayLike) -> I64:
        """Vectorised ``update`` loop: the global watermark in force at each arrival (in arrival order)."""
        return self.process_trace(partition, te, tp).at_arrival

    def process_trace(self, partition: ArrayLike, te: ArrayLike, tp: ArrayLike) -> Trace:
        """Like :meth:`process`, also returning the global watermark right after each arrival.

        Each partition's generator runs once over the batch, with the other partitions' arrivals as idle
        ticks; the cost is about five passes over the batch per partition.
        """
        te_a, tp_a = as_ms_array(te, "te"), as_ms_array(tp, "tp")
        keys, codes = factorize(partition)
        n = te_a.size
        if not (codes.size == n == tp_a.size):
            msg = f"partition, te and tp must have the same length, got {codes.size}, {n} and {tp_a.size}"
            raise ValueError(msg)
        if n == 0:
            empty = np.empty(0, np.int64)
            return Trace(empty, empty.copy(), Timeline(empty, empty, empty, self._wm, ()))
        clock = np.maximum.accumulate(tp_a)
        if self._clock is not None:
            np.maximum(clock, self._clock, out=clock)
        if self._shared is not None:
            return self._trace_global(self._shared, keys, codes, te_a, clock)
        if self._shared_state is not None:
            # The shared state runs over the whole batch in arrival order first, so that each partition's
            # generator reads what arrival-by-arrival processing would give it (batch invariance).
            for key in keys:
                self._generator(key)
            times = tp_a if self.mode in SCOPED_MODES else clock  # what each partition's generator sees
            clocks = {key: gen.clock_ms for key, gen in self._gens.items()}
            self._shared_state.prepare(keys, codes, te_a, times, clocks)
        if self.mode in SCOPED_MODES:
            if self._idle_scoped():
                return self._trace_scoped_idle(keys, codes, te_a, tp_a, clock)
            return self._trace_scoped(keys, codes, te_a, tp_a, clock)
        return self._trace_min(keys, codes, te_a, clock)

    def reconfigured(
        self,
        strategy: str,
        params: Mapping[str, Any] | None = None,
        *,
        idle_timeout_ms: int | str | IdleLearning | None = None,
        mode: str | None = None,
        window: WindowSpec | None = None,
    ) -> PartitionedWatermark:
        """The combination under a new configuration, continuing from this one's global state.

        The global watermark, clock, arrivals and counts carry over, so the watermark never regresses.
        With the same strategy, parameters and mode (``None``: this one's) the generators carry over too;
        otherwise every partition starts a fresh generator of the new strategy that holds its predecessor's
        watermark as a floor (:meth:`~watermark.base.WatermarkGenerator.hold_floor`): no partition's
        watermark goes back, so no window a partition closed opens again (in the scoped mode windows fire
        by their partition's own watermark). ``window`` (``None``: this one's) caps the idle partitions'
        raises. Across a change of mode each new generator holds the
        watermark its partition was judged by: its own (``min``, ``scoped``) or the shared one
        (``global``); the shared generator of a new ``global`` mode holds the global watermark.
        """
        mode = self.mode if mode is None else mode
        window = self.window if window is None else window
        new = PartitionedWatermark(
            strategy, params, idle_timeout_ms=idle_timeout_ms, mode=mode, window=window
        )
        same = (
            strategy == self.strategy
            and mode == self.mode
            and new.spec.build().params == self.spec.build().params
        )
        if same and self._shared is not None:
            new._shared = self._shared
        if same:
            new._gens = dict(self._gens)
            new._shared_state = self._shared_state
        elif new._shared is not None:
            new._shared.hold_floor(self._wm)
            new._gens = dict.fromkeys(self._gens, new._shared)
        else:
            new._gens = {
                key: new.spec.build().hold_floor(gen.watermark_ms) for key, gen in self._gens.items()
            }
            for key, gen in new._gens.items():
                new._join(key, gen)
        new._last_tp = dict(self._last_tp)
        if new._learning is not None and self._learning is not None:  # the partitions' cadence carries over
            new._gap_hist, new._learned = dict(self._gap_hist), dict(self._learned)
        new._evicted_floor, new._key_floors = self._evicted_floor, dict(self._key_floors)
        new._wm, new._wm_at_arrival, new._clock = self._wm, self._wm_at_arrival, self._clock
        new._n_seen, new._n_late = self._n_seen, self._n_late
        new._holdback = self._holdback
        return new

    def mismatch(
        self,
        strategy: str,
        params: Mapping[str, Any] | None = None,
        *,
        idle_timeout_ms: int | str | None = None,
        mode: str = "min",
    ) -> str:
        """What differs between this combination and a configuration ('' when nothing does).

        Compares the strategy, its parameters (as the strategy normalises them), the idleness timeout, the
        mode, and every partition's generator (its class and parameters).
        """
        try:
            want = make(strategy, params)
        except ValueError as exc:
            return f"the configuration's strategy is invalid ({exc})"
        if self.strategy != want.name:
            return f"strategy {self.strategy!r}, the configuration has {want.name!r}"
        if self.spec.build().params != want.params:
            return f"parameters {dict(self.params)}, the configuration has {dict(want.params)}"
        if self.idle_timeout_ms != idle_timeout_ms:
            return f"idle_timeout_ms {self.idle_timeout_ms}, the configuration has {idle_timeout_ms}"
        if self.mode != mode:
            return f"partition mode {self.mode!r}, the configuration has {mode!r}"
        for key, gen in self._gens.items():
            if type(gen) is not type(want) or gen.params != want.params:
                return f"partition {key!r} runs {gen.name} {dict(gen.params)}, not {want.name}"
        return ""

    # -- checkpoints -----------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """JSON-serialisable state; :meth:`from_snapshot` continues from it identically."""
        return {
            "kind": "partitioned",
            "version": 1,
            "strategy": self.strategy,
            "params": self.params,
            "idle_timeout_ms": self.idle_timeout_ms,
            "wm": self._wm,
            "wm_at_arrival": self._wm_at_arrival,
            "clock": self._clock,
            "holdback": self._holdback,
            "n_seen": self._n_seen,
            "n_late": self._n_late,
            "partitions": [
                [p, self._last_tp.get(p), None if self._shared is not None else g.snapshot()]
                for p, g in self._gens.items()
            ],
            "mode": self.mode,
            "shared": None if self._shared is None else self._shared.snapshot(),
            "evicted_floor": self._evicted_floor,
            "key_floors": [[key, owner, floor] for key, (owner, floor) in sorted(self._key_floors.items())],
            "shared_state": None if self._shared_state is None else self._shared_state.snapshot(),
            "idle_gaps": [[p, sparse(hist)] for p, hist in self._gap_hist.items()],
            "idle_learning": None if self._learning is None else dataclasses.asdict(self._learning),
            "window": None if self.window is None else [self.window.window_ms, self.window.slide_ms],
        }

    @classmethod
    def from_snapshot(cls, snap: Mapping[str, Any]) -> PartitionedWatermark:
        """Rebuild from :meth:`snapshot`."""
        if snap.get("kind") != "partitioned" or snap.get("version") != 1:
            msg = "not a version-1 partitioned watermark snapshot"
            raise ValueError(msg)
        mode = snap.get("mode", "min")
        idle = snap["idle_timeout_ms"]
        if idle == AUTO and snap.get("idle_learning") is not None:
            idle = IdleLearning(**snap["idle_learning"])
        window = snap.get("window")  # absent from snapshots written before idleness was capped
        spec = None if window is None else WindowSpec(int(window[0]), window[1])
        obj = cls(snap["strategy"], snap["params"], idle_timeout_ms=idle, mode=mode, window=spec)
        if snap.get("shared") is not None:
            obj._shared = restore(snap["shared"])
            if type(obj._shared) is not type(obj._generator_template()):
                msg = f"the shared generator is {obj._shared.name}, the snapshot's strategy {obj.strategy}"
                raise ValueError(msg)
        obj._wm = int(snap["wm"])
        obj._wm_at_arrival = int(snap["wm_at_arrival"])
        obj._clock = None if snap["clock"] is None else int(snap["clock"])
        obj._holdback = snap["holdback"]
        obj._n_seen = int(snap["n_seen"])
        obj._n_late = int(snap["n_late"])
        expected = obj._generator_template()
        for key, last, gen_snap in snap["partitions"]:
            gen = obj._shared or restore(gen_snap)
            if type(gen) is not type(expected) or gen.params != expected.params:
                msg = (
                    f"partition {key!r}'s generator is {gen.name} {dict(gen.params)}, but the snapshot's "
                    f"strategy is {expected.name} {dict(expected.params)}"
                )
                raise ValueError(msg)
            obj._gens[plain_key(key)] = gen
            if last is not None:
                obj._last_tp[plain_key(key)] = int(last)
        obj._evicted_floor = int(snap.get("evicted_floor", NO_WATERMARK))
        if obj._shared_state is not None:
            if snap.get("shared_state") is None:
                msg = f"the snapshot lacks the state {obj.strategy}'s partitions share"
                raise ValueError(msg)
            obj._shared_state.load(snap["shared_state"])
            for key, gen in obj._gens.items():
                obj._join(key, gen)
        for key, owner, floor in snap.get("key_floors", ()):
            obj._key_floors[str(key)] = (plain_key(owner), int(floor))
        if obj._learning is not None:  # (absent from snapshots before learned timeouts: nothing learned)
            for key, pairs in snap.get("idle_gaps", ()):
                hist = dense(pairs)
                obj._gap_hist[plain_key(key)] = hist
                obj._learned[plain_key(key)] = obj._learning.timeout_ms(hist)
        return obj
