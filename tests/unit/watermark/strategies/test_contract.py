"""The generator contract, checked on every strategy with property tests on random streams."""

import json
from unittest import mock

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.strategies_for_tests import BASE_MS, NAMES, PARAMS, streams
from watermark.strategies.registry import STRATEGIES, make, restore
from watermark.timeutil import NO_WATERMARK


def update_loop(gen, te, tp):
    """Reference: the tuple-by-tuple path. Returns the watermark in force at each arrival and after it."""
    at, after = [], []
    for a, b in zip(te.tolist(), tp.tolist(), strict=True):
        gen.update(a, b)
        at.append(gen.watermark_at_arrival_ms)
        after.append(gen.watermark_ms)
    return np.array(at, np.int64), np.array(after, np.int64)


def state_of(gen):
    return json.dumps(gen.snapshot(), sort_keys=True)


def test_every_design_strategy_is_registered():
    # (a strategy added later registers itself: tests/unit/watermark/strategies/test_strategy_registration.py)
    design = ["periodic", "adaptive", "sliding", "percentile", "band", "ingestion", "slo", "fleet"]
    assert list(STRATEGIES)[: len(design)] == design
    assert NAMES == list(STRATEGIES)  # the contract tests below run every registered strategy


@pytest.mark.parametrize("name", NAMES)
@given(data=st.data())
def test_process_equals_update_loop_exactly(name, data):
    params = data.draw(PARAMS[name])
    te, tp = data.draw(streams())
    cuts = sorted(data.draw(st.lists(st.integers(0, te.size), max_size=3)))
    # short runs take the update loop (SCALAR_RUN_MAX): the vectorised core is drawn for every length too
    vectorised = data.draw(st.booleans())
    ref = make(name, params)
    at_ref, after_ref = update_loop(ref, te, tp)

    vec = make(name, params)
    bounds = zip([0, *cuts], [*cuts, te.size], strict=True)
    with mock.patch.object(type(vec), "SCALAR_RUN_MAX", 0 if vectorised else type(vec).SCALAR_RUN_MAX):
        parts = [vec.process_trace(te[a:b], tp[a:b]) for a, b in bounds]
    at = np.concatenate([p.at_arrival for p in parts]) if parts else np.empty(0, np.int64)
    after = np.concatenate([p.after_arrival for p in parts]) if parts else np.empty(0, np.int64)

    np.testing.assert_array_equal(at, at_ref)
    np.testing.assert_array_equal(after, after_ref)
    assert vec.watermark_ms == ref.watermark_ms
    assert vec.n_late == ref.n_late
    assert state_of(vec) == state_of(ref)


@pytest.mark.parametrize("name", NAMES)
@given(data=st.data())
def test_short_runs_through_the_update_loop_trace_what_the_vectorised_core_traces(name, data):
    # SCALAR_RUN_MAX: the watermarks, the timeline between arrivals (timers, ramps) and the state alike
    params = data.draw(PARAMS[name])
    te, tp = data.draw(streams(max_size=60))
    cuts = sorted(data.draw(st.lists(st.integers(0, te.size), max_size=6)))
    bounds = list(zip([0, *cuts], [*cuts, te.size], strict=True))
    loop, core = make(name, params), make(name, params)
    with mock.patch.object(type(loop), "SCALAR_RUN_MAX", 10**9):
        by_loop = [loop.process_trace(te[a:b], tp[a:b]) for a, b in bounds]
    with mock.patch.object(type(core), "SCALAR_RUN_MAX", 0):
        by_core = [core.process_trace(te[a:b], tp[a:b]) for a, b in bounds]
    for x, y in zip(by_loop, by_core, strict=True):
        np.testing.assert_array_equal(x.at_arrival, y.at_arrival)
        np.testing.assert_array_equal(x.after_arrival, y.after_arrival)
        ends = np.unique(np.concatenate([x.at_arrival, x.after_arrival, te, te + 50])) if te.size else te
        for got, want in zip(x.timeline.fire(ends), y.timeline.fire(ends), strict=True):
            np.testing.assert_array_equal(got, want)
    assert state_of(loop) == state_of(core)


@pytest.mark.parametrize("name", NAMES)
@given(data=st.data())
def test_watermark_is_monotonic(name, data):
    params = data.draw(PARAMS[name])
    te, tp = data.draw(streams())
    trace = make(name, params).process_trace(te, tp)
    assert np.all(trace.at_arrival[1:] >= trace.at_arrival[:-1])
    assert np.all(trace.after_arrival >= trace.at_arrival)
    assert np.all(trace.after_arrival[:-1] <= trace.at_arrival[1:])


@pytest.mark.parametrize("name", NAMES)
@given(data=st.data())
def test_snapshot_and_rebuild_mid_stream_continue_identically(name, data):
    params = data.draw(PARAMS[name])
    te, tp = data.draw(streams())
    cut = data.draw(st.integers(0, te.size))
    whole = make(name, params)
    expected = whole.process(te, tp)

    first = make(name, params)
    head = first.process(te[:cut], tp[:cut])
    rebuilt = restore(json.loads(json.dumps(first.snapshot())))
    tail = rebuilt.process(te[cut:], tp[cut:])

    np.testing.assert_array_equal(np.concatenate([head, tail]), expected)
    assert state_of(rebuilt) == state_of(whole)


@pytest.mark.parametrize("name", NAMES)
@given(data=st.data())
def test_a_tuple_is_late_iff_its_event_time_is_below_the_watermark_at_arrival(name, data):
    params = data.draw(PARAMS[name])
    te, tp = data.draw(streams())
    gen = make(name, params)
    late_flags = []
    for a, b in zip(te.tolist(), tp.tolist(), strict=True):
        before = gen.n_late
        gen.update(a, b)
        late_flags.append(gen.n_late - before)
        assert (gen.n_late - before == 1) == (a < gen.watermark_at_arrival_ms)
    vec = make(name, params)
    wm = vec.process(te, tp)
    np.testing.assert_array_equal(te < wm, np.array(late_flags, bool))
    assert vec.n_late == int(np.count_nonzero(te < wm))


@pytest.mark.parametrize("name", NAMES)
@given(data=st.data())
def test_on_idle_between_arrivals_never_changes_what_arrivals_see(name, data):
    params = data.draw(PARAMS[name])
    te, tp = data.draw(streams(max_size=80))
    plain = make(name, params)
    at_plain, _ = update_loop(plain, te, tp)
    polled = make(name, params)
    at_polled = []
    for i, (a, b) in enumerate(zip(te.tolist(), tp.tolist(), strict=True)):
        if i:
            for now in sorted(data.draw(st.lists(st.integers(int(tp[i - 1]), b), max_size=3))):
                polled.on_idle(now)
        polled.update(a, b)
        at_polled.append(polled.watermark_at_arrival_ms)
    np.testing.assert_array_equal(np.array(at_polled, np.int64), at_plain)


@pytest.mark.parametrize("name", NAMES)
def test_no_watermark_before_data_and_empty_batches_change_nothing(name):
    gen = make(name, REQUIRED.get(name))
    assert gen.watermark_ms == NO_WATERMARK
    assert gen.process([], []).size == 0
    assert gen.n_seen == 0
    assert gen.snapshot()["common"]["wm"] == NO_WATERMARK


@pytest.mark.parametrize("name", NAMES)
def test_arrivals_behind_the_ingestion_clock_are_treated_as_arriving_at_it(name):
    te = np.array([1_000, 1_010, 1_020, 990, 1_030], np.int64)
    tp_raw = np.array([1_100, 1_200, 1_150, 1_210, 1_300], np.int64)
    clamped = np.maximum.accumulate(tp_raw)
    a, b = make(name, REQUIRED.get(name)), make(name, REQUIRED.get(name))
    np.testing.assert_array_equal(a.process(te, tp_raw), b.process(te, clamped))


#: The one required parameter (the SLO and fleet strategies' target); the other strategies have defaults.
REQUIRED = {"slo": {"late_slo_pct": 0.5}, "fleet": {"late_slo_pct": 0.5}}

INVALID = [
    ("slo", {}, "missing required parameter(s) late_slo_pct"),
    ("slo", {"late_slo_pct": 0}, "late_slo_pct must be in (0.0, 100.0]"),
    ("slo", {"late_slo_pct": 100}, "late_slo_pct must be below 100"),
    ("slo", {"late_slo_pct": 1, "sample_size": 5}, "sample_size must be >= 10"),
    ("slo", {"late_slo_pct": 1, "horizon_ms": 0}, "horizon_ms must be >= 1"),
    ("slo", {"late_slo_pct": 1, "straggler_factor": 0.5}, "straggler_factor must be in [1.0, 1000000000.0]"),
    ("slo", {"late_slo_pct": 1, "surge_arrivals": -1}, "surge_arrivals must be >= 0"),
    ("periodic", {"delay_ms": -1}, "delay_ms must be >= 0"),
    ("periodic", {"period_ms": 0}, "period_ms must be >= 1"),
    ("periodic", {"delay_ms": 1.5}, "delay_ms must be an integer"),
    ("adaptive", {"late_threshold": 0}, "late_threshold must be in (0.0, 1.0]"),
    ("adaptive", {"late_threshold": 1.5}, "late_threshold must be in"),
    ("adaptive", {"sensitivity_change": 0}, "sensitivity_change must be in"),
    ("adaptive", {"warmup": 0}, "warmup must be >= 1"),
    ("adaptive", {"skew": "median"}, "skew must be 'max' or 'mean'"),
    ("sliding", {"initial_delay_ms": 600}, "initial_delay_ms must be <= slide_window_ms"),
    ("sliding", {"change_rate": 0}, "change_rate must be in"),
    ("sliding", {"rate_threshold": -1}, "rate_threshold must be in"),
    ("sliding", {"slide_window_ms": 10**9}, "slide_window_ms must be <="),
    ("percentile", {"percentile": 101}, "percentile must be in [0.0, 100.0]"),
    ("percentile", {"horizon_ms": 0}, "horizon_ms must be >= 1"),
    ("band", {"band_ms": 0}, "band_ms must be >= 1"),
    ("band", {"idle_ms": "soon"}, "idle_ms expects an integer"),
    ("ingestion", {"max_event_time_lag_ms": -5}, "max_event_time_lag_ms must be >= 0"),
    ("ingestion", {"max_watermark_lag_ms": 0}, "max_watermark_lag_ms must be >= 1"),
    ("periodic", {"delay": 5}, "unknown parameter(s) delay"),
    ("nope", {}, "unknown strategy 'nope'"),
]


@pytest.mark.parametrize(("name", "params", "message"), INVALID)
def test_invalid_parameters_raise_value_error_naming_the_parameter(name, params, message):
    with pytest.raises(ValueError, match=None) as err:
        make(name, params)
    assert message in str(err.value)


def test_string_settings_are_converted_to_parameter_types():
    gen = make("adaptive", {"late_threshold": "0.1", "warmup": "500", "skew": "mean"})
    assert gen.params["late_threshold"] == 0.1
    assert gen.params["warmup"] == 500
    assert gen.params["skew"] == "mean"


def test_restore_rejects_foreign_or_corrupt_snapshots():
    with pytest.raises(ValueError, match="not a watermark generator snapshot"):
        restore({"hello": 1})
    snap = make("periodic", None).snapshot()
    snap["version"] = 9
    with pytest.raises(ValueError, match="unsupported snapshot version"):
        restore(snap)
    snap = make("periodic", None).snapshot()
    del snap["state"]["max_te"]
    with pytest.raises(ValueError, match="corrupt periodic snapshot"):
        restore(snap)


@pytest.mark.parametrize("name", NAMES)
@given(data=st.data(), offset=st.integers(-1_000, 10_000))
def test_a_held_floor_is_never_gone_below_and_judges_every_tuple_below_it_late(name, data, offset):
    params = data.draw(PARAMS[name])
    te, tp = data.draw(streams())
    floor = BASE_MS + offset
    gen = make(name, params).hold_floor(floor)
    trace = gen.process_trace(te, tp)
    assert (trace.at_arrival >= floor).all() and (trace.after_arrival >= floor).all()
    assert gen.n_late == int(np.count_nonzero(te < trace.at_arrival)) >= int(np.count_nonzero(te < floor))
    # the tuple-by-tuple path holds it too, and a checkpoint keeps it
    ref = restore(json.loads(state_of(make(name, params).hold_floor(floor))))
    at_ref, _ = update_loop(ref, te, tp)
    np.testing.assert_array_equal(trace.at_arrival, at_ref)
