"""``python -m jobs.stream``: windowed aggregates through the adaptive watermark stage, into Delta tables.

A PySpark Structured Streaming job over a landing directory of JSON-lines (the embedded default), CSV or
Parquet files, a Kafka topic, or Spark's rate source for load tests (:mod:`jobs.stream.sources.readers`).
Each micro-batch, in ``foreachBatch`` (:mod:`jobs.stream.handler`):

1. **Validate** (:mod:`jobs.stream.sources.validate`). Landing files are read by Spark's reader with every
   field as text (every record keeps its file and record number); each field is checked and typed with
   native Spark expressions. Bad records go to the ``quarantine`` table with a reason from
   :data:`jobs.stream.sources.validate.QUARANTINE_REASONS`; the job never crashes on them and never drops
   them. Clean JSON batches take the Arrow path instead (:mod:`jobs.stream.sources.arrow_reader`).
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

Import a name from the module that defines it (``from jobs.stream.run import run_job``): the package
imports nothing, so a Spark Python worker that imports one module under ``jobs.stream.workers`` does not
import the whole job (numba, river, scipy, prometheus_client) through it.
"""
