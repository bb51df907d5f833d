"""Late-data backfill: fold late events into the aggregates, exactly once (a Spark application).

The streaming job writes a late row to ``late_events`` and emits its window without it. This job, run
hourly by ``dags/late_data_backfill.py`` through ``spark-submit``, corrects the aggregates for a data
interval ``[start, end)``:

1. **Read.** Late events not yet reconciled, of the stream's batches up to the newest one ingested before
   ``end`` (batches, not clock times, bound the set, so a clock step cannot skip a row), and the
   aggregates rows of the windows they fall in; both with ``deltalake``.
2. **Classify** (Spark). Each late row, in each window that holds it, is *folded now* when the window
   is closed and the row's batch is newer than the last batch already folded into the window
   (``reconciled_batch_id``), *already folded* when it is not newer, and *deferred* while the window is
   still open. A window is closed when the stream emitted it, or when its end is at or below the
   stream's horizon: the highest trigger watermark in the aggregates, or the end of a window flushed at
   the end of input. A late row can fall in a window that is still open (``te < W < end``): it waits
   for a later run, so the streaming job never emits a window the backfill already inserted.
3. **MERGE** the corrected rows into ``aggregates`` in one Delta commit (delta-spark's
   ``DeltaTable.forPath(spark, ...).merge``): count and sum add, min and max combine, ``late_count`` grows
   by the rows folded, ``revision`` + 1 and ``reconciled_batch_id`` = the newest batch folded. A window
   with late rows only is inserted with revision 1 (its trigger columns null).
4. **Mark** late events ``reconciled`` once every window holding them has folded their batch (a second
   delta-spark MERGE, into ``late_events``).

Exactly once. The only state, ``reconciled_batch_id``, changes in the same commit as the values. A crash
between steps 3 and 4 leaves rows unmarked that are *already folded*: the next run marks them without
folding them again. Concurrency: open-source Delta checks a MERGE at Serializable isolation, so a
streaming append that commits between the MERGE's read and its commit makes the MERGE fail with a
concurrent-modification error; the MERGE is retried (the append never is: it committed), so a backfill
and the running stream both commit and no write is lost. Another backfill is caught two ways: each
corrected row is written only if its window still has the ``revision`` this run read (compare-and-set; a
window to insert must still be absent), and Delta's own conflict check (``ConcurrentAppendException``
and its kin) refuses overlapping rewrites. Either way the run is recomputed from fresh snapshots, with
exponential backoff and jitter. Re-running an interval
changes nothing: every row it would fold is already folded and marked, and no commit is made.

The commits carry the run in their ``userMetadata`` (``awm.backfill.interval``, ``awm.backfill.run_id``).
Writers from different Spark applications on one table need a LogStore that makes commits mutually
exclusive on the storage (HDFS and ADLS do; S3 needs Delta's DynamoDB LogStore; a local disk is safe within
one application only); docs/deployment.md.

Run it with ``spark-submit jobs/batch/backfill.py --tables DIR --interval-start ISO --interval-end ISO`` or
``python -m jobs.batch.backfill ...`` (local Spark); it prints its report as JSON (``--report FILE`` keeps
it).
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import random
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

if __package__ in (None, ""):  # run as a file by spark-submit: make the project importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from deltalake import DeltaTable  # noqa: E402
from deltalake.exceptions import TableNotFoundError  # noqa: E402

from jobs.common.schemas import AGGREGATES_SCHEMA, PARTITIONS  # noqa: E402
from jobs.common.session import arrow_frame  # noqa: E402
from jobs.common.tables import day_of, read_delta  # noqa: E402
from jobs.common.windows import assign_windows  # noqa: E402
from watermark.config import ConfigError, load_config  # noqa: E402
from watermark.evaluate import WindowSpec  # noqa: E402

log = logging.getLogger(__name__)

#: Columns the MERGE changes on a window the stream emitted; the others (trigger watermark, latencies,
#: batch, configuration version) keep what the stream wrote when it fired the window.
UPDATED = ("count", "sum", "min", "max", "revision", "late_count", "reconciled_batch_id")
_WINDOW = ["key", "window_start_ms", "window_end_ms"]
_LATE_COLUMNS = ["key", "event_time_ms", "value", "file", "line", "batch_id", "ingested_at_ms"]
#: A late row's identity in ``late_events`` (record ids are unique within a batch).
_ROW_ID = ["batch_id", "file", "line"]


@dataclass(frozen=True)
class BackfillOptions:
    """One backfill run: the tables, the data interval and the window spec of the aggregates."""

    tables: str
    start_ms: int
    end_ms: int
    window: WindowSpec
    max_retries: int = 10
    backoff_s: float = 0.2
    run_id: str | None = None

    def __post_init__(self) -> None:
        if self.end_ms <= self.start_ms:
            msg = f"the interval is empty: end {self.end_ms} <= start {self.start_ms} (epoch ms)"
            raise ValueError(msg)


@dataclass
class BackfillReport:
    """What a run did (printed as JSON, kept with ``--report``, pushed as metrics by the DAG)."""

    interval_start_ms: int
    interval_end_ms: int
    run_id: str | None = None
    late_events_read: int = 0  # unreconciled late rows of batches up to ``through_batch``
    late_events_in_interval: int = 0  # of which ingested within the interval
    through_batch: int | None = None  # newest stream batch ingested before the interval's end
    folded_events: int = 0  # late rows folded into a window in this run
    corrected_windows: int = 0  # windows updated (revision + 1)
    inserted_windows: int = 0  # windows with late rows only, inserted
    deferred_events: int = 0  # late rows whose window is still open
    reconciled_events: int = 0  # late rows marked reconciled
    attempts: int = 0  # plans computed (> 1 after another backfill changed the windows read)
    conflicts: list[str] = field(default_factory=list)  # each write conflict or stale read, retried
    aggregates_version: int | None = None
    late_events_version: int | None = None
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


class BackfillError(RuntimeError):
    """The backfill cannot run (missing tables, conflicts that do not resolve); the message says why."""


# -- pure transformations --------------------------------------------------------------------------------
def classify(late: Any, windows: Any, window: WindowSpec, horizon_ms: int | None) -> Any:
    """Spark: each late row in each window holding it, with ``status`` folded / fold / deferred.

    ``late`` has the late rows (``key``, ``event_time_ms``, ``value``, ``batch_id``, ``file``, ``line``);
    ``windows`` the aggregates' windows they may fall in (``key``, ``window_start_ms``,
    ``reconciled_batch_id``). ``horizon_ms`` is the stream's horizon (None: nothing closed yet).
    """
    from pyspark.sql import functions as F

    framed = assign_windows(late, window).withColumn(
        "window_end_ms", F.col("window_start_ms") + F.lit(window.window_ms)
    )
    known = windows.select(
        "key", "window_start_ms", F.coalesce("reconciled_batch_id", F.lit(-1)).alias("_through")
    ).withColumn("_emitted", F.lit(True))
    joined = framed.join(F.broadcast(known), on=["key", "window_start_ms"], how="left")
    emitted = F.coalesce(F.col("_emitted"), F.lit(False))
    closed = emitted | (
        F.col("window_end_ms") <= F.lit(horizon_ms) if horizon_ms is not None else F.lit(False)
    )
    status = (
        F.when(emitted & (F.col("batch_id") <= F.col("_through")), "folded")
        .when(closed, "fold")
        .otherwise("deferred")
    )
    return joined.withColumn("status", status).drop("_through", "_emitted")


def late_partials(classified: Any) -> Any:
    """Spark: per window, the late rows to fold now: count, sum, min, max and the newest batch."""
    from pyspark.sql import functions as F

    return (
        classified.filter(F.col("status") == "fold")
        .groupBy(*_WINDOW)
        .agg(
            F.count(F.lit(1)).alias("count"),
            F.sum("value").alias("sum"),
            F.min("value").alias("min"),
            F.max("value").alias("max"),
            F.max("batch_id").alias("reconciled_batch_id"),
        )
    )


def rows_to_mark(classified: Any) -> Any:
    """Spark: late rows every window of which has folded (or folds now) their batch."""
    from pyspark.sql import functions as F

    done = F.min(F.when(F.col("status") == "deferred", 0).otherwise(1))
    return (
        classified.groupBy(*_ROW_ID)
        .agg(done.alias("_done"), F.min("event_time_ms").alias("event_time_ms"))
        .filter("_done = 1")
        .select(*_ROW_ID, "event_time_ms")
    )


def corrected_rows(partials: pa.Table, current: pa.Table, now_ms: int) -> pa.Table:
    """The aggregates rows after folding ``partials`` into ``current`` (rows of the same windows).

    Examples
    --------
    >>> import pyarrow as pa
    >>> from jobs.common.tables import AGGREGATES_SCHEMA
    >>> cur = pa.Table.from_pylist([{"key": "k", "window_start_ms": 0, "window_end_ms": 10, "count": 2,
    ...     "sum": 3.0, "min": 1.0, "max": 2.0, "trigger_watermark_ms": 12, "revision": 0, "late_count": 0,
    ...     "batch_id": 4, "flushed": False}], schema=AGGREGATES_SCHEMA)
    >>> late = pa.Table.from_pylist([
    ...     {"key": "k", "window_start_ms": 0, "window_end_ms": 10, "count": 1, "sum": 9.0, "min": 9.0,
    ...      "max": 9.0, "reconciled_batch_id": 6},
    ...     {"key": "j", "window_start_ms": 0, "window_end_ms": 10, "count": 1, "sum": 0.5, "min": 0.5,
    ...      "max": 0.5, "reconciled_batch_id": 5}])
    >>> rows = corrected_rows(late, cur, now_ms=99).sort_by("key").to_pylist()
    >>> [(r["key"], r["count"], r["sum"], r["min"], r["max"], r["revision"], r["late_count"],
    ...   r["reconciled_batch_id"], r["trigger_watermark_ms"]) for r in rows]
    [('j', 1, 0.5, 0.5, 0.5, 1, 1, 5, None), ('k', 3, 12.0, 1.0, 9.0, 1, 1, 6, 12)]

    """
    if not partials.num_rows:
        return AGGREGATES_SCHEMA.empty_table()
    cur = current.select(AGGREGATES_SCHEMA.names)
    renamed = cur.rename_columns([n if n in _WINDOW else f"cur_{n}" for n in cur.schema.names])
    joined = partials.join(renamed, keys=_WINDOW, join_type="left outer", use_threads=False)
    emitted = pc.is_valid(joined.column("cur_count"))

    def cur(name: str, default: Any) -> Any:
        return pc.fill_null(joined.column(f"cur_{name}"), default)

    def kept(name: str, default: Any) -> Any:
        column = joined.column(f"cur_{name}")
        return column if default is None else pc.if_else(emitted, column, default)

    late_count = joined.column("count")
    columns: dict[str, Any] = {
        "key": joined.column("key"),
        "window_start_ms": joined.column("window_start_ms"),
        "window_end_ms": joined.column("window_end_ms"),
        "count": pc.add(cur("count", 0), late_count),
        "sum": pc.add(cur("sum", 0.0), joined.column("sum")),
        "min": pc.min_element_wise(joined.column("cur_min"), joined.column("min")),
        "max": pc.max_element_wise(joined.column("cur_max"), joined.column("max")),
        "trigger_watermark_ms": kept("trigger_watermark_ms", None),
        "fire_arrival_ms": kept("fire_arrival_ms", None),
        "trigger_delay_ms": kept("trigger_delay_ms", None),
        "emit_latency_ms": kept("emit_latency_ms", None),
        "flushed": kept("flushed", False),
        "revision": pc.add(cur("revision", 0), 1),
        "late_count": pc.add(cur("late_count", 0), late_count),
        "reconciled_batch_id": joined.column("reconciled_batch_id"),
        "batch_id": pc.if_else(emitted, joined.column("cur_batch_id"), joined.column("reconciled_batch_id")),
        "config_version": kept("config_version", None),
        "emitted_at_ms": pc.if_else(emitted, joined.column("cur_emitted_at_ms"), pa.scalar(now_ms)),
    }
    return pa.table(columns).select(AGGREGATES_SCHEMA.names).cast(AGGREGATES_SCHEMA)


def horizon(aggregates: pa.Table) -> int | None:
    """The stream's horizon in ``aggregates``: highest trigger watermark or end of a flushed window."""
    trig = pc.max(aggregates.column("trigger_watermark_ms")).as_py()
    flushed = aggregates.filter(pc.fill_null(aggregates.column("flushed"), False))
    ends = pc.max(flushed.column("window_end_ms")).as_py() if flushed.num_rows else None
    values = [v for v in (trig, ends) if v is not None]
    return max(values) if values else None


# -- I/O ---------------------------------------------------------------------------------------------------
def stream_horizon(dt: DeltaTable, path: str) -> int | None:
    """:func:`horizon` of the ``aggregates`` table at ``path`` without reading its history.

    The highest trigger watermark comes from the Delta log's per-file statistics (``max``); only the
    flushed windows (few: the end of an input) that end past it are read, from the files whose statistics
    allow one. A file without statistics for the column falls back to reading the column.
    """
    actions = pa.table(dt.get_add_actions(flatten=True))
    column = "max.trigger_watermark_ms"
    if not actions.num_rows:
        return None
    if column not in actions.column_names:
        maxima, unknown = pa.array([], pa.int64()), True
    else:
        maxima = actions.column(column)
        nulls = actions.column("null_count.trigger_watermark_ms")
        # a file has statistics when its max is there or when every value is null
        known = pc.or_(pc.is_valid(maxima), pc.equal(nulls, actions.column("num_records")))
        unknown = not pc.all(pc.fill_null(known, False)).as_py()
    if unknown:
        stats = _read(dt, path, ["trigger_watermark_ms", "window_end_ms", "flushed"])
        return horizon(stats)
    trig = pc.max(maxima).as_py()
    # only a flushed window ending past the highest trigger watermark moves the horizon; the files whose
    # window ends are all below it are skipped by their statistics, unopened
    beyond = pc.field("flushed") == pa.scalar(True)
    if trig is not None:
        beyond = beyond & (pc.field("window_end_ms") > pa.scalar(trig, pa.int64()))
    flushed = _read(dt, path, ["window_end_ms"], beyond)
    ends = pc.max(flushed.column("window_end_ms")).as_py() if flushed.num_rows else None
    values = [v for v in (trig, ends) if v is not None]
    return max(values) if values else None


def _open(path: str) -> DeltaTable | None:
    try:
        return DeltaTable(path)
    except TableNotFoundError:
        return None


def _read(
    dt: DeltaTable,
    path: str,
    columns: list[str] | None = None,
    where: Any = None,
    days: tuple[int | None, int | None] | None = None,
) -> pa.Table:
    return read_delta(dt, path, columns, where, days)


def _partition_condition(spark: Any, path: str, table: str, lo_ms: int, hi_ms: int) -> str:
    """A MERGE condition on ``table``'s date partition for instants in ``[lo_ms, hi_ms]``.

    Empty when the table is not partitioned that way. Delta then reads, and checks for conflicts, only
    those partitions.
    """
    column = PARTITIONS[table][0]
    if column not in _spark_table(spark, path).toDF().columns:
        return ""
    return f" AND t.{column} >= DATE'{day_of(lo_ms)}' AND t.{column} <= DATE'{day_of(hi_ms)}'"


def run_backfill(
    spark: Any,
    options: BackfillOptions,
    *,
    before_commit: Callable[[int], None] | None = None,
    now_ms: Callable[[], int] | None = None,
) -> BackfillReport:
    """Fold the late events of ``options``' interval into the aggregates (module docstring).

    ``before_commit(attempt)`` runs after the reads and before the aggregates MERGE of each attempt (tests
    use it to force a write conflict). Raises :class:`BackfillError` when a table is missing or the
    MERGE still conflicts after ``max_retries`` retries.
    """
    clock = now_ms or (lambda: int(time.time() * 1000))
    started = time.perf_counter()
    report = BackfillReport(options.start_ms, options.end_ms, run_id=options.run_id)
    agg_path = os.path.join(options.tables, "aggregates")
    late_path = os.path.join(options.tables, "late_events")
    if _open(agg_path) is None:
        msg = (
            f"no Delta table at {agg_path}: run the streaming job (python -m jobs.stream --output "
            f"{options.tables}) before the backfill"
        )
        raise BackfillError(msg)
    if _open(late_path) is None:  # the job writes late_events with its first late row: nothing to fold yet
        log.info("no late_events table at %s: no late row to fold", late_path)
        report.aggregates_version = DeltaTable(agg_path).version()
        report.seconds = round(time.perf_counter() - started, 3)
        return report
    session = _session_for(spark, options)
    marks: pa.Table | None = None
    while True:
        report.attempts += 1
        agg_dt, late_dt = DeltaTable(agg_path), DeltaTable(late_path)
        plan = _plan(session, options, clock(), agg_dt, agg_path, late_dt, late_path, report)
        if plan is None:
            marks = None
            break
        corrected, current, marks = plan
        if before_commit is not None:
            before_commit(report.attempts)
        if not corrected.num_rows:
            break
        try:
            merge = functools.partial(_merge_aggregates, session, agg_path, corrected, current)
            _retrying("aggregates", merge, options, report.conflicts)
            break
        except _StaleRead as err:
            report.conflicts.append(str(err))
            if report.attempts > options.max_retries:
                msg = f"the aggregates still change under this run after {options.max_retries} retries: {err}"
                raise BackfillError(msg) from err
            delay = _backoff(options.backoff_s, report.attempts)
            log.warning("%s; recomputing in %.2f s", err, delay)
            time.sleep(delay)
    if marks is not None and marks.num_rows:
        mark = functools.partial(_mark_reconciled, session, late_path, marks)
        report.reconciled_events = _retrying("late_events", mark, options, report.conflicts)
    report.aggregates_version = DeltaTable(agg_path).version()
    report.late_events_version = DeltaTable(late_path).version()
    report.seconds = round(time.perf_counter() - started, 3)
    return report


def read_inputs(
    options: BackfillOptions,
    agg_dt: DeltaTable,
    agg_path: str,
    late_dt: DeltaTable,
    late_path: str,
    report: BackfillReport,
) -> tuple[pa.Table, int | None, pa.Table] | None:
    """The run's reads, each filtered at the files; None when no late row waits.

    Returns the late rows to classify, the stream's horizon and the aggregates rows of their windows.
    Only unreconciled late rows are read, the horizon comes from the Delta log's statistics
    (:func:`stream_horizon`), and the aggregates from the date partitions the late rows' windows fall in:
    what a run holds in memory grows with the backlog of late rows, not with the tables' history.
    """
    unreconciled = _read(late_dt, late_path, _LATE_COLUMNS, pc.field("reconciled") == pa.scalar(False))
    before_end = unreconciled.filter(pc.field("ingested_at_ms") < options.end_ms)
    report.folded_events = report.corrected_windows = report.inserted_windows = 0
    report.deferred_events = 0
    if not before_end.num_rows:
        report.late_events_read = report.late_events_in_interval = 0
        report.through_batch = None
        return None
    through = int(pc.max(before_end.column("batch_id")).as_py())
    late = unreconciled.filter(pc.field("batch_id") <= through)
    report.through_batch = through
    report.late_events_read = late.num_rows
    in_interval = pc.field("ingested_at_ms") >= options.start_ms
    report.late_events_in_interval = late.filter(in_interval).num_rows

    te = late.column("event_time_ms")
    lo = int(pc.min(te).as_py()) - options.window.window_ms
    hi = int(pc.max(te).as_py())
    wm_horizon = stream_horizon(agg_dt, agg_path)
    span = (pc.field("window_start_ms") >= lo) & (pc.field("window_start_ms") <= hi)
    current = _read(agg_dt, agg_path, list(AGGREGATES_SCHEMA.names), span, days=(lo, hi))
    return late, wm_horizon, current


def _plan(
    spark: Any,
    options: BackfillOptions,
    now_ms: int,
    agg_dt: DeltaTable,
    agg_path: str,
    late_dt: DeltaTable,
    late_path: str,
    report: BackfillReport,
) -> tuple[pa.Table, pa.Table, pa.Table] | None:
    """Read both tables: the corrected rows, the rows they replace, the rows to mark; None: nothing to do."""
    inputs = read_inputs(options, agg_dt, agg_path, late_dt, late_path, report)
    if inputs is None:
        return None
    late, wm_horizon, current = inputs
    late_df = arrow_frame(spark, late.select(["key", "event_time_ms", "value", *_ROW_ID]))
    windows_df = arrow_frame(
        spark,
        current.select(["key", "window_start_ms", "reconciled_batch_id"])
        if current.num_rows
        else pa.table(
            {
                "key": pa.array([], pa.string()),
                "window_start_ms": pa.array([], pa.int64()),
                "reconciled_batch_id": pa.array([], pa.int64()),
            }
        ),
    )
    classified = classify(late_df, windows_df, options.window, wm_horizon).cache()
    try:
        partials = late_partials(classified).toArrow()
        marks = rows_to_mark(classified).toArrow()
        counts = {row["status"]: row["count"] for row in classified.groupBy("status").count().collect()}
    finally:
        classified.unpersist()
    corrected = corrected_rows(partials, current, now_ms)
    report.folded_events = int(counts.get("fold", 0))
    report.deferred_events = int(counts.get("deferred", 0))
    report.corrected_windows = corrected.num_rows
    # A window the job emitted holds on-time rows, so only an inserted one has late rows only.
    all_late = pc.equal(corrected.column("late_count"), corrected.column("count"))
    report.inserted_windows = int(pc.sum(all_late).as_py() or 0)
    return corrected, current, marks


class _StaleRead(RuntimeError):
    """Windows changed between the run's read and its MERGE (another backfill): recompute them."""


def _spark_table(spark: Any, path: str) -> Any:
    from delta.tables import DeltaTable as SparkDeltaTable

    return SparkDeltaTable.forPath(spark, path)


def _merge_aggregates(spark: Any, path: str, corrected: pa.Table, current: pa.Table) -> int:
    """MERGE the corrected rows into ``aggregates`` (delta-spark, one commit); returns the rows written.

    Each row is written only if its window is as this run read it (compare-and-set on ``revision``; a
    window to insert must still be absent). A window that another backfill changed in the meantime is left
    alone and :class:`_StaleRead` asks for a recomputation; the rows written are right either way, since
    each carries values computed from the revision it replaces. The streaming job's appends are blind
    appends, which Delta's WriteSerializable isolation lets commit beside the MERGE.
    """
    from pyspark.sql import functions as F

    read = current.select([*_WINDOW, "revision"]).rename_columns([*_WINDOW, "_read_revision"])
    source = corrected.join(read, keys=_WINDOW, join_type="left outer", use_threads=False)
    starts = corrected.column("window_start_ms")
    lo, hi = int(pc.min(starts).as_py()), int(pc.max(starts).as_py())
    condition = (
        "t.key = s.key AND t.window_start_ms = s.window_start_ms AND t.window_end_ms = s.window_end_ms"
        f" AND t.window_start_ms >= {lo} AND t.window_start_ms <= {hi}"
    ) + _partition_condition(spark, path, "aggregates", lo, hi)
    metrics = (
        _spark_table(spark, path)
        .alias("t")
        .merge(arrow_frame(spark, source).alias("s"), condition)
        .whenMatchedUpdate(
            condition="t.revision <=> s._read_revision", set={name: F.col(f"s.{name}") for name in UPDATED}
        )
        .whenNotMatchedInsert(
            condition="s._read_revision IS NULL",
            values={name: F.col(f"s.{name}") for name in AGGREGATES_SCHEMA.names},
        )
        .execute()
        .first()
    )
    written = int(metrics["num_updated_rows"]) + int(metrics["num_inserted_rows"])
    if written < corrected.num_rows:
        msg = (
            f"a concurrent backfill changed {corrected.num_rows - written} of {corrected.num_rows} windows "
            "since this run read them"
        )
        raise _StaleRead(msg)
    return written


def _backoff(base_s: float, attempt: int) -> float:
    """Seconds to wait before retry ``attempt`` (1, 2, ...): exponential, capped at 10 s, full jitter."""
    return random.uniform(0.0, min(10.0, base_s * 2.0 ** (attempt - 1)))


def _delta_conflicts() -> tuple[type[BaseException], ...]:
    """delta-spark's write-conflict exceptions (the captured classes derive from these, not from one base)."""
    from delta import exceptions as e

    return (
        e.DeltaConcurrentModificationException,
        e.ConcurrentWriteException,
        e.MetadataChangedException,
        e.ProtocolChangedException,
        e.ConcurrentAppendException,
        e.ConcurrentDeleteReadException,
        e.ConcurrentDeleteDeleteException,
        e.ConcurrentTransactionException,
    )


def _retrying(what: str, commit: Callable[[], int], options: BackfillOptions, conflicts: list[str]) -> int:
    """Run a MERGE ``commit``; again after a write conflict (backoff, jitter), at most ``max_retries`` times.

    Delta's optimistic concurrency refuses a MERGE when another commit added files it should have read:
    open-source Delta checks every table as ``Serializable``, so a streaming append to the same table
    refuses it too. Repeating the same MERGE is right: its compare-and-set conditions hold for any state.
    """
    attempt = 0
    while True:
        try:
            return commit()
        except _delta_conflicts() as err:
            attempt += 1
            conflicts.append(_first_line(err))
            if attempt > options.max_retries:
                msg = f"the {what} MERGE still conflicts after {options.max_retries} retries: {conflicts[-1]}"
                raise BackfillError(msg) from err
            delay = _backoff(options.backoff_s, attempt)
            log.warning("%s MERGE conflicted (%s); retrying in %.2f s", what, _first_line(err), delay)
            time.sleep(delay)


def _mark_reconciled(spark: Any, path: str, marks: pa.Table) -> int:
    """MERGE ``reconciled = true`` into the late rows in ``marks``; returns the rows marked."""
    from pyspark.sql import functions as F

    batches = marks.column("batch_id")
    lo, hi = int(pc.min(batches).as_py()), int(pc.max(batches).as_py())
    te = marks.column("event_time_ms")
    condition = (
        "t.batch_id = s.batch_id AND t.line = s.line AND coalesce(t.file, '') = coalesce(s.file, '')"
        f" AND t.batch_id >= {lo} AND t.batch_id <= {hi}"
    ) + _partition_condition(spark, path, "late_events", int(pc.min(te).as_py()), int(pc.max(te).as_py()))
    metrics = (
        _spark_table(spark, path)
        .alias("t")
        .merge(arrow_frame(spark, marks).alias("s"), condition)
        .whenMatchedUpdate(condition="NOT t.reconciled", set={"reconciled": F.lit(True)})
        .execute()
        .first()
    )
    return int(metrics["num_updated_rows"])


def _first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


def _session_for(spark: Any, options: BackfillOptions) -> Any:
    """A session of ``spark``'s application whose Delta commits carry the run in their ``userMetadata``.

    A child session: the setting must not reach the streaming job's commits when both share a driver.
    """
    session = spark.newSession()
    meta = {"awm.backfill.interval": f"{options.start_ms}..{options.end_ms}"}
    if options.run_id:
        meta["awm.backfill.run_id"] = options.run_id
    session.conf.set("spark.databricks.delta.commitInfo.userMetadata", json.dumps(meta, sort_keys=True))
    return session


# -- command line ----------------------------------------------------------------------------------------
def parse_instant(text: str) -> int:
    """Epoch milliseconds of an ISO-8601 instant with a time zone, or of an integer (epoch ms).

    >>> parse_instant("2026-11-22T10:00:00+00:00"), parse_instant("1500")
    (1795341600000, 1500)
    >>> parse_instant("2026-11-22T10:00:00")
    Traceback (most recent call last):
    ...
    ValueError: '2026-11-22T10:00:00' has no time zone; write e.g. 2026-11-22T10:00:00+00:00

    """
    if text.strip().lstrip("-").isdigit():
        return int(text)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        msg = f"{text!r} is neither an ISO-8601 instant nor epoch milliseconds"
        raise ValueError(msg) from None
    if when.tzinfo is None:
        msg = f"{text!r} has no time zone; write e.g. {text}+00:00"
        raise ValueError(msg)
    return int(when.timestamp() * 1000)


def build_parser() -> argparse.ArgumentParser:
    """The ``jobs/batch/backfill.py`` argument parser."""
    from watermark.cli import OneLineParser
    from watermark.clilog import entry_prog

    p = OneLineParser(prog=entry_prog("jobs/batch/backfill.py"), description=__doc__.split("\n", 1)[0])
    p.add_argument("--tables", required=True, help="the streaming job's --output (Delta tables)")
    p.add_argument("--interval-start", required=True, help="data interval start (ISO-8601 or epoch ms)")
    p.add_argument("--interval-end", required=True, help="data interval end, exclusive")
    p.add_argument("--config", help="the job's watermark configuration (its window spec is used)")
    p.add_argument("--window-ms", type=int, help="window length (without --config)")
    p.add_argument("--slide-ms", type=int, help="window slide (without --config; default: tumbling)")
    p.add_argument("--report", help="also write the report (JSON) to this file")
    p.add_argument("--run-id", help="recorded in the report and in the Delta commit")
    p.add_argument("--max-retries", type=int, default=10, help="retries of a conflicting MERGE")
    return p


def options_from_args(args: argparse.Namespace) -> BackfillOptions:
    """Validate the flags; raises ValueError or ConfigError with a one-line message."""
    if args.config:
        window = load_config(args.config).window
    elif args.window_ms:
        window = WindowSpec(args.window_ms, args.slide_ms)
    else:
        msg = "give --config (the job's configuration) or --window-ms"
        raise ValueError(msg)
    return BackfillOptions(
        tables=args.tables,
        start_ms=parse_instant(args.interval_start),
        end_ms=parse_instant(args.interval_end),
        window=window,
        max_retries=args.max_retries,
        run_id=args.run_id,
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point (``spark-submit jobs/batch/backfill.py`` or ``python -m jobs.batch.backfill``)."""
    from watermark.clilog import run_main

    return run_main(build_parser(), _run, argv, errors={BackfillError: 1})


def _run(args: argparse.Namespace) -> int:
    from jobs.common.session import run_reporting
    from watermark.clilog import usage_errors

    with usage_errors(ConfigError, ValueError):
        options = options_from_args(args)
    return run_reporting("jobs.batch.backfill", lambda spark: run_backfill(spark, options), args.report)


if __name__ == "__main__":
    sys.exit(main())
