"""A validated micro-batch's two ways through the watermark stage, up to the rows of every table.

* :func:`on_driver`: the narrow columns of every record are collected to the driver, which runs the stage
  (:mod:`jobs.stream.stage.driver`; key ownership in partition-scoped mode, :mod:`jobs.stream.stage.scoped`),
  has the executors label and aggregate the rows (Spark's reader,
  :class:`jobs.stream.sources.spark_rows.SparkRows`; or the Arrow reader,
  :class:`jobs.stream.sources.arrow_reader.ArrowRows`), merges the partials into the open windows and
  fires those the watermark closed (:func:`fire_windows`).
* :func:`in_executors`: partition-scoped mode on Kafka; each partition's stage runs where Spark reads it and
  no row reaches the driver (:mod:`jobs.stream.stage.executors`).

Either returns a :class:`PathOutcome`: the tables' rows and what the batch leaves for the next, which the
handler commits (:mod:`jobs.stream.handler`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from jobs.common.schemas import QUARANTINE_SCHEMA, WATERMARK_LOG_SCHEMA
from jobs.common.windows import credit_timeline, empty_partials, fire, flush, merge_partials
from jobs.stream.report import BatchReport
from jobs.stream.sinks.observation import executors_observation, observation
from jobs.stream.sinks.rows import (
    RecordKeys,
    aggregate_rows,
    arrival_rows,
    late_rows,
    live_rows,
    partition_counts,
    quarantine_rows,
    watermark_log_rows,
)
from jobs.stream.sources.arrow_reader import ArrowRows
from jobs.stream.sources.readers import RecordNumbers, file_quarantine_rows, reason_counts
from jobs.stream.sources.spark_rows import SparkRows
from jobs.stream.stage.driver import StageResult, arrival_order, evict_partitions, run_stage
from jobs.stream.stage.executors import release, run_in_executors
from jobs.stream.stage.scoped import claim, claims_of, fire_scoped, open_owners, row_floors
from jobs.stream.stage.stage_options import StageOptions
from jobs.stream.stage.states import StageStart
from monitoring.metrics import BatchObservation
from watermark.partitions.combine import PartitionedWatermark
from watermark.partitions.state import SCOPED_MODES
from watermark.timeline import Timeline

log = logging.getLogger("jobs.stream")


@dataclass
class PathOutcome:
    """What a path made of a batch: the tables' rows to commit, and the state the batch leaves."""

    report: BatchReport
    rows: dict[str, Any]  # table -> pyarrow table or Spark DataFrame
    tick: float  # when the path's last phase ended (the commit's phase starts there)
    open_windows: pa.Table  # the open windows to save (the executors keep theirs in ``open_dir``)
    owners: pa.Table | None  # the key owners to save (partition-scoped mode)
    open_dir: str | None
    observe: Callable[[], BatchObservation]  # the metrics' view (after the commit)
    #: The deferred tables' rows, built while the commit's appends run.
    later: Callable[[], dict[str, Any]] | None = None
    release: Callable[[], None] = lambda: None  # what Spark kept for the batch, dropped after the commit


def on_driver(
    source: SparkRows | ArrowRows,
    start: StageStart,
    files: list[str],
    unread: pa.Table,
    batch_id: int,
    options: StageOptions,
    prepared: float,
) -> PathOutcome:
    """The batch with its stage on the driver; ``unread``: its files set aside (quarantined as files)."""
    config = start.config
    tick = time.perf_counter()
    prepare = tick - prepared
    narrow_all = source.narrow()
    if narrow_all.column("file").null_count:
        msg = f"batch {batch_id}: records whose landing file is not among the batch's files {files[:3]}..."
        raise RuntimeError(msg)
    valid_mask = np.asarray(narrow_all.column("valid").to_numpy(zero_copy_only=False), dtype=bool)
    narrow = narrow_all.filter(pa.array(valid_mask)).drop_columns(["valid"])
    if config.partition_mode == "keyed":  # each key is its own partition of the watermark
        narrow = by_key(narrow)
    numbers = RecordNumbers(narrow_all.column("file").to_numpy(), narrow_all.column("line").to_numpy())
    keys = RecordKeys(files, numbers, offsets=options.source.offset_keys)
    report = BatchReport(batch_id=batch_id, rows=narrow_all.num_rows, config_version=config.version)
    report.phases["prepare"] = prepare - source.collect_seconds
    report.phases["collect"] = source.collect_seconds
    tick = report.mark("collect", tick)
    report.quarantined = int((~valid_mask).sum())
    rows_out: dict[str, Any] = {
        "quarantine": _quarantine(source, report, keys, unread, batch_id, start.ingest_ms, options)
    }
    report.reasons = reason_counts(rows_out["quarantine"])
    tick = report.mark("quarantine", tick)

    stage = _DriverStage(start, options)
    if narrow.num_rows:
        result, late, tick = stage.run(source, narrow, batch_id, report, tick)
    else:
        result, late = None, None
        stage.without_records()
    fired, open_windows = stage.fired, stage.open_windows
    rows_out["aggregates"] = aggregate_rows(fired, batch_id, config.version)
    report.driver_bytes = narrow_all.nbytes + sum(t.nbytes for t in rows_out.values())
    log_rows: list[dict[str, Any]] = []

    def deferred_rows() -> dict[str, Any]:
        """The deferred tables' rows (built while ``aggregates`` is appended)."""
        ingest_ms = start.ingest_ms
        if result is None or late is None:
            if not stage.evicted:
                return {}
            evicted = stage.evicted
            log_rows.extend(watermark_log_rows(start.watermark, {}, batch_id, config, ingest_ms, evicted))
            return {"watermark_log": pa.Table.from_pylist(log_rows, schema=WATERMARK_LOG_SCHEMA)}
        rows = {"late_events": late_rows(late, narrow, result, keys, batch_id, ingest_ms)}
        counts = partition_counts(narrow, result)
        log_rows.extend(
            watermark_log_rows(start.watermark, counts, batch_id, config, ingest_ms, stage.evicted)
        )
        rows["watermark_log"] = pa.Table.from_pylist(log_rows, schema=WATERMARK_LOG_SCHEMA)
        if options.arrival_history:
            ordered = narrow.take(pa.array(result.order))
            rows["arrivals"] = arrival_rows(ordered, batch_id, ingest_ms)
        report.driver_bytes += sum(t.nbytes for t in rows.values())
        return rows

    report.path = source.path
    report.fired = fired.num_rows
    report.open_windows = open_windows.num_rows
    return PathOutcome(
        report,
        rows_out,
        tick,
        open_windows,
        stage.owners if stage.scoped else None,
        None,
        lambda: observation(report, result, narrow, fired, live_rows(log_rows), config),
        later=deferred_rows,
    )


def by_key(narrow: pa.Table) -> pa.Table:
    """``narrow`` with each record's key as its partition (``partition_mode`` keyed).

    The watermark stage, ``watermark_log`` and ``arrivals`` then see keys as partitions: each key has its
    own generator, fires its own windows and is idle or forgotten on its own (``late_events`` keep the
    source partition).

    >>> t = pa.table({"partition": ["0", "0"], "key": ["a", "b"], "event_time_ms": [1, 2]})
    >>> by_key(t).column("partition").to_pylist()
    ['a', 'b']
    """
    at = narrow.schema.get_field_index("partition")
    return narrow.set_column(at, "partition", narrow.column("key").cast(pa.string()))


def _quarantine(
    source: SparkRows | ArrowRows,
    report: BatchReport,
    keys: RecordKeys,
    unread: pa.Table,
    batch_id: int,
    ingest_ms: int,
    options: StageOptions,
) -> pa.Table:
    """``quarantine`` rows of the batch's invalid records, and of its files that could not be read."""
    if report.quarantined:
        rows = quarantine_rows(source.quarantined(), keys, batch_id, ingest_ms)
    else:
        rows = QUARANTINE_SCHEMA.empty_table()
    if unread.num_rows and options.source.landing_files:  # files quarantined as files
        files = file_quarantine_rows(unread, batch_id, ingest_ms)
        rows = pa.concat_tables([rows, files])
        report.quarantined += files.num_rows
    return rows


class _DriverStage:
    """The stage of one batch on the driver: its generators' run, then the windows it fires."""

    def __init__(self, start: StageStart, options: StageOptions) -> None:
        self.start, self.options = start, options
        self.scoped = start.config.partition_mode in SCOPED_MODES
        self.owners = start.owners
        self.open_windows = start.open_windows
        self.fired = flush(empty_partials())
        self.boundary_ms = options.boundary_ms(start.ingest_ms)
        self.evicted: dict[str, int] = {}  # partitions the batch forgot (their last watermark)

    def run(
        self, source: SparkRows | ArrowRows, narrow: pa.Table, batch_id: int, report: BatchReport, tick: float
    ) -> tuple[StageResult, pa.Table, float]:
        """Judge the batch's valid rows, label and aggregate them, fire; the result, late rows and tick."""
        start, config = self.start, self.start.config
        foreign, order, floors = None, None, None
        if self.scoped:
            order = arrival_order(narrow)
            before = self.owners
            floors = row_floors(start.watermark, before, narrow.column("key"))
            foreign = self._claim(narrow, order, batch_id)
        result = run_stage(
            start.watermark, narrow, config.straggler_ms, start.closed_until_ms, foreign, order, floors
        )
        if self.scoped:
            start.watermark.hold_key_floors(claims_of(before, self.owners))
        tick = report.mark("stage", tick)
        partials, late, tick = source.aggregate(narrow, result, config.window, report, tick)
        if late.num_rows != result.n_late:
            msg = f"batch {batch_id}: {late.num_rows} late rows labelled, the stage found {result.n_late}"
            raise RuntimeError(msg)
        self.open_windows = merge_partials(self.open_windows, *partials)
        parts = np.asarray(narrow.column("partition").to_numpy(zero_copy_only=False), dtype=object)
        self._fire(
            parts[result.order],
            result.wm_after,
            result.arrival_ms,
            result.timeline,
            result.partition_timelines,
        )
        self._evict(parts)
        tick = report.mark("windows", tick)
        report.late = result.n_late
        return result, late, tick

    def without_records(self) -> None:
        """A batch without a valid record: time still went on to its boundary (the trigger's timer)."""
        if self.scoped:  # as after a batch's arrivals (the stage in the executors does the same)
            self.start.watermark.hold_key_floors(())
        if self.boundary_ms is not None:
            none = np.empty(0, np.int64)
            self._fire(np.empty(0, object), none, none)
        self._evict(np.empty(0, object))

    def _evict(self, arrived: Any) -> None:
        """Forget the partitions silent for the retention that own no open window (nor arrived now)."""
        keep = set(map(str, dict.fromkeys(arrived.tolist())))
        if self.scoped:
            keep |= open_owners(self.open_windows, self.owners)
        eviction = evict_partitions(
            self.start.watermark,
            self.start.config.partition_retention_ms,
            keep,
            self.owners if self.scoped else None,
        )
        self.evicted = eviction.partitions
        if eviction.owners is not None:
            self.owners = eviction.owners

    def _claim(self, narrow: pa.Table, order: Any, batch_id: int) -> Any:
        """Partition-scoped mode: claim the batch's new keys; the rows whose key another partition owns."""
        self.owners, foreign_sorted = claim(
            self.owners,
            narrow.column("key").take(pa.array(order)),
            narrow.column("partition").take(pa.array(order)),
        )
        foreign = np.empty(order.size, bool)
        foreign[order] = foreign_sorted
        if foreign.any():
            log.warning(
                "batch %d: %d rows of keys that another partition owns are late (partition-scoped "
                "mode needs each key in one partition)",
                batch_id,
                int(foreign.sum()),
            )
        return foreign

    def _fire(
        self,
        parts: Any,
        wm_after: Any,
        arrival_ms: Any,
        timeline: Timeline | None = None,
        partition_timelines: Mapping[Hashable, Timeline] | None = None,
    ) -> None:
        self.fired, self.open_windows = fire_windows(
            self.start.watermark,
            self.open_windows,
            self.owners if self.scoped else None,
            self.start.closed_until_ms,
            parts,
            wm_after,
            arrival_ms,
            self.boundary_ms,
            timeline,
            partition_timelines,
        )


def fire_windows(
    watermark: PartitionedWatermark,
    open_windows: pa.Table,
    owners: pa.Table | None,
    floor_ms: int,
    parts: Any,
    wm_after: Any,
    arrival_ms: Any,
    boundary_ms: int | None,
    timeline: Timeline | None = None,
    partition_timelines: Mapping[Hashable, Timeline] | None = None,
) -> tuple[pa.Table, pa.Table]:
    """Fire what the batch's arrivals closed, then (wall clock) what time closed up to the boundary.

    ``owners`` (partition-scoped mode: each key's partition) or None. A window's emit instant is the
    earliest ingestion-clock instant with ``W >= end``: a timer between arrivals (from ``timeline``: the
    combined one in min and global modes, the owner partition's own in partition-scoped mode), the arrival
    that raised the watermark, or the batch boundary when the clock's advance there did. Watermarks below
    ``floor_ms`` (the end of the last flushed window) count as ``floor_ms`` at the boundary.
    """
    scoped = owners is not None
    if boundary_ms is not None:
        watermark.advance_to(boundary_ms)
        if scoped:
            gens = watermark.partition_watermarks
            parts = np.concatenate([parts, np.asarray(list(gens), dtype=object)])
            wm_after = np.concatenate([wm_after, np.fromiter(gens.values(), np.int64, len(gens))])
        else:
            wm_after = np.append(wm_after, np.int64(watermark.watermark_ms))
        at = max(boundary_ms, int(arrival_ms[-1])) if len(arrival_ms) else boundary_ms
        arrival_ms = np.concatenate([arrival_ms, np.full(len(wm_after) - len(arrival_ms), at, np.int64)])
        wm_after = np.maximum(wm_after, floor_ms)
    if owners is not None:
        return fire_scoped(open_windows, owners, parts, wm_after, arrival_ms, partition_timelines)
    fired, still_open = fire(open_windows, wm_after, arrival_ms)
    if timeline is not None:
        fired = credit_timeline(fired, timeline)
    return fired, still_open


def in_executors(
    spark: Any,
    rows: Any,
    start: StageStart,
    files: list[str],
    batch_id: int,
    options: StageOptions,
    prepared: float,
) -> PathOutcome:
    """The batch with its stage in the executors: no row reaches the driver (``rows``: validated)."""
    config, ingest_ms = start.config, start.ingest_ms
    report = BatchReport(batch_id=batch_id, config_version=config.version, path="spark")
    report.stage_in = "executors"
    report.phases["prepare"] = time.perf_counter() - prepared
    outcome = run_in_executors(
        spark,
        rows.drop("raw"),
        watermark=start.watermark,
        owners=start.owners,
        config=config,
        floor_ms=start.closed_until_ms,
        files=files,
        batch_id=batch_id,
        ingest_ms=ingest_ms,
        open_before=start.open_windows if start.open_windows.num_rows else None,
        open_before_dir=start.open_dir,
        checkpoint=options.checkpoint,
        arrival_history=options.arrival_history,
        phases=report.phases,
        boundary_ms=options.boundary_ms(ingest_ms),
    )
    try:
        tick = time.perf_counter()
        report.rows = outcome.valid + outcome.invalid
        report.quarantined = outcome.invalid
        report.late = outcome.late
        report.driver_bytes = outcome.driver_bytes
        rows_out: dict[str, Any] = dict(outcome.rows_out)
        if outcome.invalid:
            bad = rows.filter(rows.reason.isNotNull()).select("raw", "reason", "file", "line").toArrow()
            report.driver_bytes += bad.nbytes
            keys = RecordKeys(files, None, offsets=options.source.offset_keys)
            rows_out["quarantine"] = quarantine_rows(bad, keys, batch_id, ingest_ms)
            report.reasons = reason_counts(rows_out["quarantine"])
        tick = report.mark("quarantine", tick)
        log_rows = watermark_log_rows(
            start.watermark, outcome.per_partition, batch_id, config, ingest_ms, outcome.evicted
        )
        rows_out["watermark_log"] = pa.Table.from_pylist(log_rows, schema=WATERMARK_LOG_SCHEMA)
    except BaseException:
        release(outcome)
        raise
    report.fired = outcome.fired
    report.open_windows = outcome.open_windows
    return PathOutcome(
        report,
        rows_out,
        tick,
        empty_partials(),
        outcome.owners,
        outcome.open_folder,
        lambda: executors_observation(report, outcome, live_rows(log_rows), config),
        release=lambda: release(outcome),
    )
