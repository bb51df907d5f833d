"""The backfill's plan: what a run reads, and which late rows it folds into which windows now.

A run of :mod:`jobs.batch.backfill` reads, with ``deltalake`` and filtered at the files
(:func:`read_inputs`), the unreconciled late events of the stream's batches up to the newest one ingested
before the interval's end, the stream's horizon (:func:`stream_horizon`) and the aggregates rows of the
windows the late rows fall in. Spark then classifies each late row in each window that holds it
(:func:`classify`: folded already, fold now, or deferred while the window is open), sums the rows to fold
per window (:func:`late_partials`), and picks the late rows every window of which has folded them
(:func:`rows_to_mark`); :func:`corrected_rows` computes the aggregates rows after the fold. :func:`plan`
does all of it; the commits are :mod:`jobs.batch.backfill_commit`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from jobs.common.reads import open_delta, read_delta
from jobs.common.schemas import AGGREGATES_SCHEMA
from jobs.common.session import arrow_frame
from jobs.common.windows import assign_windows
from watermark.windowspec import WindowSpec

#: A window's identity in ``aggregates``.
WINDOW = ["key", "window_start_ms", "window_end_ms"]
#: The columns of ``late_events`` a run reads.
LATE_COLUMNS = ["key", "event_time_ms", "value", "file", "line", "batch_id", "ingested_at_ms"]
#: A late row's identity in ``late_events`` (record ids are unique within a batch).
ROW_ID = ["batch_id", "file", "line"]


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
        .groupBy(*WINDOW)
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
        classified.groupBy(*ROW_ID)
        .agg(done.alias("_done"), F.min("event_time_ms").alias("event_time_ms"))
        .filter("_done = 1")
        .select(*ROW_ID, "event_time_ms")
    )


def corrected_rows(partials: pa.Table, current: pa.Table, now_ms: int) -> pa.Table:
    """The aggregates rows after folding ``partials`` into ``current`` (rows of the same windows).

    Examples
    --------
    >>> import pyarrow as pa
    >>> from jobs.common.schemas import AGGREGATES_SCHEMA
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
    renamed = cur.rename_columns([n if n in WINDOW else f"cur_{n}" for n in cur.schema.names])
    joined = partials.join(renamed, keys=WINDOW, join_type="left outer", use_threads=False)
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
        stats = read_delta(dt, path, ["trigger_watermark_ms", "window_end_ms", "flushed"])
        return horizon(stats)
    trig = pc.max(maxima).as_py()
    # only a flushed window ending past the highest trigger watermark moves the horizon; the files whose
    # window ends are all below it are skipped by their statistics, unopened
    beyond = pc.field("flushed") == pa.scalar(True)
    if trig is not None:
        beyond = beyond & (pc.field("window_end_ms") > pa.scalar(trig, pa.int64()))
    flushed = read_delta(dt, path, ["window_end_ms"], beyond)
    ends = pc.max(flushed.column("window_end_ms")).as_py() if flushed.num_rows else None
    values = [v for v in (trig, ends) if v is not None]
    return max(values) if values else None


def open_table(path: str) -> DeltaTable | None:
    """The Delta table at ``path`` (a path or URI; delta-rs), or None when there is none."""
    return open_delta(path)


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
    unreconciled = read_delta(late_dt, late_path, LATE_COLUMNS, pc.field("reconciled") == pa.scalar(False))
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
    current = read_delta(agg_dt, agg_path, list(AGGREGATES_SCHEMA.names), span, days=(lo, hi))
    return late, wm_horizon, current


def plan(
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
    late_df = arrow_frame(spark, late.select(["key", "event_time_ms", "value", *ROW_ID]))
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
