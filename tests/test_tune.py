"""The tuner: lowest mean emit latency at a late target, the frontier, recency, the CLI and its plot."""

import json

import numpy as np
import pytest

from watermark.cli import main
from watermark.evaluate import WindowSpec, replay
from watermark.tune import TuneError, tune

W = WindowSpec(1_000)
DELAYS = {"periodic": [{"delay_ms": d, "period_ms": 10} for d in range(0, 1_001, 100)]}


def stream(n, max_delay, seed=0, start=0):
    rng = np.random.default_rng(seed)
    tp = start + np.arange(n, dtype=np.int64) * 20
    return tp - rng.integers(0, max_delay + 1, n), tp


def test_the_choice_is_the_smallest_delay_that_meets_the_target():
    te, tp = stream(5_000, 300)
    result = tune(te, tp, target_late_pct=0.5, window=W, space=DELAYS, recent_fraction=1.0)
    # Delays are uniform in [0, 300] ms: a 300 ms delay drops nothing, a 200 ms one more than the target.
    assert result.choice.params == {"delay_ms": 300, "period_ms": 10}
    assert result.choice.dropped_pct <= 0.5
    smaller = replay(
        te, tp, strategy="periodic", params={"delay_ms": 200, "period_ms": 10}, window=W
    ).summary()
    assert smaller["dropped_pct"] > 0.5


def test_a_looser_target_buys_a_lower_latency():
    te, tp = stream(5_000, 300)
    strict = tune(te, tp, target_late_pct=0.0, window=W, space=DELAYS, recent_fraction=1.0).choice
    loose = tune(te, tp, target_late_pct=40.0, window=W, space=DELAYS, recent_fraction=1.0).choice
    assert loose.mean_latency_ms < strict.mean_latency_ms
    assert loose.dropped_pct > strict.dropped_pct == 0.0


def test_the_frontier_holds_only_settings_no_other_beats_on_both_counts():
    te, tp = stream(3_000, 500, seed=3)
    result = tune(te, tp, target_late_pct=1.0, window=W, strategies=["periodic", "band"], recent_fraction=1.0)
    front = result.frontier
    assert front and result.choice in result.candidates
    for f in front:
        assert not any(
            c.dropped_pct <= f.dropped_pct and c.mean_latency_ms < f.mean_latency_ms
            for c in result.candidates
        )
    assert [f.dropped_pct for f in front] == sorted(f.dropped_pct for f in front)


def test_only_the_recent_part_of_a_drifting_history_counts_by_default():
    calm_after_storm = [
        np.concatenate(p)
        for p in zip(stream(3_000, 900, seed=1), stream(3_000, 100, seed=2, start=60_000), strict=True)
    ]
    te, tp = calm_after_storm
    recent = tune(te, tp, target_late_pct=0.5, window=W, space=DELAYS)
    whole = tune(te, tp, target_late_pct=0.5, window=W, space=DELAYS, recent_fraction=1.0)
    assert recent.history_events == 3_000 and whole.history_events == 6_000
    assert recent.choice.params["delay_ms"] == 100 < whole.choice.params["delay_ms"]


def test_an_unreachable_target_or_bad_settings_are_clear_errors():
    te, tp = stream(1_000, 300)
    with pytest.raises(TuneError, match="no setting keeps late tuples at or below 0.0 %"):
        tune(te, tp, target_late_pct=0.0, window=W, space={"periodic": [{"delay_ms": 0, "period_ms": 10}]})
    with pytest.raises(TuneError, match="recent_fraction"):
        tune(te, tp, target_late_pct=1.0, window=W, recent_fraction=0.0)
    with pytest.raises(TuneError, match="unknown strategy 'nope'"):
        tune(te, tp, target_late_pct=1.0, window=W, strategies=["nope"])
    with pytest.raises(TuneError, match="empty"):
        tune([], [], target_late_pct=1.0, window=W)


def test_the_cli_prints_a_choice_whose_params_replay_to_the_same_result(tmp_path, capsys):
    te, tp = stream(4_000, 400, seed=5)
    path = tmp_path / "s.csv"
    path.write_text("te,tp\n" + "".join(f"{a},{b}\n" for a, b in zip(te, tp, strict=True)))
    plot = tmp_path / "tradeoff.png"
    flags = ["--event-time", "te", "--arrival-time", "tp", "--window-ms", "1000"]
    args = ["tune", str(path), *flags, "--target-late-pct", "0.5", "--strategies", "periodic,ingestion"]
    assert main([*args, "--recent-fraction", "1", "--json", "--plot", str(plot)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= {"strategy", "params", "dropped_pct", "emit_latency_ms", "frontier"}
    assert out["dropped_pct"] <= 0.5 and out["strategy"] in {"periodic", "ingestion"}
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    settings = [x for k, v in out["params"].items() for x in ("--set", f"{k}={v}")]
    assert main(["replay", str(path), *flags, "--strategy", out["strategy"], *settings, "--json"]) == 0
    replayed = json.loads(capsys.readouterr().out)
    assert replayed["dropped_pct"] == out["dropped_pct"]
    assert replayed["emit_latency_ms"] == out["emit_latency_ms"]
