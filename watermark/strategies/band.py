"""Estimation-band watermarks after the Google Cloud Pub/Sub case study (Streaming Systems, chapter 3)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from watermark.base import I64, Idx, WatermarkGenerator, check_int
from watermark.strategies.rangemin import range_min
from watermark.timeline import NO_RISE
from watermark.timeutil import (
    NO_WATERMARK,
    arrival_clock,
    decode_i64,
    encode_i64,
    running_max,
    shift_right,
)


class Band(WatermarkGenerator):
    """``W`` = the minimum event time among arrivals within the last ``band_ms`` of ingestion time.

    The Pub/Sub heuristic assumes a bounded reordering of event times at the source (the *estimation band*)
    and takes the minimum event time of the messages published within that band. With no data for
    ``idle_ms`` it advances the watermark to near real time (Pub/Sub: two minutes); here ``now - band_ms``,
    the value it holds when caught up with an in-order source.

    Departures, and why:

    * The band is the last ``band_ms`` of ingestion time up to and including each arrival; Pub/Sub widens it
      to the whole backlog when the pipeline lags. Backlog belongs to the job that consumes the stream (the
      processing-time watermark measures it), not to the generator, which sees each tuple as it arrives.
    * The idle advance compares ingestion time with event time; it assumes the two clocks are comparable,
      as Pub/Sub does with publish times. On sources whose event times trail ingestion by more than
      ``band_ms`` (taxi trips stamped at pickup, ingested at drop-off) it makes the first tuples after a
      silence late: set ``idle_ms`` high there.

    Parameters
    ----------
    band_ms
        Width of the estimation band in ingestion time, >= 1.
    idle_ms
        Silence after which the watermark is advanced to ``now - band_ms``, >= 1.

    Examples
    --------
    >>> from watermark.strategies.band import Band
    >>> gen = Band(band_ms=100, idle_ms=1_000)
    >>> gen.process([500, 480, 530, 620], [510, 560, 600, 700]).tolist()
    [-9223372036854775808, 500, 500, 500]
    >>> gen.watermark_ms  # the band (600, 700] holds only te = 620; 480 arrived late against 500
    620

    """

    name = "band"
    #: (``benchmarks/small_batches.py``)
    SCALAR_RUN_MAX = 64
    param_types: ClassVar[Mapping[str, Any]] = {"band_ms": int, "idle_ms": int}

    search_space: ClassVar[Sequence[Mapping[str, Any]]] = [
        {"band_ms": b} for b in (10, 20, 50, 100, 150, 200, 300, 400, 500, 700, 1_000, 1_500, 2_000, 5_000)
    ]
    monotone_param: ClassVar[str | None] = "band_ms"
    comparison_grid: ClassVar[Sequence[Mapping[str, Any]]] = [
        {"band_ms": b, "idle_ms": 120_000} for b in (100, 1_000, 10_000)
    ]

    @classmethod
    def test_settings(cls, pick: Callable[[Sequence[Any]], Any]) -> dict[str, Any]:
        """The contract tests' parameters (:meth:`watermark.base.WatermarkGenerator.test_settings`)."""
        return {"band_ms": pick(range(1, 1_001)), "idle_ms": pick(range(1, 301))}

    def __init__(self, band_ms: int = 10_000, idle_ms: int = 120_000) -> None:
        self.band_ms = check_int("band_ms", band_ms, 1)
        self.idle_ms = check_int("idle_ms", idle_ms, 1)
        super().__init__()

    def _reset_state(self) -> None:
        self._last_tp: int | None = None
        # Monotonic deque of (tp, te): event times strictly increasing from the front; an entry followed by
        # a smaller-or-equal event time can never be the minimum again and is dropped.
        self._window: deque[tuple[int, int]] = deque()

    def _advance(self, now: int, *, arrival: bool) -> None:
        if self._last_tp is not None and now - self._last_tp >= self.idle_ms:
            self._raise(now - self.band_ms)

    def _observe(self, te: int, tp: int, late: bool) -> None:
        self._last_tp = tp
        window = self._window
        while window and window[-1][1] >= te:
            window.pop()
        window.append((tp, te))
        self._prune(tp)
        self._raise(window[0][1])

    def _prune(self, now: int) -> None:
        window = self._window
        while window and window[0][0] <= now - self.band_ms:
            window.popleft()

    def on_idle(self, now_ms: int) -> Band:
        """Advance time without data (see :class:`~watermark.base.WatermarkGenerator`)."""
        super().on_idle(now_ms)
        if self._clock is not None:
            self._prune(self._clock)
        return self

    def _timers(self, tp: I64, arrivals: Idx | None) -> tuple[I64, I64 | None]:
        _, _, last_before = arrival_clock(tp, arrivals, self._last_tp)
        known = last_before != NO_WATERMARK
        rise = np.where(known, np.where(known, last_before, 0) + self.idle_ms, NO_RISE)
        return rise, np.full(tp.size, self.band_ms, np.int64)

    def _run(self, te: I64, tp: I64, arrivals: Idx | None) -> tuple[I64, I64]:
        n = te.size
        idx = np.arange(n) if arrivals is None else arrivals
        w_tp = np.fromiter((e[0] for e in self._window), np.int64, len(self._window))
        w_te = np.fromiter((e[1] for e in self._window), np.int64, len(self._window))
        all_tp = np.concatenate([w_tp, tp[idx]])
        all_te = np.concatenate([w_te, te[idx]])
        observed = np.full(n, NO_WATERMARK, np.int64)
        if idx.size:
            hi = np.arange(w_tp.size + 1, all_tp.size + 1)
            lo = np.searchsorted(all_tp, tp[idx] - self.band_ms, side="right")
            observed[idx] = range_min(all_te, lo, hi)
        _, last_seen, last_before = arrival_clock(tp, arrivals, self._last_tp)
        idle = (last_before != NO_WATERMARK) & (tp - last_before >= self.idle_ms)
        advance = np.where(idle, tp - self.band_ms, NO_WATERMARK)
        pre = running_max(np.maximum(advance, shift_right(observed, NO_WATERMARK)), self._wm)
        post = np.maximum(pre, observed)
        # Keep what a later band can still see, reduced to its monotonic minima (as the deque keeps it).
        now = int(tp[-1])
        keep = all_tp > now - self.band_ms
        k_tp, k_te = all_tp[keep], all_te[keep]
        if k_te.size:
            later_min = np.minimum.accumulate(k_te[::-1])[::-1]
            strict = np.append(k_te[:-1] < later_min[1:], True)
            k_tp, k_te = k_tp[strict], k_te[strict]
        self._window = deque(zip(k_tp.tolist(), k_te.tolist(), strict=True))
        last = int(last_seen[-1])
        self._last_tp = None if last == NO_WATERMARK else last
        self._wm = int(post[-1])
        self._clock = now
        return pre, post

    def _state_dict(self) -> dict[str, Any]:
        tps = np.array([e[0] for e in self._window], np.int64)
        tes = np.array([e[1] for e in self._window], np.int64)
        return {"last_tp": self._last_tp, "window_tp": encode_i64(tps), "window_te": encode_i64(tes)}

    def _load_state(self, state: Mapping[str, Any]) -> None:
        self._last_tp = None if state["last_tp"] is None else int(state["last_tp"])
        pairs = zip(
            decode_i64(state["window_tp"]).tolist(), decode_i64(state["window_te"]).tolist(), strict=True
        )
        self._window = deque(pairs)
