"""The data-quality checks' conservation totals on hand-made tables (the Great Expectations suites on the
tables of a real run: tests/integration/spark/test_quality.py)."""

import pyarrow as pa

from jobs.batch.quality import conservation_totals
from jobs.common.schemas import AGGREGATES_SCHEMA, LATE_SCHEMA, WATERMARK_LOG_SCHEMA


def test_conservation_totals_compare_the_late_table_the_log_and_the_aggregates():
    agg = pa.Table.from_pylist(
        [{"key": "k", "window_start_ms": 0, "window_end_ms": 1, "count": 5, "late_count": 2}],
        schema=AGGREGATES_SCHEMA,
    )
    late = pa.Table.from_pylist(
        [{"reconciled": True}, {"reconciled": True}, {"reconciled": False}], schema=LATE_SCHEMA
    )
    log = pa.Table.from_pylist([{"events": 7, "late": 3}], schema=WATERMARK_LOG_SCHEMA)
    totals = conservation_totals({"aggregates": agg, "late_events": late, "watermark_log": log}).to_pylist()[
        0
    ]
    assert totals == {
        "late_events": 3,
        "late_in_log": 3,
        "reconciled_events": 2,
        "late_count_total": 2,
        "on_time_slack": 1,
    }
