"""Does the driver's load stay flat as micro-batches grow? The stage in the executors against on the driver.

    python benchmarks/stage_scaleout.py [--small 200000] [--large 2000000] [--batches 3] [--json]

Starts a local Kafka broker (``tools.local.kafka_broker``, a free port, data in a temporary folder) and feeds
two 8-partition topics with the same synthetic stream (100 keys, each in one partition; 10 s windows):
``large`` holds every event and ``small`` every tenth, so the two streams span the same event time and a
``large`` batch has ten times the rows of a ``small`` one over the same stretch of time (a busier stream read
at the same trigger interval). Each topic is read with ``maxOffsetsPerTrigger`` = the batch size, in
partition-scoped mode, once with the watermark stage in the executors (``--stage-in executors``, the Kafka
default) and once on the driver (``--stage-in driver``) as the peer.

Per run it prints, over the batches after the first (which warms the JVM and the Python workers):

* ``driver_bytes``: bytes of results the driver collected from the executors per batch (Arrow sizes of
  everything the handler pulls: summaries and window statistics on the executor path; the narrow columns
  of every row, partials and late rows on the driver path);
* ``driver_cpu_s``: CPU seconds of the driver's Python process per batch (``time.process_time``);
* ``seconds``: wall seconds per batch (on one 2-core machine the executors' work grows with the rows: this
  is not the figure that must stay flat);

and the growth of each from the small batches to the large ones (target: at most 1.2x for the driver's
bytes and CPU seconds).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow.compute as pc  # noqa: E402

from jobs.common.session import build_session  # noqa: E402
from jobs.stream.options import JobOptions, KafkaOptions  # noqa: E402
from jobs.stream.run import run_job  # noqa: E402
from tools.feed.kafka import feed_kafka  # noqa: E402
from tools.feed.records import records_from_synthetic  # noqa: E402
from tools.local.kafka_broker import LocalKafka  # noqa: E402
from tools.local.processes import free_port  # noqa: E402
from watermark.config import PipelineConfig  # noqa: E402

PARTITIONS = 8
KEYS = 100
WINDOW_MS = 10_000


def run(spark, servers: str, topic: str, work: Path, per_batch: int, stage_in: str) -> dict:
    cfg = PipelineConfig.from_dict(
        {
            "version": 1,
            "strategy": "slo",
            "params": {"late_slo_pct": 1.0},
            "window_ms": WINDOW_MS,
            "partition_mode": "scoped",
        }
    )
    opts = JobOptions(
        input="",
        output=str(work / "out"),
        checkpoint=str(work / "ck"),
        config=cfg,
        format="kafka",
        kafka=KafkaOptions(bootstrap_servers=servers, topic=topic, max_offsets_per_trigger=per_batch),
        progress=False,
        stage_in=stage_in,
        arrival_history=False,
    )
    started = time.perf_counter()
    reports = run_job(spark, opts)
    elapsed = time.perf_counter() - started
    # The first batch warms the JVM and the workers; a last short batch (offsets left over) says nothing.
    measured = [r for r in reports[1:] if r.rows >= 0.9 * per_batch] or reports
    return {
        "batches": len(reports),
        "rows_per_batch": round(statistics.mean(r.rows for r in measured)),
        "driver_bytes": round(statistics.mean(r.driver_bytes for r in measured)),
        "driver_cpu_s": round(statistics.mean(r.driver_cpu_s for r in measured), 3),
        "seconds": round(statistics.mean(r.seconds for r in measured), 2),
        "events_per_s": round(sum(r.rows for r in reports) / elapsed),
        "windows_fired_per_batch": round(statistics.mean(r.fired for r in measured)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=200_000, help="rows per small batch")
    parser.add_argument("--large", type=int, default=2_000_000, help="rows per large batch")
    parser.add_argument("--batches", type=int, default=3, help="batches per run (the first is a warm-up)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.large % args.small:
        parser.error("--large must be a multiple of --small")
    factor = args.large // args.small

    work = Path(tempfile.mkdtemp(prefix="stage-scaleout-"))
    broker = LocalKafka(port=free_port(), dir=work / "kafka", heap="1g")
    try:
        broker.start()
        servers = broker.bootstrap_servers
        records = records_from_synthetic(
            args.large * args.batches, seed=args.seed, partitions=PARTITIONS, keys=KEYS
        )
        # Keys live in one partition each (Kafka's keyed partitioning), as partition-scoped mode expects.
        keyed = pc.binary_join_element_wise(records.column("partition"), records.column("key"), "/")
        records = records.set_column(records.schema.get_field_index("key"), "key", keyed)
        topics = {"large": records, "small": records.take(list(range(0, records.num_rows, factor)))}
        for topic, rows in topics.items():
            broker.create_topic(topic, PARTITIONS)
            tick = time.perf_counter()
            feed_kafka(rows, servers, topic, partitions=PARTITIONS)
            print(
                f"fed {rows.num_rows:,} records to {topic} in {time.perf_counter() - tick:.0f} s",
                file=sys.stderr,
            )
        spark = build_session("stage_scaleout")
        results: dict[str, dict] = {}
        for stage_in in ("executors", "driver"):
            for topic, per_batch in (("small", args.small), ("large", args.large)):
                name = f"{stage_in}_{topic}"
                results[name] = run(spark, servers, topic, work / name, per_batch, stage_in)
                print(f"{name} {results[name]}", file=sys.stderr)
        spark.stop()
        growth = {
            stage_in: {
                figure: round(
                    results[f"{stage_in}_large"][figure] / max(results[f"{stage_in}_small"][figure], 1e-9), 2
                )
                for figure in ("rows_per_batch", "driver_bytes", "driver_cpu_s", "seconds")
            }
            for stage_in in ("executors", "driver")
        }
        out = {"small": args.small, "large": args.large, "runs": results, "growth_small_to_large": growth}
        print(json.dumps(out) if args.json else json.dumps(out, indent=2))
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
