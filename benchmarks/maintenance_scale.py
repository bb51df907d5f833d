"""Whether the daily table maintenance's time stays flat as the tables' history grows.

    python benchmarks/maintenance_scale.py [--days 1,10,30] [--rows-per-day 6000] [--files-per-day 6] [--json]

One local SparkSession (as the batch jobs build it). For each history length N it builds the five tables
(their partitioned layout: :func:`jobs.common.tables.create_table`) with N days of rows, each day written as
``--files-per-day`` small files (what the stream's many small appends leave), then:

1. runs the maintenance once with VACUUM retention 0, untimed: the state of tables maintained daily until
   then (each date compacted, the replaced files gone, the state file written);
2. appends a new day as the stream does (``--files-per-day`` appends of small files, one commit each);
3. times the maintenance as the DAG runs it (``jobs.batch.maintenance.run_maintenance``: arrivals retention
   30 days, OPTIMIZE with Z-order, VACUUM with the default 168 h retention, LITE), the ``incremental`` row;
4. unless ``--no-previous``, the same on a copy of step 2's tables without the state file and with
   VACUUM FULL: the whole tables optimized and listed, as the previous version did every day (the
   ``whole`` row).

A first, untimed 1-day round warms the JVM (``--no-warmup`` skips it: the first maintenance in a process
pays the compilation of Delta's code paths, about a minute here). It prints each run's seconds at each N,
the files OPTIMIZE rewrote, and the ratio of the largest N to the smallest (the target for ``incremental``:
flat within 1.5x).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa  # noqa: E402

from jobs.batch.maintenance import STATE_FILE, MaintenanceOptions, run_maintenance  # noqa: E402
from jobs.common.schemas import DAY_MS, TABLES  # noqa: E402
from jobs.common.session import arrow_frame, build_session  # noqa: E402
from jobs.common.tables import create_table  # noqa: E402

#: 2025-11-01 00:00 UTC: day 0 of the built history.
DAY0_MS = 1_761_955_200_000


def day_rows(table: str, day: int, rows: int, seed: int = 0) -> pa.Table:
    """``rows`` rows of ``table`` whose every time lies on ``day`` (after :data:`DAY0_MS`), in time order."""
    import numpy as np

    rng = np.random.default_rng(seed * 1_000 + day)
    start = DAY0_MS + day * DAY_MS
    times = np.sort(rng.integers(start, start + DAY_MS, rows))
    columns: dict[str, Any] = {}
    for f in TABLES[table]:
        if f.name.endswith("_ms"):
            columns[f.name] = pa.array(times, f.type)
        elif f.name == "batch_id":
            columns[f.name] = pa.array(day * 10_000 + np.arange(rows) // 100, f.type)
        elif pa.types.is_string(f.type):
            columns[f.name] = pa.array([f"k{i % 50}" for i in range(rows)], f.type)
        elif pa.types.is_boolean(f.type):
            columns[f.name] = pa.array(np.zeros(rows, bool), f.type)
        elif pa.types.is_floating(f.type):
            columns[f.name] = pa.array(rng.random(rows), f.type)
        else:
            columns[f.name] = pa.array(rng.integers(0, 1_000, rows), f.type)
    return pa.table(columns)


def append(spark: Any, path: str, data: pa.Table, files: int) -> None:
    """Append ``data`` to the Delta table at ``path`` as ``files`` small files in one commit."""
    arrow_frame(spark, data).repartition(files).write.format("delta").mode("append").save(path)


def build(spark: Any, root: Path, days: int, rows_per_day: int, files_per_day: int) -> None:
    """The five tables with ``days`` days of history, each day ``files_per_day`` small files."""
    for table in TABLES:
        path = str(root / table)
        create_table(spark, path, table)
        for day in range(days):
            append(spark, path, day_rows(table, day, rows_per_day), files_per_day)


def new_day(spark: Any, root: Path, day: int, rows_per_day: int, files_per_day: int) -> None:
    """A new day as the stream writes it: ``files_per_day`` appends (commits) of a small file each."""
    for table in TABLES:
        data = day_rows(table, day, rows_per_day)
        step = -(-data.num_rows // files_per_day)
        for i in range(files_per_day):
            append(spark, str(root / table), data.slice(i * step, step), 1)


def timed(spark: Any, root: Path, now_ms: int, vacuum: str) -> dict[str, Any]:
    started = time.perf_counter()
    report = run_maintenance(spark, MaintenanceOptions(str(root), vacuum=vacuum), now_ms=now_ms)
    seconds = time.perf_counter() - started
    return {
        "seconds": round(seconds, 2),
        "files_rewritten": sum(t.files_rewritten for t in report.tables.values()),
        "dates_optimized": sum(
            len(t.optimized) if t.optimized is not None else -1 for t in report.tables.values()
        ),
    }


def run(
    days: list[int], rows_per_day: int, files_per_day: int, previous: bool, warmup: bool = True
) -> dict[str, Any]:
    spark = build_session("maintenance-scale", master="local[2]", shuffle_partitions=2)
    spark.sparkContext.setLogLevel("ERROR")
    out: dict[str, Any] = {"rows_per_day": rows_per_day, "files_per_day": files_per_day, "runs": {}}
    try:
        for n in ([1] if warmup else []) + days:
            warming = warmup and n == 1 and not out.get("warmed")
            with tempfile.TemporaryDirectory(prefix=f"maint-{n}d-") as tmp:
                root = Path(tmp) / "tables"
                build(spark, root, n, rows_per_day, files_per_day)
                warm = MaintenanceOptions(str(root), retain_hours=0.0, vacuum="full")
                run_maintenance(spark, warm, now_ms=DAY0_MS + n * DAY_MS)  # maintained daily until now
                spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "true")
                new_day(spark, root, n, rows_per_day, files_per_day)
                now = DAY0_MS + (n + 1) * DAY_MS
                copy = Path(tmp) / "whole"
                if previous:
                    shutil.copytree(root, copy)
                    (copy / STATE_FILE).unlink()
                row = {"incremental": timed(spark, root, now, "lite")}
                if previous:
                    row["whole"] = timed(spark, copy, now, "full")
                if warming:  # the first round in the JVM pays its code's compilation: not kept
                    out["warmed"] = True
                    print(f"  warm-up round: {json.dumps(row)}", file=sys.stderr)
                    continue
                out["runs"][n] = row
                print(f"  {n:>3} days: {json.dumps(row)}", file=sys.stderr)
    finally:
        spark.stop()
    first, last = out["runs"][days[0]], out["runs"][days[-1]]
    out["ratio"] = {kind: round(last[kind]["seconds"] / first[kind]["seconds"], 2) for kind in first}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--days", default="1,10,30", help="history lengths, comma-separated, ascending")
    p.add_argument("--rows-per-day", type=int, default=6_000, help="rows a day in each table")
    p.add_argument("--files-per-day", type=int, default=6, help="small files a day in each table")
    p.add_argument("--no-previous", action="store_true", help="skip the whole-table runs")
    p.add_argument("--no-warmup", action="store_true", help="skip the untimed 1-day round that warms the JVM")
    p.add_argument("--json", action="store_true", help="print JSON")
    args = p.parse_args(argv)
    days = sorted(int(d) for d in args.days.split(","))
    result = run(days, args.rows_per_day, args.files_per_day, not args.no_previous, not args.no_warmup)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    kinds = list(result["runs"][days[0]])
    print(
        f"maintenance after a new day, {args.rows_per_day} rows and {args.files_per_day} files a day a table"
    )
    print(f"{'history':>8} " + " ".join(f"{k + ' s':>14} {'files':>6}" for k in kinds))
    for n in days:
        row = result["runs"][n]
        cells = " ".join(f"{row[k]['seconds']:>14.2f} {row[k]['files_rewritten']:>6}" for k in kinds)
        print(f"{n:>7}d {cells}")
    print(
        "ratio "
        + ", ".join(f"{k}: {result['ratio'][k]:.2f}x" for k in kinds)
        + f" ({days[-1]}d / {days[0]}d)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
