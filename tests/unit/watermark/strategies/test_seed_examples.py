"""The worked examples whose numbers the seed texts fix."""

import numpy as np

from watermark.evaluation.replay import classify
from watermark.strategies.adaptive import Adaptive
from watermark.strategies.periodic import Periodic
from watermark.strategies.sliding import Sliding
from watermark.timeutil import NO_WATERMARK

# Adaptive-watermarks paper, Figure 1: one arrival per second of ingestion time from tp = 100 to 110. The
# figure's drawing is not in the text; these event times are consistent with everything the text states:
# the periodic generator (s = 3, m = 5) emits 95, 98, 101 at tp = 103, 106, 109 and the arrivals at
# tp = 105, 107, 109 are late; the adaptive generator's warm-up over the first three tuples learns m = 6,
# it emits 94 at tp = 103 and 97 at tp = 106, the tuple at tp = 107 (te = 96) is late, and re-learning at
# tp = 108 gives m = 11 = 107 - 96.
FIG1_TP = np.arange(100, 111, dtype=np.int64)
FIG1_TE = np.array([94, 97, 100, 99, 103, 93, 102, 96, 106, 99, 109], dtype=np.int64)


def test_figure_1_periodic_emits_95_98_101_at_103_106_109():
    gen = Periodic(delay_ms=5, period_ms=3)
    trace = gen.process_trace(FIG1_TE, FIG1_TP)
    changes = np.flatnonzero(trace.at_arrival[1:] > trace.at_arrival[:-1]) + 1
    assert FIG1_TP[changes].tolist() == [103, 106, 109]
    assert trace.at_arrival[changes].tolist() == [95, 98, 101]


def test_figure_1_periodic_late_arrivals_are_those_at_105_107_109():
    wm = Periodic(delay_ms=5, period_ms=3).process(FIG1_TE, FIG1_TP)
    assert FIG1_TP[FIG1_TE < wm].tolist() == [105, 107, 109]


def test_figure_1_stream_is_consistent_with_the_adaptive_narrative():
    # What the text says of the data, independent of when ADWIN fires: the warm-up's skew is 6 and the
    # maximum event time is 100 at tp = 103, 103 at tp = 106; the late tuple has skew 11.
    skew = FIG1_TP - FIG1_TE
    assert int(skew[:3].max()) == 6
    running_max = np.maximum.accumulate(FIG1_TE)
    assert int(running_max[FIG1_TP == 103][0]) - 6 == 94
    assert int(running_max[FIG1_TP == 106][0]) - 6 == 97
    assert int(skew[FIG1_TP == 107][0]) == 11
    gen = Adaptive(warmup=3)
    gen.process(FIG1_TE[:3], FIG1_TP[:3])
    assert gen.skew_ms == 6


def test_figure_1_with_rivers_adwin_detects_no_drift_so_the_faithful_generator_emits_nothing():
    # The paper's narrative has drifts at tp = 103 and 106. river's ADWIN cannot detect one on this stream:
    # it looks for a change only every `clock` (32) updates, after a grace period of 10, and the stream has
    # 8 tuples after the warm-up. The faithful generator (no heartbeat) therefore never emits on it.
    gen = Adaptive(warmup=3)
    trace = gen.process_trace(FIG1_TE, FIG1_TP)
    assert gen.n_drifts == 0
    assert (trace.after_arrival == NO_WATERMARK).all()
    assert gen.skew_ms == 6  # what it learned in the warm-up, as in the figure


def test_figure_1_heartbeat_variant_emits_97_at_105_then_100_at_108():
    # The heartbeat extension judges the chunk every 3 ms of ingestion time instead of at drifts: from the
    # end of the warm-up (tp = 102) it checks at 105 (max te 103 - m 6 = 97) and 108 (106 - 6 = 100; the
    # chunk's one late tuple, te 96 at tp 107, is under the late threshold l = 1, so it emits, not re-learns).
    # The paper's 94 at 103 and 97 at 106 are drifts' emissions one check earlier.
    gen = Adaptive(warmup=3, heartbeat_ms=3)
    trace = gen.process_trace(FIG1_TE, FIG1_TP)
    after = trace.after_arrival
    changes = np.flatnonzero(after[1:] > after[:-1]) + 1
    assert FIG1_TP[changes].tolist() == [105, 108]
    assert after[changes].tolist() == [97, 100]
    assert FIG1_TP[FIG1_TE < trace.at_arrival].tolist() == [107, 109]  # te 96 < 97, then te 99 < 100
    assert gen.n_drifts == 0


def test_sliding_window_example_first_steps():
    # Zhang and Ma, Figure 3: m = 350 at the first tuple (te 19213 -> W 18863), 346 at the second
    # (19356 -> 19010), then 342, 338, 334 while fewer than five tuples were seen in the last second, and
    # at the sixth tuple the rate reaches the threshold: m = 334 * 1.01 = 337, W = 19899 - 337 = 19562.
    te = np.array([19213, 19356, 19480, 19610, 19750, 19899], dtype=np.int64)
    tp = te + 50
    gen = Sliding(
        initial_delay_ms=350, change_rate=0.01, rate_threshold=5, rate_window_ms=1000, slide_window_ms=500
    )
    after = gen.process_trace(te, tp).after_arrival
    assert after[0] == 18863
    assert after[1] == 19010
    assert (te - after).tolist() == [350, 346, 342, 338, 334, 337]
    assert after[5] == 19562


def test_sliding_window_delay_is_bounded_by_the_slide_window_and_by_one():
    gen = Sliding(
        initial_delay_ms=490, change_rate=0.1, rate_threshold=1, rate_window_ms=1000, slide_window_ms=500
    )
    tp = np.arange(0, 5_000, 10, dtype=np.int64)
    gen.process(tp - 5, tp)
    assert gen.delay_ms == 500
    slow = Sliding(initial_delay_ms=300, change_rate=0.5, rate_threshold=1_000)
    slow.process(tp - 5, tp)
    assert slow.delay_ms == 1


def test_sliding_window_small_delay_grows_even_when_truncation_would_stall_it():
    gen = Sliding(initial_delay_ms=10, change_rate=0.01, rate_threshold=1, slide_window_ms=500)
    tp = np.arange(0, 100, dtype=np.int64)
    gen.process(tp, tp)
    assert gen.delay_ms > 10  # Java's (long)(10 + 0.1) would stay at 10 forever


def test_sliding_window_classes_of_the_paper():
    # [W, W + STRAGGLERSIZE): late below W, stragglers in its lower half, normal in its upper half,
    # pending above it.
    labels = classify([99, 100, 149, 150, 199, 200], [100] * 6, straggler_ms=100)
    assert labels.tolist() == [0, 1, 1, 2, 2, 3]
