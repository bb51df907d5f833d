"""The tuner: the strategy and parameters with the lowest mean emit latency at a late-rate target.

It replays a recorded history through a search space of strategies and parameters (each strategy's
``search_space``, :func:`watermark.strategies.registry.search_space`), keeps the runs whose late share
(``dropped_pct``) is at most the target, and chooses among them by the rule of :mod:`watermark.tuning.rule`
(:func:`~watermark.tuning.rule.stable_choice`): the lowest mean emit latency, weighed against how safely
the target is kept on ``subperiods`` sub-periods of the history (by arrival; default
:data:`~watermark.tuning.history.SUBPERIODS`). When no setting keeps the target pooled there is no choice
(:class:`TuneError`). The trade-off frontier (late % against mean emit latency, Pareto-optimal runs) comes
with the choice (:class:`~watermark.tuning.results.TuneResult`). The chosen ``params`` work as
``--set name=value`` for ``replay`` and the job.

Only the most recent part of the history counts (``recent_fraction``, by arrival; default the latest half).
Up to as many rows again before it are replayed first as a **warm-up**, unmeasured (their late tuples and
the windows ending before the measured part starts do not count), so a strategy that learns (``slo``,
``fleet``, ``adaptive``) is measured warm, as the job runs it.

**Latency** is the mean emit latency over every window, a window that never fired charged until the end
of the replay (``emit_latency_charged_ms`` of :meth:`watermark.evaluation.replay.ReplayResult.summary`).

**Carry-over.** With ``evaluation_fraction``, the latest slice of the history is held out: the choice is
made on the earlier part and replayed on the held-out slice, and the result reports both
(:class:`~watermark.tuning.results.PeriodReport`: late share, mean emit latency, and the ratio to the best
fixed delay, the ``periodic`` family, chosen on the tuning period and, with hindsight, on the held-out one).

**Speed.** In the fixed-delay families (each one's ``monotone_param``,
:func:`watermark.strategies.registry.monotone_params`) a larger delay gives a subset of the late tuples, so
a binary search over the sorted delays (:func:`~watermark.tuning.search.monotone_search`) replays only the
delays the rule may take; a family whose replays contradict monotonicity is replayed exhaustively.
``candidates`` and the frontier are the replays actually run. ``workers`` replays in processes
(:mod:`watermark.tuning.workers`).

**Scale.** A candidate is replayed on at most ``max_rows`` rows of the tuning period
(:mod:`watermark.tuning.history`: a longer history is sampled in contiguous blocks spliced into one stream).

With partitions, every candidate is measured in each partition mode
(:func:`~watermark.tuning.space.partition_modes_for`), so the choice is never worse on the history than one
global generator. ``slo`` and ``fleet`` settings without a target are tried at
:data:`~watermark.tuning.space.SLO_SHARES` of the tuner's target. How the choice compares, on the next
period, with the best fixed delay chosen with hindsight is measured by ``benchmarks/tuner_quality.py``
(``docs/performance.md``); the time and memory of a re-tuning by ``benchmarks/tuner_scale.py``.

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

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from watermark.evaluation.compare import chosen_strategies
from watermark.evaluation.replay import DEFAULT_STRAGGLER_MS
from watermark.partitions.arrays import factorize
from watermark.strategies.registry import monotone_params, search_space
from watermark.tuning.history import MAX_ROWS, SUBPERIODS, Periods, splice, split_history
from watermark.tuning.replayer import Replayer
from watermark.tuning.results import PeriodReport, TuneResult
from watermark.tuning.rule import Candidate, stable_choice
from watermark.tuning.search import hindsight_fixed
from watermark.tuning.space import expand_settings, partition_modes_for, planned_replays
from watermark.tuning.workers import WorkState, plan_jobs, run_jobs
from watermark.windowspec import WindowSpec


class TuneError(ValueError):
    """No candidate meets the target, or the input cannot be tuned."""


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
    history (:func:`~watermark.tuning.history.split_history`); ``exhaustive`` replays every delay of the
    fixed-delay families instead of the binary search; ``compare_fixed`` reports the ratio to the best fixed
    delay (``periodic``) per period; ``workers`` replays in that many processes when candidates are
    replayed on at least :data:`~watermark.tuning.workers.PARALLEL_MIN_ROWS` rows (the same candidates and
    choice as with one). ``recent_rows`` (instead of ``recent_fraction``): measure the latest that many rows,
    the ones before them the warm-up (a caller that read the history's tail, as the re-tuning job does).
    """
    _check_arguments(target_late_pct, recent_fraction, evaluation_fraction, subperiods, max_rows)
    space = search_space() if space is None else space
    try:
        names = chosen_strategies(space, strategies, "search space")
    except ValueError as exc:
        raise TuneError(str(exc)) from None
    te_s, tp_s, part_codes, key_codes, recent, warm = _arrival_rows(
        te, tp, partition, key, recent_fraction, recent_rows
    )
    grid = {name: expand_settings(name, space[name], target_late_pct) for name in names}
    modes = partition_modes_for(part_codes, key_codes, partition_modes)
    cut = split_history(
        recent, subperiods=subperiods, evaluation_fraction=evaluation_fraction, max_rows=max_rows
    )
    if len(cut.blocks) > 1:  # a long history, sampled in blocks: no warm-up (see splice)
        te_s, tp_s = te_s[warm:], tp_s[warm:]
        part_codes = None if part_codes is None else part_codes[warm:]
        key_codes = None if key_codes is None else key_codes[warm:]
        warm = 0
    cut = cut.shifted(warm)
    planned = len(modes) * planned_replays(grid, exhaustive)
    held_replayer = Replayer(
        te_s, tp_s, part_codes, key_codes, window, straggler_ms, idle_timeout_ms, progress, planned, warm
    )
    replayer, tuning = _tuning_replayer(held_replayer, cut)
    jobs = plan_jobs(modes, names, grid, exhaustive, monotone_params())
    state = WorkState(replayer, tuning, grid, target_late_pct)
    candidates = [c for _, c in sorted(run_jobs(state, jobs, workers))]
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
    reports = _Reports(held_replayer, cut, grid, fixed, target_late_pct)
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


def _check_arguments(
    target_late_pct: float, recent_fraction: float, evaluation_fraction: float, subperiods: int,
    max_rows: int | None,
) -> None:  # fmt: skip
    """Raise :class:`TuneError` for a setting of :func:`tune` out of its range."""
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


def _arrival_rows(
    te: ArrayLike,
    tp: ArrayLike,
    partition: ArrayLike | None,
    key: ArrayLike | None,
    recent_fraction: float,
    recent_rows: int | None,
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.intp] | None, NDArray[np.intp] | None, int, int]:
    """The rows the tuner replays, in arrival order: event and arrival times, partition and key codes.

    The latest ``recent_fraction`` of the history (or its latest ``recent_rows``), after as many rows again
    before it (the warm-up, replayed unmeasured) as the history has; with the counts of both.
    """
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
    return te_s, tp_s, part_codes, key_codes, recent, warm


def _tuning_replayer(held: Replayer, cut: Periods) -> tuple[Replayer, Periods]:
    """The replayer of the tuning period and its ranges: ``held``'s own, or its sampled blocks spliced."""
    if len(cut.blocks) <= 1:
        return held, cut
    te_t, tp_t, rows = splice(held.te, held.tp, cut.blocks, held.window.step_ms)
    part_t = None if held.partition is None else held.partition[rows]
    key_t = None if held.key is None else held.key[rows]
    bounds = np.cumsum([0] + [hi - lo for lo, hi in cut.blocks]).tolist()
    tuning = Periods(((0, bounds[-1]),), tuple(zip(bounds[:-1], bounds[1:], strict=True)), None)
    replayer = Replayer(
        te_t, tp_t, part_t, key_t, held.window, held.straggler_ms, held.idle_timeout_ms, held.progress,
        held.planned,
    )  # fmt: skip
    return replayer, tuning


class _Reports:
    """A candidate's reports on the tuning period and the held-out slice (the hindsight delay found once)."""

    def __init__(
        self,
        replayer: Replayer,
        cut: Periods,
        grid: Mapping[str, Sequence[Mapping[str, Any]]],
        fixed: Candidate | None,
        target_late_pct: float,
    ) -> None:
        self.replayer, self.cut, self.grid, self.fixed = replayer, cut, grid, fixed
        self.target_late_pct = target_late_pct
        self.hindsight: list[Candidate | None] = []  # computed once, when first needed

    def __call__(self, c: Candidate) -> tuple[PeriodReport, PeriodReport | None]:
        cut, fixed = self.cut, self.fixed
        if cut.evaluation is None:
            return PeriodReport(cut.events, c, fixed), None
        held = [cut.evaluation]
        if not self.hindsight:
            self.hindsight.append(
                None
                if fixed is None
                else hindsight_fixed(self.replayer, self.grid, fixed, held, self.target_late_pct)
            )
        on_held = self.replayer.measure(c.strategy, c.params, c.partition_mode, held)
        events = cut.evaluation[1] - cut.evaluation[0]
        return PeriodReport(cut.events, c, fixed), PeriodReport(events, on_held, self.hindsight[0])
