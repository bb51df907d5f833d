"""``bin/kafka-local`` and the Kafka output of ``tools.feed``, on a real local KRaft broker (no mocks)."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from tests.samples import IOT, IOT_FLAGS
from tools.feed.cli import main
from tools.feed.kafka import KafkaFeedError, feed_kafka, kafka_partition_map
from tools.feed.landing import feed
from tools.feed.records import records_from_synthetic
from tools.local.kafka_broker import LocalKafka

ROOT = Path(__file__).resolve().parents[3]


#: bin/kafka-local's wait for a start or stop: long enough for any machine (its default, 30 s, is the
#: command line's; a busy machine once took longer, and how long a start takes is no test's subject).
WAIT = ["--timeout", "600"]


def kafka_local(jvm, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``bin/kafka-local`` (the real script: it sources bin/bootstrap.sh) in a subprocess."""
    return subprocess.run(
        [str(ROOT / "bin" / "kafka-local"), *args],
        cwd=ROOT,
        env={**jvm.env, **(env or {})},
        capture_output=True,
        text=True,
        check=False,
    )


def running(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie left for a non-reaping init does not count)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def consume_all(bootstrap_servers: str, topic: str, partitions: int) -> dict[int, list]:
    """Every record of the topic, per partition in offset order (read from the beginning up to the end)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": f"test-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    records: dict[int, list] = {p: [] for p in range(partitions)}
    at_end: set[int] = set()
    try:
        while len(at_end) < partitions:  # (a broker that never reports the end: the test's timeout)
            for message in consumer.consume(num_messages=5000, timeout=1.0):
                error = message.error()
                if error is not None:
                    assert error.code() == KafkaError._PARTITION_EOF, error.str()
                    at_end.add(message.partition())
                    continue
                at_end.discard(message.partition())
                records[message.partition()].append(message)
    finally:
        consumer.close()
    return records


def landing_lines(records: pa.Table, out: Path, **options) -> list[str]:
    """The JSON lines the landing-file feed writes for ``records``, in arrival order (newlines stripped)."""
    feed(records, out, rows_per_file=100_000, **options)
    return [line for path in sorted(out.glob("feed-*.json")) for line in path.read_text().splitlines()]


def check_topic(kafka_broker, topic: str, partitions: int, lines: list[str], route: str) -> dict[int, list]:
    """Read the topic back and check it against the landing lines of the same input; returns its records.

    Every record is present exactly once; its value is the landing line, its timestamp (CreateTime) the
    arrival time, its key the ``route`` field, its partition the feed's stable mapping of that field; and each
    partition holds its records in arrival order, i.e. in the landing files' order.
    """
    from confluent_kafka import TIMESTAMP_CREATE_TIME

    by_partition = consume_all(kafka_broker.bootstrap_servers, topic, partitions)
    rows = [json.loads(line) for line in lines]
    mapping = kafka_partition_map([row[route] for row in rows], partitions)
    expected: dict[int, list[tuple[str, str, int]]] = {p: [] for p in range(partitions)}
    for line, row in zip(lines, rows, strict=True):
        expected[mapping[row[route]]].append((line, row[route], row["arrival_time_ms"]))
    for p, messages in by_partition.items():
        got = [(m.value().decode(), m.key().decode(), m.timestamp()[1]) for m in messages]
        assert got == expected[p], f"partition {p}"
        assert {m.timestamp()[0] for m in messages} <= {TIMESTAMP_CREATE_TIME}
        assert [m.offset() for m in messages] == list(range(len(messages)))
    assert sum(len(m) for m in by_partition.values()) == len(lines)
    values = [m.value() for messages in by_partition.values() for m in messages]
    assert len(set(values)) == len(values) == len(lines)  # each record once
    return by_partition


# --------------------------------------------------------------------------------------------------
# bin/kafka-local


@pytest.mark.slow
def test_cli_start_status_stop_on_a_free_port(tmp_path, jvm_process):
    from confluent_kafka.admin import AdminClient

    port, home = jvm_process.free_port(), tmp_path / "kafka"
    env = {"AWM_KAFKA_PORT": str(port)}  # the variable sets the port; --dir the directory
    started = kafka_local(jvm_process, "start", "--dir", str(home), *WAIT, env=env)
    try:
        assert started.returncode == 0, started.stderr
        match = re.fullmatch(
            rf"kafka: started in ([0-9.]+) s, pid (\d+), listening on 127\.0\.0\.1:{port} \(dir .*\)\n",
            started.stdout,
        )
        assert match, started.stdout
        seconds, pid = float(match.group(1)), int(match.group(2))
        print(f"\nbroker start: {seconds:.1f} s")
        assert (home / "data" / "meta.properties").exists()
        assert f"listeners=PLAINTEXT://127.0.0.1:{port}," in (home / "server.properties").read_text()

        status = kafka_local(jvm_process, "status", "--dir", str(home))
        assert status.returncode == 0
        assert status.stdout.startswith(f"kafka: running, pid {pid}, 127.0.0.1:{port} ")
        metadata = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"}).list_topics(timeout=600)
        assert [b.port for b in metadata.brokers.values()] == [port]

        again = kafka_local(jvm_process, "start", "--dir", str(home), *WAIT, env=env)
        assert again.returncode == 1
        assert f"a broker already runs in {home} (pid {pid}" in again.stderr
    finally:
        stopped = kafka_local(jvm_process, "stop", "--dir", str(home), *WAIT)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert re.fullmatch(rf"kafka: stopped pid {pid} in [0-9.]+ s\n", stopped.stdout), stopped.stdout
    assert not running(pid)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()

    status = kafka_local(jvm_process, "status", "--dir", str(home))
    assert status.returncode == 3
    assert status.stdout == f"kafka: not running (dir {home})\n"
    again = kafka_local(jvm_process, "stop", "--dir", str(home), *WAIT)
    assert (again.returncode, again.stdout) == (0, f"kafka: not running (dir {home})\n")
    log = (home / "logs" / "server.log").read_text().splitlines()
    assert any("Kafka Server started" in line for line in log)
    assert len(log) < 40, "the broker's log should hold warnings only"


@pytest.mark.slow
def test_a_start_timeout_stops_the_broker_and_shows_its_log(tmp_path, jvm_process):
    from tools.local.kafka_topics import KafkaLocalError

    kafka = LocalKafka(
        port=jvm_process.free_port(), dir=tmp_path, start_timeout=0.5
    )  # a JVM broker never answers this soon
    with pytest.raises(KafkaLocalError, match=r"^the broker did not answer within 0.5 s; ") as error:
        kafka.start()
    assert str(kafka.log_file) in str(error.value)
    assert kafka.status()["running"] is False
    assert not (tmp_path / "broker.json").exists()
    assert not any(str(tmp_path) in line for line in java_command_lines())


def test_a_hanging_jvm_is_shown_by_where_its_main_thread_is(tmp_path, jvm_process):
    from tools.local.kafka_broker import _main_thread

    source = tmp_path / "Hang.java"
    source.write_text(  # sleeps until killed, however long compiling it takes
        "class Hang { public static void main(String[] a) throws Exception "
        "{ Thread.sleep(Long.MAX_VALUE); } }\n"
    )
    jvm = subprocess.Popen(
        ["java", str(source)], env=jvm_process.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        shown = ""
        while "Thread.sleep" not in shown:  # until it compiled and sleeps
            assert jvm.poll() is None, f"java exited with status {jvm.returncode}"
            time.sleep(0.5)
            shown = _main_thread(jvm.pid)
        assert shown.startswith('\n--- its main thread (jstack) ---\n"main" ')
        assert "at Hang.main" in shown
    finally:
        jvm.kill()
        jvm.wait()
    assert _main_thread(jvm.pid) == ""  # a process that is gone: nothing to show, no error


def java_command_lines() -> list[str]:
    """The command lines of the running java processes, read from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and running(int(entry.name)):
            try:
                args = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            except OSError:
                continue
            if args[0].endswith("java"):
                found.append(" ".join(args))
    return found


# --------------------------------------------------------------------------------------------------
# tools.feed into Kafka


@pytest.mark.slow
def test_synthetic_feed_into_a_four_partition_topic_reads_back_exactly(kafka_broker, tmp_path, capsys):
    topic = f"synthetic-{uuid.uuid4().hex[:8]}"
    argv = ["--synthetic", "20000", "--partitions", "4", "--seed", "3"]
    code = main([*argv, "--kafka-bootstrap-servers", kafka_broker.bootstrap_servers, "--topic", topic])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.out)
    assert (summary["topic"], summary["partitions"], summary["created"], summary["rows"]) == (
        topic,
        4,
        True,
        20000,
    )
    assert sum(summary["rows_per_partition"]) == 20000 and min(summary["rows_per_partition"]) > 0
    assert captured.err.splitlines() == [
        "records 10,000/20,000: arrival " + captured.err.splitlines()[0].rsplit(" ", 1)[1],
        "records 20,000/20,000: arrival " + captured.err.splitlines()[1].rsplit(" ", 1)[1],
    ]

    lines = landing_lines(records_from_synthetic(20000, partitions=4, seed=3), tmp_path / "landing")
    by_partition = check_topic(kafka_broker, topic, 4, lines, route="partition")
    for p, messages in by_partition.items():  # synthetic source partition i is Kafka partition i
        assert {json.loads(m.value())["partition"] for m in messages} == {str(p)}
        assert [m.timestamp()[1] for m in messages] == sorted(m.timestamp()[1] for m in messages)
    assert summary["rows_per_partition"] == [len(by_partition[p]) for p in range(4)]

    # A second run into the same topic with another partition count is refused; without one it appends.
    code = main([*argv, "--kafka-bootstrap-servers", kafka_broker.bootstrap_servers, "--topic", topic])
    assert code == 0
    capsys.readouterr()
    argv = [
        "--synthetic",
        "10",
        "--partitions",
        "3",
        "--kafka-bootstrap-servers",
        kafka_broker.bootstrap_servers,
    ]
    assert main([*argv, "--topic", topic, "--quiet"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"error: topic {topic!r} exists on {kafka_broker.bootstrap_servers} with 4 partition(s), not 3; "
        "give --partitions 4 or use another topic\n"
    )


@pytest.mark.slow
def test_recorded_feed_matches_the_landing_files_and_paces(kafka_broker, tmp_path, capsys):
    from tools.feed.records import records_from_file

    # Ties at one arrival time keep file order in both outputs; 8 devices map two to a partition.
    topic = f"iot-{uuid.uuid4().hex[:8]}"
    servers = kafka_broker.bootstrap_servers
    code = main(
        [str(IOT), *IOT_FLAGS, "--kafka-bootstrap-servers", servers, "--topic", topic, "--partitions", "4"]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert json.loads(captured.out)["rows"] == 9600
    records = records_from_file(
        IOT,
        delimiter=";",
        event_time="S.Client.Detection.Time",
        arrival_time="S.Message.received.time.ms",
        partition="S.Device.ID",
    )
    lines = landing_lines(records, tmp_path / "landing")
    by_partition = check_topic(kafka_broker, topic, 4, lines, route="partition")
    devices = {p: sorted({json.loads(m.value())["partition"] for m in ms}) for p, ms in by_partition.items()}
    ranked = sorted({json.loads(line)["partition"] for line in lines}, key=lambda d: int(d.split("_")[1]))
    assert devices == {p: sorted(ranked[p::4]) for p in range(4)}

    # --no-arrival-time leaves the field out of the values, not out of the timestamps; --pace realtime waits.
    head = records.slice(0, 40)
    span_ms = head.column("arrival_time_ms")[-1].as_py() - head.column("arrival_time_ms")[0].as_py()
    assert span_ms > 300
    begin = time.monotonic()
    summary = feed_kafka(
        head, servers, topic + "-paced", partitions=2, pace="realtime", speed=4, arrival_time=False
    )
    assert time.monotonic() - begin >= span_ms / 1000 / 4
    assert summary["rows"] == 40 and summary["created"]
    lines = landing_lines(head, tmp_path / "landing-paced", arrival_time=False)
    by_partition = consume_all(servers, topic + "-paced", 2)
    mapping = kafka_partition_map([json.loads(line)["partition"] for line in lines], 2)
    arrivals = head.column("arrival_time_ms").to_pylist()
    for p in range(2):
        expected = [
            (ln, t)
            for ln, t in zip(lines, arrivals, strict=True)
            if mapping[json.loads(ln)["partition"]] == p
        ]
        assert [(m.value().decode(), m.timestamp()[1]) for m in by_partition[p]] == expected
    assert "arrival_time_ms" not in lines[0]


@pytest.mark.slow
def test_topic_checks_and_a_failed_delivery_is_an_error(kafka_broker):
    from confluent_kafka.admin import AdminClient

    servers = kafka_broker.bootstrap_servers
    records = records_from_synthetic(50, partitions=2)

    # A topic that stamps its own times would lose the recorded arrival times: refused.
    appended = f"append-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(appended, 2, config={"message.timestamp.type": "LogAppendTime"})
    with pytest.raises(ValueError, match="message.timestamp.type=LogAppendTime"):
        feed_kafka(records, servers, appended)

    # A feed-created topic replays with CreateTime.
    created = f"created-{uuid.uuid4().hex[:8]}"
    assert feed_kafka(records, servers, created)["partitions"] == 2  # one per source partition
    admin = AdminClient({"bootstrap.servers": servers})
    from confluent_kafka.admin import ConfigResource, ResourceType

    resource = ConfigResource(ResourceType.TOPIC, created)
    config = admin.describe_configs([resource])[resource].result(timeout=600)
    assert config["message.timestamp.type"].value == "CreateTime"

    # The broker rejects records over the topic's max.message.bytes: the feed fails, it does not drop them.
    small = f"small-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(small, 1, config={"max.message.bytes": "2000"})
    big = records.set_column(1, "key", pa.array([os.urandom(8000).hex()] * 50))
    with pytest.raises(
        KafkaFeedError, match=r"^50 record\(s\) not delivered to topic .*: Message size too large$"
    ):
        feed_kafka(big, servers, small, partitions=1, producer_config={"compression.type": "none"})

    for bad, needle in [
        ({"bootstrap_servers": "localhost"}, "HOST:PORT"),
        ({"topic": "no spaces"}, "topic name"),
        ({"partitions": 0}, "partitions must be an integer >= 1"),
        ({"pace": "slow"}, "unknown pace"),
    ]:
        arguments = {"bootstrap_servers": servers, "topic": "t", **bad}
        with pytest.raises(ValueError, match=needle):
            feed_kafka(records, **arguments)
    early = records.set_column(4, "arrival_time_ms", pa.array([0] * 50, pa.int64()))
    with pytest.raises(ValueError, match="timestamps must be >= 1"):
        feed_kafka(early, servers, created)
