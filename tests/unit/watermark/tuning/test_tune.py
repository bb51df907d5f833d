"""The tuner: lowest mean emit latency at a late target, the frontier, recency, the CLI and its plot."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from watermark.cli.main import main
from watermark.evaluation.replay import WindowSpec, replay
from watermark.strategies.registry import monotone_params
from watermark.tuning import workers as workers_module
from watermark.tuning.rule import Candidate, one_off_burst, stable_choice
from watermark.tuning.tune import TuneError, tune

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
    assert replayed["emit_latency_charged_ms"] == out["emit_latency_ms"]  # stuck windows charged


def test_slo_settings_without_a_target_are_tried_at_fractions_of_the_tuners_target():
    rng = np.random.default_rng(1)
    tp = np.arange(0, 60_000, 20, dtype=np.int64)
    te = tp - rng.integers(0, 200, tp.size)
    result = tune(
        te, tp, target_late_pct=1.0, window=WindowSpec(1_000), space={"slo": [{"sample_size": 500}]}
    )
    tried = sorted(c.params["late_slo_pct"] for c in result.candidates)
    assert tried == [0.5, 0.7, 0.85, 1.0]
    assert result.choice.dropped_pct <= 1.0


def test_with_partitions_the_choice_is_never_worse_than_one_global_generator():
    # Two devices, one 300 ms behind the other: the minimum over partitions waits for the slow one, a global
    # generator or partition-scoped firing does not. Every mode is measured, the global one included.
    rng = np.random.default_rng(2)
    tp = np.arange(0, 40_000, 25, dtype=np.int64)
    dev = np.where(np.arange(tp.size) % 2 == 0, "a", "b")
    te = tp - rng.integers(0, 50, tp.size) - np.where(dev == "b", 300, 0)
    space = {"periodic": [{"delay_ms": d, "period_ms": 10} for d in range(0, 501, 10)]}
    result = tune(te, tp, target_late_pct=0.5, window=WindowSpec(1_000), space=space, partition=dev, key=dev)
    modes = {c.partition_mode for c in result.candidates}
    assert modes == {"min", "global", "scoped"}
    best_global = min(
        c.mean_latency_ms for c in result.candidates if c.partition_mode == "global" and c.dropped_pct <= 0.5
    )
    assert result.choice.mean_latency_ms <= best_global
    assert result.as_dict()["partition_mode"] == result.choice.partition_mode


def test_scoped_firing_is_not_offered_when_a_key_spans_partitions():
    tp = np.arange(0, 10_000, 10, dtype=np.int64)
    te = tp - 5
    part = np.where(np.arange(tp.size) % 2 == 0, "p0", "p1")
    key = np.where(np.arange(tp.size) % 3 == 0, "k0", "k1")
    space = {"periodic": [{"delay_ms": 10, "period_ms": 10}]}
    result = tune(te, tp, target_late_pct=1.0, window=WindowSpec(1_000), space=space, partition=part, key=key)
    assert {c.partition_mode for c in result.candidates} == {"min", "global"}


def test_key_scoped_firing_is_measured_when_keys_share_a_partition_and_chosen_when_it_is_faster():
    # Four devices in one partition, each trailing by its own offset; each firing by its own watermark needs
    # no delay, any mode judging by the partition (or the stream) needs the largest offset.
    tp = np.arange(0, 40_000, 10, dtype=np.int64)
    dev = np.array(["a", "b", "c", "d"])[np.arange(tp.size) % 4]
    te = tp - np.select([dev == "b", dev == "c", dev == "d"], [100, 200, 300], 0)
    space = {"periodic": [{"delay_ms": d, "period_ms": 10} for d in range(0, 401, 50)]}
    one = ["p"] * tp.size
    result = tune(te, tp, target_late_pct=0.5, window=WindowSpec(1_000), space=space, partition=one, key=dev)
    assert {c.partition_mode for c in result.candidates} == {"min", "global", "scoped", "keyed"}
    assert result.choice.partition_mode == "keyed" and result.choice.params["delay_ms"] == 0


def test_a_setting_whose_late_share_drifts_within_the_history_is_passed_over_for_a_stable_one_within_2x():
    # Calm first half (lag < 20 ms), disordered second half (lag up to 300 ms). With a 60 ms delay about 28 %
    # of all tuples are late, within a 45 % target overall, but about 56 % of the second half: unstable, so
    # the slower 100 ms setting, which keeps the target on every sub-period at well under twice the mean
    # latency (about 150 ms against 110 ms), is chosen.
    rng = np.random.default_rng(4)
    tp = np.arange(0, 80_000, 10, dtype=np.int64)
    calm = np.arange(tp.size) < tp.size // 2
    te = tp - np.where(calm, rng.integers(0, 20, tp.size), rng.integers(0, 300, tp.size))
    space = {"periodic": [{"delay_ms": 60, "period_ms": 10}, {"delay_ms": 100, "period_ms": 10}]}
    window = WindowSpec(1_000)
    result = tune(te, tp, target_late_pct=45.0, window=window, space=space, recent_fraction=1.0)
    fast = next(c for c in result.candidates if c.params["delay_ms"] == 60)
    assert fast.dropped_pct <= 45.0 < fast.worst_late_pct
    assert fast.mean_latency_ms < result.choice.mean_latency_ms <= 2 * fast.mean_latency_ms
    assert result.choice.params["delay_ms"] == 100
    calm_only = tune(
        te[calm], tp[calm], target_late_pct=45.0, window=window, space=space, recent_fraction=1.0
    )
    assert calm_only.choice.params["delay_ms"] == 60


def candidate(name, latency_ms, pooled, by_period):
    return Candidate(name, {}, pooled, {"mean": latency_ms}, 10, None, tuple(by_period))


def test_a_stable_setting_is_preferred_only_while_it_costs_at_most_twice_the_fastest_meeting_the_target():
    unstable = candidate("fast", 200.0, 0.4, [0.2, 0.9, 0.3, 0.2])  # meets 0.5 % pooled, not on one part
    assert stable_choice([unstable, candidate("stable", 390.0, 0.2, [0.2] * 4)], 0.5).strategy == "stable"
    assert stable_choice([unstable, candidate("stable", 410.0, 0.2, [0.2] * 4)], 0.5).strategy == "fast"


def test_stability_is_not_bought_by_moving_to_another_partition_mode():
    # The fastest scoped setting drifts over the target on one part; a stable min-mode setting at 1.5 times
    # its latency would be chosen by stability alone, but min mode waits for the slowest partition, an
    # exposure the history does not show: the scoped setting stays (a stable scoped one within 2x would win).
    def moded(name, latency_ms, pooled, by_period, mode):
        return Candidate(name, {}, pooled, {"mean": latency_ms}, 10, mode, tuple(by_period))

    fast = moded("fast", 100.0, 0.4, [0.2, 0.9, 0.3, 0.2], "scoped")
    held = moded("held", 150.0, 0.0, [0.0] * 4, "min")
    slow = moded("slow", 260.0, 0.1, [0.1] * 4, "scoped")
    assert stable_choice([fast, held, slow], 0.5) is fast
    near = moded("near", 190.0, 0.1, [0.1] * 4, "scoped")
    assert stable_choice([fast, held, near], 0.5) is near
    # the fastest in min mode: stability is sought among min-mode settings, and toward firing per key
    # (a per-key one more than 1.5 times slower than the stable min-mode one leaves it in place)
    fast_min = moded("m", 100.0, 0.4, [0.9, 0, 0, 0], "min")
    assert stable_choice([fast_min, held, moded("far", 240.0, 0.1, [0.1] * 4, "scoped")], 0.5) is held
    assert stable_choice([fast_min, moded("k", 120.0, 0.1, [0.1] * 4, "keyed"), held], 0.5).strategy == "k"
    assert stable_choice([fast_min, moded("g", 120.0, 0.1, [0.1] * 4, "global"), held], 0.5) is held


@pytest.mark.parametrize(
    ("mode", "other_exposed"),
    [
        # one watermark over every partition: one device whose clock jumps ahead makes every other
        # device's records late
        ("global", "min"),
        # one watermark held by the slowest partition: one device whose clock steps back, or that stops,
        # holds every key's windows for the step or the idle timeout
        ("min", "global"),
    ],
)
def test_a_global_or_min_choice_gives_way_to_firing_per_key_unless_that_is_over_one_and_a_half_times_slower(
    mode, other_exposed
):
    # The history shows either exposure only once it happened. The fastest is in ``mode``; a stable scoped
    # setting 1.4 times slower is chosen instead, a keyed one too, but not one 1.6 times slower, nor one that
    # misses the target, nor one of the other exposed mode; a stable per-key one comes before a faster
    # per-key one that drifts.
    def moded(name, latency_ms, pooled, by_period, mode):
        return Candidate(name, {}, pooled, {"mean": latency_ms}, 10, mode, tuple(by_period))

    fast = moded(mode, 100.0, 0.3, [0.3] * 4, mode)
    assert stable_choice([fast, moded("scoped", 140.0, 0.3, [0.3] * 4, "scoped")], 0.5).strategy == "scoped"
    assert stable_choice([fast, moded("keyed", 150.0, 0.3, [0.3] * 4, "keyed")], 0.5).strategy == "keyed"
    assert stable_choice([fast, moded("scoped", 160.0, 0.3, [0.3] * 4, "scoped")], 0.5) is fast
    assert stable_choice([fast, moded("scoped", 110.0, 0.7, [0.7] * 4, "scoped")], 0.5) is fast
    assert stable_choice([fast, moded("other", 105.0, 0.3, [0.3] * 4, other_exposed)], 0.5) is fast
    drifting = moded("drifting", 110.0, 0.4, [0.9, 0.3, 0.2, 0.2], "scoped")
    steady = moded("steady", 130.0, 0.3, [0.3] * 4, "scoped")
    assert stable_choice([fast, drifting, steady], 0.5) is steady
    assert stable_choice([fast, drifting], 0.5) is drifting


def test_a_sub_periods_late_share_is_counted_in_whole_tuples():
    # 390 rows a sub-period: two late tuples are 0.51 %, the nearest a 0.5 % target (1.95 tuples) can be kept;
    # the fast setting keeps its place over a safer one at more than twice its latency. Three late tuples
    # do not: a stable setting just under twice as slow is taken then.
    fast = Candidate("fast", {}, 0.45, {"mean": 146.0}, 10, None, (0.51, 0.51, 0.26, 0.51), (390,) * 4)
    far = Candidate("safe", {}, 0.06, {"mean": 300.0}, 10, None, (0.0, 0.0, 0.0, 0.26), (390,) * 4)
    assert fast.stable(0.5) and stable_choice([fast, far], 0.5) is fast
    safe = Candidate("safe", {}, 0.06, {"mean": 290.0}, 10, None, (0.0, 0.0, 0.0, 0.26), (390,) * 4)
    over = Candidate("fast", {}, 0.45, {"mean": 146.0}, 10, None, (0.77, 0.26, 0.26, 0.51), (390,) * 4)
    assert not over.stable(0.5) and stable_choice([over, safe], 0.5) is safe


def test_a_setting_just_within_the_target_gives_way_to_one_with_a_standard_error_to_spare():
    # 1,600 rows: the target's expected count is 8 late tuples, its Poisson standard error 2.8. The fastest
    # setting has 7 (0.44 %), stable on every sub-period, but a sample that drew fewer late tuples than its
    # rate is how the fastest one comes to be within the target: the next period is likely over. One with 5
    # late tuples is taken while at most 1.5 times as slow; the fastest when the margin would cost more.
    def c(name, latency_ms, late):
        share = round(100.0 * late / 1_600, 4)
        return Candidate(name, {}, share, {"mean": latency_ms}, 10, "scoped", (share,) * 4, (400,) * 4)

    fast, margin, slow = c("fast", 100.0, 7), c("margin", 145.0, 5), c("slow", 160.0, 5)
    assert fast.stable(0.5) and not fast.clear(0.5) and margin.clear(0.5)
    assert stable_choice([fast, margin], 0.5) is margin
    assert stable_choice([fast, slow], 0.5) is fast
    # no setting with the margin: the stable rule as before
    assert stable_choice([fast, c("over", 80.0, 9)], 0.5) is fast


def test_a_one_off_burst_is_forgiven_only_for_a_setting_over_twice_as_fast_and_calm_elsewhere():
    slow = candidate("slow", 3_000.0, 0.4, [0.0, 0.0, 0.0, 1.6])  # meets 0.5 % pooled, the only one that does
    burst = candidate("burst", 1_400.0, 0.6, [0.0, 0.2, 0.0, 2.2])  # 0.6 % pooled: one part's burst
    assert one_off_burst(burst, 0.5) and stable_choice([slow, burst], 0.5) is burst
    # not over twice as fast; late above half the target on a second part; pooled above twice the target
    assert stable_choice([slow, candidate("burst", 1_600.0, 0.6, [0.0, 0.2, 0.0, 2.2])], 0.5) is slow
    assert stable_choice([slow, candidate("burst", 1_400.0, 0.6, [0.0, 0.3, 0.0, 2.1])], 0.5) is slow
    assert stable_choice([slow, candidate("burst", 1_400.0, 1.1, [0.0, 0.0, 0.0, 4.4])], 0.5) is slow
    # nothing meets the target pooled: no choice (the tuner raises), a burst alone is not enough
    assert stable_choice([burst], 0.5) is None


def test_a_clock_step_straddling_two_sub_periods_is_a_one_off_burst():
    # 4 devices at 20 records/s each, in order, for 100 s (2,000 rows a sub-period); device 0's clock steps
    # back 3 s at 48.5 s, so under its own watermark its records are late until 51.5 s: 60 late tuples,
    # half on each side of the boundary between the second and third sub-periods (two over the target).
    te, tp, key = clock_step_across_two_sub_periods()
    space = {"periodic": [{"delay_ms": d, "period_ms": 10} for d in (0, 1_000, 2_000, 3_000)]}
    result = tune(
        te, tp, target_late_pct=0.5, window=W, space=space, partition=key, key=key, recent_fraction=1.0
    )
    late = {c.params["delay_ms"]: c for c in result.candidates if c.partition_mode == "scoped"}
    first, second, third, fourth = late[0].late_pct_by_period
    assert first == fourth == 0.0 and second > 1.4 and third > 1.4 and late[0].rest_late_pct == 0.0
    assert one_off_burst(late[0], 0.5)
    # the step happens once: the next period does not need the 2 s delay that would hide two thirds of it
    assert (result.choice.params["delay_ms"], result.choice.partition_mode) == (0, "scoped")


def clock_step_across_two_sub_periods():
    """4 devices at 20 records/s for 100 s; device 0's clock steps back 3 s at 48.5 s (a burst over 50 s)."""
    tp = np.repeat(np.arange(0, 100_000, 50, dtype=np.int64), 4)
    key = np.tile(np.arange(4), tp.size // 4)
    return tp - 5 - np.where((key == 0) & (tp >= 48_500), 3_000, 0), tp, key


def test_the_cli_says_when_its_choice_is_over_the_target_in_a_forgiven_burst(tmp_path, capsys):
    te, tp, key = clock_step_across_two_sub_periods()
    path = tmp_path / "s.csv"
    path.write_text("te,tp,dev\n" + "".join(f"{a},{b},d{k}\n" for a, b, k in zip(te, tp, key, strict=True)))
    flags = ["--event-time", "te", "--arrival-time", "tp", "--partition", "dev", "--key", "dev"]
    args = [
        "tune",
        str(path),
        *flags,
        "--window-ms",
        "1000",
        "--target-late-pct",
        "0.5",
        "--recent-fraction",
        "1",
    ]
    assert main([*args, "--strategies", "periodic"]) == 0
    text = capsys.readouterr().out
    assert "--partition-mode scoped" in text and "by sub-period 0.00 / 1.50 / 1.45 / 0.00 %" in text
    assert "over the target in one burst only (0.00 % late outside it): forgiven as a one-off" in text
    assert main([*args, "--strategies", "periodic", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["dropped_pct"] > 0.5 and out["rest_late_pct"] == 0.0


FAMILIES = {
    "periodic": [{"delay_ms": d, "period_ms": p} for p in (10, 100) for d in range(0, 601, 40)],
    "ingestion": [{"max_event_time_lag_ms": lag} for lag in range(0, 601, 100)],
    "band": [{"band_ms": b} for b in (10, 50, 100, 200, 400, 600)],
}


@settings(max_examples=25)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(300, 1_200),
    max_delay=st.integers(0, 500),
    stragglers=st.sampled_from([0.0, 0.01, 0.05]),
    target=st.sampled_from([0.0, 0.5, 2.0, 10.0]),
    devices=st.integers(1, 3),
)
def test_the_binary_search_chooses_what_the_exhaustive_scan_chooses(
    seed, n, max_delay, stragglers, target, devices
):
    # Random small disordered streams (uniform delays, some stragglers far behind, 1-3 devices): the
    # fixed-delay families' late shares never rise with the delay, pooled or on a sub-period, and searching
    # the delays gives the exhaustive scan's choice.
    rng = np.random.default_rng(seed)
    tp = np.cumsum(rng.integers(1, 40, n)).astype(np.int64)
    behind = rng.integers(0, max_delay + 1, n) + np.where(rng.random(n) < stragglers, 2_000, 0)
    te = tp - behind
    dev = rng.integers(0, devices, n) if devices > 1 else None
    kw = {"target_late_pct": target, "window": WindowSpec(500), "space": FAMILIES, "recent_fraction": 1.0}
    kw |= {"partition": dev, "key": dev}
    try:
        full = tune(te, tp, exhaustive=True, **kw)
    except TuneError:
        with pytest.raises(TuneError):
            tune(te, tp, **kw)
        return
    for name, param in monotone_params().items():
        for mode in {c.partition_mode for c in full.candidates}:
            for period in (10, 100, None):
                group = sorted(
                    (c for c in full.candidates if c.strategy == name and c.partition_mode == mode
                     and c.params.get("period_ms") == period),
                    key=lambda c, p=param: c.params[p],
                )  # fmt: skip
                assert [c.dropped_pct for c in group] == sorted((c.dropped_pct for c in group), reverse=True)
                for i in range(len(group[0].late_pct_by_period) if group else 0):
                    shares = [c.late_pct_by_period[i] for c in group]
                    assert shares == sorted(shares, reverse=True)
    fast = tune(te, tp, **kw)
    assert fast.replays < full.replays
    assert fast.choice == full.choice
    assert {(c.strategy, str(c.params), c.partition_mode) for c in fast.candidates} <= {
        (c.strategy, str(c.params), c.partition_mode) for c in full.candidates
    }


def test_the_choice_is_reported_on_the_tuning_period_and_on_the_held_out_slice():
    # Calm history, then a disordered last fifth: the choice made on the calm part misses the target on the
    # held-out slice, and the report says so beside the hindsight fixed delay there.
    rng = np.random.default_rng(7)
    tp = np.arange(0, 100_000, 10, dtype=np.int64)
    calm = np.arange(tp.size) < tp.size * 0.8
    te = tp - np.where(calm, rng.integers(0, 50, tp.size), rng.integers(0, 400, tp.size))
    space = {"periodic": [{"delay_ms": d, "period_ms": 10} for d in range(0, 501, 10)]}
    result = tune(
        te, tp, target_late_pct=0.5, window=W, space=space, recent_fraction=1.0, evaluation_fraction=0.2
    )
    assert result.history_events == 8_000 and len(result.choice.late_pct_by_period) == 4
    assert result.tuning is not None and result.evaluation is not None
    assert result.evaluation.events == 2_000
    assert result.tuning.choice == result.choice and result.tuning.ratio == 1.0
    assert result.evaluation.choice.dropped_pct > 0.5  # the calm choice does not carry over
    hindsight = result.evaluation.fixed
    assert hindsight is not None and hindsight.dropped_pct <= 0.5
    assert hindsight.params["delay_ms"] > result.choice.params["delay_ms"]
    report = result.as_dict()
    assert report["evaluation"]["dropped_pct"] == result.evaluation.choice.dropped_pct
    assert report["tuning"]["ratio_to_fixed_delay"] == 1.0


def test_a_long_history_is_replayed_on_bounded_contiguous_blocks_of_each_sub_period():
    te, tp = stream(20_000, 300, seed=8)
    capped = tune(te, tp, target_late_pct=0.5, window=W, space=DELAYS, recent_fraction=1.0, max_rows=4_000)
    assert capped.history_events == 4_000 and len(capped.choice.late_pct_by_period) == 4
    assert capped.choice.params == {"delay_ms": 300, "period_ms": 10}


def test_two_worker_processes_give_the_same_candidates_and_choice(monkeypatch):
    monkeypatch.setattr(workers_module, "PARALLEL_MIN_ROWS", 0)  # workers even on this small history
    rng = np.random.default_rng(9)
    tp = np.arange(0, 30_000, 10, dtype=np.int64)
    dev = rng.integers(0, 3, tp.size)
    te = tp - rng.integers(0, 200, tp.size)
    space = {
        "periodic": DELAYS["periodic"],
        "ingestion": [{"max_event_time_lag_ms": lag} for lag in (0, 100, 200)],
        "percentile": [{"percentile": 1.0, "horizon_ms": 1_000, "period_ms": 10}],
    }
    kw = {"target_late_pct": 0.5, "window": W, "space": space, "partition": dev, "key": dev}
    one, two = tune(te, tp, **kw), tune(te, tp, workers=2, **kw)
    assert two.candidates == one.candidates and two.choice == one.choice and two.replays == one.replays


@pytest.mark.parametrize(
    "strategy, params", [("slo", {"late_slo_pct": 0.5}), ("periodic", {"delay_ms": 100})]
)
def test_the_latest_part_is_measured_warm_after_the_part_before_it_is_replayed(strategy, params):
    te, tp = stream(4_000, 400, seed=3)  # arrivals every 20 ms, already in arrival order
    [c] = tune(te, tp, target_late_pct=100.0, window=W, space={strategy: [params]}, subperiods=1).candidates
    # recent_fraction 0.5: the latest 2,000 rows are measured, the 2,000 before them replayed first.
    r = replay(te, tp, strategy=strategy, params=params, window=W)
    assert c.dropped_pct == round(100.0 * np.count_nonzero(r.late[2_000:]) / 2_000, 4)
    measured = r.windows.end_ms > tp[2_000]  # windows ending before the measured part are the warm-up's
    assert c.windows_fired == np.count_nonzero(r.windows.fired & measured)
    assert c.mean_latency_ms == round(float(r.charged_latency_ms()[measured].mean()), 3)
    cold = replay(te[2_000:], tp[2_000:], strategy=strategy, params=params, window=W).summary()
    if strategy == "slo":  # it learns: measured cold on the half alone, it would not be the same run
        assert (cold["dropped_pct"], cold["emit_latency_charged_ms"]["mean"]) != (
            c.dropped_pct,
            c.mean_latency_ms,
        )


def test_a_stuck_window_counts_in_the_tuners_latency_until_the_end_of_the_history():
    te, tp = stream(2_000, 0)  # in order: one window every second, the last ones never closed
    [c] = tune(te, tp, target_late_pct=0.0, window=W, space={"periodic": [{"delay_ms": 5_000}]},
               recent_fraction=1.0).candidates  # fmt: skip
    r = replay(te, tp, strategy="periodic", params={"delay_ms": 5_000}, window=W).summary()
    assert r["windows_flushed"] > 0  # the 5 s before the end never fired
    assert c.emit_latency_ms == r["emit_latency_charged_ms"] != r["emit_latency_ms"]


def test_the_cli_names_the_faster_setting_its_margin_turned_down(tmp_path, capsys):
    # 2,000 arrivals in order but for 20 stragglers, 100 ms to 2 s behind, five a sub-period: at 0.5 % the
    # target's count is 10 late tuples; a delay leaving 10 keeps it, but by less than a standard error (3.2).
    tp = np.arange(0, 100_000, 50, dtype=np.int64)
    te = tp - 5
    for i in range(20):
        te[(2_500 + 5_000 * i) // 50] -= 100 * (1 + 4 * (i % 5) + i // 5) - 5
    path = tmp_path / "s.csv"
    path.write_text("te,tp\n" + "".join(f"{a},{b}\n" for a, b in zip(te, tp, strict=True)))
    args = ["tune", str(path), "--event-time", "te", "--arrival-time", "tp", "--window-ms", "1000"]
    args += ["--target-late-pct", "0.5", "--recent-fraction", "1", "--strategies", "periodic"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "choice      periodic --set delay_ms=1250 --set period_ms=200" in text
    assert "late        0.300 % (target 0.5 %)" in text
    margin = "with a margin: periodic --set delay_ms=850 --set period_ms=200 is faster (989.6 ms) at 0.500 %"
    assert margin in text and "by less than a standard error of its late count" in text
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["margin_over"]["params"] == {"delay_ms": 850, "period_ms": 200} and out["dropped_pct"] == 0.3
