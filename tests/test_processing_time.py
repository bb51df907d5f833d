import pytest

from watermark.processing_time import ProcessingTimeWatermark


def test_lag_grows_while_work_is_stuck_and_drops_when_it_completes():
    ptw = ProcessingTimeWatermark()
    ptw.started(1, oldest_tp_ms=1_000)
    assert ptw.lag_ms(1_500) == 500
    assert ptw.lag_ms(60_000) == 59_000
    ptw.completed(1)
    assert ptw.lag_ms(61_000) == 0


def test_oldest_in_flight_work_defines_the_watermark():
    ptw = ProcessingTimeWatermark()
    ptw.started("a", 2_000)
    ptw.started("b", 1_000)
    assert ptw.watermark_ms(5_000) == 1_000
    ptw.completed("b")
    assert ptw.watermark_ms(5_000) == 2_000


def test_idle_input_has_no_lag_and_the_watermark_follows_now():
    ptw = ProcessingTimeWatermark()
    assert ptw.lag_ms(10_000) == 0
    assert ptw.watermark_ms(20_000) == 20_000


def test_watermark_never_regresses():
    ptw = ProcessingTimeWatermark()
    assert ptw.watermark_ms(5_000) == 5_000
    ptw.started("late-file", 1_000)  # old input discovered after the system had caught up
    assert ptw.watermark_ms(6_000) == 5_000


def test_bookkeeping_errors_are_reported():
    ptw = ProcessingTimeWatermark()
    ptw.started(1, 10)
    with pytest.raises(ValueError, match="already in flight"):
        ptw.started(1, 10)
    with pytest.raises(ValueError, match="not in flight"):
        ptw.completed(2)


def test_snapshot_round_trip():
    ptw = ProcessingTimeWatermark()
    ptw.started("x", 100)
    again = ProcessingTimeWatermark.from_snapshot(ptw.snapshot())
    assert again.in_flight == {"x": 100}
    assert again.lag_ms(400) == 300
