"""The stage run per partition in the executors gives the driver's decisions, state and windows exactly."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.stream.stage.driver import arrival_order, run_stage
from jobs.stream.stage.scoped import OWNERS_SCHEMA, claim
from jobs.stream.stage.summaries import settle
from jobs.stream.workers.executor_stage import ROW_COLUMNS, StagePlan, fire_segments, judge_partition
from watermark.partitions.combine import PartitionedWatermark
from watermark.strategies.registry import make
from watermark.timeutil import NO_WATERMARK


def batch(rng, n, offset, shared_every=0):
    parts = rng.choice(["0", "1", "2"], n)
    tp = np.sort(rng.integers(0, 20_000, n)) + offset
    te = tp - rng.integers(0, 1_500, n)
    keys = np.array([f"k{p}{rng.integers(0, 4)}" for p in parts], dtype=object)
    if shared_every:
        keys[::shared_every] = "shared"  # one key in every partition: only its first partition owns it
    return pa.table(
        {
            "event_id": [f"e{offset + i}" for i in range(n)],
            "key": pa.array(keys.tolist(), pa.string()),
            "partition": pa.array(parts.tolist(), pa.string()),
            "event_time_ms": te,
            "arrival_time_ms": tp,
            "value": np.ones(n),
            "file": pa.array([int(p) for p in parts], pa.int32()),
            "line": np.arange(offset, offset + n),
        }
    )


def executors_run(pw, owners, rows, strategy, params):
    """What the executor path computes for a batch, without Spark: one judge_partition per partition."""
    plan = StagePlan(
        strategy,
        params,
        {str(k): json.dumps(g.snapshot()) for k, g in pw.generators.items()},
        straggler_ms=100,
        floor_ms=NO_WATERMARK,
        window_ms=1_000,
        step_ms=1_000,
        owner_keys=tuple(owners.column("key").to_pylist()),
        owner_partitions=tuple(owners.column("partition").to_pylist()),
    )
    labelled, texts = [], []
    for p in pc.unique(rows.column("partition")).to_pylist():
        mine = rows.filter(pc.equal(rows.column("partition"), p)).select(list(ROW_COLUMNS))
        table, summary = judge_partition(mine, plan)
        labelled.append(table)
        texts.append(summary.to_json())
    settled = settle(texts)
    last = max(settled.summaries, key=lambda s: s.last)
    pw.absorb_partitions(
        [(s.partition, s.snapshot, s.clock_ms, s.rows, s.below_generator) for s in settled.summaries],
        last.wm_at_last_arrival,
        max(s.last[0] for s in settled.summaries),
    )
    return pa.concat_tables(labelled), settled


@pytest.mark.parametrize(
    ("strategy", "params"),
    [
        ("slo", {"late_slo_pct": 1.0}),
        ("periodic", {"delay_ms": 300, "period_ms": 100}),
        ("ingestion", {"max_event_time_lag_ms": 200}),
    ],
)
def test_partitions_judged_apart_give_the_drivers_labels_and_state(strategy, params):
    rng = np.random.default_rng(7)
    driver = PartitionedWatermark(strategy, params, mode="scoped")
    apart = PartitionedWatermark(strategy, params, mode="scoped")
    owners = OWNERS_SCHEMA.empty_table()
    for b in range(3):
        rows = batch(rng, 800, b * 20_000, shared_every=50 if b == 0 else 0)
        order = arrival_order(rows)
        before = owners
        owners, foreign_sorted = claim(
            owners, rows.column("key").take(pa.array(order)), rows.column("partition").take(pa.array(order))
        )
        foreign = np.empty(order.size, bool)
        foreign[order] = foreign_sorted
        result = run_stage(driver, rows, 100, NO_WATERMARK, foreign, order)
        labelled, settled = executors_run(apart, before, rows, strategy, params)

        assert apart.snapshot() == driver.snapshot()
        # New keys go to the partition of their first arrival, as claim() gives them.
        driver_owner = dict(zip(owners["key"].to_pylist(), owners["partition"].to_pylist(), strict=True))
        assert all(driver_owner[k] == p for k, p in settled.claims)
        assert {k for k, _ in settled.claims} == set(driver_owner) - set(before["key"].to_pylist())
        assert {k for k, _ in settled.losers} <= {"shared"}
        assert bool(settled.losers) == (b == 0)
        # Every row's class and watermark, except rows the driver relabels late in Spark (the losers').
        got = {
            (f, line): (c, w)
            for f, line, c, w in zip(
                labelled["file"].to_pylist(),
                labelled["line"].to_pylist(),
                labelled["class"].to_pylist(),
                labelled["wm_missed"].to_pylist(),
                strict=True,
            )
        }
        losers = set(settled.losers)
        for i, (f, line, k, p) in enumerate(
            zip(
                rows["file"].to_pylist(),
                rows["line"].to_pylist(),
                rows["key"].to_pylist(),
                rows["partition"].to_pylist(),
                strict=True,
            )
        ):
            if (k, p) in losers:
                assert result.late[i]  # the driver's claim makes them foreign: late
                continue
            assert got[(f, line)] == (result.classes[i], result.wm_missed[i])


def segment_fire(segments, end):
    """What the executors' broadcast join computes for a window ending at ``end``
    (jobs.stream.stage.executors)."""
    hits = [seg for seg in segments if seg[0] < end <= seg[1]]
    assert len(hits) <= 1
    if not hits:
        return None
    _lo, _hi, trigger, fire_tp, offset, cap = hits[0]
    if offset is None:
        return trigger, fire_tp
    at = min(cap, max(fire_tp, end + offset))
    return (min(trigger, at - offset) if at < cap else trigger), at


GENERATORS = [
    ("periodic", {"delay_ms": 120, "period_ms": 50}),
    ("periodic", {"delay_ms": 0, "period_ms": 200}),
    ("ingestion", {"max_event_time_lag_ms": 300}),
    ("ingestion", {"max_event_time_lag_ms": 0}),
    ("band", {"band_ms": 400}),
    ("slo", {"late_slo_pct": 1.0}),
    ("percentile", {}),
]


@settings(max_examples=150, deadline=None)
@given(
    generator=st.sampled_from(GENERATORS),
    gaps=st.lists(st.integers(0, 400), min_size=1, max_size=60),
    skews=st.lists(st.integers(0, 900), min_size=60, max_size=60),
    floor=st.one_of(st.just(None), st.integers(-1_000, 4_000)),
    window=st.sampled_from([(1_000, 1_000), (1_000, 250), (600, 200), (7, 3)]),
)
def test_fire_segments_fire_every_window_when_the_partitions_timeline_does(
    generator, gaps, skews, floor, window
):
    """Segments date each window as the replay does: at a timer, on a ramp or at an arrival."""
    strategy, params = generator
    window_ms, step_ms = window
    tp = np.cumsum(np.array(gaps, np.int64)) + 1_000
    te = tp - np.array(skews[: tp.size], np.int64)
    gen = make(strategy, params)
    gen.process_trace(te[:1] - 2_000, tp[:1] - 1)  # some history before the batch
    trace = gen.process_trace(te, tp)
    timeline = trace.timeline
    floor_ms = NO_WATERMARK if floor is None else floor
    segments = fire_segments(timeline, floor_ms, window_ms, step_ms)
    low = max(timeline.before, floor_ms)
    # Every window end the timeline can cross: the history's event times reach 3,000 ms below the first
    # arrival and a strategy's initial delay lowers the watermark further (slo: 2,000 ms), so the grid starts
    # well below; a grid starting at -1,000 left crossed ends out of ``crossed`` below.
    ends = np.arange(-10_000 // step_ms, 20_000 // step_ms, dtype=np.int64) * step_ms + window_ms
    ends = ends[ends > low]
    fired, t, w = timeline.fire(ends)
    for end, ok, at, wm in zip(ends.tolist(), fired.tolist(), t.tolist(), w.tolist(), strict=True):
        got = segment_fire(segments, end)
        assert got == ((wm, at) if ok else None), (end, segments)
    # What the driver receives: at most two segments per arrival, and only where a window end was crossed.
    crossed = int(np.count_nonzero(fired))
    assert len(segments) <= 2 * min(crossed, tp.size) + 1
