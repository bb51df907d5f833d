"""A batch's commit to the Delta tables: the appends, the deferred tables, and the states prepared ahead.

Each micro-batch's ``aggregates`` rows are appended with the batch; the rows of ``late_events``,
``quarantine``, ``watermark_log`` and ``arrivals`` wait in the checkpoint (:mod:`jobs.stream.sinks.deferred`)
and are committed for several batches at once. Every append is a delta-spark append that Delta makes
idempotent per batch (:class:`jobs.common.tables.DeltaTables`). The appends run side by side, in a thread
pool with a thread per table; another thread computes ahead the Delta states the next batch's appends
check.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

from jobs.common.schemas import TABLES
from jobs.common.tables import DeltaTables
from jobs.stream.checkpoint.state import CheckpointError, checkpoint_app_id
from jobs.stream.sinks.deferred import DEFERRED_TABLES, PendingRows
from jobs.stream.sinks.sink_options import SinkOptions

log = logging.getLogger("jobs.stream")


def job_tables(spark: Any, options: SinkOptions) -> DeltaTables:
    """The job's Delta tables, written under ``options.app_id`` (none: the checkpoint's application id).

    A run builds them once (:func:`jobs.stream.run.run_job`) and hands them to its batches' commits and to
    the flush at the end; a handler or a flush called on its own builds its own.
    """
    app_id = options.app_id or checkpoint_app_id(options.checkpoint, options.output)
    return DeltaTables(options.output, app_id, spark)


class BatchCommits:
    """Commits the batches' tables of one run (``aggregates`` with each batch, the others deferred)."""

    def __init__(self, spark: Any, options: SinkOptions, tables: DeltaTables) -> None:
        self.spark = spark
        self.policy = options.defer
        self.tables = tables
        self._writers = ThreadPoolExecutor(max_workers=len(TABLES), thread_name_prefix="delta-writes")
        self.pending = PendingRows(options.checkpoint)
        self._lock = threading.Lock()  # a batch's commits against the flush when the query ends
        # The Delta states a batch's appends check, computed from the end of the batch before, while Spark
        # ends it and plans the next (_prepare_states): the appends then skip the reconstruction.
        self._state_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="delta-state")
        self._state_ready: Future[None] | None = None
        self._prepare_group = f"jobs.stream.prepare.{id(self)}"
        self._closing = False

    def prepare_ahead(self) -> None:
        """Start computing the Delta states the batch's appends will check, unless the batch before did."""
        if self._state_ready is None:
            self._state_ready = self._state_pool.submit(self._prepare_states)

    def _prepare_states(self) -> None:
        """Compute the Delta states the next batch's appends will check, before it needs them.

        ``aggregates`` always; the deferred tables too when that batch completes ``--defer-batches``. Its
        Spark jobs run in their own job group, which :meth:`close` cancels: the query ended, no batch
        needs them.
        """
        if self._closing:
            return
        if self.spark is not None:
            try:
                self.spark.sparkContext.setJobGroup(self._prepare_group, "Delta states for the next appends")
            except Exception as exc:  # noqa: BLE001 - an optimisation only: the appends compute the states
                log.debug("no Delta states prepared ahead: %s", exc)
                return
        tables = ["aggregates"]
        try:
            if len(self.pending.batches()) + 1 >= self.policy.batches:
                tables += DEFERRED_TABLES
        except CheckpointError:
            pass  # the batch itself reports it
        for table in tables:
            if self._closing:
                return
            self.tables.prepare_state(table)

    def close(self) -> None:
        """Drop the Delta states prepared for a batch that will not come: not started, or jobs cancelled."""
        self._closing = True
        if self._state_ready is not None and not self._state_ready.cancel():
            if self.spark is not None:
                self.spark.sparkContext.cancelJobGroup(self._prepare_group)
            wait([self._state_ready])
        self._state_ready = None

    def commit(
        self,
        rows_out: dict[str, Any],
        batch_id: int,
        ingest_ms: int,
        later: Callable[[], dict[str, Any]] | None = None,
        meanwhile: Callable[[], None] | None = None,
    ) -> None:
        """Commit the batch's tables: ``aggregates`` now, the deferred ones when due.

        One Spark job per table with rows, run side by side: each is a delta-spark append that Delta makes
        idempotent (txnAppId = the job's application id, txnVersion = the batch id). The rows of the
        deferred tables wait in the checkpoint (:mod:`jobs.stream.sinks.deferred`) and are committed, with
        those of the batches before, every ``--defer-batches`` batches or ``--defer-max-delay-ms``.

        While the appends run in Spark, the driver runs ``later`` (it builds the deferred tables' rows),
        puts the deferred rows in the checkpoint, then runs ``meanwhile`` (the batch's state is saved: a
        saved state never stands in for a batch's rows, since a batch run again starts from the state before
        it); then it waits for the appends and raises the first error.
        """
        policy = self.policy
        appends: list[Future[bool]] = []

        def submit(rows: Mapping[str, Any]) -> None:
            appends.extend(self._writers.submit(self.tables.append, t, d, batch_id) for t, d in rows.items())

        with self._lock:
            if self._state_ready is not None:
                self._state_ready.result()
                self._state_ready = None
            try:
                submit({t: d for t, d in rows_out.items() if t not in DEFERRED_TABLES})
                deferred = {t: d for t, d in rows_out.items() if t in DEFERRED_TABLES}
                if later is not None:
                    deferred.update(later())
                due = False
                if policy.batches == 1 and not self.pending.batches():
                    submit(deferred)
                else:
                    self.pending.put(batch_id, ingest_ms, deferred)
                    due = self.pending.due(batch_id, ingest_ms, policy)
                    if due:
                        submit(self.pending.rows(self.spark, self.tables, batch_id))
                if meanwhile is not None:
                    meanwhile()
            except BaseException:
                wait(appends)  # (idempotent appends: the batch runs again)
                raise
            for future in appends:
                future.result()
            if due:
                self.pending.remove(batch_id)
            # The next batch's appends check the states these commits made: computed from now on, while
            # Spark ends this batch and plans the next (cores mostly idle), not while the next one is read.
            self._state_ready = self._state_pool.submit(self._prepare_states)

    def flush_deferred(self) -> int:
        """Commit every batch's deferred rows still in the checkpoint (the query ended); returns batches."""
        with self._lock:
            pending = self.pending.batches()
            if not pending:
                return 0
            through = pending[-1].batch_id
            rows = self.pending.rows(self.spark, self.tables, through)
            self.tables.append_all(rows, through, self._writers)
            self.pending.remove(through)
            log.info("committed the deferred tables of %d batches, through batch %d", len(pending), through)
            return len(pending)
