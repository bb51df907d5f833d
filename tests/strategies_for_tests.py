"""Hypothesis strategies shared by the property tests: random out-of-order streams and generator settings."""

import numpy as np
from hypothesis import strategies as st

BASE_MS = 1_700_000_000_000


@st.composite
def streams(draw, max_size=150):
    """(te, tp) int64 arrays in arrival order: tp nondecreasing, small delays with shifts and outliers."""
    n = draw(st.integers(0, max_size))
    gaps = draw(st.lists(st.integers(0, 60), min_size=n, max_size=n))
    regime = draw(st.integers(1, 400))
    delays = draw(st.lists(st.integers(-20, regime), min_size=n, max_size=n))
    if n and draw(st.booleans()):  # a regime shift half-way: delays jump
        jump = draw(st.integers(50, 2_000))
        delays = delays[: n // 2] + [d + jump for d in delays[n // 2 :]]
    tp = BASE_MS + np.cumsum(np.array(gaps, dtype=np.int64))
    te = tp - np.array(delays, dtype=np.int64)
    return te.astype(np.int64), tp.astype(np.int64)


PARAMS = {
    "periodic": st.fixed_dictionaries({"delay_ms": st.integers(0, 300), "period_ms": st.integers(1, 120)}),
    "adaptive": st.fixed_dictionaries(
        {
            "late_threshold": st.sampled_from([1.0, 0.5, 0.1, 0.01]),
            "sensitivity_change": st.sampled_from([1.0, 0.5, 0.1]),
            "warmup": st.integers(1, 40),
            "skew": st.sampled_from(["max", "mean"]),
            "sensitivity": st.sampled_from([1.0, 0.5, 0.002]),
            "heartbeat_ms": st.sampled_from([None, 1, 30, 200]),
        }
    ),
    "sliding": st.integers(1, 800).flatmap(
        lambda s: st.fixed_dictionaries(
            {
                "slide_window_ms": st.just(s),
                "initial_delay_ms": st.integers(1, s),
                "change_rate": st.sampled_from([1.0, 0.5, 0.1, 0.01, 0.001]),
                "rate_threshold": st.sampled_from([0.5, 5.0, 20.0, 80.0]),
                "rate_window_ms": st.integers(1, 2_000),
            }
        )
    ),
    "percentile": st.fixed_dictionaries(
        {
            "percentile": st.sampled_from([0.0, 1.0, 33.3, 50.0, 99.0, 100.0]),
            "horizon_ms": st.integers(1, 1_000),
            "period_ms": st.integers(1, 200),
        }
    ),
    "band": st.fixed_dictionaries({"band_ms": st.integers(1, 1_000), "idle_ms": st.integers(1, 300)}),
    "ingestion": st.fixed_dictionaries(
        {"max_event_time_lag_ms": st.integers(0, 500), "max_watermark_lag_ms": st.integers(1, 300)}
    ),
    "slo": st.fixed_dictionaries(
        {
            "late_slo_pct": st.sampled_from([0.5, 5.0, 30.0]),
            "initial_delay_ms": st.integers(0, 300),
            "warmup": st.integers(1, 30),
            "sample_size": st.integers(10, 40),
            "adwin_delta": st.sampled_from([0.002, 0.5, 1.0]),
            "horizon_ms": st.one_of(st.none(), st.integers(1, 200)),
            "straggler_factor": st.sampled_from([1.0, 3.0, 1e9]),
            "surge_factor": st.sampled_from([0.0, 2.0]),
            "surge_arrivals": st.integers(0, 50),
        }
    ),
    "fleet": st.fixed_dictionaries(
        {
            "late_slo_pct": st.sampled_from([0.5, 5.0, 30.0]),
            "initial_delay_ms": st.integers(0, 300),
            "period_ms": st.integers(1, 300),
            "memory": st.integers(10, 100),
            "prior": st.sampled_from([0.0, 5.0, 50.0]),
            "congestion": st.sampled_from([0.0, 1.0, 2.0]),
            "step_min_ms": st.integers(1, 500),
            "step_run": st.integers(1, 6),
            "lead": st.sampled_from([0.0, 1.0, 2.0, 10.0]),
            "follow_clock": st.sampled_from([0, 1]),
            "surge": st.sampled_from([0.0, 2.0, 5.0]),
        }
    ),
}

NAMES = list(PARAMS)
