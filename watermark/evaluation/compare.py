"""Run a grid of strategies and parameters over one stream and tabulate the replays (seed Tables 2 and 3)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from watermark import storage
from watermark.evaluation.replay import DEFAULT_STRAGGLER_MS, replay
from watermark.progress import progress_line
from watermark.strategies.registry import STRATEGIES, make
from watermark.windowspec import WindowSpec

#: The default grid: the seed papers' settings (Tables 2 and 3 of the adaptive-watermarks paper, Table 2 of
#: the sliding-window paper), delays on the scale of minutes, which streams like the taxi data need, and the
#: adaptive strategy with a heartbeat (see :class:`watermark.strategies.adaptive.Adaptive`).
DEFAULT_GRID: dict[str, list[dict[str, Any]]] = {
    "periodic": [
        {"delay_ms": 0, "period_ms": 10},
        {"delay_ms": 100, "period_ms": 10},
        {"delay_ms": 1_000, "period_ms": 200},
        {"delay_ms": 10_000, "period_ms": 200},
        {"delay_ms": 600_000, "period_ms": 200},
    ],
    "adaptive": [
        *({"sensitivity_change": dd, "late_threshold": lt} for dd in (1.0, 0.1) for lt in (1.0, 0.1, 0.01)),
        *({"late_threshold": lt, "heartbeat_ms": 200} for lt in (1.0, 0.1, 0.01)),
    ],
    "sliding": [{"change_rate": 0.01}, {"change_rate": 0.1}],
    "percentile": [
        *({"percentile": p, "horizon_ms": 1_000, "period_ms": 200} for p in (0.0, 5.0, 50.0)),
        {"percentile": 5.0, "horizon_ms": 60_000, "period_ms": 1_000},
    ],
    "band": [{"band_ms": b, "idle_ms": 120_000} for b in (100, 1_000, 10_000)],
    "ingestion": [
        {"max_event_time_lag_ms": lag, "max_watermark_lag_ms": 10_000} for lag in (100, 1_000, 600_000)
    ],
    "slo": [{"late_slo_pct": pct} for pct in (0.5, 0.1)],
}


def load_grid(path: str | os.PathLike[str]) -> dict[str, list[dict[str, Any]]]:
    """Read a grid file (path or URI): ``{"strategy": [{param: value, ...}, ...], ...}``, all checked."""
    try:
        grid = json.loads(storage.read_text(storage.Location.of(path)))
    except (OSError, ValueError) as exc:
        msg = f"cannot read grid file {path}: {exc}"
        raise ValueError(msg) from None
    if not isinstance(grid, dict) or not all(isinstance(v, list) for v in grid.values()):
        msg = f"grid file {path} must map strategy names to lists of parameter objects"
        raise ValueError(msg)
    for name, settings in grid.items():
        for params in settings:
            make(name, params)
    return grid


def chosen_strategies(
    grid: Mapping[str, Any], strategies: Sequence[str] | None, what: str = "grid"
) -> list[str]:
    """``strategies`` (default: all of ``grid``), each a known strategy with settings in ``grid``."""
    names = list(grid) if strategies is None else list(strategies)
    for name in names:
        if name not in STRATEGIES:
            msg = f"unknown strategy {name!r}; choose among: {', '.join(STRATEGIES)}"
            raise ValueError(msg)
        if name not in grid:
            msg = f"the {what} has no settings for {name!r}"
            raise ValueError(msg)
    return names


def run_grid(
    te: ArrayLike,
    tp: ArrayLike,
    *,
    windows: Sequence[WindowSpec],
    grid: Mapping[str, Iterable[Mapping[str, Any]]] | None = None,
    strategies: Sequence[str] | None = None,
    partition: ArrayLike | None = None,
    key: ArrayLike | None = None,
    straggler_ms: int = DEFAULT_STRAGGLER_MS,
    idle_timeout_ms: int | None = None,
    progress: Callable[[str], None] | None = None,
    partition_mode: str = "min",
) -> list[dict[str, Any]]:
    """Replay every (strategy, parameters, window) of the grid; one summary dict per run."""
    grid = DEFAULT_GRID if grid is None else grid
    names = chosen_strategies(grid, strategies, "grid")
    te_a, tp_a = np.asarray(te), np.asarray(tp)
    runs = [(n, dict(p), w) for n in names for p in grid[n] for w in windows]
    rows = []
    for i, (name, params, window) in enumerate(runs, 1):
        result = replay(
            te_a,
            tp_a,
            strategy=name,
            params=params,
            window=window,
            partition=partition,
            key=key,
            straggler_ms=straggler_ms,
            idle_timeout_ms=idle_timeout_ms,
            partition_mode=partition_mode,
        )
        rows.append(result.summary() | {"grid_params": params})
        if progress is not None:  # after each run: the line counts the runs done
            line = f"[{i}/{len(runs)}] {name} {params} window {window.window_ms} ms"
            progress(progress_line(line, i, len(runs)))
    return rows


def _num(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "–"
    return f"{value:,.{digits}f}"


def markdown_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The comparison as a Markdown table (one line per run)."""
    head = (
        "| strategy | parameters | window ms | dropped % | stragglers % | windows fired / all | "
        "trigger delay mean ms | emit latency mean ms | p50 | p99 | watermarks |"
    )
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        params = ", ".join(f"{k}={v}" for k, v in r["grid_params"].items())
        td, el = r["trigger_delay_ms"], r["emit_latency_ms"]
        lines.append(
            f"| {r['strategy']} | {params} | {r['window_ms']:,} | {r['dropped_pct']:.2f} | "
            f"{r['stragglers_pct']:.2f} | {r['windows_fired']:,} / {r['windows']:,} | {_num(td['mean'])} | "
            f"{_num(el['mean'])} | {_num(el['p50'])} | {_num(el['p99'])} | {r['watermarks_emitted']:,} |"
        )
    return "\n".join(lines)
