"""``--kafka-option`` (the job), ``--producer-option`` (the feed) and ``--sasl-scram`` (bin/kafka-local)
without a broker or a JVM: the allowed set, the refusals (one line, exit 2, before anything is written), the
translation to confluent-kafka's settings, and redaction: no secret in a repr, a log line, an error or
``--help`` (the same through a real SCRAM broker and the job: tests/integration/kafka/test_kafka_security.py).
"""

from __future__ import annotations

import pytest

from jobs.stream.cli import build_parser, kafka_failure, main, options_from_args
from jobs.stream.options import (
    KAFKA_REFUSED_OPTIONS,
    KAFKA_SOURCE_OPTIONS,
    REDACTED,
    JobOptions,
    KafkaOptions,
    check_kafka_source_options,
    is_secret_key,
    librdkafka_config,
    parse_jaas,
    parse_key_values,
    redact_options,
    redact_text,
    secret_values,
)
from watermark.cli.log import CliError
from watermark.config import PipelineConfig

PASSWORD = "s3cr3t-Pa55word-Zq"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
JAAS = f'{SCRAM_MODULE} required username="alice" password="{PASSWORD}";'
SECURE = {
    "kafka.security.protocol": "SASL_PLAINTEXT",
    "kafka.sasl.mechanism": "SCRAM-SHA-512",
    "kafka.sasl.jaas.config": JAAS,
}


def job_argv(tmp_path, *options: str) -> list[str]:
    argv = ["--format", "kafka", "--kafka-bootstrap-servers", "127.0.0.1:9", "--topic", "t"]
    argv += ["--output", str(tmp_path / "out"), "--checkpoint", str(tmp_path / "ck"), "--metrics-port", "0"]
    for option in options:
        argv += ["--kafka-option", option]
    return argv


# --------------------------------------------------------------------------------------------------
# The allowed set


def test_kafka_client_settings_and_the_named_source_options_pass_in_their_spelling():
    given = {
        **SECURE,
        "kafka.ssl.truststore.location": "/etc/kafka/truststore.jks",
        "kafka.ssl.endpoint.identification.algorithm": "",  # empty: a value Kafka gives a meaning to
        "kafka.group.id": "awm-job",
        "KAFKA.request.timeout.ms": "20000",  # Spark reads the prefix whatever its case
        "failondataloss": "FALSE",
        "startingTimestamp": "1700000000000",
        "STARTINGOFFSETSBYTIMESTAMPSTRATEGY": "Latest",
        "groupIdPrefix": "awm",
        "kafkaConsumer.pollTimeoutMs": "5000",
        "fetchOffset.numRetries": "0",
        "fetchOffset.retryIntervalMs": "250",
    }
    checked = dict(check_kafka_source_options(given, "t"))
    assert checked == {
        **SECURE,
        "kafka.ssl.truststore.location": "/etc/kafka/truststore.jks",
        "kafka.ssl.endpoint.identification.algorithm": "",
        "kafka.group.id": "awm-job",
        "kafka.request.timeout.ms": "20000",
        "failOnDataLoss": "false",
        "startingTimestamp": "1700000000000",
        "startingOffsetsByTimestampStrategy": "latest",
        "groupIdPrefix": "awm",
        "kafkaConsumer.pollTimeoutMs": "5000",
        "fetchOffset.numRetries": "0",
        "fetchOffset.retryIntervalMs": "250",
    }
    by_time = '{"t": {"0": 1700000000000, "3": 1700000000500}}'
    assert check_kafka_source_options({"startingOffsetsByTimestamp": by_time}, "t") == (
        ("startingOffsetsByTimestamp", by_time),
    )


def test_the_reader_gets_the_flags_then_the_options_and_fail_on_data_loss_stays_true_by_default():
    plain = KafkaOptions(bootstrap_servers="b:9092", topic="t", max_offsets_per_trigger=100)
    assert plain.reader_options() == {
        "kafka.bootstrap.servers": "b:9092",
        "subscribe": "t",
        "startingOffsets": "earliest",
        "failOnDataLoss": "true",
        "maxOffsetsPerTrigger": "100",
    }
    relaxed = KafkaOptions(bootstrap_servers="b:9092", topic="t", options=(("failOnDataLoss", "false"),))
    assert relaxed.reader_options()["failOnDataLoss"] == "false"
    secure = KafkaOptions(bootstrap_servers="b:9093", topic="t", options=tuple(SECURE.items()))
    assert {k: secure.reader_options()[k] for k in SECURE} == SECURE


@pytest.mark.parametrize("key", sorted(KAFKA_REFUSED_OPTIONS))
def test_every_refused_option_is_refused_with_its_reason_in_any_case(key):
    for spelling in (key, key.upper()):
        with pytest.raises(ValueError) as error:
            check_kafka_source_options({spelling: "1"}, "t")
        assert str(error.value) == f"--kafka-option {spelling} is refused: {KAFKA_REFUSED_OPTIONS[key]}"


def test_the_options_that_would_break_one_spark_partition_per_kafka_partition_are_refused():
    for key in ("minPartitions", "maxRecordsPerPartition"):
        with pytest.raises(ValueError, match="exactly one Spark partition per Kafka partition"):
            check_kafka_source_options({key: "8"}, "t")
    for key, flag in [
        ("subscribePattern", "--topic"),
        ("assign", "--topic"),
        ("kafka.bootstrap.servers", "--kafka-bootstrap-servers"),
        ("startingOffsets", "--starting-offsets"),
        ("maxOffsetsPerTrigger", "--max-offsets-per-trigger"),
    ]:
        with pytest.raises(ValueError, match=flag):
            check_kafka_source_options({key: "x"}, "t")


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        (
            {"includeHeaders": "true"},
            "includeHeaders is not supported: give kafka.<client setting> or one of",
        ),
        ({"minOffsetsPerTrigger": "10"}, "minOffsetsPerTrigger is not supported"),
        ({"failOnDatLoss": "false"}, "failOnDatLoss is not supported"),  # a typo Spark would ignore
        ({"kafka.": "x"}, "needs a Kafka client setting after the prefix"),
        ({"failOnDataLoss": "maybe"}, "failOnDataLoss must be true or false"),
        ({"startingTimestamp": "yesterday"}, "startingTimestamp must be an integer >= 0"),
        ({"kafkaConsumer.pollTimeoutMs": "0"}, "pollTimeoutMs must be an integer >= 1"),
        ({"startingOffsetsByTimestampStrategy": "earliest"}, "must be error or latest"),
        ({"startingOffsetsByTimestamp": "{not json"}, 'takes JSON {"TOPIC": {"PARTITION": EPOCH_MS}}'),
        ({"startingOffsetsByTimestamp": '{"other": {"0": 1}}'}, "must name the topic --topic reads"),
        ({"groupIdPrefix": " "}, "groupIdPrefix needs a prefix"),
        ({"kafka.security.protocol": "SASL"}, "must be one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
        ({"kafka.sasl.mechanism": ""}, "kafka.sasl.mechanism needs a mechanism"),
        ({"kafka.sasl.jaas.config": JAAS.rstrip(";")}, "must end with ';'"),
        ({"kafka.sasl.jaas.config": f'password="{PASSWORD}";'}, "sasl.jaas.config must be '<LoginModule"),
    ],
)
def test_an_option_or_value_spark_would_refuse_later_is_refused_now_without_its_secret(options, needle):
    with pytest.raises(ValueError) as error:
        check_kafka_source_options(options, "t")
    assert needle in str(error.value)
    assert PASSWORD not in str(error.value)


def test_key_value_pairs_split_at_the_first_equals_and_a_key_given_twice_is_refused():
    pairs = parse_key_values([f"kafka.sasl.jaas.config={JAAS}", "kafka.client.id=a=b"], "--kafka-option")
    assert pairs == [("kafka.sasl.jaas.config", JAAS), ("kafka.client.id", "a=b")]
    for entries, needle in [
        (["kafka.group.id"], "--kafka-option takes KEY=VALUE, got kafka.group.id (no =)"),
        ([f"=x{PASSWORD}"], "--kafka-option takes KEY=VALUE, got ..."),
        (["kafka.group.id=a", "KAFKA.GROUP.ID=b"], "--kafka-option KAFKA.GROUP.ID is given twice"),
    ]:
        with pytest.raises(ValueError) as error:
            parse_key_values(entries, "--kafka-option")
        assert str(error.value) == needle


# --------------------------------------------------------------------------------------------------
# The command line: one line, exit 2, nothing written, no JVM


def test_a_refused_option_on_the_command_line_is_one_error_line_and_exit_2_before_anything(tmp_path, capsys):
    code = main(job_argv(tmp_path, *(f"{k}={v}" for k, v in SECURE.items()), "minPartitions=8"))
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    assert captured.err.startswith(
        "error: --kafka-option minPartitions is refused: it splits a Kafka partition"
    )
    assert captured.err.count("\n") == 1
    assert not (tmp_path / "ck").exists() and not (tmp_path / "out").exists()  # nothing written, no commit
    assert PASSWORD not in captured.err

    # The same for an option that is not Kafka's at all, and for --kafka-option without --format kafka.
    assert main(job_argv(tmp_path, "kafka.value.deserializer=x")) == 2
    assert "Spark reads values as bytes" in capsys.readouterr().err
    argv = [
        "--input",
        str(tmp_path / "in"),
        "--output",
        str(tmp_path / "o2"),
        "--checkpoint",
        str(tmp_path / "c2"),
    ]
    assert main([*argv, "--metrics-port", "0", "--kafka-option", "kafka.group.id=g"]) == 2
    assert "--kafka-option are for --format kafka" in capsys.readouterr().err


def test_the_options_reach_the_job_options_and_their_repr_shows_no_secret(tmp_path):
    args = build_parser().parse_args(job_argv(tmp_path, *(f"{k}={v}" for k, v in SECURE.items())))
    options = options_from_args(args)
    assert dict(options.kafka.options) == SECURE
    for text in (repr(options.kafka), repr(options), str(options), options.kafka.describe()):
        assert PASSWORD not in text and "alice" not in text
    assert "kafka.sasl.jaas.config=***" in options.kafka.describe()
    assert "('kafka.sasl.jaas.config', '***')" in repr(options.kafka)
    assert "kafka.security.protocol=SASL_PLAINTEXT" in options.kafka.describe()


def test_help_names_the_option_and_its_rules(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--kafka-option KEY=VALUE" in text
    assert "minPartitions, maxRecordsPerPartition" in text and "secret values are never logged" in text


# --------------------------------------------------------------------------------------------------
# Redaction


def test_secret_keys_and_values_are_found_and_replaced():
    secret_keys = [
        "kafka.sasl.jaas.config",
        "kafka.ssl.key.password",
        "kafka.ssl.keystore.key",
        "kafka.ssl.truststore.password",
        "sasl.password",
        "sasl.oauthbearer.client.secret",
        "kafka.sasl.oauthbearer.token.endpoint.url",
    ]
    assert all(is_secret_key(k) for k in secret_keys)
    assert not any(
        is_secret_key(k) for k in ("kafka.security.protocol", "kafka.sasl.mechanism", "sasl.username")
    )
    options = {**SECURE, "kafka.ssl.key.password": "kp-123", "kafka.group.id": "g"}
    assert redact_options(options) == {
        "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": REDACTED,
        "kafka.ssl.key.password": REDACTED,
        "kafka.group.id": "g",
    }
    secrets = secret_values(options)
    assert secrets == [JAAS, PASSWORD, "kp-123"]  # the JAAS line, and its password alone
    error = f'login failed: password="{PASSWORD}" (kp-123)'
    assert redact_text(error, secrets) == 'login failed: password="***" (***)'


def test_jaas_lines_parse_with_quotes_and_escapes():
    assert parse_jaas(JAAS) == (
        "org.apache.kafka.common.security.scram.ScramLoginModule",
        {"username": "alice", "password": PASSWORD},
    )
    plain = (
        'org.apache.kafka.common.security.plain.PlainLoginModule required username=bob password="a\\"b c";'
    )
    assert parse_jaas(plain) == (
        "org.apache.kafka.common.security.plain.PlainLoginModule",
        {"username": "bob", "password": 'a"b c'},
    )


def test_a_refused_login_becomes_one_line_and_an_error_quoting_a_secret_is_redacted():
    kafka = KafkaOptions(bootstrap_servers="b:9093", topic="t", options=tuple(SECURE.items()))
    # The text of the StreamingQueryException Spark 4.2 raises when the broker refuses the SCRAM login.
    text = (
        "[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: "
        "org.apache.kafka.common.errors.SaslAuthenticationException: Authentication failed during "
        "authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512 SQLSTATE: XXKST\n"
        "=== Streaming Query ===\n..."
    )
    with pytest.raises(CliError) as refused:
        kafka_failure(RuntimeError(text), kafka)
    assert refused.value.code == 1
    assert str(refused.value) == (
        "Kafka at b:9093 refused the job (SaslAuthenticationException: Authentication failed during "
        "authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512); check --kafka-option "
        "kafka.security.protocol, kafka.sasl.mechanism and kafka.sasl.jaas.config"
    )
    with pytest.raises(CliError) as quoted:
        kafka_failure(RuntimeError(f"bad config {JAAS}\nmore"), kafka)
    assert str(quoted.value) == "RuntimeError: bad config ***" and PASSWORD not in str(quoted.value)
    assert kafka_failure(RuntimeError("disk full"), kafka) is None  # left to the caller as it is


def test_job_options_built_in_code_are_checked_too():
    config = PipelineConfig.from_dict({"version": 1, "strategy": "periodic", "window_ms": 1000})
    with pytest.raises(ValueError, match="minPartitions is refused"):
        JobOptions(
            input="",
            output="o",
            checkpoint="c",
            config=config,
            format="kafka",
            kafka=KafkaOptions(bootstrap_servers="b:1", topic="t", options=(("minPartitions", "4"),)),
        )


def test_the_keyed_mode_refuses_the_stage_in_the_executors_which_judge_by_kafka_partition():
    config = PipelineConfig.from_dict(
        {"version": 1, "strategy": "periodic", "window_ms": 1000, "partition_mode": "keyed"}
    )
    kafka = KafkaOptions(bootstrap_servers="b:1", topic="t")
    with pytest.raises(ValueError, match="cannot run partition mode keyed"):
        JobOptions(input="", output="o", checkpoint="c", config=config, format="kafka", kafka=kafka,
                   stage_in="executors")  # fmt: skip
    JobOptions(
        input="", output="o", checkpoint="c", config=config, format="kafka", kafka=kafka
    )  # auto: driver


# --------------------------------------------------------------------------------------------------
# confluent-kafka's spelling (the feed, bin/kafka-local)


def test_the_jobs_java_spelling_becomes_librdkafkas():
    assert librdkafka_config({**SECURE, "kafka.client.id": "feed"}) == {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": PASSWORD,
        "client.id": "feed",
    }
    native = {"security.protocol": "SASL_SSL", "sasl.username": "u", "sasl.password": "p", "linger.ms": 5}
    assert librdkafka_config(native) == native
    with pytest.raises(
        ValueError, match="ScramLoginModule or PlainLoginModule line with username and password"
    ):
        librdkafka_config({"sasl.jaas.config": "com.example.Oauth required token=x;"})


def test_the_feeds_producer_options_are_checked_before_anything_and_never_echo_a_secret(tmp_path, capsys):
    from tools.feed.cli import main as feed_main

    base = ["--synthetic", "10", "--kafka-bootstrap-servers", "127.0.0.1:9", "--topic", "t", "--quiet"]
    for options, needle in [
        (
            [f"sasl.password={PASSWORD}", f"no.such.setting={PASSWORD}"],
            'No such configuration property: "no.such',
        ),
        (["linger.ms"], "--producer-option takes KEY=VALUE, got linger.ms (no =)"),
        ([f"sasl.jaas.config=x required password={PASSWORD};"], "ScramLoginModule or PlainLoginModule"),
    ]:
        argv = [*base, *[a for o in options for a in ("--producer-option", o)]]
        assert feed_main(argv) == 2
        captured = capsys.readouterr()
        assert captured.err.startswith("error: ") and captured.err.count("\n") == 1, captured.err
        assert needle in captured.err and PASSWORD not in captured.err + captured.out
    with pytest.raises(SystemExit) as refused:  # the parser's own error: the same one line, exit 2
        feed_main(["--synthetic", "5", "--out", str(tmp_path), "--producer-option", "acks=all"])
    assert refused.value.code == 2
    assert "--producer-option applies only to Kafka output" in capsys.readouterr().err


def test_bin_kafka_local_takes_scram_users_and_never_shows_a_password(tmp_path, capsys):
    from tools.local.kafka import main as kafka_main
    from tools.local.kafka_broker import LocalKafka
    from tools.local.kafka_scram import check_scram_users

    broker = LocalKafka(port=19092, dir=tmp_path, scram_users={"alice": PASSWORD}, sasl_port=19093)
    assert broker.scram_users == ["alice"] and PASSWORD not in repr(broker)
    assert broker.sasl_bootstrap_servers == "127.0.0.1:19093"
    config = broker.scram_client_config("alice")
    assert config["sasl.password"] == PASSWORD and config["security.protocol"] == "SASL_PLAINTEXT"
    with pytest.raises(ValueError, match="no SCRAM user 'bob'"):
        broker.scram_client_config("bob")
    with pytest.raises(ValueError, match="double quote"):
        check_scram_users({"alice": 'a"b'})

    home = ["--dir", str(tmp_path / "k")]
    for argv, needle in [
        (["start", "--sasl-scram", "alice"], "--sasl-scram takes USER:PASSWORD"),
        (["start", "--sasl-scram", f"al ice:{PASSWORD}"], "a SCRAM user name is 1 to 128 of the characters"),
        (["start", "--sasl-scram", f"a:{PASSWORD}", "--sasl-scram", "a:x"], "user 'a' is given twice"),
        (["start", "--sasl-port", "19093"], "--sasl-port needs at least one --sasl-scram"),
        (["status", "--sasl-scram", f"a:{PASSWORD}"], "--sasl-scram and --sasl-port are for start"),
        (
            ["start", "--port", "65535", "--sasl-scram", f"a:{PASSWORD}"],
            "--port + 1 (the default --sasl-port)",
        ),
    ]:
        assert kafka_main([*argv, *home]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1 and needle in err, err
        assert PASSWORD not in err
    assert not (tmp_path / "k" / "data").exists()  # refused before anything


def test_the_named_options_and_the_refusals_do_not_overlap():
    assert not set(KAFKA_SOURCE_OPTIONS) & set(KAFKA_REFUSED_OPTIONS)
    assert all(key == key.lower() for key in [*KAFKA_SOURCE_OPTIONS, *KAFKA_REFUSED_OPTIONS])
