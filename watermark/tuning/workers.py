"""The tuner's work: jobs of (strategy, partition mode, settings), run here or in worker processes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from watermark.progress import progress_line
from watermark.tuning.history import Periods
from watermark.tuning.replayer import Replayer
from watermark.tuning.rule import Candidate
from watermark.tuning.search import monotone_search
from watermark.tuning.space import setting_groups

#: Fewest rows replayed per candidate for the tuner to start worker processes (below, starting them costs
#: more than it saves).
PARALLEL_MIN_ROWS = 20_000

#: One unit of the tuner's work: (strategy, partition mode, positions in its settings, search them).
Job = tuple[str, "str | None", list[int], bool]


@dataclass
class WorkState:
    """What a job needs: the replayer of the tuning period, its periods, the settings, the target."""

    replayer: Replayer
    tuning: Periods
    grid: Mapping[str, Sequence[Mapping[str, Any]]]
    target_late_pct: float


#: The state of a worker process (:func:`_init_worker`).
_WORKER: list[WorkState] = []


def _do_job(state: WorkState, job: Job, order: int) -> list[tuple[tuple[int, int], Candidate]]:
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


def _init_worker(state: WorkState) -> None:
    state.replayer.progress = None
    _WORKER[:] = [state]


def _worker_job(item: tuple[Job, int]) -> tuple[list[tuple[tuple[int, int], Candidate]], int]:
    job, order = item
    state = _WORKER[0]
    before = state.replayer.replays
    out = _do_job(state, job, order)
    return out, state.replayer.replays - before


def run_jobs(state: WorkState, jobs: Sequence[Job], workers: int) -> list[tuple[tuple[int, int], Candidate]]:
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


def plan_jobs(
    modes: Sequence[str | None],
    names: Sequence[str],
    grid: Mapping[str, Sequence[Mapping[str, Any]]],
    exhaustive: bool,
    monotone: Mapping[str, str],
) -> list[Job]:
    """The jobs of a tuning: per mode and strategy, each setting alone or the binary-searched groups."""
    jobs: list[Job] = []
    for mode in modes:
        for name in names:
            if exhaustive or name not in monotone:
                jobs += [(name, mode, [i], False) for i in range(len(grid[name]))]
            else:
                jobs += [(name, mode, group, True) for group in setting_groups(name, grid[name])]
    return jobs
