"""A window with two current rows in ``aggregates``: the backfill stops with a clear error, folds nothing.

Two rows of one (key, window) come from a stream that emitted a window a backfill had inserted (issue 29,
item 2) or from two writers. Folding late rows into both would double them; the run fails instead, whether
the second row is there when it reads or appears between its read and its MERGE.
"""

import shutil

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from jobs.batch.backfill import BackfillError
from jobs.common.tables import DeltaTables
from jobs.stream.run import run_job
from tests.integration.spark.test_backfill import FAR_FUTURE_MS, backfill, job
from tests.landing import good, write_lines

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def streamed_once(spark_sessions, tmp_path_factory):
    """One partition: late rows at te 500 and 1950 for the emitted windows [0, 1000) and [1000, 2000).

    The job runs once per module; each test gets a copy of its tables (``streamed``)."""
    tmp = tmp_path_factory.mktemp("streamed")
    rows = [(0, 100, 10), (1, 1_900, 20), (2, 500, 30), (3, 2_600, 40), (4, 1_950, 50)]
    write_lines(tmp / "in" / "a.jsonl", [good(i, te, tp) for i, te, tp in rows])
    run_job(spark_sessions.get(), job(tmp))
    return tmp / "out"


@pytest.fixture
def streamed(streamed_once, tmp_path):
    """The module's tables, copied for this test (a Delta table's log names its files relative to it)."""
    return shutil.copytree(streamed_once, tmp_path / "out")


def emit_again(spark, out, start_ms):
    """Append a second current row of window (k, start_ms), as a stream emitting it again would."""
    rows = DeltaTables(str(out), "r").read("aggregates").to_pylist()
    (row,) = [r for r in rows if (r["key"], r["window_start_ms"]) == ("k", start_ms)]
    again = dict(row, batch_id=row["batch_id"] + 100, emitted_at_ms=row["emitted_at_ms"] + 1)
    DeltaTables(str(out), "test-second-writer", spark).append("aggregates", pa.Table.from_pylist([again]), 0)


def state(out):
    tables = DeltaTables(str(out), "r")
    agg = sorted(
        (r["key"], r["window_start_ms"], r["count"], r["revision"])
        for r in tables.read("aggregates").to_pylist()
    )
    reconciled = tables.read("late_events").column("reconciled").to_pylist()
    return agg, reconciled, DeltaTable(str(out / "aggregates")).version()


def test_a_window_held_twice_when_the_backfill_reads_stops_it_before_any_commit(spark, streamed):
    emit_again(spark, streamed, 0)
    before = state(streamed)
    with pytest.raises(BackfillError, match=r"more than once .*'k' \[0, 1000\) x2"):
        backfill(spark, streamed, 0, FAR_FUTURE_MS)
    assert state(streamed) == before
    assert before[1] == [False, False]


def test_a_second_row_the_merge_meets_fails_it_and_nothing_is_committed(spark, streamed):
    def second_writer(attempt):
        if attempt == 1:  # after the run read the windows, before its MERGE
            emit_again(spark, streamed, 0)

    with pytest.raises(BackfillError, match="second current row"):
        backfill(spark, streamed, 0, FAR_FUTURE_MS, before_commit=second_writer)
    agg, reconciled, _version = state(streamed)
    assert [(k, s, n, rev) for k, s, n, rev in agg if s == 0] == [("k", 0, 1, 0), ("k", 0, 1, 0)]
    assert all(rev == 0 for *_, rev in agg) and reconciled == [False, False]
