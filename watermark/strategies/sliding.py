"""Sliding time window of low watermarks with a dynamic delay (Zhang and Ma)."""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np

from watermark.base import I64, WatermarkGenerator, check_float, check_int
from watermark.timeutil import decode_i64, encode_i64, running_max, shift_right

_MAX_SLIDE_WINDOW_MS = 3_600_000


@lru_cache(maxsize=16)
def _step_tables(slide_window_ms: int, change_rate: float) -> tuple[array[int], array[int]]:
    """Next delay after a rate above (``up``) or below (``down``) the threshold, for every delay value."""
    m = np.arange(slide_window_ms + 1, dtype=np.int64)
    mf = m.astype(np.float64)
    # Java's ``m = m + m * CHANGERATE`` on a long truncates; a step that truncates to nothing moves 1 ms.
    up = np.minimum(slide_window_ms, np.maximum(m + 1, np.trunc(mf + mf * change_rate).astype(np.int64)))
    down = np.maximum(1, np.trunc(mf - mf * change_rate).astype(np.int64))
    return array("q", up.tolist()), array("q", down.tolist())


class Sliding(WatermarkGenerator):
    """Per-tuple watermark ``te - m`` whose delay ``m`` follows the data rate.

    After each arrival the generator emits ``W = te - m`` (a punctuated watermark), then counts the arrivals
    of the last ``rate_window_ms`` of ingestion time; at a rate of at least ``rate_threshold`` tuples per
    second ``m`` grows by ``change_rate``, below it ``m`` shrinks by ``change_rate``, bounded to
    ``[1, slide_window_ms]``. The paper's sliding window ``[W, W + STRAGGLERSIZE)`` classifies tuples
    (late below ``W``, stragglers in its lower half, normal in its upper half, pending above it):
    :func:`watermark.evaluation.replay.classify` applies it to any strategy.

    Departures from the paper's Algorithm 1, and why:

    * The rate test counts arrivals within ``rate_window_ms`` of the last arrival (the pseudocode's line 13
      compares a value with itself) on the ingestion clock, the clock on which a *data rate* is measured;
      the pseudocode uses extracted event timestamps, which are out of order.
    * A rate *equal* to the threshold grows ``m``: the paper's worked example does so (its prose says
      "higher than"), and the example's numbers are reproduced by the tests. The pseudocode's swapped
      initial values (``dataRate = 5``, ``DATARATETHRESHOLD = 0.01``) and misplaced ``else`` are read as the
      text describes them.
    * ``m`` is an integer, updated as Java's ``long`` arithmetic does (``m = (long)(m + m * rate)``), which
      the example's numbers need (350, 346, 342, ...); where that truncation would leave ``m`` unchanged
      (``m * change_rate < 1``) the growth is 1 ms, otherwise ``m`` could never grow back from small values.
    * ``W`` is clamped to be monotonic, like every strategy here.

    Parameters
    ----------
    initial_delay_ms
        Starting delay ``m`` (paper: 350), in ``[1, slide_window_ms]``.
    change_rate
        Relative change of ``m`` per tuple (``CHANGERATE``, paper default 0.01), in ``(0, 1]``.
    rate_threshold
        Tuples per second at or above which ``m`` grows (``DATARATETHRESHOLD``, paper default 5), > 0.
    rate_window_ms
        Span of ingestion time over which the rate is counted (the pseudocode's ``N = 1000``), >= 1.
    slide_window_ms
        Upper bound of ``m`` (``SLIDEWINDOWSIZE``, paper: 500), >= 1 and at most one hour.

    Examples
    --------
    The first steps of the paper's Figure 3 example: ``m`` starts at 350, shrinks while fewer than five
    tuples were seen in the last second, and grows again at the sixth tuple.

    >>> from watermark.strategies.sliding import Sliding
    >>> gen = Sliding()
    >>> te = [19213, 19356, 19480, 19610, 19750, 19899]
    >>> tp = [19300, 19400, 19500, 19650, 19800, 19950]
    >>> trace = gen.process_trace(te, tp)
    >>> trace.after_arrival.tolist()
    [18863, 19010, 19138, 19272, 19416, 19562]
    >>> gen.delay_ms
    340

    """

    name = "sliding"
    #: (``benchmarks/small_batches.py``)
    SCALAR_RUN_MAX = 48
    param_types: ClassVar[Mapping[str, Any]] = {
        "initial_delay_ms": int,
        "change_rate": float,
        "rate_threshold": float,
        "rate_window_ms": int,
        "slide_window_ms": int,
    }

    search_space: ClassVar[Sequence[Mapping[str, Any]]] = [
        {"initial_delay_ms": d, "change_rate": c} for d in (100, 250, 350, 500) for c in (0.01, 0.1)
    ]
    comparison_grid: ClassVar[Sequence[Mapping[str, Any]]] = [{"change_rate": 0.01}, {"change_rate": 0.1}]

    @classmethod
    def test_settings(cls, pick: Callable[[Sequence[Any]], Any]) -> dict[str, Any]:
        """The contract tests' parameters (:meth:`watermark.base.WatermarkGenerator.test_settings`)."""
        slide = pick(range(1, 801))
        return {
            "slide_window_ms": slide,
            "initial_delay_ms": pick(range(1, slide + 1)),
            "change_rate": pick([1.0, 0.5, 0.1, 0.01, 0.001]),
            "rate_threshold": pick([0.5, 5.0, 20.0, 80.0]),
            "rate_window_ms": pick(range(1, 2_001)),
        }

    def __init__(
        self,
        initial_delay_ms: int = 350,
        change_rate: float = 0.01,
        rate_threshold: float = 5.0,
        rate_window_ms: int = 1000,
        slide_window_ms: int = 500,
    ) -> None:
        self.slide_window_ms = check_int("slide_window_ms", slide_window_ms, 1)
        if self.slide_window_ms > _MAX_SLIDE_WINDOW_MS:
            msg = f"slide_window_ms must be <= {_MAX_SLIDE_WINDOW_MS} (one hour), got {self.slide_window_ms}"
            raise ValueError(msg)
        self.initial_delay_ms = check_int("initial_delay_ms", initial_delay_ms, 1)
        if self.initial_delay_ms > self.slide_window_ms:
            msg = (
                f"initial_delay_ms must be <= slide_window_ms ({self.slide_window_ms}), "
                f"got {self.initial_delay_ms}"
            )
            raise ValueError(msg)
        self.change_rate = check_float("change_rate", change_rate, 0.0, 1.0, low_open=True)
        self.rate_threshold = check_float("rate_threshold", rate_threshold, 0.0, float("inf"), low_open=True)
        self.rate_window_ms = check_int("rate_window_ms", rate_window_ms, 1)
        super().__init__()

    def _reset_state(self) -> None:
        self._m = self.initial_delay_ms
        # Arrivals of the last rate window as (tp, count) pairs: at most rate_window_ms + 1 entries.
        self._recent: deque[list[int]] = deque()
        self._recent_count = 0

    @property
    def delay_ms(self) -> int:
        """The delay ``m`` the next arrival's watermark will use."""
        return self._m

    def diagnostics(self) -> dict[str, Any]:
        """Current delay ``m``."""
        return {"delay_ms": self._m}

    def _advance(self, now: int, *, arrival: bool) -> None:
        return None

    def _observe(self, te: int, tp: int, late: bool) -> None:
        self._raise(te - self._m)
        recent = self._recent
        if recent and recent[-1][0] == tp:
            recent[-1][1] += 1
        else:
            recent.append([tp, 1])
        self._recent_count += 1
        while recent[0][0] < tp - self.rate_window_ms:
            self._recent_count -= recent.popleft()[1]
        up, down = _step_tables(self.slide_window_ms, self.change_rate)
        rising = self._recent_count * 1000.0 / self.rate_window_ms >= self.rate_threshold
        self._m = up[self._m] if rising else down[self._m]

    def _run_arrivals(self, te: I64, tp: I64) -> tuple[I64, I64]:
        n = te.size
        r_tp = np.array([e[0] for e in self._recent], np.int64)
        r_cnt = np.array([e[1] for e in self._recent], np.int64)
        all_tp = np.concatenate([r_tp, tp])
        cum = np.cumsum(np.concatenate([r_cnt, np.ones(n, np.int64)]))
        pos = np.arange(r_tp.size, all_tp.size)
        lo = np.searchsorted(all_tp, tp - self.rate_window_ms, side="left")
        counts = cum[pos] - np.where(lo > 0, cum[np.maximum(lo - 1, 0)], 0)
        rising = (counts * 1000.0 / self.rate_window_ms >= self.rate_threshold).tolist()
        up, down = _step_tables(self.slide_window_ms, self.change_rate)
        delays = array("q", bytes(8 * n))
        m = self._m
        for i, r in enumerate(rising):
            delays[i] = m
            m = up[m] if r else down[m]
        self._m = m
        observed = te - np.frombuffer(delays, dtype=np.int64)
        pre = running_max(shift_right(observed, self._wm), self._wm)
        post = np.maximum(pre, observed)
        self._wm = int(post[-1])
        keep = all_tp >= int(tp[-1]) - self.rate_window_ms
        k_tp, k_cnt = np.unique(all_tp[keep], return_counts=True)
        if r_tp.size:  # the carried entries stand for several arrivals each
            k_cnt = np.bincount(
                np.searchsorted(k_tp, all_tp[keep]),
                weights=np.concatenate([r_cnt, np.ones(n, np.int64)])[keep],
            ).astype(np.int64)
        self._recent = deque([t, c] for t, c in zip(k_tp.tolist(), k_cnt.tolist(), strict=True))
        self._recent_count = int(k_cnt.sum())
        return pre, post

    def _state_dict(self) -> dict[str, Any]:
        return {
            "m": self._m,
            "recent_tp": encode_i64(np.array([e[0] for e in self._recent], np.int64)),
            "recent_count": encode_i64(np.array([e[1] for e in self._recent], np.int64)),
        }

    def _load_state(self, state: Mapping[str, Any]) -> None:
        self._m = int(state["m"])
        tps = decode_i64(state["recent_tp"]).tolist()
        counts = decode_i64(state["recent_count"]).tolist()
        self._recent = deque([t, c] for t, c in zip(tps, counts, strict=True))
        self._recent_count = int(sum(counts))
