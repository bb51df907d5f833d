"""Chaos on the rate source: a run SIGKILLed at random points writes the tables of an uninterrupted run,
and its checkpoint folder stays bounded.

The source is Spark's deterministic ``rate-micro-batch`` (``--rate-rows-per-batch``): batch N holds the same
rows, with the same timestamps, however often it runs, so two checkpoints can be compared batch by batch.
The full load (300 micro-batches at 5,000 rows/s) and the driver's RSS are in ``benchmarks/chaos_rss.py``.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from jobs.common.tables import DeltaTables

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Load:
    """The chaos run's input and pace."""

    batches: int = 300
    rows_per_second: int = 5_000
    batch_ms: int = 200  # input time per micro-batch: rows_per_second * batch_ms / 1000 rows each
    trigger: str = "interval=50ms"
    retain: int = 100  # spark.sql.streaming.minBatchesToRetain (Spark's default)
    defer_batches: int | None = None  # the job's --defer-batches (None: its default, 10)
    kill_margin: int = 10  # no kill in the last kill_margin batches (the final run has batches left)

    @property
    def rows_per_batch(self) -> int:
        return self.rows_per_second * self.batch_ms // 1000


@dataclass
class Run:
    """What one process of the job printed and how its checkpoint grew, per completed batch."""

    last_batch: int = -1
    files: dict[int, int] = field(default_factory=dict)  # batch id -> files in the checkpoint folder
    size: dict[int, int] = field(default_factory=dict)  # batch id -> bytes in the checkpoint folder
    pending: dict[int, int] = field(default_factory=dict)  # batch id -> batches of deferred rows waiting
    killed: bool = False
    returncode: int | None = None
    stderr_tail: list[str] = field(default_factory=list)


def command(tmp: Path, load: Load, max_batches: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "jobs.stream",
        "--format",
        "rate",
        "--rate-rows-per-second",
        str(load.rows_per_second),
        "--rate-rows-per-batch",
        str(load.rows_per_batch),
        "--rate-keys",
        "200",
        "--rate-partitions",
        "4",
        "--rate-max-delay-ms",
        "1000",
        "--trigger",
        load.trigger,
        "--max-batches",
        str(max_batches),
        "--output",
        str(tmp / "out"),
        "--checkpoint",
        str(tmp / "ck"),
        "--strategy",
        "periodic",
        "--set",
        "delay_ms=500",
        "--set",
        "period_ms=100",
        "--window-ms",
        "1000",
        "--metrics-port",
        "0",
        *([] if load.defer_batches is None else ["--defer-batches", str(load.defer_batches)]),
    ]


def env(load: Load, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The job's environment: ``base`` (the test's ``jvm_process.env``; else this one's, for the benchmark)
    with Spark's log retention of the load."""
    retain = f"--conf spark.sql.streaming.minBatchesToRetain={load.retain} pyspark-shell"
    if base is None:
        base = os.environ | {"SPARK_LOCAL_IP": "127.0.0.1", "PYTHONPATH": str(ROOT)}
    return dict(base) | {"PYSPARK_SUBMIT_ARGS": retain}


def folder_usage(path: Path) -> tuple[int, int]:
    """Files (temporary ones excepted) and bytes under ``path``, the deferred tables' pending rows apart.

    The pending rows (``stage/pending``, :mod:`jobs.stream.sinks.deferred`) fill up and empty every
    ``--defer-batches`` batches; :func:`pending_batches` counts them.
    """
    files = size = 0
    pending = path / "stage" / "pending"
    for root, dirs, names in os.walk(path):
        if Path(root) == pending:
            dirs.clear()
            continue
        for name in names:
            if name.endswith(".tmp") or ".tmp." in name:
                continue
            try:
                size += os.path.getsize(os.path.join(root, name))
            except OSError:
                continue
            files += 1
    return files, size


def pending_batches(path: Path) -> int:
    """Batches whose deferred rows wait in the checkpoint ``path``."""
    return len(list((path / "stage" / "pending").glob("batch-*")))


def run_job(
    tmp: Path,
    load: Load,
    max_batches: int,
    *,
    kill_at: int | None = None,
    rng: random.Random | None = None,
    on_batch: Callable[[int, int], None] | None = None,
    base_env: Mapping[str, str] | None = None,
) -> Run:
    """Run the job until ``max_batches`` batches; with ``kill_at``, SIGKILL it (and its JVM) once batch
    ``kill_at`` has completed, after a random fraction of the next batch. ``on_batch(batch id, pid)`` is
    called at each completed batch (the benchmark samples the driver's RSS there)."""
    proc = subprocess.Popen(
        command(tmp, load, max_batches),
        env=env(load, base_env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    run = Run()
    assert proc.stderr is not None
    for line in proc.stderr:
        run.stderr_tail = [*run.stderr_tail[-40:], line.rstrip()]
        if not line.startswith("batch "):
            continue
        batch = int(line.split(":", 1)[0].split()[1])
        run.last_batch = max(run.last_batch, batch)
        run.files[batch], run.size[batch] = folder_usage(tmp / "ck")
        run.pending[batch] = pending_batches(tmp / "ck")
        if on_batch is not None:
            on_batch(batch, proc.pid)
        if kill_at is not None and batch >= kill_at:
            time.sleep((rng or random.Random()).uniform(0.0, 0.4))  # somewhere inside the next batch
            os.killpg(proc.pid, signal.SIGKILL)
            run.killed = True
            break
    if not run.killed:
        proc.stderr.read()
    run.returncode = proc.wait(timeout=600)
    return run


def run_in_process(spark, tmp: Path, load: Load, max_batches: int | None = None) -> Run:
    """A run of :func:`command`'s flags, options and code (``max_batches``: the load's) in this process's
    Spark session (``spark``), with Spark's log retention of the load set on it for the run: the same
    tables, and the checkpoint folder read after each batch's commit, as a process's run gives, without a
    JVM of its own to start (the kills are the processes' subject). The uninterrupted run, and the restart
    after the last kill."""
    from prometheus_client import CollectorRegistry

    from jobs.stream.cli import build_parser, options_from_args
    from jobs.stream.run import run_job
    from monitoring.metrics import BatchObservation, JobMetrics

    run = Run()

    class Watched(JobMetrics):
        def batch_done(self, obs: BatchObservation) -> None:  # after the batch's commit, before the next
            super().batch_done(obs)
            run.last_batch = max(run.last_batch, obs.batch_id)
            run.files[obs.batch_id], run.size[obs.batch_id] = folder_usage(tmp / "ck")
            run.pending[obs.batch_id] = pending_batches(tmp / "ck")

    batches = load.batches if max_batches is None else max_batches
    options = options_from_args(build_parser().parse_args(command(tmp, load, batches)[3:]))
    key = "spark.sql.streaming.minBatchesToRetain"
    saved = spark.conf.get(key, None)
    spark.conf.set(key, str(load.retain))
    try:
        run_job(spark, options, Watched(CollectorRegistry()))
    finally:
        if saved is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, saved)
    run.returncode = 0
    return run


def comparable(sink: DeltaTables, table: str, up_to: int, drop: list[str], order: list[str]) -> pa.Table:
    data = sink.read(table)
    data = data.filter(pc.less_equal(data.column("batch_id"), up_to)).drop_columns(drop)
    return data.sort_by([(c, "ascending") for c in order])


TABLES = {  # table -> (wall-clock columns dropped, sort order)
    "aggregates": (["emitted_at_ms"], ["batch_id", "window_start_ms", "key"]),
    "late_events": (["ingested_at_ms"], ["batch_id", "event_id"]),
    "watermark_log": (["ingested_at_ms", "processed_at_ms"], ["batch_id", "partition"]),
    "arrivals": (["ingested_at_ms"], ["batch_id", "arrival_time_ms", "partition", "event_time_ms"]),
}


def chaos(
    tmp: Path, load: Load, kills: int, seed: int, on_batch=None, base_env=None, spark=None
) -> dict[str, object]:
    """An uninterrupted run and a run killed ``kills`` times; what the test and the benchmark check.

    The uninterrupted run and the restart after the last kill are processes of their own (the benchmark
    samples the driver's memory), or, with ``spark``, the same runs in that session
    (:func:`run_in_process`); the killed runs are always processes."""
    if spark is not None:
        reference = run_in_process(spark, tmp / "reference", load)
    else:
        reference = run_job(tmp / "reference", load, load.batches, on_batch=on_batch, base_env=base_env)
    assert reference.returncode == 0, "\n".join(reference.stderr_tail)
    rng = random.Random(seed)
    points = sorted(rng.sample(range(3, load.batches - load.kill_margin), kills))
    crashed = tmp / "crashed"
    done = -1
    for point in points:
        run = run_job(crashed, load, load.batches, kill_at=point, rng=rng, base_env=base_env)
        assert run.killed, "\n".join(run.stderr_tail)
        done = max(done, run.last_batch)
    # What is left, counting the batch a kill interrupted (replayed) among the rest.
    if spark is not None:
        final = run_in_process(spark, crashed, load, load.batches - done)
    else:
        final = run_job(crashed, load, load.batches - done, base_env=base_env)
    assert final.returncode == 0, "\n".join(final.stderr_tail)
    up_to = min(reference.last_batch, final.last_batch)
    want, got = DeltaTables(tmp / "reference" / "out", "r"), DeltaTables(crashed / "out", "r")
    equal = {
        name: comparable(got, name, up_to, drop, order).equals(comparable(want, name, up_to, drop, order))
        for name, (drop, order) in TABLES.items()
    }
    rows = comparable(want, "arrivals", up_to, [], ["batch_id"]).num_rows
    return {
        "points": points,
        "up_to": up_to,
        "equal": equal,
        "rows": rows,
        "quarantined": got.read("quarantine").num_rows + want.read("quarantine").num_rows,
        "reference": reference,
        "final": final,
    }


@pytest.mark.slow
@pytest.mark.timeout(2_400)  # about 4 minutes on a 2-core machine running the suite; far more on a loaded one
def test_two_sigkills_on_the_rate_source_give_the_tables_of_an_uninterrupted_run(
    spark, tmp_path, jvm_process
):
    # The suite's size (the full 300 x 5,000 rows/s and five kills are benchmarks/chaos_rss.py): Spark keeps
    # the offset and commit logs of the last `retain` batches, so the folder stops growing after that many;
    # the deferred tables commit every 5 batches (at batches 4, 9 and 14), so the two kills (inside batches 4
    # and 10: seed 10 draws 3 and 9) fall at both sides of a commit: the first in the batch that creates and
    # first commits them, the second in the batch after a commit, with its rows deferred in the checkpoint
    # and a restarted run's commit behind it. (Each killed run is a JVM of its own to start, the
    # suite's dearest step; a third kill, between two commits, is the same case as the second. The
    # uninterrupted run and the last restart are this session's, not processes'.)
    load = Load(batches=16, rows_per_second=2_000, batch_ms=200, retain=4, defer_batches=5, kill_margin=4)
    out = chaos(tmp_path, load, kills=2, seed=10, base_env=jvm_process.env, spark=spark)
    assert out["points"] == [3, 9]
    assert out["up_to"] >= load.batches - 2 and out["rows"] >= (load.batches - 2) * load.rows_per_batch
    assert out["equal"] == dict.fromkeys(TABLES, True)
    assert out["quarantined"] == 0
    reference = out["reference"]
    assert isinstance(reference, Run)
    # Bounded checkpoint: once Spark's log retention is reached, later batches add no files, and the folder's
    # size stays put (a little slack for the open windows' Parquet file).
    settled = [b for b in reference.files if load.retain + 2 <= b <= load.retain + 5]
    late = [b for b in reference.files if b > load.retain + 5]
    assert len(settled) == 4 and len(late) >= 6
    # (a few files of slack: Spark deletes old log files in steps, not at every batch)
    assert max(reference.files[b] for b in late) <= max(reference.files[b] for b in settled) + 4
    assert max(reference.size[b] for b in late) <= 1.25 * max(reference.size[b] for b in settled)
    # The deferred tables' rows wait for at most --defer-batches (5) batches, then leave the checkpoint.
    assert max(reference.pending.values()) <= 5 and min(reference.pending[b] for b in late) <= 1
