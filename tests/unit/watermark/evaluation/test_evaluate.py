"""Replay evaluation: window assignment, firing, latencies and the report, on hand-checkable data."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from watermark.evaluation.replay import LATE, STRAGGLER, WindowSpec, classify, replay


def test_tumbling_windows_align_to_epoch_zero_like_spark_including_before_1970():
    rows, starts = WindowSpec(1_000).assign(np.array([0, 999, 1_000, 1_234_567, -1, -1_000, -1_001]))
    assert rows.tolist() == list(range(7))
    assert starts.tolist() == [0, 0, 1_000, 1_234_000, -1_000, -1_000, -2_000]


def test_sliding_windows_start_at_multiples_of_the_slide():
    rows, starts = WindowSpec(1_000, 250).assign(np.array([1_100]))
    assert rows.tolist() == [0, 0, 0, 0]
    assert starts.tolist() == [250, 500, 750, 1_000]


@given(
    te=st.lists(st.integers(-(10**12), 10**12), min_size=1, max_size=30),
    window=st.integers(1, 5_000),
    data=st.data(),
)
def test_every_assigned_window_contains_its_event_and_none_is_missed(te, window, data):
    slide = data.draw(st.integers(1, window))
    arr = np.array(te, np.int64)
    rows, starts = WindowSpec(window, slide).assign(arr)
    assert np.all(starts <= arr[rows]) and np.all(arr[rows] < starts + window)
    assert np.all(starts % slide == 0)
    counts = np.bincount(rows, minlength=arr.size)
    expected = [sum(1 for s in range((t - window) // slide + 1, t // slide + 1)) for t in te]
    assert counts.tolist() == expected


def test_window_spec_validation():
    with pytest.raises(ValueError, match="window_ms must be >= 1"):
        WindowSpec(0)
    with pytest.raises(ValueError, match="must not exceed window_ms"):
        WindowSpec(100, 200)


def test_classify_uses_the_watermark_in_force_and_half_the_straggler_band():
    labels = classify([9, 10, 12, 13, 20], [10] * 5, straggler_ms=6)
    assert labels.tolist() == [LATE, STRAGGLER, STRAGGLER, 2, 3]


PERIODIC = {"delay_ms": 100, "period_ms": 100}


def small_replay(**kwargs):
    te = [100, 250, 120, 1_300, 1_400, 140]
    tp = [110, 260, 270, 1_310, 1_420, 1_430]
    return replay(te, tp, strategy="periodic", params=PERIODIC, window=WindowSpec(1_000), **kwargs)


def test_report_of_a_hand_checked_replay():
    # Timer emissions on the grid 110 + k * 100: at 210 -> W = 100 - 100 = 0; at 1310 -> 250 - 100 = 150;
    # at 1410 -> 1300 - 100 = 1200, which fires [0, 1000) at the timer instant 1410, not at the arrival 1420.
    s = small_replay().summary()
    assert s["events"] == 6 and s["late"] == 1 and s["on_time"] == 5
    assert s["dropped_pct"] == pytest.approx(100 / 6, abs=1e-3)
    assert s["windows"] == 2 and s["windows_fired"] == 1 and s["windows_flushed"] == 1
    assert s["trigger_delay_ms"] == {"mean": 200.0, "p50": 200.0, "p95": 200.0, "p99": 200.0}
    assert s["emit_latency_ms"]["mean"] == 410.0
    assert s["watermarks_emitted"] == 3
    assert s["final_watermark_ms"] == 1_200
    assert s["params"] == PERIODIC


def test_late_rows_are_reported_in_input_order_and_windows_count_on_time_tuples_only():
    r = small_replay()
    assert r.late_rows.tolist() == [5]
    w = r.windows
    assert w.start_ms.tolist() == [0, 1_000]
    assert w.count.tolist() == [3, 2]
    assert w.fired.tolist() == [True, False]


def test_rows_are_replayed_in_arrival_order_whatever_the_file_order():
    te = [100, 250, 120, 1_300, 1_400, 140]
    tp = [110, 260, 270, 1_310, 1_420, 1_430]
    perm = [5, 2, 0, 4, 1, 3]
    shuffled = replay(
        [te[i] for i in perm],
        [tp[i] for i in perm],
        strategy="periodic",
        params=PERIODIC,
        window=WindowSpec(1_000),
    )
    assert shuffled.summary() == small_replay().summary()
    assert [perm[i] for i in shuffled.late_rows] == [5]


def test_keys_make_windows_per_key():
    s = small_replay(key=["a", "b", "a", "a", "b", "a"]).summary()
    assert s["keys"] == 2
    assert s["windows"] == 4  # a and b each in [0, 1000) and [1000, 2000)


def test_partitions_combine_generators_and_report_who_holds_back():
    te = [100, 105, 1_000, 1_010, 2_000, 2_010]
    tp = [100, 105, 1_000, 1_010, 2_000, 2_010]
    s = replay(
        te,
        tp,
        strategy="ingestion",
        params={"max_event_time_lag_ms": 0},
        window=WindowSpec(500),
        partition=["p", "q", "p", "q", "p", "p"],
        idle_timeout_ms=500,
    ).summary()
    assert s["partitions"] == 2
    assert s["holdback_partition"] == "p"
    assert s["late"] == 0


def test_stragglers_are_counted_not_dropped():
    s = replay(
        [1_000, 1_000, 1_001],
        [1_000, 1_200, 1_300],
        strategy="ingestion",
        params={"max_event_time_lag_ms": 100},
        window=WindowSpec(1_000),
        straggler_ms=200,
    ).summary()
    # W after tp 1000 is 899, after tp 1200 is 1099: te 1000 at tp 1200 is on time, 101 above W -> normal;
    # te 1001 at tp 1300 is below 1099 -> late.
    assert s["late"] == 1
    s = replay(
        [1_000, 950],
        [1_000, 1_020],
        strategy="ingestion",
        params={"max_event_time_lag_ms": 100},
        window=WindowSpec(1_000),
        straggler_ms=200,
    ).summary()
    assert s["late"] == 0 and s["stragglers"] == 1 and s["stragglers_pct"] == 50.0


def test_empty_and_mismatched_inputs():
    with pytest.raises(ValueError, match="same length"):
        replay([1, 2], [1], strategy="periodic", window=WindowSpec(10))
    s = replay([], [], strategy="periodic", window=WindowSpec(10)).summary()
    assert s["events"] == 0 and s["windows"] == 0 and s["emit_latency_ms"]["mean"] is None


def test_partition_modes_scoped_fires_each_keys_windows_by_its_own_partition():
    # Device b trails a by 500 ms. Under the minimum, a's window [0, 1000) waits for b's watermark; scoped,
    # a's own watermark (te 1_100 - 0 at its arrival 1_100) closes it at once; global follows max te overall.
    te = [100, 100 - 500, 1_100, 1_100 - 500, 2_100, 2_100 - 500]
    tp = [100, 110, 1_100, 1_110, 2_100, 2_110]
    dev = ["a", "b", "a", "b", "a", "b"]

    def fire_of_a(mode):
        params = {"delay_ms": 0, "period_ms": 1}
        r = replay(te, tp, strategy="periodic", params=params, window=WindowSpec(1_000),
                   partition=dev, key=dev, partition_mode=mode)  # fmt: skip
        w = r.windows
        a = (np.asarray(r.keys)[w.key] == "a") & (w.start_ms == 0)
        return int(w.fire_tp_ms[a][0]) if w.fired[a][0] else None

    assert fire_of_a("scoped") == 1_101
    assert fire_of_a("global") == 1_101
    assert fire_of_a("min") is None  # b's watermark passes 1_000 only at 2_111, after the last arrival


def test_partition_mode_keyed_fires_each_keys_windows_by_its_own_watermark_in_a_shared_partition():
    # a and b share partition p; b trails a by 500 ms. Scoped, b's tuples are judged by the partition's
    # watermark (a's progress) and are late; keyed, each key is judged and fired by its own, exactly as
    # scoped with each key its own partition.
    te = [1_100, 600, 2_100, 1_600, 3_100, 2_600]
    tp = [1_100, 1_110, 2_100, 2_110, 3_100, 3_110]
    dev = ["a", "b", "a", "b", "a", "b"]
    params = {"delay_ms": 0, "period_ms": 1}
    run = dict(strategy="periodic", params=params, window=WindowSpec(1_000), key=dev)
    scoped = replay(te, tp, partition=["p"] * 6, partition_mode="scoped", **run)
    keyed = replay(te, tp, partition=["p"] * 6, partition_mode="keyed", **run)
    by_key = replay(te, tp, partition=dev, partition_mode="scoped", **run)
    assert scoped.late.tolist() == [False, True, False, True, False, True]
    assert keyed.late.sum() == 0 and keyed.summary()["partitions"] == 1
    assert np.array_equal(keyed.windows.fire_tp_ms, by_key.windows.fire_tp_ms)
    assert np.array_equal(keyed.windows.fired, by_key.windows.fired)
    with pytest.raises(ValueError, match="'keyed' needs a key"):
        replay(te, tp, strategy="periodic", window=WindowSpec(1_000), partition=dev, partition_mode="keyed")


def test_partition_mode_scoped_needs_keys_that_live_in_one_partition():
    with pytest.raises(ValueError, match="needs a key"):
        replay([1, 2], [1, 2], strategy="periodic", window=WindowSpec(10), partition=["a", "b"],
               partition_mode="scoped")  # fmt: skip
    with pytest.raises(ValueError, match="live in one partition"):
        replay([1, 2], [1, 2], strategy="periodic", window=WindowSpec(10), partition=["a", "b"],
               key=["k", "k"], partition_mode="scoped")  # fmt: skip
    with pytest.raises(ValueError, match="partition_mode must be one of"):
        replay([1], [1], strategy="periodic", window=WindowSpec(10), partition=["a"], partition_mode="max")


def stopped_key_replay(idle_timeout_ms=None):
    # Key b sends once and stops; key a goes on. Scoped per-key firing: b's generator never passes 1000.
    te = [100, 150, 1_200, 2_300, 3_400]
    tp = [110, 160, 1_210, 2_310, 3_410]
    keys = ["b", "a", "a", "a", "a"]
    return replay(te, tp, strategy="periodic", params=PERIODIC, window=WindowSpec(1_000), key=keys,
                  partition=keys, partition_mode="scoped", idle_timeout_ms=idle_timeout_ms)  # fmt: skip


def test_charged_latency_charges_a_stuck_window_until_the_last_arrival():
    r = stopped_key_replay()
    s = r.summary()
    # a's [0, 1000) fires at 1260 and [1000, 2000) at 2360; b's [0, 1000) is stuck: charged 3410 - 1000;
    # a's [2000, 3000) and [3000, 4000) are open at the end: 3410 - 3000 = 410 and 0 (it ends after 3410).
    assert s["windows_flushed"] == 3
    assert s["emit_latency_ms"]["mean"] == 310.0  # fired windows only, as before
    assert sorted(r.charged_latency_ms().tolist()) == [0, 260, 360, 410, 2_410]
    assert s["emit_latency_charged_ms"]["mean"] == 688.0


def test_stuck_windows_of_keys_idle_past_the_timeout_are_counted():
    assert stopped_key_replay().summary()["windows_stuck_idle"] is None  # no timeout, no count
    assert stopped_key_replay().stuck_idle(2_000) == 1  # b's window
    assert stopped_key_replay().stuck_idle(5_000) == 0  # b silent 3.3 s
    # Replayed with the timeout, b's watermark follows a's once b is idle: its window fires, none is stuck.
    assert stopped_key_replay(idle_timeout_ms=2_000).summary()["windows_stuck_idle"] == 0
    assert stopped_key_replay().stuck_idle(0) == 3  # a timeout of 0 counts every stuck window


def test_charged_latency_keeps_a_fired_windows_latency_and_charges_nothing_past_the_end():
    r = small_replay()  # [0, 1000) fired at 1410; [1000, 2000) open, ends after the last arrival (1430)
    assert r.charged_latency_ms().tolist() == [410, 0]
    assert r.summary()["emit_latency_charged_ms"]["mean"] == 205.0


def test_charged_latency_counts_a_window_fired_before_its_end_as_zero():
    # A device clock 5 s ahead: its window [5000, 6000) fires at the ingestion instant 310, before its end.
    r = replay([5_100, 6_200, 7_300], [110, 210, 1_310], strategy="periodic", params=PERIODIC,
               window=WindowSpec(1_000))  # fmt: skip
    assert r.windows.fired[0] and r.windows.fire_tp_ms[0] < r.windows.end_ms[0]
    assert r.charged_latency_ms()[0] == 0
    assert r.summary()["emit_latency_ms"]["mean"] < 0  # the plain figure keeps the sign
