"""Delta table maintenance on small tables written directly: OPTIMIZE rewrites only the dates written since
the last run; the arrivals retention drops whole dates from the log (no file rewritten); a table written
before its date partition (the previous layout) still gets its retention, and ``--migrate-layout``
rewrites it partitioned, in one Delta commit per table: interrupted at each of its steps, it loses no row and
a rerun finishes it (also after the earlier version's two commits were interrupted between them).
(Maintenance after the job's own micro-batches: ``test_maintenance.py``.)
"""

import logging
import re

import pyarrow as pa
import pytest

from jobs.batch import layout_migration
from jobs.batch.maintenance import MaintenanceOptions, migrate_layout, run_maintenance, table_layout
from jobs.common.reads import open_delta
from jobs.common.schemas import DAY_MS, TABLES
from jobs.common.session import arrow_frame
from jobs.common.tables import DeltaTables, create_table, table_builder

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


#: 2025-11-01 00:00 UTC: the first day of the synthetic tables below.
DAY0_MS = 1_761_955_200_000


def tiny_rows(table: str, day: int, batch: int, n: int = 5) -> pa.Table:
    """``n`` rows of ``table``, every time on day ``day`` after :data:`DAY0_MS` (batch ``batch``)."""
    start = DAY0_MS + day * DAY_MS + batch * 1_000
    columns = {}
    for f in TABLES[table]:
        if f.name.endswith("_ms"):
            columns[f.name] = pa.array([start + i for i in range(n)], f.type)
        elif f.name == "batch_id":
            columns[f.name] = pa.array([batch] * n, f.type)
        elif pa.types.is_string(f.type):
            columns[f.name] = pa.array([f"{f.name}-{batch}-{i}" for i in range(n)], f.type)
        elif pa.types.is_boolean(f.type):
            columns[f.name] = pa.array([False] * n, f.type)
        else:
            columns[f.name] = pa.array(list(range(n)), f.type)
    return pa.table(columns)


def files_by_date(spark, path: str, column: str) -> dict[str, set[str]]:
    """The active data files of each date partition (their names)."""
    files = (
        spark.read.format("delta")
        .load(path)
        .selectExpr(f"CAST({column} AS STRING) AS d", "_metadata.file_name AS f")
    )
    out: dict[str, set[str]] = {}
    for row in files.distinct().collect():
        out.setdefault(row["d"], set()).add(row["f"])
    return out


def write_previous_layout(spark, path: str, table: str, days) -> None:
    """Append a batch of ``table`` per day of ``days`` as the previous version did: no partition column."""
    for batch, day in enumerate(days):
        (
            arrow_frame(spark, tiny_rows(table, day, batch))
            .write.format("delta")
            .mode("append")
            .option("txnAppId", "writer")
            .option("txnVersion", str(batch))
            .save(path)
        )


def history(spark, path: str, operation: str) -> list:
    rows = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()
    return [r for r in rows if r["operation"] == operation]


def test_optimize_rewrites_only_the_dates_written_since_the_last_run(spark, tmp_path):
    root = str(tmp_path / "tables")
    sink = DeltaTables(root, "writer", spark)
    batch = 0
    for day in (0, 1):
        for _ in range(2):  # several small appends a day, as the stream commits them
            sink.append("late_events", tiny_rows("late_events", day, batch), batch)
            batch += 1
    options = MaintenanceOptions(root, retain_hours=0.0, arrivals_retain_days=None)
    first = run_maintenance(spark, options)
    assert first.tables["late_events"].optimized is None  # no state yet: every date
    path = sink.path("late_events")
    compacted = files_by_date(spark, path, "event_date")
    assert {d: len(f) for d, f in compacted.items()} == {"2025-11-01": 1, "2025-11-02": 1}
    # a new day of appends, and one late row for day 0: the dates rewritten lie either side of day 1's
    for day in (2, 2, 0):
        sink.append("late_events", tiny_rows("late_events", day, batch), batch)
        batch += 1
    second = run_maintenance(spark, options)
    tr = second.tables["late_events"]
    # read: the 3 appends and the last run's own commits (OPTIMIZE, VACUUM START and END), which add no data
    assert tr.optimized == ["2025-11-01", "2025-11-03"] and tr.versions_read == 3 + 3
    newest = history(spark, path, "OPTIMIZE")[0]
    predicate = newest["operationParameters"]["predicate"].replace(" ", "")
    assert predicate == '["\'event_dateIN(2025-11-01,2025-11-03)"]'
    assert newest["operationMetrics"]["numRemovedFiles"] == "4" == str(tr.files_rewritten)
    now = files_by_date(spark, path, "event_date")
    assert now["2025-11-02"] == compacted["2025-11-02"]
    assert now["2025-11-01"] != compacted["2025-11-01"] and len(now["2025-11-03"]) == 1
    assert tr.rows_after == tr.rows_before == 7 * 5


def test_the_arrivals_retention_drops_whole_dates_without_rewriting_a_file(spark, tmp_path):
    root = str(tmp_path / "tables")
    sink = DeltaTables(root, "writer", spark)
    for batch, day in enumerate((0, 0, 1, 2)):
        sink.append("arrivals", tiny_rows("arrivals", day, batch), batch)
    before = sink.read("arrivals").to_pylist()
    now = DAY0_MS + 3 * DAY_MS + DAY_MS // 2  # day 3, noon: 2 days ago is day 1, noon
    report = run_maintenance(
        spark, MaintenanceOptions(root, retain_hours=0.0, arrivals_retain_days=2), now_ms=now
    )
    cutoff = DAY0_MS + DAY_MS  # the whole of day 1 stays (it ended less than 2 days ago)
    assert report.arrivals_cutoff_ms == cutoff
    kept = sorted((r for r in before if r["arrival_time_ms"] >= cutoff), key=repr)
    assert sorted(sink.read("arrivals").to_pylist(), key=repr) == kept and len(kept) == 2 * 5
    tr = report.tables["arrivals"]
    assert (tr.retention, tr.rows_deleted, tr.retention_files_written) == ("dates", 2 * 5, 0)
    delete = history(spark, sink.path("arrivals"), "DELETE")[0]
    predicate = re.sub(r"#\d+", "", delete["operationParameters"]["predicate"])  # Spark's column ids
    assert predicate == '["(arrival_date < 2025-11-02)"]'
    metrics = delete["operationMetrics"]
    assert (metrics["numCopiedRows"], metrics["numAddedFiles"], metrics["numRemovedFiles"]) == ("0", "0", "2")
    # the next day's run finds nothing more that old: nothing deleted (not the earlier DELETE's figures)
    again = run_maintenance(
        spark, MaintenanceOptions(root, retain_hours=0.0, arrivals_retain_days=2), now_ms=now
    )
    assert (again.tables["arrivals"].rows_deleted, again.tables["arrivals"].rows_after) == (0, 2 * 5)


def test_an_unpartitioned_arrivals_table_of_the_previous_layout_gets_its_retention_and_migrates(
    spark, tmp_path, caplog
):
    root = str(tmp_path / "tables")
    path = DeltaTables(root, "reader").path("arrivals")
    write_previous_layout(spark, path, "arrivals", (0, 1, 2))
    assert table_layout(path, "arrivals") is None
    sink = DeltaTables(root, "writer")
    before = sink.read("arrivals").to_pylist()
    now = DAY0_MS + 2 * DAY_MS + DAY_MS // 2
    with caplog.at_level(logging.WARNING, logger="jobs.batch.maintenance"):
        report = run_maintenance(
            spark, MaintenanceOptions(root, retain_hours=0.0, arrivals_retain_days=1), now_ms=now
        )
    assert (
        "--migrate-layout" in caplog.text and "arrivals was created before its date partition" in caplog.text
    )
    cutoff = DAY0_MS + DAY_MS
    kept = sorted((r for r in before if r["arrival_time_ms"] >= cutoff), key=repr)
    assert sorted(sink.read("arrivals").to_pylist(), key=repr) == kept and len(kept) == 2 * 5
    tr = report.tables["arrivals"]
    assert (tr.retention, tr.rows_deleted, tr.partition_column, tr.optimized) == ("rows", 5, None, None)

    assert migrate_layout(spark, root) == ["arrivals"]
    assert table_layout(path, "arrivals") == "arrival_date"
    assert sorted(sink.read("arrivals").to_pylist(), key=repr) == kept
    assert sink.committed_version("arrivals") == 2  # the stream's idempotency survives the rewrite
    assert migrate_layout(spark, root) == []  # nothing left to migrate
    later = run_maintenance(
        spark, MaintenanceOptions(root, retain_hours=0.0, arrivals_retain_days=1), now_ms=now + DAY_MS
    )
    assert later.tables["arrivals"].retention == "dates" and later.tables["arrivals"].rows_deleted == 5
    assert sorted(sink.read("arrivals").to_pylist(), key=repr) == [
        r for r in kept if r["arrival_time_ms"] >= cutoff + DAY_MS
    ]


class Killed(BaseException):
    """A kill at a step of the migration (a BaseException: no ``except Exception`` in the code stops it)."""


def layout_of(path: str) -> tuple[str, list[str], dict[str, str]]:
    """A table's schema (JSON, the generated column's expression included), partitioning and properties."""
    meta = open_delta(path).metadata()
    return open_delta(path).schema().to_json(), list(meta.partition_columns), dict(meta.configuration)


def test_migrate_layout_interrupted_at_each_step_loses_no_row_and_a_rerun_finishes_it(
    spark, tmp_path, monkeypatch
):
    from delta.tables import DeltaTable

    root = str(tmp_path / "tables")
    sink = DeltaTables(root, "writer")
    tables = ("quarantine", "arrivals")  # migrated in this order (that of TABLES)
    for table, days in zip(tables, ((0, 1), (0, 1, 2)), strict=True):
        write_previous_layout(spark, sink.path(table), table, days)
    cdf = "ALTER TABLE delta.`{}` SET TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')"
    spark.sql(cdf.format(sink.path("arrivals")))  # a property set on the old table survives the migration
    rows = {t: sorted(sink.read(t).to_pylist(), key=repr) for t in tables}
    original = {t: open_delta(sink.path(t)).version() for t in tables}
    for table in tables:  # what the migration must make: the layout of a table created now
        create_table(spark, str(tmp_path / "fresh" / table), table)
    expected = {t: layout_of(str(tmp_path / "fresh" / t)) for t in tables}
    expected["arrivals"][2]["delta.enableChangeDataFeed"] = "true"

    def kill_at(point):
        def reached(step, table):
            if (step, table) == point:
                raise Killed(point)

        return reached

    # The steps are reading a table, its commit and after it. A kill before a table's commit leaves what a
    # kill while reading it leaves, and one after the last commit what a finished run leaves (a rerun
    # migrating nothing: asserted after each point), so two points give every state a kill can leave:
    # nothing migrated, and the first table migrated with the second not.
    for point in [("read", "quarantine"), ("committed", "quarantine")]:
        monkeypatch.setattr(layout_migration, "reached", kill_at(point))
        with pytest.raises(Killed):
            migrate_layout(spark, root)
        for t in tables:  # killed: every row there exactly once, in one layout or the other
            assert sorted(sink.read(t).to_pylist(), key=repr) == rows[t], point
        done = [t for t in tables if table_layout(sink.path(t), t) is not None]
        assert done == list(tables[: tables.index(point[1]) + (point[0] == "committed")]), point
        monkeypatch.setattr(layout_migration, "reached", lambda step, table: None)
        versions = {t: open_delta(sink.path(t)).version() for t in tables}
        assert migrate_layout(spark, root) == [t for t in tables if t not in done], point  # the rerun
        for t in tables:
            path = sink.path(t)
            assert sorted(sink.read(t).to_pylist(), key=repr) == rows[t], point
            assert layout_of(path) == expected[t], point
            assert sink.committed_version(t) == len(rows[t]) // 5 - 1  # the stream's idempotency survives
            if t not in done:  # one commit: the replacement with the rows, partitioned
                (commit,) = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()[:1]
                assert commit["version"] == versions[t] + 1, point
                assert commit["operation"] == "REPLACE TABLE AS SELECT", point
        assert migrate_layout(spark, root) == []  # nothing left to migrate
        for t in tables:  # back to the previous layout for the next point
            DeltaTable.forPath(spark, sink.path(t)).restoreToVersion(original[t])
            assert table_layout(sink.path(t), t) is None


def test_migrate_layout_finishes_a_migration_of_the_earlier_version_killed_between_its_two_commits(
    spark, tmp_path
):
    from delta.tables import DeltaTable

    root = str(tmp_path / "tables")
    sink = DeltaTables(root, "writer")
    path = sink.path("arrivals")
    write_previous_layout(spark, path, "arrivals", (0, 1))
    rows = sorted(sink.read("arrivals").to_pylist(), key=repr)
    table_builder(DeltaTable.replace(spark).location(path), "arrivals").execute()  # its first commit
    assert sink.read("arrivals").num_rows == 0 and table_layout(path, "arrivals") == "arrival_date"
    assert migrate_layout(spark, root) == ["arrivals"]
    assert sorted(sink.read("arrivals").to_pylist(), key=repr) == rows
    assert sink.committed_version("arrivals") == 1
    assert migrate_layout(spark, root) == []
