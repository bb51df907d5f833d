"""Idleness in partition-scoped mode: stuck windows, latency and cost, on the bundled IoT streams.

For each bundled IoT recording (device = partition = key), as recorded and with a third of the devices
stopping half-way (their later records removed: devices that go offline for good), replays partition-scoped
``ingestion`` at zero lag (the tuner's usual choice on these streams) without an idle timeout, with fixed
timeouts and with timeouts learned per device (``auto``), and prints: late %, windows, windows fired,
windows stuck at the end of input of devices idle past the timeout (``stuck idle``; for the run without a
timeout, counted with 30 s), mean emit latency of the fired windows and the mean that charges each stuck
window until the end of input. Then the cost: events/s of ``PartitionedWatermark.process_trace`` in
scoped mode over a synthetic stream of 16 partitions, a quarter of them silent a third of the time; and the
keyed mode's replay over 5,000 keys with and without idleness.

Run: ``python benchmarks/scoped_idle.py`` (about a minute).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from watermark.evaluation.replay import WindowSpec, replay  # noqa: E402
from watermark.partitions.combine import PartitionedWatermark  # noqa: E402
from watermark.streams.recorded import read_stream  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
IOT = {
    "event_time": "S.Client.Detection.Time",
    "arrival_time": "S.Message.received.time.ms",
    "partition": "S.Device.ID",
    "delimiter": ";",
}
WINDOW = WindowSpec(1_000)
PARAMS = {"max_event_time_lag_ms": 0}
TIMEOUTS: list[int | str | None] = [None, 10_000, 30_000, "auto"]
COUNT_STUCK_MS = 30_000


def stopped(te: np.ndarray, tp: np.ndarray, dev: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every third device (by name) stops at the stream's middle arrival time."""
    names = sorted(set(dev.tolist()))
    stop = set(names[::3])
    middle = np.median(tp)
    keep = ~(np.isin(dev, list(stop)) & (tp > middle))
    return te[keep], tp[keep], dev[keep]


def row(label: str, te: np.ndarray, tp: np.ndarray, dev: np.ndarray, timeout: int | str | None) -> str:
    r = replay(te, tp, strategy="ingestion", params=PARAMS, window=WINDOW, partition=dev, key=dev,
               partition_mode="scoped", idle_timeout_ms=timeout)  # fmt: skip
    s = r.summary()
    stuck = r.stuck_idle(COUNT_STUCK_MS) if timeout is None or timeout == "auto" else s["windows_stuck_idle"]
    mean = s["emit_latency_ms"]["mean"]
    charged = s["emit_latency_charged_ms"]["mean"]
    return (
        f"{label:<22} {timeout!s:>7} {s['dropped_pct']:>7.3f} {s['windows']:>8} {s['windows_fired']:>8} "
        f"{stuck:>7} {mean:>10.0f} {charged:>10.0f}"
    )


def quality() -> None:
    print(f"{'stream':<22} {'timeout':>7} {'late %':>7} {'windows':>8} {'fired':>8} {'stuck':>7} "
          f"{'emit ms':>10} {'charged':>10}")  # fmt: skip
    for name in ("ooo-iot-d1", "ooo-iot-d2"):
        stream = read_stream(ROOT / "samples" / f"{name}.csv", **IOT)
        assert stream.partition is not None
        te, tp, dev = stream.te_ms, stream.tp_ms, stream.partition
        for label, (a, b, c) in ((name, (te, tp, dev)), (f"{name} stop", stopped(te, tp, dev))):
            for timeout in TIMEOUTS:
                print(row(label, a, b, c, timeout))


def cost() -> None:
    rng = np.random.default_rng(1)
    n, parts = 500_000, 16
    tp = np.cumsum(rng.integers(0, 3, n)).astype(np.int64) + 1_700_000_000_000
    te = tp - rng.integers(0, 300, n)
    part = rng.integers(0, parts, n)
    silent = (part % 4 == 0) & (((tp // 20_000) % 3) == 0)
    part = np.where(silent, (part + 1) % parts, part)
    print(f"\nscoped process_trace, {n} events, {parts} partitions (4 silent a third of the time)")
    for timeout in TIMEOUTS:
        pw = PartitionedWatermark("ingestion", PARAMS, idle_timeout_ms=timeout, mode="scoped")
        start = time.perf_counter()
        pw.process_trace(part, te, tp)
        took = time.perf_counter() - start
        print(f"  idle_timeout_ms={timeout!s:<7} {n / took / 1e6:.2f}M events/s")


def many_keys() -> None:
    """Keyed mode: an hour of 200,000 arrivals from 5,000 keys (each every 18 s), idle timeout 60 s."""
    rng = np.random.default_rng(0)
    n, keys = 200_000, 5_000
    tp = np.sort(rng.integers(0, 3_600_000, n)) + 1_700_000_000_000
    key = rng.integers(0, keys, n)
    te = tp - rng.integers(0, 500, n)
    print(f"\nkeyed replay, {n} events, {keys} keys in 16 partitions, periodic delay 100 ms, 10 s windows")
    for timeout in (None, 60_000):
        start = time.process_time()
        replay(te, tp, strategy="periodic", params={"delay_ms": 100, "period_ms": 100},
               window=WindowSpec(10_000), key=key, partition=key % 16, partition_mode="keyed",
               idle_timeout_ms=timeout)  # fmt: skip
        print(f"  idle_timeout_ms={timeout!s:<7} {time.process_time() - start:.1f} CPU s")


if __name__ == "__main__":
    quality()
    cost()
    many_keys()
