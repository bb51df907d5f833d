"""Idle timeouts learned from a partition's own inter-arrival gaps (``idle_timeout_ms="auto"``).

A fixed idle timeout suits a fleet whose partitions share a cadence; devices that report every second and
every ten minutes side by side need one each. The learned timeout of a partition is a multiple of a high
quantile of its own gaps between arrivals (on the combination's ingestion clock), with a floor and a cap:

    timeout = clamp(multiplier * q-quantile of the recent gaps, floor_ms, cap_ms)

The gaps are kept as a histogram of powers of two (bucket ``b`` holds the gaps ``g`` with
``g.bit_length() == b``; the quantile is the upper edge ``2**b`` of its bucket, so at most twice the exact
one), and the counts are halved (integer division) whenever they sum to ``2 * memory``, so the quantile
follows the last few hundred gaps of the partition and the state is 64 integers. Everything is integer
arithmetic on the arrivals in order: the same arrivals give the same timeouts however a stream is cut into
batches, and the histogram is plain JSON in the snapshot. Until a partition has ``min_gaps`` gaps its
timeout is the cap (its cadence is unknown: it is not declared idle early).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from watermark.base import check_float, check_int

#: Buckets of the gap histogram: every int64 gap has a bit length below 64.
BUCKETS = 64


@dataclass(frozen=True)
class IdleLearning:
    """How a learned idle timeout is made from a partition's gaps (the defaults of ``"auto"``).

    Examples
    --------
    A device that reports every 100 ms (and once after 300 ms): the 0.99-quantile of its gaps is in the
    bucket ``[256, 512)``, so its timeout is ``4 * 512`` ms.

    >>> learning = IdleLearning(min_gaps=4)
    >>> hist = learning.learn([0] * BUCKETS, [100, 100, 100, 300])
    >>> learning.timeout_ms(hist)
    2048
    >>> learning.timeout_ms(learning.learn([0] * BUCKETS, [100]))  # too few gaps yet: the cap
    600000

    """

    multiplier: int = 4
    quantile: float = 0.99
    floor_ms: int = 1_000
    cap_ms: int = 600_000
    min_gaps: int = 8
    memory: int = 256

    def __post_init__(self) -> None:
        check_int("multiplier", self.multiplier, 1)
        check_float("quantile", self.quantile, 0.0, 1.0, low_open=True)
        check_int("floor_ms", self.floor_ms, 1)
        check_int("cap_ms", self.cap_ms, self.floor_ms)
        check_int("min_gaps", self.min_gaps, 1)
        check_int("memory", self.memory, 1)

    def learn(self, hist: Sequence[int], gaps: Iterable[int]) -> list[int]:
        """The histogram after ``gaps`` (in arrival order), halved whenever it sums to ``2 * memory``."""
        out = list(hist)
        total = sum(out)
        for gap in gaps:
            out[max(int(gap), 0).bit_length()] += 1
            total += 1
            if total >= 2 * self.memory:
                out = [c // 2 for c in out]
                total = sum(out)
        return out

    def timeouts(self, hist: Sequence[int], gaps: NDArray[np.int64]) -> tuple[NDArray[np.int64], list[int]]:
        """The timeout after each of ``gaps`` (in arrival order) and the histogram after them.

        The vectorised form of :meth:`learn` and :meth:`timeout_ms` gap by gap (the same integers): between
        two halvings the histogram only grows, so each run of gaps is a cumulative sum of one-hot rows.
        """
        out = np.empty(gaps.size, np.int64)
        counts = np.asarray(hist, np.int64).copy()
        buckets = _bit_lengths(np.maximum(gaps, 0))
        start = 0
        while start < gaps.size:
            total = int(counts.sum())
            room = max(2 * self.memory - total, 1)  # gaps until the next halving (it follows that gap)
            stop = min(gaps.size, start + room)
            rows = np.zeros((stop - start, BUCKETS), np.int64)
            rows[np.arange(stop - start), buckets[start:stop]] = 1
            running = counts + np.cumsum(rows, axis=0)
            totals = total + np.arange(1, stop - start + 1)
            ranks = np.maximum(1, np.ceil(self.quantile * totals)).astype(np.int64)
            bucket = np.argmax(np.cumsum(running, axis=1) >= ranks[:, None], axis=1)
            edge = np.int64(1) << np.minimum(bucket, 62)  # (past cap // multiplier: the cap, no overflow)
            over = (bucket > 62) | (edge > self.cap_ms // self.multiplier)
            learned = np.where(
                over, self.cap_ms, np.maximum(self.multiplier * np.where(over, 0, edge), self.floor_ms)
            )
            out[start:stop] = np.where(totals < self.min_gaps, self.cap_ms, learned)
            counts = running[-1]
            if int(counts.sum()) >= 2 * self.memory:  # halved right after that gap, before its timeout
                counts = counts // 2
                out[stop - 1] = self.timeout_ms(counts.tolist())
            start = stop
        return out, [int(c) for c in counts]

    def timeout_ms(self, hist: Sequence[int]) -> int:
        """The timeout the histogram gives (the cap with fewer than ``min_gaps`` gaps)."""
        total = sum(hist)
        if total < self.min_gaps:
            return self.cap_ms
        rank = max(1, math.ceil(self.quantile * total))
        seen = 0
        for bucket, count in enumerate(hist):
            seen += count
            if seen >= rank:
                return min(self.cap_ms, max(self.floor_ms, self.multiplier * (1 << bucket)))
        return self.cap_ms  # (unreachable: the counts sum to total)


def _bit_lengths(values: NDArray[np.int64]) -> NDArray[np.intp]:
    """``int.bit_length`` of each non-negative int64."""
    out = np.zeros(values.size, np.intp)
    rest = values.copy()
    for shift in (32, 16, 8, 4, 2, 1):
        big = rest >= (np.int64(1) << shift)
        out[big] += shift
        rest[big] >>= shift
    out += rest > 0
    return out


def sparse(hist: Sequence[int]) -> list[list[int]]:
    """The histogram as ``[[bucket, count], ...]`` of its non-zero buckets (its snapshot form)."""
    return [[b, c] for b, c in enumerate(hist) if c]


def dense(pairs: Iterable[Sequence[int]]) -> list[int]:
    """Inverse of :func:`sparse`."""
    out = [0] * BUCKETS
    for bucket, count in pairs:
        b, c = int(bucket), int(count)
        if not 0 <= b < BUCKETS or c < 0:
            msg = f"an idle-gap histogram entry must be [bucket 0..63, count >= 0], got {[bucket, count]}"
            raise ValueError(msg)
        out[b] = c
    return out
