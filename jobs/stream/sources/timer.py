"""The wall-clock timer: one row in every micro-batch of a live source, so that every trigger runs a batch.

A source whose kind has :attr:`jobs.stream.sources.kinds.SourceKind.timer` may be read with it
(``--clock wall``): its stream gets the timer's rows (:func:`with_timer`), and a batch's records are read
without them (:func:`without_timer`).
"""

from __future__ import annotations

from typing import Any

from jobs.stream.options import TIMER_FILE


def with_timer(spark: Any, stream: Any) -> Any:
    """``stream`` with one timer row in every micro-batch, so that every trigger runs a batch.

    Spark runs a micro-batch only when a source has new data; a live source with a wall-clock ingestion
    clock must still fire windows when no record comes (``--clock wall``). Spark's ``rate-micro-batch``
    source has one new row at every trigger; its rows have ``file`` = :data:`TIMER_FILE` and nulls
    elsewhere, and the job drops them before anything else. Its offsets are in the checkpoint as the
    Kafka source's are, so a replayed batch is the same batch.
    """
    from pyspark.sql import functions as F

    ticks = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", "1").load()
    columns = [
        (F.lit(TIMER_FILE) if name == "file" else F.lit(None).cast(kind)).alias(name)
        for name, kind in stream.dtypes
    ]
    return stream.unionByName(ticks.select(*columns))


def without_timer(batch: Any) -> Any:
    """``batch`` less the timer's row: it made the batch, it is not a record."""
    return batch.filter(batch["file"] != TIMER_FILE)
