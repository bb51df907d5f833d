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
from watermark.strategies.registry import STRATEGIES, comparison_grid, make
from watermark.windowspec import WindowSpec


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
    grid = comparison_grid() if grid is None else grid
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
