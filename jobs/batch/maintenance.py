"""Delta table maintenance: date-partition retention, incremental OPTIMIZE with Z-order, VACUUM (Spark).

Run daily by ``dags/table_maintenance.py`` through ``spark-submit``; for each of the pipeline's tables that
exists, in this order. Its work is bounded by what was written since the last run, not by the tables' age
(``benchmarks/maintenance_scale.py`` measures it at 1, 10 and 30 days of history).

1. **Retention** (``arrivals`` only): the dates (``arrival_date``, the UTC day of ``arrival_time_ms``) that
   ended more than ``--arrivals-retain-days`` ago are dropped with ``DELETE WHERE arrival_date < DATE'...'``,
   a predicate on the partition column only, which Delta carries out from the log: the dates' files are
   removed, none is read or rewritten (the commit's ``numCopiedRows`` and ``numAddedFiles`` are 0; the report
   keeps ``retention_files_written``). A row is kept at least the retention and at most a day longer.
2. **OPTIMIZE**, only the dates written since the last run: the Delta commits since the version the last run
   handled (kept in ``<tables>/_maintenance/optimized.json``, :data:`STATE_FILE`, through
   :mod:`watermark.storage`, so on object stores too) are read as JSON (the log's ``add`` actions with
   ``dataChange``: appends, the backfill's MERGE; not OPTIMIZE's own rewrites) and their ``partitionValues``
   give the dates; ``OPTIMIZE ... WHERE <date column> IN (...) ZORDER BY`` (:data:`ZORDER`: the columns the
   readers filter on) rewrites those dates' files and leaves every other date's files as they are. With no
   state (first run, a table recreated under the same path: another table id) or when the log no longer
   holds the next commit (Delta cleans commits older than its log retention, 30 days by default), the whole
   table is optimized once, with a warning. Every table is date-partitioned (``jobs.common.schemas.
   PARTITIONS``); OSS Delta's Z-order rewrites every file its predicate selects, so the date predicate is what
   bounds the work (liquid clustering, ``CLUSTER BY``, would make OPTIMIZE incremental by itself but cannot
   be combined with partitioning nor drop a date without rewriting files: not used).
3. **VACUUM** with ``--retain-hours`` (default 168, Delta's own default: 7 days) in Delta's ``LITE`` mode
   (``--vacuum lite``, the default): the files to delete are found in the Delta log (the files its commits
   removed since the last VACUUM), not by listing the table's folder, so its cost follows what changed. When
   Delta refuses LITE (``DELTA_CANNOT_VACUUM_LITE``: files to delete that its log no longer names, once it
   has cleaned commits older than its log retention) it runs in FULL mode, with a warning; ``--vacuum
   full`` lists the folder, which also deletes files no commit names (a write that failed before its
   commit). A reader or a streaming query older than the retention may fail; below 168 h
   Delta's safety check is turned off for this application only, with a warning.

**Tables created before their date partition** (``arrivals``, ``quarantine`` and ``watermark_log`` were
unpartitioned in earlier versions) keep working: each run then optimizes the whole table and the
``arrivals`` retention deletes rows (``DELETE WHERE arrival_time_ms < <the same date's start>``, which
rewrites the files holding older rows), with a warning naming the migration: ``--migrate-layout`` (with the
streaming job stopped) rewrites each such table in place with its partition column, in one Delta commit
per table, so it is safe to interrupt (:mod:`jobs.batch.layout_migration`).

OPTIMIZE and VACUUM commit nothing that changes a row; Delta's conflict checks let them run beside the
streaming job's blind appends (a conflicting commit is retried, with backoff and jitter:
:class:`jobs.common.retry.RetryPolicy`). The report (JSON; ``--report``) gives per table the data files and
rows before and after (from the Delta log's statistics), the dates optimized and the files rewritten, the
rows deleted and the files vacuumed.

**Interrupted** (a SIGKILL included) at any point, a run loses no row: the retention's ``DELETE`` and the
OPTIMIZE are one Delta commit each (committed whole or not at all), VACUUM deletes only files no longer in
the table's current version, and the state file is written after the OPTIMIZE commit it records (killed
between the two, the next run reads that OPTIMIZE's commit, which adds no data, and optimizes the same
dates). A rerun does what is left.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file by spark-submit: make the project importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from jobs.batch.layout_migration import MigrationReport, migrate_layout, table_layout  # noqa: E402
from jobs.common.reads import day_of, open_delta, read_delta, table_path  # noqa: E402
from jobs.common.retry import RetryPolicy  # noqa: E402
from jobs.common.schemas import DAY_MS, PARTITIONS, TABLES  # noqa: E402
from watermark import storage  # noqa: E402
from watermark.storage import Location  # noqa: E402

log = logging.getLogger(__name__)

#: Z-order columns per table: what its readers filter on (module docstring).
ZORDER: dict[str, list[str]] = {
    "aggregates": ["window_start_ms", "batch_id"],
    "late_events": ["batch_id", "event_time_ms"],
    "watermark_log": ["ingested_at_ms"],
    "arrivals": ["ingested_at_ms"],
    "quarantine": ["batch_id"],
}
#: Delta's default VACUUM retention, below which its safety check refuses to run.
SAFE_RETAIN_HOURS = 168.0
#: Where the last run's handled Delta version of each table is kept, under the tables' root.
STATE_FILE = "_maintenance/optimized.json"
VACUUM_MODES = ("lite", "full")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


@dataclass(frozen=True)
class MaintenanceOptions:
    """One maintenance run."""

    tables: str
    retain_hours: float = SAFE_RETAIN_HOURS
    arrivals_retain_days: float | None = 30.0  # None: keep every row
    zorder: bool = True
    run_id: str | None = None
    max_retries: int = 5
    vacuum: str = "lite"

    def __post_init__(self) -> None:
        if self.retain_hours < 0:
            msg = f"retain_hours must be >= 0, got {self.retain_hours}"
            raise ValueError(msg)
        if self.arrivals_retain_days is not None and self.arrivals_retain_days <= 0:
            msg = f"arrivals_retain_days must be > 0, got {self.arrivals_retain_days}"
            raise ValueError(msg)
        if self.vacuum not in VACUUM_MODES:
            msg = f"vacuum must be one of {', '.join(VACUUM_MODES)}, got {self.vacuum!r}"
            raise ValueError(msg)


@dataclass
class TableReport:
    """What maintenance did to one table."""

    files_before: int = 0
    files_after: int = 0
    files_on_disk_before: int = 0
    files_on_disk_after: int = 0
    rows_before: int = 0
    rows_after: int = 0
    rows_deleted: int = 0
    zorder: list[str] = field(default_factory=list)
    #: The date partition column, or None for a table created before it (optimized whole, module docstring).
    partition_column: str | None = None
    #: Dates OPTIMIZE rewrote (ISO dates; "null" for a null date); None: the whole table.
    optimized: list[str] | None = None
    files_rewritten: int = 0  # files OPTIMIZE replaced
    versions_read: int = 0  # Delta commits read to find the dates written since the last run
    retention: str | None = None  # "dates" (partition drop) or "rows" (an unpartitioned arrivals)
    retention_files_written: int = 0  # files the retention's DELETE wrote (0: it rewrote nothing)
    vacuum: str | None = None  # the VACUUM mode that ran


@dataclass
class MaintenanceReport:
    """Per-table figures (printed as JSON, kept with ``--report``, pushed as metrics by the DAG)."""

    run_id: str | None = None
    tables: dict[str, TableReport] = field(default_factory=dict)
    arrivals_cutoff_ms: int | None = None
    retain_hours: float = SAFE_RETAIN_HOURS
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)

    def totals(self) -> dict[str, float]:
        """Totals over the tables (the DAG's metrics)."""
        reports = self.tables.values()
        return {
            "files_before": sum(t.files_before for t in reports),
            "files_after": sum(t.files_after for t in reports),
            "files_vacuumed": sum(max(0, t.files_on_disk_before - t.files_on_disk_after) for t in reports),
            "arrivals_deleted": self.tables["arrivals"].rows_deleted if "arrivals" in self.tables else 0,
        }


def data_files_on_disk(path: str) -> int:
    """Parquet files under a table's folder (referenced or not; ``_delta_log`` excluded)."""
    root = Location.of(path)
    return sum(
        1
        for entry in storage.walk_files(root)
        if entry.name.endswith(".parquet") and not entry.location.relative_to(root).startswith("_delta_log/")
    )


def _snapshot(path: str) -> tuple[int, int]:
    """(active data files, rows) of the table's current version, from the Delta log's statistics.

    A file the log has no row count for is counted from its Parquet footer.
    """
    import pyarrow as pa

    dt = open_delta(path)
    if dt is None:
        return 0, 0
    actions = pa.table(dt.get_add_actions(flatten=True))
    files = actions.num_rows
    if not files:
        return 0, 0
    counts = actions.column("num_records").to_pylist() if "num_records" in actions.column_names else [None]
    if any(c is None for c in counts):
        return files, int(read_delta(dt, path, columns=[]).num_rows)
    return files, int(sum(counts))


def cutoff_date_ms(now_ms: int, retain_days: float) -> int:
    """Start (epoch ms) of the oldest UTC date the retention keeps: that of the instant ``retain_days`` ago.

    Dates before it ended more than ``retain_days`` ago and are dropped whole; a row is kept at least
    ``retain_days`` and at most a day longer.

    >>> cutoff_date_ms(3 * 86_400_000 + 5, 1.0) == 2 * 86_400_000
    True
    >>> cutoff_date_ms(3 * 86_400_000 + 5, 0.5) == 2 * 86_400_000
    True
    """
    return (now_ms - int(retain_days * DAY_MS)) // DAY_MS * DAY_MS


def date_literal(ms: int) -> str:
    """A Spark SQL date literal for the UTC date holding ``ms``.

    >>> date_literal(86_400_000)
    "DATE'1970-01-02'"
    """
    return f"DATE'{day_of(ms).isoformat()}'"


def partition_predicate(column: str, values: Iterable[str | None]) -> str:
    """A Spark SQL predicate selecting the date partitions ``values`` (ISO dates; None: the null date).

    Raises
    ------
    ValueError
        If a value is not an ISO date (the Delta log's form of a DATE partition value), or there is none.

    >>> partition_predicate("event_date", ["2026-11-02", None, "2026-11-01"])
    "event_date IN (DATE'2026-11-01', DATE'2026-11-02') OR event_date IS NULL"

    """
    given = list(values)
    dates = sorted({v for v in given if v is not None})
    bad = [v for v in dates if not _DATE.match(v)]
    if bad:
        msg = f"{column}: not ISO dates: {', '.join(map(repr, bad[:5]))}"
        raise ValueError(msg)
    parts = []
    if dates:
        listed = ", ".join(f"DATE'{d}'" for d in dates)
        parts.append(f"{column} IN ({listed})")
    if None in given:
        parts.append(f"{column} IS NULL")
    if not parts:
        msg = f"{column}: no partition to select"
        raise ValueError(msg)
    return " OR ".join(parts)


def read_state(text: str | None) -> dict[str, dict[str, Any]]:
    """The state file's per-table entries (``{"table_id": ..., "version": n}``); unreadable: none, warned.

    >>> read_state('{"tables": {"aggregates": {"table_id": "x", "version": 3}}}')
    {'aggregates': {'table_id': 'x', 'version': 3}}
    >>> read_state(None), read_state("{")
    ({}, {})
    """
    if text is None:
        return {}
    try:
        tables = json.loads(text).get("tables", {})
        return {
            str(name): {"table_id": str(entry["table_id"]), "version": int(entry["version"])}
            for name, entry in tables.items()
        }
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        log.warning("the maintenance state file is unreadable (%s): every table is optimized whole", exc)
        return {}


def render_state(tables: Mapping[str, Mapping[str, Any]]) -> str:
    """The state file's text."""
    return json.dumps({"tables": dict(sorted(tables.items()))}, indent=1, sort_keys=True) + "\n"


def _state_location(root: str) -> Location:
    return Location.of(root) / STATE_FILE


def load_state(root: str) -> dict[str, dict[str, Any]]:
    """The state kept under the tables' ``root`` (none when absent)."""
    where = _state_location(root)
    return read_state(storage.read_text(where) if storage.exists(where) else None)


def save_state(root: str, tables: Mapping[str, Mapping[str, Any]]) -> None:
    """Keep the state under the tables' ``root``."""
    where = _state_location(root)
    storage.make_dirs(where.parent)
    storage.write_text(where, render_state(tables))


def commit_file(path: str, version: int) -> Location:
    """The Delta log's JSON commit file of ``version`` for the table at ``path``."""
    return Location.of(path) / "_delta_log" / f"{version:020d}.json"


def dates_written(spark: Any, path: str, column: str, after: int, through: int) -> set[str | None] | None:
    """Values of ``column`` that commits ``after + 1 .. through`` added data to (None: the log lacks them).

    Reads the commits' JSON (the Delta log's public format) with Spark, which spreads the files over its
    executors: the ``add`` actions that change data (``dataChange``: appends, MERGE, the retention's
    rewrites of an unpartitioned table), not OPTIMIZE's own rewrites, and their ``partitionValues``.
    """
    if through <= after:
        return set()
    if not storage.exists(commit_file(path, after + 1)):
        return None  # cleaned by Delta's log retention (or never there): the caller optimizes everything
    files = [commit_file(path, v).spark for v in range(after + 1, through + 1)]
    schema = "add STRUCT<partitionValues: MAP<STRING, STRING>, dataChange: BOOLEAN>"
    rows = (
        spark.read.schema(schema)
        .json(files)
        .where("add IS NOT NULL AND add.dataChange")
        .selectExpr(f"add.partitionValues['{column}'] AS value")
        .distinct()
        .collect()
    )
    return {row["value"] for row in rows}


def _quoted(path: str) -> str:
    return "delta.`" + Location.of(path).spark.replace("`", "``") + "`"


def _newest_version(delta: Any) -> int:
    newest: Any = delta.history(1).select("version").first()
    return int(newest["version"])


def _operation_after(delta: Any, operation: str, after: int) -> Mapping[str, str]:
    """Operation metrics of the newest commit of ``operation`` after version ``after`` (none: empty)."""
    rows = delta.history(20).select("version", "operation", "operationMetrics").collect()
    for row in rows:
        if row["operation"] == operation and int(row["version"]) > after:
            return dict(row["operationMetrics"] or {})
    return {}


def _retention(
    spark: Any, delta: Any, table: str, tr: TableReport, cutoff_ms: int, policy: RetryPolicy
) -> None:
    """Drop the ``arrivals`` dates before ``cutoff_ms`` (a date's start): by partition, or rows (legacy)."""
    if tr.partition_column is not None:
        predicate = f"{tr.partition_column} < {date_literal(cutoff_ms)}"
        tr.retention = "dates"
    else:
        predicate = f"{PARTITIONS[table][1]} < {cutoff_ms}"
        tr.retention = "rows"
    before = _newest_version(delta)
    policy.call(lambda: delta.delete(predicate), f"{table} DELETE conflicted")
    metrics = _operation_after(delta, "DELETE", before)  # none when nothing was old enough
    tr.rows_deleted = 0
    tr.retention_files_written = int(metrics.get("numAddedFiles", 0) or 0)
    if metrics.get("numDeletedRows") is not None:
        tr.rows_deleted = int(metrics["numDeletedRows"])
    if tr.partition_column is not None and (
        tr.retention_files_written or int(metrics.get("numCopiedRows", 0) or 0)
    ):
        log.warning("%s: the retention's DELETE rewrote files (%s)", table, metrics)


def _optimize(
    spark: Any,
    delta: Any,
    path: str,
    table: str,
    tr: TableReport,
    options: MaintenanceOptions,
    state: dict[str, dict[str, Any]],
    policy: RetryPolicy,
) -> None:
    """OPTIMIZE the dates written since the last run (the whole table when unknown); keep the state."""
    dt = open_delta(path)
    table_id = str(dt.metadata().id)
    version = int(dt.version())
    optimize = delta.optimize()
    if tr.partition_column is not None:
        known = state.get(table)
        written: set[str | None] | None = None
        if known is not None and known["table_id"] == table_id:
            tr.versions_read = max(0, version - known["version"])
            written = dates_written(spark, path, tr.partition_column, known["version"], version)
            if written is None:
                log.warning(
                    "%s: the Delta log no longer holds version %d, the one after the last maintenance run: "
                    "optimizing every date",
                    table,
                    known["version"] + 1,
                )
        elif known is not None:
            log.warning(
                "%s: another table than the last run's (table id changed): optimizing every date", table
            )
        if written is not None:
            tr.optimized = sorted("null" if v is None else v for v in written)
            if not written:
                state[table] = {"table_id": table_id, "version": version}
                return
            optimize = optimize.where(partition_predicate(tr.partition_column, written))
    if options.zorder and ZORDER.get(table):
        tr.zorder = list(ZORDER[table])
        result = policy.call(lambda: optimize.executeZOrderBy(*tr.zorder), f"{table} OPTIMIZE conflicted")
    else:
        result = policy.call(optimize.executeCompaction, f"{table} OPTIMIZE conflicted")
    metrics = result.first()["metrics"] if result is not None else None
    tr.files_rewritten = int(metrics["numFilesRemoved"]) if metrics is not None else 0
    state[table] = {"table_id": table_id, "version": version}


def _vacuum(spark: Any, path: str, table: str, tr: TableReport, options: MaintenanceOptions) -> None:
    """VACUUM in the chosen mode; LITE that Delta refuses runs FULL, with a warning."""
    retain = f"RETAIN {options.retain_hours:g} HOURS"
    if options.vacuum == "lite":
        try:
            spark.sql(f"VACUUM {_quoted(path)} LITE {retain}").collect()
            tr.vacuum = "lite"
            return
        except Exception as exc:  # noqa: BLE001 - Delta refuses LITE when its log is too short: FULL then
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if "DELTA_CANNOT_VACUUM_LITE" not in str(exc):
                raise
            log.warning("%s: VACUUM LITE refused (%s): running VACUUM FULL", table, first)
    spark.sql(f"VACUUM {_quoted(path)} FULL {retain}").collect()
    tr.vacuum = "full"


def _legacy_warning(table: str, root: str) -> None:
    column = PARTITIONS[table][0]
    log.warning(
        "%s was created before its date partition column %s: each run optimizes all of it%s; with the "
        "streaming job stopped, migrate it: python -m jobs.batch.maintenance --tables %s --migrate-layout "
        "(docs/orchestration.md#table-maintenance-jobsbatchmaintenancepy)",
        table,
        column,
        " and the retention rewrites the files holding expired rows" if table == "arrivals" else "",
        root,
    )


def run_maintenance(spark: Any, options: MaintenanceOptions, now_ms: int | None = None) -> MaintenanceReport:
    """Retention, incremental OPTIMIZE (Z-order) and VACUUM on every table of ``options.tables``."""
    from delta.tables import DeltaTable

    started = time.perf_counter()
    now = int(time.time() * 1000) if now_ms is None else now_ms
    report = MaintenanceReport(run_id=options.run_id, retain_hours=options.retain_hours)
    policy = RetryPolicy(options.max_retries, backoff_s=1.0)
    if options.retain_hours < SAFE_RETAIN_HOURS:
        log.warning(
            "VACUUM retention %.1f h is below Delta's safe %g h: readers older than that may fail",
            options.retain_hours,
            SAFE_RETAIN_HOURS,
        )
        spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    state = load_state(options.tables)
    if not state:
        log.info("no maintenance state under %s: every table is optimized whole this run", options.tables)
    for table in TABLES:
        path = table_path(options.tables, table)
        if not DeltaTable.isDeltaTable(spark, path):
            continue
        tr = TableReport(partition_column=table_layout(path, table))
        if tr.partition_column is None and table in PARTITIONS:
            _legacy_warning(table, options.tables)
        tr.files_on_disk_before = data_files_on_disk(path)
        tr.files_before, tr.rows_before = _snapshot(path)
        delta = DeltaTable.forPath(spark, path)
        if table == "arrivals" and options.arrivals_retain_days is not None:
            report.arrivals_cutoff_ms = cutoff_date_ms(now, options.arrivals_retain_days)
            _retention(spark, delta, table, tr, report.arrivals_cutoff_ms, policy)
        _optimize(spark, delta, path, table, tr, options, state, policy)
        save_state(options.tables, state)
        _vacuum(spark, path, table, tr, options)
        tr.files_after, tr.rows_after = _snapshot(path)
        if tr.retention is None:
            tr.rows_deleted = max(0, tr.rows_before - tr.rows_after)
        tr.files_on_disk_after = data_files_on_disk(path)
        report.tables[table] = tr
        log.info("%s: %s", table, asdict(tr))
    report.seconds = round(time.perf_counter() - started, 3)
    return report


def build_parser() -> argparse.ArgumentParser:
    """The ``jobs/batch/maintenance.py`` argument parser."""
    from watermark.cli.main import OneLineParser

    p = OneLineParser(prog="jobs/batch/maintenance.py", description=__doc__.split("\n", 1)[0])
    p.add_argument("--tables", required=True, help="the streaming job's --output (Delta tables)")
    p.add_argument("--retain-hours", type=float, default=SAFE_RETAIN_HOURS, help="VACUUM retention")
    p.add_argument(
        "--arrivals-retain-days", type=float, default=30.0, help="delete older arrivals; 0: keep all"
    )
    p.add_argument("--no-zorder", action="store_true", help="compact without Z-ordering")
    p.add_argument(
        "--vacuum",
        choices=VACUUM_MODES,
        default="lite",
        help="lite (default): the files to delete come from the Delta log; full: the table folder is listed",
    )
    p.add_argument(
        "--migrate-layout",
        action="store_true",
        help="only rewrite the tables created before their date partition column (streaming job stopped)",
    )
    p.add_argument("--report", help="also write the report (JSON) to this file")
    p.add_argument("--run-id", help="recorded in the report")
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point (``spark-submit jobs/batch/maintenance.py`` or ``python -m jobs.batch.maintenance``)."""
    from watermark.cli.log import run_main

    return run_main(build_parser(), _run, argv)


def _run(args: argparse.Namespace) -> int:
    from jobs.common.session import run_reporting
    from watermark.cli.log import usage_errors

    with usage_errors(ValueError):
        options = MaintenanceOptions(
            tables=storage.checked(args.tables, "--tables"),
            retain_hours=args.retain_hours,
            arrivals_retain_days=args.arrivals_retain_days or None,
            zorder=not args.no_zorder,
            run_id=args.run_id,
            vacuum=args.vacuum,
        )
    if args.migrate_layout:
        return run_reporting(
            "jobs.batch.maintenance",
            lambda spark: MigrationReport(migrate_layout(spark, options.tables)),
            args.report,
        )
    return run_reporting("jobs.batch.maintenance", lambda spark: run_maintenance(spark, options), args.report)


if __name__ == "__main__":
    sys.exit(main())
