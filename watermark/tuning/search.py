"""The binary search over a fixed-delay family's sorted delays, and the hindsight fixed delay."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from watermark.tuning.replayer import Replayer
from watermark.tuning.rule import Candidate, one_off_burst, stable_choice


def _non_increasing(values: Sequence[float]) -> bool:
    return all(b <= a for a, b in zip(values, values[1:], strict=False))


def monotone_search(
    measure_at: Callable[[int], Candidate], count: int, target_late_pct: float
) -> tuple[dict[int, Candidate], bool]:
    """The settings ``0 .. count - 1`` (increasing delay) a binary search replays, and whether they agree.

    Replays the smallest setting meeting the target on the pooled history, the smallest meeting it on
    every sub-period, the smallest :meth:`~Candidate.clear` one and the smallest whose late tuples are a
    :func:`one_off_burst` (and the probes that
    found them): the ones :func:`stable_choice` may take. The second value is False when the replays run
    contradict monotonicity (a larger delay with more late tuples, pooled or on a sub-period): the caller
    then replays every setting.
    """
    seen: dict[int, Candidate] = {}

    def at(j: int) -> Candidate:
        if j not in seen:
            seen[j] = measure_at(j)
        return seen[j]

    def first(meets: Callable[[Candidate], bool], lo: int, hi: int = count) -> int:
        while lo < hi:
            mid = (lo + hi) // 2
            if meets(at(mid)):
                hi = mid
            else:
                lo = mid + 1
        return lo

    pooled = first(lambda c: c.dropped_pct <= target_late_pct, 0)
    stable = pooled
    if pooled < count and not at(pooled).stable(target_late_pct):  # else the same setting is stable
        stable = first(lambda c: c.stable(target_late_pct), pooled + 1)
    if stable < count and not at(stable).clear(target_late_pct):  # else the same setting is clear
        clear = first(lambda c: c.clear(target_late_pct), stable + 1)
        if clear < count:
            at(clear)
    # from the pooled one on, every setting meets the target: a burst adds a setting only below it
    burst = first(lambda c: one_off_burst(c, target_late_pct), 0, pooled)
    if burst < pooled:
        at(burst)
    ordered = [seen[j] for j in sorted(seen)]
    agree = _non_increasing([c.dropped_pct for c in ordered]) and all(
        _non_increasing([c.late_pct_by_period[i] for c in ordered])
        for i in range(min((len(c.late_pct_by_period) for c in ordered), default=0))
    )
    return seen, agree


def hindsight_fixed(
    replayer: Replayer,
    grid: Mapping[str, Sequence[Mapping[str, Any]]],
    fixed: Candidate,
    held: Sequence[tuple[int, int]],
    target_late_pct: float,
) -> Candidate | None:
    """The smallest delay of ``fixed``'s period and mode meeting the target on ``held`` (hindsight)."""
    settings = [
        p for p in grid["periodic"] if all(p.get(k) == v for k, v in fixed.params.items() if k != "delay_ms")
    ]
    settings.sort(key=lambda p: p.get("delay_ms") or 0)
    seen, agree = monotone_search(
        lambda j: replayer.measure("periodic", settings[j], fixed.partition_mode, held),
        len(settings),
        target_late_pct,
    )
    if not agree:
        seen |= {
            j: replayer.measure("periodic", p, fixed.partition_mode, held)
            for j, p in enumerate(settings)
            if j not in seen
        }
    return stable_choice(list(seen.values()), target_late_pct)
