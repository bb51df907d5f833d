"""The late-data backfill's plan: the corrected rows of late partials (the backfill on real tables:
tests/integration/spark/test_backfill.py)."""

import pyarrow as pa

from jobs.batch.backfill_plan import corrected_rows
from jobs.common.schemas import AGGREGATES_SCHEMA


def test_corrected_rows_add_late_partials_and_insert_windows_with_late_rows_only():
    current = pa.Table.from_pylist(
        [
            {
                "key": "a",
                "window_start_ms": 0,
                "window_end_ms": 10,
                "count": 2,
                "sum": 4.0,
                "min": 1.0,
                "max": 3.0,
                "revision": 1,
                "late_count": 1,
                "reconciled_batch_id": 3,
                "trigger_watermark_ms": 10,
                "batch_id": 2,
                "flushed": False,
                "config_version": 1,
                "emitted_at_ms": 5,
            }
        ],
        schema=AGGREGATES_SCHEMA,
    )
    partials = pa.Table.from_pylist(
        [
            {
                "key": "a",
                "window_start_ms": 0,
                "window_end_ms": 10,
                "count": 2,
                "sum": 1.0,
                "min": 0.0,
                "max": 1.0,
                "reconciled_batch_id": 7,
            },
            {
                "key": "b",
                "window_start_ms": 10,
                "window_end_ms": 20,
                "count": 1,
                "sum": -2.0,
                "min": -2.0,
                "max": -2.0,
                "reconciled_batch_id": 6,
            },
        ]
    )
    rows = {r["key"]: r for r in corrected_rows(partials, current, now_ms=1_000).to_pylist()}
    a, b = rows["a"], rows["b"]
    assert (a["count"], a["sum"], a["min"], a["max"]) == (4, 5.0, 0.0, 3.0)
    assert (a["revision"], a["late_count"], a["reconciled_batch_id"], a["batch_id"]) == (2, 3, 7, 2)
    assert (a["trigger_watermark_ms"], a["emitted_at_ms"], a["config_version"]) == (10, 5, 1)
    assert (b["count"], b["sum"], b["min"], b["max"], b["revision"], b["late_count"]) == (
        1,
        -2.0,
        -2.0,
        -2.0,
        1,
        1,
    )
    assert (b["trigger_watermark_ms"], b["flushed"], b["batch_id"], b["emitted_at_ms"]) == (
        None,
        False,
        6,
        1_000,
    )
