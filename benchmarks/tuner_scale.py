"""How long and how much memory does a day's re-tuning take? 100k, 1M and 10M arrivals.

    python benchmarks/tuner_scale.py [--rows 100000 1000000 10000000] [--devices 64] [--json]

For each size, a day (86,400 s of arrival time) of synthetic out-of-order arrivals from ``--devices``
devices (:func:`watermark.streams.synthetic.generate`: Poisson arrivals at a rate that changes twice,
log-normal delays whose median drifts, stragglers, bursts, a device silent for 15 % of the day; one device =
one partition) is written to a real Delta ``arrivals`` table (the streaming job's columns, a batch every 10
s), and a fresh process runs the re-tuning job as the DAG runs it (``jobs.batch.retune.retune``: the read of
the history, the running setting's replay, the tuner on every strategy of the search space in the three
partition modes, the held-out evaluation, the report and the plot; nothing published is asserted). It
prints, per size:

* ``rows``: the arrivals of the day; ``recent``: the rows the tuner works on (the latest half);
* ``wall_s``: the child's wall time from the start of the read to the report; ``read_s`` and ``tune_s``
  (the read, and everything after it);
* ``cpu_s``: the CPU seconds of the child and its worker processes (the steadier figure on a loaded
  machine: the wall time of a 2-core machine shared with other work is at least ``cpu_s / 2``);
* ``peak_rss_mb``: the child's peak resident memory (``ru_maxrss``), the interpreter and its libraries
  included; ``worker_peak_rss_mb``: the largest of its worker processes'; ``load``: the 1-minute load
  average at the end (other work on the machine);
* ``replays``: replays the tuner ran; ``rows_per_candidate``: rows each candidate is replayed on;
* the decision, the choice and its late share and mean emit latency on the tuning period and the held-out
  slice, with the ratio to the best fixed delay there.

Target (issue 30): 10M rows re-tuned in at most 10 minutes on the 2-core machine, memory bounded. The
figures depend on the machine and its load; the benchmark asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

DAY_MS = 86_400_000
START_MS = 1_800_000_000_000
BATCH_MS = 10_000

CHILD = r"""
import json, resource, sys, time
started = time.monotonic()
from jobs.batch import retune as job
read = {}
original = job.read_history
def timed(*args, **kwargs):
    t = time.monotonic()
    out = original(*args, **kwargs)
    read["s"] = time.monotonic() - t
    read["recent"] = int(out["te"].size)
    return out
job.read_history = timed
opts = job.RetuneOptions(tables=sys.argv[1], config=sys.argv[2], reports=sys.argv[3], end_ms=int(sys.argv[4]),
                         min_events=1_000)
t0 = time.monotonic()
outcome = job.retune(opts)
wall = time.monotonic() - t0
report = json.load(open(outcome.report))
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"wall_s": wall, "read_s": read.get("s"), "recent": read.get("recent"),
                  "cpu_s": me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime,
                  "peak_rss_mb": me.ru_maxrss / 1024, "worker_peak_rss_mb": kids.ru_maxrss / 1024,
                  "load": __import__("os").getloadavg()[0], "report": report}))
"""


def write_day(folder: Path, rows: int, devices: int, seed: int = 0) -> int:
    """A day of arrivals as a Delta ``arrivals`` table under ``folder / "tables"``; returns the end (ms)."""
    from deltalake import write_deltalake

    from jobs.common.schemas import ARRIVALS_SCHEMA
    from watermark.streams.synthetic import generate

    # The default rate schedule (x1, x3, x0.5 over 35/35/30 % of the events) spans n / rate * 1.067 s.
    rate = max(rows, 1) * (0.35 + 0.35 / 3 + 0.3 / 0.5) / (DAY_MS / 1000)
    s = generate(
        events=max(rows, 1), partitions=devices, keys=devices, rate_per_s=rate, start_ms=START_MS, seed=seed
    )
    tp = np.asarray(s.tp_ms)
    names = pa.array([f"device-{i:03d}" for i in range(devices)])
    ingested = (tp // BATCH_MS + 1) * BATCH_MS
    table = pa.table(
        {
            "partition": pa.DictionaryArray.from_arrays(pa.array(s.partition), names).cast(pa.string()),
            "event_time_ms": np.asarray(s.te_ms),
            "arrival_time_ms": tp,
            "batch_id": (tp - START_MS) // BATCH_MS,
            "ingested_at_ms": ingested,
        }
    )
    if rows == 0:
        table = table.slice(0, 0)
    write_deltalake(str(folder / "tables" / "arrivals"), table.cast(ARRIVALS_SCHEMA))
    return int(ingested.max()) + 1 if rows else START_MS + DAY_MS


def running_config(folder: Path) -> Path:
    """A running setting: a 5 s fixed delay on 10 s windows, 0.5 % late target, the minimum over devices."""
    from watermark.config import PipelineConfig, write_config

    doc = {"version": 1, "strategy": "periodic", "params": {"delay_ms": 5_000, "period_ms": 200},
           "window_ms": 10_000, "late_slo_pct": 0.5, "partition_mode": "min"}  # fmt: skip
    path = folder / "watermark.json"
    write_config(path, PipelineConfig.from_dict(doc))
    return path


def measure(rows: int, devices: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="tuner-scale-") as tmp:
        folder = Path(tmp)
        t = time.monotonic()
        end = write_day(folder, rows, devices)
        written = time.monotonic() - t
        config = running_config(folder)
        argv = [
            sys.executable,
            "-c",
            CHILD,
            str(folder / "tables"),
            str(config),
            str(folder / "reports"),
            str(end),
        ]
        root = str(Path(__file__).resolve().parents[1])
        done = subprocess.run(argv, capture_output=True, text=True, cwd=root, check=False)
        if done.returncode != 0:
            return {"rows": rows, "error": done.stderr.strip().splitlines()[-1:]}
        out = json.loads(done.stdout.strip().splitlines()[-1])
    report = out.pop("report")
    line: dict[str, Any] = {"rows": rows, "write_s": round(written, 1), **out, "decision": report["decision"]}
    line["replays"] = report.get("replays")
    chosen = report.get("chosen") or report.get("other_mode")
    if chosen is not None:
        line["choice"] = f"{chosen['strategy']} {chosen['params']} {chosen['partition_mode']}"
    for period in ("tuning", "evaluation"):
        fig = report.get(period)
        if fig:
            line[period] = {
                "events": fig["events"],
                "late_pct": fig["dropped_pct"],
                "mean_ms": fig["emit_latency_ms"].get("mean"),
                "late_pct_by_period": fig["late_pct_by_period"],
                "ratio_to_fixed_delay": fig["ratio_to_fixed_delay"],
            }
    return line


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000])
    p.add_argument("--devices", type=int, default=64)
    p.add_argument("--json", action="store_true", help="one JSON line per size")
    args = p.parse_args(argv)
    for rows in args.rows:
        line = measure(rows, args.devices)
        if args.json:
            print(json.dumps(line), flush=True)
            continue
        if "error" in line:
            print(f"{rows:>11,} rows: failed: {line['error']}", flush=True)
            continue
        tuning, held = line.get("tuning") or {}, line.get("evaluation") or {}
        print(
            f"{rows:>11,} rows (recent {line['recent'] or 0:,}): wall {line['wall_s']:.1f} s "
            f"(read {line['read_s'] or 0:.1f} s), CPU {line['cpu_s']:.0f} s (workers included), peak RSS "
            f"{line['peak_rss_mb']:.0f} MB (a worker: {line['worker_peak_rss_mb']:.0f} MB), load "
            f"{line['load']:.1f}; {line['replays']} replays; {line['decision']}"
            + (f"; choice {line['choice']}" if "choice" in line else ""),
            flush=True,
        )
        for name, fig in (("tuning", tuning), ("evaluation", held)):
            if fig:
                print(
                    f"    {name:<10} {fig['events']:>9,} rows replayed: late {fig['late_pct']} %, mean emit "
                    f"latency {fig['mean_ms']} ms, x{fig['ratio_to_fixed_delay']} of the best fixed delay; "
                    f"late by sub-period {fig['late_pct_by_period']}",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
