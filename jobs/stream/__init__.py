"""``python -m jobs.stream``: windowed aggregates through the adaptive watermark stage, into Delta tables.

A PySpark Structured Streaming job over a landing directory of JSON-lines (the embedded default), CSV or
Parquet files, a Kafka topic, or Spark's rate source for load tests (:mod:`jobs.stream.sources.readers`).
Each micro-batch, in ``foreachBatch`` (:mod:`jobs.stream.handler`):

1. **Validate** (:mod:`jobs.stream.sources.validate`). Landing files are read by Spark's reader with every
   field as text (every record keeps its file and record number); each field is checked and typed with
   native Spark expressions. Bad records go to the ``quarantine`` table with a reason from
   :data:`QUARANTINE_REASONS`; the job never crashes on them and never drops them. Clean JSON batches take
   the Arrow path instead (:mod:`jobs.stream.sources.arrow_reader`).
2. **Watermark stage** (:mod:`jobs.stream.paths`). The narrow columns of the valid rows (partition, event
   time, arrival time, file, line) are collected to the driver as Arrow, put in arrival order (arrival
   time, file, line) and run through the per-partition generators (:mod:`jobs.stream.stage.driver`). Rows
   are labelled in Spark with a short ``CASE`` over the compressed lateness thresholds
   (:mod:`jobs.stream.stage.labelling`): no row-id join, no Python UDF. In partition-scoped mode on Kafka
   the stage runs in the executors instead (:mod:`jobs.stream.stage.executors`).
3. **Windows.** Spark aggregates the on-time rows per (key, window); the driver merges those partials into
   the open windows and fires those the watermark closed (:mod:`jobs.common.windows`), into ``aggregates``.
4. **Late rows** go to ``late_events`` with the watermark they missed and by how much.
5. **Watermark log**: one row per partition per batch, into ``watermark_log`` (every table's rows:
   :mod:`jobs.stream.sinks.rows`).

Exactly once: the Delta writes are idempotent per batch id (:mod:`jobs.stream.sinks.commit`), and the
batch's ingestion time, configuration and the stage's state (generator snapshots, open windows) are
checkpointed per batch under ``CHECKPOINT/stage`` (:mod:`jobs.stream.checkpoint.state`; every name under
the checkpoint: :mod:`jobs.stream.checkpoint.layout`), so a batch replayed after a crash recomputes exactly
the same rows.

Modules here: :mod:`~jobs.stream.handler` (the ``foreachBatch`` handler: orchestration),
:mod:`~jobs.stream.paths` (a batch through the stage on the driver or in the executors),
:mod:`~jobs.stream.report` (what a batch did), :mod:`~jobs.stream.run` (the query),
:mod:`~jobs.stream.options` (its options), :mod:`~jobs.stream.cli` (its command line). Sub-packages:
``sources`` (the input), ``stage`` (the watermark stage, driver side), ``workers`` (code that runs in Spark's
Python workers), ``checkpoint`` (the checkpoint's layout and state), ``sinks`` (the tables' rows, their
commit, the metrics' view).

This package re-exports the names other code imports from ``jobs.stream``, each imported on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

#: Where each re-exported name lives. Imported on first use (PEP 562), so that a Spark Python worker that
#: imports one module under ``jobs.stream.workers`` does not import the whole job (numba, river, scipy,
#: prometheus_client) through this package.
_HOMES = {
    "assign_windows": "jobs.common.windows",
    "window_partials": "jobs.common.windows",
    "CheckpointLayout": "jobs.stream.checkpoint.layout",
    "SavedStage": "jobs.stream.checkpoint.state",
    "StageStore": "jobs.stream.checkpoint.state",
    "build_parser": "jobs.stream.cli",
    "main": "jobs.stream.cli",
    "options_from_args": "jobs.stream.cli",
    "summarize": "jobs.stream.cli",
    "BatchHandler": "jobs.stream.handler",
    "DEFAULT_METRICS_PORT": "jobs.stream.options",
    "FORMATS": "jobs.stream.options",
    "RATE_FILE": "jobs.stream.options",
    "Fields": "jobs.stream.options",
    "JobOptions": "jobs.stream.options",
    "KafkaOptions": "jobs.stream.options",
    "RateOptions": "jobs.stream.options",
    "BatchReport": "jobs.stream.report",
    "clear_interrupted_log_writes": "jobs.stream.run",
    "flush_open_windows": "jobs.stream.run",
    "run_job": "jobs.stream.run",
    "serve_metrics": "jobs.stream.run",
    "observation": "jobs.stream.sinks.observation",
    "aggregate_rows": "jobs.stream.sinks.rows",
    "ArrowRows": "jobs.stream.sources.arrow_reader",
    "RecordNumbers": "jobs.stream.sources.readers",
    "csv_columns": "jobs.stream.sources.readers",
    "kafka_batch_files": "jobs.stream.sources.readers",
    "kafka_stream": "jobs.stream.sources.readers",
    "logged_batch_files": "jobs.stream.sources.readers",
    "number_records": "jobs.stream.sources.readers",
    "oldest_input_ms": "jobs.stream.sources.readers",
    "rate_stream": "jobs.stream.sources.readers",
    "source_stream": "jobs.stream.sources.readers",
    "SparkRows": "jobs.stream.sources.spark_rows",
    "QUARANTINE_REASONS": "jobs.stream.sources.validate",
    "SOURCE_COLUMNS": "jobs.stream.sources.validate",
    "text_schema": "jobs.stream.sources.validate",
    "typed_json_schema": "jobs.stream.sources.validate",
    "validate": "jobs.stream.sources.validate",
    "validation_steps": "jobs.stream.sources.validate",
    "MAX_THRESHOLD_PIECES": "jobs.stream.stage.labelling",
    "late_expression": "jobs.stream.stage.labelling",
}


__all__ = [
    "DEFAULT_METRICS_PORT",
    "FORMATS",
    "MAX_THRESHOLD_PIECES",
    "QUARANTINE_REASONS",
    "RATE_FILE",
    "SOURCE_COLUMNS",
    "ArrowRows",
    "BatchHandler",
    "BatchReport",
    "CheckpointLayout",
    "Fields",
    "JobOptions",
    "KafkaOptions",
    "RateOptions",
    "RecordNumbers",
    "SavedStage",
    "SparkRows",
    "StageStore",
    "aggregate_rows",
    "assign_windows",
    "build_parser",
    "clear_interrupted_log_writes",
    "csv_columns",
    "flush_open_windows",
    "kafka_batch_files",
    "kafka_stream",
    "late_expression",
    "logged_batch_files",
    "main",
    "number_records",
    "observation",
    "oldest_input_ms",
    "options_from_args",
    "rate_stream",
    "run_job",
    "serve_metrics",
    "source_stream",
    "summarize",
    "text_schema",
    "typed_json_schema",
    "validate",
    "validation_steps",
    "window_partials",
]


def __getattr__(name: str) -> Any:
    """Import a re-exported name from its home module on first use."""
    home = _HOMES.get(name)
    if home is None:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
