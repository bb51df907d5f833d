"""Idleness in partition-scoped mode: a silent partition's watermark follows the fleet after its timeout.

With the windows known (the replay and the job give them), no higher than the end of the partition's own last
window: its windows fire, and a device that comes back with a buffered backlog keeps what lies beyond them.
"""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.strategies_for_tests import NAMES, PARAMS, streams
from watermark.evaluation.replay import WindowSpec, replay
from watermark.partitions.combine import PartitionedWatermark
from watermark.partitions.idle import IdleLearning
from watermark.timeutil import NO_WATERMARK

LAG0 = {"max_event_time_lag_ms": 0, "max_watermark_lag_ms": 10**9}  # W = last arrival - 1


def window_of(result, key, start):
    w = result.windows
    [i] = np.flatnonzero((np.asarray(result.keys)[w.key] == key) & (w.start_ms == start)).tolist()
    return bool(w.fired[i]), int(w.fire_tp_ms[i]), int(w.fire_wm_ms[i]), int(w.count[i])


def fleet_replay(te, tp, keys, idle_timeout_ms):
    return replay(te, tp, strategy="ingestion", params=LAG0, window=WindowSpec(1_000), key=keys,
                  partition=keys, partition_mode="scoped", idle_timeout_ms=idle_timeout_ms)  # fmt: skip


# Device b sends once at 100 and stops; device a goes on every second.
STOPPED = ([100, 500, 1_500, 2_500, 3_500], [100, 500, 1_500, 2_500, 3_500], ["b", "a", "a", "a", "a"])


def test_a_stopped_partitions_last_window_fires_at_its_idle_timeout_raised_to_its_own_windows_end():
    r = fleet_replay(*STOPPED, idle_timeout_ms=2_000)
    # b falls idle at 100 + 2000 = 2100; a's watermark is then 1499 (its arrival at 1500), above the end of
    # b's last window: b is raised to 1000, and its [0, 1000) fires at that instant, not at a next arrival of
    # b (there is none).
    assert window_of(r, "b", 0) == (True, 2_100, 1_000, 1)
    assert window_of(fleet_replay(*STOPPED, idle_timeout_ms=None), "b", 0)[0] is False  # stuck without


def test_the_silent_partition_is_not_raised_before_its_timeout_has_elapsed():
    r = fleet_replay(*STOPPED, idle_timeout_ms=3_000)  # idle from 3100: a's watermark is then 2499
    assert window_of(r, "b", 0) == (True, 3_100, 1_000, 1)
    assert window_of(fleet_replay(*STOPPED, idle_timeout_ms=4_000), "b", 0)[0] is False  # 4100: no arrival


def test_a_returning_partitions_old_tuples_are_late_and_its_new_ones_judged_by_the_raised_watermark():
    te, tp, keys = STOPPED
    r = fleet_replay([*te, 150, 3_000], [*tp, 3_600, 3_700], [*keys, "b", "b"], idle_timeout_ms=2_000)
    # b was raised to 1000 at 2100 (the end of its window; a was at 1499) and no further while idle.
    assert r.wm_at_arrival[-2:].tolist() == [1_000, 3_599]
    assert r.late.tolist() == [False] * 5 + [True, True]
    assert window_of(r, "b", 0) == (True, 2_100, 1_000, 1)  # emitted once, without the straggler


def test_a_device_back_from_offline_keeps_its_backlog_beyond_its_last_window():
    # a reports every 100 ms throughout; b until 1000, then offline, and at 4000 it flushes what it
    # buffered (event times 1100..3900). Idle from 2000, b is raised to 2000 (the end of [1000, 2000), its
    # last window), not to a's 3999: its backlog in that window is late, the rest (2000..3900) on time.
    a = [(t, t, "a") for t in range(0, 5_000, 100)]
    b = [(t, t, "b") for t in range(0, 1_001, 100)] + [
        (t, 4_000 + t // 100, "b") for t in range(1_100, 4_000, 100)
    ]
    te, tp, keys = (list(c) for c in zip(*sorted(a + b, key=lambda r: r[1]), strict=True))
    periodic = {"delay_ms": 0, "period_ms": 1}
    for cap, late in (
        (WindowSpec(1_000), list(range(1_100, 2_000, 100))),
        (None, list(range(1_100, 3_900, 100))),
    ):
        pw = PartitionedWatermark("periodic", periodic, idle_timeout_ms=1_000, mode="scoped", window=cap)
        wm = pw.process(keys, te, tp)
        got = [t for t, w, k in zip(te, wm.tolist(), keys, strict=True) if k == "b" and t < w]
        assert got == late  # with the windows: 9 of 29 late; following the fleet (3900): 28


def test_the_idle_partition_follows_the_slowest_active_partition_never_the_fastest():
    pw = PartitionedWatermark("ingestion", LAG0, idle_timeout_ms=1_000, mode="scoped")
    pw.process(["idle", "slow", "fast"], [0, 0, 0], [0, 500, 900])
    pw.process(["slow"], [0], [1_400])  # idle since 1000; the active ones are at 1399 and 899
    assert pw.partition_watermarks == {"idle": 899, "slow": 1_399, "fast": 899}
    pw.process(["fast"], [0], [1_800])
    assert pw.partition_watermarks == {"idle": 1_399, "slow": 1_399, "fast": 1_799}
    pw.process(["fast"], [0], [5_000])  # slow idle since 2400 too: both follow the only active one
    assert pw.partition_watermarks == {"idle": 4_999, "slow": 4_999, "fast": 4_999}


def test_a_raised_watermark_never_goes_back_when_a_lagging_partition_returns():
    pw = PartitionedWatermark("ingestion", LAG0, idle_timeout_ms=1_000, mode="scoped")
    pw.process(["a", "b"], [0, 0], [0, 100])
    pw.process(["b"], [0], [3_000])  # a idle since 1000: raised to b's 2999
    pw.process(["c"], [0], [3_050])  # a new partition, far behind in its own watermark? no: W = 3049
    assert pw.partition_watermarks["a"] == 2_999
    pw.process(["b"], [0], [3_100])
    assert pw.partition_watermarks["a"] == 3_049  # the fleet's minimum (c), above what a had


def test_nothing_moves_once_every_partition_is_idle():
    pw = PartitionedWatermark("ingestion", LAG0, idle_timeout_ms=100, mode="scoped")
    pw.process(["a", "b"], [0, 0], [0, 50])
    # a falls idle at 100 and follows b (49); b falls idle at 150: no fleet is left to follow.
    assert pw.on_idle(10_000).partition_watermarks == {"a": 49, "b": 49}


@pytest.mark.parametrize("timeout", [1_000, "auto"])
def test_the_idle_state_survives_a_json_snapshot_and_old_snapshots_still_load(timeout):
    learning = IdleLearning(floor_ms=100, min_gaps=2) if timeout == "auto" else timeout
    parts, te = ["a", "b", "a", "b", "a", "a", "b", "a"], [0, 10, 200, 210, 400, 600, 5_000, 5_100]
    whole = PartitionedWatermark("ingestion", LAG0, idle_timeout_ms=learning, mode="scoped")
    expected = whole.process(parts, te, te)
    first = PartitionedWatermark("ingestion", LAG0, idle_timeout_ms=learning, mode="scoped")
    head = first.process(parts[:5], te[:5], te[:5])
    snap = json.loads(json.dumps(first.snapshot()))
    again = PartitionedWatermark.from_snapshot(snap)
    assert again.idle_timeouts_ms == first.idle_timeouts_ms
    tail = again.process(parts[5:], te[5:], te[5:])
    assert np.concatenate([head, tail]).tolist() == expected.tolist()
    assert again.snapshot() == whole.snapshot()
    for field in ("idle_gaps", "idle_learning"):  # a snapshot from before learned timeouts
        del snap[field]
    assert PartitionedWatermark.from_snapshot(snap).partition_watermarks == first.partition_watermarks


def test_learned_timeouts_follow_each_partitions_own_cadence():
    learning = IdleLearning(multiplier=2, floor_ms=10, cap_ms=60_000, min_gaps=3)
    pw = PartitionedWatermark("ingestion", LAG0, idle_timeout_ms=learning, mode="scoped")
    fast = [("fast", t) for t in range(0, 1_000, 100)]  # every 100 ms: 2 * 128
    slow = [("slow", t) for t in range(0, 10_000, 1_000)]  # every second: 2 * 1024
    arrivals = sorted(fast + slow, key=lambda a: a[1])
    pw.process([p for p, _ in arrivals], [t for _, t in arrivals], [t for _, t in arrivals])
    assert pw.idle_timeouts_ms == {"fast": 256, "slow": 2_048}
    assert pw.partition_watermarks["fast"] == 8_999  # silent since 900: it follows slow


def test_learned_timeouts_are_the_scoped_modes_elsewhere_auto_is_the_cap():
    assert PartitionedWatermark("ingestion", LAG0, idle_timeout_ms="auto").idle_timeouts_ms == {}
    pw = PartitionedWatermark("ingestion", LAG0, idle_timeout_ms="auto")
    pw.process(["a"], [0], [0])
    assert pw.idle_timeouts_ms == {"a": 600_000} and pw.idle_timeout_ms == "auto"
    again = PartitionedWatermark.from_snapshot(json.loads(json.dumps(pw.snapshot())))
    assert again.idle_timeouts_ms == {"a": 600_000} and again.mode == "min"
    assert (
        PartitionedWatermark("ingestion", LAG0, idle_timeout_ms="auto", mode="scoped").idle_timeout_ms
        == "auto"
    )


@st.composite
def partitioned(draw):
    te, tp = draw(streams(max_size=80))
    labels = draw(st.lists(st.sampled_from(["p0", "p1", "p2", "p3"]), min_size=te.size, max_size=te.size))
    return np.array(labels, dtype=object), te, tp


def fire_instants(traces, befores, ends):
    """Per partition, when each window end fired over a sequence of batches (first batch that fires it)."""
    out = {}
    for trace in traces:
        for p, timeline in (trace.partition_timelines or {}).items():
            fired, t, w = timeline.fire(ends)
            for e, f, ti, wi in zip(ends.tolist(), fired.tolist(), t.tolist(), w.tolist(), strict=True):
                if f and e > timeline.before and (p, e) not in out:
                    out[p, e] = (ti, wi)
    return out


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_any_cut_into_batches_gives_the_decisions_and_fire_instants_of_one_call_and_of_the_loop(name, data):
    params = data.draw(PARAMS[name])
    part, te, tp = data.draw(partitioned())
    timeout = data.draw(
        st.sampled_from([1, 20, 60, 150, IdleLearning(multiplier=2, floor_ms=5, cap_ms=300, min_gaps=2)])
    )
    window = data.draw(st.sampled_from([None, WindowSpec(50), WindowSpec(100, 30)]))
    whole = PartitionedWatermark(name, params, idle_timeout_ms=timeout, mode="scoped", window=window)
    one = whole.process_trace(part, te, tp)
    for tl in (one.partition_timelines or {}).values():  # every partition's timeline is monotone
        levels = np.stack([tl.pre, tl.post], 1).ravel()
        assert np.all(levels[1:] >= levels[:-1]) and np.all(tl.tp[1:] >= tl.tp[:-1])
    cuts = sorted(data.draw(st.lists(st.integers(0, te.size), max_size=4)))
    bounds = [0, *cuts, te.size]
    batched = PartitionedWatermark(name, params, idle_timeout_ms=timeout, mode="scoped", window=window)
    traces, at = [], []
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        batched = PartitionedWatermark.from_snapshot(json.loads(json.dumps(batched.snapshot())))
        trace = batched.process_trace(part[lo:hi], te[lo:hi], tp[lo:hi])
        traces.append(trace)
        at.append(trace.at_arrival)
    np.testing.assert_array_equal(np.concatenate(at), one.at_arrival)
    looped = PartitionedWatermark(name, params, idle_timeout_ms=timeout, mode="scoped", window=window)
    loop_at = [looped.update(p, a, b).watermark_at_arrival_ms for p, a, b in zip(part, te, tp, strict=True)]
    assert loop_at == one.at_arrival.tolist()
    assert looped.partition_watermarks == batched.partition_watermarks == whole.partition_watermarks
    assert looped.idle_timeouts_ms == batched.idle_timeouts_ms == whole.idle_timeouts_ms
    assert looped.n_late == batched.n_late == whole.n_late
    if te.size:
        ends = np.unique(np.concatenate([te, tp])) + 1
        assert fire_instants(traces, None, ends) == fire_instants([one], None, ends)


def test_without_a_timeout_scoped_mode_is_unchanged():
    pw = PartitionedWatermark("ingestion", LAG0, mode="scoped")
    pw.process(["a", "b"], [0, 0], [0, 10_000])
    assert pw.partition_watermarks == {"a": -1, "b": 9_999}
    assert pw.watermark_ms == -1 and NO_WATERMARK < -1


@settings(max_examples=200, deadline=None)
@given(
    gaps=st.lists(st.one_of(st.integers(0, 5_000), st.integers(0, 2**62)), max_size=300),
    multiplier=st.integers(1, 8),
    quantile=st.sampled_from([0.5, 0.9, 0.99, 1.0]),
    memory=st.integers(1, 40),
    min_gaps=st.integers(1, 10),
)
def test_the_vectorised_learned_timeouts_equal_the_gap_by_gap_rule(
    gaps, multiplier, quantile, memory, min_gaps
):  # noqa: E501
    learning = IdleLearning(multiplier, quantile, 20, 30_000, min_gaps=min_gaps, memory=memory)
    hist, expected = [0] * 64, []
    for gap in gaps:
        hist = learning.learn(hist, [gap])
        expected.append(learning.timeout_ms(hist))
    got, final = learning.timeouts([0] * 64, np.array(gaps, np.int64))
    assert got.tolist() == expected and final == hist


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_polling_on_idle_between_arrivals_never_changes_the_decisions(data):
    part, te, tp = data.draw(partitioned())
    timeout = data.draw(st.sampled_from([1, 20, 60, 150]))
    plain = PartitionedWatermark("ingestion", LAG0, idle_timeout_ms=timeout, mode="scoped")
    expected = plain.process(part, te, tp)
    polled = PartitionedWatermark("ingestion", LAG0, idle_timeout_ms=timeout, mode="scoped")
    got = []
    for i in range(te.size):
        if i and data.draw(st.booleans()):  # a poll in the gap before arrival i
            polled.on_idle(data.draw(st.integers(int(tp[i - 1]), int(tp[i]))))
        got.append(int(polled.process(part[i : i + 1], te[i : i + 1], tp[i : i + 1])[0]))
    assert got == expected.tolist()
    assert polled.partition_watermarks == plain.partition_watermarks


@pytest.mark.parametrize("name", ["periodic", "fleet"])
def test_a_sparse_fleet_of_many_partitions_gives_the_decisions_of_the_loop_in_one_call(name):
    # 24 devices, one arrival every 40 ms on average in bursts and lulls: many returns from idleness with a
    # few arrivals between them (kept arrival by arrival) and long busy stretches (vectorised); both paths
    # give what the tuple-by-tuple loop gives, and every partition's timeline stays monotone.
    rng = np.random.default_rng(7)
    gaps = np.where(rng.random(3_000) < 0.1, rng.integers(500, 3_000, 3_000), rng.integers(0, 20, 3_000))
    tp = np.cumsum(gaps)
    te = tp - rng.integers(0, 200, tp.size)
    part = np.array([f"d{i}" for i in rng.integers(0, 24, tp.size)], dtype=object)
    params = {"periodic": {"delay_ms": 50, "period_ms": 10}, "fleet": {"late_slo_pct": 1.0}}[name]
    whole = PartitionedWatermark(name, params, idle_timeout_ms=400, mode="scoped", window=WindowSpec(1_000))
    one = whole.process_trace(part, te, tp)
    looped = PartitionedWatermark(name, params, idle_timeout_ms=400, mode="scoped", window=WindowSpec(1_000))
    loop_at = [looped.update(p, a, b).watermark_at_arrival_ms for p, a, b in zip(part, te, tp, strict=True)]
    assert loop_at == one.at_arrival.tolist()
    assert looped.partition_watermarks == whole.partition_watermarks
    for tl in (one.partition_timelines or {}).values():
        levels = np.stack([tl.pre, tl.post], 1).ravel()
        assert np.all(levels[1:] >= levels[:-1])
