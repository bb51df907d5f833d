"""The ``scoped`` and ``keyed`` modes without idleness: each partition on its own clock, judging its tuples.

Each partition's generator sees only its own arrivals at their own arrival times, so no partition waits for
another and a stream cut into batches anywhere gives the same decisions; the global value (the minimum over
the partitions) is only reported. A batch whose partitions ran apart (in executors) is taken over whole
(:meth:`ScopedCombination.absorb_partitions`).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Self

import numpy as np
from numpy.typing import NDArray

from watermark.base import I64, Trace
from watermark.partitions.arrays import plain_key, rows_by_code
from watermark.partitions.state import SCOPED_MODES, CombinationState
from watermark.strategies.registry import restore
from watermark.timeline import Timeline


class ScopedCombination(CombinationState):
    """The scoped modes' paths (mixed into the combination; with idleness: ``IdleScopedCombination``)."""

    def _update_scoped(self, key: Hashable, te: int, tp: int) -> Self:
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
            plain = plain_key(key)
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
