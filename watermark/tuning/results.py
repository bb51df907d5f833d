"""The tuner's results: the choice per period beside the best fixed delay, the frontier, and a plot."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from watermark import storage
from watermark.tuning.rule import Candidate, margin_over
from watermark.windowspec import WindowSpec


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
