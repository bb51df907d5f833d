"""Labelling in Spark: the stage's late rows as one ``CASE`` over the compressed lateness thresholds.

:func:`jobs.stream.stage.driver.label_thresholds` compresses the stage's labels into pieces over the arrival
key; :func:`late_expression` turns them into a Spark column, so rows are labelled without a row-id join or a
Python UDF.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from jobs.stream.stage.driver import label_thresholds

#: A CASE with more pieces than this labels rows with a broadcast join of the late rows' keys instead.
MAX_THRESHOLD_PIECES = 256


def late_expression(
    keys: pa.Table, order: np.ndarray, late: np.ndarray, te: np.ndarray, wm_sorted: np.ndarray | None = None
) -> Any | None:
    """Spark column ``event_time_ms < threshold(arrival key)`` reproducing the stage's labels, or None.

    ``keys`` are the narrow rows (``arrival_time_ms``, ``file``, ``line``), ``order`` their arrival order,
    ``late`` and ``te`` per narrow row. None when the thresholds need more than
    :data:`MAX_THRESHOLD_PIECES` pieces (the caller then joins on the late rows' keys).
    """
    from pyspark.sql import functions as F

    th = label_thresholds(te[order], late[order], wm_sorted)
    if th.starts.size > MAX_THRESHOLD_PIECES:
        return None
    tp = keys.column("arrival_time_ms").to_numpy()[order]
    files = keys.column("file")
    lines = keys.column("line").to_numpy()[order]
    starts, values = th.starts.tolist(), th.values.tolist()
    arrival = "named_struct('t', CAST(arrival_time_ms AS BIGINT), 'f', file, 'l', CAST(line AS BIGINT))"

    def at_or_after(k: int) -> str:
        """``arrival key >= key of piece k's first row``, on the arrival time alone when that decides it.

        When piece ``k`` starts at the first arrival of its arrival time, no earlier row shares that time,
        so comparing times is exact and much cheaper than comparing (time, file, line) structs.
        """
        first = starts[k]
        if first == 0 or tp[first - 1] < tp[first]:
            return f"arrival_time_ms >= {int(tp[first])}L"
        name = files[int(order[first])].as_py()
        if isinstance(name, str):
            name = "'" + name.replace("\\", "\\\\").replace("'", "\\'") + "'"
        return f"{arrival} >= named_struct('t', {int(tp[first])}L, 'f', {name}, 'l', {int(lines[first])}L)"

    def tree(lo: int, hi: int) -> str:
        """Threshold of pieces lo..hi-1 as a balanced CASE: log2(pieces) comparisons per row."""
        if hi - lo == 1:
            return f"{values[lo]}L"
        mid = (lo + hi) // 2
        return f"CASE WHEN {at_or_after(mid)} THEN {tree(mid, hi)} ELSE {tree(lo, mid)} END"

    threshold = F.expr(tree(0, len(starts)))  # one expression, one call into the JVM
    return F.col("event_time_ms") < threshold
