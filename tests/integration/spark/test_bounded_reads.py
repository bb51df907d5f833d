"""Every DAG task's read filters at the files: data files of older days are never opened.

The tables hold several days of history (built as ``benchmarks/reader_memory.py`` builds them, through
delta-spark with the project's layout). Every data file that holds nothing of the newest day is then
deleted from disk while the Delta log still lists it: a reader that loaded the history and filtered after
would fail on a missing file. Each read of the newest interval must succeed and return that interval's rows.
``late_events``' older files go only after the backfill's read: it must find unreconciled rows of any day,
and delta-spark keeps no statistics of the boolean flag to skip files by.
"""

import importlib.util
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("reader_memory", ROOT / "benchmarks" / "reader_memory.py")
assert _spec is not None and _spec.loader is not None
reader_memory = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(reader_memory)

DAY_MS = reader_memory.DAY_MS
END = reader_memory.END_MS
NEWEST_DATE = "2026-11-22"  # the UTC day of [END - DAY, END)


def old_files(path: Path, table: str) -> list[Path]:
    """Data files of ``table`` that hold no row of the newest day (by partition or by statistics)."""
    actions = pa.table(DeltaTable(str(path)).get_add_actions(flatten=True)).to_pydict()
    out = []
    for i, name in enumerate(actions["path"]):
        if table in ("aggregates", "late_events"):
            column = "partition.window_date" if table == "aggregates" else "partition.event_date"
            old = str(actions[column][i]) < NEWEST_DATE
        else:
            old = actions["max.ingested_at_ms"][i] < END - DAY_MS
        if old:
            out.append(path / name)
    return out


def test_each_dag_tasks_read_opens_only_the_files_of_its_interval(spark, tmp_path):
    from jobs.batch.backfill_plan import BackfillOptions, BackfillReport, read_inputs
    from jobs.batch.quality import read_interval
    from jobs.batch.retune import read_history
    from watermark.evaluation.replay import WindowSpec

    tables = tmp_path / "tables"
    rows_per_day = 400
    reader_memory.build(tables, 4, rows_per_day, spark)
    newest = reader_memory.day_rows(0, rows_per_day, newest=True)

    def remove_old(names: tuple[str, ...]) -> None:
        for table in names:
            files = old_files(tables / table, table)
            assert len(files) >= 3, f"{table}: older days are not in files apart (vacuous check)"
            for file in files:
                os.remove(file)

    remove_old(("arrivals", "watermark_log", "aggregates"))

    # Re-tuning: the last day of arrivals.
    history = read_history(str(tables), END - DAY_MS, END)
    assert history["te"].size == rows_per_day
    assert sorted(history["te"].tolist()) == sorted(newest["arrivals"].column("event_time_ms").to_pylist())

    # Backfill: the unreconciled late rows and the aggregates of their windows. Unreconciled rows of any
    # day must be found and delta-spark keeps no statistics of the boolean flag, so every late_events file
    # is read here; the aggregates of older days are not.
    agg, late = str(tables / "aggregates"), str(tables / "late_events")
    options = BackfillOptions(str(tables), END - 3_600_000, END, WindowSpec(1_000))
    got = read_inputs(options, DeltaTable(agg), agg, DeltaTable(late), late, BackfillReport(0, 1))
    assert got is not None
    late_rows, _horizon, aggregates = got
    assert late_rows.num_rows >= newest["late_events"].num_rows > 0
    assert aggregates.num_rows > 0

    # Data quality: the last 6 hours, by their batches.
    remove_old(("late_events",))
    start = END - 6 * 3_600_000
    interval = read_interval(str(tables), start, END, 1_000)
    log = newest["watermark_log"].filter(pc.field("ingested_at_ms") >= start)
    assert interval["watermark_log"].num_rows == log.num_rows > 0
    assert interval["aggregates"].num_rows > 0
    b0, b1 = pc.min(log.column("batch_id")).as_py(), pc.max(log.column("batch_id")).as_py()
    late = newest["late_events"].filter((pc.field("batch_id") >= b0) & (pc.field("batch_id") <= b1))
    assert interval["late_events"].num_rows == late.num_rows > 0
