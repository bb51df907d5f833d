"""Delta table maintenance: compaction with Z-order, ``arrivals`` retention, VACUUM (a Spark application).

Run daily by ``dags/table_maintenance.py`` through ``spark-submit``; for each of the pipeline's tables that
exists, in this order:

1. **Retention** (``arrivals`` only): delete the rows ingested more than ``--arrivals-retain-days`` ago,
   so the tuner's history does not grow forever (the re-tuning DAG reads a day or so of it).
2. **OPTIMIZE**: the streaming job commits a few small files per micro-batch; compaction rewrites them
   into large ones, Z-ordered (:data:`ZORDER`) by the columns the readers filter on, so their min/max
   statistics prune files: ``aggregates`` by window start and batch (the backfill reads a window range,
   data quality a batch range), ``late_events`` by batch and event time, ``watermark_log`` and
   ``arrivals`` by ingestion time (data quality and the tuner read an ingestion interval),
   ``quarantine`` by batch. ``aggregates`` and ``late_events`` are also partitioned by date
   (``jobs/common/tables.py``); OPTIMIZE works within each partition.
3. **VACUUM** with ``--retain-hours`` (default 168, Delta's own default: 7 days): data files that no
   version younger than that references are deleted. A reader or a streaming query older than the
   retention may fail; below 168 h Delta's safety check is turned off for this application only, with a
   warning.

OPTIMIZE and VACUUM commit nothing that changes a row; Delta's conflict checks let them run beside the
streaming job's blind appends (a conflicting commit is retried, with backoff and jitter:
:class:`jobs.common.retry.RetryPolicy`). The report (JSON; ``--report``) gives per
table the data files and rows before and after, the rows deleted and the files vacuumed.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file by spark-submit: make the project importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from jobs.common.reads import open_delta, read_delta, table_path  # noqa: E402
from jobs.common.retry import RetryPolicy  # noqa: E402
from jobs.common.schemas import DAY_MS, TABLES  # noqa: E402
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


@dataclass(frozen=True)
class MaintenanceOptions:
    """One maintenance run."""

    tables: str
    retain_hours: float = SAFE_RETAIN_HOURS
    arrivals_retain_days: float | None = 30.0  # None: keep every row
    zorder: bool = True
    run_id: str | None = None
    max_retries: int = 5

    def __post_init__(self) -> None:
        if self.retain_hours < 0:
            msg = f"retain_hours must be >= 0, got {self.retain_hours}"
            raise ValueError(msg)
        if self.arrivals_retain_days is not None and self.arrivals_retain_days <= 0:
            msg = f"arrivals_retain_days must be > 0, got {self.arrivals_retain_days}"
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
    """(active data files, rows) of the table's current version, from the Delta log and Parquet footers."""
    dt = open_delta(path)
    if dt is None:
        return 0, 0
    files = len(dt.file_uris())
    rows = read_delta(dt, path, columns=[]).num_rows if files else 0
    return files, int(rows)


def run_maintenance(spark: Any, options: MaintenanceOptions, now_ms: int | None = None) -> MaintenanceReport:
    """Retention, OPTIMIZE (Z-order) and VACUUM on every table of ``options.tables`` (module docstring)."""
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
    for table in TABLES:
        path = table_path(options.tables, table)
        if not DeltaTable.isDeltaTable(spark, path):
            continue
        tr = TableReport()
        tr.files_on_disk_before = data_files_on_disk(path)
        tr.files_before, tr.rows_before = _snapshot(path)
        delta = DeltaTable.forPath(spark, path)
        if table == "arrivals" and options.arrivals_retain_days is not None:
            cutoff = now - int(options.arrivals_retain_days * DAY_MS)
            report.arrivals_cutoff_ms = cutoff
            delete = f"ingested_at_ms < {cutoff}"
            policy.call(lambda d=delta, c=delete: d.delete(c), f"{table} DELETE conflicted")
        optimize = delta.optimize()
        if options.zorder and ZORDER.get(table):
            tr.zorder = list(ZORDER[table])
            policy.call(lambda o=optimize, z=tr.zorder: o.executeZOrderBy(*z), f"{table} OPTIMIZE conflicted")
        else:
            policy.call(optimize.executeCompaction, f"{table} OPTIMIZE conflicted")
        delta.vacuum(options.retain_hours)
        tr.files_after, tr.rows_after = _snapshot(path)
        tr.rows_deleted = tr.rows_before - tr.rows_after
        tr.files_on_disk_after = data_files_on_disk(path)
        report.tables[table] = tr
        log.info("%s: %s", table, asdict(tr))
    report.seconds = round(time.perf_counter() - started, 3)
    return report


def build_parser() -> argparse.ArgumentParser:
    """The ``jobs/batch/maintenance.py`` argument parser."""
    from watermark.cli import OneLineParser

    p = OneLineParser(prog="jobs/batch/maintenance.py", description=__doc__.split("\n", 1)[0])
    p.add_argument("--tables", required=True, help="the streaming job's --output (Delta tables)")
    p.add_argument("--retain-hours", type=float, default=SAFE_RETAIN_HOURS, help="VACUUM retention")
    p.add_argument(
        "--arrivals-retain-days", type=float, default=30.0, help="delete older arrivals; 0: keep all"
    )
    p.add_argument("--no-zorder", action="store_true", help="compact without Z-ordering")
    p.add_argument("--report", help="also write the report (JSON) to this file")
    p.add_argument("--run-id", help="recorded in the report")
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point (``spark-submit jobs/batch/maintenance.py`` or ``python -m jobs.batch.maintenance``)."""
    from watermark.clilog import run_main

    return run_main(build_parser(), _run, argv)


def _run(args: argparse.Namespace) -> int:
    from jobs.common.session import run_reporting
    from watermark.clilog import usage_errors

    with usage_errors(ValueError):
        options = MaintenanceOptions(
            tables=storage.checked(args.tables, "--tables"),
            retain_hours=args.retain_hours,
            arrivals_retain_days=args.arrivals_retain_days or None,
            zorder=not args.no_zorder,
            run_id=args.run_id,
        )
    return run_reporting("jobs.batch.maintenance", lambda spark: run_maintenance(spark, options), args.report)


if __name__ == "__main__":
    sys.exit(main())
