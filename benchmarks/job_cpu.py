"""CPU of one run of the streaming job on small batches: with and without metrics, Spark's codegen or not.

    python benchmarks/job_cpu.py [--batches 39] [--repeats 2] [--json]

Feeds the bundled stream (samples/ooo-iot-d1.csv) into landing files of 250 rows and runs the job as a user
does (``python -m jobs.stream``, local Spark, ``slo``, one file a trigger) for ``--batches`` batches, once
per variant and ``--repeats`` times in a rotating order:

* ``metrics``: the default, Prometheus metrics served (the Spark listener registered);
* ``no_metrics``: ``--metrics-port 0``;
* ``interpreted``: metrics served, Spark's expressions evaluated interpreted
  (``spark.sql.codegen.factoryMode=NO_CODEGEN``, what the test suite's JVMs use).

Each run's figure is the machine's busy CPU seconds over the run (``/proc/stat``: the job's Python, its
JVM and the JVM's Python workers together), so run it on a machine with nothing else running; the median
of the repeats is printed beside the wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools.feed.landing import feed  # noqa: E402
from tools.feed.records import records_from_file  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
C1_ONLY = "-XX:TieredStopAtLevel=1"  # as the suite's JVMs (tests/conftest.py): the same in every variant
VARIANTS = {
    "metrics": ([], ""),
    "no_metrics": (["--metrics-port", "0"], ""),
    "interpreted": ([], "-Dspark.sql.codegen.factoryMode=NO_CODEGEN"),
}


def busy_ticks() -> int:
    """Clock ticks the machine's CPUs spent busy since boot (user, nice, system, irq, softirq, steal)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return user + nice + system + irq + softirq + steal


def feed_landing(landing: Path) -> None:
    """The bundled stream as landing files of 250 rows in arrival order (what bin/run's first step does)."""
    records = records_from_file(
        ROOT / "samples" / "ooo-iot-d1.csv",
        event_time="S.Client.Detection.Time",
        arrival_time="S.Message.received.time.ms",
        partition="S.Device.ID",
        delimiter=";",
    )
    feed(records, landing, rows_per_file=250)


def run_once(work: Path, landing: Path, variant: str, batches: int) -> dict[str, float]:
    """One run of the job in a fresh output and checkpoint: busy CPU seconds and wall seconds."""
    flags, opts = VARIANTS[variant]
    out = Path(tempfile.mkdtemp(dir=work, prefix=f"{variant}-"))
    env = os.environ | {"SPARK_SUBMIT_OPTS": f"{C1_ONLY} {opts}".strip(), "PYTHONPATH": str(ROOT)}
    command = [
        sys.executable, "-m", "jobs.stream", "--input", str(landing), "--output", str(out / "tables"),
        "--checkpoint", str(out / "checkpoint"), "--strategy", "slo", "--window-ms", "1000",
        "--max-files-per-trigger", "1", "--flush-at-end", "--max-batches", str(batches), *flags,
    ]  # fmt: skip
    ticks, started = busy_ticks(), time.perf_counter()
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    cpu = (busy_ticks() - ticks) / os.sysconf("SC_CLK_TCK")
    if proc.returncode != 0:
        msg = f"{variant}: the job failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
        raise SystemExit(msg)
    done = sum(1 for line in proc.stderr.splitlines() if line.startswith("batch "))
    if done != batches:
        msg = f"{variant}: the job ran {done} batches, not {batches} (fewer files than batches?)"
        raise SystemExit(msg)
    return {"cpu_s": cpu, "wall_s": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--batches", type=int, default=39, help="micro-batches a run (the stream has 39 files)"
    )
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not 1 <= args.batches <= 39:
        parser.error("--batches must be between 1 and 39 (the bundled stream makes 39 files of 250 rows)")
    runs: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="awm-job-cpu-") as tmp:
        work = Path(tmp)
        feed_landing(work / "landing")
        order = list(VARIANTS)
        for r in range(args.repeats):
            for variant in order[r % len(order) :] + order[: r % len(order)]:
                result = run_once(work, work / "landing", variant, args.batches)
                runs[variant].append(result)
                print(
                    f"  {variant:<12} {result['cpu_s']:6.1f} s CPU  {result['wall_s']:6.1f} s wall",
                    file=sys.stderr,
                )
    summary = {
        v: {
            "cpu_s": statistics.median(r["cpu_s"] for r in rs),
            "wall_s": statistics.median(r["wall_s"] for r in rs),
            "runs": rs,
        }
        for v, rs in runs.items()
    }
    if args.json:
        print(json.dumps({"batches": args.batches, "variants": summary}, indent=1))
        return
    print(f"job on {args.batches} batches of 250 rows, median of {args.repeats} (machine's busy CPU)")
    for v, s in summary.items():
        per_batch = s["cpu_s"] / args.batches
        print(f"{v:<12} {s['cpu_s']:6.1f} s CPU  {s['wall_s']:6.1f} s wall  ({per_batch:.2f} s CPU a batch)")


if __name__ == "__main__":
    main()
