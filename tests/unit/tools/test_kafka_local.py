"""``bin/kafka-local`` and the Kafka output of ``tools.feed`` without a broker: refusals, bad flags and an
unreachable broker are clear errors (a real KRaft broker: tests/integration/kafka/test_kafka_local.py)."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from tools.feed.cli import main
from tools.feed.kafka import KafkaFeedError, feed_kafka, kafka_partition_map
from tools.feed.records import records_from_synthetic
from tools.local.kafka_broker import LocalKafka
from tools.local.processes import free_port

ROOT = Path(__file__).resolve().parents[3]


def test_start_refuses_a_busy_port_with_a_clear_message(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "tools.local.kafka", "start", "--port", str(port), "--dir", str(tmp_path)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr == (
        f"error: port {port} on 127.0.0.1 is already in use (another broker? see bin/kafka-local status); "
        "choose another with --port or $AWM_KAFKA_PORT\n"
    )
    assert not (tmp_path / "broker.json").exists()
    assert not (tmp_path / "data").exists()  # refused before formatting anything


def test_missing_jars_and_bad_arguments_are_clear_errors(tmp_path, capsys):
    from tools.local.kafka import main as kafka_main
    from tools.local.kafka_topics import KafkaLocalError

    empty = tmp_path / "no-jars"
    empty.mkdir()
    with pytest.raises(KafkaLocalError, match=r"jars are missing .* run bin/bootstrap\.sh"):
        LocalKafka(port=free_port(), dir=tmp_path / "k", jars=empty).start()
    assert not (tmp_path / "k" / "broker.json").exists()

    for argv, needle in [
        (["start", "--port", "abc"], "--port must be an integer in 1..65535, got 'abc'"),
        (["start", "--port", "70000"], "--port must be an integer in 1..65535"),
        (["start", "--timeout", "0"], "--timeout must be > 0"),
    ]:
        assert kafka_main([*argv, "--dir", str(tmp_path / "k")]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and needle in err and err.count("\n") == 1
    with pytest.raises(SystemExit) as exit_info:
        kafka_main(["restart"])
    assert exit_info.value.code == 2
    with pytest.raises(ValueError, match="AWM_KAFKA_PORT must be an integer"):
        os.environ["AWM_KAFKA_PORT"] = "x"
        try:
            LocalKafka(dir=tmp_path)
        finally:
            del os.environ["AWM_KAFKA_PORT"]


def test_partition_map_is_natural_order_rank_modulo_n():
    assert kafka_partition_map([str(i) for i in (10, 3, 0, 1, 2, 11)], 4) == {
        "0": 0,
        "1": 1,
        "2": 2,
        "3": 3,
        "10": 0,
        "11": 1,
    }
    assert kafka_partition_map(pa.chunked_array([["b", "a", "b"]]), 1) == {"a": 0, "b": 0}
    with pytest.raises(ValueError, match="partitions must be an integer >= 1"):
        kafka_partition_map(["a"], 0)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--synthetic", "10"], "give --out DIR, or --kafka-bootstrap-servers HOST:PORT --topic NAME"),
        (["--synthetic", "10", "--topic", "t"], "needs both --kafka-bootstrap-servers"),
        (["--synthetic", "10", "--kafka-bootstrap-servers", "h:1"], "needs both"),
        (["--synthetic", "10", "--kafka-bootstrap-servers", "h:1", "--topic", "t", "--out", "d"], "not both"),
        (
            ["--synthetic", "10", "--kafka-bootstrap-servers", "h:1", "--topic", "t", "--format", "csv"],
            "--format",
        ),
        (
            ["--synthetic", "10", "--kafka-bootstrap-servers", "h:1", "--topic", "t", "--max-files", "2"],
            "--max",
        ),
        (["--synthetic", "10", "--kafka-bootstrap-servers", "h", "--topic", "t"], "HOST:PORT"),
        (
            ["--synthetic", "10", "--kafka-bootstrap-servers", "h:1", "--topic", "t", "--partitions", "0"],
            ">= 1",
        ),
    ],
)
def test_bad_kafka_flags_print_one_line_and_exit_2(capsys, argv, needle):
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    assert captured.err.startswith("error: ") and captured.err.count("\n") == 1
    assert needle in captured.err


def test_an_unreachable_broker_is_a_kafka_error_after_the_given_timeout(monkeypatch):
    from confluent_kafka.admin import AdminClient

    # Every wait on the broker is bounded by the caller's timeout (2 s), not the default (30 s): checked on
    # the waits the feed asks for, not on the wall clock, which a busy machine stretches.
    waits: list[float] = []
    list_topics = AdminClient.list_topics

    def recorded(self, *args, **kwargs):
        waits.append(kwargs["timeout"])
        return list_topics(self, *args, **kwargs)

    monkeypatch.setattr(AdminClient, "list_topics", recorded)
    port = free_port()  # nothing listens there
    with pytest.raises(KafkaFeedError, match=rf"cannot reach Kafka at 127\.0\.0\.1:{port}: "):
        feed_kafka(records_from_synthetic(5), f"127.0.0.1:{port}", "t", partitions=1, timeout=2)
    assert waits and all(0 < wait <= 2 for wait in waits), waits
