"""Kafka as clusters run it, on a real local broker with a SASL_PLAINTEXT listener and SCRAM users.

The job (``python -m jobs.stream`` in its own JVM) reads a 4-partition topic that the feed (``python -m
tools.feed``) produced through the SCRAM listener, both given their credentials as options; the tables hold
every input record of each key and window. Wrong credentials fail the job quickly with one error line and
nothing committed. No secret is in the job's logs, its checkpoint, its tables, its metrics or ``--help``.
``bin/kafka-local start --sasl-scram`` is checked as a user runs it. (Option checks and redaction without a
broker: tests/unit/jobs/stream/test_kafka_options.py.)
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tools.feed.records import records_from_file

pytestmark = pytest.mark.slow  # three runs of the job's JVM and three broker starts

ROOT = Path(__file__).resolve().parents[3]
IOT = ROOT / "samples" / "ooo-iot-d1.csv"
IOT_FLAGS = [
    "--delimiter",
    ";",
    "--event-time",
    "S.Client.Detection.Time",
    "--arrival-time",
    "S.Message.received.time.ms",
    "--partition",
    "S.Device.ID",
]
USER = "awm-job"
PASSWORD = f"pw-{uuid.uuid4().hex}"  # distinctive: any occurrence anywhere is a leak
WRONG = f"wrong-{uuid.uuid4().hex}"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
TOPIC = "secured"
PARTITIONS = 4
WINDOW_MS = 1_000


def job_security(password: str) -> list[str]:
    """The job's --kafka-option flags that log in as USER with ``password``."""
    options = {
        "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": f'{SCRAM_MODULE} required username="{USER}" password="{password}";',
    }
    return [arg for key, value in options.items() for arg in ("--kafka-option", f"{key}={value}")]


def job_command(servers: str, tmp: Path, password: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "jobs.stream",
        "--format",
        "kafka",
        "--kafka-bootstrap-servers",
        servers,
        "--topic",
        TOPIC,
        *job_security(password),
        "--output",
        str(tmp / "out"),
        "--checkpoint",
        str(tmp / "ck"),
        "--strategy",
        "periodic",
        "--set",
        "delay_ms=100",
        "--set",
        "period_ms=50",
        "--window-ms",
        str(WINDOW_MS),
        "--flush-at-end",
        *extra,
    ]


def files_holding(root: Path, secret: str) -> list[str]:
    """Every file under ``root`` holding ``secret`` (text or binary: Delta logs, Parquet, stage state)."""
    needle = secret.encode()
    return [str(p) for p in sorted(root.rglob("*")) if p.is_file() and needle in p.read_bytes()]


@pytest.fixture(scope="module")
def scram_kafka(tmp_path_factory):
    """A broker of this module's own: its plaintext listener, and SASL_PLAINTEXT with the SCRAM user USER."""
    from tools.local.kafka_broker import LocalKafka
    from tools.local.processes import free_port

    broker = LocalKafka(
        port=free_port(),
        dir=tmp_path_factory.mktemp("kafka-scram"),
        scram_users={USER: PASSWORD},
        start_timeout=600,  # a busy machine: how long a start takes is no test's subject
    )
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def secured_topic(scram_kafka):
    """TOPIC, fed with the recorded IoT stream by ``python -m tools.feed`` through the SCRAM listener.

    Returns the feed's summary and its output (which must not hold the password either)."""
    servers = scram_kafka.sasl_bootstrap_servers
    producer = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": USER,
        "sasl.password": PASSWORD,
    }
    flags = [arg for key, value in producer.items() for arg in ("--producer-option", f"{key}={value}")]
    command = [sys.executable, "-m", "tools.feed", str(IOT), *IOT_FLAGS, "--kafka-bootstrap-servers", servers]
    command += ["--topic", TOPIC, "--partitions", str(PARTITIONS), *flags, "--quiet"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False, timeout=600)
    assert done.returncode == 0, done.stderr
    return done


def test_the_job_reads_a_topic_through_scram_and_no_secret_leaks(
    scram_kafka, secured_topic, tmp_path, jvm_process
):
    import json

    from jobs.common.tables import DeltaTables

    fed = json.loads(secured_topic.stdout)
    records = records_from_file(
        IOT, event_time=IOT_FLAGS[3], arrival_time=IOT_FLAGS[5], partition=IOT_FLAGS[7], delimiter=";"
    )
    assert (fed["rows"], fed["partitions"]) == (records.num_rows, PARTITIONS)
    assert min(fed["rows_per_partition"]) > 0  # every Kafka partition has records

    port = jvm_process.free_port()
    command = job_command(scram_kafka.sasl_bootstrap_servers, tmp_path, PASSWORD, "--metrics-port", str(port))
    scrapes: list[str] = []
    began = time.monotonic()
    proc = subprocess.Popen(
        command, cwd=ROOT, env=jvm_process.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )

    def scrape() -> None:  # the metrics endpoint, as Prometheus reads it while the job runs
        while proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
                    scrapes.append(answer.read().decode())
            except OSError:
                pass
            time.sleep(0.25)

    scraper = threading.Thread(target=scrape, daemon=True)
    scraper.start()
    stdout, stderr = proc.communicate(timeout=900)
    scraper.join()
    print(f"\njob through SCRAM: {time.monotonic() - began:.1f} s, {len(scrapes)} metrics scrapes")
    assert proc.returncode == 0, stderr[-4000:]

    # The tables: every input record of each (key, window), on time in aggregates or late in late_events.
    tables = DeltaTables(str(tmp_path / "out"), "test-reader")
    agg, late = tables.read("aggregates"), tables.read("late_events")
    got = Counter()
    for row in agg.to_pylist():
        got[(row["key"], row["window_start_ms"])] += row["count"]
    for row in late.to_pylist():
        got[(row["key"], row["event_time_ms"] - row["event_time_ms"] % WINDOW_MS)] += 1
    keys, times = records.column("key").to_pylist(), records.column("event_time_ms").to_pylist()
    want = Counter((k, t - t % WINDOW_MS) for k, t in zip(keys, times, strict=True))
    assert got == want
    assert agg.num_rows > 0 and late.num_rows > 0  # windows and late rows: the comparison is not vacuous
    assert tables.read("quarantine").num_rows == 0
    assert sorted(set(late.column("partition").to_pylist())) <= [str(p) for p in range(PARTITIONS)]

    # No secret anywhere: logs, the summary, the checkpoint, the tables, the metrics, --help.
    assert "kafka.sasl.jaas.config=***" in stderr  # the options are logged, the secret as ***
    assert PASSWORD not in stdout + stderr
    assert PASSWORD not in secured_topic.stdout + secured_topic.stderr
    assert files_holding(tmp_path / "ck", PASSWORD) == []
    assert files_holding(tmp_path / "out", PASSWORD) == []
    assert any((tmp_path / "out").rglob("_delta_log/*.json"))
    assert scrapes and "awm_" in scrapes[-1]
    assert not [text for text in scrapes if PASSWORD in text or USER in text]
    for help_command in (
        [*command, "--help"],
        [sys.executable, "-m", "tools.feed", "--producer-option", f"sasl.password={PASSWORD}", "--help"],
    ):
        shown = subprocess.run(
            help_command, cwd=ROOT, capture_output=True, text=True, check=False, timeout=120
        )
        assert shown.returncode == 0 and "KEY=VALUE" in shown.stdout
        assert PASSWORD not in shown.stdout + shown.stderr


def spark_log_time(line: str) -> datetime:
    """The time of a line of Spark's log4j console output (``yy/MM/dd HH:mm:ss LEVEL ...``)."""
    return datetime.strptime(line[:17], "%y/%m/%d %H:%M:%S").replace(tzinfo=UTC)  # one clock: any zone


def test_wrong_credentials_fail_the_job_quickly_with_one_error_and_commit_nothing(
    scram_kafka, secured_topic, tmp_path, jvm_process
):
    servers = scram_kafka.sasl_bootstrap_servers
    began = time.monotonic()
    # The timeout only stops a job that would retry for ever; it fails within seconds of its first login.
    done = subprocess.run(
        job_command(servers, tmp_path, WRONG, "--metrics-port", "0"),
        cwd=ROOT,
        env=jvm_process.env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    seconds = time.monotonic() - began
    lines = done.stderr.splitlines()
    errors = [line for line in lines if line.startswith("error:")]
    assert done.returncode == 1, done.stderr[-4000:]
    assert errors == [lines[-1]]  # one error line, the last
    assert errors[0].startswith(
        f"error: Kafka at {servers} refused the job (SaslAuthenticationException: Authentication failed"
    )
    assert (
        "check --kafka-option kafka.security.protocol, kafka.sasl.mechanism and kafka.sasl.jaas.config"
        in (errors[0])
    )
    assert "Traceback" not in done.stderr and done.stdout == ""

    # Quickly, on the job's own clock: from the broker's first refusal to the failed query, Spark's offset
    # fetch retries (fetchOffset.numRetries=3, a second apart): the Kafka client does not retry a refusal.
    refusals = [line for line in lines if "failed authentication" in line and re.match(r"\d\d/", line)]
    failed = [line for line in lines if "terminated with error" in line and re.match(r"\d\d/", line)]
    assert refusals and failed
    retried = (spark_log_time(failed[0]) - spark_log_time(refusals[0])).total_seconds()
    print(
        f"\nwrong credentials: failed {retried:.0f} s after the first refusal, the run took {seconds:.1f} s"
    )
    assert retried <= 60

    # Nothing committed: no Delta table, no batch in Spark's commit log, no stage state.
    assert not list((tmp_path / "out").rglob("_delta_log"))
    ck = tmp_path / "ck"
    assert not [p for p in (ck / "query" / "commits").glob("*") if not p.name.startswith(".")]
    assert not [p for p in (ck / "query" / "offsets").glob("*") if not p.name.startswith(".")]
    assert not list((ck / "stage").glob("batch-*.json")) and not list((ck / "stage").glob("state-*"))
    assert WRONG not in done.stdout + done.stderr and files_holding(ck, WRONG) == []


def test_bin_kafka_local_starts_a_scram_listener_and_a_restart_replaces_the_password(tmp_path, jvm_process):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    from tools.local.kafka_scram import scram_client_config

    port, home = jvm_process.free_port(), tmp_path / "kafka"
    sasl = jvm_process.free_port()
    first, second = f"first-{uuid.uuid4().hex}", f"second-{uuid.uuid4().hex}"

    def kafka_local(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(ROOT / "bin" / "kafka-local"), *args, "--dir", str(home)],
            cwd=ROOT,
            env=jvm_process.env,
            capture_output=True,
            text=True,
            check=False,
        )

    def logs_in(password: str) -> bool:
        config = scram_client_config(f"127.0.0.1:{sasl}", "alice", password) | {"log_level": 0}
        try:
            return bool(AdminClient(config).list_topics(timeout=5).brokers)
        except KafkaException:
            return False

    outputs = []
    try:
        for password in (first, second):  # a fresh directory, then the same directory again
            start = ["start", "--port", str(port), "--sasl-port", str(sasl), "--timeout", "600"]
            started = kafka_local(*start, "--sasl-scram", f"alice:{password}", "--sasl-scram", "bob:b0b-pw")
            assert started.returncode == 0, started.stderr
            listeners = (
                f"127.0.0.1:{port} and SASL_PLAINTEXT 127.0.0.1:{sasl} (SCRAM-SHA-256/SCRAM-SHA-512, users: "
                "alice, bob)"
            )
            assert f"listening on {listeners} (dir" in started.stdout
            status = kafka_local("status")
            assert status.returncode == 0 and f", {listeners} (dir {home})" in status.stdout
            assert logs_in(password)
            assert not logs_in(first if password == second else second)  # a restart replaced it
            outputs += [started.stdout, started.stderr, status.stdout, status.stderr]
            stopped = kafka_local("stop", "--timeout", "600")
            assert stopped.returncode == 0, stopped.stderr
    finally:
        kafka_local("stop", "--timeout", "600")
    for text in outputs:
        assert first not in text and second not in text and "b0b-pw" not in text
    assert files_holding(home, first) == [] and files_holding(home, second) == []  # not even salted
