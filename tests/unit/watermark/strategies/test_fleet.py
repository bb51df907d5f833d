"""The fleet watermark: per-key lag models, pooling, the shared late budget, congestion and its end, steps."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.strategies_for_tests import PARAMS, streams
from watermark.partitions.combine import PartitionedWatermark
from watermark.strategies import fleet_kernel as fk
from watermark.strategies.fleet import Fleet, FleetWatermark
from watermark.timeutil import NO_WATERMARK
from watermark.windowspec import WindowSpec

ROOT = Path(__file__).resolve().parents[4]
T0 = 1_700_000_000_000


def fleet(**params):
    return Fleet(FleetWatermark(**({"late_slo_pct": 1.0} | params)).params)


def run_keys(f, keys, te, tp):
    slots = np.array([f.slot(k) for k in np.asarray(keys).tolist()], np.int64)
    return f.run(slots, np.asarray(te, np.int64), np.asarray(tp, np.int64))[0]


def stationary(n_keys, per_key, seed, spread_ms=200, step_ms=20):
    """Keys sending in turn every ``step_ms`` in arrival order; each tuple trails by up to ``spread_ms``."""
    rng = np.random.default_rng(seed)
    n = n_keys * per_key
    tp = T0 + np.arange(n, dtype=np.int64) * step_ms
    keys = np.arange(n) % n_keys
    te = tp - rng.integers(0, spread_ms, n)
    return keys, te, tp


def test_a_keys_clock_step_back_is_rebased_instead_of_inflating_its_delay():
    # One key, lags within 30 ms; at arrival 3,000 its clock steps back 20 s.
    rng = np.random.default_rng(0)
    n = 6_000
    tp = T0 + np.arange(n, dtype=np.int64) * 10
    te = tp - rng.integers(0, 30, n)
    te[3_000:] -= 20_000
    gen = FleetWatermark(late_slo_pct=1.0, step_min_ms=1_000, step_run=5)
    gen.process(te, tp)
    assert gen.fleet.steps() == {0: 1}
    assert gen.delay_ms < 100  # without re-basing, 20 s lags would set it near 20 s
    # The key's watermark follows its new clock again: within 100 ms of its frontier at the end.
    assert te.max() - 20_000 - 100 <= gen.watermark_ms


def test_a_run_of_large_lags_shorter_than_a_step_is_disorder_and_counts():
    f = fleet(step_min_ms=100, step_run=5)
    te = T0 + np.arange(100, dtype=np.int64) * 10
    te[50:53] -= 20_000  # three stragglers (beyond 4 times the initial delay): no step
    run_keys(f, [0] * 100, te, T0 + np.arange(100, dtype=np.int64) * 10)
    assert f.steps() == {0: 0}
    assert f._hist[0, fk.bin_of(15_000) :].sum() > 0  # their lags (about 20 s) are in the histogram


def test_a_key_with_little_history_uses_the_fleets_model():
    keys, te, tp = stationary(n_keys=8, per_key=500, seed=1)
    # A ninth key joins for the last rounds, at the others' pace, in order: alone it would need no delay.
    k2, te2, tp2 = stationary(n_keys=9, per_key=6, seed=2)
    tp2 += tp[-1] + 20 - T0
    te2 = np.where(k2 == 8, tp2, te2 + tp[-1] + 20 - T0)
    tail = np.array([tp2[-1] + 1_000], np.int64)  # an arrival after the next allocation instant
    keys = np.concatenate([keys, k2, [0]])
    te, tp = np.concatenate([te, te2, tail - 50]), np.concatenate([tp, tp2, tail])
    delays = {}
    for prior in (0.0, 50.0):
        f = fleet(prior=prior, period_ms=1_000, congestion=0.0)
        run_keys(f, keys, te, tp)
        delays[prior] = f.delays_ms()
    fleet_delays = [delays[50.0][k] for k in range(8)]
    assert delays[0.0][8] == 0  # alone: five lags of 0
    assert min(fleet_delays) / 2 <= delays[50.0][8] <= max(fleet_delays)  # pooled: near the fleet's


def test_the_budget_is_met_on_a_stationary_stream_and_busy_keys_get_tighter_cover():
    # Two busy keys (each 5x the arrivals of the others) among ten, all with lags up to 200 ms.
    rng = np.random.default_rng(2)
    n = 60_000
    tp = T0 + np.arange(n, dtype=np.int64) * 5
    keys = np.where(rng.random(n) < 0.5, rng.integers(0, 2, n), rng.integers(2, 10, n))
    te = tp - rng.integers(0, 200, n)
    f = fleet(late_slo_pct=1.0)
    out = run_keys(f, keys, te, tp)
    wm = np.full(n, np.iinfo(np.int64).min)
    late = np.zeros(n, bool)
    for k in range(10):
        rows = np.flatnonzero(keys == k)
        post = np.maximum.accumulate(out[rows])
        at = np.concatenate([[np.iinfo(np.int64).min], post[:-1]])
        late[rows] = te[rows] < at
        wm[rows] = at
    assert late[n // 5 :].mean() <= 0.011  # the target, 1 %, after the warm-up
    d = f.delays_ms()
    assert min(d[0], d[1]) >= max(d[k] for k in range(2, 10))  # the budget is spent on the sparse keys


def held_back(keys, te, tp, start, stop, seed):
    """The stream with every arrival in ``[start, stop)`` held back 1.5 s + U[0, 0.3] s, in arrival order."""
    rng = np.random.default_rng(seed)
    inside = (tp >= start) & (tp < stop)
    held = tp + np.where(inside, 1_500 + rng.integers(0, 300, tp.size), 0)
    order = np.argsort(held, kind="stable")
    return keys[order], te[order], held[order]


def test_a_congestion_that_holds_every_arrival_alike_adds_no_delay_while_it_lasts():
    keys, te, tp = held_back(*stationary(n_keys=10, per_key=600, seed=3, spread_ms=50, step_ms=10),
                             T0 + 30_000, T0 + 45_000, seed=3)  # fmt: skip
    f = fleet(period_ms=500)
    end = int(np.searchsorted(tp, T0 + 45_000))
    run_keys(f, keys[:end], te[:end], tp[:end])
    # 15 s of arrivals 1.5-1.8 s late but in order: no key's delay covers the hold (before: ~2 s added).
    assert f.congestion_ms < 200
    assert max(f.delays_ms().values()) < 500


def test_the_records_still_in_flight_when_a_congestion_ends_are_guarded():
    keys, te, tp = held_back(*stationary(n_keys=10, per_key=600, seed=3, spread_ms=50, step_ms=10),
                             T0 + 30_000, T0 + 45_000, seed=3)  # fmt: skip
    end = int(np.searchsorted(tp, T0 + 45_000))  # fresh records from here on, the held ones among them
    late_after = {}
    for guard in (0, 500):
        params = {"late_slo_pct": 1.0, "congestion": 0.0, "guard_min_ms": guard}
        pw = PartitionedWatermark("fleet", params, mode="scoped")
        pw.process(keys[:end], te[:end], tp[:end])
        before = pw.n_late
        pw.process(keys[end:], te[end:], tp[end:])
        late_after[guard] = pw.n_late - before
    # Unguarded, the fresh records move each key's watermark past its held ones (1.5 s of them late).
    assert late_after[0] > 100
    assert late_after[500] <= 5


def test_a_device_back_from_offline_holds_its_watermark_for_its_flush_not_for_its_backlogs_transit():
    # a and b report every 100 ms, 100 ms in transit. b is offline from 20 s to 80 s: at 80 s it flushes
    # the minute it buffered, in order, within 0.6 s, while its live records (100 ms transit) come too.
    te_a = np.arange(0, 120_000, 100)
    te_b = np.arange(0, 120_000, 100)
    tp_b = np.where((te_b >= 20_000) & (te_b < 80_000), 80_000 + (te_b - 20_000) // 100, te_b + 100)
    rows = [("a", T0 + e, T0 + e + 100) for e in te_a]
    rows = sorted(rows + [("b", T0 + e, T0 + t) for e, t in zip(te_b, tp_b, strict=True)], key=lambda r: r[2])
    keys, te, tp = (np.array(c) for c in zip(*rows, strict=True))
    pw = PartitionedWatermark("fleet", {"late_slo_pct": 1.0}, mode="scoped")
    wm = pw.process(keys, te, tp)
    b = keys == "b"
    late_backlog = np.count_nonzero(b & (te < wm) & (tp - te > 1_000))
    assert late_backlog <= 12  # the flush is guarded: its records are not overtaken by the live ones
    # ... and released with it: 5 s after the flush b's watermark is within 2 s of its live records (before
    # version 3 of the snapshot it waited about the backlog's transit, a minute)
    after = b & (tp >= T0 + 85_000) & (tp < T0 + 86_000)
    assert np.all(te[after] - wm[after] < 2_000)


def test_a_live_record_right_behind_the_first_of_a_flush_does_not_make_the_backlog_late():
    # As above, but b's first live record arrives in the same millisecond as the first record of its flush
    # (found in the offline-flush family): its transit (100 ms) against the flushed record's (a minute) is
    # the end of a hold, though the key's recent transits were short until that one record came.
    te_b = np.arange(0, 120_000, 100)
    tp_b = np.where((te_b >= 20_000) & (te_b < 80_000), 80_100 + (te_b - 20_000) // 100, te_b + 100)
    rows = [("a", T0 + e, T0 + e + 100) for e in np.arange(0, 120_000, 100)]
    rows = sorted(rows + [("b", T0 + e, T0 + t) for e, t in zip(te_b, tp_b, strict=True)], key=lambda r: r[2])
    keys, te, tp = (np.array(c) for c in zip(*rows, strict=True))
    first = int(np.flatnonzero((keys == "b") & (tp == T0 + 80_100))[1])
    assert te[first] == T0 + 80_000  # the live record, right behind the first flushed one
    # b falls idle while offline (its last window fires: raised no higher than that window's end)
    pw = PartitionedWatermark("fleet", {"late_slo_pct": 1.0}, mode="scoped", idle_timeout_ms=30_000,
                              window=WindowSpec(1_000))  # fmt: skip
    wm = pw.process(keys, te, tp)
    b = keys == "b"
    assert np.count_nonzero(b & (te < wm) & (tp - te > 1_000)) <= 12
    after = b & (tp >= T0 + 86_000) & (tp < T0 + 87_000)
    assert np.all(te[after] - wm[after] < 2_000)


def test_a_congestion_that_widens_every_keys_transit_raises_every_keys_delay_at_once():
    keys, te, tp = stationary(n_keys=10, per_key=600, seed=4, spread_ms=50, step_ms=10)
    rng = np.random.default_rng(5)
    te = np.where(tp >= T0 + 30_000, tp - rng.integers(0, 1_000, tp.size), te)  # lags up to 1 s from 30 s
    delays = {}
    for congestion in (0.0, 1.5):
        f = fleet(congestion=congestion)
        cut, now = (int(np.searchsorted(tp, T0 + x)) for x in (30_000, 31_200))
        run_keys(f, keys[:cut], te[:cut], tp[:cut])
        assert max(f.delays_ms().values()) < 100
        run_keys(f, keys[cut:now], te[cut:now], tp[cut:now])  # 1.2 s later
        delays[congestion] = f.delays_ms()
        assert (f.congestion_ms > 500) == (congestion > 0)
    assert all(delays[1.5][k] >= delays[0.0][k] + 500 for k in range(10))


def test_a_version_1_snapshot_loads_with_no_guard_in_force():
    import base64

    keys, te, tp = stationary(n_keys=3, per_key=300, seed=8)
    a = fleet()
    run_keys(a, keys[:600], te[:600], tp[:600])
    snap = json.loads(json.dumps(a.snapshot()))

    def cut(text, rows, width):
        values = np.frombuffer(base64.b64decode(text), "<f8").reshape(rows, -1)[:, :width]
        return base64.b64encode(np.ascontiguousarray(values).tobytes()).decode("ascii")

    old = snap | {
        "version": 1,
        "kints": [row[:13] for row in snap["kints"]],
        "kfloats": cut(snap["kfloats"], 3, 7),
        "ffloats": cut(snap["ffloats"], 1, 4),
    }
    b = fleet()
    b.load(old)
    assert b._kints[:3, :13].tolist() == old["kints"] and b._kints.shape[1] == fk.N_KINTS
    assert (b._kints[:3, fk.K_GUARD_END] == NO_WATERMARK).all()
    assert b.delays_ms() == a.delays_ms()
    run_keys(b, keys[600:], te[600:], tp[600:])  # and it runs on
    with pytest.raises(ValueError, match="fleet snapshot"):
        b.load(snap | {"version": 5})


def test_fleet_snapshot_round_trips_through_json_and_continues_identically():
    keys, te, tp = stationary(n_keys=5, per_key=400, seed=4)
    a = fleet()
    run_keys(a, keys[:1_000], te[:1_000], tp[:1_000])
    b = fleet()
    b.load(json.loads(json.dumps(a.snapshot())))
    np.testing.assert_array_equal(
        run_keys(a, keys[1_000:], te[1_000:], tp[1_000:]), run_keys(b, keys[1_000:], te[1_000:], tp[1_000:])
    )
    assert a.snapshot() == b.snapshot()


def test_a_lone_generators_snapshot_restores_its_own_fleet():
    from watermark.strategies.registry import restore

    keys, te, tp = stationary(n_keys=1, per_key=3_000, seed=5)
    gen = FleetWatermark(late_slo_pct=0.5, follow_clock=1)
    gen.process(te[:1_500], tp[:1_500])
    twin = restore(json.loads(json.dumps(gen.snapshot())))
    np.testing.assert_array_equal(gen.process(te[1_500:], tp[1_500:]), twin.process(te[1_500:], tp[1_500:]))


_REFERENCE = """
import json, sys
import numpy as np
from watermark.strategies import fleet_kernel as fk
from watermark.strategies.fleet import Fleet, FleetWatermark
data = json.load(sys.stdin)
f = Fleet(FleetWatermark(**data["params"]).params)
slots = np.array([f.slot(k) for k in data["keys"]], np.int64)
out = f.run(slots, np.array(data["te"], np.int64), np.array(data["tp"], np.int64))
print(json.dumps({"out": [a.tolist() for a in out], "snapshot": f.snapshot()}))
"""


def test_the_compiled_kernel_equals_the_same_rule_run_by_the_interpreter():
    # A stream with disorder, a clock step, a congestion and a late key, under NUMBA_DISABLE_JIT=1 (the
    # pure-Python reference) and compiled, with the surge on.
    rng = np.random.default_rng(6)
    n = 1_500
    tp = T0 + np.cumsum(rng.integers(0, 40, n)).astype(np.int64)
    keys = rng.integers(0, 4, n)
    keys[1_200:] = rng.integers(0, 5, n - 1_200)
    te = tp - rng.integers(0, 300, n)
    te[(keys == 1) & (np.arange(n) > 700)] -= 7_000
    tp[900:1_000] += 3_000
    tp = np.maximum.accumulate(tp)
    keys, te, tp = held_back(keys, te, tp, tp[300], tp[500], seed=6)  # a congestion: its end is guarded
    params = {"late_slo_pct": 2.0, "period_ms": 700, "step_min_ms": 500, "follow_clock": 1, "lead": 2.0,
              "surge": 4.0}  # fmt: skip
    payload = json.dumps({"params": params, "keys": keys.tolist(), "te": te.tolist(), "tp": tp.tolist()})
    env = dict(os.environ, NUMBA_DISABLE_JIT="1", PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-c", _REFERENCE], input=payload, capture_output=True, text=True, env=env, check=True
    )
    reference = json.loads(done.stdout)
    f = Fleet(FleetWatermark(**params).params)
    slots = np.array([f.slot(k) for k in keys.tolist()], np.int64)
    out, guarded, surged = [], 0, False
    for i in range(n):  # (one arrival at a time: the same as the whole batch, and the guards show)
        out.append(f.run(slots[i : i + 1], te[i : i + 1], tp[i : i + 1]))
        guarded = max(guarded, len(f.guarded()))
        surged = surged or f.surge_ms > 0
    assert [np.concatenate(a).tolist() for a in zip(*out, strict=True)] == reference["out"]
    assert f.snapshot() == reference["snapshot"]
    assert sum(f.steps().values()) >= 1 and f.snapshot()["fints"][5] > 10  # steps and allocations happened
    assert guarded >= 2 and f.level_ms > 0  # guards and a congestion delay happened
    assert surged  # and a surge


def full_scan_bins(rate, surv, top, allowed_late):
    """The allocation's choice by scanning every bin at every step (the rule before the bracketed scan)."""
    nk = rate.size
    lo, hi = -20.0, 60.0
    best, choice, over = (np.zeros(nk, np.int64) for _ in range(3))
    found = missed = False
    for _ in range(48):
        middle = 0.5 * (lo + hi)
        lam = math.exp(middle)
        late = 0.0
        for s in range(nk):
            if rate[s] == 0.0:
                continue
            w = lam * rate[s]
            costs = [float(fk.EDGES[b]) + w * surv[s, b] for b in range(top[s] + 1)]
            choice[s] = int(np.argmin(costs))  # (the first minimum)
            late += rate[s] * surv[s, choice[s]]
        if late <= allowed_late:
            hi, found, best[:] = middle, True, choice
        else:
            lo, missed, over[:] = middle, True, choice
    if not found:
        best[:] = top
    elif missed:
        fk._fill(best, over, rate, surv, allowed_late)
    return best.tolist(), hi


@st.composite
def allocations(draw):
    """Keys' rates, survival functions (non-increasing, with flat runs and ties) and top bins; a budget."""
    nk = draw(st.integers(1, 6))
    bins = 40
    levels = st.sampled_from([0.0, 1e-4, 1e-3, 0.004, 0.01, 0.05, 0.2, 0.5, 1.0])
    surv = np.zeros((nk, fk.N_BINS))
    for s in range(nk):
        values = draw(st.lists(levels | st.floats(0.0, 1.0), min_size=bins, max_size=bins))
        surv[s, :bins] = sorted(values, reverse=True)
    rate = np.array(draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 3.0, 40.0]) | st.floats(1e-3, 100.0),
                                  min_size=nk, max_size=nk)))  # fmt: skip
    top = np.array(draw(st.lists(st.integers(0, bins - 1), min_size=nk, max_size=nk)), np.int64)
    allowed = draw(st.floats(0.0, 1.0)) * float(rate.sum())
    return rate, surv, top, allowed


@settings(max_examples=200, deadline=None)
@given(allocations())
def test_the_bracketed_bisection_chooses_what_scanning_every_bin_chooses(case):
    # A key's choice never falls as the multiplier rises, so each step of the bisection scans only the bins
    # between the choices at the bracket's ends: the same choice, at a fraction of the scans.
    rate, surv, top, allowed = case
    best, hi = fk.choose_bins(rate, surv, top, allowed, math.nan)
    assert (best.tolist(), hi) == full_scan_bins(rate, surv, top, allowed)


@st.composite
def keyed_streams(draw):
    """(partition, te, tp) in arrival order: up to 4 partitions with disorder, a late joiner, a clock step."""
    te, tp = draw(streams(max_size=120))
    part = np.array(draw(st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=te.size, max_size=te.size)))
    if te.size and draw(st.booleans()):
        te = np.where((part == "b") & (np.arange(te.size) > te.size // 2), te - 3_000, te)
    return part, te, tp


@pytest.mark.parametrize(("mode", "idle"), [("scoped", None), ("scoped", 200), ("min", None), ("min", 300)])
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_shared_state_gives_the_same_decisions_whole_in_cuts_or_tuple_by_tuple(mode, idle, data):
    params = data.draw(PARAMS["fleet"])
    part, te, tp = data.draw(keyed_streams())
    whole = PartitionedWatermark("fleet", params, mode=mode, idle_timeout_ms=idle)
    expected = whole.process(part, te, tp)
    cut = data.draw(st.integers(0, te.size))
    first = PartitionedWatermark("fleet", params, mode=mode, idle_timeout_ms=idle)
    head = first.process(part[:cut], te[:cut], tp[:cut])
    again = PartitionedWatermark.from_snapshot(json.loads(json.dumps(first.snapshot())))
    tail = again.process(part[cut:], te[cut:], tp[cut:])
    np.testing.assert_array_equal(np.concatenate([head, tail]), expected)
    looped = PartitionedWatermark("fleet", params, mode=mode, idle_timeout_ms=idle)
    at = [looped.update(p, a, b).watermark_at_arrival_ms for p, a, b in zip(part, te, tp, strict=True)]
    assert at == expected.tolist()
    # The same state (the combination's reported minimum aside, which scoped mode settles per call).
    assert (
        looped.snapshot()["shared_state"]
        == again.snapshot()["shared_state"]
        == whole.snapshot()["shared_state"]
    )
    assert looped.partition_watermarks == again.partition_watermarks == whole.partition_watermarks
    assert looped.n_late == again.n_late == whole.n_late


def test_the_partitions_of_a_combination_share_one_fleet_and_its_snapshot_holds_it_once():
    keys, te, tp = stationary(n_keys=6, per_key=300, seed=7)
    pw = PartitionedWatermark("fleet", {"late_slo_pct": 1.0}, mode="scoped")
    pw.process(keys, te, tp)
    fleets = {id(g.fleet) for g in pw.generators.values()}
    assert len(fleets) == 1
    snap = pw.snapshot()
    assert snap["shared_state"]["keys"] == list(range(6))
    assert all(p[2]["state"]["fleet"] is None for p in snap["partitions"])
    with pytest.raises(ValueError, match="share state"):
        pw.absorb_partitions([], NO_WATERMARK, int(tp[-1]))


def test_without_a_lead_in_order_arrivals_count_in_the_lag_model():
    # lead=0: the frontier is the key's largest event time, a key is never "live"; its in-order arrivals (lag
    # 0) must still weigh in its lag model, or 2 % of stragglers look like all of its lateness.
    rng = np.random.default_rng(3)
    n = 4_000
    tp = T0 + np.arange(n, dtype=np.int64) * 50
    te = tp - 20
    stragglers = rng.random(n) < 0.02
    te[stragglers] -= 300  # 250 ms behind the record before them
    gen = FleetWatermark(late_slo_pct=5.0, lead=0.0, initial_delay_ms=0)
    gen.process(te, tp)
    assert gen.delay_ms < 250  # 2 % late at no delay is within the 5 % target
    gen = FleetWatermark(late_slo_pct=1.0, lead=0.0, initial_delay_ms=0)
    gen.process(te, tp)
    assert gen.delay_ms >= 250  # ... and not within 1 %


def test_keys_indifferent_at_the_multiplier_share_the_budget_instead_of_all_covering_the_tail():
    # Four keys alike: 1 % of each one's lags about 10 s, 5 % about 200 ms. The multiplier's choice just over
    # the budget (200 ms: 1 % late each) and within it (10 s: none). A budget of 2.5 % of one key's arrivals
    # lets two keys stay at the short delay; only the others cover the tail.
    short, cover = fk.bin_of(200), fk.bin_of(10_000)
    surv = np.zeros((4, fk.N_BINS))
    surv[:, :short] = 0.06
    surv[:, short:cover] = 0.01
    rate = np.ones(4)
    best = np.full(4, cover, np.int64)
    over = np.full(4, short, np.int64)
    fk._fill(best, over, rate, surv, 0.025)
    assert sorted(best.tolist()) == [short, short, cover, cover]
    assert float((rate * surv[np.arange(4), best]).sum()) <= 0.025


@settings(max_examples=300, deadline=None)
@given(allocations(), st.floats(-25.0, 65.0))
def test_a_warm_start_from_any_multiplier_chooses_what_the_cold_bisection_chooses(case, start):
    # An allocation starts its bracket around the last multiplier and stops at a precision of 1e-7 on its
    # logarithm: the same bins as 48 halvings of the whole range, whatever the start.
    rate, surv, top, allowed = case
    warm, hi = fk.choose_bins(rate, surv, top, allowed, start)
    cold, cold_hi = fk.choose_bins(rate, surv, top, allowed, math.nan)
    assert warm.tolist() == cold.tolist()
    assert abs(hi - cold_hi) <= fk.LOG_LAMBDA_TOL  # (the same multiplier, to the precision)


CALM_BUSY_CALM = ((0, 70_000, 0), (70_000, 100_000, 1), (100_000, 170_000, 0))


def regimes(seed, keys=8, per_key_s=2.0, calm_ms=40.0, busy_ms=400.0, spans=CALM_BUSY_CALM):
    """A sparse fleet (``per_key_s`` records a second a key) whose transits are lognormal around ``calm_ms``,
    then ``busy_ms`` (every key at once), then ``calm_ms`` again, by event time; in arrival order."""
    rng = np.random.default_rng(seed)
    span = spans[-1][1]
    n = int(keys * per_key_s * span / 1_000)
    te = T0 + np.sort(rng.integers(0, span, n)).astype(np.int64)
    key = rng.integers(0, keys, n)
    busy = np.zeros(n, bool)
    for lo, hi, b in spans:
        if b:
            busy |= (te - T0 >= lo) & (te - T0 < hi)
    tp = te + (np.where(busy, busy_ms, calm_ms) * np.exp(0.5 * rng.standard_normal(n))).astype(np.int64)
    order = np.argsort(tp, kind="stable")
    return key[order], te[order], tp[order], busy[order]


def test_a_surge_of_every_keys_transits_moves_the_live_keys_delays_within_a_few_arrivals():
    keys, te, tp, busy = regimes(seed=3)
    f = fleet(late_slo_pct=0.5, lead=4.0, surge=4.0)
    slots = np.array([f.slot(k) for k in keys.tolist()], np.int64)
    onset = int(np.flatnonzero(busy)[0])
    f.run(slots[:onset], te[:onset], tp[:onset])
    assert f.surge_ms == 0 and f.diagnostics()["surge_ms"] == 0  # calm: no surge
    threshold = f._ffloats[fk.H_SURGE_AT]
    assert 50 <= threshold <= 300  # four calm medians of the transit above the keys' baselines (about 40 ms)
    # Within the first 20 records of the regime (about a second of the fleet's), the fleet surges: the live
    # keys' least delay is four of its medians (about 400 ms above the baselines).
    seen = []
    for i in range(onset, onset + 20):
        f.run(slots[i : i + 1], te[i : i + 1], tp[i : i + 1])
        seen.append(f.surge_ms)
    assert max(seen) >= 1_000
    end = int(np.flatnonzero(busy)[-1])
    f.run(slots[onset + 20 : end], te[onset + 20 : end], tp[onset + 20 : end])
    assert 600 <= f.surge_ms <= 3_000  # it lasts the whole regime
    f.run(slots[end:], te[end:], tp[end:])
    assert f.surge_ms == 0  # and ends after it


def test_a_surge_makes_fewer_late_records_at_less_latency_than_the_same_fleet_without_it():
    # Per key, scoped: the fleet without a surge either covers the busy regime all along or learns it late.
    keys, te, tp, _ = regimes(seed=4)
    window = WindowSpec(1_000)
    from watermark.evaluation.replay import replay

    out = {}
    for surge in (0.0, 4.0):
        params = {"late_slo_pct": 0.5, "lead": 4.0, "surge": surge}
        r = replay(te, tp, strategy="fleet", params=params, window=window, key=keys, partition=keys,
                   partition_mode="scoped", idle_timeout_ms=30_000)  # fmt: skip
        s = r.summary()
        out[surge] = (s["dropped_pct"], s["emit_latency_charged_ms"]["mean"])
    assert out[4.0][0] < out[0.0][0] and out[4.0][1] < out[0.0][1], out


def test_a_key_far_behind_the_clock_starts_no_surge():
    # One key of eight steps its clock back 6 s for good (its arrivals are not live until it is re-based),
    # and its arrivals come in runs: the others' transits stay calm, so the fleet does not surge.
    keys, te, tp, _ = regimes(seed=5, spans=((0, 60_000, 0),))
    late_key = (keys == 3) & (te - T0 > 20_000)
    te = np.where(late_key, te - 6_000, te)
    f = fleet(late_slo_pct=0.5, lead=4.0, surge=4.0)
    slots = np.array([f.slot(k) for k in keys.tolist()], np.int64)
    surged = 0
    for lo in range(0, te.size, 10):
        f.run(slots[lo : lo + 10], te[lo : lo + 10], tp[lo : lo + 10])
        surged += f.surge_ms > 0
    assert surged == 0
