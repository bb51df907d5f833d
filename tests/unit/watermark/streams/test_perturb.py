"""Perturbation families: each changes a tiny stream the way its model says, deterministically per seed."""

import numpy as np
import pytest

from watermark.streams.perturb import (
    clock_steps,
    congestion,
    group_partitions,
    offline_flush,
    retransmits,
    stops,
)

TE = np.arange(0, 20_000, 1_000, dtype=np.int64)  # 20 records, one a second, alternating devices a and b
TP = TE + 100
KEY = np.array(["a", "b"] * 10)


def in_arrival_order(tp):
    return bool(np.all(np.diff(tp) >= 0))


def test_retransmits_keep_event_time_and_key_and_arrive_one_retry_later():
    te, tp, key = retransmits(TE, TP, KEY, seed=4, share=0.1, retry_ms=(2_000, 2_000))
    assert te.size == 22 and in_arrival_order(tp)
    originals = set(zip(TE.tolist(), TP.tolist(), KEY.tolist(), strict=True))
    extra = [r for r in zip(te.tolist(), tp.tolist(), key.tolist(), strict=True) if r not in originals]
    assert len(extra) == 2
    for e, p, k in extra:
        assert (e, p - 2_000, k) in originals  # same te and key, arrival delayed by the retry interval


def test_clock_steps_shift_a_devices_event_times_from_one_instant_on_and_keep_arrivals():
    te, tp, key = clock_steps(TE, TP, KEY, seed=2, share=0.5, step_ms=(3_000, 3_000))
    assert tp.tolist() == TP.tolist() and key.tolist() == KEY.tolist()
    shift = te - TE
    stepped = {k for k in key[shift != 0].tolist()}
    assert len(stepped) == 1  # half of two devices
    mine = shift[key == stepped.pop()]
    first = int(np.flatnonzero(mine)[0])
    assert first > 0 and set(mine[first:].tolist()) in ({3_000}, {-3_000})  # one step, kept to the end
    assert set(mine[:first].tolist()) == {0}


def test_offline_flush_makes_a_gap_then_a_burst_of_the_backlog():
    te, tp, key = offline_flush(TE, TP, KEY, seed=1, episodes=1, offline_ms=(6_000, 6_000), spacing_ms=0)
    assert in_arrival_order(tp) and sorted(te.tolist()) == TE.tolist()
    moved = [k for k in np.unique(key) if (tp[key == k] != TP[KEY == k]).any()]
    assert len(moved) == 1
    dev = moved[0]
    arrivals = tp[key == dev]
    gaps = np.diff(arrivals)
    assert gaps.max() >= 6_000 - 2_000  # the device is silent for most of the episode...
    burst = np.flatnonzero(gaps == 0)
    assert burst.size >= 1  # ...then delivers its backlog at one instant
    assert np.array_equal(te[key == dev], np.sort(te[key == dev]))  # the backlog keeps its order


def test_congestion_holds_arrivals_back_and_resorts():
    te, tp, key = congestion(TE, TP, KEY, seed=0, mean_gap_ms=5_000, episode_ms=(3_000, 3_000), hold_ms=1_500,
                             jitter_ms=0)  # fmt: skip
    assert in_arrival_order(tp) and te.size == TE.size
    delay = tp - te
    assert set(delay.tolist()) == {100, 1_600}  # on time, or held back exactly hold_ms
    assert (delay == 1_600).any()


def test_stops_remove_a_devices_records_from_one_instant_on():
    te, tp, key = stops(TE, TP, KEY, seed=3, share=0.5)
    gone = [k for k in ("a", "b") if (key == k).sum() < 10]
    assert len(gone) == 1
    last = tp[key == gone[0]].max()
    assert TP[0] + 0.2 * (TP[-1] - TP[0]) - 1_000 <= last < TP[-1]
    other = "b" if gone[0] == "a" else "a"
    assert (key == other).sum() == 10  # the other device is untouched


def test_group_partitions_puts_four_devices_in_each_partition():
    key = np.array([f"dev_{i % 8}" for i in range(40)])
    part = group_partitions(key, seed=5)
    assert sorted(np.unique(part).tolist()) == [0, 1]
    for p in (0, 1):
        assert np.unique(key[part == p]).size == 4
    for k in np.unique(key):
        assert np.unique(part[key == k]).size == 1  # each key lives in one partition


def test_same_seed_same_stream_other_seed_other_stream():
    a = retransmits(TE, TP, KEY, seed=7, share=0.2)
    b = retransmits(TE, TP, KEY, seed=7, share=0.2)
    c = retransmits(TE, TP, KEY, seed=8, share=0.2)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))


def test_bad_input_gets_a_clear_error():
    with pytest.raises(ValueError, match="arrival order"):
        retransmits(TE, TP[::-1], KEY, seed=0)
    with pytest.raises(ValueError, match="one length"):
        stops(TE, TP[:3], KEY, seed=0)
    with pytest.raises(ValueError, match="share must be within"):
        clock_steps(TE, TP, KEY, seed=0, share=1.5)
    with pytest.raises(ValueError, match="keys_per_partition"):
        group_partitions(KEY, seed=0, keys_per_partition=0)
