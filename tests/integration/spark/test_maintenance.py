"""Delta table maintenance on the job's own tables: compaction and VACUUM change no row.

After many small micro-batches and a backfill's MERGE, one maintenance run compacts, Z-orders and vacuums
every table changing no row, and a second with nothing new optimizes nothing. Maintenance on small
tables written directly (which dates OPTIMIZE rewrites, the arrivals retention, the previous layout and its
migration) is ``test_maintenance_dates.py``: apart, so that the suite's workers run the two at once.
"""

import shutil

import pytest

from jobs.batch.maintenance import (
    MaintenanceOptions,
    data_files_on_disk,
    load_state,
    run_maintenance,
    table_layout,
)
from jobs.common.schemas import DAY_MS, PARTITIONS, TABLES
from jobs.common.tables import DeltaTables
from tests.integration.spark.test_backfill import job, one_partition
from tests.integration.spark.test_stream import iot_records
from tests.landing import write_lines
from tools.feed.landing import feed

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def streamed(spark_sessions, tmp_path_factory):
    """The job's tables after many small micro-batches (two 100-row files per trigger: five batches, the last
    one the bad line's file), late rows included."""
    from jobs.batch.backfill import BackfillOptions, run_backfill
    from jobs.stream.options import DeferPolicy
    from jobs.stream.run import run_job
    from watermark.evaluation.replay import WindowSpec

    spark = spark_sessions.get()  # the session of the tests (a fixture of the module's scope)

    tmp = tmp_path_factory.mktemp("maintenance")
    feed(one_partition(iot_records(800)), tmp / "in", rows_per_file=100)
    write_lines(tmp / "in" / "zz-bad.jsonl", ["not json"])
    # every table committed with every batch (--defer-batches 1): the many small files maintenance is for
    opts = job(tmp, flush_at_end=True, defer=DeferPolicy(batches=1))
    run_job(spark, opts)
    # a backfill's MERGE too, so that aggregates has revisions (and a Change Data Feed)
    run_backfill(spark, BackfillOptions(str(tmp / "out"), 0, 4_102_444_800_000, WindowSpec(1_000)))
    return tmp


def every_table(root) -> dict[str, list]:
    sink = DeltaTables(str(root), "reader")
    return {t: sorted(sink.read(t).to_pylist(), key=repr) for t in TABLES if sink.exists(t)}


def test_after_many_micro_batches_maintenance_compacts_and_vacuums_changing_no_row(spark, streamed, tmp_path):
    # One maintenance run (each costs a minute or two here): compaction, Z-order and VACUUM change no row;
    # every table the job created is date-partitioned, and the retention keeps the arrivals of its window.
    root = tmp_path / "tables"
    shutil.copytree(streamed / "out", root)
    before = every_table(root)
    assert set(before) == set(TABLES)
    assert {t: table_layout(str(root / t), t) for t in TABLES} == {t: PARTITIONS[t][0] for t in TABLES}
    on_disk = {t: data_files_on_disk(str(root / t)) for t in TABLES}
    newest = max(r["arrival_time_ms"] for r in before["arrivals"])
    report = run_maintenance(
        spark, MaintenanceOptions(str(root), retain_hours=0.0, arrivals_retain_days=2), now_ms=newest + DAY_MS
    )
    after = every_table(root)
    assert after == before
    assert report.tables["arrivals"].retention == "dates" and report.tables["arrivals"].rows_deleted == 0
    for table, tr in report.tables.items():
        assert tr.rows_after == len(after[table]) and tr.rows_before == len(before[table]), table
        assert tr.files_after <= tr.files_before, table
        assert tr.optimized is None, table  # no state yet: the first run optimizes every date
        assert data_files_on_disk(str(root / table)) == tr.files_on_disk_after <= on_disk[table], table
        assert tr.vacuum == "lite", table
    # the stream wrote a file or more per batch: compaction and VACUUM leave far fewer
    assert report.tables["arrivals"].files_before >= 4
    assert report.tables["arrivals"].files_after < report.tables["arrivals"].files_before
    assert sum(t.files_on_disk_after for t in report.tables.values()) < sum(on_disk.values()) / 2
    assert report.tables["aggregates"].zorder == ["window_start_ms", "batch_id"]
    # the partitioned layout survives, and the Change Data Feed stays on (its history is gone with VACUUM 0)
    assert any(p.name.startswith("window_date=") for p in (root / "aggregates").iterdir())
    properties = spark.sql(f"DESCRIBE DETAIL delta.`{root / 'aggregates'}`").first()["properties"]
    assert properties.get("delta.enableChangeDataFeed") == "true"
    # the state remembers each table's version: a second run with nothing new optimizes nothing
    assert set(load_state(str(root))) == set(TABLES)
    again = run_maintenance(spark, MaintenanceOptions(str(root), retain_hours=0.0, arrivals_retain_days=None))
    assert {t: (tr.optimized, tr.files_rewritten) for t, tr in again.tables.items()} == {
        t: ([], 0) for t in TABLES
    }
    assert every_table(root) == before


def test_the_change_data_feed_of_aggregates_shows_the_backfills_revisions(spark, streamed):
    changes = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", 0)
        .load(str(streamed / "out" / "aggregates"))
    )
    kinds = {r["_change_type"] for r in changes.select("_change_type").distinct().collect()}
    assert {"insert", "update_preimage", "update_postimage"} <= kinds
