"""The backfill's commits: the MERGE into ``aggregates`` and the marking of ``late_events`` (delta-spark).

Each is one Delta commit in a session whose commits carry the run in their ``userMetadata``
(:func:`session_for`), restricted to the date partitions the rows fall in (:func:`partition_condition`).
The aggregates MERGE writes a corrected row only if its window is as the run read it (compare-and-set on
``revision``); a window another backfill changed meanwhile raises :class:`StaleRead`, and the run is
recomputed (:mod:`jobs.batch.backfill`). A window the MERGE finds with a second current row (one the run
did not read) fails it before anything is committed: :class:`~jobs.batch.backfill_plan.DuplicateWindows`.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from jobs.batch.backfill_plan import WINDOW, BackfillOptions, DuplicateWindows, check_unique_windows
from jobs.common.reads import day_of
from jobs.common.schemas import AGGREGATES_SCHEMA, PARTITIONS
from jobs.common.session import arrow_frame

#: Columns the MERGE changes on a window the stream emitted; the others (trigger watermark, latencies,
#: batch, configuration version) keep what the stream wrote when it fired the window.
UPDATED = ("count", "sum", "min", "max", "revision", "late_count", "reconciled_batch_id")
#: What tells a window's row from another row of the same window: the stream's batch and write time, which
#: a backfill keeps when it revises the row (:func:`jobs.batch.backfill_plan.corrected_rows`).
IDENTITY = ("batch_id", "emitted_at_ms")
#: The error the MERGE raises in Spark when it meets a second current row of a window.
TWICE = "awm.backfill: a window has two current rows"


class StaleRead(RuntimeError):
    """Windows changed between the run's read and its MERGE (another backfill): recompute them."""


def spark_table(spark: Any, path: str) -> Any:
    """The delta-spark ``DeltaTable`` at ``path``."""
    from delta.tables import DeltaTable as SparkDeltaTable

    return SparkDeltaTable.forPath(spark, path)


def merge_aggregates(spark: Any, path: str, corrected: pa.Table, current: pa.Table) -> int:
    """MERGE the corrected rows into ``aggregates`` (delta-spark, one commit); returns the rows written.

    Each row is written only if its window is as this run read it (compare-and-set on ``revision`` and on
    the row's :data:`IDENTITY`; a window to insert must still be absent). A window that another backfill
    changed in the meantime is left alone and :class:`StaleRead` asks for a recomputation; the rows written
    are right either way, since each carries values computed from the revision it replaces. The streaming
    job's appends are blind appends, which Delta's WriteSerializable isolation lets commit beside the MERGE.

    One window, one current row: a window held twice in ``corrected`` or ``current``, or a second row of a
    window the run read found by the MERGE itself (the stream emitted it again since), raises
    :class:`~jobs.batch.backfill_plan.DuplicateWindows`, and nothing is committed; late rows are never
    folded into two rows of a window.
    """
    from pyspark.sql import functions as F

    check_unique_windows(current, "aggregates")
    check_unique_windows(corrected, "the corrected rows")
    read = current.select([*WINDOW, "revision", *IDENTITY]).rename_columns(
        [*WINDOW, "_read_revision", *(f"_read_{name}" for name in IDENTITY)]
    )
    source = corrected.join(read, keys=WINDOW, join_type="left outer", use_threads=False)
    starts = corrected.column("window_start_ms")
    lo, hi = int(pc.min(starts).as_py()), int(pc.max(starts).as_py())
    condition = (
        "t.key = s.key AND t.window_start_ms = s.window_start_ms AND t.window_end_ms = s.window_end_ms"
        f" AND t.window_start_ms >= {lo} AND t.window_start_ms <= {hi}"
    ) + partition_condition(spark, path, "aggregates", lo, hi)
    same_row = " AND ".join(f"t.{name} <=> s._read_{name}" for name in IDENTITY)
    other_row = f"s._read_revision IS NOT NULL AND NOT ({same_row})"
    try:
        metrics = (
            spark_table(spark, path)
            .alias("t")
            .merge(arrow_frame(spark, source).alias("s"), condition)
            .whenMatchedUpdate(
                condition=f"t.revision <=> s._read_revision AND {same_row}",
                set={name: F.col(f"s.{name}") for name in UPDATED},
            )
            .whenMatchedUpdate(  # a row of the window this run did not read: fail, commit nothing
                condition=other_row, set={"revision": F.expr(f"CAST(raise_error('{TWICE}') AS BIGINT)")}
            )
            .whenNotMatchedInsert(
                condition="s._read_revision IS NULL",
                values={name: F.col(f"s.{name}") for name in AGGREGATES_SCHEMA.names},
            )
            .execute()
            .first()
        )
    except Exception as err:
        if TWICE not in str(err):
            raise
        msg = (
            "the aggregates MERGE found a second current row of a window this run read (the stream emitted "
            "it again since): nothing was committed; run the backfill again to see which windows"
        )
        raise DuplicateWindows(msg) from None
    written = int(metrics["num_updated_rows"]) + int(metrics["num_inserted_rows"])
    if written < corrected.num_rows:
        msg = (
            f"a concurrent backfill changed {corrected.num_rows - written} of {corrected.num_rows} windows "
            "since this run read them"
        )
        raise StaleRead(msg)
    return written


def mark_reconciled(spark: Any, path: str, marks: pa.Table) -> int:
    """MERGE ``reconciled = true`` into the late rows in ``marks``; returns the rows marked."""
    from pyspark.sql import functions as F

    batches = marks.column("batch_id")
    lo, hi = int(pc.min(batches).as_py()), int(pc.max(batches).as_py())
    te = marks.column("event_time_ms")
    condition = (
        "t.batch_id = s.batch_id AND t.line = s.line AND coalesce(t.file, '') = coalesce(s.file, '')"
        f" AND t.batch_id >= {lo} AND t.batch_id <= {hi}"
    ) + partition_condition(spark, path, "late_events", int(pc.min(te).as_py()), int(pc.max(te).as_py()))
    metrics = (
        spark_table(spark, path)
        .alias("t")
        .merge(arrow_frame(spark, marks).alias("s"), condition)
        .whenMatchedUpdate(condition="NOT t.reconciled", set={"reconciled": F.lit(True)})
        .execute()
        .first()
    )
    return int(metrics["num_updated_rows"])


def partition_condition(spark: Any, path: str, table: str, lo_ms: int, hi_ms: int) -> str:
    """A MERGE condition on ``table``'s date partition for instants in ``[lo_ms, hi_ms]``.

    Empty when the table is not partitioned that way. Delta then reads, and checks for conflicts, only
    those partitions.
    """
    column = PARTITIONS[table][0]
    if column not in spark_table(spark, path).toDF().columns:
        return ""
    return f" AND t.{column} >= DATE'{day_of(lo_ms)}' AND t.{column} <= DATE'{day_of(hi_ms)}'"


def session_for(spark: Any, options: BackfillOptions) -> Any:
    """A session of ``spark``'s application whose Delta commits carry the run in their ``userMetadata``.

    A child session: the setting must not reach the streaming job's commits when both share a driver.
    """
    session = spark.newSession()
    meta = {"awm.backfill.interval": f"{options.start_ms}..{options.end_ms}"}
    if options.run_id:
        meta["awm.backfill.run_id"] = options.run_id
    session.conf.set("spark.databricks.delta.commitInfo.userMetadata", json.dumps(meta, sort_keys=True))
    return session
