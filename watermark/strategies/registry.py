"""Strategy names, construction from ``name=value`` settings, and rebuilding from snapshots."""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
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

#: Every strategy by name, in the order listings show them. A strategy declares on its class what the rest
#: of the library needs of it (:class:`watermark.base.WatermarkGenerator`: its parameters and their types,
#: the tuner's search space and monotone parameter, ``awm compare``'s default grid, the contract tests'
#: parameters); :func:`register` adds one, and every listing below is derived from this registry.
STRATEGIES: dict[str, type[WatermarkGenerator]] = {
    cls.name: cls
    for cls in (Periodic, Adaptive, Sliding, Percentile, Band, Ingestion, LateRateSLO, FleetWatermark)
}


def register(cls: type[WatermarkGenerator]) -> type[WatermarkGenerator]:
    """Add a strategy to :data:`STRATEGIES` under its ``name`` (usable as a class decorator).

    Raises
    ------
    ValueError
        If the name is taken by another class, or a declared setting is not one the class accepts.

    """
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        msg = f"{cls.__name__} has no name to register under"
        raise ValueError(msg)
    if STRATEGIES.get(name, cls) is not cls:
        msg = f"strategy name {name!r} is taken by {STRATEGIES[name].__name__}"
        raise ValueError(msg)
    declared = [*cls.search_space, *cls.comparison_grid]
    unknown = sorted({k for params in declared for k in params} - set(cls.param_types))
    if cls.monotone_param is not None and cls.monotone_param not in cls.param_types:
        unknown.append(cls.monotone_param)
    if unknown:
        msg = f"{name}: declared settings name unknown parameter(s) {', '.join(unknown)}"
        raise ValueError(msg)
    STRATEGIES[name] = cls
    return cls


def targeted(name: str) -> bool:
    """Whether the strategy takes the late-share target as a parameter (``late_slo_pct``)."""
    return "late_slo_pct" in strategy_class(name).param_types


def search_space() -> dict[str, list[dict[str, Any]]]:
    """The tuner's settings per strategy (each class's ``search_space``)."""
    return {name: [dict(p) for p in cls.search_space] for name, cls in STRATEGIES.items() if cls.search_space}


def monotone_params() -> dict[str, str]:
    """The parameter the tuner binary-searches, per strategy that has one (``monotone_param``)."""
    return {name: cls.monotone_param for name, cls in STRATEGIES.items() if cls.monotone_param is not None}


def comparison_grid() -> dict[str, list[dict[str, Any]]]:
    """``awm compare``'s default grid: each class's ``comparison_grid``, for the strategies that have one."""
    return {
        name: [dict(p) for p in cls.comparison_grid]
        for name, cls in STRATEGIES.items()
        if cls.comparison_grid
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


@dataclass(frozen=True)
class StrategySpec:
    """A strategy's name and its settings, checked and typed once.

    What a configuration hands to the code that builds generators (one a partition): no ``name=value``
    text is parsed again.

    Examples
    --------
    >>> from watermark.strategies.registry import StrategySpec
    >>> spec = StrategySpec.of("periodic", {"delay_ms": "250"})
    >>> spec.settings
    (('delay_ms', 250),)
    >>> spec.build()
    Periodic(delay_ms=250, period_ms=200)
    >>> spec == StrategySpec.of("periodic", {"delay_ms": 250})
    True

    """

    name: str
    #: The given settings, converted to the parameters' types, sorted by name.
    settings: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, name: str, params: Mapping[str, Any] | None = None) -> StrategySpec:
        """The spec of ``name`` with ``params`` (strings converted), or the strategy's ``ValueError``."""
        make(name, params)  # the strategy's own checks and messages
        strategy = strategy_class(name)
        typed = {k: _convert(strategy, k, v) for k, v in (params or {}).items()}
        return cls(name, tuple(sorted(typed.items())))

    @property
    def params(self) -> dict[str, Any]:
        """The settings as a mapping (a copy)."""
        return dict(self.settings)

    def build(self) -> WatermarkGenerator:
        """A new generator of this strategy and these settings."""
        return strategy_class(self.name)(**self.params)


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
