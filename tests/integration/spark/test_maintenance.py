"""Delta table maintenance: compaction and VACUUM change no row; arrivals past their retention go."""

import shutil

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from jobs.batch.maintenance import MaintenanceOptions, data_files_on_disk, run_maintenance
from jobs.common.schemas import DAY_MS, TABLES
from jobs.common.tables import DeltaTables
from tests.integration.spark.test_backfill import job, one_partition
from tests.integration.spark.test_stream import iot_records, write_lines
from tools.feed import feed

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def streamed(spark_sessions, tmp_path_factory):
    """The job's tables after many small micro-batches (two 100-row files per trigger), late rows included."""
    from jobs.batch.backfill import BackfillOptions, run_backfill
    from jobs.stream.options import DeferPolicy
    from jobs.stream.run import run_job
    from watermark.evaluate import WindowSpec

    spark = spark_sessions.get()  # the session of the tests (a fixture of the module's scope)

    tmp = tmp_path_factory.mktemp("maintenance")
    feed(one_partition(iot_records(1_200)), tmp / "in", rows_per_file=100)
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


def test_after_many_micro_batches_maintenance_compacts_vacuums_and_ages_arrivals_out_changing_nothing_else(
    spark, streamed, tmp_path
):
    # One maintenance run (each costs a minute or two here): compaction, Z-order and VACUUM change no row;
    # arrivals older than their retention go, and nothing else.
    root = tmp_path / "tables"
    shutil.copytree(streamed / "out", root)
    before = every_table(root)
    assert set(before) == set(TABLES)
    on_disk = {t: data_files_on_disk(str(root / t)) for t in TABLES}
    ingested = pa.array([r["ingested_at_ms"] for r in before["arrivals"]])
    middle = int(pc.approximate_median(ingested).as_py())
    now = middle + 2 * DAY_MS  # a retention of 2 days cuts the history at its middle batch
    report = run_maintenance(
        spark, MaintenanceOptions(str(root), retain_hours=0.0, arrivals_retain_days=2), now_ms=now
    )
    after = every_table(root)
    kept = [r for r in before["arrivals"] if r["ingested_at_ms"] >= middle]
    assert after["arrivals"] == kept and 0 < len(kept) < len(before["arrivals"])
    assert report.tables["arrivals"].rows_deleted == len(before["arrivals"]) - len(kept)
    assert {t: rows for t, rows in after.items() if t != "arrivals"} == {
        t: rows for t, rows in before.items() if t != "arrivals"
    }
    for table, tr in report.tables.items():
        assert tr.rows_after == len(after[table]) and tr.rows_before == len(before[table]), table
        assert tr.files_after <= tr.files_before, table
        assert data_files_on_disk(str(root / table)) == tr.files_on_disk_after <= on_disk[table], table
    # the stream wrote a file or more per batch: compaction and VACUUM leave far fewer
    assert report.tables["arrivals"].files_before >= 6
    assert report.tables["arrivals"].files_after < report.tables["arrivals"].files_before
    assert sum(t.files_on_disk_after for t in report.tables.values()) < sum(on_disk.values()) / 2
    assert report.tables["aggregates"].zorder == ["window_start_ms", "batch_id"]
    # the partitioned layout survives, and the Change Data Feed stays on (its history is gone with VACUUM 0)
    assert any(p.name.startswith("window_date=") for p in (root / "aggregates").iterdir())
    properties = spark.sql(f"DESCRIBE DETAIL delta.`{root / 'aggregates'}`").first()["properties"]
    assert properties.get("delta.enableChangeDataFeed") == "true"


def test_the_change_data_feed_of_aggregates_shows_the_backfills_revisions(spark, streamed):
    changes = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", 0)
        .load(str(streamed / "out" / "aggregates"))
    )
    kinds = {r["_change_type"] for r in changes.select("_change_type").distinct().collect()}
    assert {"insert", "update_preimage", "update_postimage"} <= kinds
