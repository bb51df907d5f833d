"""Replay evaluation: run a recorded stream through a strategy and measure completeness and latency.

Definitions (one convention everywhere, see the README, "Time and lateness"):

* Arrival order is ascending ``tp``, ties in input order.
* A tuple is **late** iff ``te < W`` for the watermark ``W`` in force when it arrived; late tuples are dropped
  from the windows (the streaming job keeps them in a late-events table).
* **Stragglers** are on-time tuples with ``W <= te < W + straggler_ms / 2`` (the sliding-window paper's lower
  half of ``[W, W + STRAGGLERSIZE)``); they are reported, not dropped.
* Windows are Spark's ``window()``: tumbling windows ``[k * window_ms, (k + 1) * window_ms)`` aligned to epoch
  0, or sliding windows starting at multiples of ``slide_ms``. With a key, a window is per key.
* A window **fires** at the earliest ingestion-clock instant at which ``W >= end``, whether an arrival or a
  timer (a periodic emission, an idle advance) raised the watermark (:mod:`watermark.timeline`); it has
  **trigger delay** ``W_at_fire - end`` and **emit latency** ``t_fire - end``. Windows the watermark has not
  reached by the last arrival are counted apart (``windows_flushed``) and excluded from the latency
  figures, as the seed paper does. One convention for every strategy: the same instants a job firing at
  its trigger's timer and at batch boundaries would see.
* A window that never fires is **stuck** for whoever waits on it, so the summary also gives a **charged**
  emit latency (``emit_latency_charged_ms``): the same statistics over every window, where a window not fired
  before the end of input is charged as if it fired at the last arrival (``last tp - end``), and every
  window's latency counts at least 0 (a window ending after the last arrival could not have fired yet under
  any watermark; a device whose clock runs ahead of the ingestion clock has windows firing "before" their
  end, which no one waits less than nothing for). Comparisons of strategies use it, so a strategy cannot
  look fast by leaving its slow windows open. With an idle timeout,
  ``windows_stuck_idle`` counts the stuck windows of keys whose last arrival is at least ``idle_timeout_ms``
  before the end of input: windows an idleness rule should have fired.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from watermark.base import check_int
from watermark.partitions.arrays import factorize, one_partition_per_key, rows_by_code, unique_pairs
from watermark.partitions.combine import PartitionedWatermark
from watermark.strategies.registry import make
from watermark.timeline import Timeline
from watermark.timeutil import NO_WATERMARK, as_ms_array
from watermark.windowspec import WindowSpec

#: Default straggler band: the sliding-window paper's ``SLIDEWINDOWSIZE`` of 500 ms.
DEFAULT_STRAGGLER_MS = 500

LATE, STRAGGLER, NORMAL, PENDING = 0, 1, 2, 3

#: How partitions make the watermark in a replay (``replay``'s ``partition_mode``).
PARTITION_MODES = ("min", "global", "scoped", "keyed")
CLASS_NAMES = ("late", "straggler", "normal", "pending")


def classify(te: ArrayLike, wm: ArrayLike, straggler_ms: int = DEFAULT_STRAGGLER_MS) -> NDArray[np.int8]:
    """Label tuples late / straggler / normal / pending against the window ``[W, W + straggler_ms)``.

    The sliding-window paper's four classes: late below ``W``, stragglers in the lower half of the window,
    normal data in its upper half, pending data above it. Before the first watermark everything is pending.

    Examples
    --------
    >>> classify([5, 10, 14, 17, 30], [10, 10, 10, 10, 10], straggler_ms=10).tolist()
    [0, 1, 1, 2, 3]

    """
    te_a, wm_a = as_ms_array(te, "te"), as_ms_array(wm, "wm")
    s = check_int("straggler_ms", straggler_ms, 0)
    none = wm_a == NO_WATERMARK
    ahead = te_a - np.where(none, 0, wm_a)  # distance above W, meaningless where there is no W
    out = np.full(te_a.size, PENDING, np.int8)
    out[~none & (2 * ahead < 2 * s)] = NORMAL
    out[~none & (2 * ahead < s)] = STRAGGLER
    out[~none & (ahead < 0)] = LATE
    return out


def latency_stats(values: NDArray[np.int64]) -> dict[str, float | None]:
    """Mean and percentiles (50, 95, 99) of latencies, as the summary reports them (``None`` when empty)."""
    if values.size == 0:
        return {"mean": None, "p50": None, "p95": None, "p99": None}
    q = np.percentile(values, [50, 95, 99])
    return {
        "mean": round(float(values.mean()), 3),
        "p50": round(float(q[0]), 3),
        "p95": round(float(q[1]), 3),
        "p99": round(float(q[2]), 3),
    }


@dataclass(frozen=True)
class WindowTable:
    """Per-window results of a replay (one row per key and window with at least one on-time tuple)."""

    key: NDArray[np.intp]  # index into ReplayResult.keys, or 0 without a key
    start_ms: NDArray[np.int64]
    end_ms: NDArray[np.int64]
    count: NDArray[np.int64]
    fired: NDArray[np.bool_]  # fired before the end of input
    fire_tp_ms: NDArray[np.int64]  # ingestion-clock instant at fire (undefined where not fired)
    fire_wm_ms: NDArray[np.int64]  # watermark that fired it (undefined where not fired)
    #: The same for a consumer that fires windows only at arrivals (a job without a trigger timer): the first
    #: arrival at or after ``fire_tp_ms`` and the watermark right after it.
    arrival_fire_tp_ms: NDArray[np.int64] | None = None
    arrival_fire_wm_ms: NDArray[np.int64] | None = None


@dataclass(frozen=True)
class ReplayResult:
    """Everything a replay computed; :meth:`summary` gives the report."""

    strategy: str
    params: dict[str, Any]
    window: WindowSpec
    straggler_ms: int
    idle_timeout_ms: int | None
    order: NDArray[np.intp]  # input row of each arrival
    te_ms: NDArray[np.int64]  # in arrival order
    tp_ms: NDArray[np.int64]
    wm_at_arrival: NDArray[np.int64]
    wm_after: NDArray[np.int64]
    classes: NDArray[np.int8]
    windows: WindowTable
    partitions: list[Any] | None
    keys: list[Any] | None
    extra: dict[str, Any] = field(default_factory=dict)
    #: Key code (index into ``keys``) of each arrival, in arrival order; None without a key.
    key_codes: NDArray[np.intp] | None = None

    @property
    def late(self) -> NDArray[np.bool_]:
        """Late flags in arrival order."""
        flags: NDArray[np.bool_] = self.classes == LATE
        return flags

    @property
    def late_rows(self) -> NDArray[np.intp]:
        """Input rows (0-based, file order) of the late tuples, ascending."""
        return np.sort(self.order[self.late])

    @property
    def end_of_input_ms(self) -> int | None:
        """Ingestion time of the last arrival (None for an empty replay)."""
        return int(self.tp_ms[-1]) if self.tp_ms.size else None

    def charged_latency_ms(self, clock_offset_ms: ArrayLike | None = None) -> NDArray[np.int64]:
        """Emit latency of every window, a stuck one charged until the end of input (see the module doc).

        ``clock_offset_ms`` (one per input row: the device clock minus the true clock, as a benchmark that
        stepped a clock knows it) measures it in **true time** instead: from the true instant at which the
        key's clock reached the window's end (:meth:`window_clock_offsets`), so that a clock error, which
        no watermark can take back, is not charged as latency.
        """
        w = self.windows
        end_input = self.end_of_input_ms
        if end_input is None:
            return np.empty(0, np.int64)
        end = w.end_ms if clock_offset_ms is None else w.end_ms - self.window_clock_offsets(clock_offset_ms)
        waited = np.where(w.fired, w.fire_tp_ms, end_input) - end
        out: NDArray[np.int64] = np.maximum(waited, 0).astype(np.int64)
        return out

    def window_clock_offsets(self, clock_offset_ms: ArrayLike) -> NDArray[np.int64]:
        """Each window's clock offset: that of the first of its records to arrive (one per ``windows`` row).

        ``clock_offset_ms`` gives one offset per input row (device clock minus true clock, ms). A window's
        end in true time is ``end - offset`` with the offset its key's clock had when the window's first
        record arrived: a window reopened by a clock stepped back keeps the offset it was first seen with.

        Examples
        --------
        A key whose clock is 500 ms fast from its third record on: its window [1000, 2000) was first seen
        with the fast clock.

        >>> from watermark.windowspec import WindowSpec
        >>> r = replay([100, 600, 1_700, 2_400], [200, 700, 1_300, 2_000], strategy="ingestion",
        ...            params={"max_event_time_lag_ms": 0}, window=WindowSpec(1_000))
        >>> r.window_clock_offsets([0, 0, 500, 500]).tolist()
        [0, 500, 500]

        """
        off = np.asarray(clock_offset_ms, dtype=np.int64)
        if off.shape != self.order.shape:
            msg = f"clock_offset_ms must have one value per input row ({self.order.size}), got {off.shape}"
            raise ValueError(msg)
        w = self.windows
        if w.count.size == 0:
            return np.empty(0, np.int64)
        rows, start = self.window.assign(self.te_ms)  # arrival order kept, a row's windows in order
        codes = np.zeros(self.te_ms.size, np.intp) if self.key_codes is None else self.key_codes
        slide = self.window.step_ms
        lo = int(min(start.min(), w.start_ms.min()))
        span = (int(max(start.max(), w.start_ms.max())) - lo) // slide + 1
        group = codes[rows].astype(np.int64) * span + (start - lo) // slide
        keys, first = np.unique(group, return_index=True)  # first occurrence: the earliest arrival
        wanted = w.key.astype(np.int64) * span + (w.start_ms - lo) // slide
        at = np.searchsorted(keys, wanted)
        out: NDArray[np.int64] = off[self.order][rows[first[at]]]
        return out

    def stuck_idle(self, idle_timeout_ms: int | None = None) -> int | None:
        """Stuck windows of keys silent for at least ``idle_timeout_ms`` (default the replay's) at the end.

        None without a timeout (or with timeouts learned per key, ``"auto"``: give one to count). Without
        a key the whole stream is one key.
        """
        timeout = self.idle_timeout_ms if idle_timeout_ms is None else idle_timeout_ms
        end_input = self.end_of_input_ms
        if not isinstance(timeout, int) or end_input is None:
            return None
        w = self.windows
        codes = np.zeros(self.tp_ms.size, np.intp) if self.key_codes is None else self.key_codes
        last = np.full(int(codes.max()) + 1, np.iinfo(np.int64).min, np.int64)
        np.maximum.at(last, codes, self.tp_ms)
        idle = end_input - last[w.key] >= timeout
        return int(np.count_nonzero(~w.fired & idle))

    def summary(self) -> dict[str, Any]:
        """The report printed by ``python -m watermark replay --json``."""
        n = int(self.te_ms.size)
        late = int(np.count_nonzero(self.classes == LATE))
        stragglers = int(np.count_nonzero(self.classes == STRAGGLER))
        w = self.windows
        fired = w.fired
        steps = np.empty(2 * n, np.int64)
        steps[0::2] = self.wm_at_arrival
        steps[1::2] = self.wm_after
        levels = np.concatenate([[NO_WATERMARK], steps])
        emitted = int(np.count_nonzero(levels[1:] > levels[:-1]))
        final = int(self.wm_after[-1]) if n else NO_WATERMARK
        return {
            "strategy": self.strategy,
            "params": self.params,
            "window_ms": self.window.window_ms,
            "slide_ms": self.window.slide_ms,
            "events": n,
            "on_time": n - late,
            "late": late,
            "dropped_pct": round(100.0 * late / n, 4) if n else 0.0,
            "stragglers": stragglers,
            "stragglers_pct": round(100.0 * stragglers / n, 4) if n else 0.0,
            "straggler_ms": self.straggler_ms,
            "windows": int(w.count.size),
            "windows_fired": int(np.count_nonzero(fired)),
            "windows_flushed": int(np.count_nonzero(~fired)),
            "trigger_delay_ms": latency_stats(w.fire_wm_ms[fired] - w.end_ms[fired]),
            "emit_latency_ms": latency_stats(w.fire_tp_ms[fired] - w.end_ms[fired]),
            "emit_latency_charged_ms": latency_stats(self.charged_latency_ms()),
            "windows_stuck_idle": self.stuck_idle(),
            "watermarks_emitted": emitted,
            "final_watermark_ms": None if final == NO_WATERMARK else final,
            "partitions": None if self.partitions is None else len(self.partitions),
            "idle_timeout_ms": self.idle_timeout_ms,
            "keys": None if self.keys is None else len(self.keys),
            **self.extra,
        }


def replay(
    te: ArrayLike,
    tp: ArrayLike,
    *,
    strategy: str,
    params: dict[str, Any] | None = None,
    window: WindowSpec,
    partition: ArrayLike | None = None,
    key: ArrayLike | None = None,
    straggler_ms: int = DEFAULT_STRAGGLER_MS,
    idle_timeout_ms: int | None = None,
    partition_mode: str = "min",
) -> ReplayResult:
    """Replay a recorded stream (rows in any order) through ``strategy`` and evaluate ``window``.

    Parameters
    ----------
    te, tp
        Event and arrival times (int64 ms), one per input row.
    strategy, params
        Strategy name and parameters (strings are converted as with ``--set``).
    window
        The window specification.
    partition
        Optional source partition per row: one generator per partition, combined
        (:class:`~watermark.partitions.combine.PartitionedWatermark`).
    key
        Optional aggregation key per row: windows are per key.
    straggler_ms
        Width of the straggler window.
    idle_timeout_ms
        Idleness timeout of the partition combination.
    partition_mode
        How partitions make the watermark (see :data:`PARTITION_MODES`): ``"min"``, one generator per
        partition combined as the minimum over active partitions; ``"global"``, one generator over the whole
        stream (partitions only reported); ``"scoped"``, one generator per partition that judges that
        partition's tuples and fires the windows of the keys living in it (each key must live in one
        partition, as with Kafka's keyed partitioning); ``"keyed"``, one generator per key that judges its
        key's tuples and fires its windows (partitions only reported; the job's ``--partition-mode keyed``).

    Examples
    --------
    Window ``[0, 1000)`` fires at the timer instant ``1410`` of the 100 ms grid that starts at the first
    arrival (110), when the emission ``1300 - 100`` passes its end, not at the arrival at 1420 that finds it
    done; the tuple with ``te = 140`` arrives after that and is late. Window ``[1000, 2000)`` is closed
    only by the end of input.

    >>> from watermark.evaluation.replay import WindowSpec, replay
    >>> r = replay([100, 250, 120, 1_300, 1_400, 140], [110, 260, 270, 1_310, 1_420, 1_430],
    ...            strategy="periodic", params={"delay_ms": 100, "period_ms": 100}, window=WindowSpec(1_000))
    >>> s = r.summary()
    >>> s["late"], s["windows"], s["windows_fired"]
    (1, 2, 1)
    >>> s["emit_latency_ms"]["mean"], s["trigger_delay_ms"]["mean"]
    (410.0, 200.0)

    """
    te_a, tp_a = as_ms_array(te, "te"), as_ms_array(tp, "tp")
    if te_a.size != tp_a.size:
        msg = f"te and tp must have the same length, got {te_a.size} and {tp_a.size}"
        raise ValueError(msg)
    if partition_mode not in PARTITION_MODES:
        msg = f"partition_mode must be one of {', '.join(PARTITION_MODES)}, got {partition_mode!r}"
        raise ValueError(msg)
    straggler_ms = check_int("straggler_ms", straggler_ms, 0)
    order = np.argsort(tp_a, kind="stable")
    te_s, tp_s = te_a[order], tp_a[order]
    extra: dict[str, Any] = {}
    keys: list[Any] | None = None
    key_codes = np.zeros(te_s.size, np.intp)
    if key is not None:
        keys, key_codes = _column_codes(key, "key", order)
    effective = make(strategy, params).params
    partitions: list[Any] | None = None
    part_codes: NDArray[np.intp] | None = None
    if partition is not None:
        partitions, part_codes = _column_codes(partition, "partition", order)
        extra["partition_mode"] = partition_mode
    if partition_mode == "keyed":
        if keys is None:
            msg = "partition_mode 'keyed' needs a key: each key's windows fire by its own watermark"
            raise ValueError(msg)
        if partitions is None:
            extra["partition_mode"] = partition_mode
        pre, post, classes, windows = _scoped(
            te_s, tp_s, key_codes, key_codes, True, strategy, params, window, straggler_ms, idle_timeout_ms
        )
    elif part_codes is None or partition_mode in ("global", "min"):
        part_sorted = None if part_codes is None or partition is None else np.asarray(partition)[order]
        mode = "global" if part_sorted is None else partition_mode
        pre, post, classes, windows = _one_watermark(
            te_s, tp_s, part_sorted, mode, key_codes, strategy, params, window, straggler_ms,
            idle_timeout_ms, extra,
        )  # fmt: skip
    else:
        pre, post, classes, windows = _scoped(
            te_s, tp_s, part_codes, key_codes, keys is not None, strategy, params, window, straggler_ms,
            idle_timeout_ms,
        )  # fmt: skip
    return ReplayResult(
        strategy=strategy,
        params=effective,
        window=window,
        straggler_ms=straggler_ms,
        idle_timeout_ms=idle_timeout_ms,
        order=order,
        te_ms=te_s,
        tp_ms=tp_s,
        wm_at_arrival=pre,
        wm_after=post,
        classes=classes,
        windows=windows,
        partitions=partitions,
        keys=keys,
        extra=extra,
        key_codes=key_codes if keys is not None else None,
    )


def _column_codes(
    column: ArrayLike, name: str, order: NDArray[np.intp]
) -> tuple[list[Any], NDArray[np.intp]]:
    """A per-row column (key or partition) in arrival ``order``: its distinct values and each row's code."""
    values = np.asarray(column)
    if values.size != order.size:
        msg = f"{name} must have one value per row ({order.size}), got {values.size}"
        raise ValueError(msg)
    return factorize(values[order])


def _one_watermark(
    te_s: NDArray[np.int64],
    tp_s: NDArray[np.int64],
    partition: NDArray[Any] | None,
    mode: str,
    key_codes: NDArray[np.intp],
    strategy: str,
    params: dict[str, Any] | None,
    window: WindowSpec,
    straggler_ms: int,
    idle_timeout_ms: int | None,
    extra: dict[str, Any],
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int8], WindowTable]:
    """One watermark for the whole stream: one generator (``global``) or the partitions' minimum (``min``).

    Rows in arrival order; ``partition`` (sorted the same) is needed for ``min``. Records the generator's
    diagnostics or the holdback partition in ``extra``. Returns the watermark at and after each arrival, the
    rows' classes and the windows.
    """
    if mode == "min":
        assert partition is not None
        combo = PartitionedWatermark(strategy, params, idle_timeout_ms=idle_timeout_ms)
        trace = combo.process_trace(partition, te_s, tp_s)
        extra["holdback_partition"] = combo.holdback_partition
    else:
        gen = make(strategy, params)
        trace = gen.process_trace(te_s, tp_s)
        extra["diagnostics"] = gen.diagnostics()
    pre, post = trace.at_arrival, trace.after_arrival
    classes = classify(te_s, pre, straggler_ms)
    assert trace.timeline is not None
    windows = _windows(te_s, trace.timeline, classes != LATE, key_codes, window)
    return pre, post, classes, windows


def _scoped(
    te: NDArray[np.int64],
    tp: NDArray[np.int64],
    part_codes: NDArray[np.intp],
    key_codes: NDArray[np.intp],
    keyed: bool,
    strategy: str,
    params: dict[str, Any] | None,
    spec: WindowSpec,
    straggler_ms: int,
    idle_timeout_ms: int | str | None = None,
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int8], WindowTable]:
    """Partition-scoped firing: each partition's generator judges its tuples and fires its keys' windows.

    With an idle timeout, a silent partition's watermark follows the fleet's up to the end of its own last
    window (:class:`~watermark.partitions.combine.PartitionedWatermark`, mode ``scoped``): its windows fire at
    the raise.
    """
    if not keyed:
        msg = "partition_mode 'scoped' needs a key: windows fire per key, by the partition the key lives in"
        raise ValueError(msg)
    if not one_partition_per_key(key_codes, part_codes):
        msg = "partition_mode 'scoped' needs every key to live in one partition; some keys span several"
        raise ValueError(msg)
    pre = np.empty(te.size, np.int64)
    post = np.empty(te.size, np.int64)
    classes = np.empty(te.size, np.int8)
    tables = []
    combo = PartitionedWatermark(
        strategy, params, idle_timeout_ms=idle_timeout_ms, mode="scoped", window=spec
    )
    trace = combo.process_trace(part_codes, te, tp)
    assert trace.partition_timelines is not None
    count = int(part_codes.max()) + 1 if part_codes.size else 0
    for code, rows in enumerate(rows_by_code(part_codes, count)):
        pre[rows], post[rows] = trace.at_arrival[rows], trace.after_arrival[rows]
        classes[rows] = classify(te[rows], pre[rows], straggler_ms)
        timeline = trace.partition_timelines[code]
        tables.append(_windows(te[rows], timeline, classes[rows] != LATE, key_codes[rows], spec))
    if not tables:
        empty_i, empty = np.empty(0, np.intp), np.empty(0, np.int64)
        table = WindowTable(empty_i, empty, empty, empty, np.empty(0, np.bool_), empty, empty)
        return pre, post, classes, table
    table = WindowTable(
        key=np.concatenate([t.key for t in tables]),
        start_ms=np.concatenate([t.start_ms for t in tables]),
        end_ms=np.concatenate([t.end_ms for t in tables]),
        count=np.concatenate([t.count for t in tables]),
        fired=np.concatenate([t.fired for t in tables]),
        fire_tp_ms=np.concatenate([t.fire_tp_ms for t in tables]),
        fire_wm_ms=np.concatenate([t.fire_wm_ms for t in tables]),
        arrival_fire_tp_ms=np.concatenate(
            [t.arrival_fire_tp_ms for t in tables if t.arrival_fire_tp_ms is not None]
        ),
        arrival_fire_wm_ms=np.concatenate(
            [t.arrival_fire_wm_ms for t in tables if t.arrival_fire_wm_ms is not None]
        ),
    )
    return pre, post, classes, table


def _windows(
    te: NDArray[np.int64],
    timeline: Timeline,
    on_time: NDArray[np.bool_],
    key_codes: NDArray[np.intp],
    spec: WindowSpec,
) -> WindowTable:
    rows = np.flatnonzero(on_time)
    member, start = spec.assign(te[rows])
    k = key_codes[rows][member]
    if k.size:
        pair_key, w_start, count = unique_pairs(k, start)
        w_key = pair_key.astype(np.intp)
    else:
        w_key, w_start, count = np.empty(0, np.intp), np.empty(0, np.int64), np.empty(0, np.int64)
    end = w_start + spec.window_ms
    fired, fire_t, fire_w = timeline.fire(end)
    _, arrival_t, arrival_w = timeline.fire_at_arrivals(end)
    return WindowTable(
        key=w_key,
        start_ms=w_start,
        end_ms=end,
        count=count.astype(np.int64),
        fired=fired,
        fire_tp_ms=fire_t,
        fire_wm_ms=fire_w,
        arrival_fire_tp_ms=arrival_t,
        arrival_fire_wm_ms=arrival_w,
    )
