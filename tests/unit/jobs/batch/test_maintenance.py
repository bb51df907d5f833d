"""The maintenance's pure parts: the retention's date cut, the OPTIMIZE predicate, the state file."""

import pytest

from jobs.batch.maintenance import (
    MaintenanceOptions,
    cutoff_date_ms,
    partition_predicate,
    read_state,
    render_state,
)
from jobs.common.schemas import DAY_MS


def test_the_retention_keeps_the_date_that_holds_the_instant_retain_days_ago():
    noon = 10 * DAY_MS + DAY_MS // 2
    assert cutoff_date_ms(noon, 2) == 8 * DAY_MS  # day 8 ended 1.5 days ago: kept whole
    assert cutoff_date_ms(10 * DAY_MS, 2) == 8 * DAY_MS  # a date boundary: day 7 ended exactly 2 days ago
    assert cutoff_date_ms(noon, 0.25) == 10 * DAY_MS


def test_the_optimize_predicate_lists_the_dates_once_in_order_and_the_null_date():
    assert partition_predicate("d", ["2026-11-02", "2026-11-01", "2026-11-02"]) == (
        "d IN (DATE'2026-11-01', DATE'2026-11-02')"
    )
    assert partition_predicate("d", [None]) == "d IS NULL"
    assert partition_predicate("d", iter(["2026-11-01", None])) == "d IN (DATE'2026-11-01') OR d IS NULL"


@pytest.mark.parametrize("values", [[], ["2026-11-01'); DROP"], ["20261101"]])
def test_the_optimize_predicate_refuses_what_is_not_a_date(values):
    with pytest.raises(ValueError, match="d: "):
        partition_predicate("d", values)


def test_the_state_file_round_trips_and_an_unreadable_one_means_no_state():
    state = {"arrivals": {"table_id": "a-1", "version": 12}, "aggregates": {"table_id": "b", "version": 3}}
    assert read_state(render_state(state)) == state
    assert read_state('{"tables": {"arrivals": {"version": 1}}}') == {}  # no table id
    assert read_state("[]") == {}
    assert read_state(None) == {}


def test_an_unknown_vacuum_mode_is_refused():
    with pytest.raises(ValueError, match="vacuum must be one of lite, full"):
        MaintenanceOptions("t", vacuum="fast")
