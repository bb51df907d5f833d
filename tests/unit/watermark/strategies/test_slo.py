"""The late-rate SLO strategy: a quantile of recent lateness, regime changes forgotten, no blackout."""

import json

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from watermark.evaluation.replay import WindowSpec, replay
from watermark.strategies.registry import make, restore
from watermark.strategies.slo import LateRateSLO
from watermark.timeutil import NO_WATERMARK


def steady(n, spread, seed=0, step=10):
    rng = np.random.default_rng(seed)
    tp = np.arange(n, dtype=np.int64) * step
    return tp - rng.integers(0, spread, n), tp


def test_a_watermark_from_the_second_arrival_on_at_the_safe_default():
    gen = LateRateSLO(late_slo_pct=1.0, initial_delay_ms=500, warmup=100)
    wm = gen.process([1_000, 1_010, 1_020], [1_000, 1_010, 1_020])
    assert wm[0] == NO_WATERMARK
    assert wm[1:].tolist() == [1_000 - 500, 1_010 - 490]  # the default fades by 1/warmup per arrival


def test_the_delay_tightens_to_the_quantile_as_the_sample_fills():
    te, tp = steady(3_000, 50)
    gen = LateRateSLO(late_slo_pct=1.0, initial_delay_ms=2_000, warmup=300)
    gen.process(te, tp)
    assert gen.delay_ms < 60  # not 2 s: the lateness never exceeds ~50 ms plus the 10 ms arrival step


def test_one_outlier_costs_one_late_tuple_not_a_delay_held_for_ever():
    te, tp = steady(2_000, 20)
    te = te.copy()
    te[500] -= 3_000  # one tuple 3 s behind
    gen = LateRateSLO(late_slo_pct=1.0, initial_delay_ms=0, warmup=1)
    wm = gen.process(te, tp)
    assert te[500] < wm[500]
    assert gen.delay_ms < 40


def test_a_regime_change_is_forgotten_at_once_not_over_the_sample():
    high, tp1 = steady(2_000, 800, seed=1)
    low, tp2 = steady(600, 20, seed=2)
    te = np.concatenate([high, low + tp1[-1] + 10])
    tp = np.concatenate([tp1, tp2 + tp1[-1] + 10])
    gen = LateRateSLO(late_slo_pct=1.0, initial_delay_ms=0, warmup=1, sample_size=2_000)
    gen.process(te, tp)
    assert gen.n_drifts >= 1
    assert gen.delay_ms < 60  # 600 low values are a third of the sample: a plain window would still say ~780


def test_the_late_share_meets_the_target_on_a_steady_stream():
    te, tp = steady(20_000, 300, seed=4)
    gen = LateRateSLO(late_slo_pct=0.5)
    gen.process(te, tp)
    assert gen.n_late / te.size <= 0.005


def test_after_a_frontier_jump_the_watermark_follows_the_clock_so_held_data_is_on_time():
    # Until 1_000 the stream is in order; then data from [1_000, 2_000) is held back and fresh data from
    # 2_000 on arrives first, interleaved with the held tuples (each 1 s behind the fresh one).
    tp = np.arange(0, 1_000, 10, dtype=np.int64)
    te = tp.copy()
    fresh = np.arange(2_000, 3_000, 10, dtype=np.int64)
    held = fresh - 1_000
    te = np.concatenate([te, np.ravel(np.column_stack([fresh, held]))])
    tp = np.concatenate([tp, np.repeat(fresh - 1_000 + 5, 2)])
    gen = LateRateSLO(late_slo_pct=1.0, initial_delay_ms=0, warmup=1)
    wm = gen.process(te, tp)
    assert np.count_nonzero(te < wm) == 0
    assert gen.diagnostics()["jumps"] == 1
    # Between arrivals the guarded watermark keeps following the clock (a ramp, not a step).
    assert gen.on_idle(int(tp[-1]) + 500).watermark_ms > int(wm[-1])


def test_a_restored_generator_continues_exactly_as_the_saved_one():
    high, tp1 = steady(1_500, 600, seed=5)
    low, tp2 = steady(1_500, 30, seed=6)
    te = np.concatenate([high, low + tp1[-1] + 10])
    tp = np.concatenate([tp1, tp2 + tp1[-1] + 10])
    for cut in (700, 1_600, 2_200):  # before, just after and well after the regime change
        saved = LateRateSLO(late_slo_pct=0.5, sample_size=400)
        saved.process(te[:cut], tp[:cut])
        text = json.dumps(saved.snapshot())
        assert "pickle" not in text
        copy = restore(json.loads(text))
        np.testing.assert_array_equal(copy.process(te[cut:], tp[cut:]), saved.process(te[cut:], tp[cut:]))
        assert copy.snapshot() == saved.snapshot()


def test_the_batch_path_comes_back_to_each_change_it_ran_past_and_matches_the_per_arrival_path():
    # Regimes every 700 arrivals: ADWIN reports changes at checks inside the runs the batch path queues
    # (it checks their values after the run), so it goes back to each of them.
    parts, tps, start = [], [], 0
    for i, spread in enumerate([20, 900, 40, 1_500, 10, 600, 30, 1_200]):
        te, tp = steady(700, spread, seed=10 + i)
        parts.append(te + start)
        tps.append(tp + start)
        start = int(tp[-1]) + 10
    te, tp = np.concatenate(parts), np.concatenate(tps)
    batched = LateRateSLO(late_slo_pct=1.0, sample_size=500)
    out = np.concatenate(
        [batched.process(te[a : a + 1_900], tp[a : a + 1_900]) for a in range(0, te.size, 1_900)]
    )
    single = LateRateSLO(late_slo_pct=1.0, sample_size=500)
    one_by_one = []
    for a, b in zip(te.tolist(), tp.tolist(), strict=True):
        single.update(a, b)
        one_by_one.append(single.watermark_at_arrival_ms)
    assert batched.n_drifts >= 5
    assert batched.n_drifts == single.n_drifts
    np.testing.assert_array_equal(out, one_by_one)
    assert batched.snapshot() == single.snapshot()


def test_replay_of_the_slo_strategy_fires_windows_from_the_start():
    te, tp = steady(5_000, 200, seed=7, step=20)
    r = replay(te, tp, strategy="slo", params={"late_slo_pct": 1.0}, window=WindowSpec(1_000))
    s = r.summary()
    fired = r.windows.fired
    assert r.windows.start_ms[fired].min() == r.windows.start_ms.min()  # no blackout: the first window fires
    assert s["dropped_pct"] <= 1.0


def test_settings_as_strings_work_like_set_flags():
    gen = make("slo", {"late_slo_pct": "0.5", "sample_size": "500"})
    assert gen.params["late_slo_pct"] == 0.5 and gen.params["sample_size"] == 500


def test_a_horizon_forgets_what_arrived_longer_ago_than_it_even_without_a_detected_change():
    # For 20 s one tuple in fifty trails the frontier by ~1 s, then the stream is calm: with a 5 s horizon the
    # sample keeps only the calm values once 5 s have passed, without the horizon the tail stays.
    rng = np.random.default_rng(8)
    tp = np.arange(3_000, dtype=np.int64) * 10
    te = tp - rng.integers(0, 20, tp.size)
    te[:2_000:50] -= 1_000
    common = {"late_slo_pct": 1.0, "initial_delay_ms": 0, "warmup": 1, "adwin_delta": 1e-9}
    common |= {"straggler_factor": 1e9}  # no straggler cap: the tail is 2 %, above the target anyway
    bounded = LateRateSLO(**common, horizon_ms=5_000)
    plain = LateRateSLO(**common)
    bounded.process(te, tp)
    plain.process(te, tp)
    assert bounded.diagnostics()["sample"] <= 501
    assert bounded.n_drifts == plain.n_drifts == 0
    assert bounded.delay_ms < 30 and plain.delay_ms >= 900


def test_the_horizon_is_part_of_the_snapshot():
    te, tp = steady(1_000, 200, seed=9)
    saved = LateRateSLO(late_slo_pct=0.5, horizon_ms=2_000)
    saved.process(te[:600], tp[:600])
    copy = restore(json.loads(json.dumps(saved.snapshot())))
    assert copy.params["horizon_ms"] == 2_000
    np.testing.assert_array_equal(copy.process(te[600:], tp[600:]), saved.process(te[600:], tp[600:]))
    assert make("slo", {"late_slo_pct": "1", "horizon_ms": "none"}).params["horizon_ms"] is None


def test_stragglers_within_the_budget_are_left_late_instead_of_setting_the_delay():
    # 0.2 % of the tuples trail by 3 s, the rest by up to 50 ms: the delay covers the regular values only.
    te, tp = steady(20_000, 50, seed=10)
    te = te.copy()
    te[1_000::500] -= 3_000
    capped = LateRateSLO(late_slo_pct=0.5)
    wm = capped.process(te, tp)
    assert capped.delay_ms < 100
    assert capped.n_late / te.size <= 0.005
    assert int(np.min(wm[2_000:] - np.maximum.accumulate(te)[2_000:])) >= -200  # never chased the tail


def test_a_burst_beyond_the_cap_is_covered_like_a_regime():
    # Thirty tuples in a row trail by 2 s: not stragglers, the cap is lifted and the delay follows.
    te, tp = steady(5_000, 50, seed=11)
    te = te.copy()
    te[4_000:4_030] -= 2_000
    gen = LateRateSLO(late_slo_pct=0.5)
    gen.process(te[:4_030], tp[:4_030])
    assert gen.delay_ms >= 1_900


def test_after_an_upward_change_the_guard_keeps_headroom_over_the_rising_lateness():
    # The lateness ramps up from ~50 ms to ~1 s over 2,000 arrivals: the guard saves late tuples.
    rng = np.random.default_rng(12)
    tp = np.arange(8_000, dtype=np.int64) * 10
    spread = np.concatenate([np.full(4_000, 50), np.linspace(50, 1_000, 2_000), np.full(2_000, 1_000)])
    te = tp - (rng.random(tp.size) * spread).astype(np.int64)
    guarded = LateRateSLO(late_slo_pct=0.5)
    bare = LateRateSLO(late_slo_pct=0.5, surge_factor=0)
    guarded.process(te, tp)
    bare.process(te, tp)
    assert guarded.n_late < bare.n_late


def test_the_new_settings_are_in_the_snapshot():
    te, tp = steady(3_000, 200, seed=13)
    te = te.copy()
    te[500::300] -= 2_000
    saved = LateRateSLO(late_slo_pct=0.5, straggler_factor=2.5, surge_factor=1.5, surge_arrivals=100)
    saved.process(te[:1_700], tp[:1_700])
    copy = restore(json.loads(json.dumps(saved.snapshot())))
    assert copy.params["straggler_factor"] == 2.5 and copy.params["surge_arrivals"] == 100
    np.testing.assert_array_equal(copy.process(te[1_700:], tp[1_700:]), saved.process(te[1_700:], tp[1_700:]))
    assert copy.snapshot() == saved.snapshot()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 40)), min_size=1, max_size=1_500))
def test_the_samples_sorted_blocks_answer_like_a_sorted_list(ops):
    from watermark.strategies import slo_kernel as k

    capacity = 600  # several blocks, splits, and compactions when the spare rows run out
    ints = np.zeros(k.N_INTS, np.int64)
    blocks = np.zeros((k.block_rows(capacity), k.BLOCK + 1), np.int64)
    model: list[int] = []
    for add, value in ops:
        if add and len(model) < capacity:
            k._insert(ints, blocks, value)
            model.append(value)
        elif model:
            value = model[value % len(model)]
            k._remove(ints, blocks, value)
            model.remove(value)
        ints[k.COUNT] = len(model)
    model.sort()
    assert [k.select(ints, blocks, r) for r in range(len(model))] == model
    assert [k.count_le(ints, blocks, x) for x in range(-1, 42)] == [
        sum(v <= x for v in model) for x in range(-1, 42)
    ]


def test_the_sorted_blocks_are_compacted_when_sparse_blocks_use_up_their_rows():
    from watermark.strategies import slo_kernel as k

    ints = np.zeros(k.N_INTS, np.int64)
    rows = k.block_rows(600)
    blocks = np.zeros((rows, k.BLOCK + 1), np.int64)
    model: list[int] = []
    most_blocks = 0
    for round_ in range(3 * rows):  # each round leaves two sparse blocks behind: the rows run out
        new = [1_000 * round_ + i for i in range(130)]
        for v in new:
            k._insert(ints, blocks, v)
        for v in new[1:-1]:
            k._remove(ints, blocks, v)
        model += [new[0], new[-1]]
        ints[k.COUNT] = len(model)
        most_blocks = max(most_blocks, int(ints[k.BLOCKS]))
    assert most_blocks == rows - 1  # it reached the last spare row, and was compacted there
    assert ints[k.BLOCKS] < rows - 1
    assert [k.select(ints, blocks, r) for r in range(len(model))] == model
    assert [k.count_le(ints, blocks, x) for x in (0, 129, 1_000 * rows)] == [1, 2, 2 * rows + 1]
