"""How many late tuples a watermark floored to the window grid would spare, at the same firing instants.

A tuple is late iff ``te < W`` when it arrives (the project's convention). A tumbling window ``[s, e)`` fires
when ``W >= e``, and ``e`` is on the window grid, so ``W' = floor(W / window) * window`` fires every window at
the same instant as ``W``. Under ``W'``, though, a tuple is late only once its own window has fired (Spark's
and Flink's rule); under ``W`` it is late as soon as the watermark passes its event time, while its window may
still be open. This script replays a few strategies over ``tuner_quality.py``'s streams and families and
prints both late shares from the same replay (``ReplayResult.wm_at_arrival``): what aligning would change,
with the latency unchanged. Nothing here is built into the job or the benchmark; it measures a proposal.

Usage::

    python benchmarks/window_aligned.py [--seeds 1000,1001] [--families clean,retransmits,clock-steps]

"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from tuner_quality import FAMILIES, IDLE_TIMEOUT_MS, WINDOW, base  # noqa: E402

from watermark.evaluation.replay import replay  # noqa: E402

#: (strategy, parameters, partition mode) replayed on each stream.
RUNS = (
    ("periodic", {"delay_ms": 300, "period_ms": 10}, "min"),
    ("periodic", {"delay_ms": 1_500, "period_ms": 10}, "min"),
    ("fleet", {"late_slo_pct": 0.5}, "scoped"),
)
NO_WATERMARK = np.iinfo(np.int64).min


def late_shares(te: np.ndarray, wm: np.ndarray, window_ms: int) -> tuple[float, float]:
    """Late % under the watermark in force at each arrival, and under it floored to the window grid."""
    known = wm != NO_WATERMARK
    aligned = np.where(known, (wm // window_ms) * window_ms, NO_WATERMARK)
    return 100.0 * float(((te < wm) & known).mean()), 100.0 * float(((te < aligned) & known).mean())


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--seeds", default="1000,1001", help="comma-separated seeds (tuner_quality's streams)")
    p.add_argument("--families", default="clean,retransmits,clock-steps")
    args = p.parse_args()
    print("family       stream          strategy   setting                     mode    late %   aligned %")
    for family in args.families.split(","):
        for seed in map(int, args.seeds.split(",")):
            name, stream = base(seed)
            (te, tp, key), part = FAMILIES[family](stream, seed)
            for strategy, params, mode in RUNS:
                r = replay(te, tp, strategy=strategy, params=dict(params), window=WINDOW, key=key,
                           partition=part, partition_mode=mode, idle_timeout_ms=IDLE_TIMEOUT_MS)  # fmt: skip
                late, aligned = late_shares(r.te_ms, r.wm_at_arrival, WINDOW.window_ms)
                setting = ", ".join(f"{k}={v}" for k, v in params.items())
                print(f"{family:<12} {name:<15} {strategy:<10} {setting:<27} {mode:<7} {late:6.3f}   "
                      f"{aligned:6.3f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
