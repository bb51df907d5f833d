"""Partition-scoped firing in the job: each key's windows fire by the watermark of the partition it lives in.

With ``partition_mode = "scoped"`` (:class:`watermark.combine.PartitionedWatermark`) every source partition
(a Kafka partition) judges its own records on its own clock and no partition waits for another, so a
stream cut into micro-batches anywhere gives the same decisions. The windows of a key fire by the
watermark of the partition that *owns* the key: the first partition the key arrived in (Kafka's keyed
partitioning puts every record of a key in one partition). A record whose key is owned by another
partition (a producer that does not key by the aggregation key, a topic whose partition count grew)
cannot be judged by its own partition without risking a window emitted twice, so it is labelled late
(``late_by_ms`` at least 1) and the backfill folds it into its window: nothing is lost or counted twice.

Pure pyarrow/numpy; the owners live in the stage state beside the open windows.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from jobs.common.schemas import FIRED_SCHEMA
from jobs.common.windows import credit_timeline, fire
from watermark.timeline import Timeline

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
    (:func:`jobs.common.windows.credit_timeline`).
    """
    if open_windows.num_rows == 0 or wm_after.size == 0:
        return FIRED_SCHEMA.empty_table(), open_windows
    window_owner = np.asarray(
        owner_of(owners, open_windows.column("key")).to_numpy(zero_copy_only=False), dtype=object
    )
    fired_parts, still_open = [], []
    rest = np.ones(open_windows.num_rows, bool)
    for partition in dict.fromkeys(partitions.tolist()):
        mine = window_owner == partition
        if not mine.any():
            continue
        rest &= ~mine
        arrivals = partitions == partition
        fired, kept = fire(open_windows.filter(pa.array(mine)), wm_after[arrivals], arrival_ms[arrivals])
        timeline = timelines.get(partition) if timelines is not None else None
        if timeline is not None:
            fired = credit_timeline(fired, timeline)
        fired_parts.append(fired)
        still_open.append(kept)
    still_open.append(open_windows.filter(pa.array(rest)))  # owners without an arrival in this batch
    fired = pa.concat_tables([FIRED_SCHEMA.empty_table(), *fired_parts])
    order = [("window_start_ms", "ascending"), ("key", "ascending")]
    return fired.sort_by(order), pa.concat_tables(still_open).sort_by(order)
