"""Chaos on the rate source at full load, and the driver's memory over the run.

    python benchmarks/chaos_rss.py [--batches 300] [--rows-per-second 5000] [--kills 5] [--seed 11] [--json]

Runs the job uninterrupted on Spark's deterministic rate source (``--rate-rows-per-batch``), then again
SIGKILLed at ``--kills`` random points and restarted (``tests/system/test_stream_chaos.py``, which runs a
smaller load in the suite), and prints: whether every table equals the uninterrupted run's, the checkpoint
folder's file count and size over the last 100 batches, and the driver's RSS (the Python driver and its JVM)
over the last 200 batches of the uninterrupted run, with the ratio of its highest to its lowest value (the
target is within 1.3x; printed, not asserted) and the batch of its highest; Spark's Python workers (forked by
the JVM into the same process group for the executors' Python work, coming and going with the tasks) and the
processes the JVM spawns for a moment (``chmod``: :func:`group_rss_bytes`) apart."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.system.test_stream_chaos import Load, Run, chaos  # noqa: E402


def group_rss_bytes(pgid: int) -> tuple[int, int, int, int]:
    """Memory of the process group ``pgid``: the Python driver, its JVM, Spark's Python workers, and the
    short-lived processes the JVM spawns (apart: they share the JVM's memory).

    The Python driver (the group's leader) and its JVM (the leader's child running ``java``) are counted
    by resident set size. In local mode the JVM forks Python workers (``pyspark.daemon`` and its children)
    into the same group when executors run Python; they come and go with the tasks, so they are counted
    apart. So are the processes the JVM spawns for a moment: Hadoop's local file system runs ``chmod`` for
    each checkpoint file it writes, through ``posix_spawn`` and ``jspawnhelper``. Until its ``exec`` such a
    child runs in the JVM's own address space (``CLONE_VM``), so its resident set (1.7 GiB) is the JVM's,
    counted a second time: it adds next to nothing, and it is not added to the driver. Its proportional
    set size (``Pss``) is printed apart; it is the JVM's too while the address space is shared, and a few
    kilobytes after the ``exec``.
    """
    import os

    python = jvm = workers = spawned = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.getpgid(int(entry)) != pgid:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read()
            with open(f"/proc/{entry}/status", encoding="ascii") as fh:
                status = dict(line.split(":", 1) for line in fh if ":" in line)
            rss = int(status["VmRSS"].split()[0]) * 1024
            parent = int(status["PPid"])
            if b"pyspark.daemon" in cmdline or b"pyspark.worker" in cmdline:
                workers += rss
            elif int(entry) == pgid:
                python += rss
            elif parent == pgid and os.path.basename(cmdline.split(b"\0")[0]) == b"java":
                jvm += rss
            else:
                with open(f"/proc/{entry}/smaps_rollup", encoding="ascii") as fh:
                    spawned += next(int(line.split()[1]) * 1024 for line in fh if line.startswith("Pss:"))
        except (OSError, ValueError, KeyError, StopIteration):
            continue
    return python, jvm, workers, spawned


def _mib(values: list[int]) -> dict[str, float]:
    return {
        "first": round(values[0] / 2**20, 1),
        "min": round(min(values) / 2**20, 1),
        "max": round(max(values) / 2**20, 1),
        "last": round(values[-1] / 2**20, 1),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", type=int, default=300)
    p.add_argument("--rows-per-second", type=int, default=5_000)
    p.add_argument("--batch-ms", type=int, default=200, help="input time per micro-batch")
    p.add_argument("--kills", type=int, default=5)
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    load = Load(batches=args.batches, rows_per_second=args.rows_per_second, batch_ms=args.batch_ms)
    rss: dict[int, tuple[int, int, int, int]] = {}

    def sample(batch: int, pid: int) -> None:
        rss.setdefault(batch, group_rss_bytes(pid))

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="chaos-") as tmp:
        out = chaos(Path(tmp), load, args.kills, args.seed, on_batch=sample)
    reference = out["reference"]
    assert isinstance(reference, Run)
    window = [b for b in sorted(rss) if b >= max(rss) - 199]
    values = [rss[b][0] + rss[b][1] for b in window]
    python = [rss[b][0] for b in window]
    jvm = [rss[b][1] for b in window]
    workers = [rss[b][2] for b in window]
    spawned = [rss[b][3] for b in window]
    last100 = [b for b in sorted(reference.files) if b >= max(reference.files) - 99]
    figures = {
        "batches": args.batches,
        "rows_per_second": args.rows_per_second,
        "rows_per_batch": load.rows_per_batch,
        "kill_points": out["points"],
        "compared_up_to_batch": out["up_to"],
        "rows_compared": out["rows"],
        "tables_equal": out["equal"],
        "checkpoint_files_last_100": [reference.files[last100[0]], max(reference.files[b] for b in last100)],
        "checkpoint_bytes_last_100": [reference.size[last100[0]], max(reference.size[b] for b in last100)],
        "driver_rss_mib_last_200": {
            **_mib(values),
            "max_over_min": round(max(values) / min(values), 3),
            "last_over_first": round(values[-1] / values[0], 3),
            "batch_of_max": window[values.index(max(values))],
            "batches": len(values),
        },
        "python_driver_rss_mib_last_200": _mib(python),
        "jvm_rss_mib_last_200": _mib(jvm),
        "python_workers_rss_mib_last_200": _mib(workers),
        "jvm_spawned_pss_mib_last_200": _mib(spawned),
        "seconds": round(time.perf_counter() - started, 1),
    }
    if args.json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key}: {value}")
    return 0 if all(out["equal"].values()) else 1  # type: ignore[union-attr]


if __name__ == "__main__":
    sys.exit(main())
