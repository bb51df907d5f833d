"""Partition-scoped firing in the job: each key's windows fire by the watermark of the partition it lives in.

With ``partition_mode = "scoped"`` (:class:`watermark.partitions.combine.PartitionedWatermark`) every source
partition (a Kafka partition) judges its own records on its own clock and no partition waits for another, so a
stream cut into micro-batches anywhere gives the same decisions. The windows of a key fire by the
watermark of the partition that *owns* the key: the first partition the key arrived in (Kafka's keyed
partitioning puts every record of a key in one partition). A record whose key is owned by another
partition (a producer that does not key by the aggregation key, a topic whose partition count grew)
cannot be judged by its own partition without risking a window emitted twice, so it is labelled late
(``late_by_ms`` at least 1) and the backfill folds it into its window: nothing is lost or counted twice.

A partition forgotten after a retention of silence
(:meth:`watermark.partitions.combine.PartitionedWatermark.evict`) loses its keys too (:func:`drop_owners`):
they have no owner then, and whichever partition meets one first claims it again. Every window of such a key
that may have fired ends at or below the combination's eviction floor, so the rows of a key without an owner,
and of a key claimed while its new owner's watermark was still below that floor, are judged against at least
the floor (:func:`row_floors`): a straggler of a window already emitted is late, never a second emission.

Pure pyarrow/numpy; the owners live in the stage state beside the open windows.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from jobs.common.schemas import FIRED_SCHEMA
from jobs.common.windows import credit_timeline, fire
from watermark.partitions.combine import PartitionedWatermark
from watermark.timeline import Timeline
from watermark.timeutil import NO_WATERMARK

#: Which partition owns each key.
OWNERS_SCHEMA = pa.schema([("key", pa.string()), ("partition", pa.string())])


def claim(owners: pa.Table, keys: pa.Array, partitions: pa.Array) -> tuple[pa.Table, NDArray[np.bool_]]:
    """Owners after the rows (in arrival order) of ``keys`` from ``partitions``, and which rows are foreign.

    A key without an owner is claimed by the first partition it arrives in; a row from any other partition
    than its key's owner is *foreign*.

    Examples
    --------
    >>> import pyarrow as pa
    >>> owners = pa.table({"key": ["a"], "partition": ["0"]}, schema=OWNERS_SCHEMA)
    >>> new, foreign = claim(owners, pa.array(["a", "b", "a", "b"]), pa.array(["1", "1", "0", "0"]))
    >>> sorted(zip(new["key"].to_pylist(), new["partition"].to_pylist())), foreign.tolist()
    ([('a', '0'), ('b', '1')], [True, False, False, True])

    """
    keys = pc.cast(keys, pa.string())
    partitions = pc.cast(partitions, pa.string())
    first = pa.table({"key": keys, "partition": partitions, "row": np.arange(len(keys))})
    firsts = first.group_by("key", use_threads=False).aggregate([("row", "min")])
    known = pc.is_in(firsts["key"], value_set=owners["key"])
    fresh_rows = pc.filter(firsts["row_min"], pc.invert(known))
    fresh = pa.table(
        {"key": pc.take(keys, fresh_rows), "partition": pc.take(partitions, fresh_rows)},
        schema=OWNERS_SCHEMA,
    )
    merged = pa.concat_tables([owners.cast(OWNERS_SCHEMA), fresh])
    owner = owner_of(merged, keys)
    foreign = np.asarray(pc.not_equal(owner, partitions).to_numpy(zero_copy_only=False), dtype=bool)
    return merged, foreign


def claims_of(before: pa.Table, after: pa.Table) -> list[tuple[str, str]]:
    """The ``(key, partition)`` pairs :func:`claim` added to ``before`` (it appends them, in order)."""
    fresh = after.slice(before.num_rows)
    return list(zip(fresh.column("key").to_pylist(), fresh.column("partition").to_pylist(), strict=True))


def row_floors(watermark: PartitionedWatermark, owners: pa.Table, keys: pa.Array) -> NDArray[np.int64]:
    """Per row of ``keys``: the floor it is judged against at least (``NO_WATERMARK``: none).

    ``owners`` are the owners before the batch. A key without one (new, or its owner was forgotten) has the
    eviction floor; a key claimed while its owner's watermark was below that floor has its own
    (:attr:`~watermark.partitions.combine.PartitionedWatermark.key_floors`). Before any partition is forgotten
    there is no floor, and nothing changes.

    >>> from watermark.partitions.combine import PartitionedWatermark
    >>> pw = PartitionedWatermark("ingestion", {"max_event_time_lag_ms": 0}, mode="scoped")
    >>> _ = pw.process(["0", "1"], [1_000, 9_000], [1_000, 9_000])
    >>> _ = pw.evict(5_000)  # partition 0 is forgotten at its watermark 999
    >>> owners = pa.table({"key": ["b"], "partition": ["1"]}, schema=OWNERS_SCHEMA)
    >>> row_floors(pw, owners, pa.array(["a", "b"])).tolist()  # "a" has no owner now
    [999, -9223372036854775808]
    """
    out = np.full(len(keys), NO_WATERMARK, np.int64)
    floor, floors = watermark.evicted_floor_ms, watermark.key_floors
    if floor == NO_WATERMARK and not floors:
        return out
    text = pc.cast(keys, pa.string())
    if floor != NO_WATERMARK:
        known = pc.is_in(text, value_set=owners.column("key").combine_chunks().cast(pa.string()))
        out[~np.asarray(known.to_numpy(zero_copy_only=False), dtype=bool)] = floor
    if floors:
        index = pc.index_in(text, value_set=pa.array(list(floors), pa.string()))
        found = np.asarray(pc.is_valid(index).to_numpy(zero_copy_only=False), dtype=bool)
        values = np.fromiter(floors.values(), np.int64, len(floors))
        out[found] = values[index.to_numpy(zero_copy_only=False)[found].astype(np.intp)]
    return out


def drop_owners(owners: pa.Table, partitions: Iterable[Hashable]) -> pa.Table:
    """``owners`` without the keys of ``partitions`` (forgotten partitions: their keys have no owner)."""
    gone = pa.array([str(p) for p in partitions], pa.string())
    if not len(gone) or not owners.num_rows:
        return owners
    return owners.filter(pc.invert(pc.is_in(owners.column("partition"), value_set=gone)))


def open_owners(open_windows: pa.Table, owners: pa.Table) -> set[str]:
    """The partitions owning the key of at least one of ``open_windows``."""
    if not open_windows.num_rows or not owners.num_rows:
        return set()
    keys = pc.unique(open_windows.column("key").combine_chunks())
    return {p for p in pc.unique(owner_of(owners, keys)).to_pylist() if p is not None}


def owner_of(owners: pa.Table, keys: pa.Array) -> pa.Array:
    """The owning partition of each key (null for a key without an owner)."""
    index = pc.index_in(pc.cast(keys, pa.string()), value_set=owners["key"])
    return pc.take(owners["partition"].combine_chunks(), index)


def fire_scoped(
    open_windows: pa.Table,
    owners: pa.Table,
    partitions: NDArray[np.object_],
    wm_after: NDArray[np.int64],
    arrival_ms: NDArray[np.int64],
    timelines: Mapping[Hashable, Timeline] | None = None,
) -> tuple[pa.Table, pa.Table]:
    """Fire each open window by its key's owner partition: :func:`jobs.common.windows.fire` per partition.

    ``partitions``, ``wm_after`` and ``arrival_ms`` are the batch's arrivals in arrival order; each
    partition's own watermark after its arrivals never decreases. ``timelines`` (each partition's own
    watermark between its arrivals, :attr:`jobs.stream.stage.driver.StageResult.partition_timelines`) dates a
    window at the earliest instant its owner's watermark reached its end
    (:func:`jobs.common.windows.credit_timeline`). With an idle timeout a partition's timeline also holds
    the instants at which it was raised while idle (its watermark follows the fleet's up to its last
    window's end, :class:`~watermark.partitions.combine.PartitionedWatermark`), so the windows of a partition
    without an arrival in the batch fire too, at the raise, as in the replay.
    """
    raised = {p: t for p, t in (timelines or {}).items() if t.tp.size}
    if open_windows.num_rows == 0 or (wm_after.size == 0 and not raised):
        return FIRED_SCHEMA.empty_table(), open_windows
    window_owner = np.asarray(
        owner_of(owners, open_windows.column("key")).to_numpy(zero_copy_only=False), dtype=object
    )
    fired_parts, still_open = [], []
    rest = np.ones(open_windows.num_rows, bool)
    for partition in dict.fromkeys([*partitions.tolist(), *raised]):
        mine = window_owner == partition
        if not mine.any():
            continue
        rest &= ~mine
        arrivals = partitions == partition
        timeline = raised.get(partition)
        at_ms, wm = arrival_ms[arrivals], wm_after[arrivals]
        if timeline is not None:  # the raises while idle are steps of the watermark too
            at_ms = np.concatenate([at_ms, timeline.tp])
            order = np.argsort(at_ms, kind="stable")
            at_ms = at_ms[order]
            wm = np.maximum.accumulate(np.concatenate([wm, timeline.post])[order])
        fired, kept = fire(open_windows.filter(pa.array(mine)), wm, at_ms)
        if timeline is not None:
            fired = credit_timeline(fired, timeline)
        fired_parts.append(fired)
        still_open.append(kept)
    still_open.append(open_windows.filter(pa.array(rest)))  # owners without an arrival in this batch
    fired = pa.concat_tables([FIRED_SCHEMA.empty_table(), *fired_parts])
    by_window = [("window_start_ms", "ascending"), ("key", "ascending")]
    return fired.sort_by(by_window), pa.concat_tables(still_open).sort_by(by_window)
