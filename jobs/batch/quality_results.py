"""Data-quality validation results, read back: what failed in a run, and the last runs in the store.

A result is Great Expectations' JSON (an ``ExpectationSuiteValidationResult``), as a Checkpoint stored it
(layout: :mod:`jobs.batch.quality_store`). :func:`failures` turns one into :class:`Failure` lines (what the
task prints, and the history); :func:`read_history` lists the last runs from the store through
:mod:`watermark.storage`, so it reads an object store directly and imports neither GX nor Spark;
:func:`format_history` is what ``python -m jobs.batch.quality TABLES --history N`` prints.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jobs.batch.quality_store import GX_DIR, VALIDATIONS_DIR, page_of, stored_runs
from watermark import storage
from watermark.storage import Location


@dataclass(frozen=True)
class Failure:
    """One failed expectation: its suite, type, arguments, and what broke it."""

    suite: str
    expectation: str
    arguments: dict[str, Any]
    unexpected_count: int | None
    examples: list[Any]
    observed: Any = None

    def line(self) -> str:
        """A readable line, e.g. ``aggregates: expect_column_values_to_be_between(count, min 1): 2 ...``."""
        args = ", ".join(f"{k}={v}" for k, v in self.arguments.items())
        broke = "" if self.unexpected_count is None else f": {self.unexpected_count} row(s) break it"
        shown = f", e.g. {self.examples[:3]}" if self.examples else ""
        seen = "" if self.observed is None else f": observed {self.observed}"
        return f"{self.suite}: {self.expectation}({args}){broke}{shown}{seen}"


def plain(value: Any) -> Any:
    """Numpy scalars (and tuples or lists of them) as plain Python values, for readable messages."""
    if isinstance(value, tuple | list):
        return tuple(plain(v) for v in value)
    return value.item() if hasattr(value, "item") else value


def failures(result: Mapping[str, Any], suite: str | None = None) -> list[Failure]:
    """The failed expectations of one validation result (its JSON form), in the suite's order."""
    name = suite or str(result.get("suite_name") or "")
    out = []
    for outcome in result.get("results") or []:
        if outcome.get("success"):
            continue
        config = outcome.get("expectation_config") or {}
        details = outcome.get("result") or {}
        if outcome.get("exception_info", {}).get("raised_exception"):
            details = details | {"observed_value": outcome["exception_info"].get("exception_message")}
        out.append(
            Failure(
                suite=name,
                expectation=str(config.get("type") or config.get("expectation_type")),
                arguments={k: v for k, v in (config.get("kwargs") or {}).items() if k != "batch_id"},
                unexpected_count=details.get("unexpected_count"),
                examples=[plain(v) for v in details.get("partial_unexpected_list") or []],
                observed=plain(details.get("observed_value")),
            )
        )
    return out


@dataclass(frozen=True)
class SuiteResult:
    """One suite's validation result in the store."""

    run_name: str
    run_time: str  # ISO-8601, UTC
    suite: str
    success: bool
    evaluated: int
    failures: list[Failure]
    result: Location  # the JSON
    page: Location  # its Data Docs page

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "run_name": self.run_name,
            "run_time": self.run_time,
            "suite": self.suite,
            "success": self.success,
            "evaluated": self.evaluated,
            "failures": [f.line() for f in self.failures],
            "result": self.result.uri,
            "page": self.page.uri,
        }


def read_result(root: str | Location, result: Location) -> SuiteResult:
    """One stored validation result (``result``, a JSON file under ``root``'s validations store)."""
    doc = json.loads(storage.read_text(result))
    project = Location.of(root) / GX_DIR
    relative = result.relative_to(project / VALIDATIONS_DIR)
    run = (doc.get("meta") or {}).get("run_id") or {}
    suite = str(doc.get("suite_name") or relative.split("/")[0])
    return SuiteResult(
        run_name=str(run.get("run_name") or relative.split("/")[1]),
        run_time=str(run.get("run_time") or relative.split("/")[2]),
        suite=suite,
        success=bool(doc.get("success")),
        evaluated=int((doc.get("statistics") or {}).get("evaluated_expectations") or 0),
        failures=failures(doc, suite),
        result=result,
        page=page_of(root, result),
    )


def read_history(root: str | Location, runs: int = 10) -> list[SuiteResult]:
    """The validation results of the last ``runs`` runs under the results root ``root``.

    Newest run first; a run's suites by name. None when nothing is stored there.
    """
    if runs < 1:
        msg = f"the number of runs must be >= 1, got {runs}"
        raise ValueError(msg)
    out: list[SuiteResult] = []
    for run in stored_runs(root)[:runs]:
        out.extend(sorted((read_result(root, r) for r in run.results), key=lambda s: s.suite))
    return out


def format_history(results: list[SuiteResult]) -> str:
    """One line per suite result (run time, run, suite, outcome), each failed expectation under it."""
    if not results:
        return "no data-quality results stored"
    lines = []
    for r in results:
        outcome = "OK" if r.success else f"FAILED ({len(r.failures)} of {r.evaluated})"
        lines.append(f"{r.run_time}  {r.run_name}  {r.suite}: {outcome}  {r.page.uri}")
        lines.extend(f"    - {f.line()}" for f in r.failures)
    return "\n".join(lines)
