"""Producing the feed's records to a Kafka topic, in arrival order, with their arrival times as timestamps.

With ``--kafka-bootstrap-servers`` and ``--topic`` (:func:`feed_kafka`) each record is one Kafka record,
produced in arrival order (stably, as for files):

- its value is the record's JSON object, exactly the line a landing file holds (without the newline);
- its timestamp (``CreateTime``) is the recorded arrival time in epoch milliseconds (it must be >= 1), also
  with ``--no-arrival-time``, which only leaves the field out of the value;
- its key is its ``partition`` field (its ``key`` field when the stream has no partitions);
- its Kafka partition is assigned explicitly, by a stable mapping: the distinct values of that field are
  sorted in natural order (runs of digits compare as numbers: ``"dev_2"`` before ``"dev_10"``, ``"2"`` before
  ``"10"``), and the value of rank ``r`` (0-based) goes to Kafka partition ``r mod N``. With as many Kafka
  partitions as source partitions, each source partition has a Kafka partition (one watermark partition) of
  its own, and each Kafka partition's offsets follow arrival order.

The topic is created when missing, with ``N`` partitions (``--partitions N``; else as many as the stream has
source partitions), replication factor 1, ``message.timestamp.type=CreateTime`` and
``message.timestamp.after.max.ms`` at its maximum, so that a replay keeps its recorded arrival times whatever
their date. An existing topic must have ``N`` partitions (without ``--partitions``, any count is taken) and
``CreateTime`` timestamps, else the feed refuses. **Production topics** should instead use
``message.timestamp.type=LogAppendTime``, so that the arrival time is the broker's append time and a
producer's clock cannot move the watermark. With ``--synthetic``, ``--partitions N`` also sets the
generator's source partitions, so that source partition ``i`` goes to Kafka partition ``i``.

The producer is idempotent with ``acks=all``; the feed flushes at the end and checks every delivery report:
a record not delivered is an error (exit status 1), never a silent drop. ``--producer-option KEY=VALUE``
(repeatable) adds a confluent-kafka (librdkafka) setting to the producer and to the admin client that
creates or checks the topic, e.g. a secured cluster's ``security.protocol=SASL_SSL``, ``sasl.mechanism``,
``sasl.username``, ``sasl.password``, ``ssl.ca.location``; the job's Java spelling is taken too (a
``kafka.`` prefix, a SCRAM or PLAIN ``sasl.jaas.config``: :func:`jobs.stream.options.librdkafka_config`).
A broker that refuses the login fails the feed at its first refusal (exit status 1, with the broker's
reason); no secret value is ever printed. ``--pace realtime`` releases each
record at ``start + (its arrival - first arrival) / speed``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from tools.feed.landing import check_options
from tools.feed.records import by_arrival, json_lines, normalise, utc
from watermark.progress import Progress, progress_line

__all__ = [
    "REPLAY_TOPIC_CONFIG",
    "KafkaFeedError",
    "check_bootstrap_servers",
    "feed_kafka",
    "kafka_partition_map",
]

#: Topic configuration of a topic the Kafka feed creates (a replay keeps the recorded arrival times).
REPLAY_TOPIC_CONFIG = {
    "message.timestamp.type": "CreateTime",
    "message.timestamp.after.max.ms": str(2**63 - 1),
    "message.timestamp.before.max.ms": str(2**63 - 1),
}
_KAFKA_PROGRESS_ROWS = 10_000
_MAX_DEFAULT_PARTITIONS = 64  # more source partitions than this: --partitions must be given
_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_DIGIT_RUNS = re.compile(r"(\d+)")


class KafkaFeedError(RuntimeError):
    """Records could not be produced to Kafka (a failed delivery, a broker that does not answer)."""


def _natural_key(text: str) -> tuple[tuple[int, int, str], ...]:
    """Sort key in which runs of digits compare as numbers ("dev_2" < "dev_10")."""
    return tuple(
        (1, int(part), part) if part.isdigit() else (0, 0, part) for part in _DIGIT_RUNS.split(text) if part
    )


def kafka_partition_map(
    values: Sequence[str] | pa.Array | pa.ChunkedArray, partitions: int
) -> dict[str, int]:
    """The Kafka partition of each distinct source-partition value: its natural-order rank mod ``partitions``.

    Parameters
    ----------
    values : sequence of str or pyarrow string array
        Source-partition values (repeats allowed).
    partitions : int
        The topic's partition count, >= 1.

    Returns
    -------
    dict of str to int
        Each distinct value's Kafka partition.

    Raises
    ------
    ValueError
        If ``partitions`` is not an integer >= 1.

    Examples
    --------
    >>> kafka_partition_map(["dev_10", "dev_2", "dev_7", "dev_2"], 2)
    {'dev_2': 0, 'dev_7': 1, 'dev_10': 0}

    """
    from tools.local.kafka_topics import check_partitions

    check_partitions(partitions)
    if isinstance(values, pa.Array | pa.ChunkedArray):
        distinct = pc.unique(values).to_pylist()
    else:
        distinct = list(dict.fromkeys(values))
    ranked = sorted(distinct, key=lambda value: (_natural_key(value), value))
    return {value: rank % partitions for rank, value in enumerate(ranked)}


def check_bootstrap_servers(servers: str) -> str:
    """``HOST:PORT[,HOST:PORT...]`` unchanged, else a ValueError."""
    entries = servers.split(",") if isinstance(servers, str) else [None]
    for entry in entries:
        host, _, port = (entry or "").strip().rpartition(":")
        if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
            msg = f"Kafka bootstrap servers must be HOST:PORT[,HOST:PORT...], got {servers!r}"
            raise ValueError(msg)
    return servers


def _check_topic_timestamps(
    bootstrap_servers: str, topic: str, timeout: float, client_config: dict[str, Any] | None = None
) -> None:
    """Refuse an existing topic whose record timestamps are the broker's (LogAppendTime)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    from tools.local.kafka_topics import QUIET

    admin = AdminClient({**QUIET, **(client_config or {}), "bootstrap.servers": bootstrap_servers})
    resource = ConfigResource(ResourceType.TOPIC, topic)
    try:
        configs = admin.describe_configs([resource], request_timeout=timeout)[resource].result(
            timeout=timeout
        )
    except KafkaException as exc:
        msg = f"cannot read the configuration of topic {topic!r} on {bootstrap_servers}: {exc.args[0].str()}"
        raise KafkaFeedError(msg) from None
    entry = configs.get("message.timestamp.type")
    if entry is not None and entry.value != "CreateTime":
        msg = (
            f"topic {topic!r} has message.timestamp.type={entry.value}: the broker would replace the "
            "recorded arrival times; feed a topic with CreateTime (or let the feed create one)"
        )
        raise ValueError(msg)


def feed_kafka(
    records: pa.Table,
    bootstrap_servers: str,
    topic: str,
    *,
    partitions: int | None = None,
    pace: str = "fast",
    speed: float = 1.0,
    arrival_time: bool = True,
    progress: Progress | None = None,
    producer_config: dict[str, Any] | None = None,
    timeout: float = 30.0,
) -> dict[str, Any]:
    """Produce records into a Kafka topic, in arrival order, with their arrival times as record timestamps.

    The record values, keys, timestamps and partitions are described in the module's docstring.

    Parameters
    ----------
    records : pyarrow.Table
        As for :func:`tools.feed.landing.feed`.
    bootstrap_servers : str
        ``HOST:PORT[,HOST:PORT...]`` of the Kafka cluster.
    topic : str
        The topic; created when missing (see the module docstring).
    partitions : int, optional
        The topic's partition count. Default: an existing topic's count, else the number of distinct
        source partitions (at most 64; more need an explicit count).
    pace : {"fast", "realtime"}, default "fast"
        ``"realtime"`` releases each record at ``start + (its arrival - first arrival) / speed``.
    speed : float, default 1.0
        Real-time multiplier for ``pace="realtime"``, > 0.
    arrival_time : bool, default True
        Keep ``arrival_time_ms`` in the values (the record timestamp carries it either way).
    progress : callable, optional
        Called with one line per 10,000 records, e.g. ``"records 20,000/97,000: arrival 2014-11-10T13:55Z"``,
        and once at the end.
    producer_config : dict, optional
        More confluent-kafka (librdkafka) settings, ``--producer-option``s: for the producer and the admin
        client that creates or checks the topic (security: ``security.protocol``, ``sasl.mechanism``,
        ``sasl.username``, ``sasl.password``, ``ssl.*``; or ``{"message.max.bytes": 4000000}``). Java's
        spelling is taken too (:func:`jobs.stream.options.librdkafka_config`: a ``kafka.`` prefix, a
        SCRAM or PLAIN ``sasl.jaas.config``). Secret values never appear in an error or the summary.
    timeout : float, default 30.0
        Seconds for the final flush (a record's delivery), and at most 10 s for each admin request.

    Returns
    -------
    dict
        ``{"topic", "bootstrap_servers", "partitions", "created", "rows", "rows_per_partition",
        "first_arrival_ms", "last_arrival_ms"}``.

    Raises
    ------
    ValueError
        If an option or the records are invalid, an arrival time is < 1 ms, or the topic exists with
        another partition count or with ``LogAppendTime`` timestamps.
    KafkaFeedError
        If the broker cannot be reached (or refuses the credentials) or a record is not delivered.

    """
    from jobs.stream.options import librdkafka_config, redact_text, secret_values

    given = dict(producer_config or {})
    secrets = secret_values({k: str(v) for k, v in given.items()})
    try:
        client = librdkafka_config(given)
        return _feed_kafka(
            records,
            bootstrap_servers,
            topic,
            partitions=partitions,
            pace=pace,
            speed=speed,
            arrival_time=arrival_time,
            progress=progress,
            client_config=client,
            timeout=timeout,
        )
    except (ValueError, KafkaFeedError) as exc:  # a client's error may quote a setting: never a secret
        if not secrets:
            raise
        raise type(exc)(redact_text(str(exc), secrets)) from None


def _feed_kafka(
    records: pa.Table,
    bootstrap_servers: str,
    topic: str,
    *,
    partitions: int | None,
    pace: str,
    speed: float,
    arrival_time: bool,
    progress: Progress | None,
    client_config: dict[str, Any],
    timeout: float,
) -> dict[str, Any]:
    """:func:`feed_kafka` with the client settings in librdkafka's spelling."""
    check_options(pace=pace, speed=speed)
    _check_target(bootstrap_servers, topic, partitions)
    table, tp_ms = _arrival_ordered(records)
    route = table.column("partition" if "partition" in table.column_names else "key")
    admin_timeout = min(timeout, 10.0)
    producer = _producer(bootstrap_servers, client_config, timeout)
    create = partitions
    if create is None:
        create = max(1, pc.count_distinct(route).as_py()) if "partition" in table.column_names else 1
    count, created = _topic(bootstrap_servers, topic, partitions, create, admin_timeout, client_config)
    if not created:
        _check_topic_timestamps(bootstrap_servers, topic, admin_timeout, client_config)

    kafka_partition = _kafka_partitions(route, count)
    if not arrival_time:
        table = table.drop_columns(["arrival_time_ms"])
    rows = table.num_rows
    values = [line[:-1] for line in json_lines(table).to_pylist()] if rows else []
    keys = route.to_pylist()

    delivered = np.zeros(count, dtype=np.int64)
    failures: list[str] = []

    def on_delivery(error: Any, message: Any) -> None:
        if error is not None:
            failures.append(f"partition {message.partition()}: {error.str()}")
        else:
            delivered[message.partition()] += 1

    timestamps = tp_ms.tolist()
    _produce(
        producer,
        topic,
        values,
        keys,
        kafka_partition.tolist(),
        timestamps,
        on_delivery,
        stop=lambda: bool(failures),
        pace=pace,
        speed=speed,
        progress=progress,
    )
    undelivered = producer.flush(timeout)
    _check_deliveries(failures, undelivered, delivered, rows, topic, bootstrap_servers, timeout)
    if progress is not None and rows % _KAFKA_PROGRESS_ROWS:
        progress(progress_line(f"records {rows:,}/{rows:,}: arrival {utc(timestamps[-1])}", rows, rows))
    return {
        "topic": topic,
        "bootstrap_servers": bootstrap_servers,
        "partitions": count,
        "created": created,
        "rows": rows,
        "rows_per_partition": delivered.tolist(),
        "first_arrival_ms": timestamps[0] if rows else None,
        "last_arrival_ms": timestamps[-1] if rows else None,
    }


def _check_target(bootstrap_servers: str, topic: str, partitions: int | None) -> None:
    """Refuse bad bootstrap servers, a bad topic name or a bad partition count (ValueError)."""
    from tools.local.kafka_topics import check_partitions

    check_bootstrap_servers(bootstrap_servers)
    if not isinstance(topic, str) or not _TOPIC_NAME.match(topic) or topic in (".", ".."):
        msg = f"a Kafka topic name is 1 to 249 of the characters a-z A-Z 0-9 . _ -, got {topic!r}"
        raise ValueError(msg)
    if partitions is not None:
        check_partitions(partitions)


def _arrival_ordered(records: pa.Table) -> tuple[pa.Table, npt.NDArray[np.int64]]:
    """The records, checked and in arrival order, and their arrival times (each >= 1 ms, as Kafka needs)."""
    table, tp_ms = by_arrival(normalise(records))
    if len(tp_ms) and int(tp_ms[0]) < 1:
        msg = f"Kafka record timestamps must be >= 1 (epoch ms); the earliest arrival time is {int(tp_ms[0])}"
        raise ValueError(msg)
    return table, tp_ms


def _producer(bootstrap_servers: str, client_config: dict[str, Any], timeout: float) -> Any:
    """The idempotent producer (a ValueError for a setting librdkafka refuses, before any request)."""
    from confluent_kafka import KafkaException, Producer

    from tools.local.kafka_topics import QUIET

    settings = {
        "bootstrap.servers": bootstrap_servers,
        "enable.idempotence": True,  # acks=all, no duplicates, order kept across retries
        "linger.ms": 20,
        "compression.type": "lz4",
        "message.timeout.ms": int(timeout * 1000),
        **QUIET,
    }
    settings.update(client_config)
    settings["bootstrap.servers"] = bootstrap_servers
    try:  # before any request: a setting librdkafka refuses is bad input, not a broker's failure
        return Producer(settings)
    except KafkaException as exc:
        msg = f"cannot configure the Kafka producer: {exc.args[0].str()}"
        raise ValueError(msg) from None


def _topic(
    bootstrap_servers: str,
    topic: str,
    partitions: int | None,
    create: int,
    timeout: float,
    client_config: dict[str, Any],
) -> tuple[int, bool]:
    """The topic's partition count and whether it was created: with ``partitions``, else ``create``."""
    from tools.local.kafka_topics import KafkaLocalError, ensure_topic

    count: int | None
    try:
        count, created = ensure_topic(
            bootstrap_servers,
            topic,
            partitions,
            config=REPLAY_TOPIC_CONFIG,
            timeout=timeout,
            client_config=client_config,
        )
    except ValueError:
        if partitions is not None:
            raise
        count, created = None, False
    except KafkaLocalError as exc:
        raise KafkaFeedError(str(exc)) from None
    if count is None:  # missing topic, no count given: create it with one partition per source partition
        if create > _MAX_DEFAULT_PARTITIONS:
            msg = (
                f"topic {topic!r} does not exist and the stream has {create:,} source partitions; "
                "give --partitions N"
            )
            raise ValueError(msg)
        try:
            count, created = ensure_topic(
                bootstrap_servers,
                topic,
                create,
                config=REPLAY_TOPIC_CONFIG,
                timeout=timeout,
                client_config=client_config,
            )
        except KafkaLocalError as exc:
            raise KafkaFeedError(str(exc)) from None
    return count, created


def _kafka_partitions(route: pa.ChunkedArray, count: int) -> npt.NDArray[np.int64]:
    """Each record's Kafka partition, from its routing value (:func:`kafka_partition_map`)."""
    mapping = kafka_partition_map(route, count)
    ranked = list(mapping)
    return np.asarray([mapping[v] for v in ranked], dtype=np.int64)[
        np.asarray(pc.index_in(route, value_set=pa.array(ranked, pa.string())).to_numpy(), dtype=np.int64)
    ]


def _produce(
    producer: Any,
    topic: str,
    values: list[str],
    keys: list[str],
    partitions: list[int],
    timestamps: list[int],
    on_delivery: Callable[[Any, Any], None],
    *,
    stop: Callable[[], bool],
    pace: str,
    speed: float,
    progress: Progress | None,
) -> None:
    """Produce the records in order (paced for ``"realtime"``); stop early once ``stop()`` says so."""
    from confluent_kafka import KafkaException

    rows = len(values)
    start = time.monotonic()
    first = timestamps[0] if rows else 0
    for i in range(rows):
        if pace == "realtime":
            deadline = start + (timestamps[i] - first) / 1000.0 / speed
            while (remaining := deadline - time.monotonic()) > 0:
                producer.poll(min(remaining, 0.1))
        while True:
            try:
                producer.produce(
                    topic,
                    value=values[i],
                    key=keys[i],
                    partition=partitions[i],
                    timestamp=timestamps[i],
                    on_delivery=on_delivery,
                )
                break
            except BufferError:  # the local queue is full: serve delivery reports, then retry
                producer.poll(0.1)
            except KafkaException as exc:
                msg = f"record {i + 1:,} could not be produced to {topic!r}: {exc.args[0].str()}"
                raise KafkaFeedError(msg) from None
        if stop():
            break
        if progress is not None and (i + 1) % _KAFKA_PROGRESS_ROWS == 0:
            producer.poll(0)
            progress(progress_line(f"records {i + 1:,}/{rows:,}: arrival {utc(timestamps[i])}", i + 1, rows))


def _check_deliveries(
    failures: list[str],
    undelivered: int,
    delivered: npt.NDArray[np.int64],
    rows: int,
    topic: str,
    bootstrap_servers: str,
    timeout: float,
) -> None:
    """Raise a KafkaFeedError when a record failed or was not confirmed after the final flush."""
    if failures:
        msg = f"{len(failures):,} record(s) not delivered to topic {topic!r}; first: {failures[0]}"
        raise KafkaFeedError(msg)
    if undelivered or int(delivered.sum()) != rows:
        msg = (
            f"{rows - int(delivered.sum()):,} of {rows:,} record(s) not confirmed by {bootstrap_servers} "
            f"within {timeout:g} s"
        )
        raise KafkaFeedError(msg)
