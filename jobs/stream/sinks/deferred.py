"""Rows of the deferred tables, kept in the checkpoint between their Delta commits.

Each micro-batch commits ``aggregates`` (and ``quarantine``, when it has rows) to Delta. The rows of
``late_events``, ``watermark_log`` and ``arrivals`` go first to ``CHECKPOINT/stage/pending/batch-N/`` and
are committed for several batches at once, under the ``txnVersion`` of the newest of them: every
``--defer-batches`` batches, when the oldest pending batch is ``--defer-max-delay`` old, and when the query
ends. Each Delta append costs a reconstruction of the table's snapshot state (delta-spark 4.4 answers
``txnVersion`` from it); one commit of three tables every N batches instead of three every batch leaves
the job one idempotent append a batch, as native Spark's sink (docs/performance.md#throughput: the
figures on two machines).

Exactly once, whatever is killed when:

* a batch's pending folder is written durably (files fsynced, then the folder renamed into place) before
  the batch's state is saved, so a batch whose state exists has its deferred rows in the checkpoint or in
  the tables;
* a commit of table ``t`` under ``txnVersion`` M holds the rows of every batch pending at M, so before a
  commit the batches at or below the version ``t`` last committed for this writer (Delta's own record,
  read with ``deltalake``) are left out: they are in ``t`` already (a batch run again after a commit that
  held it, or a commit that reached some tables before a kill);
* folders are removed only after every table's commit, and removing them is not needed for correctness.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq

from jobs.common.schemas import TABLES
from jobs.common.tables import DeltaTables, conform
from jobs.stream.checkpoint.durable import fsync_dir, fsync_file, write_durably
from jobs.stream.checkpoint.layout import PENDING_META, CheckpointLayout, spark_done
from jobs.stream.checkpoint.state import RECOVERY, CheckpointError
from jobs.stream.options import DeferPolicy

log = logging.getLogger("jobs.stream")

#: The tables whose rows wait in the checkpoint for a commit of several batches.
DEFERRED_TABLES = ("late_events", "watermark_log", "arrivals")


@dataclass(frozen=True)
class Pending:
    """One batch's deferred rows in the checkpoint."""

    batch_id: int
    ingest_ms: int
    folder: Path
    # table -> "parquet_file" (a Parquet file written on the driver), "parquet" (a Parquet folder written by
    # the executors) or "arrow" (an Arrow IPC file: checkpoints of earlier versions)
    tables: Mapping[str, str]


class PendingRows:
    """The deferred rows under ``CHECKPOINT/stage/pending``: one folder per batch."""

    def __init__(self, checkpoint: str) -> None:
        self.layout = CheckpointLayout(checkpoint)
        self.root = self.layout.pending
        self.root.mkdir(parents=True, exist_ok=True)
        for tmp in self.layout.pending_unfinished():  # a put killed half-way: its batch runs again
            shutil.rmtree(tmp, ignore_errors=True)

    def batches(self) -> list[Pending]:
        """The pending batches, oldest first."""
        out = []
        for number, folder in self.layout.pending_batches():
            meta = folder / PENDING_META
            try:
                doc = json.loads(meta.read_text(encoding="utf-8"))
                out.append(Pending(number, int(doc["ingest_ms"]), folder, dict(doc["tables"])))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                msg = f"{meta}: unreadable pending rows ({type(exc).__name__}: {exc}); {RECOVERY}"
                raise CheckpointError(msg) from None
        return out

    def put(self, batch_id: int, ingest_ms: int, rows: Mapping[str, Any]) -> None:
        """Keep batch ``batch_id``'s rows (pyarrow tables, or Spark DataFrames) durably, as Parquet.

        The driver writes a pyarrow table as one Parquet file, the executors a DataFrame as a Parquet
        folder; either way the commit reads them back with Spark's reader in the executors, so the rows of
        many batches never pass through the driver again. A batch run again replaces its folder.
        """
        final = self.layout.pending_batch(batch_id)
        tmp = self.layout.pending_batch_tmp(batch_id)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        kinds: dict[str, str] = {}
        for table, data in rows.items():
            if isinstance(data, pa.Table):
                if not data.num_rows:
                    continue
                data = conform(data, TABLES[table])
                file = self.layout.pending_table(tmp, table, "parquet_file")
                pq.write_table(data, str(file))
                fsync_file(file)
                kinds[table] = "parquet_file"
            else:  # a Spark DataFrame (the stage in the executors): written by the executors
                data.write.mode("overwrite").parquet(str(self.layout.pending_table(tmp, table, "parquet")))
                kinds[table] = "parquet"
        write_durably(tmp / PENDING_META, json.dumps({"ingest_ms": ingest_ms, "tables": kinds}).encode())
        fsync_dir(tmp)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        fsync_dir(self.root)

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
                shutil.rmtree(p.folder, ignore_errors=True)


def _read_parts(spark: Any, table: str, parts: list[Pending]) -> Any:
    schema = TABLES[table]
    arrow, parquet = [], []
    for p in parts:
        kind = p.tables[table]
        path = CheckpointLayout.pending_table(p.folder, table, kind)
        try:
            if kind == "arrow":
                arrow.append(feather.read_table(str(path), memory_map=True))
            elif kind == "parquet_file":
                pq.read_metadata(str(path))  # a whole file (its footer is last)
                parquet.append(str(path))
            else:
                if not spark_done(path).exists():  # Spark writes it last
                    msg = "the Parquet folder is incomplete (no _SUCCESS)"
                    raise ValueError(msg)
                parquet.append(str(path))
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
