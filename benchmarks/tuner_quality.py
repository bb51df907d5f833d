"""Tuner quality: tuned on a stream's first half, replayed on its second half, against hindsight.

    python benchmarks/tuner_quality.py [--target-late-pct 0.5] [--window-ms 1000] [--json]

For each bundled real stream: ``watermark.tune`` chooses a setting on the first half (by arrival; the tuner
itself weighs only the latest ``--recent-fraction`` of that history, default 0.5); the choice is replayed on
the second half. The peer is the best fixed ``periodic`` setting chosen *with
hindsight on the second half*: delay 0..5,000 ms in 10 ms steps, period 10 or 200 ms, lowest mean emit
latency with ``dropped_pct`` at most the target. It prints, per stream, both settings, their late % and mean
emit latency on the second half, and ``latency_ratio`` (tuned / hindsight periodic). The issue's check:
late % at most target + 0.1, and ratio at most 1.0 (aim 0.8).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from watermark.evaluate import WindowSpec, replay  # noqa: E402
from watermark.io import read_stream  # noqa: E402
from watermark.tune import tune  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
IOT = {
    "event_time": "S.Client.Detection.Time",
    "arrival_time": "S.Message.received.time.ms",
    "delimiter": ";",
}
STREAMS = {
    "ooo-iot-d1": (ROOT / "samples" / "ooo-iot-d1.csv", IOT),
    "ooo-iot-d2": (ROOT / "samples" / "ooo-iot-d2.csv", IOT),
}


def halves(path: Path, flags: dict) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    stream = read_stream(path, **flags)
    order = np.argsort(stream.tp_ms, kind="stable")
    te, tp = stream.te_ms[order], stream.tp_ms[order]
    h = te.size // 2
    return (te[:h], tp[:h]), (te[h:], tp[h:])


def evaluate(te, tp, strategy: str, params: dict, window: WindowSpec) -> dict:
    s = replay(te, tp, strategy=strategy, params=params, window=window).summary()
    return {"dropped_pct": s["dropped_pct"], "mean_emit_latency_ms": s["emit_latency_ms"]["mean"]}


def hindsight_periodic(te, tp, target: float, window: WindowSpec) -> dict:
    best = None
    for period in (10, 200):
        for delay in range(0, 5_001, 10):
            params = {"delay_ms": delay, "period_ms": period}
            r = evaluate(te, tp, "periodic", params, window)
            if r["dropped_pct"] <= target and r["mean_emit_latency_ms"] is not None:
                if best is None or r["mean_emit_latency_ms"] < best["mean_emit_latency_ms"]:
                    best = {"params": params, **r}
    return best or {}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target-late-pct", type=float, default=0.5)
    p.add_argument("--window-ms", type=int, default=1_000)
    p.add_argument("--recent-fraction", type=float, default=0.5, help="the tuner's recent_fraction")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    window = WindowSpec(args.window_ms)
    out = {
        "target_late_pct": args.target_late_pct,
        "window_ms": args.window_ms,
        "recent_fraction": args.recent_fraction,
        "streams": {},
    }
    for name, (path, flags) in STREAMS.items():
        (te1, tp1), (te2, tp2) = halves(path, flags)
        choice = tune(
            te1,
            tp1,
            target_late_pct=args.target_late_pct,
            window=window,
            recent_fraction=args.recent_fraction,
        ).choice
        tuned = {"strategy": choice.strategy, "params": choice.params}
        tuned |= evaluate(te2, tp2, choice.strategy, choice.params, window)
        peer = hindsight_periodic(te2, tp2, args.target_late_pct, window)
        ratio = tuned["mean_emit_latency_ms"] / peer["mean_emit_latency_ms"] if peer else None
        out["streams"][name] = {
            "tuned_on_first_half": tuned,
            "hindsight_periodic_on_second_half": peer,
            "latency_ratio": None if ratio is None else round(ratio, 3),
            "late_ok": tuned["dropped_pct"] <= args.target_late_pct + 0.1,
            "latency_ok": ratio is not None and ratio <= 1.0,
        }
        if not args.json:
            print(f"{name}: {json.dumps(out['streams'][name])}", flush=True)
    if args.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
