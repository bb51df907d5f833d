"""Exactly once: a job killed with SIGKILL inside its micro-batches and restarted writes the same tables.

Landing files here; the same on a Kafka topic is ``tests/system/test_stream_exactly_once_kafka.py`` (its
own file, so that the suite's workers run the two at the same time).
"""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs.common.tables import DeltaTables
from tests.integration.spark.test_stream import iot_records, stable
from tools.feed.landing import feed
from watermark import storage

pytestmark = pytest.mark.slow

#: 2,000 records in 8 micro-batches of 250 (a file each): 4 batches after the last kill (after batch 3), so
#: that a fast batch cannot end the killed run before the kill lands (a batch of 400 took under a second).
RECORDS, PER_BATCH = 2_000, 250


def job_command(tmp: Path | str, inp: Path | str | list[str]) -> list[str]:
    """The job writing under ``tmp`` (a folder or a URI) on landing files ``inp`` (a folder or a URI), or on
    the source that the flags ``inp`` name (Kafka)."""
    source = inp if isinstance(inp, list) else ["--input", str(inp), "--max-files-per-trigger", "1"]
    return [
        sys.executable,
        "-m",
        "jobs.stream",
        *source,
        "--output",
        f"{tmp}/out",
        "--checkpoint",
        f"{tmp}/ck",
        # The adaptive watermark (state to restore at each restart) with late rows on both sources (3 of the
        # landing files' 2,000 records, 18 of the topic's 1,000: the library's replay of these settings).
        "--strategy",
        "adaptive",
        "--set",
        "warmup=150",
        "--set",
        "skew=mean",
        "--set",
        "heartbeat_ms=200",
        "--window-ms",
        "1000",
        "--flush-at-end",
        "--metrics-port",
        "0",
    ]


#: Where each run's standard error is kept (a failing test leaves them in its folder), or None.
LOGS: list[Path] = []


def keep_log(text: str) -> None:
    if LOGS:
        with LOGS[-1].open("a") as fh:
            fh.write(text + "\n==== end of a run ====\n")


def run_in_process(spark, tmp: Path | str, inp: Path | str | list[str]) -> list[int]:
    """The job of :func:`job_command` (the same flags, options and code) run to the end of its input in this
    process's Spark session: the uninterrupted run the killed ones are compared with, and the restart
    after the last kill, which resumes from the checkpoint the killed processes left. Its tables are the
    command's, without a JVM of its own to start (the processes are the kills' subject: a SIGKILL takes a
    driver of its own). The ids of the batches it ran."""
    from jobs.stream.cli import build_parser, options_from_args
    from jobs.stream.run import run_job

    options = options_from_args(build_parser().parse_args(job_command(tmp, inp)[3:]))
    reports = run_job(spark, options)
    assert sum(report.rows for report in reports) > 0
    return [report.batch_id for report in reports]


def batch_id(progress_line: str) -> int:
    """The batch id of the job's progress line ``batch N: ...`` (standard error)."""
    return int(progress_line.split(":", 1)[0].split()[1])


def kill_inside_batch(
    tmp: Path | str, inp: Path | str | list[str], after: int, rng: random.Random, env: dict[str, str]
) -> list[int]:
    """Start the job; once batch ``after`` (or a later one) has completed, SIGKILL it (and its JVM) a random
    moment into what follows (the next batch, or Spark's commit of this one). The ids of the batches it
    completed; an assertion error if it ended before."""
    return kill_after_batch(job_command(tmp, inp), env, after, rng)


def kill_after_batch(command: list[str], env: dict[str, str], after: int, rng: random.Random) -> list[int]:
    """:func:`kill_inside_batch` for any command line of the job (its standard error kept in ``LOGS``)."""
    proc = subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stderr is not None
    done: list[int] = []
    tail: list[str] = []
    killed = False
    try:
        for line in proc.stderr:
            tail = [*tail[-400:], line.rstrip()]
            if line.startswith("batch "):
                done.append(batch_id(line))
                if done[-1] >= after:
                    time.sleep(rng.uniform(0.0, 1.5))
                    os.killpg(proc.pid, signal.SIGKILL)
                    killed = True
                    break
    finally:
        if not killed and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=600)
        keep_log("\n".join(tail))
    assert killed, f"the job ended (status {proc.returncode}) before batch {after}:\n" + "\n".join(tail)
    return done


def batches_done(tmp: Path | str) -> int:
    """Batches started so far: one past the highest ``batch-N.json`` (older ones are pruned)."""
    names = [e.name for e in storage.listdir(f"{tmp}/ck/stage")]
    ids = [
        int(n[len("batch-") : -len(".json")]) for n in names if n.startswith("batch-") and n.endswith(".json")
    ]
    return max(ids) + 1 if ids else 0


# Four runs of the job, the two killed ones in JVMs of their own: minutes, more on a busy machine.
@pytest.mark.timeout(2_400)
def test_sigkill_twice_then_restart_gives_identical_tables(spark, tmp_path, jvm_process):
    records = iot_records(RECORDS)
    inp = tmp_path / "in"
    feed(records, inp, rows_per_file=PER_BATCH)  # 8 files, one per micro-batch
    killed_and_restarted_gives_the_tables_of_one_run(spark, tmp_path, inp, jvm_process.env)


def killed_and_restarted_gives_the_tables_of_one_run(
    spark,
    tmp_path: Path,
    inp: Path | list[str],
    env: dict[str, str],
    crashed: str | None = None,
    crashed_input: str | None = None,
    kills: int = 2,
    records: int = RECORDS,
    per_batch: int = PER_BATCH,
) -> None:
    """An uninterrupted run (in the session ``spark``: :func:`run_in_process`), then a run SIGKILLed inside
    its batches ``kills`` times (3 or fewer: the job as a process with the environment ``env``) and
    restarted to the end in the session ``spark`` (a new driver on the killed one's checkpoint and
    tables): every table holds the same rows. The killed run writes under ``crashed`` (default:
    a folder of ``tmp_path``; a URI puts its tables and checkpoint on an object store) and reads
    ``crashed_input`` (default: ``inp``; the same files elsewhere).

    Each killed run is a JVM of its own to start, the suite's dearest step. Landing files (here)
    kill twice: after batch 0 (the first batch's state) and after batch 3 (a warm run that was itself
    restarted); a third kill would be a restart of a restarted run again. The Kafka and S3 variants beside
    it (``kills=1``) kill once, after batch 3 of a warm first run: what differs there is the source's
    offsets and the store's commits, which one restart replays; the restart of a restarted run is the same
    checkpoint and Delta logic whatever the source, proved here. ``records``: how many records ``inp``
    holds (the first of :func:`iot_records`), ``per_batch`` in each batch (a file's lines, or the offsets
    of ``--max-offsets-per-trigger``): at least 5 batches, so that the last kill leaves a batch."""
    LOGS[:] = [tmp_path / "job-stderr.log"]
    reference = tmp_path / "reference"
    batches = records // per_batch
    assert run_in_process(spark, reference, inp)[:batches] == list(range(batches))

    crashed = crashed or str(tmp_path / "crashed")
    inp = crashed_input or inp
    rng = random.Random(0)
    # Each kill falls a random moment after batch 0-5 completed (drawn: 0, 3 and 5, whatever the input's
    # size, and with them the moments into the next batch, 0.39 and 0.77 s), in the next batch: after 0 and
    # 3 (two kills), or after 3 (one).
    points = sorted(rng.sample(range(6), 3))[:2][-kills:]
    assert points[-1] < batches - 1, (points, records, per_batch)
    previous = 0
    for point in points:
        before = batches_done(crashed)
        done = kill_inside_batch(crashed, inp, point, rng, env)
        # A restart resumes where the killed run was: at the batch it was in, or the one whose commit it
        # interrupted; never from the start.
        assert done[0] >= previous and done[-1] >= point, (done, previous, point)
        assert batches_done(crashed) >= before  # progress survives the kill
        previous = done[-1]
    assert run_in_process(spark, crashed, inp)[0] >= previous

    want, got = DeltaTables(reference / "out", "r"), DeltaTables(f"{crashed}/out", "r")
    aggregates = stable(want.read("aggregates"), ["window_start_ms", "key", "flushed"])
    late = stable(want.read("late_events"), ["event_id"])
    assert aggregates and late  # windows and late rows: the comparison is not vacuous
    got_aggregates = stable(got.read("aggregates"), ["window_start_ms", "key", "flushed"])
    if got_aggregates != aggregates:  # kept for a look at a failure
        (tmp_path / "got-aggregates.json").write_text(json.dumps(got_aggregates, indent=1))
        (tmp_path / "want-aggregates.json").write_text(json.dumps(aggregates, indent=1))
        (tmp_path / "got-watermark_log.json").write_text(json.dumps(log_rows(got), indent=1))
        (tmp_path / "want-watermark_log.json").write_text(json.dumps(log_rows(want), indent=1))
    assert stable(got.read("aggregates"), ["window_start_ms", "key", "flushed"]) == aggregates
    assert stable(got.read("late_events"), ["event_id"]) == late
    assert got.read("quarantine").num_rows == want.read("quarantine").num_rows == 0
    # One file (or per_batch offsets) per batch in both runs, so batch ids match: the log is compared batch by
    # batch.
    # Unless a kill fell inside Spark's write of the next batch's offsets (on an object store, where that
    # write is not a rename, the window is wide): the restart then plans the batch again from the source
    # log and takes the killed run's file and the next one together (Spark's own replanning; the tables
    # above are the same). Then each partition's totals and final watermark are compared.
    if batch_sizes(got) == batch_sizes(want):
        assert log_rows(got) == log_rows(want)
    else:
        assert sum(batch_sizes(got).values()) == sum(batch_sizes(want).values()) == records
        assert log_totals(got) == log_totals(want)
    assert got.read("arrivals").num_rows == want.read("arrivals").num_rows == records


def batch_sizes(sink) -> dict[int, int]:
    """Valid records per batch (the watermark log's events)."""
    sizes: dict[int, int] = {}
    for row in sink.read("watermark_log").select(["batch_id", "events"]).to_pylist():
        sizes[row["batch_id"]] = sizes.get(row["batch_id"], 0) + row["events"]
    return sizes


def log_totals(sink) -> dict[str, tuple[int, int, int]]:
    """Per partition: its records, its late records and its last watermark, over the whole log."""
    totals: dict[str, tuple[int, int, int]] = {}
    for row in sink.read("watermark_log").to_pylist():
        events, late, wm = totals.get(row["partition"], (0, 0, -(2**63)))
        last = row["partition_watermark_ms"] if row["partition_watermark_ms"] is not None else wm
        totals[row["partition"]] = (events + row["events"], late + row["late"], max(wm, last))
    return totals


def log_rows(sink):
    table = sink.read("watermark_log").drop_columns(["ingested_at_ms", "processed_at_ms"])
    return table.sort_by([("batch_id", "ascending"), ("partition", "ascending")]).to_pylist()
