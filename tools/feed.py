r"""Feed a recorded stream into landing files or a Kafka topic, in arrival order, for a live run of the job.

``python -m tools.feed`` reads a recorded stream (a CSV or Parquet file, through
:func:`watermark.streams.recorded.read_stream`) or generates a synthetic one
(:func:`watermark.streams.synthetic.generate`), sorts it by arrival time and writes it as numbered landing
files (``--out DIR``) or produces it into a Kafka topic (``--kafka-bootstrap-servers HOST:PORT --topic NAME
[--partitions N]``), either as fast as possible or paced in (scaled) real time, so that the job's source picks
the records up as they would have arrived.

Records carry the job's default input fields, in this order:

=================== ======= ==========================================================================
field               type    meaning
=================== ======= ==========================================================================
``event_id``        string  0-based row number in the source file, or the generator's event id
``key``             string  the ``--key`` column; else the partition; else ``"all"``
``partition``       string  the ``--partition`` column (omitted when the source has none)
``event_time_ms``   int64   event time, epoch milliseconds
``arrival_time_ms`` int64   recorded arrival time, epoch ms (omitted with ``--no-arrival-time``)
``value``           double  the ``--value`` column, else 1.0
=================== ======= ==========================================================================

Files are named ``feed-000001.json``, ``feed-000002.json``, ... so that lexical order is arrival order;
a run into a directory that already holds feed files continues after the highest number. The directory may
be a URI (``s3a://bucket/landing``: :mod:`watermark.storage`). Each file appears whole under its final name
(:func:`watermark.storage.write_bytes`: on a local disk a hidden temporary file, which Spark's file source
ignores, renamed into place; on an object store one PUT), so the job never sees a partial file. Spark's file
source takes files oldest first by modification time (in milliseconds): every local file gets a modification
time at least 1 ms after the previous one's, so that the order in which the job reads files is their arrival
order; an object store stamps each object when its PUT completes, and files of the same second are read in
name order (:func:`jobs.stream.sources.readers.landing_order`).

Kafka
-----
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
record at ``start + (its arrival - first arrival) / speed``. Progress (every file, every 10,000 records) is
a bar on a terminal, else a plain line on standard error each 10 % of the work (:mod:`watermark.progress`).

Bad input prints one line ``error: ...`` on standard error and exits with status 2, as ``python -m
watermark`` does; a Kafka failure (broker unreachable, delivery failed) exits with status 1.

Examples
--------
Feed 2,500 synthetic events as JSON Lines, 1,000 records a file::

    python -m tools.feed --synthetic 2500 --out /tmp/landing --rows-per-file 1000

Produce 10,000 synthetic events from 4 source partitions into a 4-partition topic of a local broker
(``bin/kafka-local start``)::

    python -m tools.feed --synthetic 10000 --partitions 4 --kafka-bootstrap-servers 127.0.0.1:9092 \
        --topic events

Replay a recorded IoT stream at ten times its real speed::

    python -m tools.feed samples/ooo-iot-d1.csv --delimiter ';' --event-time S.Client.Detection.Time \
        --arrival-time S.Message.received.time.ms --partition S.Device.ID \
        --out /tmp/landing --pace realtime --speed 10

"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from watermark import storage
from watermark.cli.log import CliError, entry_prog, plain_text, run_main
from watermark.cli.main import EXIT_BAD_INPUT, OneLineParser, delimiter_arg
from watermark.progress import Progress, ProgressReporter, progress_line
from watermark.storage import Location

__all__ = [
    "FIELDS",
    "FORMATS",
    "PACES",
    "KafkaFeedError",
    "feed",
    "feed_kafka",
    "kafka_partition_map",
    "main",
    "records_from_file",
    "records_from_synthetic",
]

EXIT_INTERRUPTED = 130
EXIT_KAFKA_FAILED = 1

FORMATS = ("json", "csv", "parquet")
PACES = ("fast", "realtime")
#: The record fields in output order, with their arrow types; ``partition`` is optional.
FIELDS: dict[str, pa.DataType] = {
    "event_id": pa.string(),
    "key": pa.string(),
    "partition": pa.string(),
    "event_time_ms": pa.int64(),
    "arrival_time_ms": pa.int64(),
    "value": pa.float64(),
}
_OPTIONAL_FIELDS = ("partition",)

_PREFIX = "feed-"
_DIGITS = 6  # feed-000001 ... feed-999999: lexical order = numeric order
_MAX_NUMBER = 10**_DIGITS - 1
_FEED_FILE = re.compile(rf"^{_PREFIX}(\d+)\.(?:{'|'.join(FORMATS)})$")
_JSON_SPECIAL = r'["\\\x00-\x1f]'  # characters a JSON string must escape (RE2 syntax)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

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


# --------------------------------------------------------------------------------------------------
# Sources.


def records_from_file(
    path: str | os.PathLike[str],
    *,
    event_time: str,
    arrival_time: str,
    partition: str | None = None,
    key: str | None = None,
    value: str | None = None,
    delimiter: str = ",",
    header: bool = True,
    time_format: str = "epoch_ms",
) -> pa.Table:
    """Read a recorded stream into feed records, in arrival order.

    Parameters
    ----------
    path : str or os.PathLike
        A CSV or Parquet file, as for :func:`watermark.streams.recorded.read_stream`.
    event_time, arrival_time : str
        The event-time and arrival-time columns (names, or 0-based indices with ``header=False``).
    partition : str, optional
        The source-partition column; without it the records have no ``partition`` field.
    key : str, optional
        The aggregation-key column; by default the key is the partition, else ``"all"``.
    value : str, optional
        A numeric column for ``value``; by default every value is 1.0.
    delimiter : str, default ","
        CSV field separator.
    header : bool, default True
        Whether the first CSV row holds column names.
    time_format : {"epoch_ms", "epoch_s", "iso"}, default "epoch_ms"
        How time text is written (see :func:`watermark.streams.recorded.read_stream`).

    Returns
    -------
    pyarrow.Table
        The records (fields as in :data:`FIELDS`), sorted by arrival time; ties keep file order.
        ``event_id`` is the 0-based data row number in the file.

    Raises
    ------
    watermark.streams.recorded.InputError
        If the file cannot be read or holds a bad time, label or value; the message is one line.

    """
    from watermark.streams.recorded import read_stream

    stream = read_stream(
        path,
        event_time=event_time,
        arrival_time=arrival_time,
        partition=partition,
        key=key,
        delimiter=delimiter,
        header=header,
        time_format=time_format,
        value=value,
    )
    n = len(stream)
    values = np.ones(n, dtype=np.float64) if stream.value is None else stream.value
    keys = stream.key if stream.key is not None else stream.partition
    return _records(
        event_id=np.arange(n, dtype=np.int64),
        key=np.full(n, "all", dtype=object) if keys is None else keys,
        partition=stream.partition,
        te_ms=stream.te_ms,
        tp_ms=stream.tp_ms,
        value=values,
    )


def records_from_synthetic(events: int, *, seed: int = 0, partitions: int = 8, keys: int = 1_000) -> pa.Table:
    """Generate a synthetic out-of-order stream as feed records, in arrival order.

    Parameters
    ----------
    events : int
        Number of records, >= 1.
    seed : int, default 0
        Seed of :func:`watermark.streams.synthetic.generate`.
    partitions : int, default 8
        Number of source partitions; ``partition`` is the partition code as text (``"0"``, ``"1"``, ...).
    keys : int, default 1000
        Number of aggregation keys; ``key`` is the key code as text.

    Returns
    -------
    pyarrow.Table
        The records (fields as in :data:`FIELDS`), sorted by arrival time, ties by ``event_id``;
        ``event_id`` is the generator's event id as text.

    Raises
    ------
    ValueError
        If a parameter is invalid.

    Examples
    --------
    >>> table = records_from_synthetic(100, partitions=3, seed=1)
    >>> table.num_rows, table.column_names
    (100, ['event_id', 'key', 'partition', 'event_time_ms', 'arrival_time_ms', 'value'])

    """
    from watermark.streams.synthetic import generate

    stream = generate(events=events, seed=seed, partitions=partitions, keys=keys)
    return _records(
        event_id=stream.event_id,
        key=stream.key,
        partition=stream.partition,
        te_ms=stream.te_ms,
        tp_ms=stream.tp_ms,
        value=stream.value,
    )


def _records(
    *,
    event_id: npt.NDArray[Any],
    key: npt.NDArray[Any],
    partition: npt.NDArray[Any] | None,
    te_ms: npt.NDArray[np.int64],
    tp_ms: npt.NDArray[np.int64],
    value: npt.NDArray[np.float64],
) -> pa.Table:
    """Build the record table, stably sorted by arrival time."""
    order = np.argsort(tp_ms, kind="stable")

    def text(array: npt.NDArray[Any]) -> pa.Array:
        picked = array[order]
        if picked.dtype == object:
            return pa.array(picked, type=pa.string())
        return pc.cast(pa.array(picked), pa.string())

    columns: dict[str, pa.Array] = {"event_id": text(event_id), "key": text(key)}
    if partition is not None:
        columns["partition"] = text(partition)
    columns["event_time_ms"] = pa.array(te_ms[order], type=pa.int64())
    columns["arrival_time_ms"] = pa.array(tp_ms[order], type=pa.int64())
    columns["value"] = pa.array(value[order], type=pa.float64())
    return pa.table(columns)


# --------------------------------------------------------------------------------------------------
# Writing.


def check_options(
    *,
    fmt: str = "json",
    rows_per_file: int = 1000,
    max_files: int | None = None,
    pace: str = "fast",
    speed: float = 1.0,
) -> None:
    """Validate the :func:`feed` options.

    Parameters
    ----------
    fmt, rows_per_file, max_files, pace, speed
        As for :func:`feed`.

    Raises
    ------
    ValueError
        If an option is invalid; the message names it.

    """
    if fmt not in FORMATS:
        msg = f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}"
        raise ValueError(msg)
    if pace not in PACES:
        msg = f"unknown pace {pace!r}; expected one of {', '.join(PACES)}"
        raise ValueError(msg)
    if isinstance(rows_per_file, bool) or not isinstance(rows_per_file, int) or rows_per_file < 1:
        msg = f"rows per file must be an integer >= 1, got {rows_per_file!r}"
        raise ValueError(msg)
    if max_files is not None and (
        isinstance(max_files, bool) or not isinstance(max_files, int) or max_files < 1
    ):
        msg = f"max files must be an integer >= 1, got {max_files!r}"
        raise ValueError(msg)
    if (
        isinstance(speed, bool)
        or not isinstance(speed, int | float)
        or not (math.isfinite(speed) and speed > 0)
    ):
        msg = f"speed must be a finite number > 0, got {speed!r}"
        raise ValueError(msg)


def feed(
    records: pa.Table,
    out_dir: str | os.PathLike[str],
    *,
    fmt: str = "json",
    rows_per_file: int = 1000,
    max_files: int | None = None,
    pace: str = "fast",
    speed: float = 1.0,
    arrival_time: bool = True,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Write records into numbered landing files, in arrival order, fast or paced in real time.

    Parameters
    ----------
    records : pyarrow.Table
        Columns ``event_id``, ``key``, ``event_time_ms``, ``arrival_time_ms``, ``value`` and optionally
        ``partition`` (see :data:`FIELDS`; other columns are ignored, types are cast), without nulls.
        They are stably sorted by ``arrival_time_ms`` first (a no-op for :func:`records_from_file` and
        :func:`records_from_synthetic`).
    out_dir : str or os.PathLike
        The landing directory, created if missing. Numbering continues after the highest existing
        ``feed-NNNNNN.*`` file in it.
    fmt : {"json", "csv", "parquet"}, default "json"
        JSON Lines (one object per line, fields in :data:`FIELDS` order), CSV with a header, or Parquet.
    rows_per_file : int, default 1000
        Records per file (the last file may hold fewer).
    max_files : int, optional
        Stop after this many files.
    pace : {"fast", "realtime"}, default "fast"
        ``"fast"`` writes as fast as possible. ``"realtime"`` releases file ``k`` when the wall clock
        reaches ``start + (first arrival in file k - first arrival of the run) / speed``.
    speed : float, default 1.0
        Real-time multiplier for ``pace="realtime"`` (2.0 = twice as fast), > 0.
    arrival_time : bool, default True
        Write ``arrival_time_ms``; when False the field is left out (the job then stamps its own
        ingestion time), though it still paces the feed.
    progress : callable, optional
        Called with one line per file, e.g. ``"file 12/97: 1,000 rows, arrival 2014-11-10T13:55:01Z"``.

    Returns
    -------
    dict
        ``{"files": N, "rows": M, "out": DIR, "first_arrival_ms": ..., "last_arrival_ms": ...}`` for the
        records written (arrival times are None when nothing was written).

    Raises
    ------
    ValueError
        If an option is invalid, a required column is missing or holds nulls, a value is not finite,
        or the file numbers would pass 999999.
    OSError
        If the directory or a file cannot be written.

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     summary = feed(records_from_synthetic(2_500), tmp, rows_per_file=1_000)
    ...     names = sorted(os.listdir(tmp))
    >>> summary["files"], summary["rows"], names
    (3, 2500, ['feed-000001.json', 'feed-000002.json', 'feed-000003.json'])

    """
    check_options(fmt=fmt, rows_per_file=rows_per_file, max_files=max_files, pace=pace, speed=speed)
    table = _normalise(records)
    tp_ms = np.asarray(table.column("arrival_time_ms").to_numpy(), dtype=np.int64)
    if len(tp_ms) > 1 and bool((np.diff(tp_ms) < 0).any()):
        order = np.argsort(tp_ms, kind="stable")
        table, tp_ms = table.take(pa.array(order)), tp_ms[order]

    files = math.ceil(table.num_rows / rows_per_file)
    if max_files is not None:
        files = min(files, max_files)
    rows = min(table.num_rows, files * rows_per_file)
    table, tp_ms = table.slice(0, rows), tp_ms[:rows]
    if not arrival_time:
        table = table.drop_columns(["arrival_time_ms"])

    out = Location.of(out_dir)
    storage.make_dirs(out)
    landed = storage.listdir(out)
    first_number = _highest_number(landed) + 1
    if files and first_number + files - 1 > _MAX_NUMBER:
        msg = f"{out}: {files} more files would number past {_PREFIX}{_MAX_NUMBER}; use an empty directory"
        raise ValueError(msg)

    lines = _json_lines(table) if fmt == "json" and rows else None
    start = time.monotonic()
    last_mtime_ns = _newest_mtime_ns(landed)
    for k in range(files):
        lo, count = k * rows_per_file, min(rows_per_file, rows - k * rows_per_file)
        final = out / f"{_PREFIX}{first_number + k:0{_DIGITS}d}.{fmt}"
        if lines is not None:
            data = "".join(lines.slice(lo, count).to_pylist()).encode("utf-8")
        else:
            data = _table_bytes(table.slice(lo, count), fmt)
        if pace == "realtime":
            _sleep_until(start + (int(tp_ms[lo]) - int(tp_ms[0])) / 1000.0 / speed)
        # whole, under its final name at once; locally with a modification time after every earlier file's
        last_mtime_ns = max(time.time_ns(), last_mtime_ns + 1_000_000)
        storage.write_bytes(final, data, mtime_ns=last_mtime_ns)
        if progress is not None:
            line = f"file {k + 1}/{files}: {count:,} rows, arrival {_utc(int(tp_ms[lo]))}"
            progress(progress_line(line, k + 1, files))
    return {
        "files": files,
        "rows": rows,
        "out": str(out),
        "first_arrival_ms": int(tp_ms[0]) if rows else None,
        "last_arrival_ms": int(tp_ms[-1]) if rows else None,
    }


# --------------------------------------------------------------------------------------------------
# Kafka.


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
    from tools.local.kafka import check_partitions

    check_partitions(partitions)
    if isinstance(values, pa.Array | pa.ChunkedArray):
        distinct = pc.unique(values).to_pylist()
    else:
        distinct = list(dict.fromkeys(values))
    ranked = sorted(distinct, key=lambda value: (_natural_key(value), value))
    return {value: rank % partitions for rank, value in enumerate(ranked)}


def _check_bootstrap_servers(servers: str) -> str:
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

    from tools.local.kafka import QUIET

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

    The record values, keys, timestamps and partitions are described in the module's "Kafka" section.

    Parameters
    ----------
    records : pyarrow.Table
        As for :func:`feed`.
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
    from confluent_kafka import KafkaException, Producer

    from tools.local.kafka import QUIET, KafkaLocalError, check_partitions, ensure_topic

    check_options(pace=pace, speed=speed)
    _check_bootstrap_servers(bootstrap_servers)
    if not isinstance(topic, str) or not _TOPIC_NAME.match(topic) or topic in (".", ".."):
        msg = f"a Kafka topic name is 1 to 249 of the characters a-z A-Z 0-9 . _ -, got {topic!r}"
        raise ValueError(msg)
    if partitions is not None:
        check_partitions(partitions)
    table = _normalise(records)
    tp_ms = np.asarray(table.column("arrival_time_ms").to_numpy(), dtype=np.int64)
    if len(tp_ms) > 1 and bool((np.diff(tp_ms) < 0).any()):
        order = np.argsort(tp_ms, kind="stable")
        table, tp_ms = table.take(pa.array(order)), tp_ms[order]
    if len(tp_ms) and int(tp_ms[0]) < 1:
        msg = f"Kafka record timestamps must be >= 1 (epoch ms); the earliest arrival time is {int(tp_ms[0])}"
        raise ValueError(msg)
    route = table.column("partition" if "partition" in table.column_names else "key")
    admin_timeout = min(timeout, 10.0)

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
        producer = Producer(settings)
    except KafkaException as exc:
        msg = f"cannot configure the Kafka producer: {exc.args[0].str()}"
        raise ValueError(msg) from None

    create = partitions
    if create is None:
        create = max(1, pc.count_distinct(route).as_py()) if "partition" in table.column_names else 1
    try:
        count, created = ensure_topic(
            bootstrap_servers,
            topic,
            partitions,
            config=REPLAY_TOPIC_CONFIG,
            timeout=admin_timeout,
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
                timeout=admin_timeout,
                client_config=client_config,
            )
        except KafkaLocalError as exc:
            raise KafkaFeedError(str(exc)) from None
    if not created:
        _check_topic_timestamps(bootstrap_servers, topic, admin_timeout, client_config)

    mapping = kafka_partition_map(route, count)
    ranked = list(mapping)
    kafka_partition = np.asarray([mapping[v] for v in ranked], dtype=np.int64)[
        np.asarray(pc.index_in(route, value_set=pa.array(ranked, pa.string())).to_numpy(), dtype=np.int64)
    ]
    if not arrival_time:
        table = table.drop_columns(["arrival_time_ms"])
    rows = table.num_rows
    values = [line[:-1] for line in _json_lines(table).to_pylist()] if rows else []
    keys = route.to_pylist()

    delivered = np.zeros(count, dtype=np.int64)
    failures: list[str] = []

    def on_delivery(error: Any, message: Any) -> None:
        if error is not None:
            failures.append(f"partition {message.partition()}: {error.str()}")
        else:
            delivered[message.partition()] += 1

    partition_list = kafka_partition.tolist()
    timestamps = tp_ms.tolist()
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
                    partition=partition_list[i],
                    timestamp=timestamps[i],
                    on_delivery=on_delivery,
                )
                break
            except BufferError:  # the local queue is full: serve delivery reports, then retry
                producer.poll(0.1)
            except KafkaException as exc:
                msg = f"record {i + 1:,} could not be produced to {topic!r}: {exc.args[0].str()}"
                raise KafkaFeedError(msg) from None
        if failures:
            break
        if progress is not None and (i + 1) % _KAFKA_PROGRESS_ROWS == 0:
            producer.poll(0)
            progress(progress_line(f"records {i + 1:,}/{rows:,}: arrival {_utc(timestamps[i])}", i + 1, rows))
    undelivered = producer.flush(timeout)
    if failures:
        msg = f"{len(failures):,} record(s) not delivered to topic {topic!r}; first: {failures[0]}"
        raise KafkaFeedError(msg)
    if undelivered or int(delivered.sum()) != rows:
        msg = (
            f"{rows - int(delivered.sum()):,} of {rows:,} record(s) not confirmed by {bootstrap_servers} "
            f"within {timeout:g} s"
        )
        raise KafkaFeedError(msg)
    if progress is not None and rows % _KAFKA_PROGRESS_ROWS:
        progress(progress_line(f"records {rows:,}/{rows:,}: arrival {_utc(timestamps[-1])}", rows, rows))
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


def _normalise(records: pa.Table) -> pa.Table:
    """Select the record fields in output order, cast to their types; reject nulls and non-finite values."""
    names = [name for name in FIELDS if name in records.column_names]
    missing = [name for name in FIELDS if name not in names and name not in _OPTIONAL_FIELDS]
    if missing:
        present = ", ".join(records.column_names) or "(none)"
        msg = f"the records lack the column(s) {', '.join(missing)}; columns are: {present}"
        raise ValueError(msg)
    columns = {}
    for name in names:
        column = records.column(name)
        if column.null_count:
            msg = f"the records' {name} column holds {column.null_count:,} null value(s)"
            raise ValueError(msg)
        try:
            columns[name] = pc.cast(column, FIELDS[name])
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            msg = f"the records' {name} column ({column.type}) cannot be cast to {FIELDS[name]}: {exc}"
            raise ValueError(msg) from None
    table = pa.table(columns)
    if table.num_rows and not pc.all(pc.is_finite(table.column("value"))).as_py():
        msg = "the records' value column holds NaN or infinite values, which JSON cannot carry"
        raise ValueError(msg)
    return table


def _newest_mtime_ns(landed: list[storage.Entry]) -> int:
    """Latest modification time among a folder's feed files (0 when there are none)."""
    times = [(e.mtime_ms or 0) * 1_000_000 for e in landed if e.name.startswith(_PREFIX)]
    return max(times, default=0)


def _highest_number(landed: list[storage.Entry]) -> int:
    """The highest number of a visible ``feed-NNNNNN.<format>`` file among a folder's entries, or 0."""
    numbers = [int(match.group(1)) for e in landed if (match := _FEED_FILE.match(e.name))]
    return max(numbers, default=0)


def _json_lines(table: pa.Table) -> pa.ChunkedArray:
    """One JSON object per record, each ending in a newline, fields in table order."""
    parts: list[Any] = []
    for index, name in enumerate(table.column_names):
        parts.append(("{" if index == 0 else ",") + json.dumps(name) + ":")
        parts.append(_json_values(table.column(name)))
    parts.append("}\n")
    return pc.binary_join_element_wise(*parts, "")


def _json_values(column: pa.ChunkedArray) -> Any:
    """JSON text of each value of a string, int64 or float64 column (finite values only)."""
    if pa.types.is_string(column.type):
        if pc.any(pc.match_substring_regex(column, _JSON_SPECIAL)).as_py():
            return pa.array([json.dumps(v, ensure_ascii=False) for v in column.to_pylist()], pa.string())
        return pc.binary_join_element_wise('"', column, '"', "")
    text = pc.cast(column, pa.string())
    if pa.types.is_floating(column.type):  # arrow writes 1.0 as "1": keep it a JSON double
        text = pc.if_else(
            pc.match_substring_regex(text, "[.e]"), text, pc.binary_join_element_wise(text, ".0", "")
        )
    return text


def _table_bytes(table: pa.Table, fmt: str) -> bytes:
    """One CSV (with a header) or Parquet file's bytes."""
    sink = pa.BufferOutputStream()
    if fmt == "csv":
        import pyarrow.csv as pacsv

        pacsv.write_csv(table, sink)
    else:
        import pyarrow.parquet as pq

        pq.write_table(table, sink)
    return bytes(sink.getvalue().to_pybytes())


def _sleep_until(deadline: float) -> None:
    """Sleep until ``time.monotonic()`` reaches ``deadline``."""
    while (remaining := deadline - time.monotonic()) > 0:
        time.sleep(remaining)


def _utc(ms: int) -> str:
    """Epoch milliseconds as ``YYYY-MM-DDTHH:MM:SSZ`` (or ``<ms> ms`` when out of the calendar range)."""
    try:
        return (_EPOCH + timedelta(milliseconds=ms)).strftime("%Y-%m-%dT%H:%M:%SZ")
    except OverflowError:
        return f"{ms} ms"


# --------------------------------------------------------------------------------------------------
# Command line.


_FILE_FLAGS = {
    "event_time": "--event-time",
    "arrival_time": "--arrival-time",
    "delimiter": "--delimiter",
    "no_header": "--no-header",
    "time_format": "--time-format",
    "partition": "--partition",
    "key": "--key",
    "value": "--value",
}
_SYNTHETIC_FLAGS = {"seed": "--seed", "partitions": "--partitions", "keys": "--keys"}


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m tools.feed`` argument parser.

    Returns
    -------
    argparse.ArgumentParser
        The parser; its errors print one line and exit with status 2.

    """
    parser = OneLineParser(
        prog=entry_prog("python -m tools.feed"), description=plain_text(__doc__.splitlines()[0])
    )
    source = parser.add_argument_group("recorded source (INPUT)")
    source.add_argument(
        "input", nargs="?", metavar="INPUT", help="CSV or Parquet file of the recorded stream"
    )
    source.add_argument("--event-time", metavar="COL", help="event-time column (name, or index)")
    source.add_argument("--arrival-time", metavar="COL", help="arrival-time column")
    source.add_argument("--delimiter", type=delimiter_arg, help="CSV field separator (default ,)")
    source.add_argument("--no-header", action="store_true", help="the CSV has no header: COL is an index")
    source.add_argument(
        "--time-format",
        choices=("epoch_ms", "epoch_s", "iso"),
        help="how times are written (default epoch_ms)",
    )
    source.add_argument("--partition", metavar="COL", help="source-partition column")
    source.add_argument("--key", metavar="COL", help="key column (default: the partition, else 'all')")
    source.add_argument("--value", metavar="COL", help="numeric value column (default: 1.0)")

    synthetic = parser.add_argument_group("synthetic source")
    synthetic.add_argument("--synthetic", type=int, metavar="N", help="generate N out-of-order events")
    synthetic.add_argument("--seed", type=int, help="generator seed (default 0)")
    synthetic.add_argument(
        "--partitions",
        type=int,
        metavar="N",
        help="source partitions (default 8); with Kafka, the topic's partitions (and a synthetic source's)",
    )
    synthetic.add_argument("--keys", type=int, help="aggregation keys (default 1000)")

    output = parser.add_argument_group("output: landing files (--out) or a Kafka topic (--topic)")
    output.add_argument("--out", metavar="DIR", help="landing directory (created if missing)")
    output.add_argument("--format", choices=FORMATS, help="file format (default json)")
    output.add_argument(
        "--rows-per-file", type=int, metavar="N", help="records a landing file (default 1000)"
    )
    output.add_argument("--max-files", type=int, metavar="N", help="stop after N files")
    output.add_argument(
        "--kafka-bootstrap-servers",
        metavar="HOST:PORT",
        help="produce to Kafka (with --topic) instead of files",
    )
    output.add_argument("--topic", metavar="NAME", help="Kafka topic (created if missing, see --partitions)")
    output.add_argument(
        "--producer-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a confluent-kafka (librdkafka) setting of the producer and of the admin client that creates "
        "the topic (repeatable): security.protocol, sasl.mechanism, sasl.username, sasl.password, ssl.*, "
        "...; the job's Java spelling is taken too (a kafka. prefix; a SCRAM or PLAIN sasl.jaas.config); "
        "secret values are never printed",
    )
    output.add_argument(
        "--pace",
        choices=PACES,
        default="fast",
        help="fast, or realtime: at the recorded arrival times (default fast)",
    )
    output.add_argument(
        "--speed", type=float, default=1.0, metavar="X", help="realtime multiplier (default 1)"
    )
    output.add_argument("--no-arrival-time", action="store_true", help="leave arrival_time_ms out")
    output.add_argument("--quiet", action="store_true", help="no progress bar or lines on stderr")
    return parser


def _load(parser: argparse.ArgumentParser, args: argparse.Namespace) -> pa.Table:
    """The records of the source the arguments name (parser errors for inconsistent flags)."""

    def given(flags: dict[str, str]) -> list[str]:
        return [flag for attr, flag in flags.items() if getattr(args, attr) not in (None, False)]

    if args.synthetic is not None:
        if args.input is not None:
            parser.error("give either INPUT or --synthetic, not both")
        if stray := given(_FILE_FLAGS):
            parser.error(f"{stray[0]} applies only to an INPUT file, not to --synthetic")
        if args.synthetic < 1:
            parser.error(f"--synthetic must be >= 1, got {args.synthetic}")
        settings = {name: getattr(args, name) for name in _SYNTHETIC_FLAGS if getattr(args, name) is not None}
        return records_from_synthetic(args.synthetic, **settings)
    if args.input is None:
        parser.error("give an INPUT file or --synthetic N")
    kafka = args.topic is not None
    if stray := [flag for flag in given(_SYNTHETIC_FLAGS) if not (kafka and flag == "--partitions")]:
        parser.error(f"{stray[0]} applies only to --synthetic")
    if args.event_time is None or args.arrival_time is None:
        parser.error("INPUT needs --event-time COL and --arrival-time COL")
    return records_from_file(
        args.input,
        event_time=args.event_time,
        arrival_time=args.arrival_time,
        partition=args.partition,
        key=args.key,
        value=args.value,
        delimiter=args.delimiter or ",",
        header=not args.no_header,
        time_format=args.time_format or "epoch_ms",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m tools.feed``.

    Parameters
    ----------
    argv : sequence of str, optional
        The arguments (default: ``sys.argv[1:]``).

    Returns
    -------
    int
        The exit status: 0, 1 when Kafka fails (unreachable, a record not delivered), 2 for bad input,
        130 when interrupted.

    """
    from watermark.streams.recorded import InputError

    parser = build_parser()
    return run_main(
        parser,
        lambda args: _run(parser, args),
        argv,
        errors={
            (InputError, ValueError): EXIT_BAD_INPUT,
            KafkaFeedError: EXIT_KAFKA_FAILED,
            KeyboardInterrupt: EXIT_INTERRUPTED,
        },
    )


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """The feed the parsed arguments ask for; prints its summary (JSON) on standard output."""
    try:
        summary = _feed(parser, args)
    except OSError as exc:
        msg = f"{exc.filename or args.out}: {exc.strerror or exc}"
        raise CliError(msg, EXIT_BAD_INPUT) from None
    print(json.dumps(summary), flush=True)
    return 0


def _feed(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, Any]:
    from jobs.stream.options import librdkafka_config, parse_key_values

    kafka = _check_output(parser, args)
    options = {
        "fmt": args.format or "json",
        "rows_per_file": 1000 if args.rows_per_file is None else args.rows_per_file,
        "max_files": args.max_files,
        "pace": args.pace,
        "speed": args.speed,
    }
    check_options(**options)  # before loading, so a bad option fails fast
    producer_options = parse_key_values(args.producer_option, "--producer-option")
    if kafka:
        _check_bootstrap_servers(args.kafka_bootstrap_servers)
        librdkafka_config(dict(producer_options))  # a JAAS line it cannot take: before loading
    if args.partitions is not None and args.partitions < 1:
        msg = f"--partitions must be >= 1, got {args.partitions}"
        raise ValueError(msg)
    records = _load(parser, args)
    with ProgressReporter("feed", unit="record" if kafka else "file", enabled=not args.quiet) as progress:
        if kafka:
            return feed_kafka(
                records,
                args.kafka_bootstrap_servers,
                args.topic,
                partitions=args.partitions,
                pace=args.pace,
                speed=args.speed,
                arrival_time=not args.no_arrival_time,
                progress=progress,
                producer_config=dict(producer_options),
            )
        return feed(records, args.out, **options, arrival_time=not args.no_arrival_time, progress=progress)


def _check_output(parser: argparse.ArgumentParser, args: argparse.Namespace) -> bool:
    """Whether the output is Kafka; parser errors for a missing, double or inconsistent output."""
    servers, topic = args.kafka_bootstrap_servers, args.topic
    if servers is None and topic is None:
        if args.out is None:
            parser.error("give --out DIR, or --kafka-bootstrap-servers HOST:PORT --topic NAME")
        if args.producer_option:
            parser.error("--producer-option applies only to Kafka output (--topic)")
        return False
    if args.out is not None:
        parser.error("give either --out or --kafka-bootstrap-servers/--topic, not both")
    if servers is None or topic is None:
        parser.error("Kafka output needs both --kafka-bootstrap-servers HOST:PORT and --topic NAME")
    for flag, value in (("--format", args.format), ("--rows-per-file", args.rows_per_file)):
        if value is not None:
            parser.error(f"{flag} applies only to --out (Kafka values are JSON, one record each)")
    if args.max_files is not None:
        parser.error("--max-files applies only to --out")
    return True


if __name__ == "__main__":
    sys.exit(main())
