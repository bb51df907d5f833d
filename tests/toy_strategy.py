"""A ninth strategy, registered through the registry alone.

For tests/unit/watermark/strategies/test_strategy_registration.py.

``W = max event time seen - lag_ms`` (a bounded out-of-orderness without timers): the class declares all the
library needs of it, and :func:`install` registers it. Only a test's own process calls it (importing the
module, as the doctest collection does, registers nothing), so every other test's registry holds the eight
design strategies.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from watermark.base import I64, WatermarkGenerator, check_int
from watermark.strategies.registry import register
from watermark.timeutil import running_max, shift_right


class BoundedLag(WatermarkGenerator):
    """``W = max te - lag_ms`` after each arrival; time alone never moves it."""

    name = "toylag"
    param_types: ClassVar[Mapping[str, Any]] = {"lag_ms": int}
    search_space: ClassVar[Sequence[Mapping[str, Any]]] = [{"lag_ms": lag} for lag in range(0, 5_001, 50)]
    monotone_param: ClassVar[str | None] = "lag_ms"
    comparison_grid: ClassVar[Sequence[Mapping[str, Any]]] = [{"lag_ms": 100}, {"lag_ms": 1_000}]

    @classmethod
    def test_settings(cls, pick: Callable[[Sequence[Any]], Any]) -> dict[str, Any]:
        """Lags from none to 300 ms."""
        return {"lag_ms": pick(range(301))}

    def __init__(self, lag_ms: int = 500) -> None:
        self.lag_ms = check_int("lag_ms", lag_ms, 0)
        super().__init__()

    def _reset_state(self) -> None:
        pass

    def _advance(self, now: int, *, arrival: bool) -> None:
        pass

    def _observe(self, te: int, tp: int, late: bool) -> None:
        self._raise(te - self.lag_ms)

    def _run_arrivals(self, te: I64, tp: I64) -> tuple[I64, I64]:
        post = running_max(te - self.lag_ms, self._wm)
        return shift_right(post, self._wm), post

    def _state_dict(self) -> dict[str, Any]:
        return {}

    def _load_state(self, state: Mapping[str, Any]) -> None:
        pass


def install() -> None:
    """Register :class:`BoundedLag` (as ``toylag``)."""
    register(BoundedLag)
