"""The tuner's search space: the settings per strategy, the partition modes, and the replays planned."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from watermark.partitions.arrays import factorize, one_partition_per_key
from watermark.strategies.registry import monotone_params, targeted

#: Targets tried for the ``slo`` and ``fleet`` strategies, as fractions of the tuner's target (their settings
#: in a search space that leave out ``late_slo_pct`` get one candidate per fraction).
SLO_SHARES = (0.5, 0.7, 0.85, 1.0)


def public_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """Settings as ``--set`` takes them (unset optional parameters left out)."""
    return {k: v for k, v in params.items() if v is not None}


def expand_settings(
    name: str, settings: Sequence[Mapping[str, Any]], target_late_pct: float
) -> list[dict[str, Any]]:
    """Settings of a strategy taking ``late_slo_pct`` without it get one per :data:`SLO_SHARES` fraction."""
    out: list[dict[str, Any]] = []
    for params in settings:
        if not targeted(name) or "late_slo_pct" in params:
            out.append(dict(params))
        elif target_late_pct > 0:
            out += [dict(params) | {"late_slo_pct": round(target_late_pct * f, 4)} for f in SLO_SHARES]
    return out


def keys_in_one_partition(partition: ArrayLike, key: ArrayLike) -> bool:
    """True if every key value occurs in a single partition (keyed partitioning)."""
    _, parts = factorize(np.asarray(partition))
    _, keys = factorize(np.asarray(key))
    return one_partition_per_key(keys, parts)


def partition_modes_for(
    partition: NDArray[np.intp] | None, key: NDArray[np.intp] | None, partition_modes: Sequence[str] | None
) -> list[str | None]:
    """The partition modes each candidate is replayed in (codes of the rows' partition and key).

    None without partitions; else ``partition_modes`` when given, else ``min`` and ``global``, ``scoped``
    when a key is given and every key lives in one partition, and ``keyed`` when keys share partitions.
    """
    if partition is None:
        return [None]
    if partition_modes is not None:
        return list(partition_modes)
    modes: list[str | None] = ["min", "global"]
    if key is not None and keys_in_one_partition(partition, key):
        modes.append("scoped")
    if key is not None and int(key.max(initial=-1)) > int(partition.max(initial=-1)):
        modes.append("keyed")  # keys share partitions: each key firing by its own watermark differs
    return modes


def setting_groups(name: str, settings: Sequence[Mapping[str, Any]]) -> list[list[int]]:
    """Positions of ``settings`` grouped by all but the monotone parameter, each group in increasing order."""
    param = monotone_params()[name]
    groups: dict[str, list[int]] = {}
    for i, p in enumerate(settings):
        rest = repr(sorted((k, repr(v)) for k, v in p.items() if k != param))
        groups.setdefault(rest, []).append(i)
    return [sorted(idx, key=lambda i: settings[i].get(param) or 0) for idx in groups.values()]


def planned_replays(grid: Mapping[str, Sequence[Mapping[str, Any]]], exhaustive: bool) -> int:
    """Replays expected per partition mode (for the progress count)."""
    monotone = monotone_params()
    total = 0
    for name, settings in grid.items():
        if exhaustive or name not in monotone:
            total += len(settings)
        else:
            total += sum(3 * int(np.ceil(np.log2(len(g) + 1))) for g in setting_groups(name, settings))
    return total
