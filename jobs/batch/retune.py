"""Threshold re-tuning: tune the watermark on the recent arrival history and publish a better version.

Run daily by ``dags/watermark_retuning.py`` (or ``python -m jobs.batch.retune``). For the day ending at
``end``:

1. Read the recent arrival history (the streaming job's ``arrivals`` table: partition, event and arrival
   time of every valid record) ingested in ``[end - history, end)``. Like the tuner, only the latest
   ``recent_fraction`` of it counts: a first read takes the arrival times alone, a second the three
   columns of the recent rows only (a filter on ``arrival_time_ms``, and on the date partition when the
   table has one), partitions as integer codes: numpy int64 arrays, no Python objects per row. When the
   recent part is replayed whole (at most ``max_rows``), as many rows again before it are read too: the
   tuner's warm-up, replayed first and not measured, so that a strategy that learns is measured warm.
2. Run the tuner (:func:`watermark.tuning.tune.tune`) on it, at the late-rate target (by default the running
   configuration's ``late_slo_pct``), keeping the running window, straggler band and idleness timeout.
   The latest ``evaluation_fraction`` (0.2) is held out; the choice is made on the earlier part, cut into
   ``subperiods`` sub-periods on each of which it should keep the target, each candidate replayed on at
   most ``max_rows`` rows (contiguous blocks of each sub-period), in one process per core: a day of 10
   million arrivals is re-tuned in bounded time and memory (``benchmarks/tuner_scale.py``).
3. Replay the running setting on the same periods.
4. Publish a new configuration version (running version + 1) only if it is valid and better: it meets the
   target, and the running setting misses it or is at least ``min_gain`` slower on mean emit latency.
   The file is replaced atomically and only if nobody published meanwhile (compare and swap on the
   version). The streaming job applies it at its next batch boundary (``watermark.config.ConfigWatcher``).
5. Keep a report (JSON: decision, reason, both settings' figures, the frontier) and the trade-off plot.
   ``tuning`` and ``evaluation`` give the published (or best) setting's late share, mean emit latency and
   ratio to the best fixed delay on the tuning period and on the held-out slice (there the fixed delay is
   chosen with hindsight), ``running_evaluation`` the running setting's on the held-out slice: whether the
   choice carries over to the next period.

Decisions: ``published``, ``kept`` (not better, or no setting meets the target) and ``skipped`` (too
little history). Only errors (unreadable tables or configuration, a concurrent publication) raise.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

import numpy as np
import pyarrow.compute as pc

from jobs.common.reads import TableReader
from watermark import storage
from watermark.config import ConfigError, PipelineConfig, load_config, write_config, write_text_atomically
from watermark.storage import Location
from watermark.tuning.history import MAX_ROWS, SUBPERIODS
from watermark.tuning.results import PeriodReport, TuneResult, plot
from watermark.tuning.rule import Candidate
from watermark.tuning.tune import TuneError, tune

DAY_MS = 86_400_000


@dataclass(frozen=True)
class RetuneOptions:
    """One re-tuning run."""

    tables: str
    config: str
    reports: str
    end_ms: int
    history_ms: int = DAY_MS
    target_late_pct: float | None = None  # None: the running configuration's late_slo_pct
    strategies: tuple[str, ...] | None = None
    recent_fraction: float = 0.5
    min_events: int = 1_000
    min_gain: float = 0.02  # publish only if mean emit latency improves by at least this fraction
    evaluation_fraction: float = 0.2  # the latest share of the recent history held out to check carry-over
    subperiods: int = SUBPERIODS  # the choice should keep the target on each
    max_rows: int | None = MAX_ROWS  # rows replayed per candidate at most
    workers: int = 0  # processes replaying candidates (0: one per core this process may run on)


@dataclass
class RetuneOutcome:
    """What the run decided; ``as_dict()`` is the report's head and the task's XCom."""

    decision: str  # published | kept | skipped
    reason: str
    running_version: int
    config_version: int  # the version in force after the run
    history_events: int = 0
    target_late_pct: float | None = None
    chosen: dict[str, Any] | None = None
    running: dict[str, Any] | None = None
    report: str | None = None
    plot: str | None = None
    frontier: list[dict[str, Any]] = field(default_factory=list)
    #: The tuner's choice when it runs another partition mode than the job (which cannot change it).
    other_mode: dict[str, Any] | None = None
    #: The chosen setting on the tuning period and on the held-out slice (late share, latency, ratio to the
    #: best fixed delay there: :class:`watermark.tuning.results.PeriodReport`); the running setting's held-out
    #: figures.
    tuning: dict[str, Any] | None = None
    evaluation: dict[str, Any] | None = None
    running_evaluation: dict[str, Any] | None = None
    replays: int = 0  # replays the tuner ran

    @property
    def published(self) -> bool:
        """True if a new version was written."""
        return self.decision == "published"

    def metric_values(self) -> dict[str, float]:
        """The values pushed as ``awm_tuning_*`` metrics (monitoring.push.TASK_VALUES["tuning"])."""
        values: dict[str, float] = {"published": float(self.published), "config_version": self.config_version}
        if self.chosen is not None:
            values["dropped_ratio"] = self.chosen["dropped_pct"] / 100.0
            mean = self.chosen["emit_latency_ms"].get("mean")
            if mean is not None:
                values["emit_latency_seconds"] = mean / 1000.0
        if self.running is not None and self.running["emit_latency_ms"].get("mean") is not None:
            values["running_emit_latency_seconds"] = self.running["emit_latency_ms"]["mean"] / 1000.0
        return values

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        return dict(self.__dict__, published=self.published)


class RetuneError(RuntimeError):
    """The run cannot decide safely (e.g. the configuration changed while it ran)."""


def read_history(
    tables: str, start_ms: int, end_ms: int, recent_fraction: float = 1.0, warm_up_to: int = 0
) -> dict[str, np.ndarray]:
    """Partition codes, event and arrival times of the latest records ingested in ``[start_ms, end_ms)``.

    The latest ``recent_fraction`` by arrival (rows tied with the cut's arrival time all kept). When that
    is at most ``warm_up_to`` rows, as many rows again before it are read as well, for the tuner's warm-up
    (:func:`watermark.tuning.tune.tune`: replayed first, not measured); ``recent`` holds how many rows are the
    recent part (the latest ones).

    ``partition`` holds int32 codes into ``partitions`` (the names, an object array of the distinct values):
    about 20 bytes a row in all, read with the filters pushed into the read (files whose statistics miss
    the interval are not opened). With ``recent_fraction < 1`` a first read takes the arrival times alone to
    find the cut.
    """
    sink = TableReader(tables, "jobs.batch.retune")
    if not sink.exists("arrivals"):
        msg = (
            f"no arrival history at {sink.path('arrivals')}: the streaming job writes it unless run with "
            "--no-arrival-history"
        )
        raise FileNotFoundError(msg)
    ingested = pc.field("ingested_at_ms")
    where = (ingested >= start_ms) & (ingested < end_ms)
    days: tuple[int | None, int | None] | None = None
    ingested_rows = recent_count = None
    if recent_fraction < 1.0:
        arrivals = sink.read("arrivals", columns=["arrival_time_ms"], filters=where)
        tp_all = arrivals.column("arrival_time_ms").to_numpy()
        ingested_rows = int(tp_all.size)
        del arrivals
        if tp_all.size:
            recent = max(1, int(np.ceil(tp_all.size * recent_fraction)))
            read = min(tp_all.size, 2 * recent) if recent <= warm_up_to else recent
            drop = tp_all.size - read
            cut = int(np.partition(tp_all, drop)[drop])
            if read > recent:  # the recent part: rows at or after its own cut (ties kept, as read)
                recent_cut = int(np.partition(tp_all, tp_all.size - recent)[tp_all.size - recent])
                recent_count = int(np.count_nonzero(tp_all >= recent_cut))
            where = where & (pc.field("arrival_time_ms") >= cut)
            days = (cut, None)  # prunes the arrival-date partitions, when the table has them
        del tp_all
    columns = ["partition", "event_time_ms", "arrival_time_ms"]
    window = sink.read("arrivals", columns=columns, filters=where, days=days)
    names = window.column("partition").combine_chunks().dictionary_encode()
    return {
        "partition": names.indices.to_numpy(zero_copy_only=False).astype(np.int32, copy=False),
        "partitions": np.asarray(names.dictionary.to_pylist(), dtype=object),
        "te": window.column("event_time_ms").to_numpy(),
        "tp": window.column("arrival_time_ms").to_numpy(),
        # rows ingested in the interval (before the recent cut)
        "ingested": np.array([window.num_rows if ingested_rows is None else ingested_rows], np.int64),
        "recent": np.array([window.num_rows if recent_count is None else recent_count], np.int64),
    }


def score(
    running: PipelineConfig,
    te: np.ndarray,
    tp: np.ndarray,
    partition: np.ndarray,
    options: RetuneOptions | None = None,
    recent_rows: int | None = None,
) -> TuneResult:
    """The running setting replayed on the history's periods (the same replays the tuner's candidates get).

    ``choice`` holds its figures on the tuning period, ``evaluation`` on the held-out slice; ``recent_rows``:
    the latest rows measured, the ones before them the warm-up (None: every row measured).
    """
    options = options or RetuneOptions("", "", "", 0)
    return tune(
        te,
        tp,
        target_late_pct=100.0,
        window=running.window,
        space={running.strategy: [dict(running.params)]},
        partition=partition,
        key=partition,  # as the candidates: windows per partition (the history keeps no keys)
        straggler_ms=running.straggler_ms,
        idle_timeout_ms=cast("int | None", running.idle_timeout_ms),  # or "auto": tune hands it to replay
        recent_fraction=1.0,
        recent_rows=recent_rows,
        partition_modes=(running.partition_mode,),
        subperiods=options.subperiods,
        evaluation_fraction=options.evaluation_fraction,
        max_rows=options.max_rows,
        compare_fixed=False,
    )


def tuned_modes(running_mode: str) -> tuple[str, ...]:
    """The partition modes the re-tuning measures for a job running ``running_mode``.

    In the keyed mode the history's partitions are the job's keys (:func:`jobs.stream.paths.by_key`): the
    modes over source partitions cannot be measured on it, one generator for the whole stream can.

    >>> tuned_modes("scoped"), tuned_modes("keyed")
    (('min', 'global', 'scoped'), ('global', 'keyed'))
    """
    return ("global", "keyed") if running_mode == "keyed" else ("min", "global", "scoped")


def _stamp(end_ms: int) -> str:
    return datetime.fromtimestamp(end_ms / 1000, tz=UTC).strftime("%Y%m%dT%H%M%SZ")


def retune(options: RetuneOptions) -> RetuneOutcome:
    """Run the steps of the module docstring; see :class:`RetuneOutcome`."""
    running = load_config(options.config)
    target = running.late_slo_pct if options.target_late_pct is None else options.target_late_pct
    history = read_history(
        options.tables,
        options.end_ms - options.history_ms,
        options.end_ms,
        options.recent_fraction,
        # a recent part replayed whole (not sampled in blocks) gets its warm-up
        warm_up_to=options.max_rows if options.max_rows is not None else 2**62,
    )
    n = int(history["ingested"][0])
    outcome = RetuneOutcome("kept", "", running.version, running.version, n, target)
    if n < options.min_events:
        outcome.decision = "skipped"
        outcome.reason = (
            f"only {n:,} events were ingested in the {options.history_ms / 3_600_000:g} h before "
            f"{_stamp(options.end_ms)}; at least {options.min_events:,} are needed to tune"
        )
        return _keep_report(outcome, options, None)
    te, tp, part = history["te"], history["tp"], history["partition"]
    recent = int(history["recent"][0])
    current_result = score(running, te, tp, part, options, recent)
    current = current_result.choice
    outcome.running = current.as_dict()
    if current_result.evaluation is not None:
        outcome.running_evaluation = current_result.evaluation.as_dict()
    try:
        result = tune(
            te,
            tp,
            target_late_pct=target,
            window=running.window,
            strategies=list(options.strategies) if options.strategies else None,
            partition=part,
            # The arrival history keeps no keys: windows are measured per partition. In the scoped mode a
            # partition's keys fire together by its watermark, so its late share is exact and its latency
            # is measured over (partition, window) pairs instead of (key, window) pairs. In the keyed mode
            # the job writes each record's key as its partition: the history is then keyed and exact.
            key=part,
            straggler_ms=running.straggler_ms,
            idle_timeout_ms=cast("int | None", running.idle_timeout_ms),  # or "auto" (as above)
            recent_fraction=1.0,
            recent_rows=recent,
            partition_modes=tuned_modes(running.partition_mode),
            subperiods=options.subperiods,
            evaluation_fraction=options.evaluation_fraction,
            max_rows=options.max_rows,
            workers=options.workers or len(os.sched_getaffinity(0)),
        )
    except TuneError as exc:
        outcome.reason = f"no setting meets the target: {exc}"
        return _keep_report(outcome, options, None)
    chosen = result.choice
    outcome.replays = result.replays
    reports: tuple[PeriodReport | None, PeriodReport | None] = (result.tuning, result.evaluation)
    outcome.frontier = [c.as_dict() for c in result.frontier]
    if (chosen.partition_mode or "min") != running.partition_mode:
        # The job refuses a new partition mode (watermark.config.shape_change): the choice is published only
        # within the running mode; the other mode's figures stay in the report for a new deployment.
        outcome.other_mode = chosen.as_dict()
        if running.partition_mode not in result.within_mode:
            outcome.reason = (
                f"only partition mode {chosen.partition_mode} meets the target ({chosen.strategy} "
                f"{chosen.params}); the job's mode ({running.partition_mode}) cannot change under it: start "
                "a new output and checkpoint with that mode"
            )
            _report_periods(outcome, *reports)
            return _keep_report(outcome, options, result)
        chosen, *within = result.within_mode[running.partition_mode]
        reports = (within[0], within[1])
    _report_periods(outcome, *reports)
    outcome.chosen = chosen.as_dict()
    candidate = _candidate_config(options, running, chosen, n, target)
    same = (candidate.strategy, dict(candidate.params), candidate.partition_mode) == (
        running.strategy,
        dict(running.params),
        running.partition_mode,
    )
    running_meets = current.dropped_pct <= target
    faster = chosen.mean_latency_ms < current.mean_latency_ms * (1.0 - options.min_gain)
    if same:
        outcome.reason = "the running setting is already the best one on this history"
    elif running_meets and not faster:
        outcome.reason = (
            f"not better: {chosen.strategy} {chosen.params} has mean emit latency "
            f"{chosen.mean_latency_ms:.0f} ms against the running {current.mean_latency_ms:.0f} ms "
            f"(publishing needs {options.min_gain:.0%} less)"
        )
    else:
        _publish(options, running, candidate)
        outcome.decision = "published"
        outcome.config_version = candidate.version
        why = (
            f"the running setting misses the target ({current.dropped_pct} % late)"
            if not running_meets
            else f"mean emit latency {current.mean_latency_ms:.0f} -> {chosen.mean_latency_ms:.0f} ms"
        )
        outcome.reason = f"published version {candidate.version}: {chosen.strategy} {chosen.params}; {why}"
    if outcome.other_mode is not None:
        other = outcome.other_mode
        outcome.reason += (
            f" (partition mode {other['partition_mode']} would give mean emit latency "
            f"{other['emit_latency_ms'].get('mean', float('nan')):.0f} ms; the mode cannot change under a "
            "running job: a new output and checkpoint can use it)"
        )
    return _keep_report(outcome, options, result)


def _report_periods(outcome: RetuneOutcome, tuning: PeriodReport | None, held: PeriodReport | None) -> None:
    outcome.tuning = None if tuning is None else tuning.as_dict()
    outcome.evaluation = None if held is None else held.as_dict()


def _candidate_config(
    options: RetuneOptions, running: PipelineConfig, chosen: Candidate, events: int, target: float
) -> PipelineConfig:
    """The chosen setting as the next configuration version (validated like any document)."""
    note = (
        f"tuned on {events:,} events ingested before {_stamp(options.end_ms)}: "
        f"{chosen.dropped_pct} % late (target {target} %), mean emit latency {chosen.mean_latency_ms:.0f} ms"
    )
    try:
        return running.with_version(
            running.version + 1,
            strategy=chosen.strategy,
            params=chosen.params,
            note=note,
            partition_mode=chosen.partition_mode or running.partition_mode,
        )
    except ConfigError as exc:  # the tuner's settings are validated already; this guards the document
        msg = f"the tuned configuration is invalid, not publishing: {exc}"
        raise RetuneError(msg) from None


def _publish(options: RetuneOptions, running: PipelineConfig, new: PipelineConfig) -> None:
    """Write ``new`` unless the file moved past ``running`` meanwhile (compare and swap on the version)."""
    now = load_config(options.config)
    if now.version != running.version:
        msg = (
            f"{options.config} changed while tuning (version {running.version} -> {now.version}); not "
            "publishing over it: the next run tunes against the new version"
        )
        raise RetuneError(msg)
    write_config(options.config, new)


def _keep_report(outcome: RetuneOutcome, options: RetuneOptions, result: TuneResult | None) -> RetuneOutcome:
    folder = Location.of(options.reports)
    base = f"retune-{_stamp(options.end_ms)}"
    if result is not None:
        outcome.plot = (folder / f"{base}.png").spark
        plot(result, outcome.plot)
    outcome.report = (folder / f"{base}.json").spark
    write_text_atomically(outcome.report, json.dumps(outcome.as_dict(), indent=2) + "\n")
    return outcome


def main(argv: list[str] | None = None) -> int:
    """``python -m jobs.batch.retune``: prints the outcome as JSON."""
    from watermark.cli.log import run_main

    return run_main(
        build_parser(), _run, argv, errors={(ConfigError, ValueError, FileNotFoundError, RetuneError): 2}
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m jobs.batch.retune`` argument parser."""
    from watermark.cli.log import entry_prog, plain_text
    from watermark.cli.main import OneLineParser

    p = OneLineParser(
        prog=entry_prog("python -m jobs.batch.retune"), description=plain_text(__doc__.split("\n", 1)[0])
    )
    p.add_argument("--tables", required=True, help="the streaming job's --output")
    p.add_argument("--config", required=True, help="the job's configuration file (updated when published)")
    p.add_argument("--reports", required=True, help="folder for the report and plot")
    p.add_argument("--end", required=True, help="end of the history (epoch ms or ISO-8601; UTC)")
    p.add_argument("--history-hours", type=float, default=24.0, help="history length (default 24)")
    p.add_argument("--target-late-pct", type=float, help="default: the configuration's late_slo_pct")
    p.add_argument("--strategies", help="comma-separated strategies to search (default: all)")
    p.add_argument("--min-events", type=int, default=1_000, help="skip with less history (default 1000)")
    return p


def _run(args: argparse.Namespace) -> int:
    from watermark.streams.timeparse import instant_ms

    options = RetuneOptions(
        tables=storage.checked(args.tables, "--tables"),
        config=storage.checked(args.config, "--config"),
        reports=storage.checked(args.reports, "--reports"),
        end_ms=instant_ms(args.end),
        history_ms=int(args.history_hours * 3_600_000),
        target_late_pct=args.target_late_pct,
        strategies=tuple(s for s in args.strategies.split(",") if s) if args.strategies else None,
        min_events=args.min_events,
    )
    print(json.dumps(retune(options).as_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
