"""Ingestion-time watermarks after Pravega's PDP-26: the event-time clock follows the ingestion clock."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from watermark.base import I64, Idx, WatermarkGenerator, check_int
from watermark.timeline import NO_RISE
from watermark.timeutil import NO_WATERMARK, arrival_clock, running_max, shift_right


class Ingestion(WatermarkGenerator):
    """``W = last ingestion time - 1 - max_event_time_lag_ms``; idle sources follow the ingestion clock.

    Pravega records the time of the last write on a segment; ``LAST_WRITE_TIME - 1`` is the exclusive
    minimum ingestion time of any later event, and the Flink connector subtracts a configured
    ``maxEventTimeLag`` to turn it into an event-time watermark. A segment idle for ``maxWatermarkLag`` is
    advanced by the ingestion clock so that windows still close.

    Departures from PDP-26, and why:

    * The idle advance is continuous: once the partition has been idle for ``max_watermark_lag_ms``,
      ``W = max(W, now - 1 - max_event_time_lag_ms)`` at any instant ``now``. Pravega's advancer writes a
      trivial attribute update, which makes the watermark step once per ``maxWatermarkLag`` and depend on the
      advancer's polling schedule; the continuous form is the limit of that process and keeps ``on_idle``
      path independent (replays do not depend on how often the caller polls).
    * An arrival after a gap of at least ``max_watermark_lag_ms`` is judged against the advanced watermark,
      as if the advancer had run just before it.

    Parameters
    ----------
    max_event_time_lag_ms
        Expected bound on ``tp - te`` (Pravega connector's ``maxEventTimeLag``), >= 0.
    max_watermark_lag_ms
        Idle time after which the watermark follows the ingestion clock (PDP-26's ``maxWatermarkLag``,
        suggested default 10 s), >= 1.

    Examples
    --------
    >>> from watermark.strategies.ingestion import Ingestion
    >>> gen = Ingestion(max_event_time_lag_ms=100, max_watermark_lag_ms=10_000)
    >>> gen.process([1_000, 1_050, 900], [1_010, 1_200, 1_300]).tolist()
    [-9223372036854775808, 909, 1099]
    >>> gen.on_idle(20_000).watermark_ms
    19899

    """

    name = "ingestion"
    param_types: ClassVar[Mapping[str, Any]] = {"max_event_time_lag_ms": int, "max_watermark_lag_ms": int}

    search_space: ClassVar[Sequence[Mapping[str, Any]]] = [
        {"max_event_time_lag_ms": lag} for lag in range(0, 5_001, 50)
    ]
    monotone_param: ClassVar[str | None] = "max_event_time_lag_ms"
    comparison_grid: ClassVar[Sequence[Mapping[str, Any]]] = [
        {"max_event_time_lag_ms": lag, "max_watermark_lag_ms": 10_000} for lag in (100, 1_000, 600_000)
    ]

    @classmethod
    def test_settings(cls, pick: Callable[[Sequence[Any]], Any]) -> dict[str, Any]:
        """The contract tests' parameters (:meth:`watermark.base.WatermarkGenerator.test_settings`)."""
        return {"max_event_time_lag_ms": pick(range(501)), "max_watermark_lag_ms": pick(range(1, 301))}

    def __init__(self, max_event_time_lag_ms: int = 1000, max_watermark_lag_ms: int = 10_000) -> None:
        self.max_event_time_lag_ms = check_int("max_event_time_lag_ms", max_event_time_lag_ms, 0)
        self.max_watermark_lag_ms = check_int("max_watermark_lag_ms", max_watermark_lag_ms, 1)
        super().__init__()

    def _reset_state(self) -> None:
        self._last_write: int | None = None

    def _advance(self, now: int, *, arrival: bool) -> None:
        if self._last_write is not None and now - self._last_write >= self.max_watermark_lag_ms:
            self._raise(now - 1 - self.max_event_time_lag_ms)

    def _observe(self, te: int, tp: int, late: bool) -> None:
        self._last_write = tp
        self._raise(tp - 1 - self.max_event_time_lag_ms)

    def _timers(self, tp: I64, arrivals: Idx | None) -> tuple[I64, I64 | None]:
        _, _, last_before = arrival_clock(tp, arrivals, self._last_write)
        known = last_before != NO_WATERMARK
        rise = np.where(known, np.where(known, last_before, 0) + self.max_watermark_lag_ms, NO_RISE)
        return rise, np.full(tp.size, 1 + self.max_event_time_lag_ms, np.int64)

    def _run(self, te: I64, tp: I64, arrivals: Idx | None) -> tuple[I64, I64]:
        lag = 1 + self.max_event_time_lag_ms
        write, last_seen, last_before = arrival_clock(tp, arrivals, self._last_write)
        idle = (last_before != NO_WATERMARK) & (tp - last_before >= self.max_watermark_lag_ms)
        advance = np.where(idle, tp - lag, NO_WATERMARK)
        observed = np.where(write != NO_WATERMARK, tp - lag, NO_WATERMARK)
        pre = running_max(np.maximum(advance, shift_right(observed, NO_WATERMARK)), self._wm)
        post = np.maximum(pre, observed)
        last = int(last_seen[-1])
        self._last_write = None if last == NO_WATERMARK else last
        self._wm = int(post[-1])
        self._clock = int(tp[-1])
        return pre, post

    def _state_dict(self) -> dict[str, Any]:
        return {"last_write": self._last_write}

    def _load_state(self, state: Mapping[str, Any]) -> None:
        self._last_write = None if state["last_write"] is None else int(state["last_write"])
