"""Data-quality suites (Great Expectations) on the pipeline's Delta tables, as code.

Suites, one per table, plus one on totals across tables:

- ``aggregates``: keys and windows not null, window end after start, counts positive, revisions and late
  counts non-negative, a window (key, start, end) appears once.
- ``late_events``: keys, event and arrival times not null, the missed watermark above the event time
  (``late_by_ms`` positive), ``reconciled`` set.
- ``quarantine``: raw record and reason not null, reasons from :data:`jobs.tables.QUARANTINE_REASONS`.
- ``conservation`` (one row of totals): every late event the streaming job counted is in ``late_events``
  (the sum of ``late`` in ``watermark_log``); every reconciled late event is counted once in the
  aggregates' ``late_count`` (tumbling windows: a late row is in one window); no window holds more on-time
  rows than the job accepted on time.

:func:`check_tables` runs them all and returns a :class:`QualityReport`; its :meth:`~QualityReport.summary`
is what a failed Airflow task prints: one line per failed expectation, with the table, what was expected,
how many rows broke it and a few of them.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from jobs.tables import QUARANTINE_REASONS, DeltaTables

#: The tables checked (``arrivals`` is the tuner's input and has no suite of its own).
CHECKED = ("aggregates", "late_events", "quarantine")


@dataclass(frozen=True)
class Failure:
    """One failed expectation."""

    suite: str
    expectation: str
    arguments: dict[str, Any]
    unexpected_count: int | None
    examples: list[Any]

    def line(self) -> str:
        """A readable line, e.g. ``aggregates: expect_column_values_to_be_between(count, min 1): 2 ...``."""
        args = ", ".join(f"{k}={v}" for k, v in self.arguments.items())
        broke = "" if self.unexpected_count is None else f": {self.unexpected_count} row(s) break it"
        shown = f", e.g. {self.examples[:3]}" if self.examples else ""
        return f"{self.suite}: {self.expectation}({args}){broke}{shown}"


@dataclass
class QualityReport:
    """Outcome of every suite."""

    tables: str
    rows: dict[str, int] = field(default_factory=dict)
    expectations: int = 0
    failures: list[Failure] = field(default_factory=list)

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

    def as_dict(self) -> dict[str, Any]:
        """JSON form (the task's XCom)."""
        return {
            "tables": self.tables,
            "success": self.success,
            "rows": self.rows,
            "expectations": self.expectations,
            "failures": [f.line() for f in self.failures],
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


def read_tables(tables: str, app_id: str = "jobs.stream") -> dict[str, pa.Table]:
    """The checked tables and the watermark log, as of one stream batch (missing tables: empty).

    The streaming job may be appending while the tables are read one after the other, so the late events
    and the watermark log are cut at the newest batch both hold (the stream's ``txn`` version of each,
    read before the rows), and their totals compare the same batches.
    """
    sink = DeltaTables(tables, app_id)  # reads only: the app id names whose batch versions to look up
    versions = [
        sink.committed_version(n) if sink.exists(n) else None for n in ("late_events", "watermark_log")
    ]
    cutoff = min((v for v in versions if v is not None), default=None)
    names = (*CHECKED, "watermark_log")
    out = {n: sink.read(n) for n in names}
    if cutoff is not None:
        for name in ("late_events", "watermark_log"):
            out[name] = out[name].filter(pc.less_equal(out[name].column("batch_id"), cutoff))
    return out


def check_tables(tables: str, *, sliding: bool = False) -> QualityReport:
    """Run every suite on the tables under ``tables``; ``sliding`` skips the one-window-per-row total."""
    if not os.path.isdir(tables):
        msg = f"no tables at {tables}: run the streaming job (python -m jobs.stream --output {tables}) first"
        raise FileNotFoundError(msg)
    import great_expectations as gx

    data = read_tables(tables)
    frames = {name: data[name].to_pandas() for name in CHECKED}
    frames["conservation"] = conservation_totals(data).to_pandas()
    report = QualityReport(tables=tables, rows={n: data[n].num_rows for n in CHECKED})
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = gx.data_context.types.base.ProgressBarsConfig(globally=False)
    source = context.data_sources.add_pandas("awm")
    for name, expectations in suites().items():
        if sliding and name == "conservation":
            expectations = [x for x in expectations if getattr(x, "column_A", None) != "reconciled_events"]
        batch = source.add_dataframe_asset(name=name).add_batch_definition_whole_dataframe(name)
        suite = context.suites.add(gx.ExpectationSuite(name=name, expectations=expectations))
        definition = context.validation_definitions.add(
            gx.ValidationDefinition(name=name, data=batch, suite=suite)
        )
        result = definition.run(batch_parameters={"dataframe": frames[name]})
        for outcome in result.results:
            report.expectations += 1
            if outcome.success:
                continue
            config = outcome.expectation_config
            args = {k: v for k, v in config.kwargs.items() if k != "batch_id"}
            details = outcome.result or {}
            report.failures.append(
                Failure(
                    suite=name,
                    expectation=config.type,
                    arguments=args,
                    unexpected_count=details.get("unexpected_count"),
                    examples=[_plain(v) for v in details.get("partial_unexpected_list") or []],
                )
            )
    return report


def _plain(value: Any) -> Any:
    """Numpy scalars (and tuples of them) as plain Python values, for readable messages."""
    if isinstance(value, tuple | list):
        return tuple(_plain(v) for v in value)
    return value.item() if hasattr(value, "item") else value


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m jobs.quality`` argument parser."""
    from watermark.cli import OneLineParser
    from watermark.clilog import entry_prog, plain_text

    p = OneLineParser(
        prog=entry_prog("python -m jobs.quality"), description=plain_text(__doc__.split("\n")[0])
    )
    p.add_argument("tables", help="the streaming job's --output")
    p.add_argument("--sliding", action="store_true", help="the job uses sliding windows")
    return p


def main(argv: list[str] | None = None) -> int:
    """``python -m jobs.quality TABLES [--sliding]``: print the summary; exit 1 if an expectation broke."""
    from watermark.clilog import run_main

    def run(args: argparse.Namespace) -> int:
        report = check_tables(args.tables, sliding=args.sliding)
        print(report.summary())
        return 0 if report.success else 1

    return run_main(build_parser(), run, argv, errors={FileNotFoundError: 2})


if __name__ == "__main__":
    sys.exit(main())
