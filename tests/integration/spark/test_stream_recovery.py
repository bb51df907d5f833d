"""Restarts that must not skip or repeat a batch: a rewound checkpoint, a flush at the end, --max-batches.

Issue 29, items 3 and 4. A checkpoint whose Spark query log is behind its tables (``CHECKPOINT/query``
deleted, or the checkpoint restored from an older copy) is refused before anything is written, since Delta
would skip the batches cut again as already written; the flush at the end records its intent before its
append, so a run killed between the append and the state's rewrite is finished at the next start; and a
``--max-batches`` run stops at a batch Spark committed, so no restart re-opens windows a flush closed.
"""

import json
import os
import shutil
import threading
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql.streaming.query import StreamingQuery

from jobs.common.reads import open_delta
from jobs.common.schemas import TABLES
from jobs.common.tables import DeltaTables
from jobs.stream.checkpoint.state import CheckpointError, StageStore, checkpoint_app_id, read_flush_intent
from jobs.stream.cli import main
from jobs.stream.handler import BatchHandler
from jobs.stream.options import JobOptions
from jobs.stream.run import flush_open_windows, run_job
from tests.landing import folder_job
from watermark.config import PipelineConfig

BASE = 1_600_000_000_000
ROWS = 10  # per landing file: 100 ms apart, one 1-second window per file


def landing(folder: Path, first: int, count: int, *, late_to: int | None = None) -> None:
    """Files ``first`` .. ``first + count - 1``: file ``f`` holds window ``f`` (event times ``BASE + 1000 f``
    on); with ``late_to``, its last two rows are for window ``late_to`` instead. Modification times grow
    with ``f``, so that Spark's file source takes the files in that order."""
    folder.mkdir(parents=True, exist_ok=True)
    for f in range(first, first + count):
        lines = []
        for i in range(ROWS):
            te = BASE + 1_000 * f + 100 * i
            if late_to is not None and i >= ROWS - 2:
                te = BASE + 1_000 * late_to + i
            record = {"event_id": f"{f}-{i}", "key": "k", "partition": "p", "event_time_ms": te}
            lines.append(json.dumps(record | {"arrival_time_ms": BASE + 1_000 * f + 100 * i, "value": 1.0}))
        path = folder / f"f{f:03d}.json"
        path.write_text("\n".join(lines) + "\n")
        os.utime(path, (1_700_000_000 + f, 1_700_000_000 + f))


def options(tmp: Path, delay_ms: int = 500, **kw) -> JobOptions:
    cfg = PipelineConfig.from_dict(
        {"version": 1, "strategy": "periodic", "params": {"delay_ms": delay_ms, "period_ms": 10}}
        | {"window_ms": 1_000, "idle_timeout_ms": None}
    )
    return folder_job(tmp, cfg, max_files_per_trigger=1, **kw)


def uncommit(tmp: Path, batch_id: int) -> None:
    """Remove Spark's commit of ``batch_id`` (and its checksum): what a kill before that commit leaves."""
    for name in (str(batch_id), f".{batch_id}.crc"):
        (tmp / "ck" / "query" / "commits" / name).unlink(missing_ok=True)


def delta_versions(tmp: Path) -> dict[str, int | None]:
    """Each table's newest Delta version (None: no table)."""
    out = {}
    for table in TABLES:
        dt = open_delta(str(tmp / "out" / table))
        out[table] = None if dt is None else dt.version()
    return out


def files_under(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


def emitted_once(tmp: Path, rows: int) -> None:
    """Every (key, window) in ``aggregates`` once, and every row counted once (a window, or late)."""
    tables = DeltaTables(str(tmp / "out"), "reader")
    agg = tables.read("aggregates").to_pylist()
    twice = [w for w, n in Counter((r["key"], r["window_start_ms"]) for r in agg).items() if n > 1]
    assert twice == [], f"windows emitted twice: {twice}"
    assert sum(r["count"] for r in agg) + tables.read("late_events").num_rows == rows


# -- item 4: a rewound checkpoint --------------------------------------------------------------------------


def test_a_deleted_query_folder_is_refused_before_anything_is_written(spark, tmp_path, monkeypatch, capsys):
    landing(tmp_path / "in", 0, 3)
    opts = options(tmp_path)
    run_job(spark, opts)
    shutil.rmtree(tmp_path / "ck" / "query")  # app-id and the stage's state kept
    landing(tmp_path / "in", 3, 1)  # new input, which batch 0 of a new query log would hold
    versions, checkpoint = delta_versions(tmp_path), files_under(tmp_path / "ck")

    def no_spark(*args, **kwargs):
        msg = "the job started Spark"
        raise AssertionError(msg)

    monkeypatch.setattr("jobs.common.session.build_session", no_spark)
    argv = ["--input", opts.input, "--output", opts.output, "--checkpoint", opts.checkpoint]
    capsys.readouterr()  # the first run's log lines (a worker where an earlier test set up the CLI's logging)
    assert main([*argv, "--metrics-port", "0"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith("error: ")
    assert "aggregates holds batch 2 of this checkpoint's application id" in error[0]
    assert "query/offsets is empty" in error[0] and "a new --output and a new --checkpoint" in error[0]
    with pytest.raises(CheckpointError, match="rewound"):  # the job called in-process: the same refusal
        run_job(spark, opts)
    assert delta_versions(tmp_path) == versions
    assert files_under(tmp_path / "ck") == checkpoint and not (tmp_path / "ck" / "query").exists()


def test_a_checkpoint_restored_from_an_older_copy_is_refused(spark, tmp_path):
    landing(tmp_path / "in", 0, 2)
    opts = options(tmp_path)
    run_job(spark, opts)
    shutil.copytree(tmp_path / "ck", tmp_path / "ck-copy")  # a copy after batch 1, the job stopped
    landing(tmp_path / "in", 2, 2)
    run_job(spark, opts)  # the tables move on to batch 3
    shutil.rmtree(tmp_path / "ck")
    shutil.copytree(tmp_path / "ck-copy", tmp_path / "ck")
    landing(tmp_path / "in", 4, 1)
    versions, checkpoint = delta_versions(tmp_path), files_under(tmp_path / "ck")
    with pytest.raises(CheckpointError) as refused:
        run_job(spark, opts)
    text = str(refused.value)
    assert "aggregates holds batch 3" in text and "query/offsets ends at batch 1" in text
    assert "Delta's RESTORE keeps the batch ids" in text and "\n" not in text
    assert delta_versions(tmp_path) == versions and files_under(tmp_path / "ck") == checkpoint


def test_a_restart_goes_on_where_the_tables_are(spark, tmp_path):
    landing(tmp_path / "in", 0, 2)
    opts = options(tmp_path)
    run_job(spark, opts)
    landing(tmp_path / "in", 2, 2)
    assert [r.batch_id for r in run_job(spark, opts)] == [2, 3]  # a plain restart
    # A kill after batch 3's appends, before Spark's commit: the tables hold batch 3, Spark's offset log
    # plans it, so it runs again (Delta skipping its appends) and the job goes on.
    uncommit(tmp_path, 3)
    landing(tmp_path / "in", 4, 1)
    assert [r.batch_id for r in run_job(spark, opts)] == [3, 4]
    emitted_once(tmp_path, 5 * ROWS - ROWS)  # window 4 is still open
    assert DeltaTables(opts.output, "reader").read("aggregates").num_rows == 4


# -- item 3: the flush at the end, and --max-batches --------------------------------------------------------


class Killed(BaseException):
    """What the test raises where the job would be killed."""


def kill(*args, **kwargs):
    raise Killed


@pytest.mark.parametrize("where", ["after the append", "before the append"])
def test_a_flush_killed_before_the_state_rewrite_is_finished_at_the_next_start(
    spark, tmp_path, monkeypatch, where
):
    landing(tmp_path / "in", 0, 2)
    opts = options(tmp_path, delay_ms=2_000)  # nothing fires: windows 0 and 1 stay open
    run_job(spark, opts)
    with monkeypatch.context() as patch:
        if where == "after the append":
            patch.setattr(StageStore, "save", kill)
        else:
            patch.setattr(DeltaTables, "append", kill)
        app_id = checkpoint_app_id(opts.checkpoint, opts.output)
        with pytest.raises(Killed):
            flush_open_windows(spark, JobOptions(**{**opts.__dict__, "app_id": app_id}))
    assert read_flush_intent(opts.checkpoint) is not None
    flushed = DeltaTables(opts.output, "reader").read("aggregates").num_rows
    assert flushed == (2 if where == "after the append" else 0)
    landing(tmp_path / "in", 2, 2, late_to=1)  # two rows of each file for window 1: late, it is flushed
    run_job(spark, JobOptions(**{**opts.__dict__, "flush_at_end": True}))
    emitted_once(tmp_path, 4 * ROWS)
    assert DeltaTables(opts.output, "reader").read("late_events").num_rows == 4
    assert read_flush_intent(opts.checkpoint) is None


def test_a_flush_never_closes_the_state_of_a_batch_spark_runs_again(spark, tmp_path):
    landing(tmp_path / "in", 0, 2)
    opts = options(tmp_path, delay_ms=2_000)
    run_job(spark, JobOptions(**{**opts.__dict__, "max_batches": 2}))
    # What a stop racing Spark's commit of the last batch leaves (an object store's write interrupted).
    uncommit(tmp_path, 1)
    app_id = checkpoint_app_id(opts.checkpoint, opts.output)
    assert flush_open_windows(spark, JobOptions(**{**opts.__dict__, "app_id": app_id})) == 0
    assert DeltaTables(opts.output, "reader").read("aggregates").num_rows == 0
    assert read_flush_intent(opts.checkpoint) is None
    landing(tmp_path / "in", 2, 1)
    reports = run_job(spark, JobOptions(**{**opts.__dict__, "flush_at_end": True}))
    assert [r.batch_id for r in reports] == [1, 2]  # batch 1 again, from the state before it
    emitted_once(tmp_path, 3 * ROWS)


def test_a_max_batches_run_stops_at_a_committed_batch_and_its_restart_emits_no_window_twice(
    spark, tmp_path, monkeypatch
):
    landing(tmp_path / "in", 0, 4)
    opts = options(tmp_path, delay_ms=2_000, flush_at_end=True)
    # The run noticing batch 1's report only once Spark has started batch 2 (it polls; Spark plans the next
    # batch of available input at once): the report is held back until batch 2 starts, which goes on once
    # the run has asked the query to stop.
    original, held, stopping = BatchHandler.__call__, [], threading.Event()
    stop = StreamingQuery.stop

    def late_report(self, batch, batch_id):
        if batch_id == 2:
            self.reports.extend(held)
            stopping.wait(60)
        original(self, batch, batch_id)
        if batch_id == 1:
            held.append(self.reports.pop())

    def stopped(query):
        stopping.set()
        stop(query)

    monkeypatch.setattr(BatchHandler, "__call__", late_report)
    monkeypatch.setattr(StreamingQuery, "stop", stopped)
    reports = run_job(spark, JobOptions(**{**opts.__dict__, "max_batches": 2}))
    assert [r.batch_id for r in reports] == [0, 1]
    stage = StageStore(opts.checkpoint)
    assert stage.latest_batch() == 1 == stage.layout.committed_batches()[-1]
    monkeypatch.undo()
    assert [r.batch_id for r in run_job(spark, opts)] == [2, 3]
    emitted_once(tmp_path, 4 * ROWS)
    assert DeltaTables(opts.output, "reader").read("aggregates").num_rows == 4
