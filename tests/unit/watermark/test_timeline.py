"""One clock: windows fire at the earliest ingestion-clock instant at which the watermark reaches their end.

The reference walks the ingestion clock one millisecond at a time with ``on_idle`` between arrivals and
``update`` at them, the way a job polling its timer every millisecond would; the vectorised timeline must
give the same fire instants and watermarks, for every strategy, alone or combined, in any split into batches.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.strategies_for_tests import NAMES, PARAMS, streams
from watermark.evaluation.replay import WindowSpec, replay
from watermark.partitions.combine import PartitionedWatermark
from watermark.strategies.registry import make
from watermark.timeutil import NO_WATERMARK

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def ends_over(te):
    """Window ends (every 20 ms) across the event-time range of a stream."""
    if te.size == 0:
        return np.empty(0, np.int64)
    lo, hi = int(te.min()) - int(te.min()) % 20, int(te.max()) + 40
    return np.arange(lo, hi, 20, dtype=np.int64)


def walk_clock(feed, idle, read, te, tp, ends, read_at_arrival):
    """Reference: fire instant and watermark of each end, stepping the clock by 1 ms with ``on_idle``.

    A window that fires at an arrival's instant reports the watermark that arrival is judged against if that
    reaches its end, else the one right after the arrival.
    """
    fire = {}

    def check(t, arrival=False):
        w = read()
        if arrival:
            pre = read_at_arrival()
            w_at = {e: (pre if pre != NO_WATERMARK and pre >= e else w) for e in ends.tolist()}
        for e in ends.tolist():
            if e not in fire and w != NO_WATERMARK and w >= e:
                fire[e] = (t, w_at[e] if arrival else w)

    prev = None
    for i in range(te.size):
        t_i = int(tp[i])
        if prev is not None:
            for t in range(prev + 1, t_i):
                idle(t)
                check(t)
        idle(t_i)  # at the arrival's instant, timers first: the watermark the tuple is judged against
        feed(i)
        check(t_i, arrival=True)
        prev = t_i
    return fire


def timeline_fires(timeline, ends):
    fired, t, w = timeline.fire(ends)
    return {int(e): (int(a), int(b)) for e, f, a, b in zip(ends, fired, t, w, strict=True) if f}


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(data=st.data())
def test_timeline_equals_a_millisecond_walk_of_the_clock(name, data):
    te, tp = data.draw(streams(max_size=25))
    params = data.draw(PARAMS[name])
    ends = ends_over(te)
    gen = make(name, params)
    ref = walk_clock(lambda i: gen.update(int(te[i]), int(tp[i])), gen.on_idle, lambda: gen.watermark_ms,
                     te, tp, ends, lambda: gen.watermark_at_arrival_ms)  # fmt: skip
    trace = make(name, params).process_trace(te, tp)
    assert timeline_fires(trace.timeline, ends) == ref


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(data=st.data())
def test_combined_timeline_equals_a_millisecond_walk_with_idle_partitions(name, data):
    te, tp = data.draw(streams(max_size=25))
    params = data.draw(PARAMS[name])
    part = np.array(data.draw(st.lists(st.sampled_from("abc"), min_size=te.size, max_size=te.size)))
    timeout = data.draw(st.sampled_from([None, 15, 80]))
    ends = ends_over(te)
    pw = PartitionedWatermark(name, params, idle_timeout_ms=timeout)
    ref = walk_clock(lambda i: pw.update(str(part[i]), int(te[i]), int(tp[i])), pw.on_idle,
                     lambda: pw.watermark_ms, te, tp, ends, lambda: pw.watermark_at_arrival_ms)  # fmt: skip
    trace = PartitionedWatermark(name, params, idle_timeout_ms=timeout).process_trace(part, te, tp)
    assert timeline_fires(trace.timeline, ends) == ref


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(data=st.data())
def test_any_split_into_batches_gives_the_same_watermarks_and_fire_instants(name, data):
    te, tp = data.draw(streams(max_size=40))
    params = data.draw(PARAMS[name])
    cuts = sorted(data.draw(st.lists(st.integers(0, te.size), max_size=4)))
    ends = ends_over(te)
    whole = make(name, params).process_trace(te, tp)
    gen = make(name, params)
    pre, post, fires = [], [], {}
    for lo, hi in zip([0, *cuts], [*cuts, te.size], strict=True):
        if hi <= lo:
            continue
        trace = gen.process_trace(te[lo:hi], tp[lo:hi])
        pre.append(trace.at_arrival)
        post.append(trace.after_arrival)
        for e, fired in timeline_fires(trace.timeline, ends).items():
            fires.setdefault(e, fired)
    if te.size:
        assert np.concatenate(pre).tolist() == whole.at_arrival.tolist()
        assert np.concatenate(post).tolist() == whole.after_arrival.tolist()
    assert fires == timeline_fires(whole.timeline, ends)


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(data=st.data())
def test_fire_instants_and_watermarks_never_go_back(name, data):
    te, tp = data.draw(streams(max_size=40))
    params = data.draw(PARAMS[name])
    ends = ends_over(te)
    fired, t, w = make(name, params).process_trace(te, tp).timeline.fire(ends)
    t, w = t[fired], w[fired]
    assert np.all(np.diff(t) >= 0) and np.all(np.diff(w) >= 0)
    assert np.all(w >= ends[fired])


def test_a_periodic_timer_fires_a_window_between_arrivals():
    # Grid every 100 ms from the first arrival at 0; te 1_300 arrived at 1_310, so the timer at 1_400 emits
    # 1_200 and closes [0, 1000) there; the next arrival (at 2_000) is 600 ms later.
    r = replay([0, 1_300, 1_350], [0, 1_310, 2_000], strategy="periodic",
               params={"delay_ms": 100, "period_ms": 100}, window=WindowSpec(1_000))  # fmt: skip
    s = r.summary()
    assert s["windows_fired"] == 1
    assert s["emit_latency_ms"]["mean"] == 400.0
    assert s["trigger_delay_ms"]["mean"] == 200.0


def test_an_idle_advance_fires_at_the_instant_its_rule_says():
    # Ingestion time: from 50 ms without data on (995 + 50 = 1_045) the watermark follows now - 1 - 10, so
    # it is 1_034 at 1_045 and closes [0, 1000) there, long before the next arrival at 5_000.
    params = {"max_event_time_lag_ms": 10, "max_watermark_lag_ms": 50}
    r = replay([990, 4_990], [995, 5_000], strategy="ingestion", params=params, window=WindowSpec(1_000))
    fired = r.windows.fired
    assert r.windows.fire_tp_ms[fired].tolist() == [1_045]
    assert r.windows.fire_wm_ms[fired].tolist() == [1_034]


def test_an_idle_partition_dropping_out_fires_a_window_at_its_timeout():
    # Ingestion time, W = tp - 1 per partition. After a's arrival at 1_050 (W_a = 1_049), b (last arrival
    # 580, W_b = 579) holds the global watermark back until it stops counting at 580 + 500 = 1_080: the
    # watermark jumps to 1_049 and closes [0, 1000) then, long before the next arrival at 2_000.
    trace = PartitionedWatermark(
        "ingestion", {"max_event_time_lag_ms": 0}, idle_timeout_ms=500
    ).process_trace(["a", "b", "a", "a"], [100, 570, 1_040, 1_990], [100, 580, 1_050, 2_000])
    fired, t, w = trace.timeline.fire(np.array([1_000]))
    assert fired.tolist() == [True] and t.tolist() == [1_080] and w.tolist() == [1_049]


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(data=st.data())
def test_arrival_only_firing_fires_the_same_windows_never_earlier(name, data):
    te, tp = data.draw(streams(max_size=40))
    params = data.draw(PARAMS[name])
    ends = ends_over(te)
    timeline = make(name, params).process_trace(te, tp).timeline
    fired, t, w = timeline.fire(ends)
    fired_a, t_a, w_a = timeline.fire_at_arrivals(ends)
    assert fired.tolist() == fired_a.tolist()
    assert np.all(t_a[fired] >= t[fired]) and np.all(w_a[fired] >= w[fired])
    assert np.all(np.isin(t_a[fired], tp))  # always an arrival's instant
