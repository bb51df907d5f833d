"""Short runs through a generator: the vectorised core against the ``update`` loop, per call.

    python benchmarks/small_batches.py [--sizes 1,4,16,...] [--json]

On a sparse fleet a partition-scoped replay with idleness runs each key's arrivals between its idle spells
as one ``process_trace`` call (the re-tuning's sparse day: about 580,000 calls of a few arrivals each).
There the vectorised core's fixed cost (tens of microseconds of numpy calls) outweighs the work, and the
``update`` loop, which gives the same watermarks and state, is cheaper up to some run length:
``process_trace`` takes the loop for runs of at most the strategy's ``SCALAR_RUN_MAX`` arrivals. For each
strategy whose core is the base class's (``slo`` and ``fleet`` have timed kernels of their own), at one
setting of the tuner's search space, this prints the microseconds per call of runs of each size, through
the vectorised core and through the loop, on a dense stream (an arrival every 30 ms on average) and a
sparse one (every 4 s), and the strategy's ``SCALAR_RUN_MAX``. Process time (``time.process_time``), the
steadier figure on a shared machine. The benchmark asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from watermark.base import WatermarkGenerator  # noqa: E402
from watermark.strategies.registry import make  # noqa: E402

#: One setting of the tuner's search space per strategy (each class's ``search_space``).
SETTINGS: dict[str, dict[str, Any]] = {
    "periodic": {"delay_ms": 500, "period_ms": 10},
    "adaptive": {"late_threshold": 0.1, "heartbeat_ms": 100},
    "sliding": {"initial_delay_ms": 250, "change_rate": 0.1},
    "percentile": {"percentile": 1.0, "horizon_ms": 5_000, "period_ms": 10},
    "band": {"band_ms": 200},
    "ingestion": {"max_event_time_lag_ms": 500},
}
GAPS_MS = {"dense": 30, "sparse": 4_000}


def per_call_us(name: str, params: dict[str, Any], size: int, gap_ms: int, scalar: bool) -> float:
    """Process-time microseconds per ``process_trace`` call of ``size`` arrivals, by one path."""
    rng = np.random.default_rng(0)
    gen = make(name, params)
    limit = type(gen).SCALAR_RUN_MAX
    calls = max(30, 3_000 // size)
    t = 1_000_000
    runs = []
    for _ in range(calls):
        tp = t + np.sort(rng.integers(0, gap_ms * size, size))
        t = int(tp[-1]) + 1
        runs.append((tp - rng.integers(0, 500, size), tp))
    type(gen).SCALAR_RUN_MAX = 10**9 if scalar else 0
    try:
        start = time.process_time()
        for te, tp in runs:
            gen.process_trace(te, tp)
        return (time.process_time() - start) / calls * 1e6
    finally:
        type(gen).SCALAR_RUN_MAX = limit


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--sizes", default="1,4,16,32,64,128", help="run lengths (arrivals per call)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    for name, params in SETTINGS.items():
        gen_type = type(make(name, params))
        assert gen_type._run_timed is WatermarkGenerator._run_timed, name
        for kind, gap in GAPS_MS.items():
            cells = {n: (per_call_us(name, params, n, gap, False), per_call_us(name, params, n, gap, True))
                     for n in sizes}  # fmt: skip
            per_call = {n: {"vectorised": v, "loop": s} for n, (v, s) in cells.items()}
            rows.append({"strategy": name, "stream": kind, "scalar_run_max": gen_type.SCALAR_RUN_MAX,
                         "us_per_call": per_call})  # fmt: skip
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print("microseconds per process_trace call of N arrivals: vectorised core / update loop")
    print(f"{'strategy':11s} {'stream':7s} {'max':>4s}  " + "  ".join(f"{'N=' + str(n):>11s}" for n in sizes))
    for r in rows:
        cells = "  ".join(f"{c['vectorised']:5.0f}/{c['loop']:<5.0f}" for c in r["us_per_call"].values())
        print(f"{r['strategy']:11s} {r['stream']:7s} {r['scalar_run_max']:4d}  {cells}")


if __name__ == "__main__":
    main()
