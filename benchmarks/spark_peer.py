"""This job (periodic, slo) against Spark's native ``withWatermark`` + ``window`` aggregation.

    python benchmarks/spark_peer.py --events 2000000 --json
    python benchmarks/spark_peer.py --events 2000000 --storage s3 --json   # and again with everything on S3

With ``--storage s3`` every side then runs again with its landing files, tables and checkpoint on an S3
server (the one ``AWS_ENDPOINT_URL`` names, with ``--bucket``; else a local moto server started here) and
the output adds ``s3`` (the same figures) and ``s3_ratio_periodic_to_native``/``s3_ratio_slo_to_native``.

One process, one SparkSession (``local[*]``, ``spark.sql.shuffle.partitions`` = cores for every run), the
same synthetic input (8 partitions, 1,000 keys) fed as JSON-lines landing files, read one file per
micro-batch by all three runs, 1 s tumbling windows, every run writing its tables through delta-spark
(:class:`jobs.common.tables.DeltaTables`: ``DataFrame.write.format("delta")``, idempotent per batch with
``txnAppId``/``txnVersion``):

* ``job_periodic``: ``jobs.stream`` with the periodic watermark (bounded delay ``--delay-ms``);
* ``job_slo``: ``jobs.stream`` with its default watermark, ``slo`` (late-rate target 1 %);
* ``job_periodic_no_history``: as ``job_periodic`` without the ``arrivals`` table (``--no-arrival-history``);
* ``native``: ``withWatermark(delay)`` + ``groupBy(window(1 s), key)`` in append mode, ``foreachBatch``
  (:func:`tools.peers.run_native`, the peer ``bin/run`` shows).

Every side first runs once, unmeasured, on two batches' worth of the same events (the JVM, the Python
workers and the compiled watermark rule warm for each). Then each side runs ``--repeats`` times (default
5), in an order that rotates between repeats; the figures are those of its median run, with every run's
events/s beside them. For each it prints events/s (input events
over the query's wall time), late % (native: rows Spark dropped
by the watermark), and emit latency p50/p99 measured alike for all three: the ingestion clock (latest
arrival time read) at the end of the batch that emitted the window, minus the window's end. For the job it
also prints the stage's own per-tuple emit latency. ``ratio_periodic_to_native`` is the job's events/s
(periodic) over native's, ``ratio_slo_to_native`` the same for ``slo``; the target is at least 0.8.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from jobs.common.session import build_session  # noqa: E402
from jobs.common.tables import DeltaTables  # noqa: E402
from jobs.stream.options import JobOptions  # noqa: E402
from jobs.stream.run import run_job  # noqa: E402
from tools import peers  # noqa: E402
from tools.feed.landing import feed  # noqa: E402
from tools.feed.records import records_from_synthetic  # noqa: E402
from watermark import storage  # noqa: E402
from watermark.config import PipelineConfig  # noqa: E402
from watermark.storage import Location  # noqa: E402


def quantiles(values: np.ndarray) -> dict[str, float | None]:
    if values.size == 0:
        return {"p50": None, "p99": None}
    return {
        "p50": round(float(np.percentile(values, 50)), 1),
        "p99": round(float(np.percentile(values, 99)), 1),
    }


def batch_clock(landing: Path) -> np.ndarray:
    """Ingestion clock at the end of batch b (one file per batch): the latest arrival time in files 0..b."""
    latest = []
    for path in sorted(landing.glob("feed-*.json")):
        last_line = path.read_text().rstrip("\n").rsplit("\n", 1)[-1]
        latest.append(json.loads(last_line)["arrival_time_ms"])
    return np.maximum.accumulate(np.array(latest, np.int64))


def run_ours(
    spark,
    landing: Location,
    work: Location,
    strategy: str,
    params: dict,
    events: int,
    clock: np.ndarray,
    arrival_history: bool = True,
):
    cfg = PipelineConfig.from_dict({"version": 1, "strategy": strategy, "params": params, "window_ms": 1_000})
    opts = JobOptions(
        input=str(landing),
        output=str(work / "out"),
        checkpoint=str(work / "ck"),
        config=cfg,
        max_files_per_trigger=1,
        progress=False,
        arrival_history=arrival_history,
    )
    start = time.perf_counter()
    reports = run_job(spark, opts)
    elapsed = time.perf_counter() - start
    sink = DeltaTables(opts.output, "bench")
    agg = sink.read("aggregates")
    late = sink.read("late_events").num_rows
    fired = ~np.asarray(agg.column("flushed").to_numpy(zero_copy_only=False), dtype=bool)
    end = agg.column("window_end_ms").to_numpy()[fired]
    batch = agg.column("batch_id").to_numpy()[fired]
    stage = np.asarray(agg.column("emit_latency_ms").to_numpy(zero_copy_only=False), dtype=float)[fired]
    return {
        "events_per_s": round(events / elapsed),
        "seconds": round(elapsed, 2),
        "batches": len(reports),
        "seconds_per_batch": round(float(np.mean([r.seconds for r in reports])), 2),
        "write_seconds_per_batch": round(float(np.mean([r.phases.get("write", 0.0) for r in reports])), 2),
        "late_pct": round(100.0 * late / events, 3),
        "windows": int(fired.sum()),
        "emit_latency_ms": quantiles(clock[batch] - end),
        "stage_emit_latency_ms": quantiles(stage),
    }


def run_native(spark, landing: Location, work: Location, delay_ms: int, events: int, clock: np.ndarray):
    """Spark's native watermark, as ``bin/run`` runs it beside the job (:func:`tools.peers.run_native`)."""
    start = time.perf_counter()
    dropped, out = peers.run_native(
        spark, landing, work, delay_ms=delay_ms, window_ms=1_000, files_per_batch=1
    )
    elapsed = time.perf_counter() - start
    agg = DeltaTables(out, "bench").read("native_windows")
    end = agg.column("window_end_ms").to_numpy()
    batch = agg.column("batch_id").to_numpy()
    return {
        "events_per_s": round(events / elapsed),
        "seconds": round(elapsed, 2),
        "late_pct": round(100.0 * dropped / events, 3),
        "windows": agg.num_rows,
        # Append mode emits the last windows in batches with no new file: their clock is the last file's.
        "emit_latency_ms": quantiles(clock[np.minimum(batch, clock.size - 1)] - end),
    }


def measure(spark, args, records, landing, work, clock) -> dict:
    """Every side on ``landing`` (a folder or a URI), writing under ``work``: warm-up, then the repeats."""
    periodic = {"delay_ms": args.delay_ms, "period_ms": 200}

    def sides(folder, events: int, clock_of: np.ndarray) -> dict:
        return {
            "job_periodic": lambda w: run_ours(spark, folder, w, "periodic", periodic, events, clock_of),
            "job_slo": lambda w: run_ours(spark, folder, w, "slo", {"late_slo_pct": 1.0}, events, clock_of),
            # The periodic run without the arrivals table (the re-tuning DAG's history;
            # --no-arrival-history for a deployment that does not re-tune).
            "job_periodic_no_history": lambda w: run_ours(
                spark, folder, w, "periodic", periodic, events, clock_of, arrival_history=False
            ),
            "native": lambda w: run_native(spark, folder, w, args.delay_ms, events, clock_of),
        }

    # Warm the JVM, the Python workers and the compiled watermark rule: every side runs once, unmeasured, on
    # a copy of the first events (a split per core, batches as big as the measured ones), so that no side's
    # first measured run pays its first-query cost.
    warm = work / "warm"
    n_warm = min(args.events, 2 * -(-args.events // args.files))
    feed(records.slice(0, n_warm), warm / "landing", rows_per_file=-(-n_warm // 2))
    local_warm = Path(tempfile.mkdtemp(prefix="spark-peer-clock-"))
    feed(records.slice(0, n_warm), local_warm, rows_per_file=-(-n_warm // 2))
    for name, warm_run in sides(warm / "landing", n_warm, batch_clock(local_warm)).items():
        warm_run(warm / name)
    shutil.rmtree(local_warm, ignore_errors=True)
    # Each side runs ``--repeats`` times, in an order that rotates from one repeat to the next (a machine's
    # slow minute does not fall on one side only); each figure is its median run's.
    runs = sides(landing, args.events, clock)
    names = list(runs)
    measured: dict[str, list[dict]] = {name: [] for name in names}
    for r in range(args.repeats):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            result = runs[name](work / f"{name}-{r}")
            storage.remove_tree(work / f"{name}-{r}")
            measured[name].append(result)
            print(f"repeat {r + 1}/{args.repeats} {name} {result}", file=sys.stderr, flush=True)
    results = {}
    for name, runs_of in measured.items():
        ranked = sorted(runs_of, key=lambda x: x["events_per_s"])
        results[name] = {
            **ranked[(len(ranked) - 1) // 2],
            "events_per_s_runs": [x["events_per_s"] for x in runs_of],
        }
    native = results["native"]["events_per_s"]
    return {
        **results,
        "ratio_periodic_to_native": round(results["job_periodic"]["events_per_s"] / native, 3),
        "ratio_slo_to_native": round(results["job_slo"]["events_per_s"] / native, 3),
        "ratio_periodic_no_history_to_native": round(
            results["job_periodic_no_history"]["events_per_s"] / native, 3
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--files", type=int, default=10, help="landing files = micro-batches")
    parser.add_argument("--delay-ms", type=int, default=500, help="bounded delay of periodic and native")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=5, help="runs of each side (median reported)")
    parser.add_argument(
        "--storage",
        choices=("local", "s3"),
        default="local",
        help="local: landing files, tables and checkpoints on local disk; s3: that, then the same with every "
        "location on an S3 server (AWS_ENDPOINT_URL and keys, or a local moto server started here)",
    )
    parser.add_argument("--bucket", help="with --storage s3 and AWS_ENDPOINT_URL set: the bucket to use")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.storage == "s3" and os.environ.get("AWS_ENDPOINT_URL") and not args.bucket:
        parser.error("--storage s3 against AWS_ENDPOINT_URL needs --bucket NAME")

    work = Path(tempfile.mkdtemp(prefix="spark-peer-"))
    server = None
    try:
        if args.storage == "s3" and not os.environ.get("AWS_ENDPOINT_URL"):
            from tools.local.s3 import LocalS3

            server = LocalS3(port=free_port(), dir=work / "s3").start()
            os.environ.update(server.env())
        landing = work / "landing"
        records = records_from_synthetic(args.events, seed=args.seed, partitions=8, keys=1_000)
        feed(records, landing, rows_per_file=-(-args.events // args.files))
        clock = batch_clock(landing)
        spark = build_session("spark_peer")
        cores = int(spark.conf.get("spark.sql.shuffle.partitions"))
        print(
            f"input: {args.events:,} events in {args.files} files; shuffle partitions {cores}",
            file=sys.stderr,
        )
        out = {"events": args.events, "micro_batches": args.files, "shuffle_partitions": cores}
        out |= measure(spark, args, records, Location.of(str(landing)), Location.of(str(work)), clock)
        if args.storage == "s3":
            bucket = server.new_bucket("spark-peer") if server is not None else args.bucket
            remote = Location.of(f"s3a://{bucket}/spark-peer")
            feed(records, remote / "landing", rows_per_file=-(-args.events // args.files))
            print(f"the same on {remote}", file=sys.stderr)
            on_s3 = measure(spark, args, records, remote / "landing", remote, clock)
            out["s3"] = on_s3
            for name in ("ratio_periodic_to_native", "ratio_slo_to_native"):
                out[f"s3_{name}"] = on_s3[name]
        spark.stop()
        print(json.dumps(out) if args.json else json.dumps(out, indent=2))
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


if __name__ == "__main__":
    main()
