"""A batch read by Spark's reader, as the driver path takes it (the Arrow reader gives an ``ArrowRows``).

Validated in Spark (:mod:`jobs.stream.sources.validate`); the driver collects its narrow columns, and once
the stage has judged them, Spark labels the late rows with a short ``CASE``
(:mod:`jobs.stream.stage.labelling`) and aggregates the on-time ones into window partials.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa

from jobs.common.schemas import LATE_SCHEMA
from jobs.common.session import arrow_frame
from jobs.common.windows import window_partials
from jobs.stream.report import BatchReport
from jobs.stream.stage.labelling import late_expression
from watermark.windowspec import WindowSpec


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
