"""Exactly once: a job killed with SIGKILL at random points and restarted writes the same tables."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs.feed import feed, feed_kafka
from jobs.tables import DeltaTables
from tests.test_stream import iot_records, stable

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]


def job_command(tmp: Path, inp: Path | list[str]) -> list[str]:
    """The job on landing files ``inp``, or on the source that the flags ``inp`` name (Kafka)."""
    source = ["--input", str(inp), "--max-files-per-trigger", "1"] if isinstance(inp, Path) else inp
    return [
        sys.executable,
        "-m",
        "jobs.stream",
        *source,
        "--output",
        str(tmp / "out"),
        "--checkpoint",
        str(tmp / "ck"),
        "--strategy",
        "adaptive",
        "--set",
        "warmup=200",
        "--set",
        "heartbeat_ms=200",
        "--window-ms",
        "1000",
        "--flush-at-end",
        "--metrics-port",
        "0",
    ]


def env():
    return os.environ | {"SPARK_LOCAL_IP": "127.0.0.1", "PYTHONPATH": str(ROOT)}


def run_to_end(tmp: Path, inp: Path | list[str]) -> None:
    proc = subprocess.run(
        job_command(tmp, inp), env=env(), capture_output=True, text=True, timeout=600, check=False
    )
    errors = [line for line in proc.stderr.splitlines() if "Error" in line or "Exception" in line]
    assert proc.returncode == 0, "\n".join(errors[:20]) or proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])  # the command prints its summary
    assert summary["events"] > 0 and set(summary["tables"]) >= {"aggregates", "late_events"}


def kill_after(tmp: Path, inp: Path | list[str], seconds: float) -> bool:
    """Start the job, SIGKILL it (and its JVM) after ``seconds``; True if it was still running."""
    proc = subprocess.Popen(
        job_command(tmp, inp),
        env=env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        proc.wait(timeout=seconds)
        return False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return True


def batches_done(tmp: Path) -> int:
    """Batches started so far: one past the highest ``batch-N.json`` (older ones are pruned)."""
    stage = tmp / "ck" / "stage"
    ids = [int(p.stem.split("-")[1]) for p in stage.glob("batch-*.json")] if stage.exists() else []
    return max(ids) + 1 if ids else 0


def test_sigkill_three_times_then_restart_gives_identical_tables(tmp_path):
    records = iot_records(4_000)
    inp = tmp_path / "in"
    feed(records, inp, rows_per_file=250)  # 16 files, one per micro-batch
    killed_three_times_gives_the_tables_of_one_run(tmp_path, inp)


def test_sigkill_three_times_on_a_kafka_topic_then_restart_gives_identical_tables(tmp_path, kafka_broker):
    records = iot_records(4_000)
    servers = kafka_broker.bootstrap_servers
    kafka_broker.create_topic("killed", 4)
    feed_kafka(records, servers, "killed", partitions=4)
    # 16 micro-batches of 250 offsets; a restart replays the offsets of its batch from Spark's checkpoint.
    source = ["--format", "kafka", "--kafka-bootstrap-servers", servers, "--topic", "killed"]
    killed_three_times_gives_the_tables_of_one_run(tmp_path, [*source, "--max-offsets-per-trigger", "250"])


def killed_three_times_gives_the_tables_of_one_run(tmp_path: Path, inp: Path | list[str]) -> None:
    reference = tmp_path / "reference"
    run_to_end(reference, inp)

    crashed = tmp_path / "crashed"
    rng = random.Random(7)
    kills = 0
    start = time.monotonic()
    while kills < 3 and time.monotonic() - start < 300:
        before = batches_done(crashed)
        # Spark starts in about 6 s; kill somewhere inside the following batches.
        if kill_after(crashed, inp, rng.uniform(7.0, 11.0)):
            kills += 1
            assert batches_done(crashed) >= before  # progress survives the kill
    assert kills == 3
    run_to_end(crashed, inp)

    want, got = DeltaTables(reference / "out", "r"), DeltaTables(crashed / "out", "r")
    assert stable(got.read("aggregates"), ["window_start_ms", "key", "flushed"]) == stable(
        want.read("aggregates"), ["window_start_ms", "key", "flushed"]
    )
    assert stable(got.read("late_events"), ["event_id"]) == stable(want.read("late_events"), ["event_id"])
    assert got.read("quarantine").num_rows == want.read("quarantine").num_rows == 0
    # One file per batch in both runs, so batch ids match: the log is compared batch by batch.
    assert log_rows(got) == log_rows(want)


def log_rows(sink):
    table = sink.read("watermark_log").drop_columns(["ingested_at_ms", "processed_at_ms"])
    return table.sort_by([("batch_id", "ascending"), ("partition", "ascending")]).to_pylist()
