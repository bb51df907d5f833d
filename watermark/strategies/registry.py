"""Strategy names, construction from ``name=value`` settings, and rebuilding from snapshots."""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping
from typing import Any

from watermark.base import WatermarkGenerator
from watermark.strategies.adaptive import Adaptive
from watermark.strategies.band import Band
from watermark.strategies.fleet import FleetWatermark
from watermark.strategies.ingestion import Ingestion
from watermark.strategies.percentile import Percentile
from watermark.strategies.periodic import Periodic
from watermark.strategies.sliding import Sliding
from watermark.strategies.slo import LateRateSLO

STRATEGIES: dict[str, type[WatermarkGenerator]] = {
    cls.name: cls
    for cls in (Periodic, Adaptive, Sliding, Percentile, Band, Ingestion, LateRateSLO, FleetWatermark)
}


def strategy_class(name: str) -> type[WatermarkGenerator]:
    """The generator class registered under ``name``."""
    try:
        return STRATEGIES[name]
    except KeyError:
        msg = f"unknown strategy {name!r}; choose one of: {', '.join(STRATEGIES)}"
        raise ValueError(msg) from None


def _convert(cls: type[WatermarkGenerator], key: str, value: Any) -> Any:
    converter = cls.param_types[key]
    if not isinstance(value, str):
        return value
    text = value.strip()
    try:
        if converter is int:
            number = float(text)
            if not number.is_integer():
                raise ValueError(text)
            return int(number)
        return converter(text)
    except ValueError:
        expected = {int: "an integer", float: "a number", str: "text"}.get(converter, "an integer or none")
        msg = f"{cls.name}: {key} expects {expected}, got {value!r}"
        raise ValueError(msg) from None


def make(name: str, params: Mapping[str, Any] | None = None) -> WatermarkGenerator:
    """Build a generator; string values (from ``--set name=value``) are converted to the parameter types.

    Examples
    --------
    >>> from watermark.strategies.registry import make
    >>> make("periodic", {"delay_ms": "250", "period_ms": 10})
    Periodic(delay_ms=250, period_ms=10)

    """
    cls = strategy_class(name)
    given = dict(params or {})
    unknown = sorted(set(given) - set(cls.param_types))
    if unknown:
        msg = f"{name}: unknown parameter(s) {', '.join(unknown)}; it takes: {', '.join(cls.param_types)}"
        raise ValueError(msg)
    missing = [k for k in required_params(cls) if k not in given]
    if missing:
        msg = f"{name}: missing required parameter(s) {', '.join(missing)}"
        raise ValueError(msg)
    return cls(**{k: _convert(cls, k, v) for k, v in given.items()})


def required_params(cls: type[WatermarkGenerator]) -> list[str]:
    """Parameters of a strategy that have no default (``slo``'s ``late_slo_pct``)."""
    signature = inspect.signature(cls.__init__)
    return [
        p.name
        for p in signature.parameters.values()
        if p.name in cls.param_types and p.default is inspect.Parameter.empty
    ]


def parse_settings(items: Iterable[str]) -> dict[str, str]:
    """Parse ``name=value`` strings (the ``--set`` flags) into a dict, rejecting malformed items."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            msg = f"--set expects name=value, got {item!r}"
            raise ValueError(msg)
        out[key.strip()] = value.strip()
    return out


def restore(snapshot: Mapping[str, Any]) -> WatermarkGenerator:
    """Rebuild a generator from its ``snapshot()``; it continues identically."""
    try:
        name = snapshot["strategy"]
        version = snapshot["version"]
        params = snapshot["params"]
    except (KeyError, TypeError):
        msg = "not a watermark generator snapshot (needs strategy, version, params, common, state)"
        raise ValueError(msg) from None
    if version != 1:
        msg = f"unsupported snapshot version {version!r} (this library writes version 1)"
        raise ValueError(msg)
    gen = make(name, params)
    try:
        gen._load(snapshot)
    except (KeyError, TypeError) as exc:
        msg = f"corrupt {name} snapshot: missing or malformed {exc}"
        raise ValueError(msg) from None
    return gen
