"""Rows of the deferred tables, kept in the checkpoint between their Delta commits.

Each micro-batch commits ``aggregates`` to Delta. The rows of ``late_events``, ``quarantine``,
``watermark_log`` and ``arrivals`` go first to ``CHECKPOINT/stage/pending/batch-N/`` and are committed for
several batches at once, under the ``txnVersion`` of the newest of them: every ``--defer-batches`` batches,
when the oldest pending batch is ``--defer-max-delay`` old, and when the query ends. Each Delta append
costs a reconstruction of the table's snapshot state (delta-spark 4.4 answers ``txnVersion`` from it); one
commit of four tables every N batches instead of up to four every batch leaves the job one idempotent
append a batch, as native Spark's sink (docs/performance.md#throughput: the figures on two machines).

Exactly once, whatever is killed when:

* a batch's pending folder is written before the batch's state is saved, its ``meta.json`` last (each
  file whole: :func:`watermark.storage.write_bytes`, or Spark's committer with ``_SUCCESS`` last), so a
  batch whose state exists has its deferred rows in the checkpoint or in the tables; a folder without
  ``meta.json`` is a put that was killed (removed at start: its batch runs again, as it was not committed);
* a commit of table ``t`` under ``txnVersion`` M holds the rows of every batch pending at M, so before a
  commit the batches at or below the version ``t`` last committed for this writer (Delta's own record,
  read with ``deltalake``) are left out: they are in ``t`` already (a batch run again after a commit that
  held it, or a commit that reached some tables before a kill);
* folders are removed only after every table's commit, and removing them is not needed for correctness.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq

from jobs.common.schemas import TABLES
from jobs.common.tables import DeltaTables, conform
from jobs.stream.checkpoint.layout import PENDING_META, CheckpointLayout, spark_done
from jobs.stream.checkpoint.state import RECOVERY, CheckpointError, parquet_bytes, remove_entry
from jobs.stream.sinks.sink_options import DeferPolicy
from watermark import storage
from watermark.storage import Location

log = logging.getLogger("jobs.stream")

#: The tables whose rows wait in the checkpoint for a commit of several batches.
DEFERRED_TABLES = ("late_events", "quarantine", "watermark_log", "arrivals")


@dataclass(frozen=True)
class Pending:
    """One batch's deferred rows in the checkpoint."""

    batch_id: int
    ingest_ms: int
    folder: Location
    # table -> "parquet_file" (a Parquet file written on the driver), "parquet" (a Parquet folder written by
    # the executors) or "arrow" (an Arrow IPC file: checkpoints of earlier versions)
    tables: Mapping[str, str]


class PendingRows:
    """The deferred rows under ``CHECKPOINT/stage/pending``: one folder per batch."""

    def __init__(self, checkpoint: str | Location) -> None:
        self.layout = CheckpointLayout(checkpoint)
        self.root = self.layout.pending
        storage.make_dirs(self.root)
        for tmp in self.layout.pending_unfinished():  # a put of an earlier version killed half-way
            storage.remove_tree(tmp)
        for _number, folder in self.layout.pending_batches():
            if not storage.exists(folder / PENDING_META):  # a put killed half-way: its batch runs again
                storage.remove_tree(folder)
        # The metadata of the batches read or put by this run: a complete batch's never changes (this run
        # is the checkpoint's one writer), so each is read once, not at every batch (on an object store a
        # request each).
        self._known: dict[int, Pending] = {}

    def batches(self) -> list[Pending]:
        """The pending batches (those whose put completed), oldest first."""
        out = []
        for number, folder in self.layout.pending_batches():
            known = self._known.get(number)
            if known is not None and known.folder == folder:
                out.append(known)
                continue
            meta = folder / PENDING_META
            try:
                doc = json.loads(storage.read_text(meta))
                out.append(Pending(number, int(doc["ingest_ms"]), folder, dict(doc["tables"])))
                self._known[number] = out[-1]
            except FileNotFoundError:
                continue  # being written, or a put killed half-way
            except (OSError, ValueError, KeyError, TypeError) as exc:
                msg = f"{meta}: unreadable pending rows ({type(exc).__name__}: {exc}); {RECOVERY}"
                raise CheckpointError(msg) from None
        return out

    def put(self, batch_id: int, ingest_ms: int, rows: Mapping[str, Any]) -> None:
        """Keep batch ``batch_id``'s rows (pyarrow tables, or Spark DataFrames) as Parquet, meta last.

        The driver writes a pyarrow table as one Parquet file, the executors a DataFrame as a Parquet
        folder; either way the commit reads them back with Spark's reader in the executors, so the rows of
        many batches never pass through the driver again. A batch run again replaces its folder: its
        ``meta.json`` goes first, so the folder is never taken for complete while it is rewritten.
        """
        folder = self.layout.pending_batch(batch_id)
        self._known.pop(batch_id, None)
        storage.remove(folder / PENDING_META)
        for entry in storage.listdir(folder):
            remove_entry(entry)
        kinds: dict[str, str] = {}
        for table, data in rows.items():
            if isinstance(data, pa.Table):
                if not data.num_rows:
                    continue
                data = conform(data, TABLES[table])
                file = self.layout.pending_table(folder, table, "parquet_file")
                storage.write_bytes(file, parquet_bytes(data))
                kinds[table] = "parquet_file"
            else:  # a Spark DataFrame (the stage in the executors): written by the executors
                data.write.mode("overwrite").parquet(
                    self.layout.pending_table(folder, table, "parquet").spark
                )
                kinds[table] = "parquet"
        storage.write_bytes(
            folder / PENDING_META, json.dumps({"ingest_ms": ingest_ms, "tables": kinds}).encode()
        )
        self._known[batch_id] = Pending(batch_id, ingest_ms, folder, kinds)

    def due(self, batch_id: int, ingest_ms: int, policy: DeferPolicy) -> bool:
        """Whether batch ``batch_id`` (pending already) commits the deferred tables."""
        pending = [p for p in self.batches() if p.batch_id <= batch_id]
        if not pending:
            return False
        return len(pending) >= policy.batches or ingest_ms - pending[0].ingest_ms >= policy.max_delay_ms

    def rows(self, spark: Any, tables: DeltaTables, through: int) -> dict[str, Any]:
        """Per deferred table, the pending rows of batches up to ``through`` that it does not hold yet.

        Each value is a Spark DataFrame over the pending Parquet files (read by the executors); tables with
        nothing to commit are left out.
        """
        pending = [p for p in self.batches() if p.batch_id <= through]
        out: dict[str, Any] = {}
        for table in DEFERRED_TABLES:
            parts = [p for p in pending if table in p.tables]
            if not parts:
                continue
            committed = tables.committed_version(table)
            if committed is not None:
                parts = [p for p in parts if p.batch_id > committed]
            if parts:
                out[table] = _read_parts(spark, table, parts)
        return out

    def remove(self, through: int) -> None:
        """Forget the batches up to ``through`` (their rows are committed)."""
        for p in self.batches():
            if p.batch_id <= through:
                self._known.pop(p.batch_id, None)
                storage.remove(p.folder / PENDING_META)  # first: a folder without it is never read
                storage.remove_tree(p.folder)


def _read_parts(spark: Any, table: str, parts: list[Pending]) -> Any:
    schema = TABLES[table]
    arrow, parquet = [], []
    for p in parts:
        kind = p.tables[table]
        path = CheckpointLayout.pending_table(p.folder, table, kind)
        try:
            if kind == "arrow":
                arrow.append(feather.read_table(storage.open_input_file(path)))
            elif kind == "parquet_file":
                pq.read_metadata(storage.open_input_file(path))  # a whole file (its footer is last)
                parquet.append(path.spark)
            else:
                if not storage.exists(spark_done(path)):  # Spark writes it last
                    msg = "the Parquet folder is incomplete (no _SUCCESS)"
                    raise ValueError(msg)
                parquet.append(path.spark)
        except (OSError, pa.ArrowException, ValueError) as exc:
            msg = f"{path}: unreadable pending rows ({type(exc).__name__}: {exc}); {RECOVERY}"
            raise CheckpointError(msg) from None
    from jobs.common.session import arrow_frame

    if not parquet:
        return arrow_frame(spark, pa.concat_tables(arrow))
    frame = spark.read.schema(_ddl(schema)).parquet(*parquet)
    if arrow:
        frame = arrow_frame(spark, pa.concat_tables(arrow)).select(*schema.names).unionByName(frame)
    return frame


def _ddl(schema: pa.Schema) -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)
