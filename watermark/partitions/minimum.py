"""The ``min`` and ``global`` modes: the global watermark as the minimum over the active partitions.

In ``min`` mode every partition has its own generator, fed by the combination's clock (the other partitions'
arrivals are idle ticks), and the global watermark is the running maximum of the minimum over the partitions
active at each instant; a partition silent for its idle timeout stops counting. In ``global`` mode one
generator is fed by every partition in arrival order and the partitions are only tracked. The vectorised path
runs the generators of a large batch on one thread a core (:func:`_run_generators`).
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Self

import numpy as np
from numpy.typing import NDArray

from watermark.base import I64, Trace, WatermarkGenerator
from watermark.partitions.arrays import rows_by_code
from watermark.partitions.state import CombinationState
from watermark.timeline import Component, Timeline
from watermark.timeutil import INT64_MAX, NO_WATERMARK, running_max, shift_right

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


class MinimumCombination(CombinationState):
    """The ``min`` and ``global`` paths, arrival by arrival and vectorised (mixed into the combination)."""

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

    # -- min mode: the minimum over the active partitions -----------------------------------------------
    def _update_min(self, key: Hashable, te: int, now: int) -> Self:
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

    def _trace_min(self, keys: list[Hashable], codes: NDArray[np.intp], te_a: I64, clock: I64) -> Trace:
        """Each partition's generator over the batch on the combination's clock; the minimum of the active."""
        n = te_a.size
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
