"""Late-data backfill: fold late events into the aggregates, exactly once (a Spark application).

The streaming job writes a late row to ``late_events`` and emits its window without it. This job, run
hourly by ``dags/late_data_backfill.py`` through ``spark-submit``, corrects the aggregates for a data
interval ``[start, end)``:

1. **Read.** Late events not yet reconciled, of the stream's batches up to the newest one ingested before
   ``end`` (batches, not clock times, bound the set, so a clock step cannot skip a row), the
   aggregates rows of the windows they fall in and, for windows not among those, as much of the flushed
   windows and of ``watermark_log`` as decides whether they are closed; all with ``deltalake``.
2. **Classify** (Spark). Each late row, in each window that holds it, is *folded now* when the window
   is closed and the row's batch is newer than the last batch already folded into the window
   (``reconciled_batch_id``), *already folded* when it is not newer, and *deferred* while the window may
   still be open in the stream. A window is closed when it is in the aggregates (the stream emitted it),
   when its end is at or below the lowest watermark any live partition has in ``watermark_log`` (each
   partition's latest), or at or below the end of a window flushed at the end of input
   (:mod:`jobs.batch.backfill_plan`, "When a window is closed"). A late row can fall in a window that is
   still open (``te < W < end``; in partition-scoped mode, a row of a key another partition owns, whose
   watermark is behind): it waits for a later run, so the streaming job never emits a window the
   backfill already inserted.
3. **MERGE** the corrected rows into ``aggregates`` in one Delta commit (delta-spark's
   ``DeltaTable.forPath(spark, ...).merge``): count and sum add, min and max combine, ``late_count`` grows
   by the rows folded, ``revision`` + 1 and ``reconciled_batch_id`` = the newest batch folded. A window
   with late rows only is inserted with revision 1 (its trigger columns null). A window with two current
   rows is never folded into: the run stops with an error naming it (:class:`BackfillError`).
4. **Mark** late events ``reconciled`` once every window holding them has folded their batch (a second
   delta-spark MERGE, into ``late_events``).

Exactly once. The only state, ``reconciled_batch_id``, changes in the same commit as the values. A crash
between steps 3 and 4 leaves rows unmarked that are *already folded*: the next run marks them without
folding them again. Concurrency: open-source Delta checks a MERGE at Serializable isolation, so a
streaming append that commits between the MERGE's read and its commit makes the MERGE fail with a
concurrent-modification error; the MERGE is retried (the append never is: it committed), so a backfill
and the running stream both commit and no write is lost. Another backfill is caught two ways: each
corrected row is written only if its window still has the ``revision`` this run read (compare-and-set; a
window to insert must still be absent), and Delta's own conflict check (``ConcurrentAppendException``
and its kin) refuses overlapping rewrites. Either way the run is recomputed from fresh snapshots, with
exponential backoff and jitter (:class:`jobs.common.retry.RetryPolicy`). Re-running an interval
changes nothing: every row it would fold is already folded and marked, and no commit is made.

The commits carry the run in their ``userMetadata`` (``awm.backfill.interval``, ``awm.backfill.run_id``).
Writers from different Spark applications on one table need a LogStore that makes commits mutually
exclusive on the storage (HDFS and ADLS do; S3 needs Delta's DynamoDB LogStore; a local disk is safe within
one application only); docs/deployment.md.

Run it with ``spark-submit jobs/batch/backfill.py --tables DIR --interval-start ISO --interval-end ISO`` or
``python -m jobs.batch.backfill ...`` (local Spark); it prints its report as JSON (``--report FILE`` keeps
it). The interval's ends are epoch milliseconds or ISO-8601, a time without a zone being UTC
(:func:`watermark.streams.timeparse.instant_ms`, the streaming job's own rule).

This module runs a backfill and is its command line; the reads and the classification are
:mod:`jobs.batch.backfill_plan`, the two MERGEs :mod:`jobs.batch.backfill_commit`.
"""

from __future__ import annotations

import argparse
import functools
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable

if __package__ in (None, ""):  # run as a file by spark-submit: make the project importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


from jobs.batch.backfill_commit import StaleRead, mark_reconciled, merge_aggregates, session_for  # noqa: E402
from jobs.batch.backfill_plan import (  # noqa: E402
    BackfillOptions,
    BackfillReport,
    DuplicateWindows,
    open_table,
    plan,
)
from jobs.common.reads import table_path  # noqa: E402
from jobs.common.retry import RetryPolicy, first_line  # noqa: E402
from watermark import storage  # noqa: E402
from watermark.config import ConfigError, load_config  # noqa: E402
from watermark.streams.timeparse import instant_ms  # noqa: E402
from watermark.windowspec import WindowSpec  # noqa: E402

log = logging.getLogger(__name__)


class BackfillError(RuntimeError):
    """The backfill cannot run (missing tables, conflicts that do not resolve, a window held twice)."""


def opened(path: str) -> DeltaTable:
    """The Delta table at ``path``, which the run found there at its start (:func:`open_table`)."""
    table = open_table(path)
    assert table is not None, f"{path}: the Delta table is gone"
    return table


def run_backfill(
    spark: Any,
    options: BackfillOptions,
    *,
    before_commit: Callable[[int], None] | None = None,
    now_ms: Callable[[], int] | None = None,
) -> BackfillReport:
    """Fold the late events of ``options``' interval into the aggregates (module docstring).

    ``before_commit(attempt)`` runs after the reads and before the aggregates MERGE of each attempt (tests
    use it to force a write conflict). Raises :class:`BackfillError` when a table is missing or the
    MERGE still conflicts after ``max_retries`` retries.
    """
    clock = now_ms or (lambda: int(time.time() * 1000))
    started = time.perf_counter()
    report = BackfillReport(options.start_ms, options.end_ms, run_id=options.run_id)
    agg_path = table_path(options.tables, "aggregates")
    late_path = table_path(options.tables, "late_events")
    log_path = table_path(options.tables, "watermark_log")
    if open_table(agg_path) is None:
        msg = (
            f"no Delta table at {agg_path}: run the streaming job (python -m jobs.stream --output "
            f"{options.tables}) before the backfill"
        )
        raise BackfillError(msg)
    if open_table(late_path) is None:  # the job writes late_events with its first late row: nothing yet
        log.info("no late_events table at %s: no late row to fold", late_path)
        report.aggregates_version = opened(agg_path).version()
        report.seconds = round(time.perf_counter() - started, 3)
        return report
    session = session_for(spark, options)
    policy = RetryPolicy(options.max_retries, options.backoff_s)

    def retried(action: Callable[[], Any], what: str, failing: str, **how: Any) -> Any:
        """``action()`` under the run's policy; each failure in the report, a spent policy a BackfillError."""

        def give_up(err: BaseException) -> BackfillError:
            return BackfillError(f"{failing} after {options.max_retries} retries: {first_line(err)}")

        def record(err: BaseException) -> None:
            report.conflicts.append(first_line(err))

        return policy.call(action, what, on_failure=record, give_up=give_up, **how)

    def attempt() -> pa.Table | None:
        """Plan from fresh snapshots and MERGE the aggregates; the late rows to mark (None: no late row)."""
        report.attempts += 1
        # watermark_log first: the aggregates read after it hold every window it says the stream closed
        log_dt = open_table(log_path)
        agg_dt, late_dt = opened(agg_path), opened(late_path)
        planned = plan(session, options, clock(), agg_dt, agg_path, late_dt, late_path, report, log_dt)
        if planned is None:
            return None
        corrected, current, marks = planned
        if before_commit is not None:
            before_commit(report.attempts)
        if corrected.num_rows:
            merge = functools.partial(merge_aggregates, session, agg_path, corrected, current)
            retried(merge, "aggregates MERGE conflicted", "the aggregates MERGE still conflicts")
        return marks

    try:
        marks = retried(
            attempt,
            "the aggregates changed under this run",
            "the aggregates still change under this run",
            retry_on=(StaleRead,),
            then="recomputing",
        )
    except DuplicateWindows as err:
        raise BackfillError(str(err)) from err
    if marks is not None and marks.num_rows:
        mark = functools.partial(mark_reconciled, session, late_path, marks)
        report.reconciled_events = retried(
            mark, "late_events MERGE conflicted", "the late_events MERGE still conflicts"
        )
    report.aggregates_version = opened(agg_path).version()
    report.late_events_version = opened(late_path).version()
    report.seconds = round(time.perf_counter() - started, 3)
    return report


def build_parser() -> argparse.ArgumentParser:
    """The ``jobs/batch/backfill.py`` argument parser."""
    from watermark.cli.log import entry_prog
    from watermark.cli.main import OneLineParser

    p = OneLineParser(prog=entry_prog("jobs/batch/backfill.py"), description=__doc__.split("\n", 1)[0])
    p.add_argument("--tables", required=True, help="the streaming job's --output (Delta tables)")
    p.add_argument("--interval-start", required=True, help="data interval start (epoch ms or ISO-8601; UTC)")
    p.add_argument("--interval-end", required=True, help="data interval end, exclusive")
    p.add_argument("--config", help="the job's watermark configuration (its window spec is used)")
    p.add_argument("--window-ms", type=int, help="window length (without --config)")
    p.add_argument("--slide-ms", type=int, help="window slide (without --config; default: tumbling)")
    p.add_argument("--report", help="also write the report (JSON) to this file")
    p.add_argument("--run-id", help="recorded in the report and in the Delta commit")
    p.add_argument("--max-retries", type=int, default=10, help="retries of a conflicting MERGE")
    return p


def options_from_args(args: argparse.Namespace) -> BackfillOptions:
    """Validate the flags; raises ValueError or ConfigError with a one-line message."""
    if args.config:
        window = load_config(args.config).window
    elif args.window_ms:
        window = WindowSpec(args.window_ms, args.slide_ms)
    else:
        msg = "give --config (the job's configuration) or --window-ms"
        raise ValueError(msg)
    return BackfillOptions(
        tables=storage.checked(args.tables, "--tables"),
        start_ms=instant_ms(args.interval_start),
        end_ms=instant_ms(args.interval_end),
        window=window,
        max_retries=args.max_retries,
        run_id=args.run_id,
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point (``spark-submit jobs/batch/backfill.py`` or ``python -m jobs.batch.backfill``)."""
    from watermark.cli.log import run_main

    return run_main(build_parser(), _run, argv, errors={BackfillError: 1})


def _run(args: argparse.Namespace) -> int:
    from jobs.common.session import run_reporting
    from watermark.cli.log import usage_errors

    with usage_errors(ConfigError, ValueError):
        options = options_from_args(args)
    return run_reporting("jobs.batch.backfill", lambda spark: run_backfill(spark, options), args.report)


if __name__ == "__main__":
    sys.exit(main())
