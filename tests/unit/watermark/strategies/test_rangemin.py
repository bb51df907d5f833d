import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from watermark.strategies.rangemin import range_min


@given(data=st.data())
def test_range_min_equals_brute_force(data):
    values = np.array(data.draw(st.lists(st.integers(-(10**15), 10**15), min_size=1, max_size=300)), np.int64)
    n = values.size
    pairs = data.draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(1, n)), max_size=50))
    pairs = [(lo, hi) for lo, hi in pairs if lo < hi]
    lo = np.array([p[0] for p in pairs], np.intp)
    hi = np.array([p[1] for p in pairs], np.intp)
    got = range_min(values, lo, hi)
    assert got.tolist() == [int(values[a:b].min()) for a, b in pairs]


def test_sliding_windows_over_a_long_array():
    rng = np.random.default_rng(0)
    values = rng.integers(0, 10**9, 5_000)
    hi = np.arange(1, 5_001)
    lo = np.maximum(0, hi - rng.integers(1, 400, 5_000))
    lo = np.maximum.accumulate(lo)
    expected = [int(values[a:b].min()) for a, b in zip(lo, hi, strict=True)]
    assert range_min(values, lo, hi).tolist() == expected
