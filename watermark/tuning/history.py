"""The tuner's history cuts: the tuning blocks, their sub-periods, the held-out slice, and the splice.

A candidate is replayed on at most ``max_rows`` rows (default :data:`MAX_ROWS`) of the tuning period: a
history that fits is replayed whole (its sub-periods cut from one replay); a longer one is sampled as
``subperiods`` contiguous blocks, the latest rows of each sub-period, joined into one stream by
:func:`splice`. The held-out slice is capped the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

#: Sub-periods of the tuning period (by arrival) on each of which the choice should keep the target.
SUBPERIODS = 4

#: Fewest rows in a sub-period (a shorter history gets fewer sub-periods, at least one).
MIN_PERIOD_ROWS = 100

#: Rows of the tuning period replayed per candidate at most (longer: sampled in contiguous blocks).
MAX_ROWS = 240_000


@dataclass(frozen=True)
class Periods:
    """Where candidates are replayed: row ranges ``[lo, hi)`` of the history in arrival order."""

    blocks: tuple[tuple[int, int], ...]  # each replayed on its own
    periods: tuple[tuple[int, int], ...]  # the sub-periods whose late shares are checked, each in one block
    evaluation: tuple[int, int] | None  # the held-out slice

    @property
    def events(self) -> int:
        """Rows measured per candidate on the tuning period."""
        return sum(hi - lo for lo, hi in self.blocks)

    def shifted(self, rows: int) -> Periods:
        """The same ranges ``rows`` later (behind a warm-up of that many rows)."""
        if not rows:
            return self

        def move(r: tuple[int, int]) -> tuple[int, int]:
            return r[0] + rows, r[1] + rows

        evaluation = None if self.evaluation is None else move(self.evaluation)
        return Periods(tuple(map(move, self.blocks)), tuple(map(move, self.periods)), evaluation)


def split_history(
    n: int, *, subperiods: int = SUBPERIODS, evaluation_fraction: float = 0.0, max_rows: int | None = MAX_ROWS
) -> Periods:
    """Cut ``n`` rows (in arrival order) into the tuning blocks, their sub-periods and the held-out slice.

    The latest ``evaluation_fraction`` of the rows is held out (its first ``max_rows`` replayed). The rest is
    cut into ``subperiods`` equal sub-periods (fewer when a sub-period would have under
    :data:`MIN_PERIOD_ROWS` rows); within ``max_rows`` it is one block, else each sub-period keeps its latest
    ``max_rows // subperiods`` rows as a block of its own (joined by :func:`splice`).

    >>> split_history(1_000, subperiods=2, evaluation_fraction=0.2)
    Periods(blocks=((0, 800),), periods=((0, 400), (400, 800)), evaluation=(800, 1000))
    >>> split_history(10_000, subperiods=2, max_rows=1_000)
    Periods(blocks=((4500, 5000), (9500, 10000)), periods=((4500, 5000), (9500, 10000)), evaluation=None)

    """
    held = int(n * evaluation_fraction)
    end = n - held
    k = max(1, min(subperiods, end // MIN_PERIOD_ROWS))
    cuts = [end * i // k for i in range(k + 1)]
    periods = [(cuts[i], cuts[i + 1]) for i in range(k)]
    if max_rows is None or end <= max_rows:
        blocks = [(0, end)]
    else:
        size = max(1, max_rows // k)
        periods = [(max(lo, hi - size), hi) for lo, hi in periods]
        blocks = list(periods)
    evaluation = None if held == 0 else (end, n if max_rows is None else min(n, end + max_rows))
    return Periods(tuple(blocks), tuple(periods), evaluation)


def splice(
    te: NDArray[np.int64], tp: NDArray[np.int64], blocks: Sequence[tuple[int, int]], step_ms: int
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.intp]]:
    """Row ranges of an arrival-ordered history joined into one stream: event times, arrival times, rows.

    Each block after the first is moved back in time, its event and arrival times alike (its disorder is
    kept), by a multiple of ``step_ms`` (so windows map onto windows), to start between 1 ms and ``step_ms``
    after the previous block's last arrival: the watermark and the open windows run on from one block into
    the next, instead of one block's last windows waiting hours for the next block's data.

    >>> te, tp = np.array([5, 9, 1_000_005]), np.array([10, 20, 1_000_010])
    >>> te, tp, rows = splice(te, tp, [(0, 2), (2, 3)], 100)
    >>> te.tolist(), tp.tolist(), rows.tolist()
    ([5, 9, 105], [10, 20, 110], [0, 1, 2])

    """
    te_out, tp_out, rows = [], [], []
    last: int | None = None
    for lo, hi in blocks:
        te_b, tp_b = te[lo:hi], tp[lo:hi]
        if last is not None and hi > lo:
            shift = max(0, (int(tp_b[0]) - last - 1) // step_ms * step_ms)
            te_b, tp_b = te_b - shift, tp_b - shift
        if hi > lo:
            last = int(tp_b[-1])
        te_out.append(te_b)
        tp_out.append(tp_b)
        rows.append(np.arange(lo, hi, dtype=np.intp))
    return np.concatenate(te_out), np.concatenate(tp_out), np.concatenate(rows)


def recent_rows(tp: ArrayLike, fraction: float) -> np.ndarray:
    """Indices of the latest ``fraction`` of rows by arrival, in input order (ties keep input order).

    >>> recent_rows([5, 1, 4, 2], 0.5).tolist()
    [0, 2]

    """
    tp_a = np.asarray(tp)
    keep = np.argsort(tp_a, kind="stable")[tp_a.size - max(1, int(np.ceil(tp_a.size * fraction))) :]
    keep.sort()
    return keep
