"""The watermark stage in the executors: each source partition judged where Spark reads it (design §8).

In partition-scoped mode (:mod:`jobs.stream.stage.scoped`) a partition's generator sees only its own
arrivals, on its own clock, so it can run in the executor that reads the partition: a Kafka partition is one
Spark partition, read in offset order. A micro-batch then goes through the stage without any row reaching
the driver:

1. One ``mapInArrow`` pass (:func:`judge_partitions`): every executor restores its partitions' generators
   from their JSON snapshots (a Spark broadcast, with the key owners: fetched once per executor, not
   pickled into every task; :class:`StagePlan`), puts the partition's valid rows in arrival order
   (arrival time, file, line), runs the generator, and labels each row late, straggler or on time against
   the watermark at its arrival, exactly as :func:`jobs.stream.stage.driver.run_stage` does on the driver. It
   returns the labelled rows (kept by Spark for the batch) and one *summary* per partition: the generator's
   new snapshot, counts, the keys it met that have no owner yet, and the watermark's *fire segments*.
2. The driver reads the summaries only (:mod:`jobs.stream.stage.summaries`): it settles key ownership (a
   key claimed by two partitions in one batch goes to its first arrival; the other partition's rows of it
   are relabelled late, in Spark), installs the snapshots in its
   :class:`watermark.partitions.combine.PartitionedWatermark` and builds the fire table.
3. Spark merges the on-time rows into the open windows (kept as Parquet under the checkpoint, never on the
   driver), fires the windows whose owner partition's watermark passed their end (a broadcast join with the
   fire segments), and writes the late rows, the fired windows and the open windows.

Fire segments replace the per-arrival watermark: a window of a partition fires at the earliest instant at
which the partition's watermark reaches its end (a timer between arrivals, a rise that follows the clock,
or an arrival: :meth:`watermark.timeline.Timeline.fire`), so only the places where the watermark crosses a
window end matter. A segment (:data:`Segment`) says that windows with ``lo < end <= hi`` fire with trigger
watermark ``trigger`` at instant ``fire_tp`` (or, on a ramp, when the clock reaches ``end + offset``);
there are at most two segments per arrival whose gap or arrival crossed a window end, so at most twice as
many as window ends the watermark crossed in the batch, whatever the number of rows. So what the driver
receives per batch grows with partitions, event-time span and new keys, not with rows.

Lateness thresholds (the driver path's way to label rows in Spark) are not needed here: the executor that
runs the generator labels its rows itself.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from jobs.stream.workers.frozen_imports import freeze_imports
from watermark.base import WatermarkGenerator
from watermark.evaluation.replay import LATE, STRAGGLER, classify
from watermark.strategies.registry import make, restore
from watermark.timeline import NO_RISE, Timeline
from watermark.timeutil import NO_WATERMARK

INT64_MIN = -(2**63)

#: Columns of the valid rows the pass reads (``reason`` null), in this order.
ROW_COLUMNS = ("event_id", "key", "partition", "event_time_ms", "arrival_time_ms", "value", "file", "line")

#: What ``mapInArrow`` returns: labelled rows (``summary`` null) and one summary row per partition.
LABELLED_SCHEMA = pa.schema(
    [
        ("event_id", pa.string()),
        ("key", pa.string()),
        ("partition", pa.string()),
        ("event_time_ms", pa.int64()),
        ("arrival_time_ms", pa.int64()),
        ("value", pa.float64()),
        ("file", pa.int32()),
        ("line", pa.int64()),
        ("class", pa.int8()),
        ("wm_missed", pa.int64()),
        ("summary", pa.string()),
    ]
)
LABELLED_DDL = (
    "event_id string, key string, partition string, event_time_ms bigint, arrival_time_ms bigint, "
    "value double, file int, line bigint, class tinyint, wm_missed bigint, summary string"
)


#: The key owners as a task reads them: each key's partition and floor (``NO_WATERMARK``: none).
OWNER_FLOORS_SCHEMA = pa.schema([("key", pa.string()), ("partition", pa.string()), ("floor", pa.int64())])


@dataclass(frozen=True)
class StageShared:
    """What the tasks of a pass share, as large as the partitions and keys: one Spark broadcast of it."""

    snapshots: Mapping[str, str]  # partition -> generator snapshot (JSON text); absent: a new generator
    owners: pa.Table  # OWNER_FLOORS_SCHEMA


@dataclass(frozen=True)
class StagePlan:
    """What every task of the pass needs: plain data (JSON snapshots, no pickled state).

    The snapshots and the key owners grow with the partitions and keys: the driver puts them in a Spark
    broadcast (``shared``, a :class:`StageShared`), which each executor fetches once, instead of pickling
    them into every task; without it (tests, one process) they are the fields below.
    """

    strategy: str
    params: Mapping[str, Any]
    snapshots: Mapping[str, str]  # partition -> generator snapshot (JSON text); absent: a new generator
    straggler_ms: int
    floor_ms: int  # watermark floor (end of the last window --flush-at-end closed)
    window_ms: int
    step_ms: int
    owner_keys: tuple[str, ...] = ()
    owner_partitions: tuple[str, ...] = ()
    owner_floors: tuple[int, ...] = ()  # each owner key's floor (empty: none)
    #: The eviction floor: the starting watermark of a new partition and the floor of a key without an owner
    #: (:attr:`watermark.partitions.combine.PartitionedWatermark.evicted_floor_ms`).
    evicted_floor_ms: int = NO_WATERMARK
    shared: Any = None  # a Spark broadcast of a StageShared (then snapshots and owner_* are empty)

    def resolve(self) -> StageShared:
        """The snapshots and the key owners: the broadcast's (read once per Python worker) or the fields'."""
        if self.shared is not None:
            value: StageShared = self.shared.value
            return value
        floors = self.owner_floors or (NO_WATERMARK,) * len(self.owner_keys)
        owners = pa.table(
            {
                "key": pa.array(self.owner_keys, pa.string()),
                "partition": pa.array(self.owner_partitions, pa.string()),
                "floor": pa.array(floors, pa.int64()),
            },
            schema=OWNER_FLOORS_SCHEMA,
        )
        return StageShared(self.snapshots, owners)

    def new_generator(self) -> WatermarkGenerator:
        """A partition's generator when it has no snapshot (at the eviction floor, as the driver's)."""
        gen = make(self.strategy, dict(self.params))
        if self.evicted_floor_ms != NO_WATERMARK:
            gen.hold_floor(self.evicted_floor_ms)
        return gen


@dataclass(frozen=True)
class KeyLookup:
    """Each row's key owner (None: no owner) and floor, looked up once for all the rows of a task."""

    known: NDArray[np.bool_]  # the key has an owner
    owner: NDArray[np.object_]  # its owner (None where unknown)
    floor: NDArray[np.int64]

    @classmethod
    def of(cls, keys: Any, owners: pa.Table, evicted_floor_ms: int) -> KeyLookup:
        """The lookup of ``keys`` in ``owners`` (:data:`OWNER_FLOORS_SCHEMA`).

        A key without an owner has the eviction floor.
        """
        index = pc.index_in(pc.cast(keys, pa.string()), value_set=owners.column("key").combine_chunks())
        known = np.asarray(pc.is_valid(index).to_numpy(zero_copy_only=False), dtype=bool)
        owner = np.asarray(
            pc.take(owners.column("partition").combine_chunks(), index).to_numpy(zero_copy_only=False),
            dtype=object,
        )
        floor = pc.take(owners.column("floor").combine_chunks(), index)
        floors = np.asarray(pc.fill_null(floor, evicted_floor_ms).to_numpy(zero_copy_only=False), np.int64)
        return cls(known, owner, floors)

    def take(self, rows: NDArray[np.intp]) -> KeyLookup:
        """The lookup of some of the rows."""
        return KeyLookup(self.known[rows], self.owner[rows], self.floor[rows])


@dataclass
class PartitionSummary:
    """One partition's part of a batch, as its executor reports it."""

    partition: str
    task: int  # the Spark partition that judged it (one per source partition, checked by the driver)
    snapshot: dict[str, Any]
    clock_ms: int | None
    rows: int
    late: int
    stragglers: int
    below_generator: int  # rows under the generator's own watermark (PartitionedWatermark's n_late)
    max_event_time_ms: int
    first: tuple[int, int, int]  # (arrival time, file, line) of its first arrival in the batch
    last: tuple[int, int, int]  # ... and of its last
    wm_at_last_arrival: int  # the generator's watermark at its last arrival
    new_keys: list[tuple[str, int, int, int]] = field(default_factory=list)  # key, first (tp, file, line)
    segments: list[Segment] = field(default_factory=list)  # lo, hi, trigger, fire_tp, offset, cap

    def to_json(self) -> str:
        """The summary as JSON text."""
        return json.dumps(vars(self), separators=(",", ":"), default=_plain_number)

    @classmethod
    def from_json(cls, text: str) -> PartitionSummary:
        """Rebuild from :meth:`to_json`."""
        data = json.loads(text)
        data["first"] = tuple(data["first"])
        data["last"] = tuple(data["last"])
        data["new_keys"] = [tuple(k) for k in data["new_keys"]]
        data["segments"] = [tuple(s) for s in data["segments"]]
        return cls(**data)


def _plain_number(value: Any) -> Any:
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    msg = f"not JSON serialisable: {type(value).__name__}"
    raise TypeError(msg)


#: A fire segment: windows of a partition with ``lo < end <= hi`` fire with trigger watermark ``trigger`` at
#: ``fire_tp``; on a ramp (``offset`` set: the watermark followed the clock, ``W(t) = t - offset``) each at
#: ``min(cap, max(fire_tp, end + offset))`` with ``W`` then ``min(trigger, instant - offset)``, ``trigger``
#: at ``cap`` (the arrival ending the gap).
Segment = tuple[int, int, int, int, int | None, int | None]


def fire_segments(timeline: Timeline, floor_ms: int, window_ms: int, step_ms: int) -> list[Segment]:
    """Where a partition's watermark crossed window ends, as :data:`Segment` rows.

    ``timeline`` is the partition's generator over its arrivals of the batch (one component). A window
    first has ``W >= end`` either in the gap before an arrival (a timer's step to ``pre``, at the timer's
    instant; or a ramp that follows the clock) or at an arrival (``pre`` to ``post``): the instant
    :meth:`watermark.timeline.Timeline.fire` gives. Watermarks below ``floor_ms`` count as ``floor_ms``
    (windows up to it are closed). Window ends lie on the grid ``k * step_ms + window_ms``; a rise that
    crosses no grid end gives no segment.

    Examples
    --------
    A periodic timer every 100 ms raises the watermark to -100 at 100 and to 1_200 at 1_400, before the
    arrival at 1_420 (the window ending at 1_000 fires at 1_400):

    >>> from watermark.strategies.periodic import Periodic
    >>> trace = Periodic(delay_ms=100, period_ms=100).process_trace([0, 1_300, 1_400], [0, 1_310, 1_420])
    >>> fire_segments(trace.timeline, -2**63, 1_000, 1_000)[1]
    (-100, 1200, 1200, 1400, None, None)

    """
    if len(timeline.parts) != 1:
        msg = f"fire segments need one generator's timeline, got {len(timeline.parts)} components"
        raise ValueError(msg)
    part = timeline.parts[0]
    n = timeline.tp.size
    if n == 0:
        return []
    floor = np.int64(floor_ms)
    prev = np.empty(n, np.int64)
    prev[0] = part.before
    prev[1:] = part.post[:-1]
    gap_lo, gap_hi = np.maximum(prev, floor), np.maximum(part.pre, floor)
    at_lo, at_hi = gap_hi, np.maximum(part.post, floor)
    residue = window_ms % step_ms

    def crosses(lo: int, hi: int) -> bool:
        if hi <= lo or hi == NO_WATERMARK:
            return False
        return lo == NO_WATERMARK or lo + 1 + (residue - (lo + 1)) % step_ms <= hi

    out: list[Segment] = []
    for j in np.flatnonzero((gap_hi > gap_lo) | (at_hi > at_lo)).tolist():
        tp = int(timeline.tp[j])
        lo, hi = int(gap_lo[j]), int(gap_hi[j])
        if crosses(lo, hi):
            rise = int(part.rise[j])
            if rise == NO_RISE:  # time alone did not raise it: the arrival did
                out.append((lo, hi, hi, tp, None, None))
            elif part.offset is None:  # a timer's step
                out.append((lo, hi, hi, min(rise, tp), None, None))
            else:  # a ramp that follows the clock
                out.append((lo, hi, hi, rise, int(part.offset[j]), tp))
        lo, hi = int(at_lo[j]), int(at_hi[j])
        if crosses(lo, hi):
            out.append((lo, hi, hi, tp, None, None))
    return out


def judge_partition(
    rows: pa.Table,
    plan: StagePlan,
    task: int = 0,
    shared: StageShared | None = None,
    lookup: KeyLookup | None = None,
) -> tuple[pa.Table, PartitionSummary]:
    """Run one partition's generator over its valid rows of the batch; label the rows; summarise.

    ``rows`` holds :data:`ROW_COLUMNS` of one source partition's valid rows, in any order. The labelled
    rows come back in arrival order with ``class`` (LATE, STRAGGLER, NORMAL or PENDING) and ``wm_missed``
    (the watermark each was judged against), as :func:`jobs.stream.stage.driver.run_stage` labels them.
    ``shared`` is ``plan.resolve()`` and ``lookup`` the rows' :class:`KeyLookup` when the caller has them.
    """
    partition = str(rows.column("partition")[0].as_py())
    if shared is None:
        shared = plan.resolve()
    if lookup is None:
        lookup = KeyLookup.of(rows.column("key"), shared.owners, plan.evicted_floor_ms)
    te0 = rows.column("event_time_ms").to_numpy()
    tp0 = rows.column("arrival_time_ms").to_numpy()
    file0 = rows.column("file").to_numpy().astype(np.int64)
    line0 = rows.column("line").to_numpy()
    order = np.lexsort((line0, file0, tp0))
    ordered = rows.take(pa.array(order))
    te, tp = te0[order], tp0[order]
    files, lines = file0[order], line0[order]
    looked = lookup.take(order)
    snap = shared.snapshots.get(partition)
    gen = restore(json.loads(snap)) if snap is not None else plan.new_generator()
    trace = gen.process_trace(te, tp)
    assert trace.timeline is not None
    below_generator = int(np.count_nonzero(te < trace.at_arrival))
    # A key without an owner, or claimed while its owner was below the eviction floor: at least its floor.
    at = np.maximum(np.maximum(trace.at_arrival, plan.floor_ms), looked.floor)

    keys = pc.cast(ordered.column("key").combine_chunks(), pa.string())
    known = looked.known
    foreign = np.zeros(te.size, bool)
    if known.any():
        foreign[known] = looked.owner[known] != partition
        at = np.where(foreign, np.maximum(at, te + 1), at)
    classes = classify(te, at, plan.straggler_ms)
    new_keys: list[tuple[str, int, int, int]] = []
    if not known.all():
        fresh = pa.table({"key": keys.filter(pa.array(~known)), "row": np.flatnonzero(~known)})
        firsts = fresh.group_by("key", use_threads=False).aggregate([("row", "min")])
        for key, row in zip(
            firsts.column("key").to_pylist(), firsts.column("row_min").to_pylist(), strict=True
        ):
            new_keys.append((key, int(tp[row]), int(files[row]), int(lines[row])))
    labelled = pa.table(
        {
            **{name: ordered.column(name) for name in ROW_COLUMNS},
            "class": pa.array(classes, pa.int8()),
            "wm_missed": pa.array(at, pa.int64()),
            "summary": pa.nulls(te.size, pa.string()),
        }
    ).cast(LABELLED_SCHEMA)
    summary = PartitionSummary(
        partition=partition,
        task=task,
        snapshot=gen.snapshot(),
        clock_ms=gen.clock_ms,
        rows=int(te.size),
        late=int(np.count_nonzero(classes == LATE)),
        stragglers=int(np.count_nonzero(classes == STRAGGLER)),
        below_generator=below_generator,
        max_event_time_ms=int(te.max()),
        first=(int(tp[0]), int(files[0]), int(lines[0])),
        last=(int(tp[-1]), int(files[-1]), int(lines[-1])),
        wm_at_last_arrival=int(trace.at_arrival[-1]),
        new_keys=new_keys,
        segments=fire_segments(trace.timeline, plan.floor_ms, plan.window_ms, plan.step_ms),
    )
    return labelled, summary


def judge_partitions(plan: StagePlan) -> Any:
    """The ``mapInArrow`` function of the pass: every source partition in the task judged on its own."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        freeze_imports()
        context = TaskContext.get()
        task = context.partitionId() if context is not None else 0
        chunks = list(batches)
        if not chunks:  # an empty task (Spark hands mapInArrow no batch at all then)
            return
        table = pa.Table.from_batches(chunks)
        if table.num_rows == 0:
            return
        valid = table.filter(pc.is_null(table.column("reason"))).select(list(ROW_COLUMNS))
        invalid = table.num_rows - valid.num_rows
        if valid.num_rows:
            shared = plan.resolve()
            # The task's keys are looked up once (a hash of the owners per task, not per partition).
            lookup = KeyLookup.of(valid.column("key"), shared.owners, plan.evicted_floor_ms)
            encoded = pc.cast(valid.column("partition"), pa.string()).combine_chunks().dictionary_encode()
            codes = encoded.indices.to_numpy(zero_copy_only=False)
            grouped = np.argsort(codes, kind="stable")  # each partition's rows together, in table order
            bounds = np.concatenate([[0], np.cumsum(np.bincount(codes, minlength=len(encoded.dictionary)))])
            for code in range(len(encoded.dictionary)):  # in order of first appearance
                rows = grouped[bounds[code] : bounds[code + 1]]
                mine = valid.take(pa.array(rows))
                labelled, summary = judge_partition(mine, plan, task, shared, lookup.take(rows))
                yield from labelled.to_batches(max_chunksize=65_536)
                yield _summary_batch(summary.partition, summary.to_json())
        if invalid:
            # The quarantined rows' count, so that the driver only asks for them when there are some.
            yield _summary_batch(None, json.dumps({"invalid": invalid, "task": task}))

    return run


def _summary_batch(partition: str | None, text: str) -> pa.RecordBatch:
    columns = [pa.nulls(1, f.type) for f in LABELLED_SCHEMA]
    columns[LABELLED_SCHEMA.get_field_index("partition")] = pa.array([partition], pa.string())
    columns[LABELLED_SCHEMA.get_field_index("summary")] = pa.array([text], pa.string())
    return pa.RecordBatch.from_arrays(columns, schema=LABELLED_SCHEMA)
