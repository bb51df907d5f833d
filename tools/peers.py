r"""The job beside its peers on the same files: a guessed fixed delay and Spark's own ``withWatermark``.

``bin/run`` calls this after the streaming job, so that its summary shows what the adaptive stage buys:

* the job's run itself (its Delta tables, read back);
* ``periodic`` with the 1 s delay a user would guess, run by the same job on the same files;
* Spark's native ``withWatermark(ts, "1 second")`` + ``groupBy(window(ts, 1 s), key)`` in append mode, on
  the same files, at the same files per micro-batch, writing its windows through delta-spark.

Every row is measured alike on the ingestion clock: late % is the share of input events the run did not
count in their window (the job's ``late_events``; Spark's ``numRowsDroppedByWatermark``), and a window's
emit latency is the clock at the end of the micro-batch that emitted it (the latest arrival time read so
far) minus the window's end. Spark's watermark only moves between micro-batches, so that is the finest
instant it can emit at; the job's stage decides per arrival (its own per-tuple latency is printed too).

    python -m tools.peers out/demo/landing --tables out/demo/tables --work out/demo/peers \\
        --max-files-per-trigger 2 --window-ms 1000 --delay-ms 1000
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np

from jobs.common.tables import DeltaTables

#: The landing files' JSON fields (``tools.feed`` writes them).
_SCHEMA = (
    "event_id STRING, key STRING, partition STRING, event_time_ms LONG, arrival_time_ms LONG, value DOUBLE"
)


def landing_files(landing: Path) -> list[Path]:
    """The feed's landing files in the order the job reads them (modification time, then name)."""
    files = [p for p in landing.iterdir() if p.is_file() and p.suffix == ".json"]
    return sorted(files, key=lambda p: (p.stat().st_mtime_ns, p.name))


def batch_clock(landing: Path, files_per_batch: int) -> np.ndarray:
    """Ingestion clock at the end of each micro-batch: the latest arrival time read up to it."""
    latest = []
    for path in landing_files(landing):
        lines = path.read_text().rstrip("\n")
        latest.append(max(json.loads(line)["arrival_time_ms"] for line in lines.split("\n")) if lines else 0)
    per_file = np.maximum.accumulate(np.array(latest, np.int64))
    ends = np.arange(files_per_batch - 1, per_file.size + files_per_batch - 1, files_per_batch)
    return per_file[np.minimum(ends, per_file.size - 1)]


def latency(clock: np.ndarray, batch: np.ndarray, end: np.ndarray) -> dict[str, float | None]:
    """p50/p99 of ``clock[batch] - end`` (batches past the input, which append mode runs, read the last)."""
    if end.size == 0:
        return {"p50": None, "p99": None}
    values = clock[np.minimum(batch, clock.size - 1)] - end
    return {"p50": float(np.percentile(values, 50)), "p99": float(np.percentile(values, 99))}


def job_figures(tables: str | Path, events: int, clock: np.ndarray) -> dict[str, Any]:
    """The measure of a job's run, from its tables (windows closed by the end of input are left out)."""
    sink = DeltaTables(str(tables), "tools.peers")
    agg = sink.read(
        "aggregates", columns=["window_end_ms", "batch_id", "flushed", "emit_latency_ms", "revision"]
    )
    first = agg.filter(np.asarray(agg.column("revision").to_numpy(zero_copy_only=False)) <= 1)
    fired = ~np.asarray(first.column("flushed").to_numpy(zero_copy_only=False), dtype=bool)
    end = first.column("window_end_ms").to_numpy()[fired]
    batch = first.column("batch_id").to_numpy()[fired]
    stage = np.asarray(first.column("emit_latency_ms").to_numpy(zero_copy_only=False), dtype=float)[fired]
    late = sink.read("late_events", columns=["event_id"]).num_rows
    return {
        "late_pct": 100.0 * late / max(events, 1),
        "windows": int(fired.sum()),
        "emit_latency_ms": latency(clock, batch, end),
        "stage_emit_latency_ms": {
            "p50": float(np.percentile(stage, 50)) if stage.size else None,
            "p99": float(np.percentile(stage, 99)) if stage.size else None,
        },
    }


def run_native(
    spark: Any, landing: Path, work: Path, *, delay_ms: int, window_ms: int, files_per_batch: int
) -> tuple[int, Path]:
    """Spark's ``withWatermark`` + window aggregation over ``landing``: (rows it dropped, its tables).

    The windows (count, sum, min, max per key, as the job's ``aggregates``) go to the Delta table
    ``native_windows`` under the returned folder, written by the executors in ``foreachBatch`` and
    idempotent per batch (``txnAppId``/``txnVersion``) as the job's writes are.
    """
    from pyspark.sql import functions as F

    out = work / "tables"
    sink = DeltaTables(str(out), "tools.peers.native", spark)
    windows = (
        spark.readStream.format("json")
        .schema(_SCHEMA)
        .option("maxFilesPerTrigger", str(files_per_batch))
        .load(str(landing))
        .withColumn("ts", F.timestamp_millis("event_time_ms"))
        .withWatermark("ts", f"{delay_ms} milliseconds")
        .groupBy(F.window("ts", f"{window_ms} milliseconds"), "key")
        .agg(
            F.count(F.lit(1)).alias("count"),
            F.sum("value").alias("sum"),
            F.min("value").alias("min"),
            F.max("value").alias("max"),
        )
        .select(
            "key",
            F.unix_millis(F.col("window.start")).alias("window_start_ms"),
            F.unix_millis(F.col("window.end")).alias("window_end_ms"),
            "count",
            "sum",
            "min",
            "max",
        )
    )

    def write(df: Any, batch_id: int) -> None:
        sink.append("native_windows", df.withColumn("batch_id", F.lit(batch_id).cast("long")), batch_id)

    query = (
        windows.writeStream.outputMode("append")
        .foreachBatch(write)
        .option("checkpointLocation", str(work / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    dropped = sum(op.numRowsDroppedByWatermark for p in query.recentProgress for op in p.stateOperators)
    return int(dropped), out


def compare(
    spark: Any,
    landing: Path,
    tables: Path,
    work: Path,
    *,
    files_per_batch: int,
    window_ms: int,
    delay_ms: int,
    label: str,
) -> list[dict[str, Any]]:
    """One row per run: the job's (``tables``), periodic at ``delay_ms``, Spark's native watermark."""
    from jobs.stream import JobOptions, run_job
    from watermark.config import PipelineConfig

    clock = batch_clock(landing, files_per_batch)
    events = sum(1 for p in landing_files(landing) for line in p.read_text().splitlines() if line.strip())
    rows = [{"run": label, **job_figures(tables, events, clock)}]

    shutil.rmtree(work, ignore_errors=True)
    guessed = PipelineConfig.from_dict(
        {
            "version": 1,
            "strategy": "periodic",
            "params": {"delay_ms": delay_ms, "period_ms": 200},
            "window_ms": window_ms,
        }
    )
    opts = JobOptions(
        input=str(landing),
        output=str(work / "periodic" / "tables"),
        checkpoint=str(work / "periodic" / "checkpoint"),
        config=guessed,
        max_files_per_trigger=files_per_batch,
        progress=False,
    )
    run_job(spark, opts)
    periodic = job_figures(opts.output, events, clock)
    rows.append({"run": f"periodic, delay {delay_ms} ms (a guess)", **periodic})

    dropped, native_out = run_native(
        spark,
        landing,
        work / "native",
        delay_ms=delay_ms,
        window_ms=window_ms,
        files_per_batch=files_per_batch,
    )
    native = DeltaTables(str(native_out), "tools.peers").read("native_windows")
    end = native.column("window_end_ms").to_numpy()
    batch = native.column("batch_id").to_numpy()
    rows.append(
        {
            "run": f"Spark withWatermark {delay_ms} ms",
            "late_pct": 100.0 * dropped / max(events, 1),
            "windows": native.num_rows,
            "emit_latency_ms": latency(clock, batch, end),
            "stage_emit_latency_ms": {"p50": None, "p99": None},
        }
    )
    return rows


def render(rows: list[dict[str, Any]]) -> str:
    """The comparison as a plain table."""

    def ms(value: float | None, unit: float = 1.0) -> str:
        return "-" if value is None else f"{value / unit:,.{1 if unit > 1 else 0}f}"

    head = f"{'run':36s} {'late %':>6s} {'windows':>7s}   {'at batch end p50 / p99 (s)':>26s}"
    head += f"   {'per arrival p50 / p99 (ms)':>26s}"
    lines = [head, "-" * len(head)]
    for r in rows:
        e, s = r["emit_latency_ms"], r["stage_emit_latency_ms"]
        batch = f"{ms(e['p50'], 1e3)} / {ms(e['p99'], 1e3)}"
        stage = "-" if s["p50"] is None else f"{ms(s['p50'])} / {ms(s['p99'])}"
        lines.append(f"{r['run']:36s} {r['late_pct']:6.2f} {r['windows']:7,d}   {batch:>26s}   {stage:>26s}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command line: run the peers and print the comparison (latencies in ms)."""
    parser = argparse.ArgumentParser(prog="python -m tools.peers", description=__doc__.splitlines()[0])
    parser.add_argument("landing", type=Path, help="the landing directory the job read (tools.feed's files)")
    parser.add_argument("--tables", type=Path, required=True, help="the job's output (its Delta tables)")
    parser.add_argument("--work", type=Path, required=True, help="where the peers write (emptied first)")
    parser.add_argument("--label", default="this job", help="the job's row name")
    parser.add_argument("--max-files-per-trigger", type=int, default=1, metavar="N", help="as the job ran")
    parser.add_argument("--window-ms", type=int, default=1_000, metavar="MS", help="window size (1000)")
    parser.add_argument("--delay-ms", type=int, default=1_000, metavar="MS", help="the peers' delay (1000)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    if not args.landing.is_dir() or not any(args.landing.iterdir()):
        parser.error(f"no landing files in {args.landing}")
    if args.max_files_per_trigger < 1 or args.window_ms < 1 or args.delay_ms < 0:
        parser.error("--max-files-per-trigger and --window-ms must be >= 1, --delay-ms >= 0")
    from jobs.common.session import build_session

    spark = build_session("tools.peers")
    try:
        rows = compare(
            spark,
            args.landing,
            args.tables,
            args.work,
            files_per_batch=args.max_files_per_trigger,
            window_ms=args.window_ms,
            delay_ms=args.delay_ms,
            label=args.label,
        )
    finally:
        spark.stop()
    print(json.dumps(rows) if args.json else render(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
