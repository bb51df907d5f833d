"""Hypothesis strategies shared by the property tests: random out-of-order streams and generator settings."""

import numpy as np
from hypothesis import strategies as st

from watermark.strategies.registry import STRATEGIES

BASE_MS = 1_700_000_000_000


@st.composite
def streams(draw, max_size=150):
    """(te, tp) int64 arrays in arrival order: tp nondecreasing, small delays with shifts and outliers."""
    n = draw(st.integers(0, max_size))
    gaps = draw(st.lists(st.integers(0, 60), min_size=n, max_size=n))
    regime = draw(st.integers(1, 400))
    delays = draw(st.lists(st.integers(-20, regime), min_size=n, max_size=n))
    if n and draw(st.booleans()):  # a regime shift half-way: delays jump
        jump = draw(st.integers(50, 2_000))
        delays = delays[: n // 2] + [d + jump for d in delays[n // 2 :]]
    tp = BASE_MS + np.cumsum(np.array(gaps, dtype=np.int64))
    te = tp - np.array(delays, dtype=np.int64)
    return te.astype(np.int64), tp.astype(np.int64)


@st.composite
def settings_of(draw, name):
    """The parameters a strategy's class declares for the contract tests (``test_settings``), each value
    drawn by hypothesis from the candidates it names."""
    cls = STRATEGIES[name]
    return cls.test_settings(lambda candidates: draw(st.sampled_from(candidates)))


#: Every registered strategy (in the registry's order) and the hypothesis strategy of its test settings:
#: the contract tests run each. A strategy registered before this module is imported is among them.
NAMES = list(STRATEGIES)
PARAMS = {name: settings_of(name) for name in NAMES}
