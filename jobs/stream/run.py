"""Running the streaming query: the source, the handler, the trigger, metrics, and the flush at the end."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from jobs.common.session import ship_code
from jobs.common.tables import DeltaTables
from jobs.common.windows import empty_partials, flush, merge_partials
from jobs.stream.checkpoint.layout import CheckpointLayout
from jobs.stream.checkpoint.state import StageStore, check_not_rewound, checkpoint_app_id
from jobs.stream.handler import BatchHandler
from jobs.stream.options import JobOptions, trigger_interval_ms
from jobs.stream.report import BatchReport
from jobs.stream.sinks.rows import aggregate_rows
from jobs.stream.sources.readers import source_stream
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
    if options.app_id is None:
        options = replace(options, app_id=checkpoint_app_id(options.checkpoint, options.output))
    assert options.app_id is not None
    StageStore(options.checkpoint).check()  # a missing or damaged newest state: refuse to start
    check_not_rewound(options.checkpoint, options.output, options.app_id)  # tables ahead: refuse too
    if trigger_interval_ms(options.trigger) is None and options.format == "rate":
        msg = "--format rate never runs out of input: use --trigger interval=<duration> (and --max-batches N)"
        raise ValueError(msg)
    server = None
    if metrics is None and options.metrics_port is not None:
        metrics, server = serve_metrics(options)
    try:
        return _run_query(spark, options, metrics)
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


def _run_query(spark: Any, options: JobOptions, metrics: JobMetrics | None) -> list[BatchReport]:
    if options.format not in ("rate", "kafka"):
        storage.make_dirs(options.input)
    for path in clear_interrupted_log_writes(options.checkpoint):
        log.warning("removed %s, left by an interrupted run", path)
    files = source_stream(spark, options)
    # The executors run the project's Python on the Arrow path and in the Kafka stage: on a cluster they
    # import it from spark-submit's --py-files archive, else from a zip shipped now (jobs.common.session).
    if (shipped := ship_code(spark)) is not None:
        log.info("the executors import the job's code from %s", shipped)
    handler = BatchHandler(spark, options, metrics)
    listener = None
    if metrics is not None:
        from monitoring.listener import MetricsListener

        watcher = handler.states.watcher
        config = watcher.current if watcher is not None else options.config
        metrics.config_applied(config.version, config.strategy, config.late_slo_pct, config.idle_timeout_ms)
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
            while query.isActive and len(handler.reports) < options.max_batches:
                query.awaitTermination(0.2)
            query.stop()
            if query.exception() is not None:
                raise RuntimeError(str(query.exception()))
        # The deferred tables' rows still in the checkpoint (a failed query leaves them for the next run).
        handler.flush_deferred()
    finally:
        handler.close()  # the run's spill folder
        if listener is not None:
            spark.streams.removeListener(listener)
    if options.flush_at_end:
        flushed = flush_open_windows(spark, options)
        if metrics is not None:
            metrics.windows.labels("flush").inc(flushed)
    return handler.reports


def flush_open_windows(spark: Any, options: JobOptions) -> int:
    """Close every open window (``flushed``) after the input is exhausted; idempotent per last batch.

    The last batch's state is then rewritten with no open window and a watermark floor at the end of the
    last flushed window, so a later run on the same checkpoint treats rows of flushed windows as late
    instead of reopening the windows.
    """
    store = StageStore(options.checkpoint)
    last = store.latest_batch()
    if last is None:
        return 0
    saved = store.load_before(last + 1)
    assert saved is not None
    open_windows = saved.open_windows
    if saved.open_dir is not None:  # the last batch ran its stage in the executors
        open_windows = merge_partials(open_windows, read_open_windows(spark, saved.open_dir))
    flushed = flush(open_windows)
    assert options.app_id is not None  # run_job resolved it
    tables = DeltaTables(options.output, options.app_id + ".flush", spark)
    tables.append("aggregates", aggregate_rows(flushed, last, saved.config_version), last)
    if flushed.num_rows:
        ends = flushed.column("window_end_ms").to_numpy()
        closed_until = max(saved.closed_until_ms, int(ends.max()))
        store.save(last, saved.watermark, empty_partials(), saved.config_version, closed_until, saved.owners)
    return flushed.num_rows
