"""The generator interface every watermark strategy implements.

A watermark ``W`` asserts that no more events with ``te < W`` will arrive. A tuple is *late* iff its event
time is below the watermark in force when it arrived. Times are int64 epoch milliseconds; ``te`` is the event
time, ``tp`` the ingestion (arrival) time. Library code never reads the wall clock: callers pass ``tp`` and,
for idleness, ``now_ms``.

The contract, identical for all strategies:

* ``update(te_ms, tp_ms)`` handles one arrival in three steps: the ingestion clock advances to ``tp`` (a
  time-driven strategy may raise ``W`` here, e.g. a periodic emission), the tuple is judged against the
  watermark then in force (``watermark_at_arrival_ms``), and the tuple is observed (a data-driven strategy
  may raise ``W`` here; the new value holds from the next arrival on).
* ``on_idle(now_ms)`` advances time without data. It is *path independent*: calling it at any set of
  instants between two arrivals never changes what the following arrivals see, so a replay is deterministic
  whatever the caller's polling schedule.
* ``process(te, tp)`` is the vectorised form of the ``update`` loop and returns the watermark in force at each
  arrival; ``process_trace`` also returns the watermark right after each arrival. Both continue from, and
  leave behind, exactly the state the ``update`` loop would.
* The watermark is monotonic: a lower proposal is ignored. ``snapshot()`` returns JSON-serialisable state;
  :func:`watermark.strategies.registry.restore` rebuilds a generator that continues identically.
* The ingestion clock never runs backwards: an arrival whose ``tp`` is below the latest ``tp`` seen is treated
  as arriving at the clock (replays sort by arrival time first, so this only matters for raw callers).
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, Self

import numpy as np
from numpy.typing import ArrayLike, NDArray

from watermark.timeline import NO_RISE, Component, Timeline
from watermark.timeutil import NO_WATERMARK, as_ms_array

I64 = NDArray[np.int64]
Idx = NDArray[np.intp]


class SharedState(Protocol):
    """State the generators of one combination share (a strategy whose class has ``shared_state``).

    A :class:`~watermark.partitions.combine.PartitionedWatermark` builds it once from the strategy's
    settings, hands it to each partition's generator (``generator.join(state, partition)``), runs each batch
    of every partition through it first (:meth:`prepare`), drops an evicted partition (:meth:`forget`) and
    keeps it in its snapshot. ``fleet``'s (:class:`~watermark.strategies.fleet.SharedFleet`) is one.
    """

    def prepare(
        self,
        keys: list[Hashable],
        codes: NDArray[np.int64],
        te: NDArray[np.int64],
        tp: NDArray[np.int64],
        clocks: Mapping[Hashable, int | None],
    ) -> None:
        """Run a whole batch of every partition in arrival order, for the generators to read."""

    def forget(self, key: Hashable) -> None:
        """Drop a partition (it was evicted)."""

    def snapshot(self) -> dict[str, Any]:
        """JSON-serialisable state."""

    def load(self, snap: Mapping[str, Any]) -> None:
        """Take the state of :meth:`snapshot`."""


@dataclass(frozen=True)
class Trace:
    """Watermarks around each arrival of a ``process_trace`` call.

    Attributes
    ----------
    at_arrival
        Watermark in force when each tuple arrived (the one it is judged against).
    after_arrival
        Watermark right after each tuple was observed, at the same ingestion time. Windows whose end is at or
        below it have fired by then.
    timeline
        The watermark between arrivals too (timers, idle advance): :meth:`Timeline.fire` gives the instant
        at which a window fires.
    partition_timelines
        Partition-scoped combinations only (``timeline`` is then ``None``): each partition's own timeline over
        its arrivals, by which the windows of the keys it owns fire.

    """

    at_arrival: I64
    after_arrival: I64
    #: The watermark at every ingestion-clock instant of the run, arrivals and timers alike.
    timeline: Timeline | None = None
    partition_timelines: Mapping[Hashable, Timeline] | None = None


#: Largest integer parameter (milliseconds, counts): 2**53, about 285,000 years of milliseconds. Far below
#: int64, so that epoch times plus or minus any parameter never overflow the int64 arithmetic of the
#: generators (numpy wraps silently), and exact as a float.
MAX_INT_PARAM = 2**53


def check_int(name: str, value: Any, minimum: int | None = None, maximum: int = MAX_INT_PARAM) -> int:
    """Validate an integer parameter in ``[minimum, maximum]`` and return it as ``int``.

    >>> check_int("delay_ms", 2**70)
    Traceback (most recent call last):
    ...
    ValueError: delay_ms must be <= 9007199254740992, got 1180591620717411303424
    """
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            msg = f"{name} must be an integer, got {value!r}"
            raise ValueError(msg)
    number = int(value)
    if minimum is not None and number < minimum:
        msg = f"{name} must be >= {minimum}, got {number}"
        raise ValueError(msg)
    if number > maximum:
        msg = f"{name} must be <= {maximum}, got {number}"
        raise ValueError(msg)
    return number


def optional_int(value: Any) -> int | None:
    """Convert a ``--set`` value for an optional integer parameter: ``none``/``off``/empty mean ``None``."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("", "none", "off", "null"):
            return None
        number = float(text)
        if not number.is_integer():
            raise ValueError(value)
        return int(number)
    return check_int("value", value)


def check_float(name: str, value: Any, low: float, high: float, *, low_open: bool = False) -> float:
    """Validate a finite float parameter in ``[low, high]`` (``(low, high]`` when ``low_open``)."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        msg = f"{name} must be a number, got {value!r}"
        raise ValueError(msg)
    number = float(value)
    ok = (low < number if low_open else low <= number) and number <= high
    if not ok or not math.isfinite(number):
        interval = f"({low}, {high}]" if low_open else f"[{low}, {high}]"
        msg = f"{name} must be in {interval}, got {number}"
        raise ValueError(msg)
    return number


class WatermarkReadout:
    """Read-only view shared by generators and their partition combination."""

    _wm: int
    _wm_at_arrival: int
    _clock: int | None
    _n_seen: int
    _n_late: int

    def _reset_readout(self) -> None:
        self._wm = NO_WATERMARK
        self._wm_at_arrival = NO_WATERMARK
        self._clock = None
        self._n_seen = 0
        self._n_late = 0

    @property
    def watermark_ms(self) -> int:
        """Current watermark (``NO_WATERMARK`` before the first emission)."""
        return self._wm

    @property
    def watermark_at_arrival_ms(self) -> int:
        """Watermark in force when the last ``update``'s tuple arrived."""
        return self._wm_at_arrival

    @property
    def clock_ms(self) -> int | None:
        """Latest ingestion time seen (arrivals and ``on_idle``), or ``None``."""
        return self._clock

    @property
    def n_seen(self) -> int:
        """Number of tuples observed."""
        return self._n_seen

    @property
    def n_late(self) -> int:
        """Number of observed tuples that were late (``te`` below the watermark in force)."""
        return self._n_late


class WatermarkGenerator(WatermarkReadout, abc.ABC):
    """Base class of the watermark strategies (see the module docstring for the contract)."""

    #: Registry name of the strategy.
    name: ClassVar[str]
    #: Parameter names and the callable that converts a ``name=value`` string to the parameter's type.
    param_types: ClassVar[Mapping[str, Any]]
    #: The settings the tuner replays (``awm tune``, the re-tuning DAG), one parameter dict each; a strategy
    #: that takes ``late_slo_pct`` gets one setting per target share from the tuner for each.
    search_space: ClassVar[Sequence[Mapping[str, Any]]] = ({},)
    #: A parameter for which a larger value gives a lower or equal watermark at every instant, the others
    #: fixed: the tuner binary-searches it instead of replaying every value. None: no such parameter.
    monotone_param: ClassVar[str | None] = None
    #: The settings ``awm compare`` replays by default; empty: the strategy is left out of its default grid.
    comparison_grid: ClassVar[Sequence[Mapping[str, Any]]] = ()
    #: :meth:`process_trace` runs at most this many arrivals as the ``update`` loop (the same watermarks and
    #: state): below it the vectorised core's fixed cost (tens of microseconds of numpy calls) exceeds the
    #: loop's, as on a sparse fleet's short runs between idle spells (``benchmarks/small_batches.py``).
    #: Strategies with their own timed core (``_run_timed``) always run it.
    SCALAR_RUN_MAX: ClassVar[int] = 16

    def __init__(self) -> None:
        self._reset()

    @classmethod
    def test_settings(cls, pick: Callable[[Sequence[Any]], Any]) -> dict[str, Any]:
        """Parameters the contract tests build the strategy with (default: none, the defaults).

        Each value is chosen by ``pick`` from a sequence of candidates: the tests draw with hypothesis;
        anything that picks an element of a sequence will do.
        """
        return {}

    # -- state -----------------------------------------------------------------------------------------
    def _reset(self) -> None:
        self._reset_readout()
        self._seen_max_te: int | None = None
        self._reset_state()

    @abc.abstractmethod
    def _reset_state(self) -> None:
        """Initialise the strategy's own running state."""

    @property
    def params(self) -> dict[str, Any]:
        """The constructor arguments, by name."""
        return {name: getattr(self, name) for name in self.param_types}

    def diagnostics(self) -> dict[str, Any]:
        """Strategy internals worth exporting (learned delay, sensitivity, drifts...)."""
        return {}

    @property
    def max_event_time_ms(self) -> int | None:
        """The largest event time observed (``None`` before the first arrival).

        What a combination needs to close a silent partition's own windows and no more
        (:class:`~watermark.partitions.combine.PartitionedWatermark`, idleness in scoped mode).
        """
        return self._seen_max_te

    # -- scalar path -----------------------------------------------------------------------------------
    def update(self, te_ms: int, tp_ms: int) -> Self:
        """Handle one arrival: advance the clock to ``tp_ms``, judge the tuple, observe it."""
        te, tp = int(te_ms), int(tp_ms)
        if self._clock is not None and tp < self._clock:
            tp = self._clock
        self._clock = tp
        self._advance(tp, arrival=True)
        wm = self._wm
        late = te < wm
        self._observe(te, tp, late)
        if self._seen_max_te is None or te > self._seen_max_te:
            self._seen_max_te = te
        self._wm_at_arrival = wm
        self._n_seen += 1
        self._n_late += late
        return self

    def on_idle(self, now_ms: int) -> Self:
        """Advance time to ``now_ms`` without data; a time earlier than the clock changes nothing."""
        now = int(now_ms)
        if self._clock is not None and now <= self._clock:
            return self
        self._clock = now
        self._advance(now, arrival=False)
        return self

    def hold_floor(self, floor_ms: int) -> Self:
        """Raise the watermark to at least ``floor_ms`` (never lowers it); later arrivals never go below it.

        A generator that replaces another under a new configuration starts from its predecessor's
        watermark, so that no window the old one closed opens again (a tuple below the floor is late).

        Examples
        --------
        >>> from watermark.strategies.registry import make
        >>> gen = make("periodic", {"delay_ms": 500}).hold_floor(10_000)
        >>> gen.watermark_ms, gen.process([2_000, 20_000], [2_000, 20_000]).tolist()
        (10000, [10000, 10000])

        """
        self._raise(int(floor_ms))
        return self

    def _raise(self, proposal: int) -> None:
        if proposal > self._wm:
            self._wm = proposal

    @abc.abstractmethod
    def _advance(self, now: int, *, arrival: bool) -> None:
        """Move the strategy's time to ``now`` (an arrival's ``tp`` or an idle instant)."""

    @abc.abstractmethod
    def _observe(self, te: int, tp: int, late: bool) -> None:
        """Take in an arrived tuple after it was judged."""

    # -- vectorised path -------------------------------------------------------------------------------
    def process(self, te: ArrayLike, tp: ArrayLike) -> I64:
        """Vectorised ``update`` loop: the watermark in force at each arrival.

        Parameters
        ----------
        te, tp
            Event and ingestion times (int64 ms) of the arrivals, in arrival order.

        Returns
        -------
        numpy.ndarray
            int64 watermark each tuple is judged against; a tuple is late iff ``te < result``.

        """
        return self.process_trace(te, tp).at_arrival

    def process_trace(self, te: ArrayLike, tp: ArrayLike) -> Trace:
        """Like :meth:`process`, also returning the watermark right after each arrival."""
        te_a, tp_a = as_ms_array(te, "te"), as_ms_array(tp, "tp")
        if te_a.shape != tp_a.shape:
            msg = f"te and tp must have the same length, got {te_a.shape[0]} and {tp_a.shape[0]}"
            raise ValueError(msg)
        if te_a.size == 0:
            empty = np.empty(0, np.int64)
            return Trace(empty, empty.copy(), Timeline(empty, empty, empty, self._wm, ()))
        tp_a = self._clamp_clock(tp_a)
        before = self._wm
        if te_a.size <= self.SCALAR_RUN_MAX and type(self)._run_timed is WatermarkGenerator._run_timed:
            rise, offset = self._timers(tp_a, None)
            at, after = [], []
            for a, b in zip(te_a.tolist(), tp_a.tolist(), strict=True):
                self.update(a, b)
                at.append(self._wm_at_arrival)
                after.append(self._wm)
            pre = np.array(at, np.int64)
            post = np.array(after, np.int64)
        else:
            pre, post, rise, offset = self._run_timed(te_a, tp_a, None)
            self._finish_batch(te_a, pre, None)
        part = Component(before, pre, post, rise, offset)
        return Trace(pre, post, Timeline(tp_a, pre, post, before, (part,)))

    def _run_timed(self, te: I64, tp: I64, arrivals: Idx | None) -> tuple[I64, I64, I64, I64 | None]:
        """:meth:`_run` with the gaps' description of :meth:`_timers`: ``(pre, post, rise, offset)``."""
        rise, offset = self._timers(tp, arrivals)
        pre, post = self._run(te, tp, arrivals)
        return pre, post, rise, offset

    def _timers(self, tp: I64, arrivals: Idx | None) -> tuple[I64, I64 | None]:
        """How time alone raises the watermark in the gap before each event, from the state before a run.

        Called before :meth:`_run` with the same (clamped) ``tp`` and ``arrivals``. Returns ``rise``, the
        first instant of each gap ``(t_{j-1}, t_j]`` at which ``on_idle`` would raise the watermark
        (:data:`~watermark.timeline.NO_RISE`: never), and ``offset``: ``None`` when that rise is a step to the
        watermark in force at the next event (a timer), else the ramp ``W(t) = t - offset`` (an advance that
        follows the clock). The default suits strategies that only move at arrivals.
        """
        return np.full(tp.size, NO_RISE, np.int64), None

    def _clamp_clock(self, tp: I64) -> I64:
        clock = np.maximum.accumulate(tp)
        if self._clock is not None:
            np.maximum(clock, self._clock, out=clock)
        return clock

    def _finish_batch(self, te: I64, pre: I64, arrivals: Idx | None) -> None:
        seen = te if arrivals is None else te[arrivals]
        if seen.size:
            top = int(seen.max())
            self._seen_max_te = top if self._seen_max_te is None else max(self._seen_max_te, top)
        if arrivals is None:
            self._n_seen += int(te.size)
            self._n_late += int(np.count_nonzero(te < pre))
            self._wm_at_arrival = int(pre[-1])
        elif arrivals.size:
            self._n_seen += int(arrivals.size)
            self._n_late += int(np.count_nonzero(te[arrivals] < pre[arrivals]))
            self._wm_at_arrival = int(pre[arrivals[-1]])

    def _run(self, te: I64, tp: I64, arrivals: Idx | None) -> tuple[I64, I64]:
        """Vectorised core over events that are arrivals or idle ticks.

        ``arrivals`` holds the ascending positions of the arrivals (``None``: every event is one); the other
        positions are ``on_idle`` ticks, whose ``te`` is ignored. ``tp`` is already clamped to a
        nondecreasing clock. Returns the watermark at and after each event (for a tick both are the
        watermark after ``on_idle``) and leaves the final state behind, including ``_wm`` and ``_clock``.
        The default suits strategies whose ``on_idle`` never moves the watermark: it runs
        :meth:`_run_arrivals` on the arrivals and carries the watermark over the ticks.
        """
        if arrivals is None:
            pre, post = self._run_arrivals(te, tp)
        else:
            post = np.full(te.size, self._wm, np.int64)
            pre_a = None
            if arrivals.size:
                pre_a, post_a = self._run_arrivals(te[arrivals], tp[arrivals])
                post[arrivals] = post_a
                np.maximum.accumulate(post, out=post)  # the watermark is monotonic: a forward fill
            pre = post.copy()
            if pre_a is not None:
                pre[arrivals] = pre_a
        self._clock = int(tp[-1])
        self._wm = max(self._wm, int(post[-1]))
        return pre, post

    def _run_arrivals(self, te: I64, tp: I64) -> tuple[I64, I64]:
        """Vectorised core over arrivals only; strategies overriding :meth:`_run` need not implement it."""
        msg = f"{type(self).__name__} implements neither _run nor _run_arrivals"
        raise NotImplementedError(msg)

    # -- checkpoints -----------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """JSON-serialisable state; :func:`watermark.strategies.registry.restore` continues from it."""
        return {
            "strategy": self.name,
            "version": 1,
            "params": self.params,
            "common": {
                "wm": self._wm,
                "clock": self._clock,
                "n_seen": self._n_seen,
                "n_late": self._n_late,
                "wm_at_arrival": self._wm_at_arrival,
                "max_te": self._seen_max_te,
            },
            "state": self._state_dict(),
        }

    def _load(self, snap: Mapping[str, Any]) -> None:
        common = snap["common"]
        self._wm = int(common["wm"])
        self._clock = None if common["clock"] is None else int(common["clock"])
        self._n_seen = int(common["n_seen"])
        self._n_late = int(common["n_late"])
        self._wm_at_arrival = int(common["wm_at_arrival"])
        max_te = common.get("max_te")  # absent from snapshots written before it was kept
        self._seen_max_te = None if max_te is None else int(max_te)
        self._load_state(snap["state"])

    @abc.abstractmethod
    def _state_dict(self) -> dict[str, Any]:
        """The strategy's running state as JSON-serialisable values."""

    @abc.abstractmethod
    def _load_state(self, state: Mapping[str, Any]) -> None:
        """Inverse of :meth:`_state_dict`."""

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"{type(self).__name__}({args})"
