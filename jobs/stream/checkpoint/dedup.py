"""Duplicate event ids (``--dedup-horizon-ms``): the input is at-least-once, the job drops repeats.

The contract: **without** ``--dedup-horizon-ms`` event ids are not deduplicated (a record sent twice is
counted twice). **With** it, a valid record whose ``event_id`` is the same as that of an earlier valid
record is quarantined as ``duplicate_event_id``, when the earlier one is

- in the same micro-batch (earlier in arrival order: arrival time, file, record; the first is kept), or
- in an earlier micro-batch and arrived at most the horizon before the latest arrival the job had read
  by the end of that batch (the ingestion clock).

Only the id is compared, not the record's other fields. Ids of the horizon are kept under
``CHECKPOINT/dedup`` as one Arrow IPC file per batch (``ids-N.arrow``: the ids known after batch N, with
their arrival times; each written whole, once, the last three kept). Batch N reads the newest file of a batch
before N, so a replayed batch takes the same decisions (exactly once). With deduplication on, every batch
is read by Spark's reader (the Arrow path does not collect ids).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from jobs.stream.checkpoint.layout import CheckpointLayout
from watermark import storage
from watermark.storage import Location

#: The ids kept between batches.
IDS_SCHEMA = pa.schema([("event_id", pa.string()), ("arrival_time_ms", pa.int64())])
DUPLICATE = "duplicate_event_id"


class SeenIds:
    """The event ids of the horizon, per batch, under ``CHECKPOINT/dedup``."""

    keep = 3

    def __init__(self, checkpoint: str | Location, horizon_ms: int) -> None:
        if horizon_ms < 0:
            msg = f"--dedup-horizon-ms must be 0 or more, got {horizon_ms}"
            raise ValueError(msg)
        self.layout = CheckpointLayout(checkpoint)
        self.root = self.layout.dedup
        self.horizon_ms = horizon_ms

    def _path(self, batch_id: int) -> Location:
        return self.layout.seen_ids(batch_id)

    def _batches(self) -> list[int]:
        return self.layout.seen_ids_batches()

    def before(self, batch_id: int) -> pa.Table:
        """The ids known before batch ``batch_id`` (empty for the first)."""
        earlier = [b for b in self._batches() if b < batch_id]
        if not earlier:
            return IDS_SCHEMA.empty_table()
        path = self._path(earlier[-1])
        try:
            table = pa.ipc.open_file(pa.BufferReader(storage.read_bytes(path))).read_all()
        except (OSError, pa.ArrowInvalid) as exc:
            msg = f"{path}: the deduplication state cannot be read ({exc}); restore it, or a new checkpoint"
            raise RuntimeError(msg) from exc
        if not table.schema.equals(IDS_SCHEMA):
            msg = f"{path}: not a deduplication state (schema {table.schema})"
            raise RuntimeError(msg)
        return table

    def save(self, batch_id: int, known: pa.Table, new: pa.Table) -> pa.Table:
        """Keep ``known`` plus the ``new`` ids of batch ``batch_id``, within the horizon; returns them."""
        ids = pa.concat_tables([known, new.select(IDS_SCHEMA.names).cast(IDS_SCHEMA)])
        if ids.num_rows:
            clock = pc.max(ids.column("arrival_time_ms")).as_py()
            ids = ids.filter(pc.greater_equal(ids.column("arrival_time_ms"), clock - self.horizon_ms))
        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, IDS_SCHEMA) as writer:
            writer.write_table(ids.combine_chunks())
        storage.write_bytes(self._path(batch_id), sink.getvalue().to_pybytes())  # whole, once
        for old in self._batches()[: -self.keep]:
            storage.remove(self._path(old))
        return ids


def mark_duplicates(spark: Any, rows: Any, seen: SeenIds, batch_id: int) -> Any:
    """``rows`` (validated: ``reason`` null when valid) with ``duplicate_event_id`` for repeated ids.

    Saves the ids known after the batch (one small collect of the batch's first occurrences).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from jobs.common.session import arrow_frame

    known = seen.before(batch_id)
    valid = F.col("reason").isNull()
    order = Window.partitionBy(valid, "event_id").orderBy("arrival_time_ms", "file", "line")
    first = F.when(valid, F.row_number().over(order) == 1)
    marked = rows.withColumn("_first", first)
    if known.num_rows:
        earlier = arrow_frame(spark, known.select(["event_id"])).withColumnRenamed("event_id", "_seen")
        marked = marked.join(F.broadcast(earlier), marked["event_id"] == earlier["_seen"], "left")
        repeat = F.col("_seen").isNotNull() | ~F.col("_first")
    else:
        repeat = ~F.col("_first")
    reason = F.coalesce(F.col("reason"), F.when(repeat, F.lit(DUPLICATE)))
    marked = marked.withColumn("reason", reason).drop("_first", "_seen")
    new = marked.filter(F.col("reason").isNull()).select("event_id", "arrival_time_ms").toArrow()
    seen.save(batch_id, known, new)
    return marked
