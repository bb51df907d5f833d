"""The configuration and state every mode of the partition combination shares.

:class:`CombinationState` holds what :class:`~watermark.partitions.combine.PartitionedWatermark` is built
from (strategy, parameters, mode, idle timeout, windows) and the per-partition state (generators, last
arrivals, learned timeouts, eviction floor): which partitions are active, the generator a partition starts
with, and the partition holding the global watermark back (:meth:`CombinationState._settle`). The modes'
paths are in :mod:`~watermark.partitions.minimum`, :mod:`~watermark.partitions.scoped` and
:mod:`~watermark.partitions.scoped_idle`, forgetting partitions in :mod:`~watermark.partitions.eviction`.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any, cast

from watermark.base import SharedState, WatermarkGenerator, WatermarkReadout, check_int
from watermark.partitions.idle import IdleLearning
from watermark.strategies.registry import StrategySpec, strategy_class
from watermark.timeutil import NO_WATERMARK
from watermark.windowspec import WindowSpec

#: ``idle_timeout_ms`` of a timeout learned per partition from its own gaps
#: (:mod:`watermark.partitions.idle`).
AUTO = "auto"

#: How :class:`PartitionedWatermark` makes the global watermark.
COMBINATION_MODES = ("min", "global", "scoped", "keyed")
#: The modes where each partition fires its own windows (``"keyed"``: the caller's partitions are keys).
SCOPED_MODES = ("scoped", "keyed")


class CombinationState(WatermarkReadout):
    """The configuration and per-partition state of a combination (see ``PartitionedWatermark``)."""

    def __init__(
        self,
        strategy: str,
        params: Mapping[str, Any] | None = None,
        *,
        idle_timeout_ms: int | str | IdleLearning | None = None,
        mode: str = "min",
        window: WindowSpec | None = None,
    ) -> None:
        #: The strategy and its settings, checked and typed once (each partition's generator is built so).
        self.spec = StrategySpec.of(strategy, params)
        self.strategy = strategy
        self.params = dict(params or {})
        if mode not in COMBINATION_MODES:
            msg = f"mode must be one of {', '.join(COMBINATION_MODES)}, got {mode!r}"
            raise ValueError(msg)
        self.mode = mode
        #: The windows fired by the partitions' watermarks: an idle partition in scoped mode is raised no
        #: higher than the end of the last window holding its largest event time (``None``: no such cap, it
        #: follows the fleet; see *Notes*).
        self.window = window
        #: The configured timeout: milliseconds, ``"auto"`` (learned per partition) or ``None``.
        self.idle_timeout_ms: int | str | None
        #: Learned timeouts (``"auto"``, scoped mode only); else ``None``.
        self._learning: IdleLearning | None = None
        auto = isinstance(idle_timeout_ms, str) and idle_timeout_ms.strip().lower() == AUTO
        #: The fixed timeout (``None``: none, or learned).
        self._timeout: int | None
        if auto or isinstance(idle_timeout_ms, IdleLearning):
            learning = idle_timeout_ms if isinstance(idle_timeout_ms, IdleLearning) else IdleLearning()
            self.idle_timeout_ms = AUTO
            if mode in SCOPED_MODES:
                self._learning, self._timeout = learning, None
            else:  # learning per partition is the scoped mode's: elsewhere the cap, fixed
                self._timeout = learning.cap_ms
        else:
            self.idle_timeout_ms = (
                None if idle_timeout_ms is None else check_int("idle_timeout_ms", idle_timeout_ms, 1)
            )
            self._timeout = self.idle_timeout_ms
        #: Learned timeouts: each partition's gap histogram (:mod:`watermark.partitions.idle`) and the timeout
        #: it gives.
        self._gap_hist: dict[Hashable, list[int]] = {}
        self._learned: dict[Hashable, int] = {}
        #: In ``global`` mode, the one generator every partition feeds.
        self._shared: WatermarkGenerator | None = self.spec.build() if mode == "global" else None
        #: State the partitions' generators share
        #: (:meth:`~watermark.strategies.fleet.FleetWatermark.shared_state`:
        #: the fleet's lag models and late budget), built once; ``None`` for the other strategies.
        self._shared_state: SharedState | None = None
        factory = getattr(strategy_class(strategy), "shared_state", None)
        if factory is not None and mode != "global":
            self._shared_state = factory(self.spec.build().params)
        self._gens: dict[Hashable, WatermarkGenerator] = {}
        self._last_tp: dict[Hashable, int] = {}
        self._reset_readout()
        self._holdback: Hashable | None = None
        #: Scoped mode: the highest watermark a forgotten partition had (:meth:`evict`).
        self._evicted_floor = NO_WATERMARK
        #: Scoped mode: key -> (its owner partition, the floor its rows are judged against at least).
        self._key_floors: dict[str, tuple[Hashable, int]] = {}

    # -- read-only state (watermark_ms, watermark_at_arrival_ms, clock_ms, n_seen, n_late: inherited)
    @property
    def holdback_partition(self) -> Hashable | None:
        """The active partition whose watermark is the minimum (the one holding the global value back)."""
        return self._holdback

    @property
    def partition_watermarks(self) -> dict[Hashable, int]:
        """Each partition's own watermark."""
        return {p: g.watermark_ms for p, g in self._gens.items()}

    @property
    def generators(self) -> Mapping[Hashable, WatermarkGenerator]:
        """The per-partition generators (read them; do not feed them directly)."""
        return dict(self._gens)

    @property
    def last_arrival_ms(self) -> dict[Hashable, int]:
        """Ingestion time of each partition's latest arrival."""
        return dict(self._last_tp)

    def active_partitions(self, now_ms: int | None = None) -> list[Hashable]:
        """Partitions that arrived within ``idle_timeout_ms`` before ``now_ms`` (default: the clock)."""
        now = self._clock if now_ms is None else int(now_ms)
        if now is None:
            return []
        return [p for p, last in self._last_tp.items() if self._is_active(now, last, p)]

    def _is_active(self, now: int, last: int, key: Hashable = None) -> bool:
        timeout = self._timeout_of(key)
        return timeout is None or now - last < timeout

    def _timeout_of(self, key: Hashable) -> int | None:
        """The idle timeout of partition ``key`` now (fixed, or learned from its gaps so far)."""
        if self._learning is None:
            return self._timeout
        return self._learned.get(key, self._learning.cap_ms)

    @property
    def idle_timeouts_ms(self) -> dict[Hashable, int | None]:
        """Each partition's idle timeout now (learned ones with ``idle_timeout_ms="auto"``)."""
        return {p: self._timeout_of(p) for p in self._gens}

    def _generator(self, key: Hashable) -> WatermarkGenerator:
        gen = self._gens.get(key)
        if gen is None:
            gen = self._gens[key] = self._shared or self.new_generator()
            self._join(key, gen)
        return gen

    def _join(self, key: Hashable, gen: WatermarkGenerator) -> None:
        """Hand the shared state to a partition's generator (strategies that share one, such as fleet)."""
        if self._shared_state is not None:
            cast(Any, gen).join(self._shared_state, key)

    def new_generator(self) -> WatermarkGenerator:
        """The generator a partition new to the combination starts with (scoped: at the eviction floor)."""
        gen = self.spec.build()
        if self.mode in SCOPED_MODES and self._evicted_floor != NO_WATERMARK:
            gen.hold_floor(self._evicted_floor)
        return gen

    def _idle_scoped(self) -> bool:
        return self.mode in SCOPED_MODES and (self._timeout is not None or self._learning is not None)

    def _settle_scoped(self) -> None:
        """Scoped mode: report the minimum over the partitions (with idleness, the active ones)."""
        clock = self._clock
        if self._idle_scoped() and clock is not None:
            self._settle([p for p, last in self._last_tp.items() if self._is_active(clock, last, p)])
        else:
            self._settle(list(self._gens))

    def _settle(self, active: list[Hashable]) -> None:
        members = set(active)
        ordered = [p for p in self._gens if p in members]  # ties go to the oldest partition, as in process()
        if not ordered:
            self._holdback = None
            return
        self._holdback = min(ordered, key=lambda p: self._gens[p].watermark_ms)
        self._wm = max(self._wm, self._gens[self._holdback].watermark_ms)

    def _generator_template(self) -> WatermarkGenerator:
        """A fresh generator of the combination's strategy and parameters."""
        return self.spec.build()
