"""Throughput of every watermark strategy through ``process`` on a synthetic 8-partition stream.

    python benchmarks/watermark_throughput.py --events 5000000 --json
    python benchmarks/watermark_throughput.py --strategies fleet --params '{"fleet": {"surge": 4, "lead": 4}}'

Prints ``{"events": N, "strategies": {name: events_per_s}, "adwin_bare_loop": events_per_s, ...}``:

* ``strategies``: the realistic path, one generator per source partition combined into the global watermark
  (:meth:`watermark.partitions.combine.PartitionedWatermark.process`), in batches of ``--batch`` arrivals as a
  micro-batch job feeds it;
* ``single_generator``: one generator's ``process`` over the whole stream in arrival order;
* ``adwin_bare_loop``: a plain Python loop calling ``river.drift.ADWIN().update`` once per event, on the same
  normalised skews, in the same run: the ceiling the adaptive strategy is compared with.

Targets (issue 2): every strategy at least 1,000,000 events/s; adaptive at least 0.5 of the bare ADWIN loop.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
from river.drift import ADWIN  # noqa: E402

from watermark.partitions.combine import PartitionedWatermark  # noqa: E402
from watermark.strategies.registry import STRATEGIES, make  # noqa: E402
from watermark.streams.synthetic import describe, generate  # noqa: E402

# Settings on the scale of the synthetic stream's delays (median 40-250 ms).
PARAMS = {
    "periodic": {"delay_ms": 500, "period_ms": 200},
    "adaptive": {"warmup": 1_000, "late_threshold": 0.1},
    "sliding": {},
    "percentile": {"percentile": 1.0, "horizon_ms": 1_000, "period_ms": 200},
    "band": {"band_ms": 1_000, "idle_ms": 10_000},
    "ingestion": {"max_event_time_lag_ms": 500},
    "slo": {"late_slo_pct": 0.5},
    "fleet": {"late_slo_pct": 0.5},
}


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=5_000_000)
    parser.add_argument("--batch", type=int, default=200_000, help="arrivals per process() call")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--strategies", default=",".join(STRATEGIES), help="comma-separated names (default: all)"
    )
    parser.add_argument("--mode", default="min", choices=("min", "scoped"), help="partition combination mode")
    parser.add_argument(
        "--params", default="{}", help="JSON: settings added to strategies', by name (see the docstring)"
    )
    args = parser.parse_args()
    for name, settings in json.loads(args.params).items():
        PARAMS[name] = PARAMS[name] | settings
    names = [name.strip() for name in args.strategies.split(",") if name.strip()]

    stream = generate(events=args.events, partitions=8, seed=args.seed)
    part, te, tp = stream.partition, stream.te_ms, stream.tp_ms
    n = len(stream)
    print(f"stream: {describe(stream)}", file=sys.stderr)

    combined: dict[str, float] = {}
    single: dict[str, float] = {}
    late: dict[str, float] = {}
    for name in names:
        make(name, PARAMS[name]).process(te[:20_000], tp[:20_000])  # warm caches and imports
        warm = PartitionedWatermark(name, PARAMS[name], idle_timeout_ms=5_000, mode=args.mode)
        warm.process(part[:20_000], te[:20_000], tp[:20_000])  # (and the compiled code the combination runs)

        pw = PartitionedWatermark(name, PARAMS[name], idle_timeout_ms=5_000, mode=args.mode)

        def run_combined(pw: PartitionedWatermark = pw) -> None:
            for start in range(0, n, args.batch):
                stop = start + args.batch
                pw.process(part[start:stop], te[start:stop], tp[start:stop])

        combined[name] = round(n / timed(run_combined))
        late[name] = round(100.0 * pw.n_late / n, 3)
        gen = make(name, PARAMS[name])
        single[name] = round(n / timed(lambda gen=gen: gen.process(te, tp)))
        print(
            f"{name:10s} combined {combined[name]:>12,} ev/s  single {single[name]:>12,} ev/s  "
            f"late {late[name]} %",
            file=sys.stderr,
        )

    skew = (tp - te).astype(np.float64)
    values = (skew / max(1.0, float(skew[:1_000].max()))).tolist()
    detector = ADWIN()
    update = detector.update

    def bare_loop() -> None:
        for x in values:
            update(x)

    bare = round(n / timed(bare_loop))
    result = {
        "events": n,
        "strategies": combined,
        "adwin_bare_loop": bare,
        "adaptive_vs_bare": round(combined["adaptive"] / bare, 3) if "adaptive" in combined else None,
        "single_generator": single,
        "late_pct": late,
        "partitions": 8,
        "mode": args.mode,
        "batch": args.batch,
        "min_strategy_events_per_s": min(combined.values()),
    }
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")


if __name__ == "__main__":
    main()
