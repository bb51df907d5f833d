from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from watermark.streams.synthetic import SyntheticSpec, SyntheticStream, describe, generate

COLUMNS = ("event_id", "partition", "key", "te_ms", "tp_ms", "value")
DTYPES = {
    "event_id": np.int64,
    "partition": np.int32,
    "key": np.int32,
    "te_ms": np.int64,
    "tp_ms": np.int64,
    "value": np.float64,
}


def by_event_id(stream: SyntheticStream, name: str) -> np.ndarray:
    """Column `name` reordered into generation (event_id) order."""
    column: np.ndarray = getattr(stream, name)
    out = np.empty_like(column)
    out[stream.event_id] = column
    return out


def assert_invariants(stream: SyntheticStream, n: int) -> None:
    assert len(stream) == n
    for name, dtype in DTYPES.items():
        arr = getattr(stream, name)
        assert arr.dtype == dtype, name
        assert arr.shape == (n,), name
    # event_id is a permutation of 0..n-1
    assert np.array_equal(np.sort(stream.event_id), np.arange(n))
    # arrival order: tp nondecreasing, ties broken by event_id
    dtp = np.diff(stream.tp_ms)
    did = np.diff(stream.event_id)
    assert np.all((dtp > 0) | ((dtp == 0) & (did > 0)))
    assert np.all(stream.tp_ms >= stream.te_ms)
    # event time is nondecreasing in generation order
    assert np.all(np.diff(by_event_id(stream, "te_ms")) >= 0)


def max_gap(te: np.ndarray) -> tuple[int, int, int]:
    """Largest gap between consecutive sorted event times: (length, left, right)."""
    te = np.sort(te)
    gaps = np.diff(te)
    i = int(np.argmax(gaps))
    return int(gaps[i]), int(te[i]), int(te[i + 1])


# --- determinism -----------------------------------------------------------------------------------


def test_same_seed_gives_identical_arrays() -> None:
    a = generate(events=5_000, seed=11)
    b = generate(SyntheticSpec(events=5_000, seed=11))
    for name in COLUMNS:
        assert np.array_equal(getattr(a, name), getattr(b, name)), name


def test_different_seed_gives_different_arrays() -> None:
    a = generate(events=5_000, seed=1)
    b = generate(events=5_000, seed=2)
    for name in ("partition", "key", "te_ms", "tp_ms", "value"):
        assert not np.array_equal(getattr(a, name), getattr(b, name)), name


def test_overrides_apply_to_given_spec() -> None:
    base = SyntheticSpec(events=2_000, partitions=3, seed=5)
    a = generate(base, seed=6, keys=10)
    b = generate(dataclasses.replace(base, seed=6, keys=10))
    for name in COLUMNS:
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert int(a.partition.max()) <= 2
    assert int(a.key.max()) <= 9


def test_unknown_override_is_rejected() -> None:
    with pytest.raises(TypeError):
        generate(events=10, not_a_field=1)


# --- basic shape ------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 7, 1_000, 12_345])
def test_exact_count_order_and_dtypes(n: int) -> None:
    stream = generate(events=n, seed=n)
    assert_invariants(stream, n)
    assert int(stream.te_ms[stream.event_id == 0][0]) == SyntheticSpec().start_ms


def test_default_spec_and_codes_in_range() -> None:
    stream = generate(events=20_000)
    assert_invariants(stream, 20_000)
    assert set(np.unique(stream.partition).tolist()) == set(range(8))
    assert int(stream.key.min()) >= 0
    assert int(stream.key.max()) < 1_000


def test_arrays_are_read_only() -> None:
    stream = generate(events=100)
    with pytest.raises(ValueError, match="read-only"):
        stream.tp_ms[0] = 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        stream.tp_ms = stream.te_ms  # type: ignore[misc]


@settings(max_examples=25, deadline=None)
@given(
    events=st.integers(1, 3_000),
    partitions=st.integers(1, 6),
    idle_frac=st.floats(0.0, 1.0),
    bursts=st.integers(0, 5),
    burst_ms=st.integers(0, 5_000),
    seed=st.integers(0, 2**32),
    sigma=st.floats(0.0, 3.0),
    straggler_fraction=st.floats(0.0, 1.0),
)
def test_invariants_hold_for_random_specs(
    events: int,
    partitions: int,
    idle_frac: float,
    bursts: int,
    burst_ms: int,
    seed: int,
    sigma: float,
    straggler_fraction: float,
) -> None:
    spec = SyntheticSpec(
        events=events,
        partitions=partitions,
        keys=17,
        seed=seed,
        rate_per_s=2_000.0,
        idle_partitions=partitions - 1,
        idle_fraction=idle_frac,
        bursts=bursts,
        burst_ms=burst_ms,
        delay_sigma=sigma,
        straggler_fraction=straggler_fraction,
    )
    stream = generate(spec)
    assert_invariants(stream, events)
    assert int(stream.partition.min()) >= 0
    assert int(stream.partition.max()) < partitions
    assert int(stream.key.max()) < 17


# --- the model -----------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_idle_partition_has_a_silence(seed: int) -> None:
    spec = SyntheticSpec(
        events=20_000, partitions=4, idle_partitions=1, idle_fraction=0.2, bursts=0, seed=seed
    )
    stream = generate(spec)
    te_min, te_max = int(stream.te_ms.min()), int(stream.te_ms.max())
    span = te_max - te_min
    silence = round(0.2 * span)
    gaps = {p: max_gap(stream.te_ms[stream.partition == p]) for p in range(4)}
    silent = [p for p, (length, _, _) in gaps.items() if length >= silence]
    assert len(silent) == 1, gaps
    (p,) = silent
    _, left, right = gaps[p]
    # not at the very start or end of the stream
    assert left > te_min
    assert right < te_max
    # the other partitions keep producing during the silence ...
    inside = (stream.te_ms > left) & (stream.te_ms < right)
    assert np.count_nonzero(inside) > 0.05 * len(stream)
    assert set(np.unique(stream.partition[inside]).tolist()) == set(range(4)) - {p}
    # ... and have no long gaps of their own
    for q, (length, _, _) in gaps.items():
        if q != p:
            assert length < 0.01 * span


def test_several_idle_partitions() -> None:
    spec = SyntheticSpec(events=30_000, partitions=5, idle_partitions=2, idle_fraction=0.1, bursts=0, seed=9)
    stream = generate(spec)
    span = int(stream.te_ms.max() - stream.te_ms.min())
    lengths = [max_gap(stream.te_ms[stream.partition == p])[0] for p in range(5)]
    assert sum(length >= round(0.1 * span) for length in lengths) == 2
    assert sum(length < 0.01 * span for length in lengths) == 3


def test_no_idle_partitions_means_no_silence() -> None:
    stream = generate(events=20_000, partitions=4, idle_partitions=0, seed=3)
    span = int(stream.te_ms.max() - stream.te_ms.min())
    for p in range(4):
        assert max_gap(stream.te_ms[stream.partition == p])[0] < 0.01 * span


def test_delay_median_drifts() -> None:
    # default schedule: 40 ms -> 250 ms at mid-stream -> 80 ms (bursts off: they would hold back a large
    # share of such a short stream and blur the medians)
    stream = generate(events=40_000, seed=4, bursts=0)
    delay = by_event_id(stream, "tp_ms") - by_event_id(stream, "te_ms")
    n = len(stream)
    start = float(np.median(delay[: n // 20]))
    middle = float(np.median(delay[int(0.475 * n) : int(0.525 * n)]))
    end = float(np.median(delay[-(n // 20) :]))
    assert 30 <= start <= 60
    assert 200 <= middle <= 300
    assert middle > 3 * start
    assert end < middle / 2


def test_rate_changes() -> None:
    n = 30_000
    stream = generate(events=n, seed=5, bursts=0)  # default: x1 from 0.0, x3 from 0.35, x0.5 from 0.7
    te = by_event_id(stream, "te_ms")

    def rate(lo: float, hi: float) -> float:
        i, j = math.ceil(lo * n), math.ceil(hi * n) - 1
        return (j - i) * 1000.0 / float(te[j] - te[i])

    first, second, third = rate(0.0, 0.35), rate(0.35, 0.7), rate(0.7, 1.0)
    assert 18_000 < first < 22_000
    assert 2.5 < second / first < 3.5
    assert 0.4 < third / first < 0.6


def test_bursts_hold_back_one_partition_and_release_it_together() -> None:
    common: dict[str, Any] = {
        "events": 50_000,
        "rate_per_s": 5_000.0,
        "rate_changes": ((0.0, 1.0),),
        "delay_median_ms": ((0.0, 50.0),),
        "delay_sigma": 0.2,
        "straggler_fraction": 0.0,
        "idle_partitions": 0,
        "burst_ms": 3_000,
        "seed": 6,
    }
    calm = generate(bursts=0, **common)
    bursty = generate(bursts=3, **common)
    # bursts are drawn last: everything else is unchanged
    for name in ("te_ms", "partition", "key", "value"):
        assert np.array_equal(by_event_id(calm, name), by_event_id(bursty, name)), name

    te = by_event_id(calm, "te_ms")
    base_delay = by_event_id(calm, "tp_ms") - te
    delay = by_event_id(bursty, "tp_ms") - te
    median = float(np.median(base_delay))
    assert 40 <= median <= 60
    assert int(base_delay.max()) < 10 * median

    held = delay > base_delay
    assert np.count_nonzero(held) > 100
    assert int(delay.max()) > 20 * median
    # held events are released together: arrival minus their own delay is one of <= 3 burst ends
    releases = np.unique((by_event_id(bursty, "tp_ms") - base_delay)[held])
    assert 1 <= releases.size <= 3
    partition = by_event_id(bursty, "partition")
    assert np.unique(partition[held]).size <= 3
    for end in releases:
        members = held & (by_event_id(bursty, "tp_ms") - base_delay == end)
        assert int(te[members].max()) < int(end)
        assert int(end) - int(te[members].min()) <= 3_000


def test_stragglers() -> None:
    n = 40_000
    stream = generate(
        events=n,
        delay_median_ms=((0.0, 100.0),),
        delay_sigma=0.0,
        straggler_fraction=0.01,
        straggler_factor=25.0,
        bursts=0,
        seed=8,
    )
    delay = stream.tp_ms - stream.te_ms
    assert set(np.unique(delay).tolist()) == {100, 2_500}
    count = int(np.count_nonzero(delay == 2_500))
    assert abs(count - 0.01 * n) < 5 * math.sqrt(0.01 * n)


def test_keys_are_zipf_skewed_and_values_normal() -> None:
    stream = generate(events=60_000, keys=50, seed=10)
    counts = np.bincount(stream.key, minlength=50)
    assert int(np.argmax(counts)) == 0
    assert 1.8 < counts[0] / counts[1] < 2.5  # 2 ** 1.1 ~ 2.14
    assert 8.0 < counts[0] / counts[9] < 17.0  # 10 ** 1.1 ~ 12.6
    assert 99.0 < float(stream.value.mean()) < 101.0
    assert 14.0 < float(stream.value.std()) < 16.0


# --- validation -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"events": 0}, "events"),
        ({"events": 1.5}, "events"),
        ({"events": True}, "events"),
        ({"partitions": 0}, "partitions"),
        ({"keys": 0}, "keys"),
        ({"seed": -1}, "seed"),
        ({"start_ms": -5}, "start_ms"),
        ({"rate_per_s": 0.0}, "rate_per_s"),
        ({"rate_per_s": float("nan")}, "rate_per_s"),
        ({"rate_changes": ()}, "rate_changes"),
        ({"rate_changes": ((0.1, 1.0),)}, "rate_changes"),
        ({"rate_changes": ((0.0, 1.0), (0.5, 0.0))}, "rate_changes"),
        ({"rate_changes": ((0.0, 1.0), (0.6, 2.0), (0.5, 1.0))}, "rate_changes"),
        ({"rate_changes": ((0.0, 1.0), (1.5, 2.0))}, "rate_changes"),
        ({"rate_changes": ((0.0,),)}, "rate_changes"),
        ({"delay_median_ms": ((0.0, -1.0),)}, "delay_median_ms"),
        ({"delay_median_ms": ((0.5, 10.0), (1.0, 20.0))}, "delay_median_ms"),
        ({"delay_sigma": -0.1}, "delay_sigma"),
        ({"straggler_fraction": 1.5}, "straggler_fraction"),
        ({"straggler_factor": 0.5}, "straggler_factor"),
        ({"bursts": -1}, "bursts"),
        ({"burst_ms": -1}, "burst_ms"),
        ({"idle_partitions": 8}, "idle_partitions"),
        ({"partitions": 2, "idle_partitions": 2}, "idle_partitions"),
        ({"idle_partitions": -1}, "idle_partitions"),
        ({"idle_fraction": -0.1}, "idle_fraction"),
        ({"idle_fraction": 1.01}, "idle_fraction"),
        ({"value_mean": float("inf")}, "value_mean"),
        ({"value_std": -1.0}, "value_std"),
    ],
)
def test_invalid_spec_raises_value_error_naming_field(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=rf"^{field}\b"):
        SyntheticSpec(**overrides)
    with pytest.raises(ValueError, match=rf"^{field}\b"):
        generate(**overrides)


def test_error_message_style() -> None:
    with pytest.raises(ValueError, match=r"^events must be >= 1, got 0$"):
        SyntheticSpec(events=0)


def test_schedules_are_normalised() -> None:
    spec = SyntheticSpec(rate_changes=[[0, 1], [0.5, 2]])  # type: ignore[arg-type]
    assert spec.rate_changes == ((0.0, 1.0), (0.5, 2.0))
    assert hash(spec) == hash(SyntheticSpec(rate_changes=((0.0, 1.0), (0.5, 2.0))))


def test_too_low_rate_is_reported() -> None:
    with pytest.raises(ValueError, match="rate_per_s"):
        generate(events=10, rate_per_s=1e-300)


# --- output helpers -------------------------------------------------------------------------------


def test_to_arrow() -> None:
    pa = pytest.importorskip("pyarrow")
    stream = generate(events=1_000, seed=12)
    table = stream.to_arrow()
    assert table.column_names == ["event_id", "partition", "key", "event_time_ms", "arrival_time_ms", "value"]
    assert table.schema.types == [pa.int64(), pa.int32(), pa.int32(), pa.int64(), pa.int64(), pa.float64()]
    assert table.num_rows == 1_000
    assert np.array_equal(table["event_time_ms"].to_numpy(), stream.te_ms)
    assert np.array_equal(table["arrival_time_ms"].to_numpy(), stream.tp_ms)
    assert np.array_equal(table["event_id"].to_numpy(), stream.event_id)


def test_describe_is_consistent() -> None:
    stream = generate(events=5_000, seed=13)
    d = describe(stream)
    assert set(d) == {
        "events",
        "partitions",
        "keys",
        "span_ms",
        "rate_per_s",
        "pct_out_of_order",
        "delay_p50_ms",
        "delay_p99_ms",
        "delay_max_ms",
    }
    assert d["events"] == len(stream) == 5_000
    assert d["partitions"] == 8
    assert 1 <= d["keys"] <= 1_000
    assert d["span_ms"] == int(stream.te_ms.max() - stream.te_ms.min())
    assert d["rate_per_s"] == pytest.approx(5_000 * 1000.0 / d["span_ms"])
    delay = stream.tp_ms - stream.te_ms
    assert d["delay_max_ms"] == int(delay.max())
    assert d["delay_p50_ms"] == pytest.approx(float(np.median(delay)))
    assert d["delay_p50_ms"] <= d["delay_p99_ms"] <= d["delay_max_ms"]
    # brute-force out-of-order percentage
    late, running = 0, None
    for te in stream.te_ms.tolist():
        if running is not None and te < running:
            late += 1
        running = te if running is None else max(running, te)
    assert d["pct_out_of_order"] == pytest.approx(100.0 * late / len(stream))
    assert 0.0 < d["pct_out_of_order"] < 100.0


def test_describe_in_order_stream() -> None:
    stream = generate(
        events=2_000, delay_median_ms=((0.0, 30.0),), delay_sigma=0.0, straggler_fraction=0.0, bursts=0
    )
    d = describe(stream)
    assert d["pct_out_of_order"] == 0.0
    assert d["delay_p50_ms"] == d["delay_p99_ms"] == d["delay_max_ms"] == 30


def test_single_event() -> None:
    stream = generate(events=1)
    d = describe(stream)
    assert d["events"] == 1
    assert d["span_ms"] == 0
    assert math.isnan(d["rate_per_s"])
    assert d["pct_out_of_order"] == 0.0
