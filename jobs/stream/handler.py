"""The ``foreachBatch`` handler: one micro-batch through validation, the watermark stage, windows and tables.

A batch's rows come either from Spark's reader (:class:`SparkRows`: validated in Spark) or from the Arrow
path (:class:`ArrowRows`: clean JSON parsed by pyarrow in the executors,
:mod:`jobs.stream.workers.arrow_path`); either way the driver runs the stage on the narrow columns, merges
and fires the windows, and writes every table.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Hashable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from jobs.common.schemas import (
    AGGREGATES_SCHEMA,
    LATE_SCHEMA,
    QUARANTINE_SCHEMA,
    TABLES,
    WATERMARK_LOG_SCHEMA,
)
from jobs.common.session import arrow_frame
from jobs.common.tables import DeltaTables
from jobs.common.windows import credit_timeline, empty_partials, fire, flush, merge_partials, window_partials
from jobs.stream.checkpoint.dedup import SeenIds, mark_duplicates
from jobs.stream.checkpoint.state import CheckpointError, SavedStage, StageStore, checkpoint_app_id
from jobs.stream.options import RATE_FILE, TIMER_FILE, JobOptions
from jobs.stream.sinks.deferred import DEFERRED_TABLES, PendingRows
from jobs.stream.sources.readers import (
    ListedFiles,
    RecordNumbers,
    file_quarantine_rows,
    kafka_batch_files,
    landing_order,
    listed_path,
    logged_batch_files,
    modified_ms,
    number_records,
    oldest_input_ms,
    reason_counts,
    screen_files,
)
from jobs.stream.sources.validate import validate
from jobs.stream.stage.driver import arrival_order, label_thresholds, run_stage
from jobs.stream.stage.executors import prune_open_dirs, read_open_windows, release, run_in_executors
from jobs.stream.stage.labelling import late_expression
from jobs.stream.stage.scoped import OWNERS_SCHEMA, claim, fire_scoped
from jobs.stream.workers.arrow_path import (
    NARROW_SCHEMA,
    LateThresholds,
    RecordChecks,
    plan_splits,
    run_aggregate,
    run_collect,
    spill_dir,
    splits_rdd,
)
from monitoring.metrics import BatchObservation, JobMetrics, PartitionState
from watermark.combine import PartitionedWatermark
from watermark.config import ConfigWatcher, PipelineConfig
from watermark.evaluate import WindowSpec
from watermark.timeline import Timeline
from watermark.timeutil import NO_WATERMARK

log = logging.getLogger("jobs.stream")


class SparkRows:
    """A batch read by Spark's reader: validated in Spark, typed columns cached for the batch's actions."""

    path = "spark"
    collect_seconds = 0.0  # the collect happens in narrow()

    def __init__(
        self, spark: Any, rows: Any, parsed: Any, pool: ThreadPoolExecutor, *, with_key: bool = False
    ) -> None:
        self.spark, self.rows, self.parsed, self.pool = spark, rows, parsed, pool
        self.with_key = with_key

    def narrow(self) -> pa.Table:
        """``file, line, valid, partition, event_time_ms, arrival_time_ms`` (and ``key``) of every record."""
        parsed = self.parsed
        return parsed.select(
            "file",
            "line",
            parsed.reason.isNull().alias("valid"),
            "partition",
            "event_time_ms",
            "arrival_time_ms",
            *(["key"] if self.with_key else []),
        ).toArrow()

    def quarantined(self) -> pa.Table:
        """``raw, reason, file, line`` of the invalid records."""
        rows = self.rows
        return rows.filter(rows.reason.isNotNull()).select("raw", "reason", "file", "line").toArrow()

    def aggregate(
        self, narrow: pa.Table, result: Any, window: WindowSpec, report: BatchReport, tick: float
    ) -> tuple[list[pa.Table], pa.Table, float]:
        """Partials of the on-time rows and the late rows in full (Spark labels them by thresholds)."""
        parsed = self.parsed
        valid = parsed.filter(parsed.reason.isNull())
        te = narrow.column("event_time_ms").to_numpy()
        late_expr = (
            late_expression(narrow, result.order, result.late, te, result.wm_at_arrival)
            if result.n_late
            else None
        )
        late_keys = None
        if result.n_late and late_expr is None:
            keys = narrow.select(["file", "line"]).filter(pa.array(result.late))
            late_keys = arrow_frame(self.spark, keys)
        on_time = valid
        if late_expr is not None:
            on_time = valid.filter(~late_expr)
        elif late_keys is not None:
            from pyspark.sql import functions as F

            on_time = valid.join(F.broadcast(late_keys), ["file", "line"], "left_anti")
        tick = report.mark("label", tick)
        # The late rows are collected while Spark aggregates the on-time ones: two jobs at once keep the
        # cores busy through each other's scheduling gaps.
        late_rows = self.pool.submit(_collect_late, valid, late_expr, late_keys) if result.n_late else None
        partials = window_partials(on_time, window).toArrow()
        tick = report.mark("partials", tick)
        late = late_rows.result() if late_rows is not None else LATE_SCHEMA.empty_table()
        tick = report.mark("late", tick)
        return [partials], late, tick


def _collect_late(valid: Any, late_expr: Any, late_keys: Any) -> pa.Table:
    cols = ["event_id", "key", "partition", "event_time_ms", "arrival_time_ms", "value", "file", "line"]
    if late_expr is not None:
        return valid.filter(late_expr).select(*cols).toArrow()
    return valid.join(late_keys, ["file", "line"], "inner").select(*cols).toArrow()


class ArrowRows:
    """A clean JSON batch on the Arrow path (:mod:`jobs.stream.workers.arrow_path`), after its first pass."""

    path = "arrow"

    def __init__(
        self, rdd: Any, checks: RecordChecks, job: str, batch_id: int, narrow: pa.Table | None
    ) -> None:
        self.rdd, self.checks, self.job, self.batch_id = rdd, checks, job, batch_id
        self._narrow = narrow
        self.collect_seconds = 0.0  # the first pass, before the handler's phases start

    def narrow(self) -> pa.Table:
        """``file, line, valid, partition, event_time_ms, arrival_time_ms`` of every record (all valid)."""
        narrow = self._narrow
        if narrow is None:
            return NARROW_SCHEMA.empty_table()
        return narrow.add_column(2, "valid", pa.array(np.ones(narrow.num_rows, bool)))

    def quarantined(self) -> pa.Table:
        """Never called: a batch on the Arrow path has no invalid record."""
        msg = "a batch on the Arrow path has no invalid record"
        raise AssertionError(msg)

    def aggregate(
        self, narrow: pa.Table, result: Any, window: WindowSpec, report: BatchReport, tick: float
    ) -> tuple[list[pa.Table], pa.Table, float]:
        """Second pass: executors label rows by the stage's thresholds and aggregate the on-time ones."""
        te = narrow.column("event_time_ms").to_numpy()
        th = label_thresholds(te[result.order], result.late[result.order], result.wm_at_arrival)
        thresholds = LateThresholds.from_stage(narrow, result.order, th.starts, th.values)
        tick = report.mark("label", tick)
        partials, late, report.reparsed = run_aggregate(
            self.rdd, self.checks, self.job, self.batch_id, thresholds, window
        )
        tick = report.mark("partials", tick)
        return partials, late, tick


# -- the foreachBatch handler ----------------------------------------------------------------------------
@dataclass
class BatchReport:
    """What one micro-batch did (for the progress line and tests)."""

    batch_id: int
    rows: int = 0
    quarantined: int = 0
    late: int = 0
    fired: int = 0
    open_windows: int = 0
    watermark_ms: int = NO_WATERMARK
    config_version: int = 0
    seconds: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)  # seconds spent in each step
    reparsed: int = 0  # Arrow path: splits the second pass had to parse again
    path: str = ""  # "arrow" (JSON parsed by pyarrow in the executors) or "spark" (Spark's reader)
    stage_in: str = "driver"  # where the watermark stage ran: "driver" or "executors"
    driver_bytes: int = 0  # bytes of results the driver collected from the executors for the batch
    driver_cpu_s: float = 0.0  # CPU seconds of the driver's Python process for the batch
    reasons: dict[str, int] = field(default_factory=dict)  # quarantine rows by reason

    def mark(self, phase: str, since: float) -> float:
        """Add the time since ``since`` to ``phase``; returns now."""
        now = time.perf_counter()
        self.phases[phase] = self.phases.get(phase, 0.0) + now - since
        return now


class BatchHandler:
    """``foreachBatch`` target: runs the watermark stage and writes the tables for one micro-batch."""

    def __init__(self, spark: Any, options: JobOptions, metrics: JobMetrics | None = None) -> None:
        self.spark = spark
        self.options = options
        self.metrics = metrics
        app_id = options.app_id or checkpoint_app_id(options.checkpoint, options.output)
        self.tables = DeltaTables(options.output, app_id, spark)
        self._writers = ThreadPoolExecutor(max_workers=len(TABLES), thread_name_prefix="delta-writes")
        self.store = StageStore(options.checkpoint)
        self.pending = PendingRows(options.checkpoint)
        self._commit_lock = threading.Lock()  # a batch's commits against the flush when the query ends
        self.watcher = ConfigWatcher(options.config_path, options.config) if options.config_path else None
        self.reports: list[BatchReport] = []
        self._files: list[str] = []
        self._closed_until = NO_WATERMARK
        self._owners = OWNERS_SCHEMA.empty_table()  # partition-scoped mode: the partition owning each key
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="late-rows")
        # The Delta states a batch's appends check, computed from the end of the batch before, while Spark
        # ends it and plans the next (_prepare_states): the appends then skip the reconstruction.
        self._state_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="delta-state")
        self._state_ready: Future[None] | None = None
        self._prepare_group = f"jobs.stream.prepare.{id(self)}"
        self._closing = False
        self._numbers: RecordNumbers | None = None
        self._plans: dict[Any, list[list[Any]]] = {}  # validate()'s expressions, built once per run
        self._arrow_off = ""  # why the Arrow path is off for the rest of the run (empty: it is on)
        self._cpu0 = 0.0  # process CPU time at the start of the batch
        self._spill: Path | None = None  # the run's private folder for parsed splits (spill_folder)
        self._pinned: PipelineConfig | None = None  # without a watcher: the version a refusal rolled back to
        # Landing files: read exactly the files the source listed; set aside those that cannot be read.
        self._listed = ListedFiles(spark, options) if options.format not in ("rate", "kafka") else None
        self._unread = screen_files([])[1]  # this batch's files quarantined as files
        horizon = options.dedup_horizon_ms
        self._seen = SeenIds(options.checkpoint, horizon) if horizon is not None else None

    def _config(self) -> PipelineConfig:
        if self.watcher is None:
            return self._pinned or self.options.config
        change = self.watcher.poll()
        if change is not None and change.refused_reason:
            log.warning("configuration refused: %s", change.refused_reason)
            if self.metrics is not None:
                self.metrics.config_refused.inc()
        elif change is not None and change.applied is not None:
            log.warning("configuration version %d applies from the next batch", change.applied.version)
        return self.watcher.current

    def __call__(self, batch: Any, batch_id: int) -> None:
        """Process one micro-batch of landing files (idempotent per ``batch_id``)."""
        started = time.time()
        self._cpu0 = time.process_time()
        tick = time.perf_counter()
        if self._state_ready is None:  # else the batch before submitted it when its appends were done
            self._state_ready = self._state_pool.submit(self._prepare_states)
        ingest_ms, config = self.store.batch_meta(batch_id, self._config())
        saved = self.store.load_before(batch_id)
        if saved is None:
            watermark = PartitionedWatermark(
                config.strategy,
                config.params,
                idle_timeout_ms=config.idle_timeout_ms,
                mode=config.partition_mode,
            )
            open_windows, version = empty_partials(), config.version
            self._closed_until = NO_WATERMARK
            self._owners = OWNERS_SCHEMA.empty_table()
            open_before_dir = None
        else:
            watermark, open_windows, version = saved.watermark, saved.open_windows, saved.config_version
            self._closed_until = saved.closed_until_ms
            self._owners = saved.owners if saved.owners is not None else OWNERS_SCHEMA.empty_table()
            open_before_dir = saved.open_dir
        if saved is not None and (version != config.version or _differs(watermark, config)):
            watermark, config = self._reconfigure(batch_id, saved, config)
        opts = self.options
        if opts.format == "rate":
            files: list[str] | None = [RATE_FILE]
        elif opts.format == "kafka":
            if opts.timer:  # the timer source's row: it made the batch, it is not a record
                batch = batch.filter(batch["file"] != TIMER_FILE)
            files = kafka_batch_files(batch)
        else:
            files, self._unread = screen_files(logged_batch_files(opts.checkpoint, batch_id))
        if self.metrics is not None:
            self.metrics.batch_started(batch_id, oldest_input_ms(files, started))
        scoped = config.partition_mode == "scoped"
        in_executors = scoped and opts.format == "kafka" and opts.stage_in != "driver"
        if open_before_dir is not None and not in_executors:  # the last batch kept its windows in Spark
            open_windows = merge_partials(open_windows, read_open_windows(self.spark, open_before_dir))
            open_before_dir = None
        # The Arrow path collects no keys, which partition-scoped firing needs: Spark's reader then.
        arrow = None if scoped or self._seen is not None else self._arrow_rows(files, batch_id, ingest_ms)
        if arrow is not None:
            self._process(arrow, files, batch_id, ingest_ms, config, watermark, open_windows, started, tick)
            return
        if files is None:  # not in the source log (another source layout): ask Spark, at one more action
            uris = [r[0] for r in batch.select("file").distinct().collect()]
            files, self._unread = screen_files(landing_order((uri, modified_ms(uri)) for uri in uris))
        if self._listed is not None:
            batch = self._listed.frame(batch, files)
        records = number_records(batch, files)
        rows = validate(
            records,
            opts.fields,
            ingest_ms=ingest_ms,
            future_bound_ms=opts.future_bound_ms,
            max_field_bytes=opts.max_field_bytes,
            malformed="malformed_json" if opts.format == "kafka" else f"malformed_{opts.format}",
            reread_corrupt=opts.format in ("json", "kafka"),
            plans=self._plans,
        )
        if self._seen is not None:  # repeated event ids: duplicate_event_id
            rows = mark_duplicates(self.spark, rows, self._seen, batch_id)
        if in_executors:
            self._process_in_executors(
                rows,
                files,
                batch_id,
                ingest_ms,
                config,
                watermark,
                open_windows,
                open_before_dir,
                started,
                tick,
            )
            return
        # The typed columns are kept for the batch's few actions, so that the files are parsed once; the
        # quarantine action (only when the batch has invalid records) re-reads them for the raw text.
        parsed = rows.drop("raw").persist()
        try:
            source = SparkRows(self.spark, rows, parsed, self._pool, with_key=scoped)
            self._process(source, files, batch_id, ingest_ms, config, watermark, open_windows, started, tick)
        finally:
            parsed.unpersist()

    def _prepare_states(self) -> None:
        """Compute the Delta states the next batch's appends will check, before it needs them.

        ``aggregates`` always; the deferred tables too when that batch completes ``--defer-batches``. Its
        Spark jobs run in their own job group, which :meth:`close` cancels: the query ended, no batch
        needs them.
        """
        if self._closing:
            return
        if self.spark is not None:
            try:
                self.spark.sparkContext.setJobGroup(self._prepare_group, "Delta states for the next appends")
            except Exception as exc:  # noqa: BLE001 - an optimisation only: the appends compute the states
                log.debug("no Delta states prepared ahead: %s", exc)
                return
        tables = ["aggregates"]
        try:
            if len(self.pending.batches()) + 1 >= self.options.defer.batches:
                tables += DEFERRED_TABLES
        except CheckpointError:
            pass  # the batch itself reports it
        for table in tables:
            if self._closing:
                return
            self.tables.prepare_state(table)

    def spill_folder(self) -> Path:
        """The run's private folder for the Arrow path's parsed splits (made at first use; see spill_dir)."""
        if self._spill is None:
            conf = (
                self.spark.sparkContext.getConf().get("spark.local.dir") if self.spark is not None else None
            )
            self._spill = spill_dir(conf)
        return self._spill

    def close(self) -> None:
        """Remove the run's spill folder (here; elsewhere the second pass deletes what it takes).

        The Delta states prepared for a batch that will not come are dropped: not started, or their Spark
        jobs cancelled.
        """
        self._closing = True
        if self._state_ready is not None and not self._state_ready.cancel():
            if self.spark is not None:
                self.spark.sparkContext.cancelJobGroup(self._prepare_group)
            wait([self._state_ready])
        self._state_ready = None
        if self._spill is not None:
            shutil.rmtree(self._spill, ignore_errors=True)

    def _reconfigure(
        self, batch_id: int, saved: SavedStage, config: PipelineConfig
    ) -> tuple[PartitionedWatermark, PipelineConfig]:
        """The saved generators under the batch's new configuration version (and that version).

        When the new version fails to apply, it is refused and rolled back: the saved generators go on under
        the previous version, with a log line and ``awm_config_refused_total``.
        """
        try:
            watermark = saved.watermark.reconfigured(
                config.strategy,
                config.params,
                idle_timeout_ms=config.idle_timeout_ms,
                mode=config.partition_mode,
            )
        except Exception as exc:  # noqa: BLE001 - any failure of a new version refuses it
            previous = saved.config
            if previous is None or previous.version != saved.config_version:
                raise
            reason = (
                f"version {config.version} failed to apply at batch {batch_id} "
                f"({type(exc).__name__}: {str(exc)[:300]}); rolled back to version {previous.version}"
            )
            log.warning("configuration refused: %s", reason)
            if self.metrics is not None:
                self.metrics.config_refused.inc()
            self.store.repin(batch_id, previous)  # a replay of this batch runs the previous version too
            if self.watcher is not None:
                self.watcher.roll_back(previous, reason)
            else:
                self._pinned = previous
            return saved.watermark, previous
        log.warning(
            "batch %d: configuration version %d in force (was %d)",
            batch_id,
            config.version,
            saved.config_version,
        )
        return watermark, config

    def _arrow_rows(self, files: list[str] | None, batch_id: int, ingest_ms: int) -> ArrowRows | None:
        """The batch on the Arrow path after its first pass, or None when Spark's reader must read it."""
        opts = self.options
        if opts.reader != "arrow" or opts.format != "json" or not files or self._arrow_off:
            return None
        names = list(vars(opts.fields).values())
        if len(set(names)) != len(names):
            return None  # a field name shared by two slots: the Spark path's typing rules apply
        paths = [listed_path(f) for f in files]  # the log's URIs are URL-encoded
        if any(p is None for p in paths):
            return None
        try:
            sizes = [os.path.getsize(p) for p in paths if p is not None]
        except OSError:
            return None
        f = opts.fields
        checks = RecordChecks(
            f.event_id,
            f.key,
            f.partition,
            f.event_time,
            f.arrival_time,
            f.value,
            ingest_ms=ingest_ms,
            future_bound_ms=opts.future_bound_ms,
            max_field_bytes=opts.max_field_bytes,
            spill=str(self.spill_folder()),
        )
        splits = plan_splits(
            [p for p in paths if p is not None], sizes, self.spark.sparkContext.defaultParallelism
        )
        rdd = splits_rdd(self.spark, splits)
        tick = time.perf_counter()
        try:
            collected = run_collect(rdd, splits, checks, opts.checkpoint, batch_id)
        except Exception as exc:  # the executors cannot run the Arrow path (say, no pyarrow there)
            self._arrow_off = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:300]}"
            log.warning(
                "the Arrow path failed (%s); this run reads JSON with Spark's reader from now on",
                self._arrow_off,
            )
            return None
        if not collected.clean:
            log.info("batch %d: %s; read with Spark's JSON reader", batch_id, collected.why)
            shutil.rmtree(self.spill_folder(), ignore_errors=True)  # this machine's kept splits
            return None
        rows = ArrowRows(rdd, checks, opts.checkpoint, batch_id, collected.narrow)
        rows.collect_seconds = time.perf_counter() - tick
        return rows

    def _process(
        self,
        source: SparkRows | ArrowRows,
        files: list[str],
        batch_id: int,
        ingest_ms: int,
        config: PipelineConfig,
        watermark: PartitionedWatermark,
        open_windows: pa.Table,
        started: float,
        prepared: float,
    ) -> None:
        opts = self.options
        tick = time.perf_counter()
        prepare = tick - prepared
        narrow_all = source.narrow()
        if narrow_all.column("file").null_count:
            msg = (
                f"batch {batch_id}: records whose landing file is not among the batch's files {files[:3]}..."
            )
            raise RuntimeError(msg)
        valid_mask = np.asarray(narrow_all.column("valid").to_numpy(zero_copy_only=False), dtype=bool)
        narrow = narrow_all.filter(pa.array(valid_mask)).drop_columns(["valid"])
        self._files = files
        self._numbers = RecordNumbers(
            narrow_all.column("file").to_numpy(), narrow_all.column("line").to_numpy()
        )
        report = BatchReport(batch_id=batch_id, rows=narrow_all.num_rows, config_version=config.version)
        report.phases["prepare"] = prepare - source.collect_seconds
        report.phases["collect"] = source.collect_seconds
        tick = report.mark("collect", tick)
        report.quarantined = int((~valid_mask).sum())
        rows_out: dict[str, Any] = {
            "quarantine": self._quarantine_rows(source, report.quarantined, batch_id, ingest_ms)
        }
        if self._unread.num_rows and opts.format not in ("rate", "kafka"):  # files quarantined as files
            unread = file_quarantine_rows(self._unread, batch_id, ingest_ms)
            rows_out["quarantine"] = pa.concat_tables([rows_out["quarantine"], unread])
            report.quarantined += unread.num_rows
        report.reasons = reason_counts(rows_out["quarantine"])
        tick = report.mark("quarantine", tick)

        scoped = config.partition_mode == "scoped"
        if narrow.num_rows:
            foreign, order = None, None
            if scoped:
                order = arrival_order(narrow)
                self._owners, foreign_sorted = claim(
                    self._owners,
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
            result = run_stage(watermark, narrow, config.straggler_ms, self._closed_until, foreign, order)
            tick = report.mark("stage", tick)
            partials, late, tick = source.aggregate(narrow, result, config.window, report, tick)
            if late.num_rows != result.n_late:
                msg = f"batch {batch_id}: {late.num_rows} late rows labelled, the stage found {result.n_late}"
                raise RuntimeError(msg)
            open_windows = merge_partials(open_windows, *partials)
            parts = np.asarray(narrow.column("partition").to_numpy(zero_copy_only=False), dtype=object)
            fired, open_windows = self._fire(
                watermark, open_windows, scoped, parts[result.order], result.wm_after, result.arrival_ms,
                opts.boundary_ms(ingest_ms), result.timeline, result.partition_timelines,
            )  # fmt: skip
            tick = report.mark("windows", tick)
            report.late = result.n_late
        else:
            result = None
            fired = flush(empty_partials())
            boundary = opts.boundary_ms(ingest_ms)
            if boundary is not None:  # no record, but time went on (the trigger's timer)
                none = np.empty(0, np.int64)
                fired, open_windows = self._fire(
                    watermark, open_windows, scoped, np.empty(0, object), none, none, boundary
                )
        rows_out["aggregates"] = aggregate_rows(fired, batch_id, config.version)
        report.driver_bytes = narrow_all.nbytes + sum(t.nbytes for t in rows_out.values())
        log_rows: list[dict[str, Any]] = []

        def deferred_rows() -> dict[str, Any]:
            """The deferred tables' rows (built while ``aggregates`` is appended)."""
            if result is None:
                return {}
            rows = {"late_events": self._late_rows(late, narrow, result, batch_id, ingest_ms)}
            counts = partition_counts(narrow, result)
            log_rows.extend(self._log_rows(watermark, counts, batch_id, config, ingest_ms))
            rows["watermark_log"] = pa.Table.from_pylist(log_rows, schema=WATERMARK_LOG_SCHEMA)
            if opts.arrival_history:
                ordered = narrow.take(pa.array(result.order))
                rows["arrivals"] = self._arrival_rows(ordered, batch_id, ingest_ms)
            report.driver_bytes += sum(t.nbytes for t in rows.values())
            return rows

        self._commit(
            rows_out,
            batch_id,
            ingest_ms,
            later=deferred_rows,
            meanwhile=lambda: self._save(batch_id, watermark, open_windows, config, scoped, None),
        )
        report.mark("write", tick)
        report.path = source.path
        report.fired = fired.num_rows
        report.open_windows = open_windows.num_rows
        report.watermark_ms = watermark.watermark_ms
        report.seconds = time.time() - started
        self._finish(report, lambda: observation(report, result, narrow, fired, log_rows, config))

    def _fire(
        self,
        watermark: PartitionedWatermark,
        open_windows: pa.Table,
        scoped: bool,
        parts: Any,
        wm_after: Any,
        arrival_ms: Any,
        boundary_ms: int | None,
        timeline: Timeline | None = None,
        partition_timelines: Mapping[Hashable, Timeline] | None = None,
    ) -> tuple[pa.Table, pa.Table]:
        """Fire what the batch's arrivals closed, then (wall clock) what time closed up to the boundary.

        A window's emit instant is the earliest ingestion-clock instant with ``W >= end``: a timer between
        arrivals (from ``timeline``: the combined one in min and global modes, the owner partition's own in
        partition-scoped mode), the arrival that raised the watermark, or the batch boundary when the
        clock's advance there did.
        """
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
            wm_after = np.maximum(wm_after, self._closed_until)
        if scoped:
            return fire_scoped(open_windows, self._owners, parts, wm_after, arrival_ms, partition_timelines)
        fired, still_open = fire(open_windows, wm_after, arrival_ms)
        if timeline is not None:
            fired = credit_timeline(fired, timeline)
        return fired, still_open

    def _commit(
        self,
        rows_out: dict[str, Any],
        batch_id: int,
        ingest_ms: int,
        later: Callable[[], dict[str, Any]] | None = None,
        meanwhile: Callable[[], None] | None = None,
    ) -> None:
        """Commit the batch's tables: ``aggregates`` and ``quarantine`` now, the deferred ones when due.

        One Spark job per table with rows, run side by side: each is a delta-spark append that Delta makes
        idempotent (txnAppId = the job's application id, txnVersion = the batch id). The rows of the
        deferred tables wait in the checkpoint (:mod:`jobs.stream.sinks.deferred`) and are committed, with
        those of the batches before, every ``--defer-batches`` batches or ``--defer-max-delay-ms``.

        While the appends run in Spark, the driver runs ``later`` (it builds the deferred tables' rows),
        puts the deferred rows in the checkpoint, then runs ``meanwhile`` (the batch's state is saved: a
        saved state never stands in for a batch's rows, since a batch run again starts from the state before
        it); then it waits for the appends and raises the first error.
        """
        policy = self.options.defer
        appends: list[Future[bool]] = []

        def submit(rows: Mapping[str, Any]) -> None:
            appends.extend(self._writers.submit(self.tables.append, t, d, batch_id) for t, d in rows.items())

        with self._commit_lock:
            if self._state_ready is not None:
                self._state_ready.result()
                self._state_ready = None
            try:
                submit({t: d for t, d in rows_out.items() if t not in DEFERRED_TABLES})
                deferred = {t: d for t, d in rows_out.items() if t in DEFERRED_TABLES}
                if later is not None:
                    deferred.update(later())
                due = False
                if policy.batches == 1 and not self.pending.batches():
                    submit(deferred)
                else:
                    self.pending.put(batch_id, ingest_ms, deferred)
                    due = self.pending.due(batch_id, ingest_ms, policy)
                    if due:
                        submit(self.pending.rows(self.spark, self.tables, batch_id))
                if meanwhile is not None:
                    meanwhile()
            except BaseException:
                wait(appends)  # (idempotent appends: the batch runs again)
                raise
            for future in appends:
                future.result()
            if due:
                self.pending.remove(batch_id)
            # The next batch's appends check the states these commits made: computed from now on, while
            # Spark ends this batch and plans the next (cores mostly idle), not while the next one is read.
            self._state_ready = self._state_pool.submit(self._prepare_states)

    def flush_deferred(self) -> int:
        """Commit every batch's deferred rows still in the checkpoint (the query ended); returns batches."""
        with self._commit_lock:
            pending = self.pending.batches()
            if not pending:
                return 0
            through = pending[-1].batch_id
            rows = self.pending.rows(self.spark, self.tables, through)
            self.tables.append_all(rows, through, self._writers)
            self.pending.remove(through)
            log.info("committed the deferred tables of %d batches, through batch %d", len(pending), through)
            return len(pending)

    def _save(
        self,
        batch_id: int,
        watermark: PartitionedWatermark,
        open_windows: pa.Table,
        config: PipelineConfig,
        scoped: bool,
        open_dir: str | None,
    ) -> None:
        self.store.save(
            batch_id,
            watermark,
            open_windows,
            config.version,
            self._closed_until,
            self._owners if scoped else None,
            open_dir=open_dir,
        )
        oldest = self.store.oldest_batch()
        if oldest is not None:
            prune_open_dirs(self.options.checkpoint, oldest)

    def _finish(self, report: BatchReport, observe: Any) -> None:
        report.driver_cpu_s = time.process_time() - self._cpu0
        self.reports.append(report)
        if self.metrics is not None:
            self.metrics.batch_done(observe())
        if self.options.progress:
            wm = "none" if report.watermark_ms == NO_WATERMARK else f"{report.watermark_ms}"
            log.info(  # bare: the text log format writes the line alone, like a progress line
                "batch %d: %s rows (%s reader, stage in %s), %s quarantined, %s late, %s windows fired, "
                "%s open, watermark %s, config v%d, %.2f s",
                report.batch_id,
                f"{report.rows:,}",
                report.path,
                report.stage_in,
                f"{report.quarantined:,}",
                f"{report.late:,}",
                f"{report.fired:,}",
                f"{report.open_windows:,}",
                wm,
                report.config_version,
                report.seconds,
                extra={"bare": True},
            )

    def _process_in_executors(
        self,
        rows: Any,
        files: list[str],
        batch_id: int,
        ingest_ms: int,
        config: PipelineConfig,
        watermark: PartitionedWatermark,
        open_windows: pa.Table,
        open_before_dir: str | None,
        started: float,
        prepared: float,
    ) -> None:
        """The batch with its stage in the executors : no row reaches the driver."""
        opts = self.options
        report = BatchReport(batch_id=batch_id, config_version=config.version, path="spark")
        report.stage_in = "executors"
        report.phases["prepare"] = time.perf_counter() - prepared
        self._files = files
        self._numbers = None
        outcome = run_in_executors(
            self.spark,
            rows.drop("raw"),
            watermark=watermark,
            owners=self._owners,
            config=config,
            floor_ms=self._closed_until,
            files=files,
            batch_id=batch_id,
            ingest_ms=ingest_ms,
            open_before=open_windows if open_windows.num_rows else None,
            open_before_dir=open_before_dir,
            checkpoint=opts.checkpoint,
            arrival_history=opts.arrival_history,
            phases=report.phases,
            boundary_ms=opts.boundary_ms(ingest_ms),
        )
        try:
            tick = time.perf_counter()
            self._owners = outcome.owners
            report.rows = outcome.valid + outcome.invalid
            report.quarantined = outcome.invalid
            report.late = outcome.late
            report.driver_bytes = outcome.driver_bytes
            rows_out: dict[str, Any] = dict(outcome.rows_out)
            if outcome.invalid:
                bad = rows.filter(rows.reason.isNotNull()).select("raw", "reason", "file", "line").toArrow()
                report.driver_bytes += bad.nbytes
                rows_out["quarantine"] = self._quarantine_table(bad, batch_id, ingest_ms)
                report.reasons = reason_counts(rows_out["quarantine"])
            tick = report.mark("quarantine", tick)
            log_rows = self._log_rows(watermark, outcome.per_partition, batch_id, config, ingest_ms)
            rows_out["watermark_log"] = pa.Table.from_pylist(log_rows, schema=WATERMARK_LOG_SCHEMA)
            self._commit(
                rows_out,
                batch_id,
                ingest_ms,
                meanwhile=lambda: self._save(
                    batch_id, watermark, empty_partials(), config, True, outcome.open_folder
                ),
            )
            report.mark("write", tick)
        finally:
            release(outcome)
        report.fired = outcome.fired
        report.open_windows = outcome.open_windows
        report.watermark_ms = watermark.watermark_ms
        report.seconds = time.time() - started

        def observe() -> BatchObservation:
            return BatchObservation(
                batch_id=batch_id,
                on_time=outcome.valid - outcome.late - outcome.stragglers,
                straggler=outcome.stragglers,
                late=outcome.late,
                quarantined=outcome.invalid,
                watermark_ms=report.watermark_ms,
                ingestion_clock_ms=outcome.ingestion_clock_ms,
                partitions=partition_states(log_rows),
                emit_latency_ms=outcome.emit_latency_ms,
                trigger_delay_ms=outcome.trigger_delay_ms,
                flushed_windows=0,
                open_windows=outcome.open_windows,
                quarantine_reasons=report.reasons,
                config_version=config.version,
                strategy=config.strategy,
                late_slo_pct=config.late_slo_pct,
            )

        self._finish(report, observe)

    def _record_keys(self, table: pa.Table) -> tuple[pa.Array, pa.Array]:
        """``(file path, record number)`` columns for the compact record keys of ``table``."""
        paths = pa.array(self._files, pa.string()).take(table.column("file").combine_chunks())
        if self.options.format == "kafka":  # a record's number is its offset in its partition
            return paths, table.column("line").combine_chunks().cast(pa.int64())
        assert self._numbers is not None
        return paths, pa.array(self._numbers.lookup(table.column("line").to_numpy()), pa.int64())

    def _quarantine_rows(
        self, source: SparkRows | ArrowRows, count: int, batch_id: int, ingest_ms: int
    ) -> pa.Table:
        if not count:
            return QUARANTINE_SCHEMA.empty_table()
        return self._quarantine_table(source.quarantined(), batch_id, ingest_ms)

    def _quarantine_table(self, bad: pa.Table, batch_id: int, ingest_ms: int) -> pa.Table:
        """``quarantine`` rows of the batch's invalid records (``raw, reason, file, line``)."""
        n = bad.num_rows
        paths, lines = self._record_keys(bad)
        return pa.table(
            {
                "raw": bad.column("raw"),
                "reason": bad.column("reason"),
                "file": paths,
                "line": lines,
                "batch_id": np.full(n, batch_id, np.int64),
                "ingested_at_ms": np.full(n, ingest_ms, np.int64),
            }
        )

    def _late_rows(
        self, late: pa.Table, narrow: pa.Table, result: Any, batch_id: int, ingest_ms: int
    ) -> pa.Table:
        if not late.num_rows:
            return LATE_SCHEMA.empty_table()
        cols = late.schema.names
        # The watermark each late row missed, by its record key (file, line): a Kafka record's line is its
        # offset, unique only within its partition (its file).
        rows = narrow.select(["file", "line"]).append_column("row", pa.array(np.arange(narrow.num_rows)))
        keys = late.select(["file", "line"]).append_column("at", pa.array(np.arange(late.num_rows)))
        found = keys.join(rows, ["file", "line"], join_type="left outer", use_threads=False).sort_by("at")
        if found.num_rows != late.num_rows or found.column("row").null_count:
            msg = "late rows that are not among the batch's records"
            raise RuntimeError(msg)
        wm = result.wm_missed[found.column("row").to_numpy()]
        te = late.column("event_time_ms").to_numpy()
        n = late.num_rows
        paths, lines = self._record_keys(late)
        return pa.table(
            {
                **{c: late.column(c) for c in cols[:6]},
                "watermark_ms": wm,
                "late_by_ms": wm - te,
                "file": paths,
                "line": lines,
                "batch_id": np.full(n, batch_id, np.int64),
                "reconciled": np.zeros(n, bool),
                "ingested_at_ms": np.full(n, ingest_ms, np.int64),
            }
        )

    def _arrival_rows(self, ordered: pa.Table, batch_id: int, ingest_ms: int) -> pa.Table:
        n = ordered.num_rows
        return pa.table(
            {
                "partition": ordered.column("partition"),
                "event_time_ms": ordered.column("event_time_ms"),
                "arrival_time_ms": ordered.column("arrival_time_ms"),
                "batch_id": np.full(n, batch_id, np.int64),
                "ingested_at_ms": np.full(n, ingest_ms, np.int64),
            }
        )

    def _log_rows(
        self,
        watermark: PartitionedWatermark,
        counts: dict[str, dict[str, int]],
        batch_id: int,
        config: PipelineConfig,
        ingest_ms: int,
    ) -> list[dict[str, Any]]:
        """One ``watermark_log`` row per partition; ``counts``: each partition's rows of the batch."""
        active = set(watermark.active_partitions())
        rows = []
        now = int(time.time() * 1000)
        for key, gen in watermark.generators.items():
            mine = counts.get(str(key), {})
            diag = gen.diagnostics()
            rows.append(
                {
                    "batch_id": batch_id,
                    "partition": str(key),
                    "partition_watermark_ms": gen.watermark_ms,
                    "global_watermark_ms": watermark.watermark_ms,
                    "max_event_time_ms": mine.get("max_te"),
                    "events": mine.get("events", 0),
                    "late": mine.get("late", 0),
                    "stragglers": mine.get("stragglers", 0),
                    "learned_delay_ms": diag.get("delay_ms"),
                    "sensitivity": diag.get("sensitivity"),
                    "drifts": diag.get("drifts"),
                    "holds_back": key == watermark.holdback_partition,
                    "active": key in active,
                    "strategy": config.strategy,
                    "config_version": config.version,
                    "ingested_at_ms": ingest_ms,
                    "processed_at_ms": now,
                }
            )
        return rows


def partition_counts(narrow: pa.Table, result: Any) -> dict[str, dict[str, int]]:
    """Each partition's rows of a batch on the driver path: events, late, stragglers, max event time."""
    encoded = narrow.column("partition").combine_chunks().dictionary_encode()
    part = encoded.indices.to_numpy()
    te = narrow.column("event_time_ms").to_numpy()
    out = {}
    for i, key in enumerate(encoded.dictionary.to_pylist()):
        mine = part == i
        out[str(key)] = {
            "events": int(mine.sum()),
            "late": int((result.late & mine).sum()),
            "stragglers": int(((result.classes == 1) & mine).sum()),
            "max_te": int(te[mine].max()),
        }
    return out


def partition_states(log_rows: list[dict[str, Any]]) -> list[PartitionState]:
    """The metrics' view of the ``watermark_log`` rows."""
    return [
        PartitionState(
            partition=row["partition"],
            watermark_ms=row["partition_watermark_ms"],
            learned_delay_ms=row["learned_delay_ms"],
            sensitivity=row["sensitivity"],
            drifts=row["drifts"],
            holds_back=row["holds_back"],
            active=row["active"],
        )
        for row in log_rows
    ]


def _differs(watermark: PartitionedWatermark, config: PipelineConfig) -> bool:
    """Whether the generators are not those of ``config`` (a restart with other flags, same version)."""
    return bool(
        watermark.mismatch(
            config.strategy, config.params, idle_timeout_ms=config.idle_timeout_ms, mode=config.partition_mode
        )
    )


def observation(
    report: BatchReport,
    result: Any,
    narrow: pa.Table,
    fired: pa.Table,
    log_rows: list[dict[str, Any]],
    config: PipelineConfig,
) -> BatchObservation:
    """What the metrics need from a finished batch (every row in exactly one outcome)."""
    on_time = straggler = 0
    ingestion_clock = NO_WATERMARK
    if result is not None:
        straggler = result.n_stragglers
        on_time = narrow.num_rows - result.n_late - straggler
        if result.arrival_ms.size:
            ingestion_clock = int(result.arrival_ms[-1])
    by_watermark = ~np.asarray(fired.column("flushed").to_numpy(zero_copy_only=False), dtype=bool)
    partitions = partition_states(log_rows)
    return BatchObservation(
        batch_id=report.batch_id,
        on_time=on_time,
        straggler=straggler,
        late=report.late,
        quarantined=report.quarantined,
        quarantine_reasons=report.reasons,
        watermark_ms=report.watermark_ms,
        ingestion_clock_ms=ingestion_clock,
        partitions=partitions,
        emit_latency_ms=fired.column("emit_latency_ms").to_numpy(zero_copy_only=False)[by_watermark].tolist(),
        trigger_delay_ms=fired.column("trigger_delay_ms")
        .to_numpy(zero_copy_only=False)[by_watermark]
        .tolist(),
        flushed_windows=int((~by_watermark).sum()),
        open_windows=report.open_windows,
        config_version=config.version,
        strategy=config.strategy,
        late_slo_pct=config.late_slo_pct,
        idle_timeout_ms=config.idle_timeout_ms,
    )


def aggregate_rows(fired: pa.Table, batch_id: int, version: int) -> pa.Table:
    """Rows of the ``aggregates`` table for windows fired (or flushed) by batch ``batch_id``."""
    n = fired.num_rows
    now = int(time.time() * 1000)
    return (
        pa.table(
            {
                **{name: fired.column(name) for name in fired.schema.names},
                "revision": np.zeros(n, np.int64),
                "late_count": np.zeros(n, np.int64),
                "reconciled_batch_id": pa.nulls(n, pa.int64()),
                "batch_id": np.full(n, batch_id, np.int64),
                "config_version": np.full(n, version, np.int64),
                "emitted_at_ms": np.full(n, now, np.int64),
            }
        )
        .select(AGGREGATES_SCHEMA.names)
        .cast(AGGREGATES_SCHEMA)
    )
