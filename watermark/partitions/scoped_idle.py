"""The ``scoped`` and ``keyed`` modes with idleness: a silent partition follows the fleet.

A partition without an arrival for its idle timeout (fixed, or learned from its gaps:
:mod:`watermark.partitions.idle`), on the combination's ingestion clock, is idle: its watermark is raised to
the minimum over the active partitions' watermarks (at most to the end of its last window), at the instant
it falls idle and after every later arrival while it stays idle (see ``PartitionedWatermark``, *Notes*).
:class:`IdleScopedCombination` holds the arrival-by-arrival path and the raises; :class:`IdleBatch` replays
a batch event by event to the same result.
"""

from __future__ import annotations

import heapq
import itertools
import operator
from collections.abc import Hashable
from typing import Self

import numpy as np
from numpy.typing import NDArray

from watermark.base import I64, Trace
from watermark.partitions.arrays import rows_by_code
from watermark.partitions.idle import BUCKETS
from watermark.partitions.state import CombinationState
from watermark.timeline import NO_RISE, Component, Timeline

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


class IdleScopedCombination(CombinationState):
    """The scoped modes' idleness: the raises, learned timeouts and the paths (mixed into the combination)."""

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
        """``_trace_scoped`` with idleness: what :meth:`_update_scoped_idle` does arrival by arrival.

        The batch is replayed event by event (:class:`IdleBatch`); each raise is a step in the raised
        partition's timeline, at its instant.
        """
        batch = IdleBatch(self, keys, codes, te, tp, clock)
        batch.replay()
        for key, r in batch.rows_of.items():
            if r.size:
                self._last_tp[key] = int(clock[r[-1]])
        self._clock = int(clock[-1])
        self._wm_at_arrival = int(batch.pre[-1])
        self._n_seen += batch.n
        self._n_late += int(np.count_nonzero(te < batch.pre))
        self._settle_scoped()
        return Trace(batch.pre, batch.post, None, batch.timelines())

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


class IdleBatch:
    """One batch of the scoped modes with idleness, replayed event by event (``_trace_scoped_idle``).

    Each partition's arrivals split into *segments* where it returns after being idle; a segment runs
    vectorised once the raises before it are known. Events in time order: a partition falling idle (before
    the first arrival at or after that instant) and a segment's start; between events the fleet's watermark
    after each arrival is the minimum of the active partitions' watermarks (forward filled), and the idle
    partitions follow its running maximum. Each raise is a step in the raised partition's timeline, at its
    instant. The batch changes the combination's generators, last arrivals and learned timeouts as
    :meth:`IdleScopedCombination._update_scoped_idle` does arrival by arrival.
    """

    #: Stretches of at most this many arrivals are walked arrival by arrival (:meth:`stretch`) ...
    SHORT = 32
    #: ... and so is any stretch with more active partitions than this (keys, keyed mode).
    MANY = 64

    def __init__(
        self,
        pw: IdleScopedCombination,
        keys: list[Hashable],
        codes: NDArray[np.intp],
        te: I64,
        tp: I64,
        clock: I64,
    ) -> None:
        self.pw, self.keys, self.codes, self.te, self.tp, self.clock = pw, keys, codes, te, tp, clock
        self.n = te.size
        self.start_clock = pw._clock
        self.pre = np.empty(self.n, np.int64)
        self.post = np.empty(self.n, np.int64)
        for key in keys:
            pw._generator(key)
        self.gens = pw._gens
        self.rows_of = dict(zip(keys, rows_by_code(codes, len(keys)), strict=True))
        self.before_wm = {p: g.watermark_ms for p, g in self.gens.items()}
        self.none_idx = np.empty(0, np.intp)
        self.active: dict[Hashable, None] = {}  # ordered sets: the same order in every run
        # The idle partitions below their cap: only they can still be raised (one at its cap stays there
        # until it returns), so a raise costs the partitions it moves, not every idle one.
        self.unsat: dict[Hashable, None] = {}
        self.below: list[tuple[int, int, Hashable]] = []  # unsat by watermark (stale entries skipped)
        self.tick = itertools.count()
        self.drops: dict[int, list[Hashable]] = {}  # instant -> partitions falling idle then
        self.starts: list[tuple[int, Hashable, NDArray[np.intp]]] = []  # (first arrival, partition, rows)
        self.first_runs: list[tuple[Hashable, NDArray[np.intp]]] = []
        self.seen_idx: dict[Hashable, list[NDArray[np.intp]]] = {}
        self.seen_post: dict[Hashable, list[I64]] = {}
        self.flat: dict[Hashable, tuple[NDArray[np.intp], I64]] = {}
        self.chunks: dict[Hashable, list[tuple[Timeline | None, I64, I64]]] = {}
        self.caps: dict[Hashable, int | None] = {}  # an idle partition's cap (its windows change as it runs)
        self.cur = 0
        # Each active partition's watermark right after position ``cur - 1``, kept arrival by arrival over
        # short stretches (a sparse fleet: many events, few arrivals between them), where a vectorised pass
        # per active partition costs more than the arrivals; ``None``: to be read again (``values``).
        self.cur_v: dict[Hashable, int] | None = None
        self.heap: list[tuple[int, int, Hashable]] = []  # (watermark, tie-break, partition); stale skipped

    def unsaturated(self, p: Hashable) -> None:
        """``p`` is idle below its cap: it may be raised."""
        self.unsat[p] = None
        heapq.heappush(self.below, (self.gens[p].watermark_ms, next(self.tick), p))

    # -- planning: segments and the instants partitions fall idle ---------------------------------------
    def plan(self) -> list[tuple[int, int, int, int]]:
        """Every partition's segments and drops; the events in time order.

        An event is (first arrival at or after the instant, 0 for a drop / 1 for a start, instant, start).
        """
        for key in self.gens:
            self._plan_partition(key)
        events: list[tuple[int, int, int, int]] = []
        for instant in self.drops:
            events.append((int(np.searchsorted(self.clock, instant, side="left")), 0, instant, -1))
        for s, (first, _key, _rows) in enumerate(self.starts):
            events.append((first, 1, int(self.clock[first]), s))
        events.sort()
        return events

    def _plan_partition(self, key: Hashable) -> None:
        """``key``'s state before the batch, its segments and the instants it falls idle in the batch."""
        pw, clock = self.pw, self.clock
        r = self.rows_of.get(key, self.none_idx)
        last0 = pw._last_tp.get(key)
        t0 = pw._timeout_of(key)
        assert t0 is not None
        a = clock[r]
        if r.size == 0 and last0 is None:
            return
        if last0 is None:
            state0 = "new"
        elif self.start_clock is not None and self.start_clock - last0 >= t0:
            state0 = "idle"
            self.unsaturated(key)
        else:
            state0 = "active"
            self.active[key] = None
        t_before, t_end = self._timeouts(key, r, a, last0, t0)
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
                self.drops.setdefault(int(prev[i] + t_before[i]), []).append(key)
        bounds = [*cut, r.size]
        if r.size and state0 == "new":
            bounds = [0, *bounds]
        if r.size and bounds[0] > 0:
            self.first_runs.append((key, r[: bounds[0]]))
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
            self.starts.append((int(r[lo]), key, r[lo:hi]))
        if state0 != "idle" or r.size:
            last_t = int(a[-1]) if r.size else int(last0 if last0 is not None else 0)
            if last_t + t_end <= int(clock[-1]):
                self.drops.setdefault(last_t + t_end, []).append(key)

    def _timeouts(
        self, key: Hashable, r: NDArray[np.intp], a: I64, last0: int | None, t0: int
    ) -> tuple[I64, int]:
        """The timeout in force in the gap before each of ``key``'s arrivals, and after the last."""
        if self.pw._learning is None:
            return np.full(r.size, t0, np.int64), t0
        if r.size:
            gaps = np.diff(a, prepend=last0) if last0 is not None else np.diff(a)
            after = self.pw._learn_gaps(key, gaps)
            lead = [t0] if last0 is not None else [t0, t0]
            t_all = np.concatenate([np.array(lead, np.int64), after])
            return t_all[: r.size], int(t_all[-1])
        return np.empty(0, np.int64), t0

    # -- the partitions' watermarks ---------------------------------------------------------------------
    def run(self, key: Hashable, seg: NDArray[np.intp]) -> None:
        """Run ``key``'s generator over the segment ``seg`` (its rows)."""
        self.caps.pop(key, None)
        trace = self.gens[key].process_trace(self.te[seg], self.tp[seg])  # on the partition's own clock
        self.pre[seg], self.post[seg] = trace.at_arrival, trace.after_arrival
        self.seen_idx.setdefault(key, []).append(seg)
        self.seen_post.setdefault(key, []).append(trace.after_arrival)
        self.flat.pop(key, None)
        self.chunks.setdefault(key, []).append((trace.timeline, self.none_idx, self.none_idx))

    def values(self, key: Hashable, at: NDArray[np.intp]) -> I64:
        """``key``'s watermark right after each arrival position ``at`` (-1: before the batch)."""
        flat = self.flat
        if key not in flat:
            if key in self.seen_idx:
                flat[key] = (np.concatenate(self.seen_idx[key]), np.concatenate(self.seen_post[key]))
            else:
                flat[key] = (self.none_idx, np.empty(0, np.int64))
        idx, posts = flat[key]
        k = np.searchsorted(idx, at, side="right") - 1
        return np.where(k >= 0, posts[np.maximum(k, 0)] if posts.size else 0, self.before_wm[key])

    def cap_of(self, p: Hashable) -> int | None:
        """How high idleness may raise ``p`` (kept until it runs again)."""
        if p not in self.caps:
            self.caps[p] = self.pw._idle_cap(p)
        return self.caps[p]

    def raise_idle(self, at_t: I64, fleet: I64) -> None:
        """Idle partitions follow the running maximum of ``fleet`` (the fleet after each instant)."""
        below, unsat, tick = self.below, self.unsat, self.tick
        running = np.maximum.accumulate(fleet)
        high = int(running[-1])
        while below and below[0][0] < high:  # the others have no step below ``high`` to take
            w, _, p = heapq.heappop(below)
            gen = self.gens[p]
            if p not in unsat or gen.watermark_ms != w:
                continue  # returned, or raised since: a stale entry
            cap = self.cap_of(p)
            if cap is not None and w >= cap:
                del unsat[p]
                continue
            top = running if cap is None else np.minimum(running, cap)  # its last value is above w
            grows = np.ones(top.size, np.bool_)
            grows[1:] = top[1:] > top[:-1]
            steps = grows & (top > w)
            self.chunks.setdefault(p, []).append((None, at_t[steps], top[steps]))
            gen.hold_floor(int(top[-1]))
            if cap is None or gen.watermark_ms < cap:
                heapq.heappush(below, (gen.watermark_ms, next(tick), p))  # at ``high``: not again now
            else:
                del unsat[p]

    # -- the fleet's watermark between events -----------------------------------------------------------
    def fresh(self) -> dict[Hashable, int]:
        """The active partitions' watermarks right after ``cur - 1`` (read again if not kept)."""
        if self.cur_v is None:
            before = np.array([self.cur - 1], np.intp)
            self.cur_v = {q: int(self.values(q, before)[0]) for q in self.active}
            self.heap = [(w, next(self.tick), q) for q, w in self.cur_v.items()]
            heapq.heapify(self.heap)
        return self.cur_v

    def put(self, v: dict[Hashable, int], q: Hashable, w: int) -> None:
        """``q``'s watermark in ``v`` is now ``w``."""
        v[q] = w
        heapq.heappush(self.heap, (w, next(self.tick), q))

    def lowest(self, v: dict[Hashable, int]) -> int:
        """The minimum of ``v`` (the fleet's watermark): the heap's top once stale entries are gone."""
        heap = self.heap
        while heap and v.get(heap[0][2]) != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][0] if heap else 0

    def stretch(self, upto: int) -> None:
        """The arrivals ``cur .. upto - 1`` (no event among them): the idle partitions follow the fleet."""
        cur = self.cur
        if cur >= upto:
            return
        active, clock = self.active, self.clock
        if upto - cur <= self.SHORT or len(active) > self.MANY:
            v = self.fresh()
            keys, codes, post, put, lowest = self.keys, self.codes, self.post, self.put, self.lowest
            fleet: list[int] = []
            for i in range(cur, upto):
                k = keys[codes[i]]
                if k in v and v[k] != post[i]:
                    put(v, k, int(post[i]))
                fleet.append(lowest(v))
            if self.unsat and active:
                self.raise_idle(clock[cur:upto], np.array(fleet, np.int64))
        else:
            if self.unsat and active:
                at = np.arange(cur, upto, dtype=np.intp)
                self.raise_idle(clock[at], np.minimum.reduce([self.values(q, at) for q in active]))
            self.cur_v = None
        self.cur = upto

    # -- the replay -------------------------------------------------------------------------------------
    def replay(self) -> None:
        """Run the batch: the first runs, then every event in time order, then the rest of the batch."""
        events = self.plan()
        for key, seg in self.first_runs:
            self.run(key, seg)
        for pos, kind, instant, s in events:
            self.stretch(pos)
            if kind == 0:
                self.drop(instant)
            else:
                self.start(s)
        self.stretch(self.n)

    def drop(self, instant: int) -> None:
        """The partitions falling idle at ``instant`` are raised to the fleet then."""
        for key in self.drops[instant]:
            self.active.pop(key, None)
            if self.cur_v is not None:
                self.cur_v.pop(key, None)
            self.unsaturated(key)
        if self.active:
            low = self.lowest(self.fresh())
            self.raise_idle(np.array([instant], np.int64), np.array([low], np.int64))

    def start(self, s: int) -> None:
        """Segment ``s`` starts: its partition is active again and runs over it."""
        _, key, seg = self.starts[s]
        self.unsat.pop(key, None)
        self.run(key, seg)
        self.active[key] = None
        if self.cur_v is not None:  # its value from ``pos`` on: it arrives there (``stretch`` reads on)
            self.put(self.cur_v, key, int(self.post[seg[0]]))

    def timelines(self) -> dict[Hashable, Timeline]:
        """Each partition's timeline over the batch: its runs and raises."""
        return {key: _joined(self.before_wm[key], parts) for key, parts in self.chunks.items()}
