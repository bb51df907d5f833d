"""The tuner's replays: a setting replayed on row ranges of one history, its figures pooled."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from watermark.evaluation.replay import latency_stats, replay
from watermark.progress import progress_line
from watermark.tuning.rule import Candidate
from watermark.tuning.space import public_params
from watermark.windowspec import WindowSpec


class Replayer:
    """Replays settings on row ranges of one history (arrival order) and pools the figures; counts replays."""

    def __init__(
        self,
        te: NDArray[np.int64],
        tp: NDArray[np.int64],
        partition: NDArray[np.intp] | None,
        key: NDArray[np.intp] | None,
        window: WindowSpec,
        straggler_ms: int,
        idle_timeout_ms: int | None,
        progress: Callable[[str], None] | None,
        planned: int,
        warmup: int = 0,
    ) -> None:
        self.te, self.tp, self.partition, self.key = te, tp, partition, key
        self.window, self.straggler_ms, self.idle_timeout_ms = window, straggler_ms, idle_timeout_ms
        self.progress, self.planned = progress, planned
        #: Rows before a block replayed first, unmeasured (as many as there are, up to this many).
        self.warmup = warmup
        self.done = [0]  # replays run (a list: replayers of one tuning share it)

    @property
    def replays(self) -> int:
        """Replays run."""
        return self.done[0]

    def measure(
        self,
        name: str,
        params: Mapping[str, Any],
        mode: str | None,
        blocks: Sequence[tuple[int, int]],
        periods: Sequence[tuple[int, int]] = (),
    ) -> Candidate:
        """``name`` with ``params`` replayed on each block, pooled; late shares of ``periods`` (in blocks).

        Each block is replayed after up to :attr:`warmup` rows before it, which are not measured: neither
        their late tuples nor the windows that end before the block's first arrival count.
        """
        late = events = fired = 0
        latencies: list[NDArray[np.int64]] = []
        by_period: list[float] = []
        rows_by_period: list[int] = []
        period_flags: list[NDArray[np.bool_]] = []
        summary: dict[str, Any] = {}
        for lo, hi in blocks:
            start = max(0, lo - self.warmup)
            r = replay(
                self.te[start:hi],
                self.tp[start:hi],
                strategy=name,
                params=dict(params),
                window=self.window,
                partition=None if self.partition is None else self.partition[start:hi],
                key=None if self.key is None else self.key[start:hi],
                straggler_ms=self.straggler_ms,
                idle_timeout_ms=self.idle_timeout_ms,
                partition_mode=mode or "min",
            )
            flags = r.late[lo - start :]  # arrival order = row order: the block is sorted by arrival
            for p_lo, p_hi in periods:
                if lo <= p_lo and p_hi <= hi:
                    period_flags.append(flags[p_lo - lo : p_hi - lo])
                    share = float(np.count_nonzero(period_flags[-1])) / max(1, p_hi - p_lo)
                    by_period.append(round(100.0 * share, 4))
                    rows_by_period.append(p_hi - p_lo)
            late += int(np.count_nonzero(flags))
            events += hi - lo
            w = r.windows
            measured = w.end_ms > self.tp[lo] if lo > start else np.ones(w.end_ms.size, np.bool_)
            fired += int(np.count_nonzero(w.fired & measured))
            latencies.append(r.charged_latency_ms()[measured])
            if len(blocks) == 1 and lo == start:
                summary = r.summary()
            self.done[0] += 1
            if self.progress is not None:
                line = f"[{self.replays}] {name} {dict(params)}" + ("" if mode is None else f" {mode}")
                self.progress(progress_line(line, self.replays, max(self.planned, self.replays)))
        if summary:  # one block, no warm-up: the replay's own report (the same figures ``replay`` prints)
            dropped, latency, fired = (
                summary["dropped_pct"],
                summary["emit_latency_charged_ms"],
                summary["windows_fired"],
            )
        else:
            dropped = round(100.0 * late / events, 4) if events else 0.0
            latency = latency_stats(np.concatenate(latencies) if latencies else np.empty(0, np.int64))
        rest = (
            None
            if len(period_flags) < 2
            else burst_rest_pct(np.concatenate(period_flags), min(rows_by_period))
        )
        by = (tuple(by_period), tuple(rows_by_period))
        return Candidate(name, public_params(params), dropped, latency, fired, mode, *by, rest)


def burst_rest_pct(late: NDArray[np.bool_], span: int) -> float | None:
    """Late share outside the run of ``span`` rows in a row holding the most late tuples (None: none left).

    A burst (a device's clock stepping back, a flush) is late tuples close together in arrival order; it
    may straddle two sub-periods, so it is found wherever it falls, not on the sub-periods' boundaries.
    With fewer late tuples (a larger delay of a fixed-delay family) the share is never higher: the densest
    run holds at least the smaller set's tuples in the larger set's densest run.

    >>> flags = np.zeros(400, np.bool_); flags[95:105] = True  # ten late tuples across rows 95-104
    >>> burst_rest_pct(flags, 100), burst_rest_pct(np.r_[flags, [True]], 100)
    (0.0, 0.3322)

    """
    if span <= 0 or late.size <= span:
        return None
    counts = np.concatenate(([0], np.cumsum(late, dtype=np.int64)))
    densest = int((counts[span:] - counts[:-span]).max())
    return round(100.0 * (int(counts[-1]) - densest) / (late.size - span), 4)
