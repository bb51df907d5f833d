"""Where records come from: landing files (JSON lines, CSV, Parquet), a Kafka topic or Spark's rate source.

Every source gives records as ``file`` plus every input field (text, or typed where the reader types them)
and the corrupt-record column. Each micro-batch's records are then numbered: ``file`` becomes the index of
the record's landing file among the batch's files and ``line`` a record id, which :class:`RecordNumbers`
turns into the record's 0-based number in its file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from jobs.arrow_path import local_path
from jobs.stream.options import FORMATS, RATE_FILE, Fields, JobOptions, KafkaOptions, RateOptions
from jobs.stream.validate import CORRUPT, SOURCE_COLUMNS, typed_json_schema


def number_records(batch: Any, files: list[str]) -> Any:
    """A micro-batch of the source to ``(file, line, <fields>, <corrupt>)`` with compact record keys.

    ``file`` becomes the index of the record's landing file in ``files`` (the batch's files in landing
    order, :func:`landing_order`, so it orders records as the files landed) and ``line`` a
    ``monotonically_increasing_id``: it
    increases along each file, since the file source keeps a file's splits in order, and is the same in
    every action and on replay. :class:`RecordNumbers` turns it into the record's 0-based number in its file.
    """
    from pyspark.sql import functions as F

    pairs = [(spelling, i) for i, path in enumerate(files) for spelling in _uri_spellings(path)]
    index = F.create_map(*[F.lit(x) for pair in pairs for x in pair])
    line = F.col("_seq") if "_seq" in batch.columns else F.monotonically_increasing_id()
    return (
        batch.select(
            "*",
            F.element_at(index, F.col("file")).alias("_file"),
            line.alias("line"),
        )
        .drop("file")
        .withColumnRenamed("_file", "file")
    )


def _uri_spellings(path: str) -> list[str]:
    """A landing file's URI as the source log and ``_metadata.file_path`` may spell it."""
    if path.startswith("file:///"):
        return [path, "file:/" + path[len("file:///") :]]
    if path.startswith("file:/"):
        return [path, "file:///" + path[len("file:/") :]]
    return [path]


def logged_batch_files(checkpoint: str, batch_id: int) -> list[str] | None:
    """The landing files of micro-batch ``batch_id`` from the file source's log, or None when not found.

    The log (``query/sources/0``) has one file per batch (``N``, JSON lines after a version line) until
    Spark compacts it into ``N.compact`` files that hold every earlier entry with its ``batchId``.
    """
    root = Path(checkpoint) / "query" / "sources" / "0"
    candidates = [root / str(batch_id)]
    compacts = sorted(
        (int(p.name.split(".")[0]), p) for p in root.glob("*.compact") if p.name.split(".")[0].isdigit()
    )
    candidates += [p for n, p in compacts if n >= batch_id][:1]
    for path in candidates:
        if not path.exists():
            continue
        entries = [json.loads(line) for line in path.read_text().splitlines()[1:] if line.strip()]
        mine = [e for e in entries if int(e.get("batchId", batch_id)) == batch_id]
        if mine:
            return landing_order((e["path"], int(e.get("timestamp", 0))) for e in mine)
    return None


def landing_order(files: Iterable[tuple[str, int]]) -> list[str]:
    """Paths of ``(path, modification time)`` pairs in the order the job reads them: by time, then by name.

    Object stores keep whole seconds, so files landed within a second share a modification time, and
    Spark's file source orders files by modification time alone; the name decides between them here.

    >>> landing_order([("file:///in/b.json", 1_000), ("file:///in/c.json", 0), ("file:///in/a.json", 1_000)])
    ['file:///in/c.json', 'file:///in/a.json', 'file:///in/b.json']
    """
    return [path for path, _ in sorted(files, key=lambda f: (f[1], f[0]))]


def modified_ms(uri: str) -> int:
    """Modification time of a local landing file in epoch ms (0 for a remote or missing file)."""
    path = local_path(uri)
    try:
        return int(os.path.getmtime(path) * 1000) if path is not None else 0
    except OSError:
        return 0


class RecordNumbers:
    """0-based record number within its file for the record keys ``(file index, id)`` of one batch.

    Built from the keys of every record of the batch (valid or not); ids are unique across the batch.

    >>> import numpy as np
    >>> numbers = RecordNumbers(np.array([1, 0, 1, 0]), np.array([9, 3, 2**33, 4]))
    >>> numbers.lookup(np.array([2**33, 4, 9])).tolist()
    [1, 1, 0]
    """

    def __init__(self, file_ids: np.ndarray, ids: np.ndarray) -> None:
        fids = np.asarray(file_ids, np.int64)
        keys = np.asarray(ids, np.int64)
        order = np.lexsort((keys, fids))
        fsorted = fids[order]
        first = np.searchsorted(fsorted, fsorted, side="left")
        numbers = np.empty(order.size, np.int64)
        numbers[order] = np.arange(order.size) - first
        by_id = np.argsort(keys, kind="stable")
        self._ids = keys[by_id]
        self._numbers = numbers[by_id]

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        """Record numbers of ``ids`` (each must be a key the table was built from)."""
        pos = np.searchsorted(self._ids, np.asarray(ids, np.int64))
        return self._numbers[pos]


def oldest_input_ms(files: list[str] | None, started_s: float) -> int:
    """When the batch's oldest input entered the system: its oldest local landing file's modification time.

    Input that is not a local file (the rate source, object stores) counts from the batch's start.
    """
    oldest = started_s
    for uri in files or []:
        path = local_path(uri)
        if path is not None:
            try:
                oldest = min(oldest, os.path.getmtime(path))
            except OSError:
                pass
    return int(oldest * 1000)


def _oldest_file(directory: str) -> Path | None:
    files = [p for p in Path(directory).iterdir() if p.is_file() and not p.name.startswith((".", "_"))]
    return min(files, key=lambda p: (p.stat().st_mtime_ns, p.name)) if files else None


def csv_columns(directory: str, default: list[str]) -> list[str]:
    """Column names of a CSV landing directory: the header of its oldest file, or ``default``."""
    import csv

    first = _oldest_file(directory)
    if first is None:
        return default
    with first.open(newline="", encoding="utf-8", errors="replace") as handle:
        header = next(csv.reader(handle), None)
    if not header:
        msg = f"{first}: a CSV landing file must start with a header line"
        raise ValueError(msg)
    return header


def source_stream(spark: Any, options: JobOptions) -> Any:
    """The input as a stream of records: ``file`` plus every input field as text (and the corrupt record).

    JSON is read with times as integers and the value as a number (:func:`typed_json_schema`); a record
    that does not fit lands in the corrupt-record column and :func:`validate` re-reads it as text. CSV is
    read with every field as text; Parquet keeps its schema (taken from the oldest landing file). Either
    way :func:`validate` checks the types, with a reason. The rate source generates records for load
    tests (see :class:`RateOptions`).
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    names = list(dict.fromkeys(vars(options.fields).values()))
    if options.format == "rate":
        return rate_stream(spark, options.rate, options.fields)
    if options.format == "kafka":
        return kafka_stream(spark, options.kafka, options.fields)
    text = T.StringType()
    if options.format == "json":
        schema = typed_json_schema(options.fields)
        reader = spark.readStream.format("json").schema(schema)
    elif options.format == "csv":
        columns = csv_columns(options.input, names)
        schema = T.StructType([T.StructField(n, text) for n in [*columns, CORRUPT]])
        # enforceSchema=false: Spark checks every file's header against the first one's (by position).
        reader = (
            spark.readStream.format("csv")
            .schema(schema)
            .option("header", "true")
            .option("enforceSchema", "false")
        )
    elif options.format == "parquet":
        first = _oldest_file(options.input)
        if first is not None:
            schema = spark.read.parquet(str(first)).schema
        else:
            schema = T.StructType([T.StructField(n, text) for n in names])
        reader = spark.readStream.format("parquet").schema(schema)
    else:
        msg = f"--format must be one of {', '.join(FORMATS)}, got {options.format!r}"
        raise ValueError(msg)
    if options.format != "parquet":
        reader = reader.option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", CORRUPT)
    if options.max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", str(options.max_files_per_trigger))
    stream = reader.load(options.input)
    present = set(stream.columns)

    def field(name: str) -> Any:
        if name in present:  # as read: validate() checks text fields and takes typed ones as they are
            return F.col(f"`{name}`")
        return F.lit(None).cast("string").alias(name)

    corrupt = F.col(CORRUPT) if CORRUPT in present else F.lit(None).cast("string").alias(CORRUPT)
    return stream.select(F.col("_metadata.file_path").alias("file"), *[field(n) for n in names], corrupt)


def rate_stream(spark: Any, rate: RateOptions, fields: Fields) -> Any:
    """Spark's rate source as records, for load tests.

    The sequence number is the event id and the record key; key and delay are hashed from it; arrival
    time is the rate source's timestamp and event time the arrival minus the delay.
    """
    from pyspark.sql import functions as F

    if rate.rows_per_batch is None:
        stream = (
            spark.readStream.format("rate")
            .option("rowsPerSecond", str(rate.rows_per_second))
            .option("numPartitions", str(rate.num_partitions))
            .load()
        )
    else:  # deterministic batches (RateOptions.rows_per_batch)
        stream = (
            spark.readStream.format("rate-micro-batch")
            .option("rowsPerBatch", str(rate.rows_per_batch))
            .option("startTimestamp", str(rate.start_ms))
            .option("advanceMillisPerBatch", str(max(1, 1000 * rate.rows_per_batch // rate.rows_per_second)))
            .option("numPartitions", str(rate.num_partitions))
            .load()
        )
    seq = F.col("value")
    tp = F.unix_millis("timestamp")
    delay = F.pmod(F.xxhash64(seq, F.lit("delay")), F.lit(rate.max_delay_ms + 1))
    values = {
        "event_id": seq.cast("string"),
        "key": F.concat(F.lit("k"), F.pmod(F.xxhash64(seq, F.lit("key")), F.lit(rate.keys)).cast("string")),
        "partition": F.pmod(seq, F.lit(rate.partitions)).cast("string"),
        "event_time_ms": tp - delay,
        "arrival_time_ms": tp,
        "value": F.pmod(seq, F.lit(1000)) / F.lit(10.0),
    }
    slots = dict(zip(vars(Fields()).values(), vars(fields).values(), strict=True))  # default -> given name
    named = {name: values[default] for default, name in slots.items()}
    return stream.select(
        F.lit(RATE_FILE).alias("file"),
        *[column.alias(name) for name, column in named.items()],
        F.lit(None).cast("string").alias(CORRUPT),
        seq.alias("_seq"),
    )


def kafka_stream(spark: Any, kafka: KafkaOptions, fields: Fields) -> Any:
    """A Kafka topic as records: each value a JSON event, parsed as landing files are.

    ``file`` is ``TOPIC/PARTITION`` and the record's number (``_seq``) its offset, so a quarantined value
    names its topic, partition and offset. The watermark partition is the Kafka partition and the arrival
    time the record's timestamp (:data:`SOURCE_COLUMNS`), whatever the value holds: give production topics
    ``message.timestamp.type=LogAppendTime`` so that it is the broker's ingestion time. Spark keeps the
    offsets in the query's checkpoint, so a replayed batch reads the same records.
    """
    from pyspark.sql import functions as F

    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("subscribe", kafka.topic)
        .option("startingOffsets", kafka.starting_offsets)
        .option("failOnDataLoss", "true")
    )
    if kafka.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(kafka.max_offsets_per_trigger))
    stream = reader.load()
    value = F.col("value").cast("string")
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}
    parsed = F.from_json(value, typed_json_schema(fields), options).alias("_rec")
    names = list(dict.fromkeys(vars(fields).values()))
    # A value that is not a JSON object at all parses to null: it is kept whole as a corrupt record.
    corrupt = F.coalesce(
        F.col(f"_rec.{CORRUPT}"), F.when(F.col("_rec").isNull(), F.coalesce(value, F.lit("")))
    )
    return stream.select(
        F.concat_ws("/", F.col("topic"), F.col("partition").cast("string")).alias("file"),
        parsed,
        F.col("partition").cast("string").alias(SOURCE_COLUMNS["partition"]),
        F.unix_millis(F.col("timestamp")).alias(SOURCE_COLUMNS["tp"]),
        F.col("offset").alias("_seq"),
        value.alias("_value"),
    ).select(
        "file",
        *[F.col(f"_rec.`{n}`").alias(n) for n in names],
        corrupt.alias(CORRUPT),
        SOURCE_COLUMNS["partition"],
        SOURCE_COLUMNS["tp"],
        "_seq",
    )


def kafka_batch_files(batch: Any) -> list[str]:
    """The ``TOPIC/PARTITION`` names of a Kafka micro-batch, in partition order (one small action)."""
    pairs = {
        (r[0], int(r[1])) for r in batch.select("file", SOURCE_COLUMNS["partition"]).distinct().collect()
    }
    return [name for name, _ in sorted(pairs, key=lambda p: (p[0].rsplit("/", 1)[0], p[1]))]
