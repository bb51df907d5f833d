"""Combining per-partition generators: minimum over active partitions, idleness, no regression, visibility."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.strategies_for_tests import NAMES, PARAMS, streams
from watermark.partitions.arrays import factorize, rows_by_code, unique_pairs
from watermark.partitions.combine import PartitionedWatermark
from watermark.strategies.registry import make
from watermark.timeutil import NO_WATERMARK

LAG0 = {"max_event_time_lag_ms": 0, "max_watermark_lag_ms": 10**9}


def test_global_watermark_is_the_minimum_over_partitions():
    pw = PartitionedWatermark("ingestion", LAG0)
    pw.process(["b", "a"], [0, 0], [400, 1_000])
    assert pw.partition_watermarks == {"b": 399, "a": 999}
    assert pw.watermark_ms == 399
    assert pw.holdback_partition == "b"


def test_idle_partition_stops_holding_the_watermark_back_after_the_timeout():
    pw = PartitionedWatermark("ingestion", LAG0, idle_timeout_ms=500)
    pw.process(["a", "b"], [0, 0], [100, 100])
    pw.process(["a"], [0], [599])  # b idle for 499 ms: still active
    assert pw.watermark_ms == 99
    assert pw.holdback_partition == "b"
    pw.process(["a"], [0], [600])  # b idle for 500 ms: excluded
    assert pw.watermark_ms == 599
    assert pw.holdback_partition == "a"
    assert pw.active_partitions() == ["a"]


def test_returning_partition_never_makes_the_watermark_regress_and_its_old_tuples_are_late():
    pw = PartitionedWatermark("ingestion", LAG0, idle_timeout_ms=500)
    pw.process(["a", "b"], [100, 100], [100, 100])
    pw.process(["a"], [2_000], [2_000])
    before = pw.watermark_ms
    wm = pw.process(["b"], [150], [2_001])
    assert wm[0] == before  # judged against the global watermark, which b's silence let advance
    assert pw.n_late == 1
    assert pw.watermark_ms >= before


def test_on_idle_excludes_silent_partitions_without_data():
    pw = PartitionedWatermark("ingestion", LAG0, idle_timeout_ms=300)
    pw.process(["a", "b"], [0, 0], [100, 200])
    assert pw.watermark_ms == 99
    pw.on_idle(450)  # a silent for 350 ms, b for 250 ms
    assert pw.active_partitions() == ["b"]
    assert pw.watermark_ms == 199
    assert pw.holdback_partition == "b"


def test_no_active_partition_keeps_the_watermark():
    pw = PartitionedWatermark("periodic", {"delay_ms": 0, "period_ms": 10}, idle_timeout_ms=100)
    pw.process(["a", "a"], [50, 60], [50, 70])
    assert pw.watermark_ms == 50
    pw.on_idle(10_000)
    assert pw.active_partitions() == []
    # a's timer at 80 emitted 60 while a still counted (until 170); after that nothing moves it.
    assert pw.watermark_ms == 60
    pw.on_idle(20_000)
    assert pw.watermark_ms == 60
    assert pw.holdback_partition is None


def test_partition_keys_may_be_integers_and_keep_first_appearance_order():
    keys, codes = factorize(np.array([7, 3, 7, 1]))
    assert keys == [7, 3, 1]
    assert codes.tolist() == [0, 1, 0, 2]
    keys, codes = factorize(np.array(["x", "b", "x"], dtype=object))
    assert keys == ["x", "b"]
    with pytest.raises(ValueError, match="partition keys must be strings or integers"):
        factorize(np.array([1.5, 2.5], dtype=object))
    with pytest.raises(ValueError, match="partition keys must be strings or integers"):
        factorize(np.array(["a", None], dtype=object))


@given(st.lists(st.one_of(st.sampled_from(["a", "b", "ü", ""]), st.integers(-3, 3)), max_size=30))
def test_factorize_numbers_keys_in_first_appearance_order_for_mixed_and_string_keys(values):
    keys, codes = factorize(np.array(values, dtype=object))
    expected = list(dict.fromkeys(values))
    assert keys == expected
    assert [keys[c] for c in codes.tolist()] == values


def test_lengths_must_match():
    with pytest.raises(ValueError, match="same length"):
        PartitionedWatermark("periodic").process(["a"], [1, 2], [1, 2])


def test_invalid_strategy_or_timeout_is_refused_at_construction():
    with pytest.raises(ValueError, match="unknown strategy"):
        PartitionedWatermark("fastest")
    with pytest.raises(ValueError, match="idle_timeout_ms must be >= 1"):
        PartitionedWatermark("periodic", idle_timeout_ms=0)


@st.composite
def partitioned(draw):
    te, tp = draw(streams(max_size=120))
    labels = draw(st.lists(st.sampled_from(["p0", "p1", "p2", "p3"]), min_size=te.size, max_size=te.size))
    return np.array(labels, dtype=object), te, tp


@pytest.mark.parametrize("name", NAMES)
@given(data=st.data())
def test_vectorised_combination_equals_the_tuple_by_tuple_reference(name, data):
    params = data.draw(PARAMS[name])
    part, te, tp = data.draw(partitioned())
    timeout = data.draw(st.sampled_from([None, 1, 50, 400]))
    ref = PartitionedWatermark(name, params, idle_timeout_ms=timeout)
    expected = []
    for p, a, b in zip(part.tolist(), te.tolist(), tp.tolist(), strict=True):
        ref.update(p, a, b)
        expected.append(ref.watermark_at_arrival_ms)
    cut = data.draw(st.integers(0, te.size))
    vec = PartitionedWatermark(name, params, idle_timeout_ms=timeout)
    got = np.concatenate(
        [vec.process(part[:cut], te[:cut], tp[:cut]), vec.process(part[cut:], te[cut:], tp[cut:])]
    )
    np.testing.assert_array_equal(got, np.array(expected, np.int64))
    assert vec.watermark_ms == ref.watermark_ms
    assert vec.holdback_partition == ref.holdback_partition
    assert vec.n_late == ref.n_late
    assert json.dumps(vec.snapshot(), sort_keys=True) == json.dumps(ref.snapshot(), sort_keys=True)


@pytest.mark.parametrize("name", NAMES)
@given(data=st.data())
def test_combined_watermark_is_monotonic_and_survives_a_snapshot(name, data):
    params = data.draw(PARAMS[name])
    part, te, tp = data.draw(partitioned())
    cut = data.draw(st.integers(0, te.size))
    whole = PartitionedWatermark(name, params, idle_timeout_ms=100)
    trace = whole.process_trace(part, te, tp)
    assert np.all(trace.at_arrival[1:] >= trace.at_arrival[:-1])
    assert np.all(trace.after_arrival >= trace.at_arrival)

    first = PartitionedWatermark(name, params, idle_timeout_ms=100)
    head = first.process(part[:cut], te[:cut], tp[:cut])
    again = PartitionedWatermark.from_snapshot(json.loads(json.dumps(first.snapshot())))
    tail = again.process(part[cut:], te[cut:], tp[cut:])
    np.testing.assert_array_equal(np.concatenate([head, tail]), trace.at_arrival)


def test_single_partition_combination_matches_its_generator_without_idleness():
    rng = np.random.default_rng(4)
    tp = np.cumsum(rng.integers(0, 40, 2_000)) + 10_000
    te = tp - rng.integers(0, 300, 2_000)
    from watermark.strategies.registry import make

    alone = make("periodic", {"delay_ms": 120, "period_ms": 50}).process(te, tp)
    combined = PartitionedWatermark("periodic", {"delay_ms": 120, "period_ms": 50}).process(
        ["x"] * 2_000, te, tp
    )
    np.testing.assert_array_equal(alone, combined)
    assert combined[0] == NO_WATERMARK


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_global_mode_is_one_generator_over_the_stream_in_batches_and_tuple_by_tuple(name, data):
    te, tp = data.draw(streams(max_size=60))
    params = data.draw(PARAMS[name])
    part = np.array(data.draw(st.lists(st.sampled_from(["a", "b", "c"]), min_size=te.size, max_size=te.size)))
    single = make(name, params).process_trace(te, tp)
    pw = PartitionedWatermark(name, params, mode="global")
    cut = data.draw(st.integers(0, te.size))
    first = pw.process_trace(part[:cut], te[:cut], tp[:cut])
    restored = PartitionedWatermark.from_snapshot(json.loads(json.dumps(pw.snapshot())))
    second = restored.process_trace(part[cut:], te[cut:], tp[cut:])
    assert np.concatenate([first.at_arrival, second.at_arrival]).tolist() == single.at_arrival.tolist()
    looped = PartitionedWatermark(name, params, mode="global")
    at = []
    for p, a, b in zip(part.tolist(), te.tolist(), tp.tolist(), strict=True):
        at.append(looped.update(p, a, b).watermark_at_arrival_ms)
    assert at == single.at_arrival.tolist()
    assert looped.watermark_ms == restored.watermark_ms
    if te.size:
        assert set(restored.active_partitions()) <= set(part.tolist())
        assert restored.holdback_partition is None


def test_global_mode_does_not_wait_for_a_slow_partition():
    te, tp = [1_000, 100, 2_000, 200], [1_000, 1_010, 2_000, 2_010]
    part = ["fast", "slow", "fast", "slow"]
    params = {"max_event_time_lag_ms": 0}
    assert (
        PartitionedWatermark("ingestion", params, mode="global").process(part, te, tp).tolist()[-1] == 1_999
    )
    assert PartitionedWatermark("ingestion", params).process(part, te, tp).tolist()[-1] == 1_009


def test_switching_mode_keeps_the_global_watermark_and_rejects_unknown_modes():
    pw = PartitionedWatermark("periodic", {"delay_ms": 0, "period_ms": 1})
    pw.process(["a", "a", "a"], [100, 200, 300], [100, 200, 300])
    held = pw.watermark_ms
    switched = pw.reconfigured("periodic", {"delay_ms": 0, "period_ms": 1}, mode="global")
    assert switched.mode == "global" and switched.watermark_ms == held
    assert switched.process(["a"], [250], [301]).tolist() == [held]  # the fresh generator has nothing yet
    assert switched.reconfigured("periodic", {"delay_ms": 0, "period_ms": 1}).mode == "global"
    with pytest.raises(ValueError, match="mode must be one of"):
        PartitionedWatermark("periodic", mode="per-key")


def interleaving(data, part):
    """Another arrival order across partitions, each partition's own order kept (a Kafka batch cut)."""
    order = []
    queues = {p: [i for i in range(part.size) if part[i] == p] for p in dict.fromkeys(part.tolist())}
    while any(queues.values()):
        p = data.draw(st.sampled_from([q for q, rows in queues.items() if rows]))
        order.append(queues[p].pop(0))
    return np.array(order, dtype=np.intp)


#: Strategies whose partitions share state (fleet: one late budget), so that a partition's decisions depend
#: on the others' arrivals; their batch and tuple-by-tuple invariance is checked in
#: tests/unit/watermark/strategies/test_fleet.py.
SHARED_STATE = {"fleet"}


@pytest.mark.parametrize("name", [n for n in NAMES if n not in SHARED_STATE])
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_scoped_mode_judges_each_tuple_by_its_own_partition_whatever_the_interleaving(name, data):
    params = data.draw(PARAMS[name])
    part, te, tp = data.draw(partitioned())
    # The reference: each partition's generator alone over its own tuples.
    alone = np.empty(te.size, np.int64)
    for p in dict.fromkeys(part.tolist()):
        rows = np.flatnonzero(part == p)
        alone[rows] = make(name, params).process(te[rows], tp[rows])
    # Another interleaving of the partitions, cut into two batches with a snapshot between them.
    order = interleaving(data, part)
    cut = data.draw(st.integers(0, te.size))
    first = PartitionedWatermark(name, params, mode="scoped")
    head = first.process(part[order[:cut]], te[order[:cut]], tp[order[:cut]])
    again = PartitionedWatermark.from_snapshot(json.loads(json.dumps(first.snapshot())))
    tail = again.process(part[order[cut:]], te[order[cut:]], tp[order[cut:]])
    got = np.empty(te.size, np.int64)
    got[order] = np.concatenate([head, tail])
    np.testing.assert_array_equal(got, alone)
    # Tuple by tuple, in the original order, gives the same decisions and the same final state.
    looped = PartitionedWatermark(name, params, mode="scoped")
    at = [looped.update(p, a, b).watermark_at_arrival_ms for p, a, b in zip(part, te, tp, strict=True)]
    assert at == alone.tolist()
    assert looped.partition_watermarks == again.partition_watermarks
    assert looped.n_late == again.n_late == int(np.count_nonzero(te < alone))


def test_scoped_mode_reports_the_minimum_and_no_partition_waits_for_another():
    pw = PartitionedWatermark("ingestion", LAG0, mode="scoped")
    at = pw.process(["fast", "slow", "fast", "slow"], [1_000, 100, 1_990, 50], [1_000, 110, 2_000, 120])
    assert at.tolist() == [NO_WATERMARK, NO_WATERMARK, 999, 109]  # slow's 50 is late by slow's own clock
    assert pw.partition_watermarks == {"fast": 1_999, "slow": 119}
    assert pw.watermark_ms == 119 and pw.holdback_partition == "slow"
    assert pw.on_idle(5_000).partition_watermarks == {"fast": 1_999, "slow": 119}  # time is per partition


@pytest.mark.parametrize("name", ["slo", "periodic", "fleet"])
def test_a_large_batch_run_on_threads_equals_the_same_batch_run_in_one_thread(name, monkeypatch):
    import watermark.partitions.minimum as minimum

    rng = np.random.default_rng(7)
    n = 40_000  # x 8 partitions: above the threaded size
    tp = np.cumsum(rng.integers(0, 3, n))
    te = tp - rng.integers(0, 300, n) - np.where(rng.random(n) < 0.01, 5_000, 0)
    part = rng.integers(0, 8, n)
    params = {"late_slo_pct": 1.0} if name in ("slo", "fleet") else {"delay_ms": 200}
    threaded = PartitionedWatermark(name, params, idle_timeout_ms=50)
    a = threaded.process_trace(part, te, tp)
    monkeypatch.setattr(minimum, "_THREADED_WORK", 10**12)
    alone = PartitionedWatermark(name, params, idle_timeout_ms=50)
    b = alone.process_trace(part, te, tp)
    assert np.array_equal(a.at_arrival, b.at_arrival) and np.array_equal(a.after_arrival, b.after_arrival)
    assert json.dumps(threaded.snapshot(), sort_keys=True) == json.dumps(alone.snapshot(), sort_keys=True)
    assert 0 < int(np.count_nonzero(te < a.at_arrival)) < n // 10  # a real run: some late, most on time


@pytest.mark.parametrize("mode", ["min", "scoped", "global"])
@given(data=st.data())
def test_no_partition_watermark_goes_back_across_a_reconfiguration(mode, data):
    """A re-tune publishes other parameters: every partition's watermark is a floor for its new generator,
    so a straggler of a window a partition already closed stays late (it cannot open the window again)."""
    te, tp = data.draw(streams())
    parts = np.asarray(data.draw(st.lists(st.sampled_from("abc"), min_size=te.size, max_size=te.size)))
    cut = data.draw(st.integers(0, te.size))
    old = PartitionedWatermark("ingestion", {"max_event_time_lag_ms": 0}, mode=mode)
    old.process(parts[:cut], te[:cut], tp[:cut])
    before = old.partition_watermarks
    new = old.reconfigured("periodic", {"delay_ms": 5_000, "period_ms": 100})
    assert all(new.partition_watermarks[p] >= wm for p, wm in before.items())
    assert new.watermark_ms >= old.watermark_ms
    if mode == "scoped":
        trace = new.process_trace(parts[cut:], te[cut:], tp[cut:])
        for p, wm in before.items():
            mine = parts[cut:] == p
            assert (trace.at_arrival[mine] >= wm).all()


@pytest.mark.parametrize("count", [1, 5, 33, 700])
def test_rows_are_grouped_by_code_in_order_whether_scanned_or_sorted(count):
    codes = np.random.default_rng(count).integers(0, count, 5_000)
    groups = rows_by_code(codes, count)
    assert [g.tolist() for g in groups] == [np.flatnonzero(codes == c).tolist() for c in range(count)]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(-3, 40), st.integers(-(2**62), 2**62) | st.integers(-5, 50)), max_size=60)
)
def test_unique_pairs_are_numpys_unique_over_the_pairs_with_their_counts(pairs):
    # One integer per pair where the ranges allow it, a lexicographic sort where they do not (huge values):
    # the same pairs, order and counts as np.unique(..., axis=1).
    a = np.array([p[0] for p in pairs], np.int64)
    b = np.array([p[1] for p in pairs], np.int64)
    ua, ub, counts = unique_pairs(a, b)
    if not pairs:
        assert ua.size == ub.size == counts.size == 0
        return
    expected, expected_counts = np.unique(np.stack([a, b]), axis=1, return_counts=True)
    assert ua.tolist() == expected[0].tolist() and ub.tolist() == expected[1].tolist()
    assert counts.tolist() == expected_counts.tolist()
