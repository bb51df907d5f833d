"""Event-time windows as Spark's ``window()`` makes them: the one specification every path derives from.

The replay (:mod:`watermark.evaluation.replay`), the job's Spark path
(:func:`jobs.common.windows.assign_windows`) and its Arrow path (:mod:`jobs.stream.workers.arrow_path`, in
Spark's Python workers) share :class:`WindowSpec`. It lives apart from the replay so that the workers import
numpy for it, not the watermark strategies (numba, river).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from watermark.base import check_int


@dataclass(frozen=True)
class WindowSpec:
    """Tumbling (``slide_ms=None``) or sliding event-time windows, aligned to epoch 0 like Spark's."""

    window_ms: int
    slide_ms: int | None = None

    def __post_init__(self) -> None:
        check_int("window_ms", self.window_ms, 1)
        if self.slide_ms is not None:
            check_int("slide_ms", self.slide_ms, 1)
            if self.slide_ms > self.window_ms:
                msg = f"slide_ms ({self.slide_ms}) must not exceed window_ms ({self.window_ms})"
                raise ValueError(msg)

    @property
    def step_ms(self) -> int:
        """Distance between window starts."""
        return self.window_ms if self.slide_ms is None else self.slide_ms

    @property
    def tumbling(self) -> bool:
        """Each event time falls in exactly one window (no slide, or a slide equal to the window)."""
        return self.slide_ms is None or self.slide_ms == self.window_ms

    def start_range(self, te: Any, mod: Callable[[Any, int], Any] = np.mod) -> tuple[Any, Any]:
        """First and last start of the windows holding event time ``te``: ``(first, last)``.

        The windows holding ``te`` start at every multiple of :attr:`step_ms` in ``(te - window_ms, te]``.
        ``mod`` is a floor modulo (its result in ``[0, step)``, negative times included) of ``te``'s kind:
        ``np.mod`` for arrays (the default), ``operator.mod`` for ints, Spark's ``pmod`` for columns. The
        replay (:meth:`assign`), the job's Spark path (:func:`jobs.common.windows.assign_windows`) and its
        Arrow path all derive their windows from this one definition.

        Examples
        --------
        >>> import operator
        >>> WindowSpec(10, 5).start_range(12, operator.mod), WindowSpec(10, 5).start_range(-3, operator.mod)
        ((5, 10), (-10, -5))
        >>> WindowSpec(10).start_range(-10, operator.mod)
        (-10, -10)

        """
        step = self.step_ms
        last = te - mod(te, step)
        if self.tumbling:
            return last, last
        earliest = te - self.window_ms  # the windows start after it
        return earliest - mod(earliest, step) + step, last

    def assign(self, te: NDArray[np.int64]) -> tuple[NDArray[np.intp], NDArray[np.int64]]:
        """Windows of each event time: ``(row, start)`` pairs, one per window a row belongs to.

        Rows keep their order, and a row's windows come earliest first.

        Examples
        --------
        >>> import numpy as np
        >>> rows, starts = WindowSpec(10, 5).assign(np.array([12, -3]))
        >>> rows.tolist(), starts.tolist()
        ([0, 0, 1, 1], [5, 10, -10, -5])

        """
        first: NDArray[np.int64]
        last: NDArray[np.int64]
        first, last = self.start_range(te)
        if self.tumbling:
            return np.arange(te.size), last
        step = self.step_ms
        count = (last - first) // step + 1
        rows = np.repeat(np.arange(te.size), count)
        offsets = np.arange(rows.size) - np.repeat(np.cumsum(count) - count, count)
        return rows, first[rows] + offsets * step
