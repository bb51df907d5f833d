"""The tuner: the strategy and parameters with the lowest mean emit latency at a late-rate target.

It replays a recorded history through a search space of strategies and parameters (each strategy's
``search_space``, :func:`watermark.strategies.registry.search_space`), keeps the runs whose late share
(``dropped_pct``) is at most the target, and chooses the one with the lowest mean emit latency (ties: fewer
late tuples, then the earlier candidate), weighing that latency against how safely the target is kept on
``subperiods`` sub-periods of the history (by arrival; default :data:`SUBPERIODS`). **The rule**
(:func:`stable_choice`) steps from the safest setting down, each step taken only when it is more than
:data:`SAFETY_COST` (2) times faster than the choice so far:

1. start from the fastest setting that keeps the target on every sub-period (**stable**, counted in whole
   tuples, :meth:`Candidate.stable`: two late tuples in a sub-period of 390 rows, 0.51 %, keep a 0.5 %
   target, which allows 1.95), **in the partition mode of the fastest setting meeting the target, or in
   a per-key mode** (``scoped``, ``keyed``): a stable setting of another mode (``min``, where every key
   waits for the slowest partition; ``global``, one watermark for all) would buy its stability with an
   exposure the history cannot show, while firing per key exposes a key to no other. A device whose clock
   steps back by seconds, or falls behind, holds every key's windows for as long under ``min``, and only
   its own under ``scoped``; on the design seeds of ``benchmarks/tuner_quality.py`` such choices were 3-18
   times the hindsight fixed delay on the next period (20 design seeds: the tuner's ``clock-steps``
   measured in true time went from 0.80 to 0.67, the other families' medians the same);
   that setting gives way to the fastest **clear** one (:meth:`Candidate.clear`: stable, and its pooled
   late count at most ``m - sqrt(m)``, ``m`` the target's share of the rows) when it is not more than
   :data:`MARGIN_COST` (1.5) times as fast: the tuning period's late count is a sample, and the fastest
   setting just within the target is most often one that drew fewer late tuples than its rate, over the
   target on the next period (the winner's curse; 20 design seeds: the ``retransmits`` late median went
   from 0.58 % to 0.36 %, every family's median ratio within 0.01). At twice (the first factor) the margin
   passed over settings that carried over better than the clear ones taken (20 design seeds: all 27 cases
   that 1.5 changed went down, 1.30 to 0.75 times the hindsight fixed delay for one, the late medians the
   same);
2. take the fastest keeping it on the pooled history instead (its late share drifts above the target on a
   sub-period) when it is more than twice as fast, or when none is stable: a drifting setting is passed
   over for a stable one, but not at any price;
3. take the fastest whose late tuples are a **one-off burst** (:func:`one_off_burst`: within half the
   target outside the densest run of a sub-period's length, wherever that run falls, within twice the
   target pooled) instead when it is more than twice as fast again. One device's clock stepping back by
   seconds makes its records late for that long under any watermark that never goes back; it happens
   once, so the next period does not need the fixed delay of seconds that would hide it. (The run is
   found wherever it falls: a step across the boundary of two sub-periods puts the target over on both,
   and was not forgiven when the burst had to fit one sub-period.)
4. a choice in ``global`` or ``min`` mode gives way to the fastest setting firing per key (``scoped``,
   ``keyed``; stable first) meeting the target pooled when that one is at most :data:`EXPOSURE_COST` (1.5)
   times slower. One watermark over every partition is exposed to each device, and the history shows it
   only once it happened: under ``global`` one whose clock jumps ahead moves it past every other device's
   records, which are then all late (20 design seeds: a choice at 33 % late on the next period went to
   1.2 %, the ``retransmits`` late median from 0.64 % to 0.58 %, every family's median ratio the same);
   under ``min`` one whose clock steps back, or that stops, holds every key's windows for the step or the
   idle timeout (20 design seeds: ``fleet``'s ``min``-mode choices at 3.1 and 3.4 times the hindsight fixed
   delay on the next period went to 1.5 and 1.0, every family's median ratio the same).

When no setting keeps the target pooled there is no choice (:class:`TuneError`), a burst included. The
factor 2 is what the carry-over benchmark supports (``benchmarks/tuner_quality.py``, design seeds): the
stability preference without it took settings several times slower that the next period did not need, and
forgiving bursts without it, or pooled targets without the worst sub-period, raised the late share the next
period realizes. The trade-off frontier (late % against mean emit latency, Pareto-optimal runs) comes with
the choice, so a report can show what a tighter or looser target would cost. The chosen ``params`` work as
``--set name=value`` for ``replay`` and the job.

Only the most recent part of the history counts (``recent_fraction``, by arrival; default the latest half):
disorder drifts, and the recent past predicts the next period better than the distant one. The part before
it is not thrown away: up to as many rows again are replayed first as a **warm-up**, unmeasured (their late
tuples and the windows ending before the measured part starts do not count), so a strategy that learns
(``slo``, ``fleet``, ``adaptive``) is measured as the job runs it, warm, not from a cold start on a slice
shorter than the periods it will run for. (Without it, a ``fleet`` setting measured 450 ms on the latest
half of a bundled recording's period, 190 ms on the whole period and 150 ms on the next one.)

**Latency** is the mean emit latency over every window, a window that never fired charged until the end
of the replay (``emit_latency_charged_ms`` of :meth:`watermark.evaluation.replay.ReplayResult.summary`): a
setting that leaves windows open (a key that stopped, a delay that outgrows the history) cannot look fast
by leaving them out.

**Carry-over.** With ``evaluation_fraction`` (the re-tuning job holds out 0.2), the latest slice of the
history is held out: the choice is made on the earlier part and replayed on the held-out slice, and the
result reports both (:class:`PeriodReport`: late share, mean emit latency, and the ratio to the best fixed
delay, the ``periodic`` family, chosen on the tuning period and, with hindsight, on the evaluation period).

**Speed.** In the fixed-delay families (each one's ``monotone_param``,
:func:`watermark.strategies.registry.monotone_params`: ``periodic`` at a fixed period, ``ingestion``,
``band``) a larger delay gives a lower-or-equal watermark at every instant, hence a subset of the late
tuples on every sub-period. So instead of replaying every delay of the grid, a binary search over the sorted
delays finds the smallest delay meeting the target on the pooled history, the smallest meeting it on every
sub-period, the smallest clear one and the smallest whose late tuples are a one-off burst (about 4 x 9
replays instead of 501 per period and partition mode). The replays it runs are
checked for that monotonicity (late share non-increasing in the delay, pooled and on each sub-period); a
family where it does not hold is replayed exhaustively. ``candidates`` and the frontier are the replays
actually run: every setting of the other families, the searched delays of the fixed-delay ones.

**Scale.** A candidate is replayed on at most ``max_rows`` rows (default :data:`MAX_ROWS`) of the tuning
period, whatever the history's size: a history that fits is replayed whole (its sub-periods cut from one
replay); a longer one is sampled as ``subperiods`` contiguous blocks of ``max_rows / subperiods`` rows, the
latest of each sub-period (contiguous, so the disorder structure is intact; random row sampling would
destroy it), spliced into one stream (:func:`splice`: each block moved back in time, event and arrival time
alike, by a multiple of the window step, to start just after the previous one) and replayed once. The
held-out slice is capped the same way (its first ``max_rows`` rows).

With partitions, every candidate is measured in each partition mode (the minimum over partitions, one global
generator, partition-scoped firing when keys live in one partition, key-scoped firing when keys share
partitions), so the choice is never worse on the
history than one global generator. ``slo`` and ``fleet`` settings without a target are tried at
:data:`SLO_SHARES` of the tuner's target. How the choice compares, on the next period, with the best fixed
delay chosen with hindsight is measured by ``benchmarks/tuner_quality.py`` (``docs/performance.md``); the
time and memory of a re-tuning at 100k, 1M and 10M rows by ``benchmarks/tuner_scale.py``.

Examples
--------
>>> import numpy as np
>>> from watermark.evaluation.replay import WindowSpec
>>> rng = np.random.default_rng(0)
>>> tp = np.arange(0, 200_000, 20, dtype=np.int64)
>>> te = tp - rng.integers(0, 300, tp.size)
>>> space = {"periodic": [{"delay_ms": d, "period_ms": 10} for d in (0, 100, 200, 300, 400)]}
>>> result = tune(te, tp, target_late_pct=0.5, window=WindowSpec(1_000), space=space)
>>> result.choice.params["delay_ms"], result.choice.dropped_pct <= 0.5
(300, True)

"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from watermark import storage
from watermark.evaluation.compare import chosen_strategies
from watermark.evaluation.replay import DEFAULT_STRAGGLER_MS, latency_stats, replay
from watermark.partitions.arrays import factorize, one_partition_per_key
from watermark.progress import progress_line
from watermark.strategies.registry import monotone_params, search_space, targeted
from watermark.windowspec import WindowSpec

#: Sub-periods of the tuning period (by arrival) on each of which the choice should keep the target.
SUBPERIODS = 4

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

#: Fewest rows in a sub-period (a shorter history gets fewer sub-periods, at least one).
MIN_PERIOD_ROWS = 100

#: Rows of the tuning period replayed per candidate at most (longer: sampled in contiguous blocks).
MAX_ROWS = 240_000

#: Fewest rows replayed per candidate for the tuner to start worker processes (below, starting them costs
#: more than it saves).
PARALLEL_MIN_ROWS = 20_000

#: Targets tried for the ``slo`` and ``fleet`` strategies, as fractions of the tuner's target (their settings
#: in a search space that leave out ``late_slo_pct`` get one candidate per fraction).
SLO_SHARES = (0.5, 0.7, 0.85, 1.0)


class TuneError(ValueError):
    """No candidate meets the target, or the input cannot be tuned."""


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


@dataclass(frozen=True)
class PeriodReport:
    """The choice on one period (tuning or held-out evaluation) beside the best fixed delay there."""

    events: int  # rows replayed
    choice: Candidate  # the chosen setting's figures on this period
    fixed: Candidate | None  # the best ``periodic`` setting meeting the target on this period (None: none)

    @property
    def ratio(self) -> float | None:
        """The choice's mean emit latency over the fixed delay's (None without a fixed delay)."""
        base = None if self.fixed is None else self.fixed.mean_latency_ms
        if base is None or not np.isfinite(base) or base <= 0:
            return None
        return round(float(self.choice.mean_latency_ms / base), 4)

    def as_dict(self) -> dict[str, Any]:
        """JSON form (the re-tuning report's ``tuning`` and ``evaluation``)."""
        return {
            "events": self.events,
            "dropped_pct": self.choice.dropped_pct,
            "emit_latency_ms": self.choice.emit_latency_ms,
            "late_pct_by_period": list(self.choice.late_pct_by_period),
            "fixed_delay": None if self.fixed is None else self.fixed.as_dict(),
            "ratio_to_fixed_delay": self.ratio,
        }


@dataclass(frozen=True)
class TuneResult:
    """The choice, every candidate replayed, and the frontier."""

    target_late_pct: float
    window: WindowSpec
    choice: Candidate
    candidates: list[Candidate]
    history_events: int  # events each candidate was replayed on (the tuning blocks)
    tuning: PeriodReport | None = None
    evaluation: PeriodReport | None = None  # the held-out slice (None without ``evaluation_fraction``)
    replays: int = 0  # replays run (search, evaluation and baseline included)
    #: With several partition modes: per mode, the choice within it and its tuning and evaluation reports.
    within_mode: dict[str, tuple[Candidate, PeriodReport, PeriodReport | None]] = field(default_factory=dict)

    @property
    def frontier(self) -> list[Candidate]:
        """Pareto-optimal candidates: no other has both fewer late tuples and a lower mean latency."""
        ranked = sorted(
            (c for c in self.candidates if c.windows_fired), key=lambda c: (c.dropped_pct, c.mean_latency_ms)
        )
        out: list[Candidate] = []
        best = float("inf")
        for c in ranked:
            if c.mean_latency_ms < best:
                out.append(c)
                best = c.mean_latency_ms
        return out

    def as_dict(self) -> dict[str, Any]:
        """What ``python -m watermark tune --json`` prints (``margin_over``: :func:`margin_over`)."""
        over = margin_over(self.candidates, self.target_late_pct)
        return {
            "strategy": self.choice.strategy,
            "params": self.choice.params,
            "partition_mode": self.choice.partition_mode,
            "dropped_pct": self.choice.dropped_pct,
            "emit_latency_ms": self.choice.emit_latency_ms,
            "late_pct_by_period": list(self.choice.late_pct_by_period),
            "rest_late_pct": self.choice.rest_late_pct,
            "target_late_pct": self.target_late_pct,
            "window_ms": self.window.window_ms,
            "slide_ms": self.window.slide_ms,
            "candidates": len(self.candidates),
            "replays": self.replays,
            "history_events": self.history_events,
            "tuning": None if self.tuning is None else self.tuning.as_dict(),
            "evaluation": None if self.evaluation is None else self.evaluation.as_dict(),
            "frontier": [c.as_dict() for c in self.frontier],
            "margin_over": None if over is None else over.as_dict(),
        }


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


def _public(params: Mapping[str, Any]) -> dict[str, Any]:
    """Settings as ``--set`` takes them (unset optional parameters left out)."""
    return {k: v for k, v in params.items() if v is not None}


def _expand(name: str, settings: Sequence[Mapping[str, Any]], target_late_pct: float) -> list[dict[str, Any]]:
    """Settings of a strategy taking ``late_slo_pct`` without it get one per :data:`SLO_SHARES` fraction."""
    out: list[dict[str, Any]] = []
    for params in settings:
        if not targeted(name) or "late_slo_pct" in params:
            out.append(dict(params))
        elif target_late_pct > 0:
            out += [dict(params) | {"late_slo_pct": round(target_late_pct * f, 4)} for f in SLO_SHARES]
    return out


def _keys_in_one_partition(partition: ArrayLike, key: ArrayLike) -> bool:
    """True if every key value occurs in a single partition (keyed partitioning)."""
    _, parts = factorize(np.asarray(partition))
    _, keys = factorize(np.asarray(key))
    return one_partition_per_key(keys, parts)


def recent_rows(tp: ArrayLike, fraction: float) -> np.ndarray:
    """Indices of the latest ``fraction`` of rows by arrival, in input order (ties keep input order).

    >>> recent_rows([5, 1, 4, 2], 0.5).tolist()
    [0, 2]

    """
    tp_a = np.asarray(tp)
    keep = np.argsort(tp_a, kind="stable")[tp_a.size - max(1, int(np.ceil(tp_a.size * fraction))) :]
    keep.sort()
    return keep


class _Replayer:
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
        return Candidate(name, _public(params), dropped, latency, fired, mode, *by, rest)


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


def late_allowance(rows: int, target_late_pct: float) -> int:
    """The most late tuples ``rows`` may hold at the target: its share of them, rounded up.

    A late share is counted in whole tuples: two late in 390 rows are 0.51 %, the closest a sub-period of
    that size comes to a 0.5 % target (1.95 tuples) from above, and no evidence that the setting drifts.

    >>> [late_allowance(rows, 0.5) for rows in (390, 400, 60_000, 0)]
    [2, 2, 300, 0]

    """
    return max(0, math.ceil(rows * target_late_pct / 100.0 - 1e-9))


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


def _groups(name: str, settings: Sequence[Mapping[str, Any]]) -> list[list[int]]:
    """Positions of ``settings`` grouped by all but the monotone parameter, each group in increasing order."""
    param = monotone_params()[name]
    groups: dict[str, list[int]] = {}
    for i, p in enumerate(settings):
        rest = repr(sorted((k, repr(v)) for k, v in p.items() if k != param))
        groups.setdefault(rest, []).append(i)
    return [sorted(idx, key=lambda i: settings[i].get(param) or 0) for idx in groups.values()]


def _planned(grid: Mapping[str, Sequence[Mapping[str, Any]]], exhaustive: bool) -> int:
    """Replays expected per partition mode (for the progress count)."""
    monotone = monotone_params()
    total = 0
    for name, settings in grid.items():
        if exhaustive or name not in monotone:
            total += len(settings)
        else:
            total += sum(3 * int(np.ceil(np.log2(len(g) + 1))) for g in _groups(name, settings))
    return total


#: One unit of the tuner's work: (strategy, partition mode, positions in its settings, search them).
_Job = tuple[str, "str | None", list[int], bool]


@dataclass
class _WorkState:
    """What a job needs: the replayer of the tuning period, its periods, the settings, the target."""

    replayer: _Replayer
    tuning: Periods
    grid: Mapping[str, Sequence[Mapping[str, Any]]]
    target_late_pct: float


#: The state of a worker process (:func:`_init_worker`).
_WORKER: list[_WorkState] = []


def _do_job(state: _WorkState, job: _Job, order: int) -> list[tuple[tuple[int, int], Candidate]]:
    """The candidates of one job, each with its place: (the rank of its mode and strategy, its setting)."""
    name, mode, positions, search = job
    settings = state.grid[name]

    def run(i: int) -> Candidate:
        return state.replayer.measure(name, settings[i], mode, state.tuning.blocks, state.tuning.periods)

    if not search:
        return [((order, i), run(i)) for i in positions]
    seen, agree = monotone_search(lambda j: run(positions[j]), len(positions), state.target_late_pct)
    if not agree:  # not monotone on this history: every setting of the group
        seen |= {j: run(i) for j, i in enumerate(positions) if j not in seen}
    return [((order, positions[j]), c) for j, c in seen.items()]


def _init_worker(state: _WorkState) -> None:
    state.replayer.progress = None
    _WORKER[:] = [state]


def _worker_job(item: tuple[_Job, int]) -> tuple[list[tuple[tuple[int, int], Candidate]], int]:
    job, order = item
    state = _WORKER[0]
    before = state.replayer.replays
    out = _do_job(state, job, order)
    return out, state.replayer.replays - before


def _run_jobs(
    state: _WorkState, jobs: Sequence[_Job], workers: int
) -> list[tuple[tuple[int, int], Candidate]]:
    """Every job's candidates, in ``workers`` processes (1: here); the same candidates either way.

    Each candidate comes with its place: the (partition mode, strategy) pair's rank, then its setting's.
    """
    pairs = {(job[1], job[0]): None for job in jobs}
    rank = {pair: i for i, pair in enumerate(pairs)}
    heads = [rank[(job[1], job[0])] for job in jobs]
    out: list[tuple[tuple[int, int], Candidate]] = []
    if workers <= 1 or len(jobs) < 2 or state.tuning.events < PARALLEL_MIN_ROWS:
        for head, job in zip(heads, jobs, strict=True):
            out += _do_job(state, job, head)
        return out
    import multiprocessing

    replayer = state.replayer
    progress, replayer.progress = replayer.progress, None  # the workers' replays are reported here
    try:
        context = multiprocessing.get_context("spawn")  # no fork of a process that may hold threads
        # Leaving the block terminates the workers, an exception too (a task's timeout leaves no work behind).
        with context.Pool(workers, initializer=_init_worker, initargs=(state,)) as pool:
            for (found, replays), job in zip(
                pool.imap(_worker_job, zip(jobs, heads, strict=True)), jobs, strict=True
            ):
                out += found
                replayer.done[0] += replays
                if progress is not None:
                    line = f"[{replayer.replays}] {job[0]}" + ("" if job[1] is None else f" {job[1]}")
                    progress(progress_line(line, replayer.replays, max(replayer.planned, replayer.replays)))
    finally:
        replayer.progress = progress
    return out


def tune(
    te: ArrayLike,
    tp: ArrayLike,
    *,
    target_late_pct: float,
    window: WindowSpec,
    strategies: Sequence[str] | None = None,
    space: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    partition: ArrayLike | None = None,
    key: ArrayLike | None = None,
    straggler_ms: int = DEFAULT_STRAGGLER_MS,
    idle_timeout_ms: int | None = None,
    recent_fraction: float = 0.5,
    recent_rows: int | None = None,
    progress: Callable[[str], None] | None = None,
    partition_modes: Sequence[str] | None = None,
    subperiods: int = SUBPERIODS,
    evaluation_fraction: float = 0.0,
    max_rows: int | None = MAX_ROWS,
    exhaustive: bool = False,
    compare_fixed: bool = True,
    workers: int = 1,
) -> TuneResult:
    """Replay the candidates of ``space`` and choose as the module says.

    ``space`` defaults to every strategy's ``search_space``
    (:func:`watermark.strategies.registry.search_space`).

    With ``partition``, every candidate is replayed in each of ``partition_modes`` (default: ``min`` and
    ``global``, ``scoped`` when a ``key`` is given and every key lives in one partition, and ``keyed``
    when there are more keys than partitions; see
    :func:`~watermark.evaluation.replay.replay`), so a combination is chosen only where it measures better
    than one generator for the whole stream. ``subperiods``, ``evaluation_fraction`` and ``max_rows`` cut the
    history (:func:`split_history`); ``exhaustive`` replays every delay of the fixed-delay families instead of
    the binary search; ``compare_fixed`` reports the ratio to the best fixed delay (``periodic``) per period;
    ``workers`` replays in that many processes when candidates are replayed on at least
    :data:`PARALLEL_MIN_ROWS` rows (the same candidates and choice as with one). ``recent_rows`` (instead
    of ``recent_fraction``): measure the latest that many rows, the ones before them the warm-up (a caller
    that read the history's tail, as the re-tuning job does).
    """
    if not 0.0 <= target_late_pct <= 100.0:
        msg = f"target_late_pct must be within [0, 100], got {target_late_pct}"
        raise TuneError(msg)
    if not 0.0 < recent_fraction <= 1.0:
        msg = f"recent_fraction must be within (0, 1], got {recent_fraction}"
        raise TuneError(msg)
    if not 0.0 <= evaluation_fraction < 1.0:
        msg = f"evaluation_fraction must be within [0, 1), got {evaluation_fraction}"
        raise TuneError(msg)
    if isinstance(subperiods, bool) or not isinstance(subperiods, int) or subperiods < 1:
        msg = f"subperiods must be an integer >= 1, got {subperiods!r}"
        raise TuneError(msg)
    if max_rows is not None and (isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1):
        msg = f"max_rows must be an integer >= 1 or None, got {max_rows!r}"
        raise TuneError(msg)
    space = search_space() if space is None else space
    monotone = monotone_params()
    try:
        names = chosen_strategies(space, strategies, "search space")
    except ValueError as exc:
        raise TuneError(str(exc)) from None
    te_a, tp_a = np.asarray(te), np.asarray(tp)
    if te_a.size == 0 or te_a.size != tp_a.size:
        msg = f"the history is empty or its columns differ in length ({te_a.size} and {tp_a.size})"
        raise TuneError(msg)
    # Arrival order once (ties in input order, as replay orders them); the latest recent_fraction of it,
    # after as many rows again before it (the warm-up, replayed unmeasured) as the history has.
    order = np.argsort(tp_a, kind="stable")
    if recent_rows is not None and (isinstance(recent_rows, bool) or not 1 <= int(recent_rows)):
        msg = f"recent_rows must be an integer >= 1 or None, got {recent_rows!r}"
        raise TuneError(msg)
    recent = max(1, int(np.ceil(order.size * recent_fraction)))
    if recent_rows is not None:
        recent = min(order.size, int(recent_rows))
    warm = min(order.size - recent, recent)
    order = order[order.size - recent - warm :]
    te_s, tp_s = te_a[order].astype(np.int64, copy=False), tp_a[order].astype(np.int64, copy=False)
    part_codes = None if partition is None else factorize(np.asarray(partition)[order])[1]
    key_codes = None if key is None else factorize(np.asarray(key)[order])[1]
    grid = {name: _expand(name, space[name], target_late_pct) for name in names}
    if part_codes is None:
        modes: list[str | None] = [None]
    elif partition_modes is not None:
        modes = list(partition_modes)
    else:
        modes = ["min", "global"]
        if key_codes is not None and _keys_in_one_partition(part_codes, key_codes):
            modes.append("scoped")
        if key_codes is not None and int(key_codes.max(initial=-1)) > int(part_codes.max(initial=-1)):
            modes.append("keyed")  # keys share partitions: each key firing by its own watermark differs
    cut = split_history(
        recent, subperiods=subperiods, evaluation_fraction=evaluation_fraction, max_rows=max_rows
    )
    if len(cut.blocks) > 1:  # a long history, sampled in blocks: no warm-up (see splice)
        te_s, tp_s = te_s[warm:], tp_s[warm:]
        part_codes = None if part_codes is None else part_codes[warm:]
        key_codes = None if key_codes is None else key_codes[warm:]
        warm = 0
    cut = cut.shifted(warm)
    planned = len(modes) * _planned(grid, exhaustive)
    held_replayer = _Replayer(
        te_s, tp_s, part_codes, key_codes, window, straggler_ms, idle_timeout_ms, progress, planned, warm
    )
    if len(cut.blocks) > 1:  # a long history: its sampled blocks as one stream
        te_t, tp_t, rows = splice(te_s, tp_s, cut.blocks, window.step_ms)
        part_t = None if part_codes is None else part_codes[rows]
        key_t = None if key_codes is None else key_codes[rows]
        bounds = np.cumsum([0] + [hi - lo for lo, hi in cut.blocks]).tolist()
        tuning = Periods(((0, bounds[-1]),), tuple(zip(bounds[:-1], bounds[1:], strict=True)), None)
        replayer = _Replayer(
            te_t, tp_t, part_t, key_t, window, straggler_ms, idle_timeout_ms, progress, planned
        )
    else:
        replayer, tuning = held_replayer, cut
    jobs: list[_Job] = []
    for mode in modes:
        for name in names:
            if exhaustive or name not in monotone:
                jobs += [(name, mode, [i], False) for i in range(len(grid[name]))]
            else:
                jobs += [(name, mode, group, True) for group in _groups(name, grid[name])]
    state = _WorkState(replayer, tuning, grid, target_late_pct)
    candidates = [c for _, c in sorted(_run_jobs(state, jobs, workers))]
    choice = stable_choice(candidates, target_late_pct)
    if choice is None:
        lowest = min(candidates, key=lambda c: c.dropped_pct)
        msg = (
            f"no setting keeps late tuples at or below {target_late_pct} % with windows firing; the lowest "
            f"is {lowest.dropped_pct} % ({lowest.strategy} {lowest.params})"
        )
        raise TuneError(msg)
    fixed = None
    if compare_fixed:
        fixed = stable_choice([c for c in candidates if c.strategy == "periodic"], target_late_pct)
    hindsight: list[Candidate | None] = []  # computed once, when first needed

    def reports(c: Candidate) -> tuple[PeriodReport, PeriodReport | None]:
        if cut.evaluation is None:
            return PeriodReport(cut.events, c, fixed), None
        held = [cut.evaluation]
        if not hindsight:
            hindsight.append(
                None if fixed is None else _hindsight_fixed(held_replayer, grid, fixed, held, target_late_pct)
            )
        on_held = held_replayer.measure(c.strategy, c.params, c.partition_mode, held)
        events = cut.evaluation[1] - cut.evaluation[0]
        return PeriodReport(cut.events, c, fixed), PeriodReport(events, on_held, hindsight[0])

    on_tuning, evaluation = reports(choice)
    within: dict[str, tuple[Candidate, PeriodReport, PeriodReport | None]] = {}
    for mode in modes if len(modes) > 1 else []:
        best = stable_choice([c for c in candidates if c.partition_mode == mode], target_late_pct)
        if best is not None:
            within[mode or "min"] = (
                (best, on_tuning, evaluation) if best is choice else (best, *reports(best))
            )
    replays = replayer.replays + (held_replayer.replays if held_replayer is not replayer else 0)
    return TuneResult(
        target_late_pct, window, choice, candidates, cut.events, on_tuning, evaluation, replays, within
    )


def _hindsight_fixed(
    replayer: _Replayer,
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


def _rule(
    candidates: Sequence[Candidate], target_late_pct: float
) -> tuple[Candidate | None, Candidate | None]:
    """:func:`stable_choice` and :func:`margin_over` at once."""
    fired = sorted(
        (c for c in candidates if c.windows_fired), key=lambda c: (c.mean_latency_ms, c.dropped_pct)
    )  # sorted is stable: the first of ties
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


def plot(result: TuneResult, path: str) -> None:
    """The trade-off curve (late % against mean emit latency) with the choice marked, as a PNG at ``path``.

    ``path`` may be a URI (:mod:`watermark.storage`); the image is written whole.
    """
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    fired = [c for c in result.candidates if c.windows_fired]
    for name in sorted({c.strategy for c in fired}):
        mine = [c for c in fired if c.strategy == name]
        ax.scatter(
            [c.dropped_pct for c in mine], [c.mean_latency_ms for c in mine], s=12, alpha=0.5, label=name
        )
    front = result.frontier
    ax.plot([c.dropped_pct for c in front], [c.mean_latency_ms for c in front], "k-", lw=1, label="frontier")
    ax.axvline(result.target_late_pct, color="red", ls="--", lw=1, label=f"target {result.target_late_pct} %")
    c = result.choice
    ax.scatter([c.dropped_pct], [c.mean_latency_ms], s=160, marker="*", color="red", zorder=5, label="choice")
    ax.annotate(f"{c.strategy} {c.params}", (c.dropped_pct, c.mean_latency_ms), fontsize=8,
                xytext=(8, 8), textcoords="offset points")  # fmt: skip
    ax.set_xlabel("late (dropped) %")
    ax.set_ylabel("mean emit latency (ms)")
    ax.set_yscale("log")
    ax.set_xscale("symlog", linthresh=0.1)
    ax.set_title(f"Tuning: {len(result.candidates)} settings, {result.window.window_ms} ms windows")
    ax.legend(fontsize=8)
    fig.tight_layout()
    image = io.BytesIO()
    fig.savefig(image, dpi=120, format="png")
    plt.close(fig)
    storage.write_bytes(path, image.getvalue())
