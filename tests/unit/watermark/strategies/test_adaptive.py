"""Adaptive ADWIN watermarks on long streams: drifts, re-learning, heartbeats, fast-path exactness."""

import json

import numpy as np
import pytest

from watermark.strategies.adaptive import MIN_SENSITIVITY, Adaptive
from watermark.strategies.registry import make, restore


def regime_stream(n=40_000, seed=11):
    """Arrivals every ~5 ms whose delay regime changes every 5,000 tuples (small, large, small...)."""
    rng = np.random.default_rng(seed)
    tp = 1_000_000 + np.cumsum(rng.integers(1, 10, n))
    scale = np.where((np.arange(n) // 5_000) % 2 == 0, 30, 600)
    te = tp - (rng.exponential(1.0, n) * scale).astype(np.int64)
    return te.astype(np.int64), tp.astype(np.int64)


def loop(gen, te, tp):
    out = []
    for a, b in zip(te.tolist(), tp.tolist(), strict=True):
        gen.update(a, b)
        out.append(gen.watermark_at_arrival_ms)
    return np.array(out, np.int64)


PARAMS = [
    {"warmup": 500, "late_threshold": 1.0},
    {"warmup": 500, "late_threshold": 0.01, "sensitivity_change": 0.5},
    {"warmup": 200, "late_threshold": 0.05, "skew": "mean", "heartbeat_ms": 300},
    {"warmup": 100, "late_threshold": 0.5, "sensitivity_change": 0.1, "heartbeat_ms": 50, "sensitivity": 0.3},
]


@pytest.mark.parametrize("params", PARAMS)
def test_fast_path_equals_river_public_api_loop_across_chunks_and_batches(params):
    te, tp = regime_stream()
    ref = make("adaptive", params)
    expected = loop(ref, te, tp)
    vec = make("adaptive", params)
    cuts = [0, 7, 8_191, 8_193, 20_000, 33_333, te.size]
    got = np.concatenate([vec.process(te[a:b], tp[a:b]) for a, b in zip(cuts[:-1], cuts[1:], strict=True)])
    np.testing.assert_array_equal(got, expected)
    assert json.dumps(vec.snapshot(), sort_keys=True) == json.dumps(ref.snapshot(), sort_keys=True)
    assert ref.n_drifts > 0


def test_a_low_late_threshold_relearns_the_skew_when_delays_grow():
    te, tp = regime_stream()
    gen = Adaptive(warmup=500, late_threshold=0.01, heartbeat_ms=200)
    gen.process(te[:5_000], tp[:5_000])
    small = gen.skew_ms
    gen.process(te[5_000:10_000], tp[5_000:10_000])
    assert gen.skew_ms > small


def test_without_a_heartbeat_a_stationary_skew_stalls_the_watermark_and_with_one_it_advances():
    rng = np.random.default_rng(3)
    tp = np.arange(0, 200_000, 10, dtype=np.int64)
    te = tp - rng.integers(0, 100, tp.size)
    faithful = Adaptive(warmup=200)
    faithful.process(te, tp)
    beating = Adaptive(warmup=200, heartbeat_ms=100)
    wm = beating.process(te, tp)
    assert faithful.diagnostics()["emissions"] < 20  # a handful of false alarms in 20,000 tuples
    assert tp[-1] - faithful.watermark_ms > 10_000  # seconds behind the head of the stream
    assert beating.diagnostics()["emissions"] > 1_000
    assert tp[-1] - beating.watermark_ms < 500  # within a few skews of the stream's head
    assert np.count_nonzero(te < wm) == 0  # skew learned as the maximum: nothing late on stationary data


def test_warmup_learns_max_or_mean_skew_and_emits_nothing_meanwhile():
    te = np.array([90, 80, 100, 97], np.int64)
    tp = np.array([100, 100, 110, 120], np.int64)
    gen = Adaptive(warmup=4)
    wm = gen.process(te, tp)
    assert gen.skew_ms == 23
    assert gen.diagnostics()["warming_up"] is False
    assert (wm == np.iinfo(np.int64).min).all()
    mean = Adaptive(warmup=4, skew="mean")
    mean.process(te, tp)
    assert mean.skew_ms == 16  # (10 + 20 + 10 + 23) / 4 = 15.75, rounded up


def test_skew_is_at_least_one_millisecond():
    gen = Adaptive(warmup=3)
    gen.process([10, 20, 30], [10, 20, 30])
    assert gen.skew_ms == 1


def test_sensitivity_never_reaches_zero():
    te, tp = regime_stream(20_000)
    gen = Adaptive(warmup=100, late_threshold=0.01, sensitivity_change=0.01, heartbeat_ms=20)
    gen.process(te, tp)
    assert gen.delta >= MIN_SENSITIVITY


def test_snapshot_carries_the_adwin_window():
    te, tp = regime_stream(12_000)
    a = Adaptive(warmup=300, heartbeat_ms=100)
    a.process(te[:6_000], tp[:6_000])
    b = restore(json.loads(json.dumps(a.snapshot())))
    np.testing.assert_array_equal(a.process(te[6_000:], tp[6_000:]), b.process(te[6_000:], tp[6_000:]))


def test_heartbeat_setting_accepts_none_from_the_command_line():
    assert make("adaptive", {"heartbeat_ms": "none"}).params["heartbeat_ms"] is None
    assert make("adaptive", {"heartbeat_ms": "250"}).params["heartbeat_ms"] == 250
    with pytest.raises(ValueError, match="heartbeat_ms expects an integer or none"):
        make("adaptive", {"heartbeat_ms": "soon"})
    with pytest.raises(ValueError, match="heartbeat_ms must be >= 1"):
        make("adaptive", {"heartbeat_ms": 0})
