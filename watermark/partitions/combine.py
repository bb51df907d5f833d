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
import heapq
import itertools
import operator
import os
from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Self, cast

import numpy as np
from numpy.typing import ArrayLike, NDArray

from watermark.base import I64, Trace, WatermarkGenerator, WatermarkReadout, check_int
from watermark.partitions.idle import BUCKETS, IdleLearning, dense, sparse
from watermark.strategies.registry import make, restore, strategy_class
from watermark.timeline import NO_RISE, Component, Timeline
from watermark.timeutil import INT64_MAX, NO_WATERMARK, as_ms_array, running_max, shift_right
from watermark.windowspec import WindowSpec


def _plain(key: Any) -> Hashable:
    """Partition keys as plain JSON-friendly Python values (numpy scalars unwrapped)."""
    if isinstance(key, np.generic):
        key = key.item()
    if isinstance(key, bool) or not isinstance(key, str | int):
        msg = f"partition keys must be strings or integers, got {key!r}"
        raise ValueError(msg)
    return key


#: Events times partitions from which a batch's generators run on threads (below, a thread costs more).
_THREADED_WORK = 200_000


def _run_generators(
    gens: Mapping[Hashable, WatermarkGenerator],
    te: I64,
    clock: I64,
    indices: Mapping[Hashable, NDArray[np.intp]],
) -> dict[Hashable, tuple[I64, I64, I64, I64 | None]]:
    """Each generator's ``_run_timed`` over the batch (its arrivals ``indices[key]``), on one thread a core.

    The generators are independent, and their batch code runs mostly outside the GIL (numpy's loops, the
    compiled SLO rule), so on a large batch they use the machine's cores side by side. Small batches (and
    one generator) run in this thread: the result is the same.
    """
    workers = min(len(gens), os.cpu_count() or 1)
    if workers < 2 or te.size * len(gens) < _THREADED_WORK:
        return {key: gen._run_timed(te, clock, indices[key]) for key, gen in gens.items()}
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="watermark") as pool:
        futures = {key: pool.submit(gen._run_timed, te, clock, indices[key]) for key, gen in gens.items()}
        return {key: future.result() for key, future in futures.items()}


def factorize(values: ArrayLike) -> tuple[list[Hashable], NDArray[np.intp]]:
    """Codes of ``values`` numbered in order of first appearance, and the distinct values in that order."""
    arr = np.asarray(values)
    if arr.ndim != 1:
        msg = f"partition must be one-dimensional, got shape {arr.shape}"
        raise ValueError(msg)
    if arr.dtype.kind in "iu" and arr.size:
        low, high = int(arr.min()), int(arr.max())
        if high - low < 4096:  # small integer codes (partitions 0..P-1): no sort needed
            offset = (arr - low).astype(np.intp)
            present = np.flatnonzero(np.bincount(offset, minlength=high - low + 1))
            if present.size <= 64:
                firsts = np.array([int(np.argmax(offset == v)) for v in present.tolist()], np.intp)
                ranked = present[np.argsort(firsts, kind="stable")]
                table = np.empty(high - low + 1, np.intp)
                table[ranked] = np.arange(ranked.size)
                return [_plain(int(v) + low) for v in ranked.tolist()], table[offset]
    if arr.dtype.kind in "iuU":
        uniq, first, inverse = np.unique(arr, return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        return [_plain(uniq[i]) for i in order], rank[inverse].astype(np.intp)
    if arr.dtype == object and arr.size:
        fast = _factorize_strings(arr)
        if fast is not None:
            return fast
    index: dict[Hashable, int] = {}
    codes = np.fromiter((index.setdefault(_plain(v), len(index)) for v in arr.tolist()), np.intp, arr.size)
    return list(index), codes


def _factorize_strings(arr: NDArray[Any]) -> tuple[list[Hashable], NDArray[np.intp]] | None:
    """:func:`factorize` of an object array of strings, in Arrow's C++ (None if not all are strings)."""
    import pyarrow as pa

    try:
        encoded = pa.array(arr, type=pa.string()).dictionary_encode()
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    if encoded.indices.null_count:
        return None
    # Arrow numbers the dictionary in order of first appearance, as factorize does.
    codes: NDArray[np.intp] = encoded.indices.to_numpy().astype(np.intp)
    return encoded.dictionary.to_pylist(), codes


#: ``offset`` of a step in a component that otherwise ramps (``W(t) = t - offset`` is past any step at once).
_STEP_OFFSET = -(2**62)


def _joined(before: int, parts: list[tuple[Timeline | None, I64, I64]]) -> Timeline:
    """One partition's timeline from its runs (a generator's timeline) and raises (instants, values).

    A raise is a step at its instant. A run's gaps keep their generator's timers: a timer of a partition
    that was idle may date a window before a raise that came after it (its own clock passed it then).
    """
    if len(parts) == 1 and parts[0][0] is not None:
        return parts[0][0]
    ramps = any(tl is not None and tl.parts[0].offset is not None for tl, _, _ in parts)
    tps, pres, posts, rises, offsets = [], [], [], [], []
    for tl, at, value in parts:
        if tl is None:
            tps.append(at)
            pres.append(value)
            posts.append(value)
            rises.append(np.full(at.size, NO_RISE, np.int64))
            offsets.append(np.zeros(at.size, np.int64))
            continue
        comp = tl.parts[0]
        tps.append(tl.tp)
        pres.append(tl.pre)
        posts.append(tl.post)
        rises.append(comp.rise)
        step = np.full(tl.tp.size, _STEP_OFFSET, np.int64)
        offsets.append(comp.offset if comp.offset is not None else step)
    tp_all, pre_all, post_all = np.concatenate(tps), np.concatenate(pres), np.concatenate(posts)
    offset = np.concatenate(offsets) if ramps else None
    part = Component(before, pre_all, post_all, np.concatenate(rises), offset)
    return Timeline(tp_all, pre_all, post_all, before, (part,))


#: ``idle_timeout_ms`` of a timeout learned per partition from its own gaps
#: (:mod:`watermark.partitions.idle`).
AUTO = "auto"


def rows_by_code(codes: NDArray[np.intp], count: int) -> list[NDArray[np.intp]]:
    """The row positions of each code ``0 .. count - 1``, each in increasing order (one stable sort).

    With thousands of partitions (keys in the keyed mode) a scan per code would cost rows x partitions.

    >>> [r.tolist() for r in rows_by_code(np.array([1, 0, 1, 2, 0]), 4)]
    [[1, 4], [0, 2], [3], []]
    """
    if count <= 32:  # a scan per code is cheaper than the sort for a few partitions
        return [np.flatnonzero(codes == c) for c in range(count)]
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(count + 1), side="left")
    return [order[bounds[c] : bounds[c + 1]] for c in range(count)]


def unique_pairs(
    a: ArrayLike, b: ArrayLike
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
    """The distinct pairs ``(a[i], b[i])`` in lexicographic order, and how many times each occurs.

    What ``np.unique(np.stack([a, b]), axis=1, return_counts=True)`` gives, through a 1-D sort: each pair
    becomes one integer while the ranges' product fits in int64 (else a lexicographic sort). NumPy's
    unique over an axis sorts byte strings and was the largest cost of a re-tuning's replays (the windows
    of every partition of every candidate).

    >>> [x.tolist() for x in unique_pairs([3, 1, 3, 1, 3], [20, 5, 10, 5, 20])]
    [[1, 3, 3], [5, 10, 20], [2, 1, 2]]
    """
    x = np.asarray(a, np.int64)
    y = np.asarray(b, np.int64)
    if x.size == 0:
        empty = np.empty(0, np.int64)
        return empty, empty.copy(), empty.copy()
    x0, y0 = int(x.min()), int(y.min())
    span = int(y.max()) - y0 + 1
    if (int(x.max()) - x0 + 1) * span < 2**62:
        codes, counts = np.unique((x - x0) * span + (y - y0), return_counts=True)
        return codes // span + x0, codes % span + y0, counts.astype(np.int64)
    order = np.lexsort((y, x))
    sx, sy = x[order], y[order]
    first = np.ones(sx.size, np.bool_)
    first[1:] = (sx[1:] != sx[:-1]) | (sy[1:] != sy[:-1])
    at = np.flatnonzero(first)
    return sx[at], sy[at], np.diff(np.append(at, sx.size)).astype(np.int64)


def one_partition_per_key(keys: ArrayLike, parts: ArrayLike) -> bool:
    """Whether each key code of ``keys`` occurs with a single partition code of ``parts`` (row by row).

    >>> one_partition_per_key([0, 1, 0], [5, 6, 5]), one_partition_per_key([0, 1, 0], [5, 6, 7])
    (True, False)
    """
    pair_keys, _, _ = unique_pairs(keys, parts)
    return bool(np.unique(pair_keys).size == pair_keys.size)


#: How :class:`PartitionedWatermark` makes the global watermark.
COMBINATION_MODES = ("min", "global", "scoped", "keyed")
#: The modes where each partition fires its own windows (``"keyed"``: the caller's partitions are keys).
SCOPED_MODES = ("scoped", "keyed")


class PartitionedWatermark(WatermarkReadout):
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

    def __init__(
        self,
        strategy: str,
        params: Mapping[str, Any] | None = None,
        *,
        idle_timeout_ms: int | str | IdleLearning | None = None,
        mode: str = "min",
        window: WindowSpec | None = None,
    ) -> None:
        make(strategy, params)  # validate now, with the strategy's own messages
        self.strategy = strategy
        self.params = dict(params or {})
        if mode not in COMBINATION_MODES:
            msg = f"mode must be one of {', '.join(COMBINATION_MODES)}, got {mode!r}"
            raise ValueError(msg)
        self.mode = mode
        #: The windows fired by the partitions' watermarks: an idle partition in scoped mode is raised no
        #: higher than the end of the last window holding its largest event time (``None``: no such cap, it
        #: follows the fleet; see *Notes*).
        self.window = window
        #: The configured timeout: milliseconds, ``"auto"`` (learned per partition) or ``None``.
        self.idle_timeout_ms: int | str | None
        #: Learned timeouts (``"auto"``, scoped mode only); else ``None``.
        self._learning: IdleLearning | None = None
        auto = isinstance(idle_timeout_ms, str) and idle_timeout_ms.strip().lower() == AUTO
        #: The fixed timeout (``None``: none, or learned).
        self._timeout: int | None
        if auto or isinstance(idle_timeout_ms, IdleLearning):
            learning = idle_timeout_ms if isinstance(idle_timeout_ms, IdleLearning) else IdleLearning()
            self.idle_timeout_ms = AUTO
            if mode in SCOPED_MODES:
                self._learning, self._timeout = learning, None
            else:  # learning per partition is the scoped mode's: elsewhere the cap, fixed
                self._timeout = learning.cap_ms
        else:
            self.idle_timeout_ms = (
                None if idle_timeout_ms is None else check_int("idle_timeout_ms", idle_timeout_ms, 1)
            )
            self._timeout = self.idle_timeout_ms
        #: Learned timeouts: each partition's gap histogram (:mod:`watermark.partitions.idle`) and the timeout
        #: it gives.
        self._gap_hist: dict[Hashable, list[int]] = {}
        self._learned: dict[Hashable, int] = {}
        #: In ``global`` mode, the one generator every partition feeds.
        self._shared: WatermarkGenerator | None = make(strategy, params) if mode == "global" else None
        #: State the partitions' generators share
        #: (:meth:`~watermark.strategies.fleet.FleetWatermark.shared_state`:
        #: the fleet's lag models and late budget), built once; ``None`` for the other strategies.
        self._shared_state: Any = None
        factory = getattr(strategy_class(strategy), "shared_state", None)
        if factory is not None and mode != "global":
            self._shared_state = factory(make(strategy, params).params)
        self._gens: dict[Hashable, WatermarkGenerator] = {}
        self._last_tp: dict[Hashable, int] = {}
        self._reset_readout()
        self._holdback: Hashable | None = None
        #: Scoped mode: the highest watermark a forgotten partition had (:meth:`evict`).
        self._evicted_floor = NO_WATERMARK
        #: Scoped mode: key -> (its owner partition, the floor its rows are judged against at least).
        self._key_floors: dict[str, tuple[Hashable, int]] = {}

    # -- read-only state (watermark_ms, watermark_at_arrival_ms, clock_ms, n_seen, n_late: inherited)
    @property
    def holdback_partition(self) -> Hashable | None:
        """The active partition whose watermark is the minimum (the one holding the global value back)."""
        return self._holdback

    @property
    def partition_watermarks(self) -> dict[Hashable, int]:
        """Each partition's own watermark."""
        return {p: g.watermark_ms for p, g in self._gens.items()}

    @property
    def generators(self) -> Mapping[Hashable, WatermarkGenerator]:
        """The per-partition generators (read them; do not feed them directly)."""
        return dict(self._gens)

    @property
    def last_arrival_ms(self) -> dict[Hashable, int]:
        """Ingestion time of each partition's latest arrival."""
        return dict(self._last_tp)

    def active_partitions(self, now_ms: int | None = None) -> list[Hashable]:
        """Partitions that arrived within ``idle_timeout_ms`` before ``now_ms`` (default: the clock)."""
        now = self._clock if now_ms is None else int(now_ms)
        if now is None:
            return []
        return [p for p, last in self._last_tp.items() if self._is_active(now, last, p)]

    def _is_active(self, now: int, last: int, key: Hashable = None) -> bool:
        timeout = self._timeout_of(key)
        return timeout is None or now - last < timeout

    def _timeout_of(self, key: Hashable) -> int | None:
        """The idle timeout of partition ``key`` now (fixed, or learned from its gaps so far)."""
        if self._learning is None:
            return self._timeout
        return self._learned.get(key, self._learning.cap_ms)

    @property
    def idle_timeouts_ms(self) -> dict[Hashable, int | None]:
        """Each partition's idle timeout now (learned ones with ``idle_timeout_ms="auto"``)."""
        return {p: self._timeout_of(p) for p in self._gens}

    def _generator(self, key: Hashable) -> WatermarkGenerator:
        gen = self._gens.get(key)
        if gen is None:
            gen = self._gens[key] = self._shared or self.new_generator()
            self._join(key, gen)
        return gen

    def _join(self, key: Hashable, gen: WatermarkGenerator) -> None:
        """Hand the shared state to a partition's generator (strategies that share one, such as fleet)."""
        if self._shared_state is not None:
            cast(Any, gen).join(self._shared_state, key)

    def new_generator(self) -> WatermarkGenerator:
        """The generator a partition new to the combination starts with (scoped: at the eviction floor)."""
        gen = make(self.strategy, self.params)
        if self.mode in SCOPED_MODES and self._evicted_floor != NO_WATERMARK:
            gen.hold_floor(self._evicted_floor)
        return gen

    # -- forgetting partitions -------------------------------------------------------------------------
    @property
    def evicted_floor_ms(self) -> int:
        """Scoped mode: the highest watermark a forgotten partition had (``NO_WATERMARK``: none forgotten).

        Every window of a forgotten partition's keys that may have fired ends at or below it, so a partition
        new to the combination starts with its watermark there, and a key without an owner (new, or one
        whose owner was forgotten) is judged against at least it by the partition that claims it.
        """
        return self._evicted_floor

    @property
    def key_floors(self) -> dict[str, int]:
        """Scoped mode: keys claimed while their owner's watermark was below :attr:`evicted_floor_ms`.

        A row of such a key is judged against at least its floor until its owner's watermark reaches it.
        """
        return {key: floor for key, (_, floor) in self._key_floors.items()}

    def hold_key_floors(self, claims: Iterable[tuple[str, Hashable]]) -> None:
        """Scoped mode: keys claimed in a batch ``(key, partition)`` keep the eviction floor as their floor.

        Called after the batch's arrivals: only the keys whose owner's watermark is still below the floor
        are kept, and every kept floor its owner's watermark has reached since (or whose owner was
        forgotten) is dropped, so the table holds only what still changes a decision.
        """
        floor = self._evicted_floor
        if self.mode not in SCOPED_MODES:
            return
        if floor != NO_WATERMARK:
            by_text = {str(p): p for p in self._gens}
            for key, partition in claims:
                owner = by_text.get(str(partition))
                if owner is not None and self._gens[owner].watermark_ms < floor:
                    self._key_floors[str(key)] = (owner, floor)
        self._key_floors = {
            key: (owner, f)
            for key, (owner, f) in self._key_floors.items()
            if owner in self._gens and self._gens[owner].watermark_ms < f
        }

    def idle_partitions(self, retention_ms: int, keep: Collection[Hashable] = ()) -> list[Hashable]:
        """Partitions :meth:`evict` would forget now (see there), in order of first appearance."""
        clock = self._clock
        if clock is None:
            return []
        kept = {str(k) for k in keep}
        out = []
        for p, last in self._last_tp.items():
            if str(p) in kept or clock - last < retention_ms:
                continue
            if self.mode == "min" and (self._timeout is None or self._is_active(clock, last)):
                continue  # it still counts in the minimum: forgetting it would move the watermark
            out.append(p)
        return out

    def evict(self, retention_ms: int, keep: Collection[Hashable] = ()) -> dict[Hashable, int]:
        """Forget the partitions silent for ``retention_ms`` of the clock; returns their last watermark.

        Partitions in ``keep`` (compared as text) stay: the caller's, say those that own an open window or
        arrived in the batch. In ``min`` mode a partition must also be idle (``idle_timeout_ms``; never
        without one), so forgetting it never changes the global watermark; in ``scoped`` mode partitions
        do not wait for one another, and the eviction floor (:attr:`evicted_floor_ms`) rises to the
        highest watermark forgotten. The decisions for the other partitions do not change.

        >>> pw = PartitionedWatermark("ingestion", {"max_event_time_lag_ms": 0}, mode="scoped")
        >>> _ = pw.process(["a", "b", "b"], [100, 5_000, 9_000], [100, 5_000, 9_000])
        >>> pw.evict(5_000), pw.evicted_floor_ms
        ({'a': 99}, 99)
        >>> pw.process(["a"], [50], [9_100]).tolist()  # a comes back: its old rows are late
        [99]
        """
        gone = self.idle_partitions(check_int("retention_ms", retention_ms, 0), keep)
        if not gone:
            return {}
        out = {}
        for p in gone:
            out[p] = self._gens.pop(p).watermark_ms
            if self._shared_state is not None:
                self._shared_state.forget(p)
            del self._last_tp[p]
            self._gap_hist.pop(p, None)
            self._learned.pop(p, None)
        if self.mode in SCOPED_MODES:
            self._evicted_floor = max(self._evicted_floor, *out.values())
            self.hold_key_floors(())
        if self._holdback in out:  # (scoped mode without idleness: in min mode it is active)
            self._holdback = None
            if self._shared is None and self._clock is not None:
                clock = self._clock
                self._settle([p for p, last in self._last_tp.items() if self._is_active(clock, last, p)])
        return out

    # -- global mode: one generator for the stream, partitions only tracked ------------------------------
    def _update_global(self, shared: WatermarkGenerator, key: Hashable, te: int, now: int) -> None:
        self._generator(key)
        shared.update(te, now)
        # The global value holds what it reached before (a reconfiguration starts a fresh generator).
        self._wm_at_arrival = max(self._wm, shared.watermark_at_arrival_ms)
        self._wm = max(self._wm, shared.watermark_ms)
        self._n_seen += 1
        self._n_late += te < self._wm_at_arrival
        self._last_tp[key] = now

    def _trace_global(self, shared: WatermarkGenerator, keys: list[Hashable], codes: NDArray[np.intp],
                      te: I64, clock: I64) -> Trace:  # fmt: skip
        before = self._wm
        trace = shared.process_trace(te, clock)
        assert trace.timeline is not None
        pre = np.maximum(trace.at_arrival, before)  # the global value holds what it reached before
        post = np.maximum(trace.after_arrival, before)
        for key, rows in zip(keys, rows_by_code(codes, len(keys)), strict=True):
            self._generator(key)
            self._last_tp[key] = int(clock[rows[-1]])
        self._wm = int(post[-1])
        self._wm_at_arrival = int(pre[-1])
        self._clock = int(clock[-1])
        self._n_seen += te.size
        self._n_late += int(np.count_nonzero(te < pre))
        self._holdback = None
        return Trace(pre, post, Timeline(clock, pre, post, before, trace.timeline.parts))

    # -- scoped mode: each partition on its own --------------------------------------------------------
    def _update_scoped(self, key: Hashable, te: int, tp: int) -> Self:
        if self._idle_scoped():
            return self._update_scoped_idle(key, te, tp)
        gen = self._generator(key).update(te, tp)  # the generator keeps its own clock
        assert gen.clock_ms is not None
        self._clock = max(tp, self._clock if self._clock is not None else tp)
        self._last_tp[key] = gen.clock_ms
        self._wm_at_arrival = gen.watermark_at_arrival_ms
        self._n_seen += 1
        self._n_late += te < self._wm_at_arrival
        self._settle_scoped()
        return self

    def _trace_scoped(
        self, keys: list[Hashable], codes: NDArray[np.intp], te: I64, tp: I64, clock: I64
    ) -> Trace:
        """Each partition's generator over its own arrivals; per tuple, its own partition's watermark."""
        pre = np.empty(te.size, np.int64)
        post = np.empty(te.size, np.int64)
        timelines: dict[Hashable, Timeline] = {}
        for key, rows in zip(keys, rows_by_code(codes, len(keys)), strict=True):
            gen = self._generator(key)
            trace = gen.process_trace(te[rows], tp[rows])  # on the partition's own clock
            pre[rows], post[rows] = trace.at_arrival, trace.after_arrival
            if trace.timeline is not None:
                timelines[key] = trace.timeline
            assert gen.clock_ms is not None
            self._last_tp[key] = gen.clock_ms
        self._clock = int(clock[-1])
        self._wm_at_arrival = int(pre[-1])
        self._n_seen += te.size
        self._n_late += int(np.count_nonzero(te < pre))
        self._settle_scoped()
        return Trace(pre, post, None, timelines)

    # -- scoped mode with idleness: a silent partition follows the fleet ----------------------------------
    def _idle_scoped(self) -> bool:
        return self.mode in SCOPED_MODES and (self._timeout is not None or self._learning is not None)

    def _fleet(self, now: int) -> tuple[int | None, list[Hashable]]:
        """The fleet watermark at ``now`` (minimum over active partitions; None: none) and the idle ones."""
        low: int | None = None
        idle = []
        for p, gen in self._gens.items():
            last = self._last_tp.get(p)
            if last is None:
                continue
            if self._is_active(now, last, p):
                w = gen.watermark_ms
                low = w if low is None else min(low, w)
            else:
                idle.append(p)
        return low, idle

    def _idle_cap(self, key: Hashable) -> int | None:
        """How high idleness may raise ``key``: the end of its last window (``None``: no cap)."""
        if self.window is None:
            return None
        top = self._gens[key].max_event_time_ms
        if top is None:
            return None
        return int(self.window.start_range(top, operator.mod)[1]) + self.window.window_ms

    def _scoped_raise_idle(self, now: int) -> None:
        """Raise every idle partition to the fleet's watermark at ``now``, at most to its cap; never lower."""
        low, idle = self._fleet(now)
        if low is not None:
            for p in idle:
                cap = self._idle_cap(p)
                self._gens[p].hold_floor(low if cap is None else min(low, cap))

    def _scoped_drop_until(self, now: int) -> None:
        """Time runs from the clock to ``now``: at each instant a partition falls idle, raise the idle."""
        clock = self._clock
        if clock is None:
            return
        instants = set()
        for p, last in self._last_tp.items():
            timeout = self._timeout_of(p)
            if timeout is not None and clock < last + timeout <= now:
                instants.add(last + timeout)
        for instant in sorted(instants):
            self._scoped_raise_idle(instant)

    def _learn_gaps(self, key: Hashable, gaps: I64) -> NDArray[np.int64]:
        """Learned timeouts: take in ``key``'s gaps; the timeout in force after each of them."""
        learning = self._learning
        assert learning is not None
        if not gaps.size:
            return np.empty(0, np.int64)
        out, hist = learning.timeouts(self._gap_hist.get(key) or [0] * BUCKETS, gaps)
        if gaps.size:
            self._gap_hist[key] = hist
            self._learned[key] = int(out[-1])
        return out

    def _update_scoped_idle(self, key: Hashable, te: int, tp: int) -> Self:
        now = tp if self._clock is None else max(tp, self._clock)
        self._scoped_drop_until(now)
        gen = self._generator(key).update(te, tp)  # judged by its own watermark (raised while idle)
        last = self._last_tp.get(key)
        if last is not None and self._learning is not None:
            self._learn_gaps(key, np.array([now - last], np.int64))
        self._last_tp[key] = now
        self._clock = now
        self._wm_at_arrival = gen.watermark_at_arrival_ms
        self._n_seen += 1
        self._n_late += te < self._wm_at_arrival
        self._scoped_raise_idle(now)
        self._settle_scoped()
        return self

    def _trace_scoped_idle(
        self, keys: list[Hashable], codes: NDArray[np.intp], te: I64, tp: I64, clock: I64
    ) -> Trace:
        """:meth:`_trace_scoped` with idleness: what :meth:`_update_scoped_idle` does arrival by arrival.

        Each partition's arrivals split into *segments* where it returns after being idle; a segment runs
        vectorised once the raises before it are known. Events in time order: a partition falling idle
        (before the first arrival at or after that instant) and a segment's start; between events the
        fleet's watermark after each arrival is the minimum of the active partitions' watermarks (forward
        filled), and the idle partitions follow its running maximum. Each raise is a step in the raised
        partition's timeline, at its instant.
        """
        n = te.size
        start_clock = self._clock
        pre = np.empty(n, np.int64)
        post = np.empty(n, np.int64)
        for key in keys:
            self._generator(key)
        rows_of = dict(zip(keys, rows_by_code(codes, len(keys)), strict=True))
        before_wm = {p: g.watermark_ms for p, g in self._gens.items()}
        none_idx = np.empty(0, np.intp)
        active: dict[Hashable, None] = {}  # ordered sets: the same order in every run
        # The idle partitions below their cap: only they can still be raised (one at its cap stays there
        # until it returns), so a raise costs the partitions it moves, not every idle one.
        unsat: dict[Hashable, None] = {}
        below: list[tuple[int, int, Hashable]] = []  # unsat by watermark (stale entries skipped)
        tick = itertools.count()

        def unsaturated(p: Hashable) -> None:
            unsat[p] = None
            heapq.heappush(below, (self._gens[p].watermark_ms, next(tick), p))

        drops: dict[int, list[Hashable]] = {}  # instant -> partitions falling idle then
        starts: list[tuple[int, Hashable, NDArray[np.intp]]] = []  # (first arrival, partition, segment rows)
        first_runs: list[tuple[Hashable, NDArray[np.intp]]] = []
        for key in self._gens:
            r = rows_of.get(key, none_idx)
            last0 = self._last_tp.get(key)
            t0 = self._timeout_of(key)
            assert t0 is not None
            a = clock[r]
            if r.size == 0 and last0 is None:
                continue
            if last0 is None:
                state0 = "new"
            elif start_clock is not None and start_clock - last0 >= t0:
                state0 = "idle"
                unsaturated(key)
            else:
                state0 = "active"
                active[key] = None
            # The timeout in force in the gap before each arrival, and after the last.
            if self._learning is None:
                t_before = np.full(r.size, t0, np.int64)
                t_end = t0
            elif r.size:
                gaps = np.diff(a, prepend=last0) if last0 is not None else np.diff(a)
                after = self._learn_gaps(key, gaps)
                lead = [t0] if last0 is not None else [t0, t0]
                t_all = np.concatenate([np.array(lead, np.int64), after])
                t_before, t_end = t_all[: r.size], int(t_all[-1])
            else:
                t_before, t_end = np.empty(0, np.int64), t0
            prev = np.empty(r.size, np.int64)
            if r.size:
                prev[1:] = a[:-1]
                prev[0] = a[0] if last0 is None else last0
            returns = a - prev >= t_before
            if r.size and last0 is None:
                returns[0] = False
            cut = np.flatnonzero(returns).tolist()
            for i in cut:
                if not (i == 0 and state0 == "idle"):
                    drops.setdefault(int(prev[i] + t_before[i]), []).append(key)
            bounds = [*cut, r.size]
            if r.size and state0 == "new":
                bounds = [0, *bounds]
            if r.size and bounds[0] > 0:
                first_runs.append((key, r[: bounds[0]]))
            for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
                starts.append((int(r[lo]), key, r[lo:hi]))
            if state0 != "idle" or r.size:
                last_t = int(a[-1]) if r.size else int(last0 if last0 is not None else 0)
                if last_t + t_end <= int(clock[-1]):
                    drops.setdefault(last_t + t_end, []).append(key)
        # Events: (first arrival at or after the instant, 0 for a drop / 1 for a start, instant, ...).
        events: list[tuple[int, int, int, int]] = []
        for instant in drops:
            events.append((int(np.searchsorted(clock, instant, side="left")), 0, instant, -1))
        for s, (first, _key, _rows) in enumerate(starts):
            events.append((first, 1, int(clock[first]), s))
        events.sort()
        seen_idx: dict[Hashable, list[NDArray[np.intp]]] = {}
        seen_post: dict[Hashable, list[I64]] = {}
        flat: dict[Hashable, tuple[NDArray[np.intp], I64]] = {}
        chunks: dict[Hashable, list[tuple[Timeline | None, I64, I64]]] = {}

        def run(key: Hashable, seg: NDArray[np.intp]) -> None:
            caps.pop(key, None)
            trace = self._gens[key].process_trace(te[seg], tp[seg])  # on the partition's own clock
            pre[seg], post[seg] = trace.at_arrival, trace.after_arrival
            seen_idx.setdefault(key, []).append(seg)
            seen_post.setdefault(key, []).append(trace.after_arrival)
            flat.pop(key, None)
            chunks.setdefault(key, []).append((trace.timeline, none_idx, none_idx))

        def values(key: Hashable, at: NDArray[np.intp]) -> I64:
            """``key``'s watermark right after each arrival position ``at`` (-1: before the batch)."""
            if key not in flat:
                if key in seen_idx:
                    flat[key] = (np.concatenate(seen_idx[key]), np.concatenate(seen_post[key]))
                else:
                    flat[key] = (none_idx, np.empty(0, np.int64))
            idx, posts = flat[key]
            k = np.searchsorted(idx, at, side="right") - 1
            return np.where(k >= 0, posts[np.maximum(k, 0)] if posts.size else 0, before_wm[key])

        caps: dict[Hashable, int | None] = {}  # an idle partition's cap (its windows change only as it runs)

        def cap_of(p: Hashable) -> int | None:
            if p not in caps:
                caps[p] = self._idle_cap(p)
            return caps[p]

        def raise_idle(at_t: I64, fleet: I64) -> None:
            """Idle partitions follow the running maximum of ``fleet`` (the fleet after each instant)."""
            running = np.maximum.accumulate(fleet)
            high = int(running[-1])
            while below and below[0][0] < high:  # the others have no step below ``high`` to take
                w, _, p = heapq.heappop(below)
                gen = self._gens[p]
                if p not in unsat or gen.watermark_ms != w:
                    continue  # returned, or raised since: a stale entry
                cap = cap_of(p)
                if cap is not None and w >= cap:
                    del unsat[p]
                    continue
                top = running if cap is None else np.minimum(running, cap)  # its last value is above w
                grows = np.ones(top.size, np.bool_)
                grows[1:] = top[1:] > top[:-1]
                steps = grows & (top > w)
                chunks.setdefault(p, []).append((None, at_t[steps], top[steps]))
                gen.hold_floor(int(top[-1]))
                if cap is None or gen.watermark_ms < cap:
                    heapq.heappush(below, (gen.watermark_ms, next(tick), p))  # at ``high``: not again now
                else:
                    del unsat[p]

        cur = 0
        # Each active partition's watermark right after position ``cur - 1``, kept arrival by arrival over
        # short stretches (a sparse fleet: many events, few arrivals between them), where a vectorised pass
        # per active partition costs more than the arrivals; ``None``: to be read again (``values``).
        cur_v: dict[Hashable, int] | None = None
        heap: list[tuple[int, int, Hashable]] = []  # (watermark, tie-break, partition); stale entries skipped
        short, many = 32, 64  # ... and over any stretch with many active partitions (keys, keyed mode)

        def fresh() -> dict[Hashable, int]:
            nonlocal cur_v, heap
            if cur_v is None:
                before = np.array([cur - 1], np.intp)
                cur_v = {q: int(values(q, before)[0]) for q in active}
                heap = [(w, next(tick), q) for q, w in cur_v.items()]
                heapq.heapify(heap)
            return cur_v

        def put(v: dict[Hashable, int], q: Hashable, w: int) -> None:
            v[q] = w
            heapq.heappush(heap, (w, next(tick), q))

        def lowest(v: dict[Hashable, int]) -> int:
            """The minimum of ``v`` (the fleet's watermark): the heap's top once stale entries are gone."""
            while heap and v.get(heap[0][2]) != heap[0][0]:
                heapq.heappop(heap)
            return heap[0][0] if heap else 0

        def stretch(upto: int) -> None:
            nonlocal cur, cur_v
            if cur >= upto:
                return
            if upto - cur <= short or len(active) > many:
                v = fresh()
                fleet: list[int] = []
                for i in range(cur, upto):
                    k = keys[codes[i]]
                    if k in v and v[k] != post[i]:
                        put(v, k, int(post[i]))
                    fleet.append(lowest(v))
                if unsat and active:
                    raise_idle(clock[cur:upto], np.array(fleet, np.int64))
            else:
                if unsat and active:
                    at = np.arange(cur, upto, dtype=np.intp)
                    raise_idle(clock[at], np.minimum.reduce([values(q, at) for q in active]))
                cur_v = None
            cur = upto

        for key, seg in first_runs:
            run(key, seg)
        for pos, kind, instant, s in events:
            stretch(pos)
            if kind == 0:
                for key in drops[instant]:
                    active.pop(key, None)
                    if cur_v is not None:
                        cur_v.pop(key, None)
                    unsaturated(key)
                if active:
                    low = lowest(fresh())
                    raise_idle(np.array([instant], np.int64), np.array([low], np.int64))
            else:
                _, key, seg = starts[s]
                unsat.pop(key, None)
                run(key, seg)
                active[key] = None
                if cur_v is not None:  # its value from ``pos`` on: it arrives there (``stretch`` reads on)
                    put(cur_v, key, int(post[seg[0]]))
        stretch(n)
        for key, r in rows_of.items():
            if r.size:
                self._last_tp[key] = int(clock[r[-1]])
        self._clock = int(clock[-1])
        self._wm_at_arrival = int(pre[-1])
        self._n_seen += n
        self._n_late += int(np.count_nonzero(te < pre))
        self._settle_scoped()
        timelines = {key: _joined(before_wm[key], parts) for key, parts in chunks.items()}
        return Trace(pre, post, None, timelines)

    def absorb_partitions(
        self,
        partitions: Sequence[tuple[Hashable, Mapping[str, Any], int | None, int, int]],
        wm_at_last_arrival: int,
        clock_ms: int,
    ) -> Self:
        """Take over a batch that ran partition by partition elsewhere (scoped mode only).

        ``partitions`` holds, in order of each partition's first arrival in the batch, ``(partition,
        generator snapshot after the batch, the generator's clock, arrivals, arrivals below the
        generator's watermark)``: what :meth:`process_trace` computes when each partition's generator runs
        in the executor that reads the partition (:mod:`jobs.stream.workers.executor_stage`). The state
        afterwards is the one :meth:`process_trace` leaves over the same arrivals, except for idleness: the
        partitions ran apart, so none was raised while idle within the batch (:meth:`advance_to` raises the
        idle ones at the batch boundary), and a partition's last arrival is taken at the later of its own
        clock and the clock before the batch.
        """
        if self.mode not in SCOPED_MODES:
            msg = f"only a partition-scoped watermark runs its partitions apart (mode is {self.mode!r})"
            raise ValueError(msg)
        if self._shared_state is not None:
            msg = f"{self.strategy}'s partitions share state: they cannot run apart (stage on the driver)"
            raise ValueError(msg)
        seen = below = 0
        before = self._clock if self._idle_scoped() else None  # idleness: activity on the shared clock
        for key, snap, clock, rows, under in partitions:
            plain = _plain(key)
            self._gens[plain] = restore(snap)
            if clock is not None:
                self._last_tp[plain] = int(clock) if before is None else max(before, int(clock))
            seen += int(rows)
            below += int(under)
        if not seen:
            return self
        self._clock = int(clock_ms) if self._clock is None else max(self._clock, int(clock_ms))
        self._wm_at_arrival = int(wm_at_last_arrival)
        self._n_seen += seen
        self._n_late += below
        self._settle_scoped()
        return self

    def raise_idle(self) -> int | None:
        """Scoped mode with idleness: raise the partitions idle at the clock to the fleet's watermark now.

        What :meth:`absorb_partitions` cannot do within a batch whose partitions ran apart: the idle ones
        follow the fleet from the batch's clock on. Returns that instant (None: nothing to raise, no
        idleness or no clock). After :meth:`process_trace` it changes nothing.
        """
        if not self._idle_scoped() or self._clock is None:
            return None
        self._scoped_raise_idle(self._clock)
        self._settle_scoped()
        return self._clock

    # -- scalar path -----------------------------------------------------------------------------------
    def update(self, partition: Hashable, te_ms: int, tp_ms: int) -> Self:
        """One arrival from ``partition`` (reference path; :meth:`process` is the fast equivalent)."""
        key = _plain(partition)
        te, now = int(te_ms), int(tp_ms)
        if self.mode in SCOPED_MODES:
            return self._update_scoped(key, te, now)
        if self._clock is not None and now < self._clock:
            now = self._clock
        if self._shared is not None:
            self._clock = now
            self._update_global(self._shared, key, te, now)
            return self
        self._last_count(now)
        self._clock = now
        for p, g in self._gens.items():
            if p != key:
                g.on_idle(now)
        active = [p for p, last in self._last_tp.items() if self._is_active(now, last)]
        gen = self._generator(key)
        gen.update(te, now)
        at_arrival = {
            p: (gen.watermark_at_arrival_ms if p == key else self._gens[p].watermark_ms) for p in active
        }
        if at_arrival:
            self._wm = max(self._wm, min(at_arrival.values()))
        self._wm_at_arrival = self._wm
        self._n_seen += 1
        self._n_late += te < self._wm
        self._last_tp[key] = now
        if key not in active:
            active.append(key)
        self._settle(active)
        return self

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

    def _last_count(self, now: int) -> None:
        """Settle at the last instant before ``now`` at which any partition counted, if they all stop before.

        The global watermark is the running maximum of the minimum over the partitions active at each
        instant; when every active partition falls idle before ``now``, that maximum is reached at the last
        instant one of them still counted, and time must stop there once (as a millisecond timer would).
        """
        timeout, clock = self._timeout, self._clock
        if timeout is None or clock is None:
            return
        ends = [last + timeout for last in self._last_tp.values() if self._is_active(clock, last)]
        if not ends or max(ends) > now or max(ends) - 1 <= clock:
            return
        t_last = max(ends) - 1
        self._clock = t_last
        for g in self._gens.values():
            g.on_idle(t_last)
        self._settle([p for p, last in self._last_tp.items() if self._is_active(t_last, last)])

    def _settle_scoped(self) -> None:
        """Scoped mode: report the minimum over the partitions (with idleness, the active ones)."""
        clock = self._clock
        if self._idle_scoped() and clock is not None:
            self._settle([p for p, last in self._last_tp.items() if self._is_active(clock, last, p)])
        else:
            self._settle(list(self._gens))

    def _settle(self, active: list[Hashable]) -> None:
        members = set(active)
        ordered = [p for p in self._gens if p in members]  # ties go to the oldest partition, as in process()
        if not ordered:
            self._holdback = None
            return
        self._holdback = min(ordered, key=lambda p: self._gens[p].watermark_ms)
        self._wm = max(self._wm, self._gens[self._holdback].watermark_ms)

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
        for key in keys:
            self._generator(key)
        small = codes.astype(np.int16) if len(keys) < 2**15 else codes  # 16-bit keys sort by radix, in O(n)
        order = np.argsort(small, kind="stable")  # arrivals grouped by partition, ascending within each
        bounds = np.concatenate([[0], np.cumsum(np.bincount(codes, minlength=len(keys)))])
        code_of = {k: c for c, k in enumerate(keys)}
        none_idx = np.empty(0, np.intp)
        min_pre = np.full(n, INT64_MAX, np.int64)
        min_post = np.full(n, INT64_MAX, np.int64)
        final: list[tuple[int, Hashable]] = []
        parts: list[Component] = []
        before = self._wm
        indices = {}
        for key in self._gens:
            c = code_of.get(key)
            indices[key] = none_idx if c is None else order[bounds[c] : bounds[c + 1]]
        befores = {key: gen.watermark_ms for key, gen in self._gens.items()}
        runs = _run_generators(self._gens, te_a, clock, indices)
        for key, gen in self._gens.items():
            idx = indices[key]
            before_p = befores[key]
            pre_p, post_p, rise_p, offset_p = runs[key]
            gen._finish_batch(te_a, pre_p, idx)
            last0 = self._last_tp.get(key)
            dropout = np.full(n, INT64_MAX, np.int64)
            if self._never_idle_in(idx, clock, last0):
                # Active from the first arrival on (before it, after it for the post-arrival minimum).
                if last0 is not None:
                    pre_from = post_from = 0
                elif idx.size:
                    pre_from, post_from = int(idx[0]) + 1, int(idx[0])
                else:
                    pre_from = post_from = n
                dropout[:pre_from] = NO_WATERMARK
                np.minimum(min_pre[pre_from:], pre_p[pre_from:], out=min_pre[pre_from:])
                np.minimum(min_post[post_from:], post_p[post_from:], out=min_post[post_from:])
                active_end = post_from < n
            else:
                timeout = self._timeout
                assert timeout is not None  # _never_idle_in is always true without a timeout
                start = NO_WATERMARK if last0 is None else last0
                seen = np.full(n, start, np.int64)
                seen[idx] = clock[idx]
                np.maximum.accumulate(seen, out=seen)
                last_before = shift_right(seen, start)
                known = last_before != NO_WATERMARK
                dropout = np.where(known, np.where(known, last_before, 0) + timeout, NO_WATERMARK)
                active = known & (clock - last_before < timeout)
                np.minimum(min_pre, np.where(active, pre_p, INT64_MAX), out=min_pre)
                active[idx] = True
                np.minimum(min_post, np.where(active, post_p, INT64_MAX), out=min_post)
                active_end = bool(active[-1])
            parts.append(Component(before_p, pre_p, post_p, rise_p, offset_p, dropout))
            if idx.size:
                self._last_tp[key] = int(clock[idx[-1]])
            if active_end:
                final.append((int(post_p[-1]), key))
        steps = np.empty(2 * n, np.int64)
        steps[0::2] = np.maximum(
            np.where(min_pre == INT64_MAX, NO_WATERMARK, min_pre), self._last_counts(parts, clock)
        )
        steps[1::2] = np.where(min_post == INT64_MAX, NO_WATERMARK, min_post)
        levels = running_max(steps, self._wm)
        pre, post = levels[0::2].copy(), levels[1::2].copy()
        self._wm = int(post[-1])
        self._wm_at_arrival = int(pre[-1])
        self._clock = int(clock[-1])
        self._n_seen += n
        self._n_late += int(np.count_nonzero(te_a < pre))
        # min() keeps the first of equal values: ties go to the oldest partition, as in update().
        self._holdback = min(final, key=lambda item: item[0])[1] if final else None
        return Trace(pre, post, Timeline(clock, pre, post, before, tuple(parts)))

    def _last_counts(self, parts: list[Component], clock: I64) -> I64:
        """Per event: the minimum at the last instant of the gap before it at which a partition counted.

        Only where every partition counting at the gap's start falls idle within the gap (see
        :meth:`_last_count`); ``NO_WATERMARK`` elsewhere.
        """
        n = clock.size
        out = np.full(n, NO_WATERMARK, np.int64)
        if self._timeout is None or not parts:
            return out
        drop = np.full(n, NO_WATERMARK, np.int64)
        for part in parts:
            assert part.dropout is not None
            np.maximum(drop, part.dropout, out=drop)
        prev = shift_right(clock, NO_WATERMARK if self._clock is None else self._clock)
        j = np.flatnonzero((drop != NO_WATERMARK) & (drop <= clock) & (drop - 1 > prev)).astype(np.intp)
        if j.size == 0:
            return out
        t_last = drop[j] - 1
        low = np.full(j.size, INT64_MAX, np.int64)
        for part in parts:
            value = part.value_at(t_last, clock, j)
            np.minimum(low, np.where(part.counts_at(t_last, j), value, INT64_MAX), out=low)
        out[j] = np.where(low == INT64_MAX, NO_WATERMARK, low)
        return out

    def _never_idle_in(self, idx: NDArray[np.intp], clock: I64, last0: int | None) -> bool:
        """True if, once it has arrived, the partition stays active through the whole batch."""
        timeout = self._timeout
        if timeout is None:
            return True
        if idx.size == 0:
            return last0 is None or int(clock[-1]) - last0 < timeout
        times = clock[idx]
        if last0 is not None and int(times[0]) - last0 >= timeout:
            return False
        if int(clock[-1]) - int(times[-1]) >= timeout:
            return False
        return idx.size < 2 or int((times[1:] - times[:-1]).max()) < timeout

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
            and make(strategy, params).params == make(self.strategy, self.params).params
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
                key: make(strategy, params).hold_floor(gen.watermark_ms) for key, gen in self._gens.items()
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
        if make(self.strategy, self.params).params != want.params:
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
    def _generator_template(self) -> WatermarkGenerator:
        """A fresh generator of the combination's strategy and parameters."""
        return make(self.strategy, self.params)

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
            obj._gens[_plain(key)] = gen
            if last is not None:
                obj._last_tp[_plain(key)] = int(last)
        obj._evicted_floor = int(snap.get("evicted_floor", NO_WATERMARK))
        if obj._shared_state is not None:
            if snap.get("shared_state") is None:
                msg = f"the snapshot lacks the state {obj.strategy}'s partitions share"
                raise ValueError(msg)
            obj._shared_state.load(snap["shared_state"])
            for key, gen in obj._gens.items():
                obj._join(key, gen)
        for key, owner, floor in snap.get("key_floors", ()):
            obj._key_floors[str(key)] = (_plain(owner), int(floor))
        if obj._learning is not None:  # (absent from snapshots before learned timeouts: nothing learned)
            for key, pairs in snap.get("idle_gaps", ()):
                hist = dense(pairs)
                obj._gap_hist[_plain(key)] = hist
                obj._learned[_plain(key)] = obj._learning.timeout_ms(hist)
        return obj
