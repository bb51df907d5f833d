r"""The job beside its peers on the same files: a guessed fixed delay and Spark's own ``withWatermark``.

``bin/run`` shows with it what the adaptive stage buys, three runs over the same landing files at the same
files per micro-batch:

* the job's run (its Delta tables, read back);
* ``periodic`` with the 1 s delay a user would guess, run by the same job;
* Spark's native ``withWatermark(ts, "1 second")`` + ``groupBy(window(ts, 1 s), key)`` in append mode,
  writing its windows through delta-spark.

Every row is measured alike on the ingestion clock: late % is the share of input events the run did not
count in their window (the job's ``late_events``; Spark's ``numRowsDroppedByWatermark``), and a window's
emit latency is the clock at the end of the micro-batch that emitted it (the latest arrival time read so
far) minus the window's end. Spark's watermark only moves between micro-batches, so that is the finest
instant it can emit at; the job's stage decides per arrival (its own per-tuple latency is printed too).

The job's run is either one that already happened (``--tables``) or, given ``awm stream`` arguments after
``--``, run here in the same Spark session as the two peers, the three queries at once (each is mostly
waits on Spark's scheduling, so together they take little more than the longest alone; every figure is
per micro-batch and per arrival, so it does not depend on the other runs):

    python -m tools.peers out/demo/landing --tables out/demo/tables --work out/demo/peers \\
        --max-files-per-trigger 2 --window-ms 1000 --delay-ms 1000
    python -m tools.peers out/demo/landing --work out/demo/peers --summary out/demo/summary.json \\
        --max-files-per-trigger 1 --window-ms 1000 --delay-ms 1000 -- --input out/demo/landing \\
        --output out/demo/tables --checkpoint out/demo/checkpoint --strategy slo --late-slo-pct 0.5 ...
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from jobs.common.tables import DeltaTables

#: The title of ``bin/run``'s backfill step, printed when the backfill runs here (``--backfill-report``).
BACKFILL_TITLE = (
    "late-data backfill (jobs/batch/backfill.py, what the hourly DAG submits, here in the same Spark "
    "session): every late row folded into its window"
)
#: What the comparison's columns measure, printed above it.
NOTE = (
    "   (late %: events not counted in their window; emit latency: ingestion clock at the end of the\n"
    "   emitting micro-batch minus the window end, alike for all three; per arrival: the job's own decision)"
)
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


def guessed_delay(landing: Path, work: Path, *, files_per_batch: int, window_ms: int, delay_ms: int) -> Any:
    """The job's options with ``periodic`` at ``delay_ms``: the fixed delay a user would guess.

    The comparison reads its ``aggregates`` and ``late_events`` only, so it keeps no arrival history (the
    ``arrivals`` table, which changes no other table).
    """
    from jobs.stream.options import JobOptions
    from watermark.config import PipelineConfig

    guessed = PipelineConfig.from_dict(
        {
            "version": 1,
            "strategy": "periodic",
            "params": {"delay_ms": delay_ms, "period_ms": 200},
            "window_ms": window_ms,
        }
    )
    return JobOptions(
        input=str(landing),
        output=str(work / "periodic" / "tables"),
        checkpoint=str(work / "periodic" / "checkpoint"),
        config=guessed,
        max_files_per_trigger=files_per_batch,
        progress=False,
        arrival_history=False,
    )


def run_at_once(spark: Any, runs: dict[str, Callable[[], Any]]) -> dict[str, Any]:
    """Run each of ``runs`` (streaming queries to their end) in its own thread; their results by name.

    Spark runs the queries' micro-batches side by side in the one session. If one fails, the others'
    queries are stopped and its error is raised.
    """
    with ThreadPoolExecutor(max_workers=len(runs), thread_name_prefix="peers") as pool:
        futures = {name: pool.submit(run) for name, run in runs.items()}
        try:
            return {name: future.result() for name, future in futures.items()}
        except BaseException:
            for query in spark.streams.active:
                query.stop()
            raise


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
    job: Any = None,
) -> list[dict[str, Any]]:
    """One row per run: the job's (``tables``), periodic at ``delay_ms``, Spark's native watermark.

    With ``job`` (the job's :class:`jobs.stream.options.JobOptions`, writing to ``tables``) the job runs
    here too, at once with the two peers.
    """
    from jobs.stream.run import run_job

    shutil.rmtree(work, ignore_errors=True)
    guessed = guessed_delay(
        landing, work, files_per_batch=files_per_batch, window_ms=window_ms, delay_ms=delay_ms
    )
    native_options = {"delay_ms": delay_ms, "window_ms": window_ms, "files_per_batch": files_per_batch}
    runs: dict[str, Callable[[], Any]] = {
        "periodic": lambda: run_job(spark, guessed),
        "native": lambda: run_native(spark, landing, work / "native", **native_options),
    }
    if job is not None:
        runs["job"] = lambda: run_job(spark, job)
    dropped, native_out = run_at_once(spark, runs)["native"]

    clock = batch_clock(landing, files_per_batch)
    events = sum(1 for p in landing_files(landing) for line in p.read_text().splitlines() if line.strip())
    native = DeltaTables(str(native_out), "tools.peers").read("native_windows")
    end = native.column("window_end_ms").to_numpy()
    batch = native.column("batch_id").to_numpy()
    return [
        {"run": label, **job_figures(tables, events, clock)},
        {"run": f"periodic, delay {delay_ms} ms (a guess)", **job_figures(guessed.output, events, clock)},
        {
            "run": f"Spark withWatermark {delay_ms} ms",
            "late_pct": 100.0 * dropped / max(events, 1),
            "windows": native.num_rows,
            "emit_latency_ms": latency(clock, batch, end),
            "stage_emit_latency_ms": {"p50": None, "p99": None},
        },
    ]


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


def backfill(spark: Any, job: Any, report_path: Path) -> dict[str, Any]:
    """Fold the job's late rows into its aggregates, as ``awm backfill`` does over [0, now); its report.

    ``job`` is the job's :class:`jobs.stream.options.JobOptions`; the report is also written to
    ``report_path``.
    """
    from jobs.batch.backfill import build_parser, options_from_args, run_backfill

    now_ms = int(time.time() * 1_000)
    argv = ["--tables", job.output, "--interval-start", "0", "--interval-end", str(now_ms)]
    if job.config_path:
        argv += ["--config", job.config_path]
    else:
        window = job.config.window
        argv += ["--window-ms", str(window.window_ms)]
        argv += ["--slide-ms", str(window.slide_ms)] if window.slide_ms else []
    report: dict[str, Any] = run_backfill(spark, options_from_args(build_parser().parse_args(argv))).as_dict()
    report_path.write_text(json.dumps(report, indent=2) + "\n")
    return report


def render_summary(summary: dict[str, Any]) -> str:
    """The job's summary (:func:`jobs.stream.cli.summarize`) in a few lines."""
    lat = summary["emit_latency_ms"]
    lines = [
        f"events {summary['events']:,}  late {summary['late']:,} ({summary['late_pct']:.2f} %)  "
        f"windows {summary['windows']:,} ({summary['windows_flushed']:,} closed by the end of input)  "
        f"emit latency p50 {lat['p50']} ms, p99 {lat['p99']} ms  quarantined {summary['quarantined']:,}"
    ]
    lines += [f"  {name:14s} {path}" for name, path in summary["tables"].items()]
    return "\n".join(lines)


def render_backfill(report: dict[str, Any], path: Path) -> str:
    """The backfill's report (:class:`jobs.batch.backfill_plan.BackfillReport`) in one line."""
    return (
        f"late events read {report['late_events_read']:,}, folded {report['folded_events']:,} into "
        f"{report['corrected_windows']:,} windows ({report['inserted_windows']:,} new), waiting for a window "
        f"still open {report['deferred_events']:,}, marked reconciled {report['reconciled_events']:,}  "
        f"(report {path})"
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m tools.peers`` argument parser (the job's own arguments follow ``--``)."""
    parser = argparse.ArgumentParser(
        prog="python -m tools.peers",
        description=__doc__.splitlines()[0],
        usage="%(prog)s LANDING --work DIR [options] (--tables DIR | -- JOB ARGUMENTS)",
    )
    parser.add_argument("landing", type=Path, help="the landing directory the job reads (tools.feed's files)")
    parser.add_argument("--tables", type=Path, help="the job's output (its Delta tables), if it ran already")
    parser.add_argument("--work", type=Path, required=True, help="where the peers write (emptied first)")
    parser.add_argument("--label", default="this job", help="the job's row name")
    parser.add_argument("--max-files-per-trigger", type=int, default=1, metavar="N", help="as the job ran")
    parser.add_argument("--window-ms", type=int, default=1_000, metavar="MS", help="window size (1000)")
    parser.add_argument("--delay-ms", type=int, default=1_000, metavar="MS", help="the peers' delay (1000)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    demo = parser.add_argument_group("with the job's arguments after -- (bin/run)")
    demo.add_argument("--summary", type=Path, help="write the job's summary (JSON) here and print it")
    demo.add_argument(
        "--backfill-report",
        type=Path,
        metavar="FILE",
        help="then fold the job's late rows into its aggregates in the same session, as `awm backfill "
        "--interval-start 0 --interval-end <now>` does, and write its report here",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Command line: run the peers (and the job, given its arguments after ``--``); print the comparison."""
    from watermark.cli.log import run_main

    argv = list(sys.argv[1:] if argv is None else argv)
    job_argv = argv[argv.index("--") + 1 :] if "--" in argv else None
    argv = argv[: argv.index("--")] if "--" in argv else argv
    return run_main(build_parser(), lambda args: _run(args, job_argv), argv)


def usage_problem(args: argparse.Namespace, job_argv: list[str] | None) -> str | None:
    """What is wrong with the command line, if anything."""
    if not args.landing.is_dir() or not any(args.landing.iterdir()):
        return f"no landing files in {args.landing}"
    if args.max_files_per_trigger < 1 or args.window_ms < 1 or args.delay_ms < 0:
        return "--max-files-per-trigger and --window-ms must be >= 1, --delay-ms >= 0"
    if (args.tables is None) == (job_argv is None):
        return "give either --tables (a run of the job) or the job's arguments after --"
    if job_argv is None and (args.summary is not None or args.backfill_report is not None):
        return "--summary and --backfill-report need the job's arguments after --"
    return None


def _run(args: argparse.Namespace, job_argv: list[str] | None) -> int:
    from jobs.common.session import build_session
    from jobs.stream.checkpoint.state import CheckpointError
    from jobs.stream.cli import build_parser as job_parser
    from jobs.stream.cli import options_from_args, summarize
    from watermark.cli.log import CliError, usage_errors
    from watermark.config import ConfigError

    problem = usage_problem(args, job_argv)
    if problem is not None:
        raise CliError(problem, 2)
    job = None
    if job_argv is not None:  # parsed and checked as `awm stream` does, before Spark starts
        with usage_errors(ConfigError, ValueError, CheckpointError):
            job = options_from_args(job_parser().parse_args(job_argv))
        args.tables = Path(job.output)
    started = time.perf_counter()
    spark = build_session("tools.peers")
    try:
        runs_started = time.perf_counter()
        rows = compare(
            spark,
            args.landing,
            args.tables,
            args.work,
            files_per_batch=args.max_files_per_trigger,
            window_ms=args.window_ms,
            delay_ms=args.delay_ms,
            label=args.label,
            job=job,
        )
        runs_s = time.perf_counter() - runs_started
        if job is not None and args.summary is not None:
            summary = summarize(job.output)
            args.summary.write_text(json.dumps(summary) + "\n")
            print(render_summary(summary), end="\n\n")
        if args.json:
            print(json.dumps(rows), flush=True)
        else:
            runs = "the job and its peers" if job is not None else "the peers"
            print(f"{NOTE}\n{render(rows)}")
            print(f"   ({time.perf_counter() - started:.1f} s; {runs} at once {runs_s:.1f} s)", flush=True)
        if job is not None and args.backfill_report is not None:
            print(f"\n== {BACKFILL_TITLE}", flush=True)
            backfill_started = time.perf_counter()
            report = backfill(spark, job, args.backfill_report)
            print(render_backfill(report, args.backfill_report))
            print(f"   ({time.perf_counter() - backfill_started:.1f} s)", flush=True)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
