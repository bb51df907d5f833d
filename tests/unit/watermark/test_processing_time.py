import pytest

from watermark.processing_time import ProcessingTimeWatermark


def test_lag_grows_while_work_is_stuck_and_drops_when_it_completes():
    ptw = ProcessingTimeWatermark()
    ptw.started(1, oldest_tp_ms=1_000)
    assert ptw.lag_ms(1_500) == 500
    assert ptw.lag_ms(60_000) == 59_000
    ptw.completed(1, now_ms=60_500)
    assert ptw.lag_ms(60_500) == 0


def test_oldest_in_flight_work_defines_the_watermark():
    ptw = ProcessingTimeWatermark()
    ptw.started("a", 2_000)
    ptw.started("b", 1_000)
    assert ptw.watermark_ms(5_000) == 1_000
    ptw.completed("b", now_ms=5_000)
    assert ptw.watermark_ms(5_000) == 2_000


def test_a_batch_older_than_an_earlier_caught_up_reading_shows_its_full_lag():
    ptw = ProcessingTimeWatermark()
    ptw.caught_up(5_000)  # a scrape, or a trigger, found nothing in flight
    assert ptw.lag_ms(5_000) == 0
    ptw.started("late-file", 1_000)  # old input discovered after that
    assert ptw.watermark_ms(6_000) == 1_000
    assert ptw.lag_ms(6_000) == 5_000


def test_with_nothing_registered_the_lag_grows_since_the_last_completed_batch():
    ptw = ProcessingTimeWatermark()
    ptw.started(7, 900)
    ptw.completed(7, now_ms=1_000)
    assert ptw.lag_ms(1_000) == 0
    assert ptw.lag_ms(61_000) == 60_000  # a trigger stuck before it starts a batch does not look caught up
    ptw.caught_up(61_000)  # the trigger ran and found no input: caught up again
    assert ptw.lag_ms(61_500) == 500


def test_before_any_report_the_lag_counts_from_the_start_if_known():
    assert ProcessingTimeWatermark().lag_ms(10_000) == 0
    assert ProcessingTimeWatermark(start_ms=4_000).lag_ms(10_000) == 6_000


def test_a_completion_with_other_work_in_flight_is_not_caught_up():
    ptw = ProcessingTimeWatermark()
    ptw.started("a", 1_000)
    ptw.started("b", 2_000)
    ptw.completed("a", now_ms=3_000)
    assert ptw.caught_up_ms is None
    assert ptw.lag_ms(4_000) == 2_000


def test_bookkeeping_errors_are_reported():
    ptw = ProcessingTimeWatermark()
    ptw.started(1, 10)
    with pytest.raises(ValueError, match="already in flight"):
        ptw.started(1, 10)
    with pytest.raises(ValueError, match="not in flight"):
        ptw.completed(2)


def test_snapshot_round_trip():
    ptw = ProcessingTimeWatermark()
    ptw.caught_up(50)
    ptw.started("x", 100)
    again = ProcessingTimeWatermark.from_snapshot(ptw.snapshot())
    assert again.in_flight == {"x": 100}
    assert again.lag_ms(400) == 300
    again.completed("x")
    assert again.lag_ms(400) == 350  # caught up at 50 last
