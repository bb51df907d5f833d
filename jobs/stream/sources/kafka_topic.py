"""A Kafka topic as records (``--format kafka``): one source of :mod:`.kinds`.

Each value is a JSON event, parsed as landing files are; a batch's names are its ``TOPIC/PARTITION``s and
a record's key its partition and offset. With ``--clock wall`` the stream carries the timer's rows
(:mod:`jobs.stream.sources.timer`).
"""

from __future__ import annotations

import logging
from typing import Any

import pyarrow as pa

from jobs.stream.options import Fields, KafkaOptions
from jobs.stream.sources.readers import screen_files
from jobs.stream.sources.source_options import SourceOptions
from jobs.stream.sources.timer import with_timer, without_timer
from jobs.stream.sources.validate import CORRUPT, SOURCE_COLUMNS, typed_json_schema

log = logging.getLogger("jobs.stream")


def open_stream(spark: Any, options: SourceOptions) -> Any:
    """The topic's stream of records (:func:`kafka_stream`), with the timer's rows under ``--clock wall``."""
    stream = kafka_stream(spark, options.kafka, options.fields)
    return with_timer(spark, stream) if options.timer else stream


def batch_files(batch: Any, batch_id: int, options: SourceOptions) -> tuple[Any, list[str] | None, pa.Table]:
    """A Kafka batch without the timer's row, its ``TOPIC/PARTITION`` names, and no file set aside."""
    if options.timer:
        batch = without_timer(batch)
    return batch, kafka_batch_files(batch), screen_files([])[1]


def kafka_stream(spark: Any, kafka: KafkaOptions, fields: Fields) -> Any:
    """A Kafka topic as records: each value a JSON event, parsed as landing files are.

    ``file`` is ``TOPIC/PARTITION`` and the record's number (``_seq``) its offset, so a quarantined value
    names its topic, partition and offset. The watermark partition is the Kafka partition and the arrival
    time the record's timestamp (:data:`SOURCE_COLUMNS`), whatever the value holds: give production topics
    ``message.timestamp.type=LogAppendTime`` so that it is the broker's ingestion time. Spark keeps the
    offsets in the query's checkpoint, so a replayed batch reads the same records.

    The source's options are :meth:`KafkaOptions.reader_options`: the flags' and the checked
    ``--kafka-option`` pairs (security, group ids, where a new query starts, ``failOnDataLoss``); they are
    logged with their secrets as ``***`` (:meth:`KafkaOptions.describe`). Spark writes no source option to
    the checkpoint (its offset log holds offsets and SQL settings).
    """
    from pyspark.sql import functions as F

    log.info("Kafka source: %s", kafka.describe())
    reader = spark.readStream.format("kafka")
    for key, option in kafka.reader_options().items():
        reader = reader.option(key, option)
    stream = reader.load()
    value = F.col("value").cast("string")
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}
    parsed = F.from_json(value, typed_json_schema(fields), options).alias("_rec")
    names = list(dict.fromkeys(vars(fields).values()))
    # A value that is not a JSON object at all parses to null, and one that is not valid UTF-8 would
    # parse with U+FFFD in place of its bad bytes: either is kept whole as a corrupt record.
    # (``_value``: in the second projection a bare ``value`` is not the record's value.)
    text = F.col("_value")
    corrupt = F.coalesce(
        F.when(~F.is_valid_utf8(text), text),
        F.col(f"_rec.{CORRUPT}"),
        F.when(F.col("_rec").isNull(), F.coalesce(text, F.lit(""))),
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
