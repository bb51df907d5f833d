"""How fast is ``fleet``'s kernel as the keys grow, and on a sparse fleet? Arrivals per CPU second.

    python benchmarks/fleet_keys.py [--case KEYS EVENTS SPAN_S ...] [--json]

``fleet`` chooses every key's delay together on a grid of ingestion time (``period_ms``, 1 s by default):
an allocation costs each key's survival function and a bisection over the multiplier, so its cost grows
with the keys, and on a sparse fleet (fewer arrivals than periods) one runs at nearly every arrival. The
throughput benchmark (``watermark_throughput.py``) has 8 partitions on a dense stream and does not show
either. For each case, a synthetic stream (:func:`watermark.streams.synthetic.generate`, every key its own
partition) of ``EVENTS`` arrivals over ``SPAN_S`` seconds of arrival time runs through one
:class:`watermark.strategies.fleet.Fleet` in one call of its kernel (after a first call that loads the
compiled code); the figure is arrivals per CPU second of this process (``time.process_time``), the steadier
figure on a shared machine. Default cases: 64 keys sending once a minute each (the re-tuning's sparse day), 64
keys at 2 arrivals/s each, and 10,000 keys at a third of an arrival per second each.

The benchmark asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from watermark.strategies import fleet_kernel as fk  # noqa: E402
from watermark.strategies.fleet import Fleet, FleetWatermark  # noqa: E402
from watermark.streams.synthetic import generate  # noqa: E402

START_MS = 1_800_000_000_000
CASES = ((64, 50_000, 43_200), (64, 500_000, 3_900), (10_000, 2_000_000, 600))


def measure(keys: int, events: int, span_s: int) -> dict[str, float | int]:
    """Arrivals per CPU second of one ``Fleet`` over ``events`` arrivals of ``keys`` keys in ``span_s`` s."""
    rate = events / span_s
    s = generate(events=events, partitions=keys, keys=keys, rate_per_s=rate, start_ms=START_MS, seed=0)
    te, tp, part = np.asarray(s.te_ms), np.asarray(s.tp_ms), np.asarray(s.partition)
    order = np.argsort(tp, kind="stable")
    te, tp, part = te[order], tp[order], part[order]
    fleet = Fleet(FleetWatermark(late_slo_pct=0.5).params)
    slots = np.array([fleet.slot(k) for k in range(keys)], np.int64)[part]
    warm = min(100, events)
    fleet.run(slots[:warm], te[:warm], tp[:warm])  # loads (or compiles) the kernel
    started = time.process_time()
    fleet.run(slots[warm:], te[warm:], tp[warm:])
    cpu = time.process_time() - started
    allocations = int(fleet.snapshot()["fints"][fk.G_ALLOCATIONS])
    return {
        "keys": keys,
        "events": events,
        "span_s": span_s,
        "cpu_s": round(cpu, 3),
        "arrivals_per_cpu_s": round((events - warm) / cpu) if cpu > 0 else 0,
        "allocations": allocations,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", nargs=3, type=int, action="append", metavar=("KEYS", "EVENTS", "SPAN_S"))
    parser.add_argument("--json", action="store_true", help="one JSON document instead of lines")
    args = parser.parse_args()
    results = []
    for keys, events, span_s in args.case or CASES:
        r = measure(keys, events, span_s)
        results.append(r)
        if not args.json:
            print(
                f"{keys:>7,} keys, {events:>10,} arrivals over {span_s:>6,} s: "
                f"{r['arrivals_per_cpu_s']:>10,} arrivals per CPU second "
                f"({r['cpu_s']} s, {r['allocations']:,} allocations)",
                flush=True,
            )
    if args.json:
        print(json.dumps({"cases": results}))


if __name__ == "__main__":
    main()
