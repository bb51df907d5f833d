"""Great Expectations suites on the pipeline's tables."""

from pathlib import Path

import pyarrow as pa
import pytest

from jobs.batch.quality import check_tables
from jobs.batch.quality_results import read_history
from jobs.batch.quality_store import results_root
from jobs.common.schemas import AGGREGATES_SCHEMA, QUARANTINE_SCHEMA
from jobs.common.tables import DeltaTables
from tests.integration.spark.test_backfill import FAR_FUTURE_MS, backfill, job, one_partition
from tests.integration.spark.test_stream import iot_records
from tests.landing import write_lines
from tools.feed.landing import feed

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
    stored = read_history(results_root(str(reconciled_tables)), 1)
    assert [(r.suite, r.success) for r in stored] == [
        ("aggregates", True),
        ("conservation", True),
        ("late_events", True),
        ("quarantine", True),
    ]


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

    # The run's results stay: read back from the store, with the values that broke each expectation.
    history = {r.suite: r for r in read_history(results_root(str(tables)), 1)}
    assert {suite for suite, r in history.items() if not r.success} == {"aggregates", "quarantine"}
    assert all(r.run_name == report.run_name == "manual" for r in history.values())
    count = next(f for f in history["aggregates"].failures if f.arguments.get("column") == "count")
    assert (count.expectation, count.unexpected_count, count.examples) == (
        "expect_column_values_to_be_between",
        1,
        [0],
    )
    [reason] = history["quarantine"].failures
    assert reason.examples == ["cosmic_rays"]
    page = history["aggregates"].page
    assert report.docs_pages["aggregates"] == page.uri and Path(page.key).is_file()
    assert f"aggregates (failed): {page.uri}" in report.data_docs()


def test_the_cut_off_uses_the_jobs_own_application_id_so_a_table_a_batch_ahead_raises_no_false_alarm(
    spark, reconciled_tables, tmp_path
):
    """The job commits ``late_events`` and ``watermark_log`` separately: a reader can see one a batch ahead.

    The cut-off used to look up the constant ``jobs.stream``, which no table holds (the job's id is
    ``jobs.stream-<hex>``, kept in ``CHECKPOINT/app-id``), so it never cut and such a read failed.
    """
    import shutil

    import pyarrow.compute as pc

    from jobs.batch.quality import stream_app_id

    checkpoint = reconciled_tables.parent / "ck"
    app_id = (checkpoint / "app-id").read_text().strip()
    assert app_id.startswith("jobs.stream-")
    assert stream_app_id(str(reconciled_tables)) == app_id  # from the tables' Delta logs
    assert stream_app_id(str(reconciled_tables), str(checkpoint)) == app_id  # from the checkpoint
    with pytest.raises(FileNotFoundError, match="no application id"):
        stream_app_id(str(reconciled_tables), str(tmp_path / "not-a-checkpoint"))

    def a_batch_ahead(table: str, name: str, writer: str, ahead: int = 1, **changed) -> tuple:
        """A copy of the tables; its ``table`` got a row of ``writer``'s batch ``ahead`` after both's last."""
        tables = tmp_path / name
        shutil.copytree(reconciled_tables, tables)
        reader = DeltaTables(str(tables), app_id)
        batch = max(reader.committed_version(t) for t in ("late_events", "watermark_log")) + ahead
        rows = reader.read(table)
        row = rows.filter(pc.equal(rows.column("batch_id"), pc.max(rows.column("batch_id")))).slice(0, 1)
        row = row.to_pylist()[0] | {"batch_id": batch} | changed
        new = pa.Table.from_pylist([row], rows.schema)
        DeltaTables(str(tables), writer, spark).append(table, new, batch)  # txnVersion: the batch id
        return tables, row

    # Whole tables: late_events holds a late row of the next batch, whose watermark_log rows are not in yet.
    tables, _ = a_batch_ahead("late_events", "late-ahead", app_id, event_id="next-batch", reconciled=False)
    report = check_tables(str(tables))
    assert report.success, report.summary()
    assert check_tables(str(tables), checkpoint=str(checkpoint)).success
    # A stray row of a batch the job has committed (another writer's) is not cut: it still fails.
    tables, _ = a_batch_ahead("late_events", "stray", "vandal", 0, event_id="stray", reconciled=False)
    report = check_tables(str(tables))
    assert not report.success and "conservation" in report.summary()

    # One interval: watermark_log holds the next batch (7 late rows) before late_events does.
    tables, row = a_batch_ahead("watermark_log", "log-ahead", app_id, late=7)
    log = DeltaTables(str(tables), app_id).read("watermark_log")
    interval = (int(pc.min(log.column("ingested_at_ms")).as_py()), row["ingested_at_ms"] + 1)
    report = check_tables(str(tables), interval=interval, window_ms=1_000)
    assert report.success, report.summary()
    assert report.rows["late_events"] > 0  # the interval checked the batches before it
