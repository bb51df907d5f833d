"""The tuner: the strategy and parameters with the lowest mean emit latency at a late-rate target.

It replays a recorded history through a search space of strategies and parameters (:data:`SEARCH_SPACE`),
keeps the runs whose late share (``dropped_pct``) is at most the target, and chooses the one with the lowest
mean emit latency (ties: fewer late tuples, then the earlier candidate) that also keeps the target on each
half of the history by arrival: a setting whose late share drifts within the history is passed over for the
next fastest (of the :data:`STABILITY_CHECKS` fastest; if none is stable, the fastest is kept). The
trade-off frontier (late % against mean emit latency, Pareto-optimal runs) comes with the choice, so a report
can show what a tighter or looser target would cost. The chosen ``params`` work as ``--set name=value`` for
``replay`` and the job.

Only the most recent part of the history counts (``recent_fraction``, by arrival; default the latest half):
disorder drifts, and the recent past predicts the next period better than the distant one.

With partitions, every candidate is measured in each partition mode (the minimum over partitions, one global
generator, partition-scoped firing when keys live in one partition), so the choice is never worse on the
history than one global generator. ``slo`` settings without a target are tried at :data:`SLO_SHARES` of the
tuner's target. On the bundled IoT streams, tuned on a first half and replayed on the second under the unified
latency measure, the choice (partition-scoped ``ingestion``) has 0.63 (d1) and 0.80 (d2) of the mean emit
latency of the best global timer-driven periodic setting chosen with hindsight
(``benchmarks/tuner_quality.py``, ``docs/performance.md``).

Examples
--------
>>> import numpy as np
>>> from watermark.evaluate import WindowSpec
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
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from watermark import storage
from watermark.combine import factorize
from watermark.compare import chosen_strategies, run_grid
from watermark.evaluate import DEFAULT_STRAGGLER_MS, replay
from watermark.progress import offset_progress
from watermark.windowspec import WindowSpec

#: Parameters searched per strategy (fixed delays from 0 to 5 s, the data-driven strategies' knobs).
SEARCH_SPACE: dict[str, list[dict[str, Any]]] = {
    "slo": [{"sample_size": 2_000}]
    + [{"sample_size": 10_000, "horizon_ms": h} for h in (None, 20_000, 60_000)]
    # the rule without the straggler cap and the guard after a rise, in case the stream's tail is no straggler
    + [{"sample_size": 10_000, "straggler_factor": 1e9, "surge_factor": 0.0}],
    "periodic": [{"delay_ms": d, "period_ms": p} for p in (10, 50, 200) for d in range(0, 5_001, 10)],
    "ingestion": [{"max_event_time_lag_ms": lag} for lag in range(0, 5_001, 50)],
    "band": [
        {"band_ms": b} for b in (10, 20, 50, 100, 150, 200, 300, 400, 500, 700, 1_000, 1_500, 2_000, 5_000)
    ],
    "percentile": [
        {"percentile": q, "horizon_ms": h, "period_ms": 10}
        for q in (0.0, 0.5, 1.0, 2.0, 5.0)
        for h in (200, 500, 1_000, 2_000, 5_000)
    ],
    "sliding": [{"initial_delay_ms": d, "change_rate": c} for d in (100, 250, 350, 500) for c in (0.01, 0.1)],
    "adaptive": [
        {"late_threshold": lt, "heartbeat_ms": hb} for lt in (1.0, 0.1, 0.01) for hb in (100, 200, 1_000)
    ],
}


#: Candidates (fastest first) checked for meeting the target on each half of the history; the first that
#: does is chosen (none does: the fastest one meeting it overall).
STABILITY_CHECKS = 60

#: Targets tried for the ``slo`` strategy, as fractions of the tuner's target (settings of ``slo`` in a
#: search space that leave out ``late_slo_pct`` get one candidate per fraction).
SLO_SHARES = (0.5, 0.7, 0.85, 1.0)


class TuneError(ValueError):
    """No candidate meets the target, or the input cannot be tuned."""


@dataclass(frozen=True)
class Candidate:
    """One replayed setting."""

    strategy: str
    params: dict[str, Any]
    dropped_pct: float
    emit_latency_ms: dict[str, float | None]  # mean, p50, p95, p99 of windows fired before the end of input
    windows_fired: int
    partition_mode: str | None = None  # how partitions make the watermark (None: no partitions)

    @property
    def mean_latency_ms(self) -> float:
        """Mean emit latency (infinite when no window fired before the end of input)."""
        mean = self.emit_latency_ms.get("mean")
        return float("inf") if mean is None else float(mean)

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "strategy": self.strategy,
            "params": self.params,
            "dropped_pct": self.dropped_pct,
            "emit_latency_ms": self.emit_latency_ms,
            "windows_fired": self.windows_fired,
            "partition_mode": self.partition_mode,
        }


@dataclass(frozen=True)
class TuneResult:
    """The choice, every candidate, and the frontier."""

    target_late_pct: float
    window: WindowSpec
    choice: Candidate
    candidates: list[Candidate]
    history_events: int  # events the candidates were replayed on

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
        """What ``python -m watermark tune --json`` prints."""
        return {
            "strategy": self.choice.strategy,
            "params": self.choice.params,
            "partition_mode": self.choice.partition_mode,
            "dropped_pct": self.choice.dropped_pct,
            "emit_latency_ms": self.choice.emit_latency_ms,
            "target_late_pct": self.target_late_pct,
            "window_ms": self.window.window_ms,
            "slide_ms": self.window.slide_ms,
            "candidates": len(self.candidates),
            "history_events": self.history_events,
            "frontier": [c.as_dict() for c in self.frontier],
        }


def _public(params: Mapping[str, Any]) -> dict[str, Any]:
    """Settings as ``--set`` takes them (unset optional parameters left out)."""
    return {k: v for k, v in params.items() if v is not None}


def _expand(name: str, settings: Sequence[Mapping[str, Any]], target_late_pct: float) -> list[dict[str, Any]]:
    """``slo`` settings without a target get one per :data:`SLO_SHARES` fraction of the tuner's target."""
    out: list[dict[str, Any]] = []
    for params in settings:
        if name != "slo" or "late_slo_pct" in params:
            out.append(dict(params))
        elif target_late_pct > 0:
            out += [dict(params) | {"late_slo_pct": round(target_late_pct * f, 4)} for f in SLO_SHARES]
    return out


def _keys_in_one_partition(partition: ArrayLike, key: ArrayLike) -> bool:
    """True if every key value occurs in a single partition (keyed partitioning)."""
    _, parts = factorize(np.asarray(partition))
    _, keys = factorize(np.asarray(key))
    pairs = np.unique(np.stack([keys.astype(np.int64), parts.astype(np.int64)]), axis=1)
    return bool(np.unique(pairs[0]).size == pairs.shape[1])


def recent_rows(tp: ArrayLike, fraction: float) -> np.ndarray:
    """Indices of the latest ``fraction`` of rows by arrival, in input order (ties keep input order).

    >>> recent_rows([5, 1, 4, 2], 0.5).tolist()
    [0, 2]

    """
    tp_a = np.asarray(tp)
    keep = np.argsort(tp_a, kind="stable")[tp_a.size - max(1, int(np.ceil(tp_a.size * fraction))) :]
    keep.sort()
    return keep


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
    progress: Callable[[str], None] | None = None,
    partition_modes: Sequence[str] | None = None,
) -> TuneResult:
    """Replay every candidate of ``space`` (default :data:`SEARCH_SPACE`) and choose as the module says.

    With ``partition``, every candidate is replayed in each of ``partition_modes`` (default: ``min`` and
    ``global``, and ``scoped`` when a ``key`` is given and every key lives in one partition; see
    :func:`~watermark.evaluate.replay`), so a combination is chosen only where it measures better than one
    generator for the whole stream.
    """
    if not 0.0 <= target_late_pct <= 100.0:
        msg = f"target_late_pct must be within [0, 100], got {target_late_pct}"
        raise TuneError(msg)
    if not 0.0 < recent_fraction <= 1.0:
        msg = f"recent_fraction must be within (0, 1], got {recent_fraction}"
        raise TuneError(msg)
    space = SEARCH_SPACE if space is None else space
    try:
        names = chosen_strategies(space, strategies, "search space")
    except ValueError as exc:
        raise TuneError(str(exc)) from None
    te_a, tp_a = np.asarray(te), np.asarray(tp)
    if te_a.size == 0 or te_a.size != tp_a.size:
        msg = f"the history is empty or its columns differ in length ({te_a.size} and {tp_a.size})"
        raise TuneError(msg)
    if recent_fraction < 1.0:
        keep = recent_rows(tp_a, recent_fraction)
        te_a, tp_a = te_a[keep], tp_a[keep]
        partition = None if partition is None else np.asarray(partition)[keep]
        key = None if key is None else np.asarray(key)[keep]
    grid = {name: _expand(name, space[name], target_late_pct) for name in names}
    if partition is None:
        modes: list[str | None] = [None]
    elif partition_modes is not None:
        modes = list(partition_modes)
    else:
        modes = ["min", "global"]
        if key is not None and _keys_in_one_partition(partition, key):
            modes.append("scoped")
    rows = []
    per_mode = sum(len(grid[name]) for name in names)
    for index, mode in enumerate(modes):
        rows += run_grid(
            te_a,
            tp_a,
            windows=[window],
            grid=grid,
            strategies=names,
            partition=partition,
            key=key,
            straggler_ms=straggler_ms,
            idle_timeout_ms=idle_timeout_ms,
            progress=offset_progress(progress, index * per_mode, len(modes) * per_mode),
            partition_mode=mode or "min",
        )
    candidates = [
        Candidate(
            r["strategy"],
            _public(r["grid_params"]),
            r["dropped_pct"],
            r["emit_latency_ms"],
            r["windows_fired"],
            r.get("partition_mode"),
        )
        for r in rows
    ]
    choice = stable_choice(
        candidates, target_late_pct, te_a, tp_a, window, partition, key, straggler_ms, idle_timeout_ms
    )
    if choice is None:
        lowest = min(candidates, key=lambda c: c.dropped_pct)
        msg = (
            f"no setting keeps late tuples at or below {target_late_pct} % with windows firing; the lowest "
            f"is {lowest.dropped_pct} % ({lowest.strategy} {lowest.params})"
        )
        raise TuneError(msg)
    return TuneResult(target_late_pct, window, choice, candidates, int(te_a.size))


def stable_choice(
    candidates: Sequence[Candidate],
    target_late_pct: float,
    te: np.ndarray,
    tp: np.ndarray,
    window: WindowSpec,
    partition: ArrayLike | None = None,
    key: ArrayLike | None = None,
    straggler_ms: int = DEFAULT_STRAGGLER_MS,
    idle_timeout_ms: int | None = None,
) -> Candidate | None:
    """The fastest of ``candidates`` (replayed on ``te``/``tp``) that meets the target, None when none does.

    Of the :data:`STABILITY_CHECKS` fastest that meet it over the whole history, the first that also meets
    it on each half of the history is preferred (else the fastest).
    """
    meeting = [c for c in candidates if c.dropped_pct <= target_late_pct and c.windows_fired]
    if not meeting:
        return None
    ranked = sorted(meeting, key=lambda c: (c.mean_latency_ms, c.dropped_pct))  # stable: first of ties
    return next(
        (
            c
            for c in ranked[:STABILITY_CHECKS]
            if _worst_half_late_pct(c, te, tp, window, partition, key, straggler_ms, idle_timeout_ms)
            <= target_late_pct
        ),
        ranked[0],
    )


def _worst_half_late_pct(
    c: Candidate,
    te: np.ndarray,
    tp: np.ndarray,
    window: WindowSpec,
    partition: ArrayLike | None,
    key: ArrayLike | None,
    straggler_ms: int,
    idle_timeout_ms: int | None,
) -> float:
    """The larger late share of the history's two halves (by arrival) under candidate ``c``."""
    r = replay(te, tp, strategy=c.strategy, params=c.params, window=window, partition=partition, key=key,
               straggler_ms=straggler_ms, idle_timeout_ms=idle_timeout_ms,
               partition_mode=c.partition_mode or "min")  # fmt: skip
    late = r.late
    half = late.size // 2
    if half == 0:
        return 100.0 * float(late.mean()) if late.size else 0.0
    return 100.0 * max(float(late[:half].mean()), float(late[half:].mean()))


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
