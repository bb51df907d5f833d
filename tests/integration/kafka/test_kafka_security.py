"""Kafka as clusters run it, on a real local broker with a SASL_PLAINTEXT listener and SCRAM users.

The job (``python -m jobs.stream`` in its own JVM) reads a 4-partition topic that the feed (``python -m
tools.feed``) produced through the SCRAM listener, both given their credentials as options; the tables hold
every input record of each key and window. Wrong credentials fail the job quickly with one error line and
nothing committed. No secret is in the job's logs, its checkpoint, its tables, its metrics or ``--help``.
``bin/kafka-local start --sasl-scram`` is checked as a user runs it: it starts the module's broker, and a
restart in the same directory replaces a user's password. (Option checks and redaction without a
broker: tests/unit/jobs/stream/test_kafka_options.py.)
"""

from __future__ import annotations

import os
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
from types import SimpleNamespace

import pytest

from tools.feed.records import records_from_file

pytestmark = pytest.mark.slow  # two runs of the job's JVM and two broker starts

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
#: alice's password at the module broker's first start and after the restart test's restart; bob's.
ALICE_FIRST, ALICE_SECOND = f"first-{uuid.uuid4().hex}", f"second-{uuid.uuid4().hex}"
BOB = "b0b-pw"
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


def kafka_local(home: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """``bin/kafka-local ARGS --dir HOME``, as a user runs it."""
    return subprocess.run(
        [str(ROOT / "bin" / "kafka-local"), *args, "--dir", str(home)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def kafka_local_start(broker: SimpleNamespace, alice: str) -> subprocess.CompletedProcess:
    """Start the module's broker with ``bin/kafka-local start --sasl-scram``: USER, alice (password
    ``alice``) and bob; up to 600 s (a busy machine: how long a start takes is no test's subject)."""
    users = [f"{USER}:{PASSWORD}", f"alice:{alice}", f"bob:{BOB}"]
    start = ["start", "--port", str(broker.port), "--sasl-port", str(broker.sasl_port), "--timeout", "600"]
    return kafka_local(broker.home, broker.env, *start, *[arg for u in users for arg in ("--sasl-scram", u)])


@pytest.fixture(scope="module")
def scram_kafka(tmp_path_factory):
    """A broker of this module's own, started as a user starts one: ``bin/kafka-local start --sasl-scram``
    in a fresh directory, its plaintext listener and SASL_PLAINTEXT with the SCRAM users USER (the job's),
    alice (password ALICE_FIRST; the restart test restarts the broker in the same directory with her
    ALICE_SECOND, and USER's password unchanged) and bob.

    ``started`` is the first start's output. At the end the broker is stopped (``bin/kafka-local stop``,
    which must succeed) and its directory must hold no password (not even salted)."""
    from tools.local.processes import free_port

    port = free_port()
    sasl_port = free_port()
    while sasl_port == port:
        sasl_port = free_port()
    broker = SimpleNamespace(
        home=tmp_path_factory.mktemp("kafka-scram") / "kafka",
        env=os.environ | {"PYTHONPATH": str(ROOT)},
        port=port,
        sasl_port=sasl_port,
        sasl_bootstrap_servers=f"127.0.0.1:{sasl_port}",
    )
    broker.started = kafka_local_start(broker, ALICE_FIRST)
    try:
        assert broker.started.returncode == 0, broker.started.stderr
        yield broker
    finally:
        stopped = kafka_local(broker.home, broker.env, "stop", "--timeout", "600")
    assert stopped.returncode == 0, stopped.stderr
    assert [files_holding(broker.home, secret) for secret in (PASSWORD, ALICE_FIRST, ALICE_SECOND, BOB)] == [
        [],
        [],
        [],
        [],
    ]


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


def test_bin_kafka_local_starts_a_scram_listener_and_a_restart_replaces_the_password(
    scram_kafka, jvm_process
):
    # The module's broker: bin/kafka-local start --sasl-scram in a fresh directory (scram_kafka), then here
    # stopped and started again in the same directory with alice's second password.
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    from tools.local.kafka_scram import scram_client_config

    home, port, sasl = scram_kafka.home, scram_kafka.port, scram_kafka.sasl_port

    def logs_in(user: str, password: str) -> bool:
        config = scram_client_config(f"127.0.0.1:{sasl}", user, password) | {"log_level": 0}
        try:
            return bool(AdminClient(config).list_topics(timeout=5).brokers)
        except KafkaException:
            return False

    listeners = (
        f"127.0.0.1:{port} and SASL_PLAINTEXT 127.0.0.1:{sasl} (SCRAM-SHA-256/SCRAM-SHA-512, users: "
        f"alice, {USER}, bob)"
    )
    outputs = []
    for password in (ALICE_FIRST, ALICE_SECOND):  # the fixture's start, then the restart
        if password == ALICE_FIRST:
            started = scram_kafka.started
        else:
            stopped = kafka_local(home, scram_kafka.env, "stop", "--timeout", "600")
            assert stopped.returncode == 0, stopped.stderr
            outputs += [stopped.stdout, stopped.stderr]
            started = kafka_local_start(scram_kafka, password)
            assert started.returncode == 0, started.stderr
        assert f"listening on {listeners} (dir" in started.stdout
        status = kafka_local(home, scram_kafka.env, "status")
        assert status.returncode == 0 and f", {listeners} (dir {home})" in status.stdout
        assert logs_in("alice", password)
        assert not logs_in("alice", ALICE_FIRST if password == ALICE_SECOND else ALICE_SECOND)  # replaced
        assert logs_in(USER, PASSWORD)  # the other users' passwords as given again
        outputs += [started.stdout, started.stderr, status.stdout, status.stderr]
    for text in outputs:
        assert not [secret for secret in (PASSWORD, ALICE_FIRST, ALICE_SECOND, BOB) if secret in text]
    # not even salted (the directory again once the broker stopped: scram_kafka)
    assert [files_holding(home, secret) for secret in (ALICE_FIRST, ALICE_SECOND, BOB)] == [[], [], []]
