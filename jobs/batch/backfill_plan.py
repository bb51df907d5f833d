"""The backfill's plan: what a run reads, and which late rows it folds into which windows now.

A run of :mod:`jobs.batch.backfill` reads, with ``deltalake`` and filtered at the files
(:func:`read_inputs`), the unreconciled late events of the stream's batches up to the newest one ingested
before the interval's end, the aggregates rows of the windows the late rows fall in, and, only for the
windows not among those rows, how far the stream has closed windows for good (:class:`Horizon`). Spark then
classifies each late row in each window that holds it (:func:`classify`: folded already, fold now, or
deferred while the window is open), sums the rows to fold per window (:func:`late_partials`), and picks the
late rows every window of which has folded them (:func:`rows_to_mark`); :func:`corrected_rows` computes the
aggregates rows after the fold. :func:`plan` does all of it; the commits are
:mod:`jobs.batch.backfill_commit`.

When a window is closed
-----------------------
The backfill may fold a late row into its window only once the stream will never emit that window again:
otherwise the stream emits it after the backfill inserted it, and the table holds two rows of one window.
A window is closed when

(a) it is in ``aggregates``: the stream emitted it (or a backfill inserted it), and a window the stream
    emitted is never re-opened (every partition's watermark is monotone, and kept as a floor across
    re-configurations); the backfill updates it as a new revision;
(b) its end is at or below the lowest watermark any live partition has (:func:`lowest_live_watermark`):
    each partition's latest ``partition_watermark_ms`` in ``watermark_log``, the minimum over partitions,
    leaving out a partition whose latest row has a null watermark (the stream writes one in the batch it
    evicts the partition: it holds no open window). In partition-scoped mode a key's windows fire by the
    watermark of the partition that owns it, which the backfill does not know (the owners live in the
    stream's checkpoint): the lowest watermark is below the owner's. In the other modes it is at most the
    global watermark the windows fire by. Only late rows of batches whose ``watermark_log`` rows are all
    committed, and whose ``aggregates`` rows are too (:func:`log_through_batch`), are closed this way: the
    owner of their key then has rows in ``watermark_log``, and a window the log says closed is in the
    aggregates this run reads if the stream emitted it;
(c) its end is at or below the end of a window flushed at the end of input (``flushed``): a flush closes
    every window, and the checkpoint keeps its end as a floor under every watermark.

Every other late row waits for a later run (``deferred_events``). ``watermark_log`` is read only when a
late row's window is neither in the aggregates nor closed by a flush, only its three columns, newest
batches first, a million rows at a time reduced to the latest row of each partition, and no further back
than needed: once a partition is seen below the lowest window end to decide, nothing can close.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from jobs.common.reads import open_delta, read_delta, table_path
from jobs.common.schemas import AGGREGATES_SCHEMA, WATERMARK_LOG_SCHEMA
from jobs.common.session import arrow_frame
from jobs.common.windows import assign_windows
from watermark.windowspec import WindowSpec

#: A window's identity in ``aggregates``.
WINDOW = ["key", "window_start_ms", "window_end_ms"]
#: The columns of ``late_events`` a run reads.
LATE_COLUMNS = ["key", "event_time_ms", "value", "file", "line", "batch_id", "ingested_at_ms"]
#: A late row's identity in ``late_events`` (record ids are unique within a batch).
ROW_ID = ["batch_id", "file", "line"]
#: The columns of ``watermark_log`` a run reads (only when a late row's window is not in the aggregates).
LOG_COLUMNS = ["partition", "batch_id", "partition_watermark_ms"]
LOG_SCHEMA = pa.schema([WATERMARK_LOG_SCHEMA.field(name) for name in LOG_COLUMNS])
#: About how many ``watermark_log`` rows are read at once (each read is reduced to a row per partition).
LOG_CHUNK_ROWS = 1_000_000


class DuplicateWindows(RuntimeError):
    """``aggregates`` holds two current rows of one window: the backfill folds into neither, and stops."""


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


@dataclass(frozen=True)
class Horizon:
    """How far the stream has closed windows for good, for windows not in the aggregates (module docstring).

    ``flushed_ms``: the end of the latest window flushed at the end of input (rule (c); None: none that
    decides a window). ``watermark_ms``: the lowest watermark of a live partition in ``watermark_log``
    through batch ``through_batch`` (rule (b); None: not read, or no live partition); it closes the windows
    of late rows of batches up to ``through_batch`` only.
    """

    flushed_ms: int | None = None
    watermark_ms: int | None = None
    through_batch: int | None = None


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
    flushed_until_ms: int | None = None  # end of the latest flushed window that decided a window (rule c)
    watermark_log_through_batch: int | None = None  # newest batch whose watermark_log rows counted (rule b)
    # lowest watermark of a live partition (None: not read; once below every window end to decide, the
    # older batches are not read and it is the lowest of the newer ones)
    lowest_watermark_ms: int | None = None
    reconciled_events: int = 0  # late rows marked reconciled
    attempts: int = 0  # plans computed (> 1 after another backfill changed the windows read)
    conflicts: list[str] = field(default_factory=list)  # each write conflict or stale read, retried
    aggregates_version: int | None = None
    late_events_version: int | None = None
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


def classify(late: Any, windows: Any, window: WindowSpec, horizon: Horizon) -> Any:
    """Spark: each late row in each window holding it, with ``status`` folded / fold / deferred.

    ``late`` has the late rows (``key``, ``event_time_ms``, ``value``, ``batch_id``, ``file``, ``line``);
    ``windows`` the aggregates' windows they may fall in (``key``, ``window_start_ms``,
    ``reconciled_batch_id``). A window is closed when it is among ``windows`` (rule (a) of the module
    docstring) or ``horizon`` closes it (rules (b) and (c)).
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
    end = F.col("window_end_ms")
    closed = emitted
    if horizon.flushed_ms is not None:
        closed = closed | (end <= F.lit(horizon.flushed_ms))
    if horizon.watermark_ms is not None and horizon.through_batch is not None:
        by_watermark = (F.col("batch_id") <= F.lit(horizon.through_batch)) & (
            end <= F.lit(horizon.watermark_ms)
        )
        closed = closed | by_watermark
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
    now_rows = current.select(AGGREGATES_SCHEMA.names)
    renamed = now_rows.rename_columns([n if n in WINDOW else f"cur_{n}" for n in now_rows.schema.names])
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


def check_unique_windows(rows: pa.Table, what: str) -> None:
    """Raise :class:`DuplicateWindows` when ``rows`` (of ``aggregates``) hold a window twice.

    A window has one current row. Two would have the backfill fold its late rows into both (doubling them)
    or fail its MERGE; the run stops instead and names them.
    """
    if rows.num_rows < 2:
        return
    counts = rows.group_by(WINDOW, use_threads=False).aggregate([("window_start_ms", "count")])
    twice = counts.filter(pc.field("window_start_ms_count") > 1)
    if not twice.num_rows:
        return
    shown = ", ".join(
        f"{r['key']!r} [{r['window_start_ms']}, {r['window_end_ms']}) x{r['window_start_ms_count']}"
        for r in twice.slice(0, 3).to_pylist()
    )
    msg = (
        f"{what} holds {twice.num_rows} window(s) more than once (two current rows of one key and window), "
        f"e.g. {shown}: the stream emitted a window after a backfill inserted it, or two jobs write the "
        "table. The backfill folds nothing into them; merge each window's rows into one (count and sum add, "
        "min and max combine) and run it again"
    )
    raise DuplicateWindows(msg)


def pending_windows(late: pa.Table, current: pa.Table, window: WindowSpec) -> pa.Table:
    """The windows of ``late`` rows not among ``current`` (aggregates rows): a row per late row and window.

    Columns ``key``, ``window_start_ms``, ``window_end_ms`` and the late row's ``batch_id``: what rules (b)
    and (c) of the module docstring decide (rule (a) closed the others).
    """
    te = late.column("event_time_ms").to_numpy()
    rows, starts = window.assign(te)
    index = pa.array(rows)
    framed = pa.table(
        {
            "key": pc.take(late.column("key"), index),
            "window_start_ms": pa.array(starts, pa.int64()),
            "batch_id": pc.take(late.column("batch_id"), index),
        }
    )
    known = current.select(["key", "window_start_ms"])
    missing = framed.join(known, keys=["key", "window_start_ms"], join_type="left anti", use_threads=False)
    ends = pc.add(missing.column("window_start_ms"), pa.scalar(window.window_ms, pa.int64()))
    return missing.append_column("window_end_ms", ends)


def flushed_until(dt: DeltaTable, path: str, from_ms: int, window: WindowSpec) -> int | None:
    """The end of the latest window flushed at the end of input that ends at or after ``from_ms`` (rule (c)).

    Only such a window decides whether a window ending at ``from_ms`` or later is closed: the data files whose
    windows all end before it are skipped by their statistics and date partitions, unopened.
    """
    where = (pc.field("flushed") == pa.scalar(True)) & (
        pc.field("window_end_ms") >= pa.scalar(from_ms, pa.int64())
    )
    rows = read_delta(dt, path, ["window_end_ms"], where, days=(from_ms - window.window_ms, None))
    top = pc.max(rows.column("window_end_ms")).as_py() if rows.num_rows else None
    return None if top is None else int(top)


def latest_rows(log: pa.Table) -> pa.Table:
    """The latest row of each partition among ``watermark_log`` rows (:data:`LOG_COLUMNS`).

    Of a partition's rows of one batch (there is one), the lowest watermark is kept, a null one only when
    all are null. The reduction is associative: the latest rows of a union are the latest rows of the
    parts' latest rows.

    >>> log = pa.table({"partition": ["a", "a", "b"], "batch_id": [1, 2, 1],
    ...                 "partition_watermark_ms": [5, 7, None]})
    >>> sorted(map(tuple, (r.values() for r in latest_rows(log).to_pylist())))
    [('a', 2, 7), ('b', 1, None)]
    """
    log = log.select(LOG_COLUMNS).cast(LOG_SCHEMA)
    if not log.num_rows:
        return log
    newest = log.group_by("partition", use_threads=False).aggregate([("batch_id", "max")])
    newest = newest.rename_columns(["partition", "batch_id"])
    at = log.join(newest, keys=["partition", "batch_id"], join_type="inner", use_threads=False)
    rows = at.group_by(["partition", "batch_id"], use_threads=False).aggregate(
        [("partition_watermark_ms", "min")]
    )
    return rows.rename_columns(LOG_COLUMNS).select(LOG_COLUMNS).cast(LOG_SCHEMA)


def lowest_live_watermark(log: pa.Table) -> int | None:
    """The lowest watermark a live partition has among ``watermark_log`` rows (rule (b), module docstring).

    Each partition's watermark is that of its latest row (watermarks are monotone per partition, so it is
    the highest of its rows); a partition whose latest row has a null watermark was evicted and holds no
    open window: it is left out. A live partition without a watermark yet has ``NO_WATERMARK`` (int64 min),
    which closes nothing. None when no partition is live (no row, or every partition evicted): a partition
    may come, so nothing is closed by it either.

    >>> from watermark.timeutil import NO_WATERMARK
    >>> log = pa.table({"partition": ["fast", "slow", "fast", "gone", "gone"], "batch_id": [1, 1, 2, 1, 2],
    ...                 "partition_watermark_ms": [5_000, 900, 6_000, 10, None]})
    >>> lowest_live_watermark(log)
    900
    >>> lowest_live_watermark(log.slice(3, 1)), lowest_live_watermark(log.slice(3))  # gone: 10, then evicted
    (10, None)
    """
    low = pc.min(latest_rows(log).column("partition_watermark_ms")).as_py()
    return None if low is None else int(low)


def log_ranges(
    dt: DeltaTable, through_batch: int, chunk_rows: int = LOG_CHUNK_ROWS
) -> list[tuple[int | None, int]]:
    """Batch ranges ``[lo, hi]`` of ``watermark_log`` up to ``through_batch``, newest first, ~``chunk_rows``.

    Cut at data files' lowest batch ids (the Delta log's statistics); the last range is open below (``lo``
    None). Without statistics, one range.
    """
    actions = pa.table(dt.get_add_actions(flatten=True))
    names = actions.column_names
    if not actions.num_rows or "min.batch_id" not in names or "num_records" not in names:
        return [(None, through_batch)]
    files = sorted(
        (
            (int(low), int(n or 0))
            for low, n in zip(
                actions.column("min.batch_id").to_pylist(),
                actions.column("num_records").to_pylist(),
                strict=True,
            )
            if low is not None and low <= through_batch
        ),
        reverse=True,
    )
    ranges: list[tuple[int | None, int]] = []
    hi, rows = through_batch, 0
    for low, n in files:
        rows += n
        if rows >= chunk_rows and low <= hi:
            ranges.append((low, hi))
            hi, rows = low - 1, 0
    ranges.append((None, hi))
    return ranges


def read_lowest_live_watermark(
    dt: DeltaTable, path: str, through_batch: int, below_ms: int, chunk_rows: int = LOG_CHUNK_ROWS
) -> int | None:
    """:func:`lowest_live_watermark` of the ``watermark_log`` rows of batches up to ``through_batch``.

    Reads :data:`LOG_COLUMNS` only, newest batches first, about ``chunk_rows`` rows at a time
    (:func:`log_ranges`), each reduced to the latest row of each partition (:func:`latest_rows`) before the
    next: memory grows with the partitions, not the history. A partition seen in the batches read has its
    latest row among them; one not seen can only lower the minimum. So once the minimum is below
    ``below_ms`` (the lowest end of a window to decide), older batches are not read: it is returned as it
    is, since no window is closed by it either way.
    """
    latest = LOG_SCHEMA.empty_table()
    for lo, hi in log_ranges(dt, through_batch, chunk_rows):
        where = pc.field("batch_id") <= pa.scalar(hi, pa.int64())
        if lo is not None:
            where = where & (pc.field("batch_id") >= pa.scalar(lo, pa.int64()))
        rows = read_delta(dt, path, LOG_COLUMNS, where)
        latest = latest_rows(pa.concat_tables([latest, rows.select(LOG_COLUMNS).cast(LOG_SCHEMA)]))
        low = lowest_live_watermark(latest)
        if low is not None and low < below_ms:
            return low
    return lowest_live_watermark(latest)


def log_through_batch(log_dt: DeltaTable, log_path: str, agg_dt: DeltaTable, agg_path: str) -> int | None:
    """The newest stream batch whose ``watermark_log`` rows a run may rely on (None: none).

    The stream commits a batch's ``aggregates`` and the ``watermark_log`` rows deferred until it side by
    side (:mod:`jobs.stream.sinks.commit`), and a batch's commits end before the next batch starts. So every
    batch but the newest in the log has its aggregates committed; the newest has them once ``aggregates``
    holds a window the stream emitted (trigger watermark, or flushed) in it or later. Read from the Delta
    logs' statistics and the newest aggregates files only.
    """
    actions = pa.table(log_dt.get_add_actions(flatten=True))
    if not actions.num_rows:
        return None
    maxima = actions.column("max.batch_id") if "max.batch_id" in actions.column_names else None
    if maxima is not None and maxima.null_count == 0:
        newest = pc.max(maxima).as_py()
    else:
        newest = pc.max(read_delta(log_dt, log_path, ["batch_id"]).column("batch_id")).as_py()
    if newest is None:
        return None
    newest = int(newest)
    stream_rows = (pc.field("batch_id") >= pa.scalar(newest, pa.int64())) & (
        pc.field("trigger_watermark_ms").is_valid() | (pc.field("flushed") == pa.scalar(True))
    )
    emitted = read_delta(agg_dt, agg_path, ["batch_id"], stream_rows)
    return newest if emitted.num_rows else newest - 1


def read_horizon(
    options: BackfillOptions,
    late: pa.Table,
    current: pa.Table,
    agg_dt: DeltaTable,
    agg_path: str,
    log_dt: DeltaTable | None,
    report: BackfillReport,
) -> Horizon:
    """What closes the late rows' windows not in ``current`` (rules (b) and (c)), read as far as it decides.

    The flushed windows are read only if such a window exists, ``watermark_log`` only if one of them is not
    closed by a flush and its late row's batch is one the log covers (:func:`log_through_batch`).
    ``log_dt`` is ``watermark_log`` opened before ``agg_dt`` (None: opened here, when needed).
    """
    pending = pending_windows(late, current, options.window)
    if not pending.num_rows:
        return Horizon()
    flushed = flushed_until(
        agg_dt, agg_path, int(pc.min(pending.column("window_end_ms")).as_py()), options.window
    )
    report.flushed_until_ms = flushed
    if flushed is not None:
        pending = pending.filter(pc.field("window_end_ms") > pa.scalar(flushed, pa.int64()))
    if not pending.num_rows:
        return Horizon(flushed)
    log_path = table_path(options.tables, "watermark_log")
    if log_dt is None:
        log_dt = open_table(log_path)
    if log_dt is None:  # the stream has not committed it yet
        return Horizon(flushed)
    through = log_through_batch(log_dt, log_path, agg_dt, agg_path)
    report.watermark_log_through_batch = through
    if through is None:
        return Horizon(flushed)
    covered = pending.filter(pc.field("batch_id") <= pa.scalar(through, pa.int64()))
    if not covered.num_rows:
        return Horizon(flushed, None, through)
    below = int(pc.min(covered.column("window_end_ms")).as_py())
    low = read_lowest_live_watermark(log_dt, log_path, through, below)
    report.lowest_watermark_ms = low
    return Horizon(flushed, low, through)


def open_table(path: str) -> DeltaTable | None:
    """The Delta table at ``path`` (a path or URI; delta-rs), or None when there is none."""
    table: DeltaTable | None = open_delta(path)
    return table


def read_inputs(
    options: BackfillOptions,
    agg_dt: DeltaTable,
    agg_path: str,
    late_dt: DeltaTable,
    late_path: str,
    report: BackfillReport,
    log_dt: DeltaTable | None = None,
) -> tuple[pa.Table, Horizon, pa.Table] | None:
    """The run's reads, each filtered at the files; None when no late row waits.

    Returns the late rows to classify, the :class:`Horizon` of their windows not in the aggregates
    (:func:`read_horizon`; ``log_dt``: ``watermark_log`` opened before ``agg_dt``, or None) and the
    aggregates rows of their windows. Only unreconciled late rows are read, the aggregates from the date
    partitions the late rows' windows fall in, the flushed windows and ``watermark_log`` only as far as they
    decide a window: what a run holds in memory grows with the backlog of late rows, not with the tables'
    history. Raises :class:`DuplicateWindows` when the aggregates hold one of those windows twice.
    """
    unreconciled = read_delta(late_dt, late_path, LATE_COLUMNS, pc.field("reconciled") == pa.scalar(False))
    before_end = unreconciled.filter(pc.field("ingested_at_ms") < options.end_ms)
    report.folded_events = report.corrected_windows = report.inserted_windows = 0
    report.deferred_events = 0
    report.flushed_until_ms = report.watermark_log_through_batch = report.lowest_watermark_ms = None
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
    span = (pc.field("window_start_ms") >= lo) & (pc.field("window_start_ms") <= hi)
    current = read_delta(agg_dt, agg_path, list(AGGREGATES_SCHEMA.names), span, days=(lo, hi))
    check_unique_windows(current, "aggregates")
    horizon = read_horizon(options, late, current, agg_dt, agg_path, log_dt, report)
    return late, horizon, current


def plan(
    spark: Any,
    options: BackfillOptions,
    now_ms: int,
    agg_dt: DeltaTable,
    agg_path: str,
    late_dt: DeltaTable,
    late_path: str,
    report: BackfillReport,
    log_dt: DeltaTable | None = None,
) -> tuple[pa.Table, pa.Table, pa.Table] | None:
    """Read the tables: the corrected rows, the rows they replace, the rows to mark; None: nothing to do.

    ``log_dt``: ``watermark_log``, opened before ``agg_dt`` (None: opened when needed).
    """
    inputs = read_inputs(options, agg_dt, agg_path, late_dt, late_path, report, log_dt)
    if inputs is None:
        return None
    late, horizon, current = inputs
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
    classified = classify(late_df, windows_df, options.window, horizon).cache()
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
