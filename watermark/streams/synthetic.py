"""Deterministic synthetic out-of-order event streams for tests and benchmarks.

Every stream is generated from one :class:`SyntheticSpec` with one
``numpy.random.default_rng(seed)`` (PCG64) generator and only vectorised numpy
operations (loops run over schedule segments, idle partitions and bursts, never
over events), so the same spec always yields identical arrays and five million
events take about a second (0.7-1.3 s on a 2-core machine). Times are int64 epoch milliseconds:
``te_ms`` is the event time, ``tp_ms`` the arrival (ingestion) time.

Notes
-----
The model, in the order the random draws are made:

1. **Event times.** A Poisson process whose rate is piecewise constant: event
   ``i`` belongs to the ``rate_changes`` segment containing the fraction
   ``i / events`` of the stream, and its gap to the previous event is a standard
   exponential draw scaled by ``1000 / (rate_per_s * multiplier)`` milliseconds.
   The first event is at ``start_ms``; event times are the floored cumulative sum,
   so they are nondecreasing in generation order (``event_id`` order).
2. **Partitions.** Uniform over ``0 .. partitions - 1``. Then ``idle_partitions``
   distinct partitions are chosen, and for each a silence of
   ``round(idle_fraction * span)`` ms of event time, placed uniformly at random but
   kept 5 % of the span away from the stream's start and end (less if the silence
   is too long for that). The events of a silent partition whose event time falls
   in its half-open silence ``[start, start + length)`` are reassigned uniformly to
   the partitions that never go idle, so the event count stays exact and the
   silent partition has no event at all in that interval.
3. **Keys.** Zipf-like popularity with exponent 1.1: key ``k`` has probability
   proportional to ``(k + 1) ** -1.1``, so key 0 is the most popular.
4. **Values.** ``normal(value_mean, value_std)``.
5. **Delays.** Lognormal: ``median * exp(delay_sigma * z)`` with ``z`` standard
   normal and the median linearly interpolated from ``delay_median_ms`` at the
   event's position ``i / (events - 1)`` in the stream. Stragglers: a
   ``Binomial(events, straggler_fraction)`` number of events, chosen uniformly
   without replacement, get their delay multiplied by ``straggler_factor``.
   Delays are floored to integer milliseconds, are >= 0 and are capped at one
   year so int64 arithmetic cannot overflow.
6. **Bursts.** ``bursts`` episodes, each a uniformly chosen partition and an
   event-time interval ``[b, b + burst_ms)`` placed uniformly inside the stream.
   The partition's events in that interval are held back: their arrival time
   becomes ``b + burst_ms + delay`` (their own delay counted from the release).
   Bursts are drawn last, so changing only the burst settings leaves every other
   draw, and hence the rest of the stream, unchanged.

Finally ``tp_ms = te_ms + delay`` (or the burst release) and all arrays are put in
**arrival order**: sorted by ``tp_ms`` with ties broken by ``event_id``, which is
the order a consumer would see them in.

Examples
--------
>>> import numpy as np
>>> from watermark.streams.synthetic import describe, generate
>>> a = generate(events=2_000, seed=7)
>>> b = generate(events=2_000, seed=7)
>>> len(a)
2000
>>> all(np.array_equal(x, y) for x, y in zip(
...     (a.event_id, a.partition, a.key, a.te_ms, a.tp_ms, a.value),
...     (b.event_id, b.partition, b.key, b.te_ms, b.tp_ms, b.value)))
True
>>> bool(np.all(np.diff(a.tp_ms) >= 0) and np.all(a.tp_ms >= a.te_ms))
True
>>> np.array_equal(a.te_ms, generate(events=2_000, seed=8).te_ms)
False
>>> describe(a)["events"]
2000

"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

if TYPE_CHECKING:
    import pyarrow

__all__ = ["SyntheticSpec", "SyntheticStream", "describe", "generate"]

_ZIPF_EXPONENT = 1.1
_IDLE_MARGIN = 0.05  # silences keep this fraction of the span away from start and end
_MAX_DELAY_MS = 365 * 24 * 3_600_000  # one year
_MAX_START_MS = 2**53


def _check_int(name: str, value: object, minimum: int, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        msg = f"{name} must be an integer, got {value!r}"
        raise ValueError(msg)
    out = int(value)
    if out < minimum:
        msg = f"{name} must be >= {minimum}, got {out}"
        raise ValueError(msg)
    if maximum is not None and out > maximum:
        msg = f"{name} must be <= {maximum}, got {out}"
        raise ValueError(msg)
    return out


def _check_float(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        msg = f"{name} must be a real number, got {value!r}"
        raise ValueError(msg)
    out = float(value)
    if not math.isfinite(out):
        msg = f"{name} must be finite, got {out}"
        raise ValueError(msg)
    return out


def _check_fraction(name: str, value: object) -> float:
    out = _check_float(name, value)
    if not 0.0 <= out <= 1.0:
        msg = f"{name} must be in [0, 1], got {out}"
        raise ValueError(msg)
    return out


def _check_schedule(name: str, value: object, *, positive: bool) -> tuple[tuple[float, float], ...]:
    if isinstance(value, str | bytes) or not isinstance(value, tuple | list):
        msg = f"{name} must be a tuple of (fraction, value) pairs, got {value!r}"
        raise ValueError(msg)
    if not value:
        msg = f"{name} must not be empty"
        raise ValueError(msg)
    pairs: list[tuple[float, float]] = []
    for item in value:
        if not isinstance(item, tuple | list) or len(item) != 2:
            msg = f"{name} entries must be (fraction, value) pairs, got {item!r}"
            raise ValueError(msg)
        frac = _check_fraction(f"{name} fraction", item[0])
        val = _check_float(f"{name} value", item[1])
        if positive and val <= 0.0:
            msg = f"{name} values must be > 0, got {val}"
            raise ValueError(msg)
        if not positive and val < 0.0:
            msg = f"{name} values must be >= 0, got {val}"
            raise ValueError(msg)
        pairs.append((frac, val))
    if pairs[0][0] != 0.0:
        msg = f"{name} must start at fraction 0.0, got {pairs[0][0]}"
        raise ValueError(msg)
    fracs = [p[0] for p in pairs]
    if any(b <= a for a, b in zip(fracs, fracs[1:], strict=False)):
        msg = f"{name} fractions must be strictly increasing, got {fracs}"
        raise ValueError(msg)
    return tuple(pairs)


@dataclass(frozen=True)
class SyntheticSpec:
    """Parameters of a synthetic out-of-order stream.

    All fields are validated on construction; an invalid value raises
    ``ValueError`` naming the field. Schedules are normalised to tuples of
    ``(float, float)`` pairs.

    Parameters
    ----------
    events : int
        Exact number of events produced, >= 1.
    partitions : int
        Number of source partitions, codes ``0 .. partitions - 1``.
    keys : int
        Number of aggregation keys, codes ``0 .. keys - 1``, Zipf-like popularity
        (exponent 1.1, key 0 most popular).
    seed : int
        Seed of the single PCG64 generator, >= 0.
    start_ms : int
        Event time of the first event, epoch milliseconds, in ``[0, 2**53]``.
    rate_per_s : float
        Mean total event rate (all partitions) before rate changes, > 0.
    rate_changes : tuple of (float, float)
        Piecewise-constant rate multiplier: ``(fraction of the stream's events at
        which it starts, multiplier > 0)``; starts at 0.0, strictly increasing.
    delay_median_ms : tuple of (float, float)
        Median transmission delay in ms (>= 0), linearly interpolated over the
        fraction of the stream; starts at 0.0, strictly increasing.
    delay_sigma : float
        Lognormal shape of the delay, >= 0.
    straggler_fraction : float
        Fraction of events with an extra heavy-tail delay, in [0, 1].
    straggler_factor : float
        Multiplier of the stragglers' delay, >= 1.
    bursts : int
        Number of hold-back episodes, >= 0.
    burst_ms : int
        Length of each hold-back episode in event time, >= 0.
    idle_partitions : int
        Partitions that go completely silent for a while, ``0 <= idle_partitions < partitions``.
    idle_fraction : float
        Length of each silence as a fraction of the event-time span, in [0, 1].
    value_mean : float
        Mean of the normally distributed values.
    value_std : float
        Standard deviation of the values, >= 0.

    """

    events: int = 100_000
    partitions: int = 8
    keys: int = 1_000
    seed: int = 0
    start_ms: int = 1_700_000_000_000
    rate_per_s: float = 20_000.0
    rate_changes: tuple[tuple[float, float], ...] = ((0.0, 1.0), (0.35, 3.0), (0.7, 0.5))
    delay_median_ms: tuple[tuple[float, float], ...] = ((0.0, 40.0), (0.5, 250.0), (1.0, 80.0))
    delay_sigma: float = 0.9
    straggler_fraction: float = 0.003
    straggler_factor: float = 25.0
    bursts: int = 4
    burst_ms: int = 1_500
    idle_partitions: int = 1
    idle_fraction: float = 0.15
    value_mean: float = 100.0
    value_std: float = 15.0

    def __post_init__(self) -> None:
        def put(name: str, value: object) -> None:
            object.__setattr__(self, name, value)

        put("events", _check_int("events", self.events, 1))
        put("partitions", _check_int("partitions", self.partitions, 1, 2**31 - 1))
        put("keys", _check_int("keys", self.keys, 1, 2**31 - 1))
        put("seed", _check_int("seed", self.seed, 0))
        put("start_ms", _check_int("start_ms", self.start_ms, 0, _MAX_START_MS))
        rate = _check_float("rate_per_s", self.rate_per_s)
        if rate <= 0.0:
            msg = f"rate_per_s must be > 0, got {rate}"
            raise ValueError(msg)
        put("rate_per_s", rate)
        put("rate_changes", _check_schedule("rate_changes", self.rate_changes, positive=True))
        put("delay_median_ms", _check_schedule("delay_median_ms", self.delay_median_ms, positive=False))
        sigma = _check_float("delay_sigma", self.delay_sigma)
        if sigma < 0.0:
            msg = f"delay_sigma must be >= 0, got {sigma}"
            raise ValueError(msg)
        put("delay_sigma", sigma)
        put("straggler_fraction", _check_fraction("straggler_fraction", self.straggler_fraction))
        factor = _check_float("straggler_factor", self.straggler_factor)
        if factor < 1.0:
            msg = f"straggler_factor must be >= 1, got {factor}"
            raise ValueError(msg)
        put("straggler_factor", factor)
        put("bursts", _check_int("bursts", self.bursts, 0))
        put("burst_ms", _check_int("burst_ms", self.burst_ms, 0, _MAX_START_MS))
        idle = _check_int("idle_partitions", self.idle_partitions, 0)
        if idle >= self.partitions:
            msg = f"idle_partitions must be < partitions ({self.partitions}), got {idle}"
            raise ValueError(msg)
        put("idle_partitions", idle)
        put("idle_fraction", _check_fraction("idle_fraction", self.idle_fraction))
        put("value_mean", _check_float("value_mean", self.value_mean))
        std = _check_float("value_std", self.value_std)
        if std < 0.0:
            msg = f"value_std must be >= 0, got {std}"
            raise ValueError(msg)
        put("value_std", std)


@dataclass(frozen=True, eq=False)
class SyntheticStream:
    """A generated stream, one read-only numpy array per column, in arrival order.

    Rows are sorted by ``tp_ms`` with ties broken by ``event_id``.

    Parameters
    ----------
    event_id : numpy.ndarray
        int64, ``0 .. n - 1`` in generation (event-time) order.
    partition : numpy.ndarray
        int32 source partition codes.
    key : numpy.ndarray
        int32 aggregation key codes.
    te_ms : numpy.ndarray
        int64 event time, epoch milliseconds.
    tp_ms : numpy.ndarray
        int64 arrival (ingestion) time, epoch milliseconds, always >= ``te_ms``.
    value : numpy.ndarray
        float64 measured values.

    """

    event_id: NDArray[np.int64]
    partition: NDArray[np.int32]
    key: NDArray[np.int32]
    te_ms: NDArray[np.int64]
    tp_ms: NDArray[np.int64]
    value: NDArray[np.float64]

    def __post_init__(self) -> None:
        arrays = [getattr(self, f.name) for f in _STREAM_FIELDS]
        n = len(arrays[0])
        for field, arr in zip(_STREAM_FIELDS, arrays, strict=True):
            if arr.ndim != 1 or len(arr) != n:
                msg = f"{field.name} must be a 1-D array of length {n}, got shape {arr.shape}"
                raise ValueError(msg)

    def __len__(self) -> int:
        return len(self.event_id)

    def to_arrow(self) -> pyarrow.Table:
        """Convert to a ``pyarrow.Table`` (pyarrow is imported lazily).

        Returns
        -------
        pyarrow.Table
            Columns ``event_id`` (int64), ``partition`` (int32), ``key`` (int32),
            ``event_time_ms`` (int64), ``arrival_time_ms`` (int64) and ``value``
            (float64), in arrival order.

        """
        import pyarrow as pa

        return pa.table(
            {
                "event_id": pa.array(self.event_id, type=pa.int64()),
                "partition": pa.array(self.partition, type=pa.int32()),
                "key": pa.array(self.key, type=pa.int32()),
                "event_time_ms": pa.array(self.te_ms, type=pa.int64()),
                "arrival_time_ms": pa.array(self.tp_ms, type=pa.int64()),
                "value": pa.array(self.value, type=pa.float64()),
            }
        )


_STREAM_FIELDS = dataclasses.fields(SyntheticStream)


def _event_times(spec: SyntheticSpec, rng: np.random.Generator) -> NDArray[np.int64]:
    n = spec.events
    gaps = rng.standard_exponential(n)
    gaps[0] = 0.0
    fracs = [f for f, _ in spec.rate_changes] + [1.0]
    bounds = [math.ceil(f * n) for f in fracs]
    for (_, mult), lo, hi in zip(spec.rate_changes, bounds[:-1], bounds[1:], strict=True):
        gaps[lo:hi] *= 1000.0 / (spec.rate_per_s * mult)
    np.cumsum(gaps, out=gaps)
    if not gaps[-1] < 2.0**62 - spec.start_ms:
        msg = f"rate_per_s={spec.rate_per_s} is too low: the event-time span of {n} events overflows int64"
        raise ValueError(msg)
    te = gaps.astype(np.int64)
    te += spec.start_ms
    return te


def _apply_idle(
    spec: SyntheticSpec, rng: np.random.Generator, te: NDArray[np.int64], partition: NDArray[np.int32]
) -> None:
    if spec.idle_partitions == 0:
        return
    idle = rng.choice(spec.partitions, size=spec.idle_partitions, replace=False)
    active = np.setdiff1d(np.arange(spec.partitions, dtype=np.int32), idle.astype(np.int32))
    first, last = int(te[0]), int(te[-1])
    span = last - first
    length = round(spec.idle_fraction * span)
    margin = min(math.ceil(_IDLE_MARGIN * span), (span - length) // 2)
    for p in idle:
        start = int(rng.integers(first + margin, last - margin - length, endpoint=True))
        lo, hi = np.searchsorted(te, [start, start + length], side="left")
        sel = np.flatnonzero(partition[lo:hi] == p)
        sel += lo
        partition[sel] = active[rng.integers(0, len(active), size=sel.size)]


def _zipf_cdf(keys: int) -> NDArray[np.float64]:
    cdf = np.cumsum(np.arange(1, keys + 1, dtype=np.float64) ** -_ZIPF_EXPONENT)
    cdf /= cdf[-1]
    return cdf


def _zipf_keys(spec: SyntheticSpec, rng: np.random.Generator) -> NDArray[np.int32]:
    # Inverse-CDF sampling, ``key = searchsorted(cdf, u, "right")``, sped up with a guide table: with m
    # a power of two (so ``u * m`` is exact), u in [j/m, (j+1)/m) has its key in [guide[j], guide[j+1]],
    # so only draws whose bucket holds a CDF step need the binary search. Same result as plain searchsorted.
    cdf = _zipf_cdf(spec.keys)
    m = 1 << min(22, max(12, (64 * spec.keys).bit_length()))
    cdf *= m
    guide = np.searchsorted(cdf, np.arange(m + 1, dtype=np.float64), side="right")
    np.minimum(guide, spec.keys - 1, out=guide)
    step = guide[1:] != guide[:-1]
    u = rng.random(spec.events)
    u *= m
    bucket = u.astype(np.int32)
    key = guide.astype(np.int32)[bucket]
    unsure = np.flatnonzero(step[bucket])
    key[unsure] = np.searchsorted(cdf, u[unsure], side="right")
    np.minimum(key, spec.keys - 1, out=key)
    return key


def _median_delays(spec: SyntheticSpec) -> NDArray[np.float64]:
    # np.interp(i / (n - 1), fractions, medians), computed segment by segment (several times faster).
    n = spec.events
    xp = [f for f, _ in spec.delay_median_ms]
    fp = [m for _, m in spec.delay_median_ms]
    if xp[-1] < 1.0:
        xp.append(1.0)
        fp.append(fp[-1])
    last = max(n - 1, 1)
    bounds = [min(n, math.ceil(x * last)) for x in xp[:-1]] + [n]
    median = np.empty(n, dtype=np.float64)
    for k in range(len(xp) - 1):
        lo, hi = bounds[k], bounds[k + 1]
        slope = (fp[k + 1] - fp[k]) / (xp[k + 1] - xp[k])
        seg = median[lo:hi]
        seg[:] = np.arange(lo, hi, dtype=np.float64)
        seg *= slope / last
        seg += fp[k] - slope * xp[k]
    return median


def _delays(spec: SyntheticSpec, rng: np.random.Generator) -> NDArray[np.int64]:
    n = spec.events
    delay = rng.standard_normal(n)
    delay *= spec.delay_sigma
    np.exp(delay, out=delay)
    delay *= _median_delays(spec)
    stragglers = rng.choice(n, size=rng.binomial(n, spec.straggler_fraction), replace=False)
    delay[stragglers] *= spec.straggler_factor
    np.minimum(delay, float(_MAX_DELAY_MS), out=delay)
    return delay.astype(np.int64)


def _apply_bursts(
    spec: SyntheticSpec,
    rng: np.random.Generator,
    te: NDArray[np.int64],
    tp: NDArray[np.int64],
    delay: NDArray[np.int64],
    partition: NDArray[np.int32],
) -> None:
    first, last = int(te[0]), int(te[-1])
    latest_start = max(first, last - spec.burst_ms)
    for _ in range(spec.bursts):
        p = int(rng.integers(0, spec.partitions))
        start = int(rng.integers(first, latest_start, endpoint=True))
        end = start + spec.burst_ms
        lo, hi = np.searchsorted(te, [start, end], side="left")
        sel = np.flatnonzero(partition[lo:hi] == p)
        sel += lo
        tp[sel] = np.maximum(tp[sel], end + delay[sel])


def generate(spec: SyntheticSpec | None = None, **overrides: Any) -> SyntheticStream:
    """Generate a deterministic synthetic out-of-order stream.

    Parameters
    ----------
    spec : SyntheticSpec, optional
        The stream parameters; the default ``SyntheticSpec()`` when omitted.
    **overrides
        Field values replacing those of ``spec`` (``dataclasses.replace``), e.g.
        ``generate(events=5_000_000, seed=3)``.

    Returns
    -------
    SyntheticStream
        The events in arrival order (``tp_ms`` ascending, ties by ``event_id``).

    Raises
    ------
    ValueError
        If a field value is invalid.
    TypeError
        If an override names no field of ``SyntheticSpec``.

    Examples
    --------
    >>> s = generate(events=500, partitions=4, seed=1)
    >>> len(s), s.partition.dtype.name, s.te_ms.dtype.name
    (500, 'int32', 'int64')

    """
    if spec is None:
        spec = SyntheticSpec()
    if overrides:
        spec = dataclasses.replace(spec, **overrides)
    rng = np.random.default_rng(spec.seed)
    te = _event_times(spec, rng)
    partition = rng.integers(0, spec.partitions, size=spec.events, dtype=np.int32)
    _apply_idle(spec, rng, te, partition)
    key = _zipf_keys(spec, rng)
    value = rng.normal(spec.value_mean, spec.value_std, size=spec.events)
    delay = _delays(spec, rng)
    tp = te + delay
    _apply_bursts(spec, rng, te, tp, delay, partition)

    order = np.argsort(tp, kind="stable")
    columns: dict[str, NDArray[Any]] = {
        "event_id": order.astype(np.int64, copy=False),
        "partition": partition[order],
        "key": key[order],
        "te_ms": te[order],
        "tp_ms": tp[order],
        "value": value[order],
    }
    for arr in columns.values():
        arr.setflags(write=False)
    return SyntheticStream(**columns)


def describe(stream: SyntheticStream) -> dict[str, int | float]:
    """Summarise a stream.

    Parameters
    ----------
    stream : SyntheticStream
        A stream in arrival order, as returned by :func:`generate`.

    Returns
    -------
    dict
        ``events``, ``partitions`` and ``keys`` (distinct codes present), ``span_ms``
        (max - min event time), ``rate_per_s`` (events per second of event-time
        span, ``nan`` for a zero span), ``pct_out_of_order`` (percent of events whose
        event time is below the running maximum event time of earlier arrivals), and
        ``delay_p50_ms``, ``delay_p99_ms``, ``delay_max_ms`` (of ``tp_ms - te_ms``).

    Examples
    --------
    >>> d = describe(generate(events=1_000, seed=2))
    >>> d["events"], d["delay_max_ms"] >= d["delay_p99_ms"] >= d["delay_p50_ms"] >= 0
    (1000, True)

    """
    n = len(stream)
    te = stream.te_ms
    span = int(te.max() - te.min()) if n else 0
    if n > 1:
        running_max = np.maximum.accumulate(te)
        late = int(np.count_nonzero(te[1:] < running_max[:-1]))
    else:
        late = 0
    delay = stream.tp_ms - stream.te_ms
    p50, p99 = np.percentile(delay, [50.0, 99.0]) if n else (math.nan, math.nan)
    return {
        "events": n,
        "partitions": int(np.unique(stream.partition).size),
        "keys": int(np.unique(stream.key).size),
        "span_ms": span,
        "rate_per_s": n * 1000.0 / span if span > 0 else math.nan,
        "pct_out_of_order": 100.0 * late / n if n else 0.0,
        "delay_p50_ms": float(p50),
        "delay_p99_ms": float(p99),
        "delay_max_ms": int(delay.max()) if n else 0,
    }
