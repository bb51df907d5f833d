"""Partitions silent for a retention are forgotten: bounded state and log, and never a window emitted twice.

The driver's stage of a batch is run here as the job runs it (``jobs.stream.paths._DriverStage``), with the
rows aggregated by pyarrow instead of Spark.
"""

import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from jobs.common.windows import empty_partials, table_partials
from jobs.stream.checkpoint.state import StageStore
from jobs.stream.paths import _DriverStage
from jobs.stream.report import BatchReport
from jobs.stream.sinks.rows import live_rows, partition_counts, watermark_log_rows
from jobs.stream.stage.driver import evict_partitions
from jobs.stream.stage.scoped import OWNERS_SCHEMA
from jobs.stream.stage.states import StageStart
from jobs.stream.stage.summaries import settle
from jobs.stream.workers.executor_stage import ROW_COLUMNS, judge_partition
from watermark.config import PipelineConfig, default_partition_retention_ms
from watermark.evaluation.replay import LATE, WindowSpec
from watermark.partitions.combine import PartitionedWatermark
from watermark.timeutil import NO_WATERMARK

PARAMS = {"max_event_time_lag_ms": 300, "max_watermark_lag_ms": 1_000}


def config(mode, retention, idle=5_000, window_ms=1_000):
    return PipelineConfig.from_dict(
        {
            "version": 1,
            "strategy": "ingestion",
            "params": PARAMS,
            "window_ms": window_ms,
            "partition_mode": mode,
            "idle_timeout_ms": idle,
            "partition_retention_ms": retention,
        }
    )


@dataclass
class Options:
    """What the driver's stage reads of the job's options."""

    wall: bool

    def boundary_ms(self, ingest_ms):
        return ingest_ms if self.wall else None


class Rows:
    """The batch's rows aggregated by pyarrow, as Spark's reader does it (``SparkRows.aggregate``)."""

    def aggregate(self, narrow, result, window, report, tick):
        late = pa.array(result.late)
        return [table_partials(narrow.filter(pc.invert(late)), window)], narrow.filter(late), tick


def narrow_rows(rows, first_line=0):
    """``(partition, key, te, tp)`` rows as the narrow table the job collects (with key and value)."""
    part, key, te, tp = zip(*rows, strict=True) if rows else ((), (), (), ())
    return pa.table(
        {
            "partition": pa.array(part, pa.string()),
            "event_time_ms": pa.array(te, pa.int64()),
            "arrival_time_ms": pa.array(tp, pa.int64()),
            "file": pa.array(np.zeros(len(part)), pa.int32()),
            "line": pa.array(np.arange(first_line, first_line + len(part)), pa.int64()),
            "key": pa.array(key, pa.string()),
            "value": pa.array(np.ones(len(part)), pa.float64()),
        }
    )


class DriverRun:
    """Batches through the driver's stage, keeping what the job keeps between them."""

    def __init__(self, cfg, wall=False):
        self.cfg, self.options = cfg, Options(wall)
        wm = PartitionedWatermark(
            cfg.strategy,
            cfg.params,
            idle_timeout_ms=cfg.idle_timeout_ms,
            mode=cfg.partition_mode,
            window=cfg.window,  # as the job's stage builds it (jobs.stream.stage.states)
        )
        self.start = StageStart(0, cfg, wm, empty_partials(), NO_WATERMARK, OWNERS_SCHEMA.empty_table())
        self.emitted = []  # (batch, key, window start)
        self.decisions = {}  # line -> (class, watermark judged against)
        self.evicted = {}  # batch -> partitions forgotten
        self.log = []
        self.lines = 0

    @property
    def watermark(self):
        return self.start.watermark

    def batch(self, b, rows, boundary):
        start = self.start
        start.ingest_ms = boundary
        stage = _DriverStage(start, self.options)
        narrow = narrow_rows(rows, self.lines)
        self.lines += narrow.num_rows
        counts = {}
        if narrow.num_rows:
            result, _, _ = stage.run(Rows(), narrow, b, BatchReport(batch_id=b), 0.0)
            lines = narrow.column("line").to_pylist()
            for i, line in enumerate(lines):
                self.decisions[line] = (int(result.classes[i]), int(result.wm_missed[i]))
            counts = partition_counts(narrow, result)
        else:
            stage.without_records()
        fired = stage.fired
        for key, ws in zip(fired["key"].to_pylist(), fired["window_start_ms"].to_pylist(), strict=True):
            self.emitted.append((b, key, ws))
        self.evicted[b] = dict(stage.evicted)
        self.log.extend(watermark_log_rows(start.watermark, counts, b, self.cfg, boundary, stage.evicted))
        self.start = StageStart(
            boundary, self.cfg, start.watermark, stage.open_windows, NO_WATERMARK, stage.owners
        )
        return stage


def assert_emitted_once(run):
    windows = [(key, ws) for _, key, ws in run.emitted]
    assert len(windows) == len(set(windows)), sorted(w for w in windows if windows.count(w) > 1)


# -- the combination --------------------------------------------------------------------------------------
def test_a_scoped_partition_silent_for_the_retention_is_forgotten_and_comes_back_at_the_floor():
    pw = PartitionedWatermark("ingestion", {"max_event_time_lag_ms": 0}, mode="scoped")
    pw.process(["a", "b"], [1_000, 2_000], [1_000, 2_000])
    assert pw.evict(5_000) == {}  # nobody silent for 5 s yet
    pw.process(["b"], [8_000], [8_000])
    assert pw.evict(5_000, keep={"b"}) == {"a": 999}
    assert list(pw.generators) == ["b"] and "a" not in pw.last_arrival_ms
    assert pw.evicted_floor_ms == 999
    # a comes back with a fresh generator held at the floor: its rows below it are late
    at = pw.process(["a", "a"], [500, 5_000], [9_000, 9_001])
    assert at.tolist() == [999, 8_999]  # (the ingestion clock then raises it)


def test_a_min_partition_is_forgotten_only_once_idle_so_the_global_watermark_does_not_move():
    pw = PartitionedWatermark("ingestion", {"max_event_time_lag_ms": 0}, idle_timeout_ms=10_000)
    pw.process(["a", "b"], [1_000, 2_000], [1_000, 2_000])
    pw.process(["b"], [8_000], [8_000])
    assert pw.evict(5_000) == {}  # a is silent for 7 s but not idle (10 s): it still holds W back
    pw.process(["b"], [12_000], [12_000])
    wm = pw.watermark_ms
    assert list(pw.evict(5_000)) == ["a"]
    assert pw.watermark_ms == wm and pw.evicted_floor_ms == NO_WATERMARK
    never_idle = PartitionedWatermark("ingestion", {"max_event_time_lag_ms": 0})
    never_idle.process(["a", "b", "b"], [1_000, 2_000, 90_000], [1_000, 2_000, 90_000])
    assert never_idle.evict(5_000) == {}  # without idleness a silent partition holds W back for ever


def test_floors_survive_a_snapshot_and_a_reconfiguration():
    pw = PartitionedWatermark("periodic", {"delay_ms": 0, "period_ms": 10}, mode="scoped")
    pw.process(["a", "a", "b"], [9_000, 9_000, 2_000], [9_000, 9_050, 9_500])
    pw.process(["b"], [2_100], [20_000])
    assert pw.evict(5_000, keep={"b"}) == {"a": 9_000}
    pw.hold_key_floors([("k", "b"), ("j", "zz")])  # b is below the floor: k keeps it; zz is unknown
    assert pw.key_floors == {"k": 9_000}
    back = PartitionedWatermark.from_snapshot(json.loads(json.dumps(pw.snapshot())))
    assert back.snapshot() == pw.snapshot() and back.key_floors == {"k": 9_000}
    retuned = back.reconfigured("periodic", {"delay_ms": 10})
    assert retuned.evicted_floor_ms == 9_000 and retuned.key_floors == {"k": 9_000}
    # once b's own watermark passes the floor, k needs none
    back.process(["b", "b"], [9_500, 9_600], [20_001, 20_100])
    back.hold_key_floors(())
    assert back.key_floors == {}


def test_the_default_retention_is_the_idle_timeout_100_windows_or_an_hour():
    window = WindowSpec(1_000)
    assert default_partition_retention_ms(window, 60_000) == 3_600_000
    assert default_partition_retention_ms(WindowSpec(60_000), None) == 6_000_000
    assert default_partition_retention_ms(window, 7_200_000) == 7_200_000
    cfg = PipelineConfig.from_dict({"version": 1, "strategy": "periodic", "window_ms": 1_000})
    assert cfg.partition_retention_ms == 3_600_000
    assert "partition_retention_ms" not in cfg.to_dict()  # documents without it keep their form
    never = PipelineConfig.from_dict(cfg.to_dict() | {"partition_retention_ms": None})
    assert never.partition_retention_ms is None
    assert PipelineConfig.from_dict(never.to_dict()).partition_retention_ms is None


# -- the stage ---------------------------------------------------------------------------------------------
def dead_partitions(run, n, per_batch, first_batch=0, name="d"):
    """``n`` partitions (one key each) that arrive once, ``per_batch`` a batch, while ``live`` goes on."""
    b = first_batch
    for first in range(0, n, per_batch):
        t = 10_000 * (b + 1)
        rows = [(f"{name}{i}", f"k{name}{i}", t + i, t + i) for i in range(first, min(n, first + per_batch))]
        rows += [("live", "kl", t + 5_000 + j, t + 5_000 + j) for j in range(3)]
        run.batch(b, rows, t + 9_000)
        b += 1
    return b


@pytest.mark.parametrize(("mode", "wall"), [("scoped", True), ("min", False), ("global", False)])
def test_state_and_watermark_log_stay_bounded_however_many_partitions_die(tmp_path, mode, wall):
    run = DriverRun(config(mode, retention=20_000), wall=wall)
    store = StageStore(str(tmp_path))
    sizes, log_rows = [], []
    b = 0
    for n in (20, 200):
        start = len(run.log)
        b = dead_partitions(run, n, 20, b, name=f"d{n}-")
        for _ in range(4):  # every dead partition silent for longer than the retention
            t = 10_000 * (b + 1)
            run.batch(b, [("live", "kl", t, t)], t + 9_000)
            b += 1
        s = run.start
        store.batch_meta(b - 1, run.cfg)
        store.save(b - 1, s.watermark, s.open_windows, 1, owners=s.owners if mode == "scoped" else None)
        files = [p for p in (tmp_path / "stage").glob(f"state-{b - 1:012d}/*") if p.is_file()]
        sizes.append(sum(p.stat().st_size for p in files))
        log_rows.append([r for r in run.log[start:] if r["batch_id"] == b - 1])
    # Ten times the dead partitions: the same state and the same log rows once they are forgotten.
    assert abs(sizes[1] - sizes[0]) <= 0.05 * sizes[0], sizes
    assert [r["partition"] for r in log_rows[0]] == [r["partition"] for r in log_rows[1]] == ["live"]
    assert set(run.watermark.generators) == {"live"}
    if mode == "scoped":
        assert run.start.owners["key"].to_pylist() == ["kl"]
    # Each dead partition has exactly one last row, null watermark, no event, in the batch that forgot it.
    last = {r["partition"]: r for r in run.log if r["partition"] != "live"}
    assert len(last) == 220
    forgotten = {p: b for b, ps in run.evicted.items() for p in ps}
    for p, row in last.items():
        assert row["partition_watermark_ms"] is None and row["events"] == 0 and not row["active"]
        assert row["batch_id"] == forgotten[p]
    assert all(r["partition_watermark_ms"] is not None for r in live_rows(run.log))


def test_a_partition_is_not_forgotten_while_it_owns_an_open_window():
    # On the arrival clock, without an idle timeout, a scoped partition's last window stays open (its own
    # clock stops): it stays. (With one, its window fires by the fleet:
    # tests/unit/jobs/stream/stage/test_stage_idle.py.)
    run = DriverRun(config("scoped", retention=5_000, idle=None))
    run.batch(0, [("a", "ka", 1_000, 1_000), ("b", "kb", 1_000, 1_000)], 2_000)
    for b in range(1, 4):
        t = 10_000 * b
        run.batch(b, [("b", "kb", t, t)], t)
    assert run.evicted == {0: {}, 1: {}, 2: {}, 3: {}}
    assert "a" in run.watermark.generators
    assert run.start.open_windows.filter(pc.equal(run.start.open_windows["key"], "ka")).num_rows == 1


def test_a_forgotten_partition_and_a_forgotten_key_coming_back_never_emit_a_window_again():
    run = DriverRun(config("scoped", retention=5_000), wall=True)
    run.batch(0, [("a", "ka", 1_100, 1_100), ("c", "kc", 1_200, 1_200), ("b", "kb", 1_300, 1_300)], 3_000)
    assert sorted(k for _, k, _ in run.emitted) == ["ka", "kb", "kc"]  # the boundary closed them all
    run.batch(1, [("b", "kb", 9_000, 9_000)], 10_000)  # a and c silent for 8.8 s, no open window
    assert sorted(run.evicted[1]) == ["a", "c"]
    assert sorted(run.start.owners["key"].to_pylist()) == ["kb"]
    floor = run.watermark.evicted_floor_ms
    assert floor == 10_000 - 1 - 300  # where the boundary took their watermarks
    # a comes back with stragglers of its emitted window; c's key comes back in b: all late, and a key's
    # new window (above the floor) opens and fires once.
    run.batch(
        2,
        [
            ("a", "ka", 1_500, 10_100),
            ("b", "kc", 1_700, 10_150),
            ("a", "ka", 1_950, 10_200),
            ("b", "kc", 9_950, 10_250),
        ],
        10_400,
    )
    assert [run.decisions[line][0] for line in (4, 5, 6)] == [LATE, LATE, LATE]
    assert all(run.decisions[line][1] >= floor for line in (4, 5, 6))
    assert run.decisions[7][0] != LATE
    run.batch(3, [("b", "kb", 30_000, 30_000)], 31_000)
    assert_emitted_once(run)
    assert ("kc", 9_000) in {(k, ws) for _, k, ws in run.emitted}


def test_a_forgotten_key_claimed_by_a_partition_behind_the_floor_keeps_the_floor_until_it_catches_up():
    """q is far behind p: q's watermark alone would let a straggler of p's emitted window open it again."""
    # On the arrival clock: each partition its own (no idle timeout: a silent q stays behind).
    run = DriverRun(config("scoped", retention=5_000, idle=None))
    # p's window (kp, 1000) opens and fires (p's late row at 5000 takes p's watermark to 4699)
    run.batch(0, [("q", "kq", 800, 900), ("p", "kp", 1_000, 1_000), ("p", "kp", 500, 5_000)], 5_000)
    assert [(k, ws) for _, k, ws in run.emitted] == [("kp", 1_000)]
    run.batch(1, [("r", "kr", 10_000, 10_000)], 10_000)  # p silent for 5 s: forgotten (q owns a window)
    assert list(run.evicted[1]) == ["p"]
    floor = run.watermark.evicted_floor_ms
    assert floor == 4_699
    run.batch(2, [("q", "kp", 4_800, 950)], 10_000)  # q claims kp; q's own watermark is 649
    assert run.watermark.partition_watermarks["q"] < floor
    assert run.watermark.key_floors == {"kp": floor}
    run.batch(3, [("q", "kp", 1_500, 1_000)], 10_000)  # a straggler of (kp, 1000), emitted by p
    assert run.decisions[5] == (LATE, floor)
    run.batch(4, [("q", "kq", 3_000, 3_000)], 10_000)  # q's watermark passes 2000: (kq, 0) fires
    assert_emitted_once(run)
    assert sorted((k, ws) for _, k, ws in run.emitted) == [("kp", 1_000), ("kq", 0)]
    run.batch(5, [("q", "kq", 6_000, 6_000)], 10_000)  # q passes the floor: kp needs it no more
    assert run.watermark.key_floors == {}
    assert_emitted_once(run)


ROWS = st.tuples(
    st.integers(0, 3),  # partition
    st.integers(0, 3),  # key: 0-1 the partition's own, 2-3 shared by every partition
    st.integers(0, 9_999),  # arrival offset in the batch
    st.one_of(st.integers(0, 2_500), st.integers(0, 30_000)),  # event time before the arrival
)


@settings(max_examples=60, deadline=None)
@given(
    batches=st.lists(st.lists(ROWS, max_size=12), min_size=2, max_size=9),
    mode=st.sampled_from(["scoped", "min"]),
    wall=st.booleans(),
    retention=st.sampled_from([1, 5_000, 15_000, 30_000]),
)
# Found by this test's random search (2026-12-03), the fix still to come: in scoped mode on the wall clock
# with a retention of 1 ms, partition p1's row of the shared key s2 (a partition never forgotten, its key's
# owner) is judged against a watermark 1 ms higher than in the run that forgets nothing. Pinned as an
# expected failure so that the case is kept; the mark goes when eviction leaves that decision alone.
@example(
    batches=[[(2, 0, 0, 0)], [(0, 0, 0, 0)] * 4 + [(0, 2, 0, 0)], [(0, 0, 0, 0)] * 9 + [(1, 2, 0, 303)]],
    mode="scoped",
    wall=True,
    retention=1,
).xfail(reason="eviction floor: a partition behind is judged 1 ms high after another is forgotten")
def test_eviction_never_emits_a_window_twice_and_leaves_live_partitions_decisions_alone(
    batches, mode, wall, retention
):
    cfg = config(mode, retention=retention, idle=4_000, window_ms=5_000)
    ref = DriverRun(config(mode, retention=None, idle=4_000, window_ms=5_000), wall=wall)
    run = DriverRun(cfg, wall=wall)
    first_eviction = returned = None
    seen_keys: dict[str, int] = {}
    for b, spec in enumerate(batches):
        t0 = 10_000 * (b + 1)
        rows = sorted(
            (f"p{p}", f"k{p}{k}" if k < 2 else f"s{k}", t0 + dt - skew, t0 + dt) for p, k, dt, skew in spec
        )
        rows.sort(key=lambda r: r[3])
        for _, key, _, _ in rows:
            seen_keys.setdefault(key, b)
        forgotten = {p for ps in run.evicted.values() for p in ps}
        if returned is None and any(r[0] in forgotten for r in rows):
            returned = b
        for r in (ref, run):
            r.batch(b, rows, t0 + 10_000)
        if first_eviction is None and run.evicted[b]:
            first_eviction = b
    assert_emitted_once(ref)
    assert_emitted_once(run)
    event(f"forgotten: {first_eviction is not None}, one came back: {returned is not None}")
    # The decisions for the partitions never forgotten are those of the run that forgets nothing: in
    # scoped mode for their keys owned before the first eviction by a partition never forgotten; in min
    # mode until a forgotten partition comes back (a new generator then counts in the minimum).
    forgotten = {p for ps in run.evicted.values() for p in ps}
    owner = dict(
        zip(ref.start.owners["key"].to_pylist(), ref.start.owners["partition"].to_pylist(), strict=True)
    )
    line = 0
    for b, spec in enumerate(batches):
        rows = sorted(
            (f"p{p}", f"k{p}{k}" if k < 2 else f"s{k}", 10_000 * (b + 1) + dt - skew, 10_000 * (b + 1) + dt)
            for p, k, dt, skew in spec
        )
        rows.sort(key=lambda r: r[3])
        for part, key, _, _ in rows:
            if part in forgotten:
                pass
            elif mode == "min" and (returned is None or b < returned):
                assert run.decisions[line] == ref.decisions[line], (b, part, key)
            elif mode == "scoped" and owner.get(key) not in forgotten:
                if first_eviction is None or seen_keys[key] <= first_eviction:
                    assert run.decisions[line] == ref.decisions[line], (b, part, key)
            line += 1


# -- the stage in the executors ----------------------------------------------------------------------------
def executor_rows(rows, first_line):
    narrow = narrow_rows(rows, first_line)
    return pa.table(
        {
            "event_id": pa.array([str(i) for i in narrow["line"].to_pylist()], pa.string()),
            **{c: narrow.column(c) for c in ROW_COLUMNS if c != "event_id"},
        }
    ).select(list(ROW_COLUMNS))


def test_the_executors_judge_forgotten_partitions_and_keys_as_the_driver_does():
    """judge_partition with the eviction floor and the key floors gives the driver's labels and state."""
    from jobs.stream.stage.executors import _claim, _stage_plan

    cfg = config("scoped", retention=5_000)
    driver = DriverRun(cfg, wall=True)
    apart = PartitionedWatermark(
        cfg.strategy, cfg.params, idle_timeout_ms=cfg.idle_timeout_ms, mode="scoped", window=cfg.window
    )
    owners = OWNERS_SCHEMA.empty_table()
    script = [
        [("a", "ka", 1_100, 1_100), ("b", "kb", 1_200, 1_200), ("c", "kc", 1_300, 1_300)],
        [("b", "kb", 9_000, 9_000)],  # a and c forgotten at the end of this batch
        [("a", "ka", 1_500, 10_100), ("b", "ka", 9_800, 10_200), ("b", "kn", 9_900, 10_300)],
        [("b", "ka", 9_900, 10_400), ("c", "kc", 12_000, 12_000), ("a", "ka", 12_500, 12_500)],
    ]
    line = 0
    for b, rows in enumerate(script):
        boundary = 10_000 * (b + 1) + 3_000 if b else 3_000
        stage = driver.batch(b, rows, boundary)
        table = executor_rows(rows, line)
        plan = _stage_plan(apart, owners, cfg, NO_WATERMARK)
        labelled, texts = [], []
        for p in pc.unique(table["partition"]).to_pylist():
            got, summary = judge_partition(table.filter(pc.equal(table["partition"], p)), plan)
            labelled.append(got)
            texts.append(summary.to_json())
        settled = settle(texts)
        last = max(settled.summaries, key=lambda s: s.last)
        apart.absorb_partitions(
            [(s.partition, s.snapshot, s.clock_ms, s.rows, s.below_generator) for s in settled.summaries],
            last.wm_at_last_arrival,
            max(s.last[0] for s in settled.summaries),
        )
        apart.hold_key_floors(settled.claims)
        apart.advance_to(boundary)
        owners = _claim(owners, settled)
        keep = {s.partition for s in settled.summaries}
        eviction = evict_partitions(apart, cfg.partition_retention_ms, keep | _kept(driver, stage), owners)
        owners = eviction.owners
        assert eviction.partitions == stage.evicted
        assert apart.snapshot() == driver.watermark.snapshot()
        assert sorted(owners["key"].to_pylist()) == sorted(driver.start.owners["key"].to_pylist())
        got = pa.concat_tables(labelled)
        for ln, cls, wm in zip(
            got["line"].to_pylist(), got["class"].to_pylist(), got["wm_missed"].to_pylist(), strict=True
        ):
            assert (cls, wm) == driver.decisions[ln], (b, ln)
        line += len(rows)
    assert driver.watermark.evicted_floor_ms != NO_WATERMARK


def _kept(run, stage):
    """The partitions the driver's stage kept for their open windows (what the executors collect)."""
    from jobs.stream.stage.scoped import open_owners

    return open_owners(stage.open_windows, stage.owners)
