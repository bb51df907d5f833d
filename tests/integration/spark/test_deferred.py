"""Deferred tables: late_events, watermark_log and arrivals wait in the checkpoint, committed exactly once."""

import json
from pathlib import Path

import pytest
from deltalake import DeltaTable

from jobs.common.tables import DeltaTables
from jobs.stream.options import DeferPolicy
from jobs.stream.run import run_job
from jobs.stream.sinks.deferred import PendingRows
from tests.landing import folder_job
from tests.unit.jobs.stream.sinks.test_deferred import BASE, arrivals
from watermark.config import PipelineConfig

DEFERRED = ("late_events", "watermark_log", "arrivals")


def test_a_table_takes_only_the_batches_after_the_version_it_committed(spark, tmp_path):
    pending = PendingRows(str(tmp_path / "ck"))
    tables = DeltaTables(str(tmp_path / "out"), "app", spark)
    for b in range(3):
        pending.put(b, BASE, {"arrivals": arrivals(b, 2, 10 * b)})
    rows = pending.rows(spark, tables, 2)
    assert sorted(r.batch_id for r in rows["arrivals"].collect()) == [0, 0, 1, 1, 2, 2]
    tables.append("arrivals", rows["arrivals"], 2)
    # Killed before the folders were removed, batch 2 runs again, then batch 3.
    pending.put(2, BASE, {"arrivals": arrivals(2, 2, 20)})
    pending.put(3, BASE, {"arrivals": arrivals(3, 1, 30)})
    rows = pending.rows(spark, tables, 3)
    assert [r.batch_id for r in rows["arrivals"].collect()] == [3]
    tables.append("arrivals", rows["arrivals"], 3)
    pending.remove(3)
    assert pending.batches() == []
    assert sorted(tables.read("arrivals").column("batch_id").to_pylist()) == [0, 0, 1, 1, 2, 2, 3]


def landing(folder: Path, files: int) -> None:
    folder.mkdir(parents=True)
    for f in range(files):
        lines = []
        for i in range(40):
            n = 40 * f + i
            te = BASE + 100 * n - (3_000 if n % 7 == 0 else 0)  # every 7th row 3 s late
            lines.append(
                json.dumps(
                    {
                        "event_id": str(n),
                        "key": f"k{n % 3}",
                        "partition": f"p{n % 2}",
                        "event_time_ms": te,
                        "arrival_time_ms": BASE + 100 * n,
                        "value": float(n),
                    }
                )
            )
        (folder / f"f{f:03d}.json").write_text("\n".join(lines) + "\n")


def run(spark, inp: Path, root: Path, defer: DeferPolicy):
    cfg = PipelineConfig.from_dict(
        {"version": 1, "strategy": "periodic", "params": {"delay_ms": 500}, "window_ms": 1_000}
    )
    opts = folder_job(root, cfg, input=str(inp), max_files_per_trigger=1, defer=defer)
    reports = run_job(spark, opts)
    return DeltaTables(opts.output, "reader"), reports


WALL_CLOCK = ("ingested_at_ms", "processed_at_ms", "emitted_at_ms")


def content(tables: DeltaTables, table: str) -> list[str]:
    """The table's rows without their wall-clock columns, in a fixed order."""
    rows = tables.read(table)
    rows = rows.drop_columns([c for c in WALL_CLOCK if c in rows.column_names])
    return sorted(json.dumps(r, sort_keys=True) for r in rows.to_pylist())


def test_deferred_tables_hold_every_batch_once_with_fewer_commits_and_survive_a_failed_removal(
    spark, tmp_path, monkeypatch
):
    # 4 batches, a commit due every 3: the due commit (batch 2) and the end of the query's (batch 3) show
    # both ways a deferred batch reaches the tables, and the failed removal is the first due commit's.
    inp = tmp_path / "in"
    landing(inp, 4)
    every, _ = run(spark, inp, tmp_path / "every", DeferPolicy(batches=1))
    by_count = DeferPolicy(batches=3, max_delay_ms=86_400_000)
    deferred, reports = run(spark, inp, tmp_path / "deferred", by_count)
    assert len(reports) == 4
    for table in DEFERRED:
        assert content(deferred, table) == content(every, table), table
    assert content(deferred, "aggregates") == content(every, "aggregates")
    assert every.read("late_events").num_rows > 0
    # Batch 2 commits, and the end of the query (batch 3): 2 appends, not 4.
    appends = [h for h in DeltaTable(deferred.path("arrivals")).history() if h["operation"] == "WRITE"]
    assert len(appends) == 2, appends
    assert PendingRows(str(tmp_path / "deferred" / "ck")).batches() == []

    # A commit that reached the tables but not the removal of its folders, then the batch again.
    calls = {"n": 0}
    real_remove = PendingRows.remove

    def failing_remove(self, through):
        calls["n"] += 1
        if calls["n"] == 1:
            msg = "killed after the commit"
            raise OSError(msg)
        real_remove(self, through)

    monkeypatch.setattr(PendingRows, "remove", failing_remove)
    with pytest.raises(Exception, match="killed after the commit"):
        run(spark, inp, tmp_path / "failed", by_count)
    again, _ = run(spark, inp, tmp_path / "failed", by_count)
    for table in (*DEFERRED, "aggregates"):
        assert content(again, table) == content(every, table), table
