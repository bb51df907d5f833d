"""Every Delta table's schema, in one place, with what a row and each column are.

Five tables live under one root directory, one sub-directory each (:data:`TABLES`): ``aggregates``,
``late_events``, ``quarantine``, ``watermark_log`` and ``arrivals``. The window schemas
(:data:`PARTIAL_SCHEMA`, :data:`FIRED_SCHEMA`) and a valid record's (:data:`RECORD_SCHEMA`) are the parts
they are built from. Writers (:mod:`jobs.common.tables`), light readers (:mod:`jobs.common.reads`) and the
generated column reference (:mod:`jobs.common.tabledocs`) all take the schemas from here.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa

#: A clean split's records (the Spark path's names and types for a valid row).
RECORD_SCHEMA = pa.schema(
    [
        ("event_id", pa.string()),
        ("key", pa.string()),
        ("partition", pa.string()),
        ("event_time_ms", pa.int64()),
        ("arrival_time_ms", pa.int64()),
        ("value", pa.float64()),
    ]
)

PARTIAL_SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("window_start_ms", pa.int64()),
        ("window_end_ms", pa.int64()),
        ("count", pa.int64()),
        ("sum", pa.float64()),
        ("min", pa.float64()),
        ("max", pa.float64()),
    ]
)

FIRED_SCHEMA = pa.schema(
    [
        *PARTIAL_SCHEMA,
        ("trigger_watermark_ms", pa.int64()),  # the watermark that closed the window (null when flushed)
        ("fire_arrival_ms", pa.int64()),  # ingestion time of the arrival after which it closed
        ("trigger_delay_ms", pa.int64()),  # trigger watermark - window end
        ("emit_latency_ms", pa.int64()),  # fire arrival time - window end
        ("flushed", pa.bool_()),  # closed by the end of input, not by the watermark
    ]
)

AGGREGATES_SCHEMA = pa.schema(
    [
        *FIRED_SCHEMA,  # key, window, count, sum, min, max, trigger watermark, fire arrival, delay, latency
        ("revision", pa.int64()),
        ("late_count", pa.int64()),  # late rows the backfill folded in
        ("reconciled_batch_id", pa.int64()),  # newest late_events batch folded in (null: none)
        ("batch_id", pa.int64()),
        ("config_version", pa.int64()),
        ("emitted_at_ms", pa.int64()),  # processing time (wall clock)
    ]
)
LATE_SCHEMA = pa.schema(
    [
        *RECORD_SCHEMA,  # the valid record's fields
        ("watermark_ms", pa.int64()),  # the watermark in force when it arrived
        ("late_by_ms", pa.int64()),  # watermark - event time
        ("file", pa.string()),
        ("line", pa.int64()),
        ("batch_id", pa.int64()),
        ("reconciled", pa.bool_()),
        ("ingested_at_ms", pa.int64()),
    ]
)
#: The ``reason`` of a ``quarantine`` row: why the record is quarantined (the first that applies,
#: :func:`jobs.stream.sources.validate.validate`).
QUARANTINE_REASONS = (
    "record_too_long",
    "bad_encoding",  # text that is not valid UTF-8 (``raw`` keeps the record, invalid bytes replaced)
    "malformed_json",
    "malformed_csv",
    "missing_event_id",
    "missing_key",
    "missing_event_time",
    "bad_event_time",
    "event_time_before_1970",
    "event_time_in_future",
    "bad_arrival_time",
    "arrival_time_before_1970",
    "arrival_time_in_future",
    # an event time more than --max-event-ahead-ms ahead of its own arrival time (clock skew bound)
    "event_time_ahead_of_arrival",
    "missing_value",
    "bad_value",
    "duplicate_event_id",  # an event id seen before (--dedup-horizon-ms; jobs.stream.checkpoint.dedup)
    "unreadable_file_name",  # a whole landing file whose name Hadoop cannot open (``line`` null)
    "file_missing",  # a whole landing file gone after the source listed it (``line`` null)
    "symlink",  # a whole local landing file that is a symbolic link: never read (``line`` null)
    "outside_landing_root",  # a whole landing file resolving outside --input: never read (``line`` null)
)

QUARANTINE_SCHEMA = pa.schema(
    [
        ("raw", pa.string()),
        ("reason", pa.string()),
        ("file", pa.string()),
        ("line", pa.int64()),
        ("batch_id", pa.int64()),
        ("ingested_at_ms", pa.int64()),
    ]
)
WATERMARK_LOG_SCHEMA = pa.schema(
    [
        ("batch_id", pa.int64()),
        ("partition", pa.string()),
        ("partition_watermark_ms", pa.int64()),
        ("global_watermark_ms", pa.int64()),
        ("max_event_time_ms", pa.int64()),
        ("events", pa.int64()),
        ("late", pa.int64()),
        ("stragglers", pa.int64()),
        ("learned_delay_ms", pa.int64()),
        ("sensitivity", pa.float64()),
        ("drifts", pa.int64()),
        ("holds_back", pa.bool_()),
        ("active", pa.bool_()),
        ("strategy", pa.string()),
        ("config_version", pa.int64()),
        ("ingested_at_ms", pa.int64()),
        ("processed_at_ms", pa.int64()),  # processing time (wall clock)
    ]
)
#: The arrival history the re-tuning DAG replays: every valid record's partition and times, in arrival order.
ARRIVALS_SCHEMA = pa.schema(
    [
        ("partition", pa.string()),
        ("event_time_ms", pa.int64()),
        ("arrival_time_ms", pa.int64()),
        ("batch_id", pa.int64()),
        ("ingested_at_ms", pa.int64()),
    ]
)
#: Generated date partition column of a table: (column, the epoch-ms column it is derived from). The date is
#: the UTC day, computed without a time zone (``DATE_ADD(DATE'1970-01-01', ms DIV 86400000)``). Every table
#: has one, so the daily maintenance compacts only the dates written since its last run and the ``arrivals``
#: retention drops whole dates (:mod:`jobs.batch.maintenance`); a table created before its partition column
#: was added keeps its layout (readers and maintenance work on both).
PARTITIONS: Mapping[str, tuple[str, str]] = {
    "aggregates": ("window_date", "window_start_ms"),
    "late_events": ("event_date", "event_time_ms"),
    "quarantine": ("ingested_date", "ingested_at_ms"),
    "watermark_log": ("ingested_date", "ingested_at_ms"),
    "arrivals": ("arrival_date", "arrival_time_ms"),
}
#: Delta table properties set when a table is created.
PROPERTIES: Mapping[str, Mapping[str, str]] = {
    "aggregates": {"delta.enableChangeDataFeed": "true"},
}
DAY_MS = 86_400_000
TABLES: Mapping[str, pa.Schema] = {
    "aggregates": AGGREGATES_SCHEMA,
    "late_events": LATE_SCHEMA,
    "quarantine": QUARANTINE_SCHEMA,
    "watermark_log": WATERMARK_LOG_SCHEMA,
    "arrivals": ARRIVALS_SCHEMA,
}

#: What one row of each table is (the table reference in ``docs/tables.md``, :mod:`jobs.common.tabledocs`).
TABLE_DOCS: Mapping[str, str] = {
    "aggregates": "key and window, when the window closes",
    "late_events": "late record",
    "quarantine": "invalid record, or landing file that could not be read",
    "watermark_log": "batch and partition that arrived, is active or holds the watermark back; and one last "
    "row (null watermark) for a partition the job forgets",
    "arrivals": "valid record, in arrival order: the arrival history the re-tuning DAG replays "
    "(`--no-arrival-history` turns it off; the maintenance DAG drops the dates past their retention)",
}
_INGESTED = "the micro-batch's ingestion time (saved with the batch, so a replay writes the same)"
#: One line per column of each table, including the generated date partition columns of :data:`PARTITIONS`
#: (the table reference in ``docs/tables.md`` is generated from these and the schemas:
#: :mod:`jobs.common.tabledocs`).
COLUMN_DOCS: Mapping[str, Mapping[str, str]] = {
    "aggregates": {
        "key": "aggregation key",
        "window_start_ms": "window start (inclusive)",
        "window_end_ms": "window end (exclusive)",
        "count": "on-time records in the window (plus, after a backfill, the late ones folded in)",
        "sum": "sum of `value`",
        "min": "minimum `value`",
        "max": "maximum `value`",
        "trigger_watermark_ms": "the watermark that closed the window (null when flushed, or inserted by the "
        "backfill)",
        "fire_arrival_ms": "ingestion time of the arrival after which the window closed",
        "trigger_delay_ms": "trigger watermark − window end",
        "emit_latency_ms": "fire arrival time − window end (null when flushed)",
        "flushed": "closed by the end of input (`--flush-at-end`), not by the watermark",
        "revision": "0 as the job writes it; each backfill that corrects the window adds 1",
        "late_count": "late rows the backfill folded in",
        "reconciled_batch_id": "newest `late_events` batch folded in (null: none)",
        "batch_id": "micro-batch that emitted the window",
        "config_version": "configuration version in force",
        "emitted_at_ms": "when it was written (wall clock)",
        "window_date": "UTC date of `window_start_ms`: the partition column",
    },
    "late_events": {
        "event_id": "the record's event id",
        "key": "aggregation key",
        "partition": "source partition (on Kafka, the Kafka partition)",
        "event_time_ms": "event time",
        "arrival_time_ms": "arrival (ingestion) time",
        "value": "the record's value",
        "watermark_ms": "the watermark in force when it arrived (the one it missed)",
        "late_by_ms": "watermark − event time",
        "file": "landing file (on Kafka, `TOPIC/PARTITION`)",
        "line": "0-based record number in the file (on Kafka, the offset)",
        "batch_id": "micro-batch that read it",
        "reconciled": "the backfill has folded it into every window holding it",
        "ingested_at_ms": _INGESTED,
        "event_date": "UTC date of `event_time_ms`: the partition column",
    },
    "quarantine": {
        "raw": "the line of a malformed record, and of a JSON record with a field of the wrong type; "
        "otherwise the record's fields as JSON; valid UTF-8, invalid bytes replaced by U+FFFD; beyond 1 KiB "
        "its first 1,024 bytes and `…[truncated, N bytes]` with the whole length N; for a file, its path",
        "reason": "one of `jobs.common.schemas.QUARANTINE_REASONS` "
        "([the reasons](streaming-job.md#quarantine-reasons))",
        "file": "landing file (on Kafka, `TOPIC/PARTITION`)",
        "line": "0-based record number in the file (on Kafka, the offset); null for a whole file",
        "batch_id": "micro-batch that read it",
        "ingested_at_ms": _INGESTED,
        "ingested_date": "UTC date of `ingested_at_ms`: the partition column",
    },
    "watermark_log": {
        "batch_id": "micro-batch",
        "partition": "source partition (partition mode `keyed`: the key, each key being a partition of the "
        "watermark)",
        "partition_watermark_ms": "the partition's watermark after the batch (null: the job forgot the "
        "partition, which holds no open window)",
        "global_watermark_ms": "the combined (global) watermark after the batch",
        "max_event_time_ms": "highest event time among the partition's records of the batch (null: none)",
        "events": "valid records of the partition in the batch",
        "late": "of them late",
        "stragglers": "of them stragglers (on time, just above the watermark)",
        "learned_delay_ms": "the generator's learned (or set) delay",
        "sensitivity": "the adaptive generator's ADWIN sensitivity",
        "drifts": "the adaptive generator's ADWIN drifts",
        "holds_back": "this partition's watermark is the global one",
        "active": "the partition is active (not idle)",
        "strategy": "the strategy in force",
        "config_version": "configuration version in force",
        "ingested_at_ms": _INGESTED,
        "processed_at_ms": "when the batch was processed (wall clock)",
        "ingested_date": "UTC date of `ingested_at_ms`: the partition column",
    },
    "arrivals": {
        "partition": "source partition (partition mode `keyed`: the key, which the re-tuning then replays)",
        "event_time_ms": "event time",
        "arrival_time_ms": "arrival (ingestion) time",
        "batch_id": "micro-batch that read it",
        "ingested_at_ms": _INGESTED,
        "arrival_date": "UTC date of `arrival_time_ms`: the partition (the retention drops whole dates)",
    },
}
