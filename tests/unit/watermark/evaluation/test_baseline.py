"""Hindsight baselines: the smallest fixed delay at a late share, global or per key, whichever is faster."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.strategies_for_tests import NAMES, PARAMS, streams
from watermark.evaluation.baseline import Hindsight, latency_floor
from watermark.evaluation.replay import replay
from watermark.windowspec import WindowSpec

W = WindowSpec(1_000)
TP = np.arange(0, 60_000, 50, dtype=np.int64)
TE = TP - 50 * (7 - (TP // 50) % 8)  # every 8th arrival 300 ms older than the newest before it
ONE_KEY = np.zeros(TP.size, np.int64)


def test_the_smallest_delay_is_the_boundary_of_the_late_share():
    h = Hindsight(TE, TP, ONE_KEY, window=W, periods_ms=(10,))
    assert h.smallest_delay("global", 10, 0.0) == 300
    assert h.run("global", 10, 300).late_pct == 0.0
    assert h.run("global", 10, 290).late_pct > 0.0  # one step less misses the share
    looser = h.smallest_delay("global", 10, 13.0)
    assert looser is not None and looser < 300 and h.run("global", 10, looser).late_pct <= 13.0


def test_per_key_wins_when_one_device_lags_the_others():
    # Two devices, each in order; b's events arrive 2 s after they happen, a's at once.
    tp = np.arange(0, 40_000, 100, dtype=np.int64)
    key = np.where(np.arange(tp.size) % 2 == 0, "a", "b")
    te = np.where(key == "a", tp, tp - 2_000)
    best = Hindsight(te, tp, key, window=W, periods_ms=(10,)).best(0.0)
    assert best is not None and best.scope == "per-key" and best.delay_ms == 0
    glob = Hindsight(te, tp, key, window=W, periods_ms=(10,))
    assert glob.smallest_delay("global", 10, 0.0) >= 1_900  # one watermark must wait for b
    assert glob.run("global", 10, glob.smallest_delay("global", 10, 0.0)).latency_ms > best.latency_ms


def test_a_share_no_delay_reaches_has_no_baseline():
    h = Hindsight(TE, TP, ONE_KEY, window=W, periods_ms=(10,), max_delay_ms=200)
    assert h.smallest_delay("global", 10, 0.0) is None
    assert h.best(0.0) is None


def test_replays_are_memoised():
    h = Hindsight(TE, TP, ONE_KEY, window=W, periods_ms=(10,))
    h.best(0.0)
    n = h.replays
    h.best(0.0)
    assert h.replays == n


def test_bad_input_gets_a_clear_error():
    with pytest.raises(ValueError, match="one length"):
        Hindsight(TE, TP[:5], ONE_KEY, window=W)
    with pytest.raises(ValueError, match="periods_ms"):
        Hindsight(TE, TP, ONE_KEY, window=W, periods_ms=())
    with pytest.raises(ValueError, match="scope must be one of"):
        Hindsight(TE, TP, ONE_KEY, window=W).run("sideways", 10, 0)


def test_earlier_replays_bracket_the_search_without_changing_its_answer():
    shared = Hindsight(TE, TP, ONE_KEY, window=W, periods_ms=(10,))
    for share in (13.0, 0.0, 5.0, 12.5, 0.0):
        fresh = Hindsight(TE, TP, ONE_KEY, window=W, periods_ms=(10,))
        assert shared.smallest_delay("global", 10, share) == fresh.smallest_delay("global", 10, share)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_no_strategy_goes_below_the_latency_floor_at_its_own_late_share(data):
    te, tp = data.draw(streams(max_size=120))
    if te.size == 0:
        return
    keys = np.array(data.draw(st.lists(st.sampled_from(["a", "b", "c"]), min_size=te.size, max_size=te.size)))
    name = data.draw(st.sampled_from(NAMES))
    params = data.draw(PARAMS[name])
    window = WindowSpec(data.draw(st.sampled_from([50, 200, 1_000])))
    mode = data.draw(st.sampled_from(["min", "scoped"]))
    r = replay(te, tp, strategy=name, params=params, window=window, key=keys, partition=keys,
               partition_mode=mode, idle_timeout_ms=data.draw(st.sampled_from([None, 100])))  # fmt: skip
    s = r.summary()
    charged = r.charged_latency_ms()
    if charged.size == 0:
        return
    floor = latency_floor(te, tp, keys, window=window, late_pct=s["dropped_pct"])
    # the replay's mean is over its windows with an on-time record: at least the floor's (over all windows,
    # those gone counted as 0) times their share of the windows
    groups = len({(k, w) for k, w in zip(keys.tolist(), (te - te % window.window_ms).tolist(), strict=True)})
    assert floor is not None and floor * groups <= charged.sum() + 1e-6


def test_the_floor_falls_as_the_late_share_grows_and_needs_tumbling_windows():
    te = np.array([100, 500, 1_100, 1_500, 2_300])
    tp = np.array([1_100, 1_200, 2_100, 2_900, 4_000])
    key = np.zeros(5, np.int64)
    floors = [latency_floor(te, tp, key, window=WindowSpec(1_000), late_pct=p) for p in (0, 20, 40, 60, 100)]
    assert floors == sorted(floors, reverse=True) and floors[0] > 0 and floors[-1] == 0
    with pytest.raises(ValueError, match="tumbling"):
        latency_floor(te, tp, key, window=WindowSpec(1_000, 500), late_pct=0)


def test_the_floor_allows_the_late_records_of_a_late_share_rounded_as_replays_report_it():
    # 1 of 3 records late is reported as 33.3333 %: the floor must still allow that one record late (its
    # window then counts as gone), not 0.99999 of it (found by the property test above).
    te = np.array([1_000, 1_000, 999])
    tp = np.array([1_000, 1_000, 1_001])
    assert latency_floor(te, tp, np.zeros(3, np.int64), window=WindowSpec(50), late_pct=33.3333) == 0.0


def _stepped_back(step_ms: int = 5_000) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Two in-order devices, 100 ms apart each; b's clock steps back by ``step_ms`` half-way (offsets too)."""
    tp = np.arange(0, 40_000, 50, dtype=np.int64)
    key = np.where(np.arange(tp.size) % 2 == 0, "a", "b")
    offset = np.where((key == "b") & (tp >= 20_000), -step_ms, 0).astype(np.int64)
    return tp + offset, tp, key, offset


def test_in_true_time_a_clock_stepped_back_is_not_charged_as_latency():
    te, tp, key, offset = _stepped_back()
    r = replay(te, tp, strategy="periodic", params={"delay_ms": 0, "period_ms": 10}, window=W, key=key,
               partition=key, partition_mode="scoped")  # fmt: skip
    device, true = r.charged_latency_ms(), r.charged_latency_ms(offset)
    b_after = np.asarray(r.keys)[r.windows.key] == "b"
    b_after &= r.windows.start_ms >= 20_000  # windows only the stepped clock opened (earlier ones: late rows)
    b_after &= r.windows.fired
    # b's windows fire at its next arrival and the next 10 ms tick: at most 60 ms after their end in true
    # time, 5 s more in the device's clock
    assert b_after.sum() >= 10 and true[b_after].max() <= 60
    assert np.all(device[b_after] - true[b_after] == 5_000)
    rest = ~b_after & r.windows.fired  # a's windows, and b's opened before the step: the same either way
    assert np.array_equal(device[rest], true[rest])
    stuck = ~r.windows.fired  # b's last window: charged until the end of input, 5 s less in true time
    assert np.all(np.maximum(device[stuck] - 5_000, 0) == true[stuck])
    with pytest.raises(ValueError, match="one value per input row"):
        r.charged_latency_ms(offset[:-1])


def test_the_hindsight_baseline_and_the_floor_measure_in_true_time_given_the_offsets():
    te, tp, key, offset = _stepped_back()
    h = Hindsight(te, tp, key, window=W, periods_ms=(10,), clock_offset_ms=offset)
    device, true = h.best(0.5), h.best(0.5, true_clock=True)
    assert device is not None and true is not None and true.true_latency_ms is not None
    assert true.true_latency_ms < device.latency_ms  # b's 5 s step no longer charged
    assert h.run(true.scope, 10, true.delay_ms).true_latency_ms == true.true_latency_ms
    floor_device = latency_floor(te, tp, key, window=W, late_pct=0.5)
    floor_true = latency_floor(te, tp, key, window=W, late_pct=0.5, clock_offset_ms=offset)
    assert floor_true is not None and floor_device is not None and floor_true < floor_device
    assert floor_true <= true.true_latency_ms
    zero = np.zeros(te.size, np.int64)
    assert latency_floor(te, tp, key, window=W, late_pct=0.5, clock_offset_ms=zero) == floor_device
    with pytest.raises(ValueError, match="needs the clock offsets"):
        Hindsight(te, tp, key, window=W).best(0.5, true_clock=True)
