"""Peak memory of each DAG task's read at 1x and 20x history: it must stay flat (bounded reads).

    .venv/bin/python benchmarks/reader_memory.py [--rows-per-day 50000] [--days 20] [--keep DIR]

Builds the pipeline's Delta tables (through delta-spark, with the project's layout: date partitions,
generated columns) holding one day of history, and a copy holding ``--days`` days, the newest day the same
in both. Then, in a fresh process each (so one read's memory does not hide another's), it runs the read
each DAG task makes for the newest interval and prints the process's peak RSS (``ru_maxrss``) above a
baseline process that imports the same modules and reads nothing:

- ``tuning``: ``jobs.batch.retune.read_history`` of the last day of ``arrivals``;
- ``quality``: ``jobs.batch.quality.read_interval`` of the last hour (every checked table, the totals'
inputs);
- ``backfill``: ``jobs.batch.backfill.read_inputs`` (the unreconciled late rows, the stream's horizon from the
  Delta log, the aggregates of their windows).

A figure, not a test: nothing here asserts a time or a size (the issue's target is 20x within 1.5x of 1x).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DAY_MS = 86_400_000
END_MS = 1_795_392_000_000  # 2026-11-23T00:00Z: the newest interval ends here
WINDOW_MS = 1_000

READERS = {
    "baseline": "pass\n",
    "tuning": (
        "from jobs.batch.retune import read_history\n"
        "out = read_history(TABLES, END - DAY, END)\n"
        "rows = len(next(iter(out.values())))\n"
    ),
    "quality": (
        "from jobs.batch.quality import read_interval\n"
        "out = read_interval(TABLES, END - 3_600_000, END, 1_000)\n"
        "rows = sum(t.num_rows for t in out.values())\n"
    ),
    "backfill": (
        "from deltalake import DeltaTable\n"
        "from jobs.batch.backfill_plan import BackfillOptions, BackfillReport, read_inputs\n"
        "from watermark.evaluation.replay import WindowSpec\n"
        "options = BackfillOptions(TABLES, END - 3_600_000, END, WindowSpec(1_000))\n"
        "agg, late = TABLES + '/aggregates', TABLES + '/late_events'\n"
        "got = read_inputs(options, DeltaTable(agg), agg, DeltaTable(late), late, BackfillReport(0, 1))\n"
        "rows = 0 if got is None else got[0].num_rows + got[2].num_rows\n"
    ),
}
PRELUDE = (
    "import resource, json, sys\n"
    "import pyarrow, deltalake, great_expectations  # every reader's imports, in the baseline too\n"
    "import jobs.batch.retune, jobs.batch.quality, jobs.batch.backfill\n"
    "TABLES, END, DAY = sys.argv[1], int(sys.argv[2]), 86_400_000\n"
    "rows = 0\n"
)
EPILOGUE = (
    "print(json.dumps({'rss_kib': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, 'rows': rows}))\n"
)


def day_rows(day: int, rows_per_day: int, newest: bool) -> dict:
    """One day of each table's rows (pyarrow), ``day`` days before the newest; the newest has late rows
    waiting for the backfill, older days are reconciled."""
    import numpy as np
    import pyarrow as pa

    from jobs.common.schemas import TABLES

    rng = np.random.default_rng(day)
    start = END_MS - (day + 1) * DAY_MS
    n = rows_per_day
    te = np.sort(rng.integers(start, start + DAY_MS, n))
    batch = (te - start) // 60_000 + (1_000 - day) * 1_440  # a batch a minute, increasing over days
    ingested = start + (batch - (1_000 - day) * 1_440) * 60_000 + 1_000
    keys = np.array([f"k{i % 50}" for i in range(n)])

    def table(name: str, columns: dict) -> pa.Table:
        schema = TABLES[name]
        full = {
            f.name: columns.get(f.name, pa.nulls(len(next(iter(columns.values()))), f.type)) for f in schema
        }
        return pa.table(full).cast(schema)

    arrivals = table(
        "arrivals",
        {
            "partition": pa.array(["p0"] * n),
            "event_time_ms": te,
            "arrival_time_ms": te + 500,
            "batch_id": batch,
            "ingested_at_ms": ingested,
        },
    )
    wstart = te - te % WINDOW_MS
    windows, first = np.unique(np.stack([wstart, np.arange(n) % 50]), axis=1, return_index=True)
    m = windows.shape[1]
    aggregates = table(
        "aggregates",
        {
            "key": pa.array([f"k{k}" for k in windows[1]]),
            "window_start_ms": windows[0],
            "window_end_ms": windows[0] + WINDOW_MS,
            "count": np.ones(m, dtype=np.int64),
            "sum": np.ones(m),
            "min": np.ones(m),
            "max": np.ones(m),
            "trigger_watermark_ms": windows[0] + WINDOW_MS,
            "flushed": np.zeros(m, dtype=bool),
            "revision": np.zeros(m, dtype=np.int64),
            "late_count": np.zeros(m, dtype=np.int64),
            "batch_id": batch[first],
            "config_version": np.ones(m, dtype=np.int64),
            "emitted_at_ms": ingested[first],
        },
    )
    late_n = n // 20
    pick = rng.choice(n, late_n, replace=False)
    late = table(
        "late_events",
        {
            "event_id": pa.array([f"e{day}-{i}" for i in pick]),
            "key": pa.array(keys[pick]),
            "partition": pa.array(["p0"] * late_n),
            "event_time_ms": te[pick],
            "arrival_time_ms": te[pick] + 5_000,
            "value": np.ones(late_n),
            "watermark_ms": te[pick] + 2_000,
            "late_by_ms": np.full(late_n, 2_000, dtype=np.int64),
            "file": pa.array([f"f{day}"] * late_n),
            "line": pick.astype(np.int64),
            "batch_id": batch[pick],
            "reconciled": np.full(late_n, not newest),
            "ingested_at_ms": ingested[pick],
        },
    )
    batches, at = np.unique(batch, return_index=True)
    log = table(
        "watermark_log",
        {
            "batch_id": batches,
            "partition": pa.array(["p0"] * len(batches)),
            "global_watermark_ms": te[at],
            "events": np.full(len(batches), n // len(batches), dtype=np.int64),
            "late": np.zeros(len(batches), dtype=np.int64),
            "ingested_at_ms": ingested[at],
        },
    )
    return {"arrivals": arrivals, "aggregates": aggregates, "late_events": late, "watermark_log": log}


def build(root: Path, days: int, rows_per_day: int, spark) -> None:
    """Tables under ``root`` holding ``days`` days of history, one append (batch) per day and table."""
    from jobs.common.tables import DeltaTables

    sink = DeltaTables(root, "bench", spark)
    for i, day in enumerate(range(days - 1, -1, -1)):
        for name, rows in day_rows(day, rows_per_day, newest=day == 0).items():
            sink.append(name, rows, i)


def measure(root: Path, reader: str) -> dict:
    code = PRELUDE + READERS[reader] + EPILOGUE
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", code, str(root), str(END_MS)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=ROOT,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/reader_memory.py", description=__doc__.split("\n")[0])
    parser.add_argument("--rows-per-day", type=int, default=50_000)
    parser.add_argument("--days", type=int, default=20, help="the long history (the short one is 1 day)")
    parser.add_argument("--keep", help="build the tables here and keep them")
    args = parser.parse_args(argv)
    from jobs.common.session import build_session

    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="awm-reader-memory-"))
    spark = build_session("benchmarks.reader_memory", master="local[2]", shuffle_partitions=2)
    try:
        histories = {1: folder / "1x", args.days: folder / f"{args.days}x"}
        for days, root in histories.items():
            if not root.exists():
                build(root, days, args.rows_per_day, spark)
    finally:
        spark.stop()
    print(
        f"{args.rows_per_day:,} arrivals a day; history 1 day and {args.days} days; peak RSS above baseline"
    )
    print(f"{'read':<10}{'history':>9}{'rows read':>12}{'peak RSS MiB':>14}{'vs 1x':>8}")
    base = {days: measure(root, "baseline")["rss_kib"] for days, root in histories.items()}
    for reader in ("tuning", "quality", "backfill"):
        first = None
        for days, root in histories.items():
            got = measure(root, reader)
            extra = max(0, got["rss_kib"] - base[days]) / 1024
            first = extra if first is None else first
            ratio = f"{extra / first:.2f}x" if first else "-"
            print(f"{reader:<10}{days:>8}d{got['rows']:>12,}{extra:>14.1f}{ratio:>8}")
    print(f"baseline process (imports only): {base[1] / 1024:.0f} MiB")
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
