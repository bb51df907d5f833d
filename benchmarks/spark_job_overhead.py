"""Fixed cost of one small Python Spark job: an RDD ``mapPartitions`` against a DataFrame ``mapInArrow``.

    python benchmarks/spark_job_overhead.py [--repeats 8] [--json]

The Arrow path (``jobs/stream/workers/arrow_path.py``) runs two Spark jobs per micro-batch over a handful of
splits, so each job's fixed cost (scheduling, Python worker round trip, and for DataFrames planning, analysis
and Arrow conversion) is a large share of a batch. Both jobs here run two tasks doing nothing but return one
small value each, in the same warm local session; the medians are printed in seconds, with their ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobs.common.session import build_session  # noqa: E402


def passthrough(batches: Iterator) -> Iterator:
    yield from batches


def one_blob(items: Iterator) -> list[bytes]:
    return [b"x" * 1000 for _ in items]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    spark = build_session("job-overhead")
    sc = spark.sparkContext
    rdd_s, df_s = [], []
    for i in range(args.repeats + 2):  # the first two warm the Python workers up
        t = time.perf_counter()
        sc.parallelize([0, 1], 2).mapPartitions(one_blob).collect()
        rdd = time.perf_counter() - t
        t = time.perf_counter()
        frame = sc.parallelize([(0,), (1,)], 2).toDF("sid long")
        frame.mapInArrow(passthrough, "sid long").toArrow()
        df = time.perf_counter() - t
        if i >= 2:
            rdd_s.append(rdd)
            df_s.append(df)
    spark.stop()
    out = {
        "repeats": args.repeats,
        "rdd_mapPartitions_collect_s": round(statistics.median(rdd_s), 3),
        "dataframe_mapInArrow_toArrow_s": round(statistics.median(df_s), 3),
    }
    out["ratio_rdd_to_dataframe"] = round(
        out["rdd_mapPartitions_collect_s"] / out["dataframe_mapInArrow_toArrow_s"], 3
    )
    print(json.dumps(out) if args.json else "\n".join(f"{k}: {v}" for k, v in out.items()))


if __name__ == "__main__":
    main()
