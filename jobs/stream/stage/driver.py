"""The driver side of the watermark stage: per-tuple decisions for one micro-batch, without Spark.

The job collects the narrow columns of a batch's valid rows (partition, event time, arrival time, file,
line), and this module puts them in arrival order (arrival time, then file, then line), runs the
per-partition generators and their combination, and labels every row late, straggler or on time.

Spark then needs to know which rows are late without a join on row ids. Lateness is a threshold on the
arrival key: ``late  <=>  te < W(arrival)``. :func:`label_thresholds` compresses the watermark's steps into
the fewest pieces ``(first arrival key, threshold)`` that give every row of the batch the same label, so the
job can label rows with a short ``CASE`` over struct comparisons in Spark.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from jobs.stream.stage.scoped import drop_owners
from watermark.evaluation.replay import LATE, STRAGGLER, classify
from watermark.partitions.combine import PartitionedWatermark
from watermark.timeline import Timeline
from watermark.timeutil import NO_WATERMARK

#: Narrow columns the job collects per batch (valid rows only).
NARROW_COLUMNS = ("partition", "event_time_ms", "arrival_time_ms", "file", "line")


@dataclass(frozen=True)
class StageResult:
    """The stage's decisions for one batch; row-indexed arrays follow the narrow table's row order."""

    order: NDArray[np.intp]  # narrow-table row of each arrival, in arrival order
    arrival_ms: NDArray[np.int64]  # arrival time, in arrival order
    wm_at_arrival: NDArray[np.int64]  # in arrival order
    wm_after: NDArray[np.int64]  # in arrival order
    classes: NDArray[np.int8]  # per narrow row: LATE, STRAGGLER, NORMAL or PENDING
    wm_missed: NDArray[np.int64]  # per narrow row: the watermark it was judged against
    #: The combined watermark between the batch's arrivals too (timers, idle advance): the instant a window
    #: fires (:func:`jobs.common.windows.credit_timeline`).
    timeline: Timeline | None = None
    #: Partition-scoped mode: each partition's own watermark between its arrivals (``timeline`` is None).
    partition_timelines: Mapping[Hashable, Timeline] | None = None

    @property
    def late(self) -> NDArray[np.bool_]:
        """Per narrow row: late."""
        flags: NDArray[np.bool_] = self.classes == LATE
        return flags

    @property
    def n_late(self) -> int:
        """Late rows in the batch."""
        return int(np.count_nonzero(self.classes == LATE))

    @property
    def n_stragglers(self) -> int:
        """Straggler rows in the batch."""
        return int(np.count_nonzero(self.classes == STRAGGLER))


def arrival_order(narrow: pa.Table) -> NDArray[np.intp]:
    """Rows in arrival order: arrival time, then file, then line (all ascending, stable).

    ``file`` is either the path (ranked by name) or, as the job collects it, an integer index into the
    batch's files in landing order, by modification time then name (already the file's rank).
    """
    tp = narrow.column("arrival_time_ms").to_numpy()
    column = narrow.column("file")
    if pa.types.is_integer(column.type):
        file_rank = column.to_numpy()
    else:
        files = np.asarray(column.to_pylist(), dtype=object)
        _, file_rank = np.unique(files.astype(str), return_inverse=True)
    line = narrow.column("line").to_numpy()
    order: NDArray[np.intp] = np.lexsort((line, file_rank, tp))
    return order


def run_stage(
    watermark: PartitionedWatermark,
    narrow: pa.Table,
    straggler_ms: int,
    floor_ms: int = NO_WATERMARK,
    foreign: NDArray[np.bool_] | None = None,
    order: NDArray[np.intp] | None = None,
    row_floors: NDArray[np.int64] | None = None,
) -> StageResult:
    """Run the generators over one batch's valid rows; ``watermark`` advances (its state is the stage's).

    ``floor_ms`` is a lower bound on the watermark in force: the end of the last window a
    ``--flush-at-end`` closed, so that a later run on the same checkpoint treats those windows as closed.
    ``foreign`` (per narrow row) marks rows that are late whatever their event time: in partition-scoped
    mode, rows whose key another partition owns (:mod:`jobs.stream.stage.scoped`); they are judged against at
    least their event time + 1. ``order`` is :func:`arrival_order` of ``narrow`` when the caller has it
    already. ``row_floors`` (per narrow row) is a floor under each row's watermark: in partition-scoped mode,
    the eviction floor of a key without an owner (:func:`jobs.stream.stage.scoped.row_floors`).

    Examples
    --------
    >>> import pyarrow as pa
    >>> from watermark.partitions.combine import PartitionedWatermark
    >>> pw = PartitionedWatermark("ingestion", {"max_event_time_lag_ms": 0})
    >>> rows = pa.table({"partition": ["a", "a", "a"], "event_time_ms": [100, 90, 300],
    ...                  "arrival_time_ms": [100, 200, 300], "file": ["f1", "f1", "f2"], "line": [0, 1, 0]})
    >>> result = run_stage(pw, rows, straggler_ms=0)
    >>> result.late.tolist(), result.wm_missed.tolist()
    ([False, True, False], [-9223372036854775808, 99, 199])

    """
    if order is None:
        order = arrival_order(narrow)
    part = narrow.column("partition").to_numpy(zero_copy_only=False)[order]
    te = narrow.column("event_time_ms").to_numpy()[order]
    tp = narrow.column("arrival_time_ms").to_numpy()[order]
    trace = watermark.process_trace(part, te, tp)
    at_arrival = np.maximum(trace.at_arrival, floor_ms)
    after_arrival = np.maximum(trace.after_arrival, floor_ms)
    if row_floors is not None:
        at_arrival = np.maximum(at_arrival, row_floors[order])
    if foreign is not None and foreign.any():
        at_arrival = np.where(foreign[order], np.maximum(at_arrival, te + 1), at_arrival)
    sorted_classes = classify(te, at_arrival, straggler_ms)
    classes = np.empty(order.size, np.int8)
    classes[order] = sorted_classes
    missed = np.empty(order.size, np.int64)
    missed[order] = at_arrival
    return StageResult(
        order=order,
        arrival_ms=tp,
        wm_at_arrival=at_arrival,
        wm_after=after_arrival,
        classes=classes,
        wm_missed=missed,
        timeline=trace.timeline,
        partition_timelines=trace.partition_timelines,
    )


@dataclass(frozen=True)
class Eviction:
    """What a batch forgot: the partitions silent for the retention (with the watermark each had)."""

    partitions: dict[str, int]  # partition -> its watermark when forgotten, in order of first appearance
    owners: pa.Table | None  # partition-scoped mode: the key owners without the forgotten partitions' keys


def evict_partitions(
    watermark: PartitionedWatermark,
    retention_ms: int | None,
    keep: Iterable[Hashable],
    owners: pa.Table | None = None,
) -> Eviction:
    """Forget the partitions silent for ``retention_ms`` (None: never), except those in ``keep``.

    ``keep``: the partitions that arrived in the batch and those owning an open window (partition-scoped
    mode: :func:`jobs.stream.stage.scoped.open_owners`), so a forgotten partition holds no open window. In
    partition-scoped mode their keys lose their owner (``owners``). What a forgotten partition or key
    brings later is judged against at least the eviction floor
    (:attr:`watermark.partitions.combine.PartitionedWatermark.evicted_floor_ms`): no window is emitted twice.
    """
    if retention_ms is None:
        return Eviction({}, owners)
    gone = watermark.evict(retention_ms, set(map(str, keep)))
    if owners is not None and gone:
        owners = drop_owners(owners, gone)
    return Eviction({str(p): wm for p, wm in gone.items()}, owners)


@dataclass(frozen=True)
class Thresholds:
    """Piecewise-constant lateness threshold over the arrival key; piece ``k`` starts at ``starts[k]``.

    A row whose arrival key is at or after piece ``k``'s first key (and before piece ``k + 1``'s) is late iff
    its event time is below ``values[k]``.
    """

    starts: NDArray[np.intp]  # arrival positions where each piece begins (the first is 0)
    values: NDArray[np.int64]


def label_thresholds(
    te_sorted: NDArray[np.int64], late_sorted: NDArray[np.bool_], wm_sorted: NDArray[np.int64] | None = None
) -> Thresholds:
    """Few pieces whose thresholds reproduce the labels of rows given in arrival order.

    A piece can be extended while one threshold still separates its late rows (event time below it) from
    its on-time rows (at or above it): ``max(te of late rows) < min(te of on-time rows)``. The threshold is
    the smallest on-time event time of the piece (or one above the largest late one when all are late).
    Given the watermark at each arrival (``wm_sorted``), runs of equal watermark are merged whole (each is
    consistent on its own), so the greedy pass is over runs rather than rows.

    Examples
    --------
    >>> import numpy as np
    >>> t = label_thresholds(np.array([5, 1, 9, 6, 8]), np.array([False, True, False, True, False]))
    >>> t.starts.tolist(), t.values.tolist()
    ([0, 3], [5, 8])

    """
    n = te_sorted.size
    if n == 0:
        return Thresholds(np.empty(0, np.intp), np.empty(0, np.int64))
    top = 2**63 - 1
    if wm_sorted is None:
        run_starts = np.arange(n, dtype=np.intp)
    else:
        run_starts = np.flatnonzero(np.concatenate([[True], wm_sorted[1:] != wm_sorted[:-1]])).astype(np.intp)
    run_lo = np.maximum.reduceat(np.where(late_sorted, te_sorted, NO_WATERMARK), run_starts).tolist()
    run_hi = np.minimum.reduceat(np.where(late_sorted, top, te_sorted), run_starts).tolist()
    starts: list[int] = []
    values: list[int] = []
    lo, hi, start = run_lo[0], run_hi[0], int(run_starts[0])
    for k in range(1, len(run_lo)):
        new_lo, new_hi = max(lo, run_lo[k]), min(hi, run_hi[k])
        if new_lo < new_hi:
            lo, hi = new_lo, new_hi
            continue
        starts.append(start)
        values.append(hi if hi != top else lo + 1)
        lo, hi, start = run_lo[k], run_hi[k], int(run_starts[k])
    starts.append(start)
    values.append(hi if hi != top else lo + 1)
    return Thresholds(np.array(starts, np.intp), np.array(values, np.int64))
