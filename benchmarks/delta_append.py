"""What one delta-spark append costs, and what Delta's idempotency options add to it.

    python benchmarks/delta_append.py [--repeats 10] [--json]

One local SparkSession (as the job builds it). For each kind of append it prints the median seconds over
``--repeats`` appends (the first three left out) and the Spark jobs one append runs:

* ``parquet_1_row``: ``spark.range(1)`` appended as plain Parquet (Spark's floor for a write);
* ``delta_1_row``: the same row appended to a Delta table;
* ``delta_1_row_txn``: the same with ``txnAppId``/``txnVersion`` (what every append of the job carries);
* ``delta_1_row_txn_state_ready``: the same, after the table's newest snapshot state was computed between
  two appends (:func:`prepare_state`, a skipped idempotent append; what an append costs when Delta need
  not reconstruct the state);
* ``delta_1_row_txn_snapshot_parts_N``: ``delta_1_row_txn`` with Delta's state rebuilt over N partitions
  (``spark.databricks.delta.snapshotPartitions``: 1, one per core, and Delta's default 50);
* ``arrow_200k_to_delta``: a 200,000-row Arrow table (five columns) appended through
  :func:`jobs.common.session.arrow_frame`, as Spark splits it (one partition per 10,000 rows), and
  ``arrow_200k_to_delta_coalesced`` at one partition per 100,000 rows
  (``jobs.common.tables.ROWS_PER_PARTITION``).

Delta 4.4 answers ``txnVersion`` from the snapshot's full state (``Snapshot.setTransactions`` →
``computedState``: three Spark jobs named "Delta: Compute snapshot for version: N"), not from the version's
checksum file that holds the same application ids, so each idempotent append pays a state reconstruction.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from jobs.common.session import arrow_frame, build_session  # noqa: E402
from jobs.common.tables import ROWS_PER_PARTITION  # noqa: E402


def prepare_state(spark: Any, path: str, recorded: int) -> None:
    """Have Delta compute the newest snapshot state of the table at ``path`` (its application ids).

    As :meth:`jobs.common.tables.DeltaTables.prepare_state` does, through public options only: an empty
    append of a batch the table already ``recorded`` for the application, which Delta checks and skips.
    """
    write = spark.range(0).write.format("delta").mode("append")
    write.option("txnAppId", "bench").option("txnVersion", str(recorded)).save(path)


def measure(spark: Any, label: str, append: Callable[[int], None], repeats: int) -> dict[str, Any]:
    sc = spark.sparkContext
    tracker = sc.statusTracker()
    seconds, jobs = [], []
    for i in range(repeats):
        group = f"{label}-{i}"
        sc.setJobGroup(group, label)
        start = time.perf_counter()
        append(i)
        seconds.append(time.perf_counter() - start)
        jobs.append(len(tracker.getJobIdsForGroup(group)))
    sc.setJobGroup("", "")
    steady = slice(3, None) if repeats > 4 else slice(None)
    return {
        "median_s": round(float(np.median(seconds[steady])), 3),
        "spark_jobs": int(np.median(jobs[steady])),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    spark = build_session("delta_append")
    root = tempfile.mkdtemp(prefix="delta-append-")
    n = 200_000
    big = pa.table(
        {
            "partition": pa.array((np.arange(n) % 8).astype(str).tolist()),
            "a": np.arange(n, dtype=np.int64),
            "b": np.arange(n, dtype=np.int64),
            "c": np.arange(n, dtype=np.int64),
            "d": np.arange(n, dtype=np.int64),
        }
    )

    def delta(path: str, txn: bool) -> Callable[[int], None]:
        def append(i: int) -> None:
            write = spark.range(1).write.format("delta").mode("append")
            if txn:
                write = write.option("txnAppId", "bench").option("txnVersion", str(i))
            write.save(path)

        return append

    results: dict[str, Any] = {}
    runs: list[tuple[str, Callable[[int], None]]] = [
        ("parquet_1_row", lambda i: spark.range(1).write.mode("append").parquet(f"{root}/parquet")),
        ("delta_1_row", delta(f"{root}/plain", txn=False)),
        ("delta_1_row_txn", delta(f"{root}/txn", txn=True)),
        (
            "arrow_200k_to_delta",
            lambda i: arrow_frame(spark, big).write.format("delta").mode("append").save(f"{root}/arrow"),
        ),
        (
            "arrow_200k_to_delta_coalesced",
            lambda i: (
                arrow_frame(spark, big)
                .coalesce(-(-n // ROWS_PER_PARTITION))
                .write.format("delta")
                .mode("append")
                .save(f"{root}/arrow-coalesced")
            ),
        ),
    ]
    for label, append in runs:
        results[label] = measure(spark, label, append, args.repeats)
        print(f"{label:32s} {results[label]}", file=sys.stderr, flush=True)
    # How many tasks rebuild the state the txnVersion check reads (build_session sets 1 on a local master).
    key = "spark.databricks.delta.snapshotPartitions"
    chosen = spark.conf.get(key)
    for parts in ("1", str(spark.sparkContext.defaultParallelism), "50"):
        spark.conf.set(key, parts)
        label = f"delta_1_row_txn_snapshot_parts_{parts}"
        results[label] = measure(spark, label, delta(f"{root}/parts-{parts}", txn=True), args.repeats)
        print(f"{label:32s} {results[label]}", file=sys.stderr, flush=True)
    spark.conf.set(key, chosen)
    # The prepared case: time only the append, with the state computed after the previous one.
    append = delta(f"{root}/prepared", txn=True)
    timed: list[float] = []
    for i in range(args.repeats):
        start = time.perf_counter()
        append(i)
        timed.append(time.perf_counter() - start)
        prepare_state(spark, f"{root}/prepared", i)
    results["delta_1_row_txn_state_ready"] = {"median_s": round(float(np.median(timed[3:])), 3)}
    print(f"{'delta_1_row_txn_state_ready':32s} {results['delta_1_row_txn_state_ready']}", file=sys.stderr)
    spark.stop()
    if args.json:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
