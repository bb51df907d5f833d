"""Perturbation families: seeded, realistic damage to a recorded stream, for evaluations that cannot flatter.

Every function is pure: it takes a stream as numpy arrays in arrival order (``te`` event time and ``tp``
arrival time, int64 ms, and ``key``, the device each record comes from), a ``seed`` and the family's
parameters, and returns new arrays ``(te, tp, key)`` in arrival order (``tp`` ascending; ties keep the input
order, records added or moved by the perturbation come after the input's records of the same instant). The
same seed gives the same stream. :func:`group_partitions` returns a partition column instead.

The models (each function's docstring gives its parameters):

* :func:`clock_steps` -- a device's event-time clock jumps back or forward by seconds at a random instant and
  stays wrong (a failed NTP sync, a manual clock change); arrivals are untouched.
* :func:`retransmits` -- a share of records is sent again after a retry interval (a lost acknowledgement):
  duplicates with the same event time, arriving later.
* :func:`offline_flush` -- a device goes offline for minutes, buffering its records, then delivers the backlog
  at once when it reconnects.
* :func:`congestion` -- network congestion episodes at random times with random lengths: every arrival during
  an episode is held back by a fixed delay plus jitter.
* :func:`stops` -- some devices stop for good mid-stream (switched off, decommissioned).
* :func:`group_partitions` -- several devices share one source partition (a Kafka partition carrying several
  keys).

Examples
--------
>>> import numpy as np
>>> te = np.array([0, 100, 200, 300]); tp = te + 50; key = np.array(["a", "b", "a", "b"])
>>> te2, tp2, key2 = retransmits(te, tp, key, seed=1, share=0.5, retry_ms=(1_000, 1_000))
>>> te2.tolist(), tp2.tolist()
([0, 100, 200, 300, 100, 200], [50, 150, 250, 350, 1150, 1250])

"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

Stream = tuple[NDArray[np.int64], NDArray[np.int64], NDArray[Any]]


def _inputs(te: ArrayLike, tp: ArrayLike, key: ArrayLike) -> Stream:
    te_a = np.asarray(te, dtype=np.int64)
    tp_a = np.asarray(tp, dtype=np.int64)
    key_a = np.asarray(key)
    if not te_a.ndim == tp_a.ndim == key_a.ndim == 1 or not te_a.size == tp_a.size == key_a.size:
        msg = (
            f"te, tp and key must be 1-D arrays of one length, got {te_a.shape}, {tp_a.shape}, {key_a.shape}"
        )
        raise ValueError(msg)
    if tp_a.size > 1 and bool(np.any(np.diff(tp_a) < 0)):
        msg = "the stream must be in arrival order (tp ascending)"
        raise ValueError(msg)
    return te_a, tp_a, key_a


def _share(name: str, value: float) -> float:
    if not 0.0 <= value <= 1.0:
        msg = f"{name} must be within [0, 1], got {value}"
        raise ValueError(msg)
    return float(value)


def _range(name: str, value: tuple[int, int]) -> tuple[int, int]:
    lo, hi = (int(v) for v in value)
    if not 0 <= lo <= hi:
        msg = f"{name} must be (low, high) with 0 <= low <= high, got {value}"
        raise ValueError(msg)
    return lo, hi


def _resorted(te: NDArray[np.int64], tp: NDArray[np.int64], key: NDArray[Any]) -> Stream:
    order = np.argsort(tp, kind="stable")
    return te[order], tp[order], key[order]


def _chosen_keys(key: NDArray[Any], share: float, rng: np.random.Generator) -> NDArray[Any]:
    """``round(share * keys)`` distinct keys (at least one when share > 0), in a seeded random order."""
    names = np.unique(key)
    count = min(names.size, max(1 if share > 0 else 0, round(share * names.size)))
    return names[rng.permutation(names.size)[:count]]


def clock_steps(
    te: ArrayLike,
    tp: ArrayLike,
    key: ArrayLike,
    *,
    seed: int,
    share: float = 0.5,
    step_ms: tuple[int, int] = (1_000, 10_000),
) -> Stream:
    """Device clock steps: from a random instant on, a device's event times are off by a signed step.

    Parameters
    ----------
    te, tp, key
        The stream in arrival order.
    seed
        Seed of the PCG64 generator.
    share
        Share of the devices whose clock steps (at least one device when > 0).
    step_ms
        Range of the step's size, drawn uniformly; its sign (back or forward) is a fair coin. A forward step
        puts event times ahead of arrival times, as a fast device clock does.

    Each chosen device steps once, at an arrival drawn uniformly between 10 % and 90 % of its own arrivals,
    and stays stepped: every record from that arrival on has ``te + step``. Arrival times and order are kept.

    Examples
    --------
    >>> te, tp, key = clock_steps([0, 10, 20, 30], [5, 15, 25, 35], ["a"] * 4, seed=0, step_ms=(500, 500))
    >>> te.tolist(), tp.tolist()
    ([0, 10, 520, 530], [5, 15, 25, 35])

    """
    te_a, tp_a, key_a = _inputs(te, tp, key)
    _share("share", share)
    lo, hi = _range("step_ms", step_ms)
    rng = np.random.default_rng(seed)
    out = te_a.copy()
    for device in _chosen_keys(key_a, share, rng):
        rows = np.flatnonzero(key_a == device)
        at = int(rng.integers(int(0.1 * rows.size), max(int(0.9 * rows.size), int(0.1 * rows.size) + 1)))
        step = int(rng.integers(lo, hi, endpoint=True)) * (1 if rng.random() < 0.5 else -1)
        out[rows[at:]] += step
    return out, tp_a.copy(), key_a.copy()


def retransmits(
    te: ArrayLike,
    tp: ArrayLike,
    key: ArrayLike,
    *,
    seed: int,
    share: float = 0.03,
    retry_ms: tuple[int, int] = (1_000, 5_000),
) -> Stream:
    """Retransmitted records: a share of records arrives a second time after a retry interval.

    Parameters
    ----------
    te, tp, key
        The stream in arrival order.
    seed
        Seed of the PCG64 generator.
    share
        Share of the records retransmitted (``round(share * n)`` records, drawn without replacement).
    retry_ms
        Range of the retry interval, drawn uniformly per duplicate: the duplicate arrives at ``tp + retry``
        with the original's event time and key.

    The result has ``n + round(share * n)`` records, re-sorted by arrival (a duplicate after the input's
    records of the same instant).

    """
    te_a, tp_a, key_a = _inputs(te, tp, key)
    _share("share", share)
    lo, hi = _range("retry_ms", retry_ms)
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(te_a.size, size=round(share * te_a.size), replace=False))
    retry = rng.integers(lo, hi, size=rows.size, endpoint=True)
    te_o = np.concatenate([te_a, te_a[rows]])
    tp_o = np.concatenate([tp_a, tp_a[rows] + retry])
    key_o = np.concatenate([key_a, key_a[rows]])
    return _resorted(te_o, tp_o, key_o)


def offline_flush(
    te: ArrayLike,
    tp: ArrayLike,
    key: ArrayLike,
    *,
    seed: int,
    episodes: int = 2,
    offline_ms: tuple[int, int] = (60_000, 180_000),
    spacing_ms: int = 1,
) -> Stream:
    """Offline devices that flush a buffer: a device stops sending for minutes, then sends its backlog.

    Parameters
    ----------
    te, tp, key
        The stream in arrival order.
    seed
        Seed of the PCG64 generator.
    episodes
        Number of offline episodes, each on a device drawn uniformly (episodes may share a device).
    offline_ms
        Range of an episode's length, drawn uniformly.
    spacing_ms
        Arrival spacing of the flushed backlog (0: all at one instant).

    An episode starts at an instant drawn uniformly over the stream's arrival span (minus its length, so it
    ends inside the stream). The device's records that would have arrived during ``[start, start + length)``
    arrive at ``start + length + i * spacing_ms`` instead, ``i`` their rank in the backlog (original arrival
    order): a gap, then a burst. Event times are kept.

    Examples
    --------
    >>> te = [0, 100, 200, 300, 400]; key = ["a", "b", "a", "a", "b"]
    >>> te2, tp2, key2 = offline_flush(te, te, key, seed=3, episodes=1, offline_ms=(250, 250))
    >>> # b is offline during [12, 262): its record of 100 arrives with the flush at 262
    >>> list(zip(tp2.tolist(), key2.tolist(), te2.tolist()))
    [(0, 'a', 0), (200, 'a', 200), (262, 'b', 100), (300, 'a', 300), (400, 'b', 400)]

    """
    te_a, tp_a, key_a = _inputs(te, tp, key)
    lo, hi = _range("offline_ms", offline_ms)
    if episodes < 0 or spacing_ms < 0:
        msg = f"episodes and spacing_ms must be >= 0, got {episodes} and {spacing_ms}"
        raise ValueError(msg)
    rng = np.random.default_rng(seed)
    names = np.unique(key_a)
    out = tp_a.copy()
    if tp_a.size == 0:
        return te_a.copy(), out, key_a.copy()
    first, last = int(tp_a[0]), int(tp_a[-1])
    for _ in range(episodes):
        device = names[int(rng.integers(0, names.size))]
        length = int(rng.integers(lo, hi, endpoint=True))
        start = int(rng.integers(first, max(first, last - length), endpoint=True))
        rows = np.flatnonzero((key_a == device) & (out >= start) & (out < start + length))
        out[rows] = start + length + spacing_ms * np.arange(rows.size, dtype=np.int64)
    return _resorted(te_a.copy(), out, key_a.copy())


def congestion(
    te: ArrayLike,
    tp: ArrayLike,
    key: ArrayLike,
    *,
    seed: int,
    mean_gap_ms: int = 120_000,
    episode_ms: tuple[int, int] = (20_000, 60_000),
    hold_ms: int = 1_500,
    jitter_ms: int = 300,
) -> Stream:
    """Congestion episodes: at random times, for random lengths, every arrival is held back.

    Parameters
    ----------
    te, tp, key
        The stream in arrival order.
    seed
        Seed of the PCG64 generator.
    mean_gap_ms
        The number of episodes is Poisson with mean ``span / mean_gap_ms`` (at least one), ``span`` the
        stream's arrival span; their starts are uniform over the span.
    episode_ms
        Range of an episode's length, drawn uniformly.
    hold_ms, jitter_ms
        An arrival inside an episode is held back ``hold_ms`` plus a uniform ``[0, jitter_ms]``.

    The stream is re-sorted by the new arrival times (the previous benchmark's ``congested``, with episodes at
    random instead of every other 90 s).

    """
    te_a, tp_a, key_a = _inputs(te, tp, key)
    lo, hi = _range("episode_ms", episode_ms)
    if mean_gap_ms <= 0 or hold_ms < 0 or jitter_ms < 0:
        msg = (
            f"mean_gap_ms must be > 0 and hold_ms, jitter_ms >= 0, got {mean_gap_ms}, {hold_ms}, {jitter_ms}"
        )
        raise ValueError(msg)
    rng = np.random.default_rng(seed)
    if tp_a.size == 0:
        return te_a.copy(), tp_a.copy(), key_a.copy()
    first, last = int(tp_a[0]), int(tp_a[-1])
    count = max(1, int(rng.poisson((last - first) / mean_gap_ms)))
    starts = rng.integers(first, last, size=count, endpoint=True)
    lengths = rng.integers(lo, hi, size=count, endpoint=True)
    inside = np.zeros(tp_a.size, np.bool_)
    for s, n in zip(starts.tolist(), lengths.tolist(), strict=True):
        inside |= (tp_a >= s) & (tp_a < s + n)
    held = tp_a + np.where(inside, hold_ms + rng.integers(0, jitter_ms, size=tp_a.size, endpoint=True), 0)
    return _resorted(te_a.copy(), held, key_a.copy())


def stops(
    te: ArrayLike,
    tp: ArrayLike,
    key: ArrayLike,
    *,
    seed: int,
    share: float = 0.25,
) -> Stream:
    """Keys that stop: a share of the devices sends nothing after a random instant.

    Parameters
    ----------
    te, tp, key
        The stream in arrival order.
    seed
        Seed of the PCG64 generator.
    share
        Share of the devices that stop (at least one when > 0).

    Each chosen device stops at an instant drawn uniformly between 20 % and 80 % of the stream's arrival
    span: its records arriving from then on are removed.

    Examples
    --------
    >>> t = [0, 10, 20, 30, 40, 50]
    >>> te, tp, key = stops(t, t, list("ababab"), seed=0, share=0.5)
    >>> key.tolist()
    ['a', 'b', 'a', 'b', 'b']

    """
    te_a, tp_a, key_a = _inputs(te, tp, key)
    _share("share", share)
    rng = np.random.default_rng(seed)
    keep = np.ones(te_a.size, np.bool_)
    if tp_a.size == 0:
        return te_a.copy(), tp_a.copy(), key_a.copy()
    first, span = int(tp_a[0]), int(tp_a[-1] - tp_a[0])
    for device in _chosen_keys(key_a, share, rng):
        at = first + int(rng.integers(int(0.2 * span), int(0.8 * span), endpoint=True))
        keep &= ~((key_a == device) & (tp_a >= at))
    return te_a[keep], tp_a[keep], key_a[keep]


def group_partitions(key: ArrayLike, *, seed: int, keys_per_partition: int = 4) -> NDArray[np.int64]:
    """Many keys per partition: the devices, shuffled, share partitions ``keys_per_partition`` at a time.

    Returns the partition code (``0 .. ceil(devices / keys_per_partition) - 1``) of each record; every key
    lives in one partition (keyed partitioning).

    Examples
    --------
    >>> group_partitions(["a", "b", "c", "a", "d"], seed=0, keys_per_partition=2).tolist()
    [1, 0, 0, 1, 1]

    """
    key_a = np.asarray(key)
    if keys_per_partition < 1:
        msg = f"keys_per_partition must be >= 1, got {keys_per_partition}"
        raise ValueError(msg)
    names, codes = np.unique(key_a, return_inverse=True)
    slot = np.random.default_rng(seed).permutation(names.size)
    out: NDArray[np.int64] = (slot[codes] // keys_per_partition).astype(np.int64)
    return out
