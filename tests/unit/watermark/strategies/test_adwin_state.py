"""river's ADWIN saved as plain data: a restored detector continues exactly; damage is a clear error."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from river.drift import ADWIN

from watermark.strategies.adwin_state import adwin_state, restore_adwin
from watermark.strategies.registry import make, restore


def fed(values, **params):
    adwin = ADWIN(**params)
    for v in values:
        adwin.update(v)
    return adwin


def trail(adwin, values):
    return [(adwin.update(v), adwin.drift_detected, adwin.width, adwin.total, adwin.variance) for v in values]


@settings(max_examples=40, deadline=None)
@given(
    before=st.lists(st.floats(-1e3, 1e3), max_size=400),
    after=st.lists(st.floats(-1e3, 1e3), min_size=1, max_size=200),
    delta=st.sampled_from([0.002, 0.1, 1.0]),
    clock=st.integers(1, 40),
)
def test_a_restored_detector_continues_exactly_as_the_saved_one(before, after, delta, clock):
    saved = fed(before, delta=delta, clock=clock)
    state = json.loads(json.dumps(adwin_state(saved)))  # through JSON text, as a checkpoint holds it
    restored = restore_adwin(state)
    assert trail(restored, after) == trail(saved, after)
    assert restored.n_detections == saved.n_detections


def test_a_regime_change_is_detected_at_the_same_value_after_a_restore():
    saved = fed([0.0] * 300)
    restored = restore_adwin(adwin_state(saved))
    shift = [5.0] * 200
    first = [i for i, row in enumerate(trail(saved, shift)) if row[1]]
    assert first and first == [i for i, row in enumerate(trail(restored, shift)) if row[1]]


def test_the_state_is_named_plain_data():
    state = adwin_state(fed([1.0, 2.0, 3.0] * 20, delta=0.01))
    assert state["delta"] == 0.01 and state["width"] == 60.0
    assert {"current", "totals", "variances"} == set(state["buckets"][0])
    assert json.loads(json.dumps(state)) == state


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda s: s.pop("buckets"), "lacks 'buckets'"),
        (lambda s: s.update(delta="0.1"), "delta must be a number"),
        (lambda s: s.update(clock=0), r"clock must be in \[1"),
        (lambda s: s.update(total=float("nan")), "total must be in"),
        (lambda s: s.update(buckets=[]), "buckets must be a list of 1 to 64 rows"),
        (lambda s: s["buckets"][0]["totals"].pop(), r"buckets\[0\].totals must hold 6 numbers"),
        (lambda s: s["buckets"][0].update(current=99), r"buckets\[0\].current must be in"),
        (lambda s: s.update(format=2), "format 1"),
    ],
)
def test_a_damaged_state_is_a_clear_value_error(damage, message):
    state = adwin_state(fed([0.5] * 50))
    damage(state)
    with pytest.raises(ValueError, match=message):
        restore_adwin(state)


def test_the_adaptive_strategy_snapshot_holds_no_pickle_and_restores_its_detector():
    gen = make("adaptive", {"warmup": 20})
    for i in range(200):
        gen.update(1_000 * i - (i % 7) * 30, 1_000 * i)
    snap = gen.snapshot()
    text = json.dumps(snap)
    assert "gASV" not in text  # the base64 opening of a pickle (protocol 4/5)
    assert isinstance(snap["state"]["adwin"]["buckets"], list)
    twin = restore(json.loads(text))
    for i in range(200, 400):
        gen.update(1_000 * i - (i % 5) * 40, 1_000 * i)
        twin.update(1_000 * i - (i % 5) * 40, 1_000 * i)
        assert twin.watermark_ms == gen.watermark_ms


def test_a_sensitivity_changed_at_a_drift_survives_a_snapshot_taken_before_the_next_update():
    """The adaptive strategy lowers ``delta`` at a drift; river applies it when the next update resets the
    window. A checkpoint in between must rebuild with the new ``delta``, not the window's old one."""
    a = ADWIN(delta=1.0)
    values = [0.0] * 200 + [50.0] * 200
    fed = 0
    while not a.drift_detected:
        a.update(values[fed])
        fed += 1
    a.delta = 0.5  # what watermark.strategies.adaptive does at a drift
    b = restore_adwin(adwin_state(a))
    assert b.delta == 0.5
    for x in values[fed:]:
        a.update(x)
        b.update(x)
    assert adwin_state(b) == adwin_state(a) and adwin_state(a)["delta"] == 0.5
