"""The three loops under fire: the stream, the re-tune's publications and the backfill, acting on the same
tables at once, with the job SIGKILLed under them.

A Kafka topic of 4 partitions (every key in one partition, as the feed keys its records) is read in the
partition-scoped mode with the ``slo`` strategy. While the job runs, a new configuration version is
published every two batches (other parameters, as the re-tuning DAG publishes them with
:func:`watermark.config.write_config`; once another partition mode, which the running job refuses), and
the backfill folds late rows into their windows every couple of batches in this process's Spark session,
beside the job's own commits. The job (a process of its own) is killed inside a batch and restarted in
this process's session; that last run flushes the windows still open at the end of the input, and a last
backfill folds what is left. Then every
(key, window) is in ``aggregates`` exactly once, and its count is the input's rows for it: every valid
row counted once, on time or folded in late; nothing lost, nothing twice.
"""

import json
import logging
import random
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pyarrow.compute as pc
import pytest

from jobs.batch.backfill import run_backfill
from jobs.batch.backfill_plan import BackfillOptions
from jobs.common.tables import DeltaTables
from tests.integration.spark.test_stream import iot_records
from tests.system.test_stream_exactly_once import LOGS, kill_after_batch
from tools.feed.kafka import feed_kafka
from watermark import storage
from watermark.config import PipelineConfig, load_config, write_config
from watermark.windowspec import WindowSpec

pytestmark = pytest.mark.slow

#: 10 micro-batches: the publications at batches 2, 4, 6 (the refused mode change) and 8, the backfills at
#: 3, 6 and 9, and the kill after batch 4, with two publications and a backfill behind it and the rest
#: ahead of the restart. (Each kill and restart is a JVM of its own to start, the test's dearest step; the
#: restart of a restarted run is the checkpoint's logic whatever runs beside the job:
#: tests/system/test_stream_exactly_once.py kills twice.)
RECORDS, PER_BATCH, PARTITIONS = 2_500, 250, 4
WINDOW_MS = 1_000
V1 = PipelineConfig.from_dict(
    {
        "version": 1,
        "strategy": "slo",
        "window_ms": WINDOW_MS,
        "late_slo_pct": 0.5,
        "partition_mode": "scoped",
        "idle_timeout_ms": None,
    }
)


def job_command(tmp: Path, servers: str, *, last: bool) -> list[str]:
    """The job on the topic, its configuration hot-reloaded from ``tmp/watermark.json``."""
    command = [sys.executable, "-m", "jobs.stream", "--format", "kafka", "--kafka-bootstrap-servers", servers]
    command += ["--topic", "loops", "--max-offsets-per-trigger", str(PER_BATCH)]
    command += [
        "--output",
        str(tmp / "out"),
        "--checkpoint",
        str(tmp / "ck"),
        "--config",
        str(tmp / "watermark.json"),
    ]
    command += ["--metrics-port", "0"]
    return [*command, "--flush-at-end"] if last else command


def batches_started(tmp: Path) -> int:
    """Batches started so far (one past the newest ``batch-N.json`` of the stage)."""
    stage = tmp / "ck" / "stage"
    if not stage.exists():
        return 0
    ids = [
        int(e.name[6:-5])
        for e in storage.listdir(stage)
        if e.name.startswith("batch-") and e.name.endswith(".json")
    ]
    return max(ids) + 1 if ids else 0


class Publisher(threading.Thread):
    """Publishes a new configuration version every two batches: other SLO targets, and once (the third
    publication) another partition mode, which the job must refuse and outlive."""

    def __init__(self, tmp: Path) -> None:
        super().__init__(daemon=True)
        self.tmp, self.stop, self.published, self.error = tmp, threading.Event(), [], None

    def run(self) -> None:
        try:
            seen = 0
            while not self.stop.wait(0.2):
                done = batches_started(self.tmp)
                if done < seen + 2:
                    continue
                seen = done
                path = self.tmp / "watermark.json"
                version = load_config(path).version + 1
                n = len(self.published)
                if n == 2:  # the mode cannot change under the job: refused, the running version stays
                    new = V1.with_version(version, partition_mode="min")
                else:  # the next ones go back to the job's mode
                    new = V1.with_version(version, params={"late_slo_pct": [1.0, 0.2, 2.0, 0.5][n % 4]})
                write_config(path, new)
                self.published.append(new)
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


class Backfiller(threading.Thread):
    """Runs the backfill in the test's Spark session every three batches, beside the job's commits."""

    def __init__(self, spark, tmp: Path) -> None:
        super().__init__(daemon=True)
        self.spark, self.tmp, self.stop, self.reports, self.error = spark, tmp, threading.Event(), [], None

    def run(self) -> None:
        try:
            seen = 0
            while not self.stop.wait(0.3):
                done = batches_started(self.tmp)
                if done < seen + 3 or not (self.tmp / "out" / "late_events" / "_delta_log").exists():
                    continue
                seen = done
                self.reports.append(backfill(self.spark, self.tmp))
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


def backfill(spark, tmp: Path):
    options = BackfillOptions(
        tables=str(tmp / "out"),
        start_ms=0,
        end_ms=int(time.time() * 1000) + 3_600_000,
        window=WindowSpec(WINDOW_MS),
        run_id=f"loops-{time.monotonic_ns()}",
    )
    return run_backfill(spark, options)


def restart_in_process(spark, command: list[str]) -> list[str]:
    """The restart after the kill: ``command``'s flags, options and code run to the end of the topic in this
    process's Spark session, from the checkpoint the killed process left (the kill needs a driver of its
    own; the restart does not: ``tests/system/test_stream_exactly_once.py``). The backfills go on beside it
    in the same session, committing to the same tables. The configuration refusals it logged."""
    from jobs.stream.cli import build_parser, options_from_args
    from jobs.stream.run import run_job

    class Refusals(logging.Handler):
        def __init__(self) -> None:
            super().__init__(logging.WARNING)
            self.lines: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith("configuration refused"):
                self.lines.append(record.getMessage())

    handler = Refusals()
    logger = logging.getLogger("jobs.stream")
    logger.addHandler(handler)
    try:
        reports = run_job(spark, options_from_args(build_parser().parse_args(command[3:])))
    finally:
        logger.removeHandler(handler)
    assert sum(report.rows for report in reports) > 0
    return handler.lines


# A run of the job in a JVM of its own (killed), its restart and backfills beside them: minutes.
@pytest.mark.timeout(2_400)
def test_the_stream_the_retune_and_the_backfill_together_emit_every_window_once_and_lose_nothing(
    spark, tmp_path, kafka_broker, jvm_process
):
    records = iot_records(RECORDS)
    servers = kafka_broker.bootstrap_servers
    kafka_broker.create_topic("loops", PARTITIONS)
    feed_kafka(records, servers, "loops", partitions=PARTITIONS)
    write_config(tmp_path / "watermark.json", V1)
    log = tmp_path / "job-stderr.log"
    LOGS[:] = [log]  # kill_after_batch keeps each killed run's standard error there

    publisher, backfiller = Publisher(tmp_path), Backfiller(spark, tmp_path)
    publisher.start()
    backfiller.start()
    rng = random.Random(7)
    try:
        kill_after_batch(job_command(tmp_path, servers, last=False), jvm_process.env, 4, rng)
        refusals = restart_in_process(spark, job_command(tmp_path, servers, last=True))
    finally:
        publisher.stop.set()
        backfiller.stop.set()
        publisher.join(60)
        backfiller.join(600)
    assert publisher.error is None and backfiller.error is None, (publisher.error, backfiller.error)
    assert len(publisher.published) >= 3 and backfiller.reports  # the loops really ran beside the job
    final = backfill(spark, tmp_path)

    tables = DeltaTables(str(tmp_path / "out"), "check")
    aggregates = tables.read("aggregates")
    late = tables.read("late_events")
    # The mode change was refused and the job went on in the scoped mode; the other versions applied.
    assert any("the partition mode (scoped -> min)" in line for line in refusals), refusals
    versions = set(pc.unique(aggregates.column("config_version")).to_pylist())
    assert len(versions) >= 2, versions
    # Late rows happened, and the backfill folded every one of them.
    assert late.num_rows > 0 and all(late.column("reconciled").to_pylist()), final
    # Every (key, window) once ...
    rows = [
        ((r["key"], r["window_start_ms"]), r["count"])
        for r in aggregates.select(["key", "window_start_ms", "count"]).to_pylist()
    ]
    twice = {w: n for w, n in Counter(w for w, _ in rows).items() if n > 1}
    assert not twice, f"{len(twice)} windows written more than once: {sorted(twice)[:10]}"
    # ... holding the input's rows for it: on time or folded in late, each counted once, none missing.
    want = Counter(
        (r["key"], r["event_time_ms"] - r["event_time_ms"] % WINDOW_MS)
        for r in records.select(["key", "event_time_ms"]).to_pylist()
    )
    got = dict(rows)
    if got != dict(want):  # kept for a look at a failure
        wrong = {str(w): [n, got.get(w)] for w, n in want.items() if got.get(w) != n}
        (tmp_path / "mismatch.json").write_text(json.dumps(wrong, indent=1))
    assert got == dict(want)
