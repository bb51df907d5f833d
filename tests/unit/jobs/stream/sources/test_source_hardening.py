"""Issue 15, source side, without Spark: the event ids kept for deduplication, invalid UTF-8 on the Arrow
path (the job on such landing files: tests/integration/spark/test_source_hardening.py)."""

import pytest

from tests.samples import BASE_MS as BASE


def test_the_ids_kept_for_a_batch_are_those_before_it_within_the_horizon(tmp_path):
    import pyarrow as pa

    from jobs.stream.checkpoint.dedup import SeenIds

    seen = SeenIds(str(tmp_path), horizon_ms=100)
    assert seen.before(0).num_rows == 0
    first = pa.table({"event_id": ["a", "b"], "arrival_time_ms": [0, 50]})
    seen.save(0, seen.before(0), first)
    seen.save(1, seen.before(1), pa.table({"event_id": ["c"], "arrival_time_ms": [120]}))
    assert seen.before(1).column("event_id").to_pylist() == ["a", "b"]  # a replay of batch 1 sees these
    assert seen.before(2).column("event_id").to_pylist() == ["b", "c"]  # a fell out of the horizon
    (tmp_path / "dedup" / "ids-000000000001.arrow").write_bytes(b"not arrow")
    with pytest.raises(RuntimeError, match="ids-000000000001.arrow"):
        seen.before(2)


def test_the_arrow_path_passes_a_record_with_invalid_utf8_anywhere_to_spark():
    from jobs.stream.workers.arrow_path import RecordChecks, parse_clean

    checks = RecordChecks(
        "event_id", "key", "partition", "event_time_ms", "arrival_time_ms", "value",
        ingest_ms=BASE, future_bound_ms=86_400_000, max_field_bytes=65_536, max_event_ahead_ms=300_000,
        max_record_bytes=16 << 20,
    )  # fmt: skip
    clean = b'{"event_id":"1","key":"k","partition":"p","event_time_ms":1,"value":1'
    assert parse_clean(clean + b"}\n", checks)[0] is not None
    # Spark's reader quarantines the record (bad_encoding); pyarrow used to take it as clean.
    for extra in (b',"note":"\xff"', b',"\xfe":1'):
        table, why = parse_clean(clean + extra + b"}\n", checks)
        assert table is None and why == "text that is not UTF-8"
