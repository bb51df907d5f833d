"""Spark's rate source as records, for load tests (``--format rate``): one source of :mod:`.kinds`.

Its batches have one name, :data:`jobs.stream.options.RATE_FILE`, and its records' keys are their
sequence numbers.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from jobs.stream.options import RATE_FILE, Fields, RateOptions
from jobs.stream.sources.readers import screen_files
from jobs.stream.sources.source_options import SourceOptions
from jobs.stream.sources.validate import CORRUPT


def open_stream(spark: Any, options: SourceOptions) -> Any:
    """The rate source's stream of records (:func:`rate_stream`)."""
    return rate_stream(spark, options.rate, options.fields)


def batch_files(batch: Any, batch_id: int, options: SourceOptions) -> tuple[Any, list[str] | None, pa.Table]:
    """A rate batch, its one name, and no file set aside."""
    return batch, [RATE_FILE], screen_files([])[1]


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
