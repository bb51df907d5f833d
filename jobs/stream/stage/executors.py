"""A micro-batch with the watermark stage in the executors: the Spark side.

The code that runs in the workers is :mod:`jobs.stream.workers.executor_stage`.

Used in partition-scoped mode on the Kafka source, where a Kafka partition is a Spark partition. The
driver collects one summary per partition; rows, late rows, partial aggregates and open windows stay in
Spark. Open windows live as Parquet under ``CHECKPOINT/stage/open/batch-N`` (one folder per batch, written
by the executors; a replayed batch overwrites its own folder; :mod:`jobs.stream.checkpoint.layout`), with
the column ``owner`` (the partition that owns the key). The driver's reading of the executors' summaries is
:mod:`jobs.stream.stage.summaries`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from jobs.common.schemas import AGGREGATES_SCHEMA, ARRIVALS_SCHEMA, LATE_SCHEMA, PARTIAL_SCHEMA
from jobs.common.session import arrow_frame
from jobs.common.windows import assign_windows
from jobs.stream.checkpoint.layout import CheckpointLayout
from jobs.stream.stage.driver import evict_partitions
from jobs.stream.stage.scoped import OWNERS_SCHEMA
from jobs.stream.stage.summaries import Settled, segment_rows, segments_table, settle
from jobs.stream.workers.executor_stage import (
    LABELLED_DDL,
    OWNER_FLOORS_SCHEMA,
    ROW_COLUMNS,
    StagePlan,
    StageShared,
    judge_partitions,
)
from watermark import storage
from watermark.config import PipelineConfig
from watermark.evaluation.replay import LATE, STRAGGLER
from watermark.partitions.combine import PartitionedWatermark
from watermark.timeutil import NO_WATERMARK

OPEN_COLUMNS = [*PARTIAL_SCHEMA.names, "owner"]


def prune_open_dirs(checkpoint: str, keep_from: int) -> None:
    """Delete the open-window folders of batches before ``keep_from`` (their stage state is gone too)."""
    for number, folder in CheckpointLayout(checkpoint).open_windows_dirs():
        if number < keep_from:
            storage.remove_tree(folder)


def read_open_windows(spark: Any, folder: str) -> pa.Table:
    """Open windows a batch on the executor path left (for the driver path or the flush), as Arrow."""
    frame = spark.read.parquet(folder).select(*PARTIAL_SCHEMA.names)
    return frame.toArrow().cast(PARTIAL_SCHEMA)


@dataclass
class ExecutorOutcome:
    """What a batch on the executor path did (rows stay in Spark; only counts and summaries here)."""

    rows_out: dict[str, Any]
    owners: pa.Table
    open_folder: str
    valid: int = 0
    invalid: int = 0
    late: int = 0
    stragglers: int = 0
    fired: int = 0
    open_windows: int = 0
    emit_latency_ms: list[int] = field(default_factory=list)
    trigger_delay_ms: list[int] = field(default_factory=list)
    ingestion_clock_ms: int = NO_WATERMARK
    per_partition: dict[str, dict[str, int]] = field(default_factory=dict)
    driver_bytes: int = 0  # what the driver received from the executors in this batch
    resplit: bool = False  # a source partition spanned several Spark partitions: judged after a shuffle
    cached: list[Any] = field(default_factory=list)  # frames Spark keeps until the tables are written
    #: Partitions the batch forgot (silent for the retention, no open window), with their last watermark.
    evicted: dict[str, int] = field(default_factory=dict)
    open_owners: set[str] = field(default_factory=set)  # partitions owning an open window after the batch
    broadcasts: list[Any] = field(default_factory=list)  # the pass's broadcast, destroyed by release()


def run_in_executors(
    spark: Any,
    parsed: Any,
    *,
    watermark: PartitionedWatermark,
    owners: pa.Table,
    config: PipelineConfig,
    floor_ms: int,
    files: list[str],
    batch_id: int,
    ingest_ms: int,
    open_before: pa.Table | None,
    open_before_dir: str | None,
    checkpoint: str,
    arrival_history: bool,
    phases: dict[str, float],
    boundary_ms: int | None = None,
) -> ExecutorOutcome:
    """One batch through the stage in the executors; ``watermark`` advances, tables' rows are returned.

    ``parsed`` is the validated batch (``reason`` null for a valid row). ``open_before`` (Arrow, from a
    batch the driver ran) or ``open_before_dir`` (Parquet, from a batch on this path) are the open windows
    before the batch. The outcome's ``rows_out`` maps tables to Spark DataFrames (or Arrow tables for the
    small ones) for :meth:`jobs.common.tables.DeltaTables.append_all`. ``boundary_ms`` (wall clock): the
    batch's boundary on the ingestion clock; every partition's generator advances to it after the batch's
    arrivals, and the windows that advance closes fire at it.
    """
    from pyspark.sql import functions as F

    tick = time.perf_counter()

    def mark(phase: str) -> None:
        nonlocal tick
        now = time.perf_counter()
        phases[phase] = phases.get(phase, 0.0) + now - tick
        tick = now

    plan = _stage_plan(watermark, owners, config, floor_ms, spark)
    try:
        labelled, summaries, settled, resplit = _judge(parsed.select(*ROW_COLUMNS, "reason"), plan)
    except BaseException:
        _destroy(plan.shared)
        raise
    mark("stage")
    out = ExecutorOutcome(rows_out={}, owners=owners, open_folder="", resplit=resplit)
    if plan.shared is not None:
        out.broadcasts.append(plan.shared)
    out.invalid = settled.invalid
    out.driver_bytes = summaries.nbytes
    _absorb(watermark, settled)
    watermark.hold_key_floors(settled.claims)
    at_boundary = _advance_to_boundary(watermark, boundary_ms)
    out.owners = _claim(owners, settled)
    data = labelled.filter(F.col("summary").isNull()).drop("summary")
    counts = _partition_counts(settled)
    if settled.losers:
        data = _relabel_losers(spark, data, settled, counts)
    _count_rows(out, settled, counts)
    if out.late:  # late rows, written by the executors
        out.rows_out["late_events"] = _late_rows(data, files, batch_id, ingest_ms)
    # On-time rows into the open windows; the fire table decides which close.
    merged = _merged_windows(spark, data, config, open_before, open_before_dir, out.owners)
    fire_table = pa.concat_tables([segments_table(settled.summaries), at_boundary])
    joined = _fire_join(spark, merged, fire_table).persist()
    mark("label")
    folder = CheckpointLayout(checkpoint).open_windows(batch_id)
    joined.filter(F.col("trigger_watermark_ms").isNull()).select(*OPEN_COLUMNS).write.mode(
        "overwrite"
    ).parquet(folder.spark)
    out.open_folder = folder.spark
    _window_stats(joined, out)
    # Forget the partitions silent for the retention that own no open window (nor arrived now).
    eviction = evict_partitions(
        watermark,
        config.partition_retention_ms,
        out.open_owners | {s.partition for s in settled.summaries},
        out.owners,
    )
    out.evicted = eviction.partitions
    assert eviction.owners is not None
    out.owners = eviction.owners
    mark("windows")
    if out.fired:
        fired = joined.filter(F.col("trigger_watermark_ms").isNotNull())
        out.rows_out["aggregates"] = _aggregate_rows(fired, batch_id, config.version)
    if arrival_history and out.valid:
        out.rows_out["arrivals"] = _arrival_rows(data, batch_id, ingest_ms)
    out.cached = [labelled, joined]
    return out


def _stage_plan(
    watermark: PartitionedWatermark,
    owners: pa.Table,
    config: PipelineConfig,
    floor_ms: int,
    spark: Any = None,
) -> StagePlan:
    """What every task of the pass needs: the settings, and the generators' snapshots and the key owners.

    The snapshots and owners grow with the partitions and keys, so they go in one Spark broadcast (each
    executor fetches it once, and each Python worker reads it once), not into every task's pickle.
    """
    window = config.window
    shared = StageShared(
        {str(k): json.dumps(g.snapshot()) for k, g in watermark.generators.items()},
        owner_floors(owners, watermark.key_floors),
    )
    return StagePlan(
        strategy=config.strategy,
        params=dict(config.params),
        snapshots={},
        straggler_ms=config.straggler_ms,
        floor_ms=floor_ms,
        window_ms=window.window_ms,
        step_ms=window.step_ms,
        evicted_floor_ms=watermark.evicted_floor_ms,
        shared=spark.sparkContext.broadcast(shared) if spark is not None else _Local(shared),
    )


@dataclass(frozen=True)
class _Local:
    """A broadcast's stand-in without Spark (the value itself)."""

    value: StageShared


def owner_floors(owners: pa.Table, floors: dict[str, int]) -> pa.Table:
    """The owners with each key's floor (``NO_WATERMARK``: none), as the tasks read them."""
    floor = pa.nulls(owners.num_rows, pa.int64())
    if floors and owners.num_rows:
        index = pc.index_in(owners.column("key"), value_set=pa.array(list(floors), pa.string()))
        floor = pc.take(pa.array(list(floors.values()), pa.int64()), index)
    return pa.table(
        {
            "key": owners.column("key").cast(pa.string()),
            "partition": owners.column("partition").cast(pa.string()),
            "floor": pc.fill_null(floor, NO_WATERMARK),
        },
        schema=OWNER_FLOORS_SCHEMA,
    )


def _destroy(broadcast: Any) -> None:
    """Remove a broadcast from the executors and the driver (nothing for a local stand-in)."""
    if broadcast is not None and not isinstance(broadcast, _Local):
        broadcast.destroy()


def _judge(source: Any, plan: StagePlan) -> tuple[Any, pa.Table, Settled, bool]:
    """The pass over the batch: labelled rows (kept by Spark), the summaries, their reading, and resplit.

    When a source partition was read by several tasks, each partition's rows are brought together first
    and the pass runs again (``resplit``).
    """
    from pyspark.sql import functions as F

    labelled, summaries, settled = _judge_once(source, plan)
    resplit = settled.split
    if resplit:
        labelled.unpersist()
        labelled, summaries, settled = _judge_once(source.repartition(F.col("partition")), plan)
    return labelled, summaries, settled, resplit


def _judge_once(source: Any, plan: StagePlan) -> tuple[Any, pa.Table, Settled]:
    from pyspark.sql import functions as F

    labelled = source.mapInArrow(judge_partitions(plan), LABELLED_DDL).persist()
    summaries = labelled.filter(F.col("summary").isNotNull()).select("summary").toArrow()
    return labelled, summaries, settle(summaries.column("summary").to_pylist())


def _partition_counts(settled: Settled) -> dict[str, dict[str, int]]:
    """Each partition's rows of the batch: events, late, stragglers, max event time."""
    return {
        s.partition: {
            "events": s.rows,
            "late": s.late,
            "stragglers": s.stragglers,
            "max_te": s.max_event_time_ms,
        }
        for s in settled.summaries
    }


def _count_rows(out: ExecutorOutcome, settled: Settled, counts: dict[str, dict[str, int]]) -> None:
    out.per_partition = counts
    out.valid = sum(s.rows for s in settled.summaries)
    out.late = sum(c["late"] for c in counts.values())
    out.stragglers = sum(c["stragglers"] for c in counts.values())
    if settled.summaries:
        out.ingestion_clock_ms = max(s.last[0] for s in settled.summaries)


def _late_rows(data: Any, files: list[str], batch_id: int, ingest_ms: int) -> Any:
    """The ``late_events`` rows of the labelled rows (with the batch's file paths)."""
    from pyspark.sql import functions as F

    paths = F.array(*[F.lit(f) for f in files]) if files else F.array().cast("array<string>")
    late = data.filter(F.col("class") == LATE).select(
        *[F.col(c) for c in ROW_COLUMNS[:6]],
        F.col("wm_missed").alias("watermark_ms"),
        (F.col("wm_missed") - F.col("event_time_ms")).alias("late_by_ms"),
        F.element_at(paths, F.col("file") + 1).alias("file"),
        F.col("line").cast("long").alias("line"),
        F.lit(batch_id).cast("long").alias("batch_id"),
        F.lit(False).alias("reconciled"),
        F.lit(ingest_ms).cast("long").alias("ingested_at_ms"),
    )
    return conform_frame(late, LATE_SCHEMA)


def _merged_windows(
    spark: Any,
    data: Any,
    config: PipelineConfig,
    open_before: pa.Table | None,
    open_before_dir: str | None,
    owners: pa.Table,
) -> Any:
    """The open windows before the batch merged with the partials of its on-time rows (with owners)."""
    from pyspark.sql import functions as F

    window = config.window
    on_time = data.filter(F.col("class") != LATE)
    fresh = assign_windows(on_time, window).select(
        "key",
        "window_start_ms",
        (F.col("window_start_ms") + F.lit(window.window_ms)).alias("window_end_ms"),
        F.lit(1).cast("long").alias("count"),
        F.col("value").alias("sum"),
        F.col("value").alias("min"),
        F.col("value").alias("max"),
        F.col("partition").alias("owner"),
    )
    parts = [fresh]
    if open_before_dir is not None:
        parts.append(spark.read.parquet(open_before_dir).select(*OPEN_COLUMNS))
    if open_before is not None and open_before.num_rows:
        parts.append(_owned_frame(spark, open_before, owners))
    merged_rows = parts[0]
    for extra in parts[1:]:
        merged_rows = merged_rows.unionByName(extra)
    return merged_rows.groupBy("key", "window_start_ms", "window_end_ms", "owner").agg(
        F.sum("count").alias("count"),
        F.sum("sum").alias("sum"),
        F.min("min").alias("min"),
        F.max("max").alias("max"),
    )


def _fire_join(spark: Any, merged: Any, fire_table: pa.Table) -> Any:
    """Every merged window with its trigger watermark and fire instant (both null: it stays open)."""
    from pyspark.sql import functions as F

    if not fire_table.num_rows:
        return merged.select(
            "*",
            F.lit(None).cast("long").alias("trigger_watermark_ms"),
            F.lit(None).cast("long").alias("fire_arrival_ms"),
        )
    s = arrow_frame(spark, fire_table).alias("s")
    return (
        merged.alias("m")
        .join(
            F.broadcast(s),
            (F.col("m.owner") == F.col("s.owner"))
            & (F.col("m.window_end_ms") > F.col("s.lo"))
            & (F.col("m.window_end_ms") <= F.col("s.hi")),
            "left",
        )
        .select("m.*", *_fire_instant(F.col("m.window_end_ms")))
    )


def _window_stats(joined: Any, out: ExecutorOutcome) -> None:
    """Windows fired and open, the fired ones' latencies, the open ones' owners into ``out`` (one collect)."""
    from pyspark.sql import functions as F

    is_open = F.col("trigger_watermark_ms").isNull()
    stats = (
        joined.groupBy(is_open.alias("open"))
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.collect_list(F.col("fire_arrival_ms") - F.col("window_end_ms")).alias("latency"),
            F.collect_list(F.col("trigger_watermark_ms") - F.col("window_end_ms")).alias("delay"),
            F.collect_set(F.when(is_open, F.col("owner"))).alias("owners"),
        )
        .toArrow()
    )
    out.driver_bytes += stats.nbytes
    for row in stats.to_pylist():
        if row["open"]:
            out.open_windows = int(row["n"])
            out.open_owners = {str(o) for o in row["owners"] if o is not None}
        else:
            out.fired = int(row["n"])
            out.emit_latency_ms = [int(v) for v in row["latency"]]
            out.trigger_delay_ms = [int(v) for v in row["delay"]]


def _aggregate_rows(fired: Any, batch_id: int, version: int) -> Any:
    """The ``aggregates`` rows of the fired windows."""
    from pyspark.sql import functions as F

    now = int(time.time() * 1000)
    aggregates = fired.select(
        *PARTIAL_SCHEMA.names,
        "trigger_watermark_ms",
        "fire_arrival_ms",
        (F.col("trigger_watermark_ms") - F.col("window_end_ms")).alias("trigger_delay_ms"),
        (F.col("fire_arrival_ms") - F.col("window_end_ms")).alias("emit_latency_ms"),
        F.lit(False).alias("flushed"),
        F.lit(0).cast("long").alias("revision"),
        F.lit(0).cast("long").alias("late_count"),
        F.lit(None).cast("long").alias("reconciled_batch_id"),
        F.lit(batch_id).cast("long").alias("batch_id"),
        F.lit(version).cast("long").alias("config_version"),
        F.lit(now).cast("long").alias("emitted_at_ms"),
    )
    return conform_frame(aggregates, AGGREGATES_SCHEMA)


def _arrival_rows(data: Any, batch_id: int, ingest_ms: int) -> Any:
    """The ``arrivals`` rows of the batch's valid rows."""
    from pyspark.sql import functions as F

    arrivals = data.select(
        "partition",
        "event_time_ms",
        "arrival_time_ms",
        F.lit(batch_id).cast("long").alias("batch_id"),
        F.lit(ingest_ms).cast("long").alias("ingested_at_ms"),
    )
    return conform_frame(arrivals, ARRIVALS_SCHEMA)


def release(outcome: ExecutorOutcome) -> None:
    """Drop what Spark kept for the batch (after its tables are written), and the pass's broadcast."""
    for frame in outcome.cached:
        frame.unpersist()
    outcome.cached = []
    for broadcast in outcome.broadcasts:
        _destroy(broadcast)
    outcome.broadcasts = []


def conform_frame(frame: Any, schema: pa.Schema) -> Any:
    """``frame`` with exactly ``schema``'s columns, in its order and with its types."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_type

    return frame.select(*[F.col(f.name).cast(from_arrow_type(f.type)).alias(f.name) for f in schema])


def _absorb(watermark: PartitionedWatermark, settled: Settled) -> None:
    if not settled.summaries:
        return
    last = max(settled.summaries, key=lambda s: s.last)
    watermark.absorb_partitions(
        [(s.partition, s.snapshot, s.clock_ms, s.rows, s.below_generator) for s in settled.summaries],
        last.wm_at_last_arrival,
        max(s.last[0] for s in settled.summaries),
    )


def _fire_instant(end: Any) -> list[Any]:
    """The joined segment's trigger watermark and fire instant of a window ending at ``end``.

    A step or an arrival fires every window of the segment at ``fire_arrival_ms``; on a ramp
    (``W(t) = t - ramp_offset_ms``, :data:`jobs.stream.workers.executor_stage.Segment`) a window fires when
    the clock reaches ``end + offset``, by the gap's arrival (``cap_ms``) at the latest.
    """
    from pyspark.sql import functions as F

    offset, cap = F.col("s.ramp_offset_ms"), F.col("s.cap_ms")
    at = F.least(cap, F.greatest(F.col("s.fire_arrival_ms"), end + offset))
    on_ramp = offset.isNotNull()
    fire_tp = F.when(on_ramp, at).otherwise(F.col("s.fire_arrival_ms"))
    trigger = F.when(on_ramp & (at < cap), F.least(F.col("s.trigger_watermark_ms"), at - offset)).otherwise(
        F.col("s.trigger_watermark_ms")
    )
    return [trigger.alias("trigger_watermark_ms"), fire_tp.alias("fire_arrival_ms")]


def _advance_to_boundary(watermark: PartitionedWatermark, boundary_ms: int | None) -> pa.Table:
    """Advance every partition to the batch boundary; the fire segments of what that advance closed.

    With an idle timeout, the partitions idle then follow the fleet's watermark up to their last window's
    end (:meth:`~watermark.partitions.combine.PartitionedWatermark.advance_to`); without a boundary (arrival
    clock) they are raised at the batch's clock
    (:meth:`~watermark.partitions.combine.PartitionedWatermark.raise_idle`): the partitions ran apart in the
    executors, so no partition was raised within the batch.
    """
    rows: list[tuple[str, int, int, int, int, int | None, int | None]] = []
    before = watermark.partition_watermarks
    if boundary_ms is not None:
        watermark.advance_to(boundary_ms)
        at: int | None = boundary_ms
    else:
        at = watermark.raise_idle()
    if at is not None:
        for key, after in watermark.partition_watermarks.items():
            lo = before.get(key, NO_WATERMARK)
            if after > lo:
                rows.append((str(key), lo, after, after, at, None, None))
    return segment_rows(rows)


def _claim(owners: pa.Table, settled: Settled) -> pa.Table:
    if not settled.claims:
        return owners
    keys, parts = zip(*settled.claims, strict=True)
    fresh = pa.table({"key": list(keys), "partition": list(parts)}, schema=OWNERS_SCHEMA)
    return pa.concat_tables([owners.cast(OWNERS_SCHEMA), fresh])


def _owned_frame(spark: Any, open_windows: pa.Table, owners: pa.Table) -> Any:
    """Open windows the driver path left (Arrow), with their keys' owners, as a Spark frame."""
    from jobs.stream.stage.scoped import owner_of

    owned = open_windows.select(PARTIAL_SCHEMA.names).append_column(
        "owner", owner_of(owners, open_windows.column("key"))
    )
    return arrow_frame(spark, owned)


def _relabel_losers(spark: Any, data: Any, settled: Settled, counts: dict[str, dict[str, int]]) -> Any:
    """Rows of keys another partition claimed first in this batch: late after all (they are foreign)."""
    from pyspark.sql import functions as F

    keys, parts = zip(*settled.losers, strict=True)
    losers = arrow_frame(
        spark,
        pa.table({"key": list(keys), "partition": list(parts), "_loser": [True] * len(keys)}),
    )
    tagged = data.join(F.broadcast(losers), ["key", "partition"], "left")
    lost = tagged.filter(F.col("_loser")).groupBy("partition", "class").count().toArrow().to_pylist()
    for row in lost:
        c = counts[row["partition"]]
        if row["class"] != LATE:
            c["late"] += int(row["count"])
        if row["class"] == STRAGGLER:
            c["stragglers"] -= int(row["count"])
    is_loser = F.coalesce(F.col("_loser"), F.lit(False))
    return tagged.select(
        *[c for c in data.columns if c not in ("class", "wm_missed", "_loser")],
        F.when(is_loser, F.lit(LATE).cast("tinyint")).otherwise(F.col("class")).alias("class"),
        F.when(is_loser, F.greatest(F.col("wm_missed"), F.col("event_time_ms") + 1))
        .otherwise(F.col("wm_missed"))
        .alias("wm_missed"),
    )
