"""The ``foreachBatch`` handler: one micro-batch from its input, through the stage, to its committed tables.

:class:`BatchHandler` orchestrates; each step is another module's:

1. the batch's configuration and the stage's state it starts from (:mod:`jobs.stream.stage.states`);
2. its input: files or Kafka partitions, and its records, validated (:mod:`jobs.stream.sources.batch_input`),
   or, for a clean JSON batch, the Arrow reader's first pass (:mod:`jobs.stream.sources.arrow_reader`);
3. the stage, on the driver or in the executors, up to the rows of every table (:mod:`jobs.stream.paths`);
4. the commit of the tables, with the state saved meanwhile (:mod:`jobs.stream.sinks.commit`);
5. the batch's report, metrics and progress line (:mod:`jobs.stream.report`).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from jobs.common.tables import DeltaTables
from jobs.common.windows import merge_partials
from jobs.stream.options import JobOptions
from jobs.stream.paths import PathOutcome, in_executors, on_driver
from jobs.stream.report import BatchReport, log_progress
from jobs.stream.sinks.commit import BatchCommits, job_tables
from jobs.stream.sources.arrow_reader import ArrowReader
from jobs.stream.sources.batch_input import BatchInput
from jobs.stream.sources.readers import oldest_input_ms
from jobs.stream.sources.spark_rows import SparkRows
from jobs.stream.stage.executors import read_open_windows
from jobs.stream.stage.states import StageStart, StageStates
from monitoring.metrics import JobMetrics
from watermark.partitions.state import SCOPED_MODES
from watermark.strategies.registry import strategy_class


class BatchLimitReached(RuntimeError):
    """A batch Spark started after the run's ``--max-batches``: refused before anything is written.

    Spark has its offsets, not its commit, so the next run on the checkpoint runs it first.
    """


class BatchHandler:
    """``foreachBatch`` target: runs the watermark stage and writes the tables for one micro-batch.

    ``tables``: the run's Delta tables (:func:`jobs.stream.sinks.commit.job_tables`, built when not given).
    Each step takes its part of ``options``: the input and the Arrow reader the source's, the states and
    the paths the stage's, the commits the sinks'.
    """

    def __init__(
        self,
        spark: Any,
        options: JobOptions,
        metrics: JobMetrics | None = None,
        tables: DeltaTables | None = None,
    ) -> None:
        self.spark = spark
        self.options = options
        self.stage = options.stage_options
        self.metrics = metrics
        sinks = options.sink_options
        if tables is None:  # a handler built on its own (not by run_job)
            tables = job_tables(spark, sinks)
        self.commits = BatchCommits(spark, sinks, tables)
        self.states = StageStates(self.stage, metrics)
        self.reports: list[BatchReport] = []
        self.past_limit: int | None = None  # a batch refused after --max-batches (BatchLimitReached)
        # The driver path collects a batch's late rows here while Spark aggregates its on-time ones.
        self._late_rows = ThreadPoolExecutor(max_workers=1, thread_name_prefix="late-rows")
        self._cpu0 = 0.0  # process CPU time at the start of the batch
        source = options.source_options
        self.input = BatchInput(spark, source)
        self.arrow = ArrowReader(spark, source)

    def __call__(self, batch: Any, batch_id: int) -> None:
        """Process one micro-batch of landing files (idempotent per ``batch_id``).

        Raises :class:`BatchLimitReached` for a batch past ``--max-batches``, before anything is written.
        """
        limit = self.options.max_batches
        if limit is not None and len(self.reports) >= limit:
            self.past_limit = batch_id
            msg = (
                f"batch {batch_id} is past --max-batches {limit}: not run, nothing written (Spark started it "
                "before the stop); the next run on this checkpoint runs it first"
            )
            raise BatchLimitReached(msg)
        started = time.time()
        self._cpu0 = time.process_time()
        tick = time.perf_counter()
        self.commits.prepare_ahead()  # unless the batch before did when its appends were done
        start = self.states.start(batch_id)
        batch, files, unread = self.input.files(batch, batch_id)
        if self.metrics is not None:
            self.metrics.batch_started(batch_id, oldest_input_ms(files, started))
        stage = self.stage
        scoped = start.config.partition_mode in SCOPED_MODES
        # A strategy whose partitions share state (fleet) runs its stage on the driver, over the whole batch.
        shared = getattr(strategy_class(start.config.strategy), "shared_state", None) is not None
        executors = (
            start.config.partition_mode == "scoped"  # keyed: a partition's executor cannot judge by key
            and stage.source.partition_per_task
            and stage.stage_in != "driver"
            and not shared
        )
        if start.open_dir is not None and not executors:  # the last batch kept its windows in Spark
            start.open_windows = merge_partials(
                start.open_windows, read_open_windows(self.spark, start.open_dir)
            )
            start.open_dir = None
        # The Arrow path collects no keys, which partition-scoped firing needs: Spark's reader then.
        arrow = (
            None
            if scoped or self.input.seen is not None
            else self.arrow.first_pass(files, batch_id, start.ingest_ms)
        )
        if arrow is not None:
            assert files is not None
            self._commit(
                on_driver(arrow, start, files, unread, batch_id, stage, tick), start, batch_id, started
            )
            return
        if files is None:  # not in the source log (another source layout): ask Spark, at one more action
            files, unread = self.input.listed_by_spark(batch)
            assert files is not None
        rows = self.input.records(batch, files, batch_id, start.ingest_ms)
        if executors:
            outcome = in_executors(self.spark, rows, start, files, batch_id, stage, tick)
            self._commit(outcome, start, batch_id, started)
            return
        # The typed columns are kept for the batch's few actions, so that the files are parsed once; the
        # quarantine action (only when the batch has invalid records) re-reads them for the raw text.
        parsed = rows.drop("raw").persist()
        try:
            source = SparkRows(self.spark, rows, parsed, self._late_rows, with_key=scoped)
            self._commit(
                on_driver(source, start, files, unread, batch_id, stage, tick), start, batch_id, started
            )
        finally:
            parsed.unpersist()

    def _commit(self, out: PathOutcome, start: StageStart, batch_id: int, started: float) -> None:
        """Commit the batch's tables, saving its state meanwhile; then its report, metrics and progress."""
        report = out.report
        try:
            self.commits.commit(
                out.rows,
                batch_id,
                start.ingest_ms,
                later=out.later,
                meanwhile=lambda: self.states.save(
                    batch_id, start, out.open_windows, out.owners, out.open_dir
                ),
            )
            report.mark("write", out.tick)
        finally:
            out.release()
        report.watermark_ms = start.watermark.watermark_ms
        report.seconds = time.time() - started
        report.driver_cpu_s = time.process_time() - self._cpu0
        self.reports.append(report)
        if self.metrics is not None:
            self.metrics.batch_done(out.observe())
        if self.options.progress:
            log_progress(report)

    def flush_deferred(self) -> int:
        """Commit every batch's deferred rows still in the checkpoint (the query ended); returns batches."""
        return self.commits.flush_deferred()

    def close(self) -> None:
        """Drop the Delta states prepared for a batch that will not come; remove the run's temporary files.

        The Arrow path's spill folder, and the screened copies of landing files with lines too long.
        """
        self.commits.close()
        self.arrow.close()
        self.input.close()
