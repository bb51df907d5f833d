"""Windows: per-batch partials (Spark, Arrow), and the open windows they merge into, fire and flush.

Each micro-batch's on-time rows are aggregated into *partials* (one row per key and window: count, sum,
min, max), by Spark (:func:`window_partials`) or, on the Arrow path, by pyarrow in the executors
(:func:`table_partials`); both assign windows with :meth:`watermark.windowspec.WindowSpec.start_range`, the
replay's own definition. The driver merges the partials into the open windows (pure pyarrow/numpy) and
fires every window whose end the watermark has reached. A window fires at the first arrival after which
``W >= end`` (the same rule as the replay evaluation, :mod:`watermark.evaluation.replay`), so its trigger
watermark and emit latency do not depend on how the input was cut into micro-batches. The backfill puts
late rows in their windows with the same :func:`assign_windows`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from jobs.common.schemas import FIRED_SCHEMA, PARTIAL_SCHEMA
from watermark.timeline import Timeline
from watermark.windowspec import WindowSpec

_ORDER = [("window_start_ms", "ascending"), ("key", "ascending")]


def empty_partials() -> pa.Table:
    """An open-window state with no window."""
    return PARTIAL_SCHEMA.empty_table()


def assign_windows(rows: Any, window: WindowSpec) -> Any:
    """Spark ``rows`` with a ``window_start_ms`` column: one row per window holding the row's event time.

    Windows are aligned to epoch 0; with a slide, a row is repeated for every window that holds it, earliest
    first (:meth:`WindowSpec.start_range` with Spark's ``pmod``).
    """
    from pyspark.sql import functions as F

    first, last = window.start_range(F.col("event_time_ms"), lambda te, step: F.pmod(te, F.lit(step)))
    if window.tumbling:
        return rows.withColumn("window_start_ms", last)
    return rows.withColumn("window_start_ms", F.explode(F.sequence(first, last, F.lit(window.step_ms))))


def window_partials(rows: Any, window: WindowSpec) -> Any:
    """Partial aggregates (count, sum, min, max) of Spark ``rows`` per key and window."""
    from pyspark.sql import functions as F

    grouped = (
        assign_windows(rows, window)
        .groupBy("key", "window_start_ms")
        .agg(
            F.count(F.lit(1)).alias("count"),
            F.sum("value").alias("sum"),
            F.min("value").alias("min"),
            F.max("value").alias("max"),
        )
    )
    return grouped.withColumn("window_end_ms", F.col("window_start_ms") + F.lit(window.window_ms)).select(
        *PARTIAL_SCHEMA.names
    )


def table_partials(records: pa.Table, window: WindowSpec) -> pa.Table:
    """Partial aggregates of a pyarrow table of records, as :func:`window_partials` computes them in Spark.

    >>> t = pa.table({"key": ["a", "a", "b"], "event_time_ms": [5, 1_500, 900], "value": [1.0, 2.0, 4.0]})
    >>> rows = table_partials(t, WindowSpec(1_000)).to_pylist()
    >>> sorted((r["key"], r["window_start_ms"], r["count"]) for r in rows)
    [('a', 0, 1), ('a', 1000, 1), ('b', 0, 1)]
    """
    rows, starts = window.assign(records.column("event_time_ms").to_numpy())
    keys, values = records.column("key"), records.column("value")
    if rows.size != records.num_rows:  # sliding windows: a record in several
        keys, values = keys.take(pa.array(rows)), values.take(pa.array(rows))
    framed = pa.table({"key": keys, "window_start_ms": pa.array(starts, pa.int64()), "value": values})
    grouped = framed.group_by(["key", "window_start_ms"], use_threads=False).aggregate(
        [("value", "count"), ("value", "sum"), ("value", "min"), ("value", "max")]
    )
    start = grouped.column("window_start_ms")
    return pa.table(
        {
            "key": grouped.column("key"),
            "window_start_ms": start,
            "window_end_ms": pc.add(start, pa.scalar(window.window_ms, pa.int64())),
            "count": grouped.column("value_count"),
            "sum": grouped.column("value_sum"),
            "min": grouped.column("value_min"),
            "max": grouped.column("value_max"),
        }
    ).cast(PARTIAL_SCHEMA)


def merge_partials(*tables: pa.Table) -> pa.Table:
    """Combine partial aggregates of the same (key, window): counts and sums add, minima and maxima combine.

    Examples
    --------
    >>> import pyarrow as pa
    >>> a = pa.Table.from_pylist([{"key": "k", "window_start_ms": 0, "window_end_ms": 10, "count": 2,
    ...                            "sum": 3.0, "min": 1.0, "max": 2.0}], schema=PARTIAL_SCHEMA)
    >>> b = pa.Table.from_pylist([{"key": "k", "window_start_ms": 0, "window_end_ms": 10, "count": 1,
    ...                            "sum": 5.0, "min": 5.0, "max": 5.0}], schema=PARTIAL_SCHEMA)
    >>> merge_partials(a, b).to_pylist()[0]["count"], merge_partials(a, b).to_pylist()[0]["max"]
    (3, 5.0)

    """
    parts = [t.select(PARTIAL_SCHEMA.names).cast(PARTIAL_SCHEMA) for t in tables if t.num_rows]
    if not parts:
        return empty_partials()
    combined = pa.concat_tables(parts)
    grouped = combined.group_by(["key", "window_start_ms", "window_end_ms"], use_threads=False).aggregate(
        [("count", "sum"), ("sum", "sum"), ("min", "min"), ("max", "max")]
    )
    grouped = grouped.rename_columns(
        ["key", "window_start_ms", "window_end_ms", "count", "sum", "min", "max"]
    )
    return grouped.select(PARTIAL_SCHEMA.names).cast(PARTIAL_SCHEMA).sort_by(_ORDER)


def fire(
    open_windows: pa.Table, wm_after: NDArray[np.int64], arrival_ms: NDArray[np.int64]
) -> tuple[pa.Table, pa.Table]:
    """Split open windows into those the batch's watermark closed and those still open.

    Parameters
    ----------
    open_windows
        Merged partials (:data:`PARTIAL_SCHEMA`), including this batch's.
    wm_after
        Global watermark right after each arrival of the batch, in arrival order (nondecreasing).
    arrival_ms
        Ingestion time of each arrival, same order.

    Returns
    -------
    (fired, still_open)
        ``fired`` follows :data:`FIRED_SCHEMA`, in (window start, key) order.

    Examples
    --------
    >>> import numpy as np, pyarrow as pa
    >>> w = pa.Table.from_pylist([{"key": "k", "window_start_ms": 0, "window_end_ms": 10, "count": 1,
    ...                            "sum": 1.0, "min": 1.0, "max": 1.0}], schema=PARTIAL_SCHEMA)
    >>> fired, still = fire(w, np.array([5, 12, 20]), np.array([100, 110, 130]))
    >>> fired.to_pylist()[0]["trigger_watermark_ms"], fired.to_pylist()[0]["emit_latency_ms"], still.num_rows
    (12, 100, 0)

    """
    if open_windows.num_rows == 0 or wm_after.size == 0:
        return FIRED_SCHEMA.empty_table(), open_windows
    end = open_windows.column("window_end_ms").to_numpy()
    at = np.searchsorted(wm_after, end, side="left")
    closed = at < wm_after.size
    fired = open_windows.filter(pa.array(closed))
    idx = at[closed]
    trigger = wm_after[idx]
    fire_tp = arrival_ms[idx]
    ends = end[closed]
    fired = _with_fire_columns(fired, trigger, fire_tp, trigger - ends, fire_tp - ends, flushed=False)
    return fired.sort_by(_ORDER), open_windows.filter(pa.array(~closed))


def credit_timeline(fired: pa.Table, timeline: Timeline) -> pa.Table:
    """Date fired windows at the earliest ingestion-clock instant with ``W >= end`` (the time convention).

    :func:`fire` credits a window to the arrival after which the watermark had passed its end; a timer
    between two arrivals (``periodic``'s grid, an idle advance) may have raised it earlier, and
    ``timeline`` (the batch's :attr:`jobs.stream.stage.driver.StageResult.timeline`) says when. Windows the
    timeline does not fire (closed by a batch boundary on the wall clock) keep their instant; no instant
    moves later.

    Examples
    --------
    >>> import numpy as np, pyarrow as pa
    >>> from watermark.strategies.periodic import Periodic
    >>> trace = Periodic(delay_ms=100, period_ms=100).process_trace([0, 1_300, 1_400], [0, 1_310, 1_420])
    >>> w = pa.Table.from_pylist([{"key": "k", "window_start_ms": 0, "window_end_ms": 1_000, "count": 1,
    ...                            "sum": 1.0, "min": 1.0, "max": 1.0}], schema=PARTIAL_SCHEMA)
    >>> fired, _ = fire(w, trace.after_arrival, np.array([0, 1_310, 1_420]))
    >>> credited = credit_timeline(fired, trace.timeline)
    >>> fired["fire_arrival_ms"][0].as_py(), credited["fire_arrival_ms"][0].as_py()
    (1420, 1400)

    """
    if fired.num_rows == 0:
        return fired
    end = fired.column("window_end_ms").to_numpy()
    old_tp = fired.column("fire_arrival_ms").to_numpy()
    old_w = fired.column("trigger_watermark_ms").to_numpy()
    ok, t, w = timeline.fire(end)
    earlier = ok & (t <= old_tp)
    fire_tp = np.where(earlier, t, old_tp)
    trigger = np.where(earlier, w, old_w)
    out = _with_fire_columns(fired, trigger, fire_tp, trigger - end, fire_tp - end, flushed=False)
    return out.sort_by(_ORDER)


def flush(open_windows: pa.Table) -> pa.Table:
    """Close every open window at the end of input (``flushed``; no trigger watermark or latency)."""
    n = open_windows.num_rows
    missing = pa.nulls(n, pa.int64())
    out = _with_fire_columns(open_windows, missing, missing, missing, missing, flushed=True)
    return out.sort_by(_ORDER)


def _with_fire_columns(
    table: pa.Table, trigger: object, fire_tp: object, delay: object, latency: object, *, flushed: bool
) -> pa.Table:
    n = table.num_rows
    columns = [table.column(name) for name in PARTIAL_SCHEMA.names]
    extra = [
        pa.array(trigger, pa.int64()),
        pa.array(fire_tp, pa.int64()),
        pa.array(delay, pa.int64()),
        pa.array(latency, pa.int64()),
        pc.cast(pa.array(np.full(n, flushed)), pa.bool_()),
    ]
    return pa.Table.from_arrays([*columns, *extra], schema=FIRED_SCHEMA)
