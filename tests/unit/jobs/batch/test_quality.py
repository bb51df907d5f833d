"""The data-quality checks' conservation totals on hand-made tables (the Great Expectations suites on the
tables of a real run: tests/integration/spark/test_quality.py)."""

import json
from pathlib import Path

import pyarrow as pa
import pytest

from jobs.batch.quality import conservation_totals
from jobs.common.schemas import AGGREGATES_SCHEMA, LATE_SCHEMA, WATERMARK_LOG_SCHEMA


def test_conservation_totals_compare_the_late_table_the_log_and_the_aggregates():
    agg = pa.Table.from_pylist(
        [{"key": "k", "window_start_ms": 0, "window_end_ms": 1, "count": 5, "late_count": 2}],
        schema=AGGREGATES_SCHEMA,
    )
    late = pa.Table.from_pylist(
        [{"reconciled": True}, {"reconciled": True}, {"reconciled": False}], schema=LATE_SCHEMA
    )
    log = pa.Table.from_pylist([{"events": 7, "late": 3}], schema=WATERMARK_LOG_SCHEMA)
    totals = conservation_totals({"aggregates": agg, "late_events": late, "watermark_log": log}).to_pylist()[
        0
    ]
    assert totals == {
        "late_events": 3,
        "late_in_log": 3,
        "reconciled_events": 2,
        "late_count_total": 2,
        "on_time_slack": 1,
    }


# -- results that stay: a GX file Data Context, Checkpoints, Data Docs, retention, history (real GX) --------


def expect(**suites):
    """Tiny suites: ``aggregates`` counts >= 1, ``quarantine`` reasons not null (GX expectation objects)."""
    import great_expectations as gx

    e = gx.expectations
    return {
        "aggregates": [e.ExpectColumnValuesToBeBetween(column="count", min_value=1)],
        "quarantine": [e.ExpectColumnValuesToNotBeNull(column="reason")],
    } | suites


def run_suites(root, counts, run_name, keep_runs=100):
    import pandas as pd

    from jobs.batch.quality import QualityReport, validate

    frames = {"aggregates": pd.DataFrame({"count": counts}), "quarantine": pd.DataFrame({"reason": ["x"]})}
    return validate(frames, expect(), QualityReport(tables="t"), root, run_name=run_name, keep_runs=keep_runs)


def test_a_failed_run_is_stored_and_read_back_with_the_expectation_that_failed_and_the_values(tmp_path):
    from jobs.batch.quality_results import read_history
    from jobs.batch.quality_store import index_page
    from watermark.storage import Location

    root = Location.of(tmp_path / "_quality")
    report = run_suites(root, [3, 0, 5, 0], "scheduled__2026-11-24T08:00:00+00:00")
    assert not report.success and report.expectations == 2

    history = read_history(root, 1)
    assert [(r.suite, r.success, r.evaluated) for r in history] == [
        ("aggregates", False, 1),
        ("quarantine", True, 1),
    ]
    failed = history[0]
    assert failed.run_name == report.run_name == "scheduled__2026-11-24T08-00-00-00-00"
    assert failed.run_time == report.run_time
    [failure] = failed.failures
    assert failure.expectation == "expect_column_values_to_be_between"
    assert failure.arguments == {"column": "count", "min_value": 1.0}
    assert failure.unexpected_count == 2 and failure.examples == [0, 0]  # the values that broke it

    # The run's Data Docs page of the failed suite is written, linked from the index, and the report names it.
    page = failed.page
    assert report.docs_pages["aggregates"] == page.uri and Path(page.key).is_file()
    assert "count" in Path(page.key).read_text()
    index = Path(index_page(root).key).read_text()
    assert page.relative_to(index_page(root).parent) in index
    assert f"aggregates (failed): {page.uri}" in report.data_docs()
    assert report.as_dict()["data_docs"] == index_page(root).uri


def test_the_store_keeps_the_last_n_runs_and_the_index_links_only_them(tmp_path):
    from jobs.batch.quality_results import read_history
    from jobs.batch.quality_store import index_page, stored_runs
    from watermark.storage import Location

    root = Location.of(tmp_path / "_quality")
    reports = [run_suites(root, [1], f"run{i}", keep_runs=2) for i in range(3)]
    assert [r.run_name for r in stored_runs(root)] == ["run2", "run1"]  # newest first; run0 deleted
    assert {r.run_name for r in read_history(root, 10)} == {"run2", "run1"}
    gone = Location.of(reports[0].docs_pages["aggregates"])
    assert gone.name.endswith(".html") and not Path(gone.key).exists()
    assert not list((tmp_path / "_quality/gx/uncommitted/validations/aggregates").glob("run0"))
    index = Path(index_page(root).key).read_text()
    assert "run0" not in index and "run1" in index and "run2" in index


def test_the_history_cli_lists_the_last_runs_with_what_failed(tmp_path, capsys):
    from jobs.batch.quality import main

    tables = tmp_path / "tables"
    tables.mkdir()
    root = tables / "_quality"
    run_suites(root, [1], "monday")
    run_suites(root, [0], "tuesday")
    assert main([str(tables), "--history", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3, out  # tuesday's two suites, and the failed expectation under aggregates
    assert "tuesday  aggregates: FAILED (1 of 1)" in out[0] and out[0].endswith(".html")
    assert out[1].strip().startswith("- aggregates: expect_column_values_to_be_between(column=count")
    assert "tuesday  quarantine: OK" in out[2]
    assert main([str(tables), "--history", "5", "--json"]) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [(r["run_name"], r["suite"], r["success"]) for r in rows] == [
        ("tuesday", "aggregates", False),
        ("tuesday", "quarantine", True),
        ("monday", "aggregates", True),
        ("monday", "quarantine", True),
    ]
    assert main([str(tmp_path / "empty"), "--history", "3"]) == 0
    assert capsys.readouterr().out.strip() == "no data-quality results stored"
    for bad in (["--history", "0"], ["--keep-runs", "none"]):
        with pytest.raises(SystemExit) as exit_:
            main([str(tables), *bad])
        assert exit_.value.code == 2 and "must be an integer >= 1" in capsys.readouterr().err
