"""Running the streaming query: the source, the handler, the trigger, metrics, and the flush at the end."""

from __future__ import annotations

import logging
from contextlib import suppress
from dataclasses import replace
from typing import Any

from jobs.common.session import ship_code
from jobs.common.tables import DeltaTables
from jobs.common.windows import empty_partials, flush, merge_partials
from jobs.stream.checkpoint.layout import CheckpointLayout
from jobs.stream.checkpoint.state import (
    RECOVERY,
    CheckpointError,
    FlushIntent,
    StageStore,
    check_not_rewound,
    clear_flush_intent,
    flush_app_id,
    read_flush_intent,
    record_flush_intent,
)
from jobs.stream.handler import BatchHandler
from jobs.stream.options import JobOptions, trigger_interval_ms
from jobs.stream.report import BatchReport
from jobs.stream.sinks.commit import job_tables
from jobs.stream.sinks.rows import aggregate_rows
from jobs.stream.sources.landing import check_landing_input
from jobs.stream.stage.executors import read_open_windows
from monitoring.metrics import JobMetrics
from watermark import storage
from watermark.storage import Location

log = logging.getLogger("jobs.stream")


def clear_interrupted_log_writes(checkpoint: str) -> list[Location]:
    """Remove the temporary files a killed query left in its offset and commit logs; returns them.

    Spark writes a log entry to ``.N.<uuid>.tmp`` and renames it into place, so such a file is never
    state. A SIGKILL between the two leaves it behind, and Spark 4.2 then refuses to start a query whose
    offset log has a file but no batch 0 (``STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY``).
    """
    removed = []
    for folder in CheckpointLayout(checkpoint).spark_logs():
        for entry in storage.listdir(folder):
            if not entry.is_dir and entry.name.startswith(".") and entry.name.endswith((".tmp", ".tmp.crc")):
                storage.remove(entry.location)
                removed.append(entry.location)
    return removed


def run_job(spark: Any, options: JobOptions, metrics: JobMetrics | None = None) -> list[BatchReport]:
    """Run the streaming query until the input is exhausted (``available-now``) or forever (``interval=``).

    With ``options.metrics_port`` set (and no ``metrics`` passed) the run serves its Prometheus metrics on
    ``options.metrics_host`` for its duration; with ``metrics`` the caller owns the registry and serving.
    """
    if options.source.landing_files:  # a missing landing folder is an error, not an empty input
        check_landing_input(options.input)
    tables = job_tables(spark, options.sink_options)  # the run's one writer: its batches' and its flush's
    options = replace(options, app_id=tables.app_id)
    assert options.app_id is not None
    StageStore(options.checkpoint).check()  # a missing or damaged newest state: refuse to start
    check_not_rewound(options.checkpoint, options.output, options.app_id)  # tables ahead: refuse too
    if trigger_interval_ms(options.trigger) is None and options.source.endless:
        raise ValueError(options.source.endless_refusal)
    server = None
    if metrics is None and options.metrics_port is not None:
        metrics, server = serve_metrics(options)
    try:
        return _run_query(spark, options, metrics, tables)
    finally:
        if server is not None:
            server.stop()


def serve_metrics(options: JobOptions) -> tuple[JobMetrics, Any]:
    """A fresh registry of the job's metrics, served on ``options.metrics_host:metrics_port``.

    Raises :class:`monitoring.server.MetricsPortBusy` when the port is taken.
    """
    from prometheus_client import CollectorRegistry

    from monitoring.server import serve

    assert options.metrics_port is not None
    metrics = JobMetrics(CollectorRegistry())
    server = serve(metrics.registry, options.metrics_port, options.metrics_host)
    return metrics, server


def _run_query(
    spark: Any, options: JobOptions, metrics: JobMetrics | None, tables: DeltaTables
) -> list[BatchReport]:
    for path in clear_interrupted_log_writes(options.checkpoint):
        log.warning("removed %s, left by an interrupted run", path)
    finished = finish_interrupted_flush(spark, options, tables)  # before any batch goes on from its state
    if metrics is not None and finished:
        metrics.windows.labels("flush").inc(finished)
    files = options.source.reading().open_stream(spark, options.source_options)
    # The executors run the project's Python on the Arrow path and in the Kafka stage: on a cluster they
    # import it from spark-submit's --py-files archive, else from a zip shipped now (jobs.common.session).
    if (shipped := ship_code(spark)) is not None:
        log.info("the executors import the job's code from %s", shipped)
    handler = BatchHandler(spark, options, metrics, tables)
    listener = None
    if metrics is not None:
        from monitoring.listener import MetricsListener

        watcher = handler.states.watcher
        config = watcher.current if watcher is not None else options.config
        metrics.config_applied(config.version, config.strategy, config.late_slo_pct, config.idle_bound_ms)
        listener = MetricsListener(metrics)
        spark.streams.addListener(listener)
    writer = files.writeStream.foreachBatch(handler).option(
        "checkpointLocation", CheckpointLayout(options.checkpoint).query.spark
    )
    interval_ms = trigger_interval_ms(options.trigger)
    if interval_ms is None:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{interval_ms} milliseconds")
    query = writer.start()
    if listener is not None:
        listener.follow(query.id)
    try:
        if options.max_batches is None:
            query.awaitTermination()
        else:
            stop_at_limit(query, handler, options.checkpoint, options.max_batches)
        # The deferred tables' rows still in the checkpoint (a failed query leaves them for the next run).
        handler.flush_deferred()
    finally:
        handler.close()  # the run's spill folder
        if listener is not None:
            spark.streams.removeListener(listener)
    if options.flush_at_end:
        flushed = flush_open_windows(spark, options, tables)
        if metrics is not None:
            metrics.windows.labels("flush").inc(flushed)
    return handler.reports


def stop_at_limit(query: Any, handler: BatchHandler, checkpoint: str, limit: int) -> None:
    """Stop ``query`` after this run's ``limit``-th batch, once Spark has committed it (``--max-batches``).

    The handler runs no batch past the limit (it raises
    :class:`~jobs.stream.handler.BatchLimitReached` before writing anything: Spark runs that batch again
    at the next start). The query is stopped only when Spark's commit log holds the last batch: a stop
    racing that commit would leave the batch to run again, from the state before it, after the flush at the
    end had closed the windows of its state. Raises ``RuntimeError`` when the query failed otherwise.
    """
    while query.isActive and len(handler.reports) < limit:
        _await(query, 0.2)
    if handler.reports:
        commit = CheckpointLayout(checkpoint).commit(handler.reports[-1].batch_id)
        while query.isActive and not storage.exists(commit):
            _await(query, 0.05)
    query.stop()
    failure = query.exception()
    if failure is not None and handler.past_limit is None:
        raise RuntimeError(str(failure))
    if handler.past_limit is not None:
        log.info(
            "stopped after %d batches (--max-batches); batch %d, which Spark started meanwhile and reports "
            "as an error, was refused before writing anything: the next run runs it first",
            limit,
            handler.past_limit,
        )


def _await(query: Any, seconds: float) -> None:
    """Wait up to ``seconds`` for the query to end; a failed query's error is read after it is stopped."""
    from pyspark.errors import StreamingQueryException

    with suppress(StreamingQueryException):  # it failed: the caller sees it inactive
        query.awaitTermination(seconds)


def flush_open_windows(spark: Any, options: JobOptions, tables: DeltaTables | None = None) -> int:
    """Close every open window (``flushed``) after the input is exhausted; returns the windows closed.

    The state flushed is that of the last batch Spark committed (a newer one is refused: Spark would run its
    batch again from the state before it, and re-open the windows). The flush records its intent in the
    checkpoint (:class:`~jobs.stream.checkpoint.state.FlushIntent`: the state's batch, which is also the
    ``txnVersion`` of its Delta append), appends the windows to ``aggregates``, rewrites the state with no
    open window and a watermark floor at the end of the last one (a later run judges rows of flushed windows
    late instead of re-opening them), then removes the intent. A run killed in between finishes it at its
    next start (:func:`finish_interrupted_flush`). ``tables``: the run's writer (built when not given,
    :func:`jobs.stream.sinks.commit.job_tables`).
    """
    store = StageStore(options.checkpoint)
    last = store.latest_batch()
    if last is None:
        return 0
    committed = store.layout.committed_batches()
    if not committed or committed[-1] != last:
        spark_last = committed[-1] if committed else "none"
        log.warning(
            "not flushing: the stage's newest state is batch %d, Spark's last committed batch %s (the next "
            "run runs batch %d again, then flushes)",
            last,
            spark_last,
            last,
        )
        return 0
    assert options.app_id is not None  # run_job resolved it
    intent = FlushIntent(last, flush_app_id(options.app_id))
    record_flush_intent(options.checkpoint, intent)
    flushed = _flush_state(spark, store, intent, tables or job_tables(spark, options.sink_options))
    clear_flush_intent(options.checkpoint)
    return flushed


def finish_interrupted_flush(spark: Any, options: JobOptions, tables: DeltaTables | None = None) -> int:
    """Finish a flush at the end that a kill interrupted (its intent is in the checkpoint); returns windows.

    Its append is done again under the same ``txnAppId`` and ``txnVersion`` from the same state (Delta
    skips it when it was committed), then the state is rewritten and the intent removed. Raises
    :class:`~jobs.stream.checkpoint.state.CheckpointError` when the stage's newest state is not the one
    the intent names.
    """
    intent = read_flush_intent(options.checkpoint)
    if intent is None:
        return 0
    store = StageStore(options.checkpoint)
    if store.latest_batch() != intent.batch_id:
        msg = (
            f"the checkpoint records a flush of batch {intent.batch_id}'s state, but its newest state is of "
            f"batch {store.latest_batch()}; {RECOVERY}"
        )
        raise CheckpointError(msg)
    log.warning("finishing the flush at the end of batch %d, interrupted in an earlier run", intent.batch_id)
    flushed = _flush_state(spark, store, intent, tables or job_tables(spark, options.sink_options))
    clear_flush_intent(options.checkpoint)
    return flushed


def _flush_state(spark: Any, store: StageStore, intent: FlushIntent, tables: DeltaTables) -> int:
    """Append the open windows of ``intent``'s state as flushed, then rewrite the state without them.

    The append's ``txnAppId`` is the intent's, its ``txnVersion`` the state's batch.
    """
    last = intent.batch_id
    saved = store.load_before(last + 1)
    assert saved is not None
    open_windows = saved.open_windows
    if saved.open_dir is not None:  # the last batch ran its stage in the executors
        open_windows = merge_partials(open_windows, read_open_windows(spark, saved.open_dir))
    flushed = flush(open_windows)
    rows = aggregate_rows(flushed, last, saved.config_version)
    tables.append("aggregates", rows, last, app_id=intent.app_id)
    if flushed.num_rows:
        ends = flushed.column("window_end_ms").to_numpy()
        closed_until = max(saved.closed_until_ms, int(ends.max()))
        store.save(last, saved.watermark, empty_partials(), saved.config_version, closed_until, saved.owners)
    return int(flushed.num_rows)
