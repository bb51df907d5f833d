"""Data-quality suites (Great Expectations) on the pipeline's Delta tables, as code.

Suites, one per table, plus one on totals across tables:

- ``aggregates``: keys and windows not null, window end after start, counts positive, revisions and late
  counts non-negative, a window (key, start, end) appears once.
- ``late_events``: keys, event and arrival times not null, the missed watermark above the event time
  (``late_by_ms`` positive), ``reconciled`` set.
- ``quarantine``: raw record and reason not null, reasons from :data:`jobs.common.schemas.QUARANTINE_REASONS`.
- ``conservation`` (one row of totals): every late event the streaming job counted is in ``late_events``
  (the sum of ``late`` in ``watermark_log``); every reconciled late event is counted once in the
  aggregates' ``late_count`` (tumbling windows: a late row is in one window); no window holds more on-time
  rows than the job accepted on time.

**Scope.** With ``interval=(start_ms, end_ms)`` (what the Airflow DAG passes: the interval the backfill
just reconciled) only that interval's rows are read, each with a filter pushed down to the files: the
stream batches ingested in it (``watermark_log.ingested_at_ms``), their late events and quarantined rows,
the aggregates those batches emitted or whose windows folded their late rows, and the reconciled late
events of those windows (date-partition pruning). The totals compare the same scope: the late rows of
those batches with the job's count of them, and the checked windows' ``late_count`` with the reconciled
late rows they hold; the on-time slack needs every window and is checked only on whole tables.

**Cut-off.** The streaming job commits ``late_events`` and ``watermark_log`` in separate Delta commits (and
defers them over several batches), so a read can find one table a few batches ahead of the other. Both are
cut at the newest batch both hold (:func:`_cutoff`: ``watermark_log`` has rows of every batch, ``late_events``
only of batches with late rows).
That id is the checkpoint's (``CHECKPOINT/app-id``, ``jobs.stream-<hex>``) when ``checkpoint`` is given,
else the newest stream application id in the two tables' Delta logs (:func:`stream_app_id`).

:func:`check_tables` runs them all and returns a :class:`QualityReport`; its :meth:`~QualityReport.summary`
is what a failed Airflow task prints: one line per failed expectation, with the table, what was expected,
how many rows broke it and a few of them.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from jobs.batch.quality_results import Failure, failures
from jobs.batch.quality_store import (
    DEFAULT_KEEP_RUNS,
    SITE_NAME,
    index_page,
    open_context,
    page_of,
    prune,
    result_file,
    results_root,
    safe_run_name,
    working_copy,
)
from jobs.common.reads import TableReader, table_path
from jobs.common.schemas import QUARANTINE_REASONS
from watermark import storage
from watermark.storage import Location

#: The tables checked (``arrivals`` is the tuner's input and has no suite of its own).
CHECKED = ("aggregates", "late_events", "quarantine")
#: The streaming job's Delta application ids (``txnAppId``): ``jobs.stream-<hex>``, made with its checkpoint,
#: or ``jobs.stream`` (a checkpoint older than its ``app-id`` file). ``<id>.flush`` (the end-of-input flush,
#: ``aggregates`` only) and other writers do not match.
STREAM_APP_ID = re.compile(r"jobs\.stream(-[0-9a-f]+)?")
#: The file of a checkpoint that holds its application id (``jobs.stream.checkpoint.layout``).
CHECKPOINT_APP_ID_FILE = "app-id"
#: The tables whose batches the cut-off compares.
CUT_TABLES = ("late_events", "watermark_log")
_COMMIT = re.compile(r"(\d{20})\.json")


@dataclass
class QualityReport:
    """Outcome of every suite."""

    tables: str
    rows: dict[str, int] = field(default_factory=dict)
    expectations: int = 0
    failures: list[Failure] = field(default_factory=list)
    #: Where the run's results are kept (the results root), its run name and start time (UTC, ISO-8601).
    results: str | None = None
    run_name: str | None = None
    run_time: str | None = None
    #: The Data Docs index page, and each suite's page of this run (URIs: ``file://`` or the store's).
    docs_index: str | None = None
    docs_pages: dict[str, str] = field(default_factory=dict)

    @property
    def success(self) -> bool:
        """True when every expectation held."""
        return not self.failures

    def summary(self) -> str:
        """One line per failed expectation, after a headline."""
        sizes = ", ".join(f"{name} {n:,} rows" for name, n in self.rows.items())
        if self.success:
            return f"data quality OK: {self.expectations} expectations held on {self.tables} ({sizes})"
        head = (
            f"data quality FAILED: {len(self.failures)} of {self.expectations} expectations broken on "
            f"{self.tables} ({sizes})"
        )
        return "\n".join([head, *("  - " + f.line() for f in self.failures)])

    def data_docs(self) -> str:
        """Where to look: the Data Docs page of each failed suite (else the index) and the stored results."""
        if self.docs_index is None:
            return "results not stored"
        failed = sorted({f.suite for f in self.failures})
        lines = [f"Data Docs: {self.docs_index}"]
        lines += [
            f"  {suite} (failed): {self.docs_pages[suite]}" for suite in failed if suite in self.docs_pages
        ]
        lines.append(
            f"results: {self.results} (run {self.run_name} at {self.run_time}; "
            f"python -m jobs.batch.quality TABLES --history 10)"
        )
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        """JSON form (the task's XCom)."""
        return {
            "tables": self.tables,
            "success": self.success,
            "rows": self.rows,
            "expectations": self.expectations,
            "failures": [f.line() for f in self.failures],
            "results": self.results,
            "run_name": self.run_name,
            "run_time": self.run_time,
            "data_docs": self.docs_index,
            "data_docs_pages": self.docs_pages,
        }


class QualityError(RuntimeError):
    """Expectations failed; the message is the report's summary."""


def suites() -> dict[str, list[Any]]:
    """The expectations of each suite, by table name (Great Expectations objects)."""
    import great_expectations as gx

    e = gx.expectations
    not_null = e.ExpectColumnValuesToNotBeNull
    return {
        "aggregates": [
            *(not_null(column=c) for c in ("key", "window_start_ms", "window_end_ms", "count", "revision")),
            e.ExpectColumnPairValuesAToBeGreaterThanB(column_A="window_end_ms", column_B="window_start_ms"),
            e.ExpectColumnValuesToBeBetween(column="count", min_value=1),
            e.ExpectColumnValuesToBeBetween(column="revision", min_value=0),
            e.ExpectColumnValuesToBeBetween(column="late_count", min_value=0),
            e.ExpectCompoundColumnsToBeUnique(column_list=["key", "window_start_ms", "window_end_ms"]),
        ],
        "late_events": [
            *(not_null(column=c) for c in ("key", "event_time_ms", "arrival_time_ms", "reconciled")),
            e.ExpectColumnValuesToBeBetween(column="late_by_ms", min_value=1),
        ],
        "quarantine": [
            not_null(column="reason"),
            e.ExpectColumnValuesToBeInSet(column="reason", value_set=list(QUARANTINE_REASONS)),
        ],
        "conservation": [
            e.ExpectColumnPairValuesToBeEqual(column_A="late_events", column_B="late_in_log"),
            e.ExpectColumnPairValuesToBeEqual(column_A="reconciled_events", column_B="late_count_total"),
            e.ExpectColumnValuesToBeBetween(column="on_time_slack", min_value=0),
        ],
    }


def conservation_totals(tables: dict[str, pa.Table]) -> pa.Table:
    """One row of totals across tables that the ``conservation`` suite compares."""
    agg, late, log = tables["aggregates"], tables["late_events"], tables["watermark_log"]

    def total(table: pa.Table, column: str) -> int:
        return int(pc.sum(table.column(column)).as_py() or 0) if table.num_rows else 0

    reconciled = (
        int(pc.sum(pc.cast(late.column("reconciled"), pa.int64())).as_py() or 0) if late.num_rows else 0
    )
    on_time_counted = total(agg, "count") - total(agg, "late_count")
    on_time_accepted = total(log, "events") - total(log, "late")
    return pa.table(
        {
            "late_events": [late.num_rows],
            "late_in_log": [total(log, "late")],
            "reconciled_events": [reconciled],
            "late_count_total": [total(agg, "late_count")],
            # >= 0: windows still open in the stream hold the difference
            "on_time_slack": [on_time_accepted - on_time_counted],
        }
    )


def _log_transactions(log: Location) -> list[tuple[tuple[int, int], str]]:
    """The ``txn`` actions of one Delta log still in effect: ``((lastUpdated, commit), appId)`` each.

    Read from the last checkpoint (its ``txn`` column) and the JSON commits after it, as a Delta reader
    reconstructs them; without a checkpoint, from every commit.
    """
    import pyarrow.parquet as pq

    entries = storage.listdir(log)
    out: list[tuple[tuple[int, int], str]] = []
    checkpoint = -1
    pointer = log / "_last_checkpoint"
    if storage.exists(pointer):
        checkpoint = int(json.loads(storage.read_text(pointer))["version"])
        prefix = f"{checkpoint:020d}.checkpoint"
        for entry in entries:
            if not (entry.name.startswith(prefix) and entry.name.endswith(".parquet")):
                continue
            file = pq.ParquetFile(storage.open_input_file(entry.location))
            if "txn" not in file.schema_arrow.names:
                continue
            for txn in file.read(columns=["txn"]).column("txn").to_pylist():
                if txn and txn.get("appId"):
                    out.append(((int(txn.get("lastUpdated") or 0), checkpoint), str(txn["appId"])))
    for entry in entries:
        match = _COMMIT.fullmatch(entry.name)
        if match is None or int(match[1]) <= checkpoint:
            continue
        for line in storage.read_text(entry.location).splitlines():
            if '"txn"' not in line:
                continue
            txn = json.loads(line).get("txn")
            if txn and txn.get("appId"):
                out.append(((int(txn.get("lastUpdated") or 0), int(match[1])), str(txn["appId"])))
    return out


def stream_app_id(tables: str, checkpoint: str | None = None) -> str | None:
    """The streaming job's Delta application id: whose committed batches the cut-off compares.

    With ``checkpoint`` (the job's ``--checkpoint``), the id stored in it (``CHECKPOINT/app-id``). Without,
    the stream application id (:data:`STREAM_APP_ID`) of the newest transaction in the Delta logs of
    ``late_events`` and ``watermark_log`` (the running job's; an output is written from one checkpoint).
    None when neither table holds one (nothing to cut by).

    Raises
    ------
    FileNotFoundError
        If ``checkpoint`` is given and holds no application id.

    """
    if checkpoint:
        path = Location.of(checkpoint) / CHECKPOINT_APP_ID_FILE
        if not storage.is_file(path):
            msg = f"{path}: no application id (is {checkpoint} the streaming job's --checkpoint?)"
            raise FileNotFoundError(msg)
        return storage.read_text(path).strip()
    newest: tuple[tuple[int, int], str] | None = None
    for table in CUT_TABLES:
        log = Location.of(table_path(tables, table)) / "_delta_log"
        for when, app_id in _log_transactions(log):
            if STREAM_APP_ID.fullmatch(app_id) and (newest is None or when > newest[0]):
                newest = (when, app_id)
    return None if newest is None else newest[1]


def _cutoff(tables: str, app_id: str | None) -> int | None:
    """The newest batch both ``late_events`` and ``watermark_log`` hold of ``app_id`` (None: no cut).

    ``watermark_log`` has rows of every batch, so its ``txnVersion`` W is how far it is committed.
    ``late_events`` has rows only of batches with late rows, so its own version L may be far behind W with
    nothing missing; it lacks rows only when ``watermark_log`` counts late rows in a batch after L (a flush
    whose ``late_events`` commit is not in yet): the cut is then the batch before the first such one, else
    W. (Taking the lower of W and L cut every batch since the last late row off the log, and conservation
    failed on whole tables.)
    """
    if app_id is None:
        return None
    sink = TableReader(tables, app_id)  # reads only: the app id names whose batch versions to look up
    written = sink.committed_version("watermark_log") if sink.exists("watermark_log") else None
    if written is None:
        return None
    late_through = sink.committed_version("late_events") if sink.exists("late_events") else None
    after = -1 if late_through is None else late_through
    pending = sink.read(
        "watermark_log",
        columns=["batch_id"],
        filters=(pc.field("batch_id") > after) & (pc.field("batch_id") <= written) & (pc.field("late") > 0),
    )
    if pending.num_rows:
        return min(written, int(pc.min(pending.column("batch_id")).as_py()) - 1)
    return written


def read_tables(tables: str, app_id: str | None = None) -> dict[str, pa.Table]:
    """The checked tables and the watermark log, as of one stream batch (missing tables: empty).

    The streaming job may be appending while the tables are read one after the other, so the late events
    and the watermark log are cut at the newest batch both hold (the ``txn`` version of each for the
    stream's application id, ``app_id`` or else :func:`stream_app_id`, read before the rows), and their
    totals compare the same batches.
    """
    cutoff = _cutoff(tables, app_id or stream_app_id(tables))
    sink = TableReader(tables, "jobs.stream")  # reads rows only
    names = (*CHECKED, "watermark_log")
    out = {n: sink.read(n) for n in names}
    if cutoff is not None:
        for name in ("late_events", "watermark_log"):
            out[name] = out[name].filter(pc.less_equal(out[name].column("batch_id"), cutoff))
    return out


def read_interval(
    tables: str, start_ms: int, end_ms: int, window_ms: int | None, app_id: str | None = None
) -> dict[str, pa.Table]:
    """The rows of one data interval ``[start_ms, end_ms)`` of ingestion time (module docstring, Scope).

    Returns the checked tables, ``watermark_log`` and ``reconciled_in_windows`` (the reconciled late rows
    falling in the checked aggregates' windows; tumbling windows of ``window_ms``, None: not computed).
    The watermark log is cut as in :func:`read_tables` (``app_id``, else :func:`stream_app_id`).
    """
    cutoff = _cutoff(tables, app_id or stream_app_id(tables))
    sink = TableReader(tables, "jobs.stream")  # reads rows only
    ingested = pc.field("ingested_at_ms")
    log = sink.read("watermark_log", filters=(ingested >= start_ms) & (ingested < end_ms))
    if cutoff is not None:
        log = log.filter(pc.field("batch_id") <= cutoff)
    out: dict[str, pa.Table] = {"watermark_log": log}
    if not log.num_rows:  # no stream batch in the interval: nothing of it to check
        for name in CHECKED:
            out[name] = sink.read(name, filters=pc.scalar(False))
        out["reconciled_in_windows"] = sink.read("late_events", ["key"], filters=pc.scalar(False))
        return out
    b0, b1 = int(pc.min(log.column("batch_id")).as_py()), int(pc.max(log.column("batch_id")).as_py())

    def in_batches(column: str) -> Any:
        return (pc.field(column) >= b0) & (pc.field(column) <= b1)

    out["late_events"] = sink.read("late_events", filters=in_batches("batch_id"))
    out["quarantine"] = sink.read("quarantine", filters=in_batches("batch_id"))
    agg = sink.read("aggregates", filters=in_batches("batch_id") | in_batches("reconciled_batch_id"))
    out["aggregates"] = agg
    out["reconciled_in_windows"] = _reconciled_in_windows(sink, agg, window_ms)
    return out


def _reconciled_in_windows(sink: TableReader, agg: pa.Table, window_ms: int | None) -> pa.Table:
    """Reconciled late rows whose tumbling window (aligned to epoch 0) is one of ``agg``'s windows."""
    late_schema = ["key", "event_time_ms"]
    if window_ms is None or not agg.num_rows:
        return sink.read("late_events", late_schema, filters=pc.scalar(False))
    lo = int(pc.min(agg.column("window_start_ms")).as_py())
    hi = int(pc.max(agg.column("window_end_ms")).as_py())
    te = pc.field("event_time_ms")
    late = sink.read(
        "late_events",
        late_schema,
        filters=(te >= lo) & (te < hi) & (pc.field("reconciled") == pa.scalar(True)),
        days=(lo, hi),
    )
    times = late.column("event_time_ms")
    starts = pc.multiply(pc.divide(times, window_ms), window_ms)  # integer division: times >= 0
    keyed = pa.table({"key": late.column("key"), "window_start_ms": starts})
    windows = agg.select(["key", "window_start_ms"])
    return keyed.join(windows, keys=["key", "window_start_ms"], join_type="left semi", use_threads=False)


def interval_totals(data: dict[str, pa.Table]) -> pa.Table:
    """The ``conservation`` totals of one interval (see :func:`read_interval`)."""
    agg, late, log = data["aggregates"], data["late_events"], data["watermark_log"]

    def total(table: pa.Table, column: str) -> int:
        return int(pc.sum(table.column(column)).as_py() or 0) if table.num_rows else 0

    return pa.table(
        {
            "late_events": [late.num_rows],
            "late_in_log": [total(log, "late")],
            "reconciled_events": [data["reconciled_in_windows"].num_rows],
            "late_count_total": [total(agg, "late_count")],
            "on_time_slack": [0],  # not checked on an interval
        }
    )


def check_tables(
    tables: str,
    *,
    sliding: bool = False,
    interval: tuple[int, int] | None = None,
    window_ms: int | None = None,
    checkpoint: str | None = None,
    results: str | None = None,
    run_name: str | None = None,
    keep_runs: int = DEFAULT_KEEP_RUNS,
) -> QualityReport:
    """Run every suite on the tables under ``tables``; ``sliding`` skips the one-window-per-row total.

    ``interval=(start_ms, end_ms)`` checks the rows of that interval only (module docstring, Scope);
    ``window_ms`` is the tumbling window length its late-row total needs (None: that total is skipped).
    ``checkpoint``: the streaming job's, whose application id the cut-off uses (None: the newest stream
    application id in the tables' Delta logs, :func:`stream_app_id`).

    The results and Data Docs of the run are kept under ``results`` (default ``<tables>/_quality``,
    :mod:`jobs.batch.quality_store`) as run ``run_name`` (the Airflow run id; default ``manual``), with
    the runs before it up to ``keep_runs`` in all.
    """
    if not storage.exists(tables):
        msg = f"no tables at {tables}: run the streaming job (python -m jobs.stream --output {tables}) first"
        raise FileNotFoundError(msg)
    if keep_runs < 1:
        msg = f"keep_runs must be >= 1 (the run itself), got {keep_runs}"
        raise ValueError(msg)
    app_id = stream_app_id(tables, checkpoint)
    if interval is None:
        data = read_tables(tables, app_id)
        totals = conservation_totals(data)
    else:
        data = read_interval(tables, interval[0], interval[1], None if sliding else window_ms, app_id)
        totals = interval_totals(data)
        sliding = sliding or window_ms is None
    frames = {name: data[name].to_pandas() for name in CHECKED}
    frames["conservation"] = totals.to_pandas()
    expectations = suites()
    if sliding:
        expectations["conservation"] = [
            x for x in expectations["conservation"] if getattr(x, "column_A", None) != "reconciled_events"
        ]
    if interval is not None:
        expectations["conservation"] = [
            x for x in expectations["conservation"] if getattr(x, "column", None) != "on_time_slack"
        ]
    where = tables if interval is None else f"{tables} [{interval[0]}, {interval[1]})"
    report = QualityReport(tables=where, rows={n: data[n].num_rows for n in CHECKED})
    return validate(
        frames,
        expectations,
        report,
        Location.of(results) if results else results_root(tables),
        run_name=run_name,
        keep_runs=keep_runs,
    )


def validate(
    frames: dict[str, Any],
    expectations: dict[str, list[Any]],
    report: QualityReport,
    root: str | Location,
    *,
    run_name: str | None = None,
    keep_runs: int = DEFAULT_KEEP_RUNS,
) -> QualityReport:
    """Validate each frame (pandas) with its suite's expectations through a Checkpoint per suite.

    The GX file Data Context under ``root`` (:mod:`jobs.batch.quality_store`) holds one Checkpoint per
    suite, whose run stores its validation result and whose ``UpdateDataDocsAction`` adds the result's
    page to Data Docs and rebuilds the index. The suites of one call share one run id (``run_name``, the
    start time in UTC). Older runs beyond ``keep_runs`` (this one included) are deleted first. Fills and
    returns ``report``.
    """
    import great_expectations as gx
    from great_expectations.core.run_identifier import RunIdentifier

    root = Location.of(root)
    prune(root, keep_runs - 1)
    run_id = RunIdentifier(run_name=safe_run_name(run_name), run_time=datetime.now(UTC))
    report.results, report.run_name = root.uri, run_id.run_name
    report.run_time = run_id.run_time.isoformat()
    with working_copy(root) as workdir:
        context = open_context(workdir, suites_per_run=len(expectations))
        try:
            source = context.data_sources.get("awm")
        except KeyError:
            source = context.data_sources.add_pandas("awm")
        for name, suite_expectations in expectations.items():
            try:
                asset = source.get_asset(name)
            except LookupError:
                asset = source.add_dataframe_asset(name=name)
            try:
                batch = asset.get_batch_definition(name)
            except KeyError:
                batch = asset.add_batch_definition_whole_dataframe(name)
            suite = context.suites.add_or_update(
                gx.ExpectationSuite(name=name, expectations=suite_expectations)
            )
            definition = context.validation_definitions.add_or_update(
                gx.ValidationDefinition(name=name, data=batch, suite=suite)
            )
            checkpoint = context.checkpoints.add_or_update(
                gx.Checkpoint(
                    name=name,
                    validation_definitions=[definition],
                    actions=[
                        gx.checkpoint.UpdateDataDocsAction(name="update_data_docs", site_names=[SITE_NAME])
                    ],
                    result_format="SUMMARY",
                )
            )
            outcome = checkpoint.run(batch_parameters={"dataframe": frames[name]}, run_id=run_id)
            for key, result in outcome.run_results.items():
                report.expectations += len(result.results)
                report.failures.extend(failures(result.to_json_dict(), name))
                report.docs_pages[name] = page_of(root, result_file(root, key.to_tuple())).uri
    report.docs_index = index_page(root).uri
    return report


def _at_least_one(text: str) -> int:
    """An argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        msg = f"must be an integer >= 1, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return value


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m jobs.batch.quality`` argument parser."""
    from watermark.cli.log import entry_prog, plain_text
    from watermark.cli.main import OneLineParser

    p = OneLineParser(
        prog=entry_prog("python -m jobs.batch.quality"), description=plain_text(__doc__.split("\n")[0])
    )
    p.add_argument("tables", help="the streaming job's --output")
    p.add_argument("--sliding", action="store_true", help="the job uses sliding windows")
    p.add_argument(
        "--checkpoint",
        help="the streaming job's --checkpoint: its application id names the batches the late events and "
        "the watermark log are cut at (default: the newest one in the tables' Delta logs)",
    )
    p.add_argument(
        "--results",
        help="where validation results and Data Docs are kept (default: TABLES/_quality)",
    )
    p.add_argument("--run-name", help="the run's name in the results (default: manual)")
    p.add_argument(
        "--keep-runs",
        type=_at_least_one,
        default=DEFAULT_KEEP_RUNS,
        help="runs kept in the results, this one included; older ones are deleted "
        f"(default {DEFAULT_KEEP_RUNS})",
    )
    p.add_argument(
        "--history",
        type=_at_least_one,
        metavar="N",
        help="check nothing: list the stored results of the last N runs (run time, suite, outcome, failed "
        "expectations, Data Docs page)",
    )
    p.add_argument("--json", action="store_true", help="with --history: JSON lines")
    return p


def main(argv: list[str] | None = None) -> int:
    """``python -m jobs.batch.quality TABLES [--sliding] [--checkpoint CK]``: exit 1 on a failure.

    ``--history N`` lists the stored results of the last N runs instead (exit 0).
    """
    from watermark.cli.log import run_main

    def run(args: argparse.Namespace) -> int:
        tables = storage.checked(args.tables, "--tables")
        root = (
            Location.of(storage.checked(args.results, "--results")) if args.results else results_root(tables)
        )
        if args.history is not None:
            from jobs.batch.quality_results import format_history, read_history

            history = read_history(root, args.history)
            if args.json:
                print("\n".join(json.dumps(r.as_dict()) for r in history))
            else:
                print(format_history(history))
            return 0
        report = check_tables(
            tables,
            sliding=args.sliding,
            checkpoint=args.checkpoint,
            results=root.spark,
            run_name=args.run_name,
            keep_runs=args.keep_runs,
        )
        print(report.summary())
        print(report.data_docs())
        return 0 if report.success else 1

    return run_main(build_parser(), run, argv, errors={(FileNotFoundError, storage.StorageError): 2})


if __name__ == "__main__":
    sys.exit(main())
