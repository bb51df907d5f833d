"""Forgetting partitions silent for a retention, and the floors that keep a returning one from firing twice.

A forgotten partition's generator and last arrival go, so the state follows the partitions alive. In
``scoped`` mode the *eviction floor* (the highest watermark a forgotten partition had) is the starting
watermark of every partition new to the combination and the floor of every key a partition claims while its
own watermark is below it; in ``min`` mode only idle partitions are forgotten.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterable

from watermark.base import check_int
from watermark.partitions.state import SCOPED_MODES, CombinationState
from watermark.timeutil import NO_WATERMARK


class PartitionEviction(CombinationState):
    """Forgetting partitions and the eviction floor (mixed into the combination)."""

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

        >>> from watermark.partitions.combine import PartitionedWatermark
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
