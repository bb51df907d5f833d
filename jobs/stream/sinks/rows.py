"""The rows a batch on the driver writes to each table, as pyarrow tables in the tables' schemas.

``aggregates`` (windows fired or flushed), ``quarantine`` (invalid records), ``late_events`` (each with the
watermark it missed), ``arrivals`` (every valid record's partition and times) and ``watermark_log`` (one row
per partition that arrived in the batch or is active, and a last row for each partition the batch forgot).
Records are named by their landing file and record number (:class:`RecordKeys`). The stage
in the executors builds the same rows in Spark (:mod:`jobs.stream.stage.executors`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from jobs.common.schemas import AGGREGATES_SCHEMA, LATE_SCHEMA
from jobs.stream.sources.readers import RecordNumbers
from watermark.config import PipelineConfig
from watermark.partitions.combine import PartitionedWatermark


class RecordKeys:
    """``(file path, record number)`` columns for a batch's compact record keys ``(file index, id)``.

    ``files``: the batch's files (their index is the key's ``file``); ``numbers`` turns an id into the
    record's number in its file, except on Kafka (``offsets``), where a record's number is its offset.
    """

    def __init__(self, files: list[str], numbers: RecordNumbers | None, *, offsets: bool) -> None:
        self.files, self.numbers, self.offsets = files, numbers, offsets

    def __call__(self, table: pa.Table) -> tuple[pa.Array, pa.Array]:
        """The ``file`` and ``line`` columns of ``table``'s rows."""
        paths = pa.array(self.files, pa.string()).take(table.column("file").combine_chunks())
        if self.offsets:  # a record's number is its offset in its partition
            return paths, table.column("line").combine_chunks().cast(pa.int64())
        assert self.numbers is not None
        return paths, pa.array(self.numbers.lookup(table.column("line").to_numpy()), pa.int64())


def quarantine_rows(bad: pa.Table, keys: RecordKeys, batch_id: int, ingest_ms: int) -> pa.Table:
    """``quarantine`` rows of the batch's invalid records (``raw, reason, file, line``)."""
    n = bad.num_rows
    paths, lines = keys(bad)
    return pa.table(
        {
            "raw": bad.column("raw"),
            "reason": bad.column("reason"),
            "file": paths,
            "line": lines,
            "batch_id": np.full(n, batch_id, np.int64),
            "ingested_at_ms": np.full(n, ingest_ms, np.int64),
        }
    )


def late_rows(
    late: pa.Table, narrow: pa.Table, result: Any, keys: RecordKeys, batch_id: int, ingest_ms: int
) -> pa.Table:
    """``late_events`` rows of the batch's late records, with the watermark each missed (``result``'s)."""
    if not late.num_rows:
        return LATE_SCHEMA.empty_table()
    cols = late.schema.names
    # The watermark each late row missed, by its record key (file, line): a Kafka record's line is its
    # offset, unique only within its partition (its file).
    rows = narrow.select(["file", "line"]).append_column("row", pa.array(np.arange(narrow.num_rows)))
    found_keys = late.select(["file", "line"]).append_column("at", pa.array(np.arange(late.num_rows)))
    found = found_keys.join(rows, ["file", "line"], join_type="left outer", use_threads=False).sort_by("at")
    if found.num_rows != late.num_rows or found.column("row").null_count:
        msg = "late rows that are not among the batch's records"
        raise RuntimeError(msg)
    wm = result.wm_missed[found.column("row").to_numpy()]
    te = late.column("event_time_ms").to_numpy()
    n = late.num_rows
    paths, lines = keys(late)
    return pa.table(
        {
            **{c: late.column(c) for c in cols[:6]},
            "watermark_ms": wm,
            "late_by_ms": wm - te,
            "file": paths,
            "line": lines,
            "batch_id": np.full(n, batch_id, np.int64),
            "reconciled": np.zeros(n, bool),
            "ingested_at_ms": np.full(n, ingest_ms, np.int64),
        }
    )


def arrival_rows(ordered: pa.Table, batch_id: int, ingest_ms: int) -> pa.Table:
    """``arrivals`` rows of the batch's valid records (in arrival order)."""
    n = ordered.num_rows
    return pa.table(
        {
            "partition": ordered.column("partition"),
            "event_time_ms": ordered.column("event_time_ms"),
            "arrival_time_ms": ordered.column("arrival_time_ms"),
            "batch_id": np.full(n, batch_id, np.int64),
            "ingested_at_ms": np.full(n, ingest_ms, np.int64),
        }
    )


def partition_counts(narrow: pa.Table, result: Any) -> dict[str, dict[str, int]]:
    """Each partition's rows of a batch on the driver path: events, late, stragglers, max event time."""
    encoded = narrow.column("partition").combine_chunks().dictionary_encode()
    part = encoded.indices.to_numpy()
    te = narrow.column("event_time_ms").to_numpy()
    out = {}
    for i, key in enumerate(encoded.dictionary.to_pylist()):
        mine = part == i
        out[str(key)] = {
            "events": int(mine.sum()),
            "late": int((result.late & mine).sum()),
            "stragglers": int(((result.classes == 1) & mine).sum()),
            "max_te": int(te[mine].max()),
        }
    return out


def watermark_log_rows(
    watermark: PartitionedWatermark,
    counts: dict[str, dict[str, int]],
    batch_id: int,
    config: PipelineConfig,
    ingest_ms: int,
    evicted: Mapping[str, int] | None = None,
) -> list[dict[str, Any]]:
    """The batch's ``watermark_log`` rows; ``counts``: each partition's rows of the batch.

    One row per partition that arrived in the batch or is active (not idle: ``idle_timeout_ms``) or holds
    the watermark back, so that silent partitions cost no row; and for each partition the batch forgot
    (``evicted``, :func:`jobs.stream.stage.driver.evict_partitions`) one last row with
    ``partition_watermark_ms`` null and no events: the latest row of a partition having a null
    ``partition_watermark_ms`` means the partition was forgotten and holds no open window.
    """
    active = set(watermark.active_partitions())
    rows = []
    now = int(time.time() * 1000)
    for key, gen in watermark.generators.items():
        mine = counts.get(str(key), {})
        if not mine and key not in active and key != watermark.holdback_partition:
            continue
        diag = gen.diagnostics()
        rows.append(
            {
                "batch_id": batch_id,
                "partition": str(key),
                "partition_watermark_ms": gen.watermark_ms,
                "global_watermark_ms": watermark.watermark_ms,
                "max_event_time_ms": mine.get("max_te"),
                "events": mine.get("events", 0),
                "late": mine.get("late", 0),
                "stragglers": mine.get("stragglers", 0),
                "learned_delay_ms": diag.get("delay_ms"),
                "sensitivity": diag.get("sensitivity"),
                "drifts": diag.get("drifts"),
                "holds_back": key == watermark.holdback_partition,
                "active": key in active,
                "strategy": config.strategy,
                "config_version": config.version,
                "ingested_at_ms": ingest_ms,
                "processed_at_ms": now,
            }
        )
    for key in evicted or {}:
        rows.append(
            {
                "batch_id": batch_id,
                "partition": str(key),
                "partition_watermark_ms": None,
                "global_watermark_ms": watermark.watermark_ms,
                "max_event_time_ms": None,
                "events": 0,
                "late": 0,
                "stragglers": 0,
                "learned_delay_ms": None,
                "sensitivity": None,
                "drifts": None,
                "holds_back": False,
                "active": False,
                "strategy": config.strategy,
                "config_version": config.version,
                "ingested_at_ms": ingest_ms,
                "processed_at_ms": now,
            }
        )
    return rows


def live_rows(log_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``watermark_log`` rows of partitions still known (without the last rows of forgotten ones)."""
    return [row for row in log_rows if row["partition_watermark_ms"] is not None]


def aggregate_rows(fired: pa.Table, batch_id: int, version: int) -> pa.Table:
    """Rows of the ``aggregates`` table for windows fired (or flushed) by batch ``batch_id``."""
    n = fired.num_rows
    now = int(time.time() * 1000)
    return (
        pa.table(
            {
                **{name: fired.column(name) for name in fired.schema.names},
                "revision": np.zeros(n, np.int64),
                "late_count": np.zeros(n, np.int64),
                "reconciled_batch_id": pa.nulls(n, pa.int64()),
                "batch_id": np.full(n, batch_id, np.int64),
                "config_version": np.full(n, version, np.int64),
                "emitted_at_ms": np.full(n, now, np.int64),
            }
        )
        .select(AGGREGATES_SCHEMA.names)
        .cast(AGGREGATES_SCHEMA)
    )
