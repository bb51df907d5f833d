"""Partitions that go silent are forgotten by the job: bounded state and log, and no window emitted twice."""

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from jobs.common.tables import DeltaTables
from jobs.stream.run import run_job
from tests.landing import folder_job, good, land
from tests.samples import BASE_MS as BASE
from watermark.config import PipelineConfig

ROUND_MS = 10_000


def config(mode="scoped", retention=5_000):
    return PipelineConfig.from_dict(
        {
            "version": 1,
            "strategy": "ingestion",
            # the watermark follows the arrivals: a late row 3 s on closes its partition's windows
            "params": {"max_event_time_lag_ms": 300, "max_watermark_lag_ms": 1_000},
            "window_ms": 1_000,
            "partition_mode": mode,
            "idle_timeout_ms": 2_000,
            "partition_retention_ms": retention,
        }
    )


def dying_round(r, dead):
    """Round ``r``: ``dead`` new partitions speak once (a window, then a late row that closes it), while
    the partition ``live`` goes on."""
    t = BASE + r * ROUND_MS
    lines, n = [], 0
    for i in range(dead):
        part = f"d{r}-{i}"
        lines.append(good(f"{part}a", t + 100 + i, t + 100 + i, key=f"k{part}", part=part))
        lines.append(good(f"{part}b", t - 5_000, t + 3_000 + i, key=f"k{part}", part=part))
        n += 2
    for j in range(4):  # the clock ends the round 3 s after the dying ones: they are not silent long yet
        lines.append(good(f"live{r}-{j}", t + 2_000 * j, t + 2_000 * j, key="klive", part="live"))
    return lines


def latest_state(checkpoint: Path) -> dict:
    folder = sorted((checkpoint / "stage").glob("state-*"))[-1]
    manifest = json.loads((folder / "manifest.json").read_text())
    files = {entry["role"]: folder / name for name, entry in manifest["files"].items()}
    return {
        "wm": json.loads(files["wm"].read_text()),
        "bytes": sum(p.stat().st_size for p in files.values()),
        "owners": pq.read_table(files["owners"]) if "owners" in files else None,
    }


def test_forgotten_partitions_bound_the_state_and_the_log_and_never_emit_a_window_again(spark, tmp_path):
    rounds, dead = 8, 12
    inp = tmp_path / "in"
    for r in range(rounds):
        land(inp, f"r{r:02d}.json", dying_round(r, dead), r)
    # The last round: a forgotten partition comes back with a straggler of its emitted window, and a
    # forgotten key comes back in the live partition with one: both late, no window emitted again.
    t = BASE + rounds * ROUND_MS
    back = [
        good("back-p", BASE + 150, t + 100, key="kd0-0", part="d0-0"),
        good("back-k", BASE + 160, t + 200, key="kd0-1", part="live"),
        good("back-new", t + 300, t + 300, key="kd0-2", part="live"),  # a forgotten key's new window
        good("live-end", t + 9_000, t + 9_000, key="klive", part="live"),
    ]
    land(inp, f"r{rounds:02d}.json", back, rounds)
    opts = folder_job(tmp_path, config(), max_files_per_trigger=1)
    reports = run_job(spark, opts)
    assert len(reports) == rounds + 1
    sink = DeltaTables(opts.output, "r")

    # The state holds the partitions alive, live and the returning one, whatever the rounds before.
    state = latest_state(tmp_path / "ck")
    kept = {p for p, _, _ in state["wm"]["watermark"]["partitions"]}
    assert kept == {"live", "d0-0"}
    owners = set(state["owners"].column("partition").to_pylist())
    assert owners <= kept and "klive" in state["owners"].column("key").to_pylist()
    assert state["owners"].num_rows <= dead + 3

    # watermark_log: each batch logs the partitions it heard from (or still active), and once each forgotten
    # partition with a null watermark, in the batch that forgot it.
    log = sink.read("watermark_log").to_pylist()
    per_batch = {}
    for row in log:
        per_batch[row["batch_id"]] = per_batch.get(row["batch_id"], 0) + 1
    assert max(per_batch.values()) <= 2 * dead + 3, per_batch
    final = [r for r in log if r["partition_watermark_ms"] is None]
    assert sorted(r["partition"] for r in final) == sorted(
        f"d{r}-{i}" for r in range(rounds) for i in range(dead)
    )
    latest = {r["partition"]: r for r in sorted(log, key=lambda r: r["batch_id"])}
    assert latest["d0-0"]["partition_watermark_ms"] is not None  # it came back: known again
    assert all(r["events"] == 0 and not r["active"] for r in final)

    # No window twice; the stragglers are late with a watermark at least the forgotten partition's.
    agg = sink.read("aggregates")
    windows = list(zip(agg["key"].to_pylist(), agg["window_start_ms"].to_pylist(), strict=True))
    assert len(windows) == len(set(windows))
    late = {r["event_id"]: r for r in sink.read("late_events").to_pylist()}
    assert {"back-p", "back-k"} <= set(late)
    assert late["back-p"]["watermark_ms"] > BASE + 1_000  # the floor: above the window it missed
    assert late["back-k"]["watermark_ms"] > BASE + 1_000
    assert "back-new" not in late and ("kd0-2", t) in windows  # a forgotten key's new window: once


def test_the_stage_in_the_executors_forgets_partitions_as_the_driver_does(spark, tmp_path):
    """The executors' pass (one broadcast of snapshots and owners) forgets, floors and logs the same way."""
    from jobs.common.session import arrow_frame
    from jobs.stream.stage.executors import release, run_in_executors
    from jobs.stream.stage.scoped import OWNERS_SCHEMA
    from jobs.stream.workers.executor_stage import ROW_COLUMNS
    from watermark.partitions.combine import PartitionedWatermark
    from watermark.timeutil import NO_WATERMARK

    cfg = config(retention=5_000)
    wm = PartitionedWatermark(cfg.strategy, cfg.params, idle_timeout_ms=cfg.idle_timeout_ms, mode="scoped")
    owners, open_dir = OWNERS_SCHEMA.empty_table(), None
    t = BASE
    script = [
        # a and c speak once and close their windows (the late row 3 s on); b goes on
        [("a", "ka", t + 100, t + 100), ("a", "ka", t - 5_000, t + 3_000), ("b", "kb", t, t)]
        + [("c", "kc", t + 200, t + 200), ("c", "kc", t - 5_000, t + 3_100)],
        [("b", "kb", t + 9_000, t + 9_000)],
        # a comes back with a straggler of its emitted window; c's key comes back in b with one
        [
            ("a", "ka", t + 150, t + 10_100),
            ("b", "kc", t + 250, t + 10_200),
            ("b", "kb", t + 10_300, t + 10_300),
        ],
    ]
    evicted, late, fired = [], [], []
    line = 0
    for batch_id, rows in enumerate(script):
        table = pa.table(
            {
                "event_id": [f"e{line + i}" for i in range(len(rows))],
                "key": [r[1] for r in rows],
                "partition": [r[0] for r in rows],
                "event_time_ms": pa.array([r[2] for r in rows], pa.int64()),
                "arrival_time_ms": pa.array([r[3] for r in rows], pa.int64()),
                "value": pa.array([1.0] * len(rows), pa.float64()),
                "file": pa.array([0] * len(rows), pa.int32()),
                "line": pa.array(range(line, line + len(rows)), pa.int64()),
                "reason": pa.nulls(len(rows), pa.string()),
            }
        )
        line += len(rows)
        parsed = arrow_frame(spark, table).select(*ROW_COLUMNS, "reason").repartition("partition")
        out = run_in_executors(
            spark,
            parsed,
            watermark=wm,
            owners=owners,
            config=cfg,
            floor_ms=NO_WATERMARK,
            files=["topic/0"],
            batch_id=batch_id,
            ingest_ms=t,
            open_before=None,
            open_before_dir=open_dir,
            checkpoint=str(tmp_path / "ck"),
            arrival_history=False,
            phases={},
        )
        try:
            if "late_events" in out.rows_out:
                late += out.rows_out["late_events"].toArrow().to_pylist()
            if "aggregates" in out.rows_out:
                fired += out.rows_out["aggregates"].toArrow().to_pylist()
        finally:
            assert out.broadcasts
            release(out)
            assert not out.broadcasts
        evicted.append(out.evicted)
        owners, open_dir = out.owners, out.open_folder
    assert [sorted(e) for e in evicted] == [[], ["a", "c"], []]
    assert wm.evicted_floor_ms >= t + 3_000 - 301
    by_id = {r["event_id"]: r for r in late}
    assert {"e6", "e7"} <= set(by_id)  # the returning straggler and the forgotten key's
    assert all(by_id[e]["watermark_ms"] >= wm.evicted_floor_ms for e in ("e6", "e7"))
    windows = [(r["key"], r["window_start_ms"]) for r in fired]
    assert len(windows) == len(set(windows))
    assert sorted(pc.unique(owners["partition"]).to_pylist()) == ["a", "b"]
