"""Great Expectations suites on the pipeline's tables."""

import pyarrow as pa
import pytest

from jobs.batch.quality import check_tables
from jobs.common.schemas import AGGREGATES_SCHEMA, QUARANTINE_SCHEMA
from jobs.common.tables import DeltaTables
from tests.integration.spark.test_backfill import FAR_FUTURE_MS, backfill, job, one_partition
from tests.integration.spark.test_stream import iot_records, write_lines
from tools.feed import feed

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def reconciled_tables(spark_sessions, tmp_path_factory):
    from jobs.stream.run import run_job

    spark = spark_sessions.get()  # the session of the tests (a fixture of the module's scope)

    tmp = tmp_path_factory.mktemp("quality")
    feed(one_partition(iot_records(2_000)), tmp / "in", rows_per_file=500)
    write_lines(tmp / "in" / "zz-bad.jsonl", ["not json", '{"event_id": "1", "key": "k"}'])
    run_job(spark, job(tmp, flush_at_end=True))
    backfill(spark, tmp / "out", 0, FAR_FUTURE_MS)
    return tmp / "out"


def test_the_tables_of_a_reconciled_run_meet_every_expectation(reconciled_tables):
    report = check_tables(str(reconciled_tables))
    assert report.success, report.summary()
    assert report.expectations >= 20
    assert report.rows["quarantine"] == 2 and report.rows["late_events"] > 0
    assert report.summary().startswith("data quality OK")


def test_broken_rows_fail_with_a_summary_naming_table_expectation_and_rows(
    spark, reconciled_tables, tmp_path
):
    import shutil

    tables = tmp_path / "tables"
    shutil.copytree(reconciled_tables, tables)
    sink = DeltaTables(str(tables), "vandal", spark)
    bad_window = {
        "key": "k",
        "window_start_ms": 5_000,
        "window_end_ms": 4_000,
        "count": 0,
        "sum": 0.0,
        "min": 0.0,
        "max": 0.0,
        "revision": -1,
        "late_count": 0,
        "flushed": False,
    }
    sink.append(
        "aggregates",
        pa.Table.from_pylist([bad_window], schema=AGGREGATES_SCHEMA),
        0,
        schema=AGGREGATES_SCHEMA,
    )
    odd = {"raw": "x", "reason": "cosmic_rays", "file": "f", "line": 1, "batch_id": 0, "ingested_at_ms": 0}
    sink.append(
        "quarantine", pa.Table.from_pylist([odd], schema=QUARANTINE_SCHEMA), 0, schema=QUARANTINE_SCHEMA
    )

    report = check_tables(str(tables))
    assert not report.success
    summary = report.summary()
    assert summary.startswith("data quality FAILED")
    lines = summary.splitlines()[1:]
    assert any("aggregates: expect_column_values_to_be_between(column=count, min_value=1" in x for x in lines)
    assert any(
        "aggregates: expect_column_pair_values_a_to_be_greater_than_b" in x and "(4000, 5000)" in x
        for x in lines
    )
    assert any("revision" in x and "1 row(s)" in x for x in lines)
    assert any("quarantine: expect_column_values_to_be_in_set" in x and "cosmic_rays" in x for x in lines)
    # The stray window breaks conservation too: more counted on time than the job accepted.
    assert not any("conservation" in x for x in lines)  # count 0 keeps the totals balanced
    assert len(lines) == len(report.failures) == 4
