"""Does the stage's cost follow the partitions alive, or every partition ever seen? Partition churn.

    python benchmarks/partition_churn.py [--partitions 10 1000 10000] [--modes min scoped] [--rows 10000]
                                         [--batches 15] [--json]

N partitions (each with its own key) speak once, 1,000 a batch, then go silent for good, while four live
partitions go on (100 keys between them). Once every dead partition has been silent for longer than the
retention, ``--batches`` batches of ``--rows`` rows of the live partitions are measured. Each micro-batch
runs through the driver's stage as the job runs it (``jobs.stream.paths._DriverStage``: key ownership in
partition-scoped mode, the generators, the rows' aggregation, here by pyarrow instead of Spark, firing, and
forgetting silent partitions), batches 10 s of ingestion time apart with the wall clock's boundary at each
(as on Kafka with ``LogAppendTime``). Per mode and N, with eviction (``partition_retention_ms`` 20 s) and
without (``null``, what the job did before), it prints:

* ``stage_ms``, ``cpu_ms``: the median wall and CPU milliseconds of a measured batch's stage (with its
  ``watermark_log`` rows; the CPU time is the steadier figure on a loaded machine);
* ``state_bytes``: the bytes of the state files the batch saves (``StageStore.save``: generator snapshots,
  open windows, key owners);
* ``log_rows``: the batch's ``watermark_log`` rows (now: the active partitions'; before, one per partition
  known, ``kept``);
* ``kept``, ``owners``: the partitions and key owners the state holds;
* ``task_bytes``: the pickled plan of one executor task (the stage in the executors): with eviction it
  carries neither snapshots nor owners (one broadcast does); without, what a task carried before (every
  partition's snapshot and every owner).

and, with eviction, the ratio of the largest N to the smallest (target: at most 1.5x). It never asserts on
time: it prints figures.
"""

from __future__ import annotations

import argparse
import json
import pickle
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402

from jobs.common.windows import empty_partials, table_partials  # noqa: E402
from jobs.stream.checkpoint.state import StageStore  # noqa: E402
from jobs.stream.paths import _DriverStage  # noqa: E402
from jobs.stream.report import BatchReport  # noqa: E402
from jobs.stream.sinks.rows import partition_counts, watermark_log_rows  # noqa: E402
from jobs.stream.stage.executors import _stage_plan  # noqa: E402
from jobs.stream.stage.scoped import OWNERS_SCHEMA  # noqa: E402
from jobs.stream.stage.states import StageStart  # noqa: E402
from jobs.stream.workers.executor_stage import StagePlan  # noqa: E402
from watermark.config import PipelineConfig  # noqa: E402
from watermark.partitions.combine import PartitionedWatermark  # noqa: E402
from watermark.timeutil import NO_WATERMARK  # noqa: E402

BATCH_MS = 10_000
RETENTION_MS = 20_000
NEW_PER_BATCH = 1_000
LIVE = 4
LIVE_KEYS = 100


def config(mode: str, retention: int | None) -> PipelineConfig:
    return PipelineConfig.from_dict(
        {
            "version": 1,
            "strategy": "ingestion",
            "params": {"max_event_time_lag_ms": 300, "max_watermark_lag_ms": 1_000},
            "window_ms": 1_000,
            "partition_mode": mode,
            "idle_timeout_ms": 5_000,
            "partition_retention_ms": retention,
        }
    )


@dataclass
class Boundary:
    """The wall clock's batch boundary (``StageOptions.boundary_ms`` with ``--clock wall``, no margin)."""

    def boundary_ms(self, ingest_ms: int) -> int:
        return ingest_ms


class Rows:
    """A batch's rows aggregated by pyarrow (``SparkRows.aggregate`` does it in Spark)."""

    def aggregate(self, narrow: pa.Table, result: Any, window: Any, report: Any, tick: float) -> Any:
        late = pa.array(result.late)
        return [table_partials(narrow.filter(pc.invert(late)), window)], narrow.filter(late), tick


def narrow_table(part: list[str], key: list[str], te: np.ndarray, tp: np.ndarray) -> pa.Table:
    n = len(part)
    return pa.table(
        {
            "partition": pa.array(part, pa.string()),
            "event_time_ms": pa.array(te, pa.int64()),
            "arrival_time_ms": pa.array(tp, pa.int64()),
            "file": pa.array(np.zeros(n, np.int32)),
            "line": pa.array(np.arange(n), pa.int64()),
            "key": pa.array(key, pa.string()),
            "value": pa.array(np.ones(n)),
        }
    )


def live_batch(rng: np.random.Generator, t0: int, rows: int) -> pa.Table:
    tp = np.sort(rng.integers(t0, t0 + BATCH_MS, rows))
    te = tp - rng.integers(0, 500, rows)
    lp = rng.integers(0, LIVE, rows)
    lk = rng.integers(0, LIVE_KEYS // LIVE, rows)
    keys = [f"live{p}-{k}" for p, k in zip(lp.tolist(), lk.tolist(), strict=True)]
    return narrow_table([f"live{p}" for p in lp.tolist()], keys, te, tp)


def churn_batch(rng: np.random.Generator, t0: int, first: int, count: int) -> pa.Table:
    """``count`` new partitions, one row each, and 100 rows of the live ones."""
    live = live_batch(rng, t0, 100)
    tp = np.sort(rng.integers(t0, t0 + BATCH_MS, count))
    names = [f"d{i}" for i in range(first, first + count)]
    dead = narrow_table(names, [f"k{n}" for n in names], tp - 100, tp)
    both = pa.concat_tables([live, dead])
    order = np.argsort(both.column("arrival_time_ms").to_numpy(), kind="stable")
    return both.take(pa.array(order)).set_column(4, "line", pa.array(np.arange(both.num_rows), pa.int64()))


class Run:
    """The stage's state between batches, as the job keeps it."""

    def __init__(self, cfg: PipelineConfig, folder: Path) -> None:
        self.cfg = cfg
        wm = PartitionedWatermark(
            cfg.strategy, cfg.params, idle_timeout_ms=cfg.idle_timeout_ms, mode=cfg.partition_mode
        )
        self.start = StageStart(0, cfg, wm, empty_partials(), NO_WATERMARK, OWNERS_SCHEMA.empty_table())
        self.store = StageStore(str(folder))
        self.scoped = cfg.partition_mode == "scoped"

    def batch(self, b: int, narrow: pa.Table, boundary: int) -> dict[str, float]:
        start = self.start
        start.ingest_ms = boundary
        tick, cpu = time.perf_counter(), time.process_time()
        stage = _DriverStage(start, Boundary())  # type: ignore[arg-type]
        result, _, _ = stage.run(Rows(), narrow, b, BatchReport(batch_id=b), tick)
        log = watermark_log_rows(
            start.watermark, partition_counts(narrow, result), b, self.cfg, boundary, stage.evicted
        )
        seconds, cpu_s = time.perf_counter() - tick, time.process_time() - cpu
        self.start = StageStart(
            boundary, self.cfg, start.watermark, stage.open_windows, NO_WATERMARK, stage.owners
        )
        self.store.batch_meta(b, self.cfg)
        owners = stage.owners if self.scoped else None
        self.store.save(b, start.watermark, stage.open_windows, 1, owners=owners)
        folder = Path(str(self.store.layout.state(b)))
        state = sum(f.stat().st_size for f in folder.iterdir() if f.is_file())
        return {
            "stage_ms": seconds * 1000,
            "cpu_ms": cpu_s * 1000,
            "state_bytes": state,
            "log_rows": len(log),
        }

    def task_bytes(self, evicting: bool) -> int:
        """One executor task's pickled plan (snapshots and owners: in a broadcast; before, in the task)."""
        start = self.start
        plan = _stage_plan(start.watermark, start.owners, self.cfg, NO_WATERMARK)
        if evicting:
            lean = StagePlan(**{**vars(plan), "shared": None})
            return len(pickle.dumps(lean))
        old = StagePlan(
            **{
                **vars(plan),
                "shared": None,
                "snapshots": plan.shared.value.snapshots,
                "owner_keys": tuple(start.owners.column("key").to_pylist()),
                "owner_partitions": tuple(start.owners.column("partition").to_pylist()),
            }
        )
        return len(pickle.dumps(old))


def measure(mode: str, partitions: int, evicting: bool, rows: int, batches: int) -> dict[str, Any]:
    rng = np.random.default_rng(partitions)
    with tempfile.TemporaryDirectory(prefix="churn-") as tmp:
        run = Run(config(mode, RETENTION_MS if evicting else None), Path(tmp))
        b = 0
        for first in range(0, partitions, NEW_PER_BATCH):
            t0 = BATCH_MS * (b + 1)
            run.batch(b, churn_batch(rng, t0, first, min(NEW_PER_BATCH, partitions - first)), t0 + BATCH_MS)
            b += 1
        for _ in range(RETENTION_MS // BATCH_MS + 2):  # every dead partition silent past the retention
            t0 = BATCH_MS * (b + 1)
            run.batch(b, live_batch(rng, t0, 100), t0 + BATCH_MS)
            b += 1
        figures = []
        for _ in range(batches):
            t0 = BATCH_MS * (b + 1)
            figures.append(run.batch(b, live_batch(rng, t0, rows), t0 + BATCH_MS))
            b += 1
        known = len(run.start.watermark.generators)
        return {
            "mode": mode,
            "partitions": partitions,
            "evict": evicting,
            "stage_ms": round(statistics.median(f["stage_ms"] for f in figures), 2),
            "cpu_ms": round(statistics.median(f["cpu_ms"] for f in figures), 2),
            "state_bytes": int(statistics.median(f["state_bytes"] for f in figures)),
            "log_rows": int(statistics.median(f["log_rows"] for f in figures)),
            "task_bytes": run.task_bytes(evicting),
            "partitions_kept": known,
            "owners_kept": run.start.owners.num_rows,
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, nargs="+", default=[10, 1_000, 10_000])
    parser.add_argument("--modes", nargs="+", default=["min", "scoped"], choices=["min", "scoped", "global"])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--batches", type=int, default=15)
    parser.add_argument("--no-baseline", action="store_true", help="skip the runs without eviction")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    results = []
    header = (
        f"{'mode':7} {'partitions':>10} {'evict':>5} {'stage_ms':>9} {'cpu_ms':>8} {'state_bytes':>12} "
        f"{'log_rows':>8} {'task_bytes':>11} {'kept':>6} {'owners':>6}"
    )
    if not args.json:
        print(header)
    for mode in args.modes:
        for evicting in (True, False) if not args.no_baseline else (True,):
            for n in args.partitions:
                r = measure(mode, n, evicting, args.rows, args.batches)
                results.append(r)
                if not args.json:
                    print(
                        f"{r['mode']:7} {r['partitions']:>10,} {'yes' if r['evict'] else 'no':>5} "
                        f"{r['stage_ms']:>9.2f} {r['cpu_ms']:>8.2f} {r['state_bytes']:>12,} "
                        f"{r['log_rows']:>8} {r['task_bytes']:>11,} {r['partitions_kept']:>6} "
                        f"{r['owners_kept']:>6}",
                        flush=True,
                    )
    ratios = []
    lo, hi = min(args.partitions), max(args.partitions)
    for mode in args.modes:
        by_n = {r["partitions"]: r for r in results if r["mode"] == mode and r["evict"]}
        if lo in by_n and hi in by_n and lo != hi:
            ratios.append(
                {
                    "mode": mode,
                    "stage_ratio": round(by_n[hi]["stage_ms"] / by_n[lo]["stage_ms"], 2),
                    "cpu_ratio": round(by_n[hi]["cpu_ms"] / by_n[lo]["cpu_ms"], 2),
                    "state_ratio": round(by_n[hi]["state_bytes"] / by_n[lo]["state_bytes"], 2),
                }
            )
    if args.json:
        print(json.dumps({"results": results, "ratios": ratios}, indent=1))
    else:
        for r in ratios:
            print(
                f"{r['mode']}: evicted, {hi:,} / {lo:,} partitions: stage time {r['stage_ratio']}x "
                f"(CPU {r['cpu_ratio']}x), state size {r['state_ratio']}x (target: at most 1.5x)"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
