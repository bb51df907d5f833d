"""Hindsight baselines: the smallest fixed delay at a late share, global or per key, whichever is faster."""

import numpy as np
import pytest

from watermark.baseline import Hindsight
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
