"""The tuner's rule: which replayed candidate it chooses at a late-rate target.

Candidates are ranked by mean emit latency (ties: fewer late tuples, then the earlier candidate), of those
with windows firing (:func:`ranked`). :func:`stable_choice` steps from the safest setting down, each step
taken only when it is more than :data:`SAFETY_COST` times faster than the choice so far:

1. start from the fastest setting that keeps the target on every sub-period (**stable**, counted in whole
   tuples, :meth:`Candidate.stable`), in the partition mode of the fastest setting meeting the target or
   in a per-key mode (:data:`PER_KEY_MODES`): a stable setting of another mode would buy its stability with
   an exposure the history cannot show. It gives way to the fastest **clear** one (:meth:`Candidate.clear`:
   stable, with a standard error of the late count to spare) when it is not more than :data:`MARGIN_COST`
   times as fast (the tuning period's late count is a sample);
2. take the fastest keeping the target on the pooled history instead when it is more than
   :data:`SAFETY_COST` times as fast, or when none is stable;
3. take the fastest whose late tuples are a **one-off burst** (:func:`one_off_burst`) instead when it is
   more than :data:`SAFETY_COST` times faster again;
4. a choice in a mode with one watermark for every partition (:data:`EXPOSED_MODES`) gives way to the
   fastest setting firing per key meeting the target pooled (stable first) when that one is at most
   :data:`EXPOSURE_COST` times slower.

When no setting keeps the target pooled there is no choice (None). Changing how the tuner scores candidates
is an edit of this module.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: How many times faster a less safe setting must be to be chosen over a safer one (:func:`stable_choice`):
#: one late above the target on a sub-period over a stable one, a one-off burst over one meeting the target
#: (a stable one over a clear one: :data:`MARGIN_COST`).
SAFETY_COST = 2.0

#: How many times faster a stable setting must be to be kept over a clear one (a standard error of the late
#: count to spare, :meth:`Candidate.clear`).
MARGIN_COST = 1.5

#: A choice in ``global`` or ``min`` mode (:data:`EXPOSED_MODES`) gives way to the fastest per-key one
#: (``scoped``, ``keyed``; stable first) meeting the target when that one is at most this many times slower:
#: one device whose clock jumps ahead moves a global watermark past every other device's records, and one
#: whose clock steps back, or that stops, holds a ``min`` watermark for every key.
EXPOSURE_COST = 1.5

#: Partition modes that fire each key by its own watermark (a key is exposed to no other key's clock).
PER_KEY_MODES = ("scoped", "keyed")

#: Partition modes with one watermark that every partition moves or holds (:data:`EXPOSURE_COST`).
EXPOSED_MODES = ("global", "min")

#: A one-off burst (:func:`one_off_burst`): pooled late share at most this many times the target...
BURST_POOLED = 2.0

#: ... and at most this many times the target outside the densest run of a sub-period's length.
BURST_REST = 0.5


@dataclass(frozen=True)
class Candidate:
    """One replayed setting."""

    strategy: str
    params: dict[str, Any]
    dropped_pct: float
    #: Mean, p50, p95, p99 of the emit latency of every window, one not fired before the end of the replay
    #: charged until then (``emit_latency_charged_ms``).
    emit_latency_ms: dict[str, float | None]
    windows_fired: int
    partition_mode: str | None = None  # how partitions make the watermark (None: no partitions)
    late_pct_by_period: tuple[float, ...] = ()  # late share on each sub-period of the tuning period
    rows_by_period: tuple[int, ...] = ()  # rows of each sub-period (empty: unknown)
    #: Late share outside the densest run of as many rows as the shortest sub-period (None: unknown), the
    #: rows of that run left out: what is left once a burst of late tuples, wherever it falls, is set apart.
    rest_late_pct: float | None = None

    @property
    def mean_latency_ms(self) -> float:
        """Mean emit latency (infinite when no window fired before the end of input)."""
        mean = self.emit_latency_ms.get("mean")
        return float("inf") if mean is None else float(mean)

    @property
    def worst_late_pct(self) -> float:
        """The largest late share over the sub-periods (the pooled one without sub-periods)."""
        return max(self.late_pct_by_period, default=self.dropped_pct)

    def stable(self, target_late_pct: float) -> bool:
        """Whether it keeps the target on every sub-period, counted in whole tuples.

        A sub-period misses the target when its late count is above :func:`late_allowance` of its rows (two
        late tuples in 390 rows, 0.51 %, keep a 0.5 % target: 1.95 tuples cannot be late). Without the
        sub-periods' sizes: every share at most the target.

        >>> c = Candidate("x", {}, 0.4, {"mean": 1.0}, 1, None, (0.51, 0.26), (390, 390))
        >>> c.stable(0.5), Candidate("x", {}, 0.4, {"mean": 1.0}, 1, None, (0.51, 0.26)).stable(0.5)
        (True, False)
        >>> Candidate("x", {}, 0.5, {"mean": 1.0}, 1, None, (0.77, 0.26), (390, 390)).stable(0.5)
        False

        """
        if len(self.rows_by_period) != len(self.late_pct_by_period):
            return self.worst_late_pct <= target_late_pct
        # (the count from the share, kept to 4 decimals of a percent: exact below a million rows a sub-period,
        # and a sub-period holds MAX_ROWS / SUBPERIODS rows at most by default)
        return all(
            round(share * rows / 100.0) <= late_allowance(rows, target_late_pct)
            for share, rows in zip(self.late_pct_by_period, self.rows_by_period, strict=True)
        )

    def clear(self, target_late_pct: float) -> bool:
        """Whether it is :meth:`stable` with a standard error of the late count to spare, pooled.

        The tuning period's late count is a sample: the fastest setting whose count is just within the
        target is, more often than not, one that drew fewer late tuples than its rate, and it is over the
        target on the next period (the winner's curse). At the target's expected count ``m`` (its share
        of the rows), a count at most ``m - sqrt(m)`` keeps a Poisson standard error of room. Without the
        sub-periods' sizes: :meth:`stable`.

        >>> def c(share, rows):
        ...     return Candidate("x", {}, share, {"mean": 1.0}, 1, None, (share,) * 4, (rows // 4,) * 4)
        >>> c(0.42, 1_600).clear(0.5), c(0.30, 1_600).clear(0.5), c(0.47, 240_000).clear(0.5)
        (False, True, True)

        """
        rows = sum(self.rows_by_period)
        if len(self.rows_by_period) != len(self.late_pct_by_period) or not rows:
            return self.stable(target_late_pct)
        expected = rows * target_late_pct / 100.0
        late = round(self.dropped_pct * rows / 100.0)
        return late <= expected - math.sqrt(expected) + 1e-9 and self.stable(target_late_pct)

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "strategy": self.strategy,
            "params": self.params,
            "dropped_pct": self.dropped_pct,
            "emit_latency_ms": self.emit_latency_ms,
            "windows_fired": self.windows_fired,
            "partition_mode": self.partition_mode,
            "late_pct_by_period": list(self.late_pct_by_period),
            "rest_late_pct": self.rest_late_pct,
        }


def late_allowance(rows: int, target_late_pct: float) -> int:
    """The most late tuples ``rows`` may hold at the target: its share of them, rounded up.

    A late share is counted in whole tuples: two late in 390 rows are 0.51 %, the closest a sub-period of
    that size comes to a 0.5 % target (1.95 tuples) from above, and no evidence that the setting drifts.

    >>> [late_allowance(rows, 0.5) for rows in (390, 400, 60_000, 0)]
    [2, 2, 300, 0]

    """
    return max(0, math.ceil(rows * target_late_pct / 100.0 - 1e-9))


def one_off_burst(candidate: Candidate, target_late_pct: float) -> bool:
    """Whether the candidate's late tuples are a one-off burst: over the target in one run of arrivals only.

    Its late share is at most :data:`BURST_POOLED` times the target pooled and at most :data:`BURST_REST`
    times the target outside the densest run of a sub-period's rows (:attr:`Candidate.rest_late_pct`; when
    unknown, on every sub-period but its worst). It needs two sub-periods or more.

    >>> burst = Candidate("fleet", {}, 0.6, {"mean": 100.0}, 5, None, (0.0, 0.2, 2.2, 0.0))
    >>> one_off_burst(burst, 0.5), one_off_burst(burst, 0.25)
    (True, False)

    """
    shares = sorted(candidate.late_pct_by_period, reverse=True)
    if len(shares) < 2:
        return False
    rest = shares[1] if candidate.rest_late_pct is None else candidate.rest_late_pct
    return candidate.dropped_pct <= BURST_POOLED * target_late_pct and rest <= BURST_REST * target_late_pct


def stable_choice(candidates: Sequence[Candidate], target_late_pct: float) -> Candidate | None:
    """The choice among ``candidates`` (the module's rule), None when none meets the target pooled.

    Ranked by mean emit latency (ties: fewer late tuples, then the earlier candidate), of those with windows
    firing: the fastest meeting the target on every sub-period (:attr:`Candidate.late_pct_by_period`) in
    the partition mode of the fastest meeting it pooled or in a per-key mode (``scoped``, ``keyed``);
    the fastest meeting it pooled instead when that one is more than :data:`SAFETY_COST` times faster or
    none is stable; then the fastest :func:`one_off_burst` instead when it is more than :data:`SAFETY_COST`
    times faster than that. A stable choice gives way to the fastest :meth:`~Candidate.clear` one (in the
    same modes) unless it is more than :data:`MARGIN_COST` times faster than that. A ``global``- or
    ``min``-mode choice then gives way to the fastest per-key one meeting the target (stable first) that
    is at most :data:`EXPOSURE_COST` times slower.
    """
    return _rule(candidates, target_late_pct)[0]


def margin_over(candidates: Sequence[Candidate], target_late_pct: float) -> Candidate | None:
    """The faster stable setting :func:`stable_choice` passed over for a clear one (None: no such step).

    What ``tune`` prints beside its choice: the setting the target's margin (:meth:`Candidate.clear`)
    turned down, within the target by less than a standard error of its late count.

    >>> def c(name, latency_ms, late):
    ...     share = round(100.0 * late / 1_600, 4)
    ...     return Candidate(name, {}, share, {"mean": latency_ms}, 10, "scoped", (share,) * 4, (400,) * 4)
    >>> margin_over([c("fast", 100.0, 7), c("margin", 140.0, 5)], 0.5).strategy
    'fast'
    >>> margin_over([c("fast", 100.0, 5), c("slow", 180.0, 3)], 0.5) is None
    True

    """
    return _rule(candidates, target_late_pct)[1]


def ranked(candidates: Sequence[Candidate]) -> list[Candidate]:
    """The candidates with windows firing, fastest first (ties: fewer late tuples, then the earlier one)."""
    return sorted(
        (c for c in candidates if c.windows_fired), key=lambda c: (c.mean_latency_ms, c.dropped_pct)
    )  # sorted is stable: the first of ties


def fastest_meeting(candidates: Sequence[Candidate], target_late_pct: float) -> Candidate | None:
    """The first of :func:`ranked` meeting the target pooled (None: none)."""
    return next((c for c in ranked(candidates) if c.dropped_pct <= target_late_pct), None)


def _rule(
    candidates: Sequence[Candidate], target_late_pct: float
) -> tuple[Candidate | None, Candidate | None]:
    """:func:`stable_choice` and :func:`margin_over` at once."""
    fired = ranked(candidates)
    meeting = [c for c in fired if c.dropped_pct <= target_late_pct]
    if not meeting:
        return None, None
    # Stability is sought within the fastest's partition mode, or toward firing per key: a stable setting of
    # another mode (``min`` waiting for the slowest partition) would buy it with an exposure the history
    # cannot show.
    mode = meeting[0].partition_mode
    allowed = {mode, *PER_KEY_MODES}  # or toward firing per key, which exposes a key to no other
    stable = next((c for c in meeting if c.partition_mode in allowed and c.stable(target_late_pct)), None)
    choice = stable or meeting[0]
    for faster in (meeting[0], next((c for c in fired if one_off_burst(c, target_late_pct)), None)):
        if faster is not None and faster.mean_latency_ms * SAFETY_COST < choice.mean_latency_ms:
            choice = faster
    over = None
    if stable is not None and choice is stable:  # a margin, unless the stable choice is far faster
        clear = next((c for c in meeting if c.partition_mode in allowed and c.clear(target_late_pct)), None)
        if clear is not None and stable.mean_latency_ms * MARGIN_COST >= clear.mean_latency_ms:
            choice, over = clear, (None if clear is stable else stable)
    if choice.partition_mode in EXPOSED_MODES:  # exposed to every device: firing per key, if not too slow
        per_key = [c for c in meeting if c.partition_mode in PER_KEY_MODES]
        safer = next((c for c in per_key if c.stable(target_late_pct)), per_key[0] if per_key else None)
        if safer is not None and safer.mean_latency_ms <= EXPOSURE_COST * choice.mean_latency_ms:
            choice, over = safer, None
    return choice, over
