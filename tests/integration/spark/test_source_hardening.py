"""Issue 15, source side: landing file names Spark would glob or cannot open, files gone after listing,
invalid UTF-8, capped quarantine text."""

import json
import os

import numpy as np
import pytest

from jobs.common.schemas import QUARANTINE_REASONS
from jobs.common.tables import DeltaTables
from jobs.stream.run import run_job
from jobs.stream.sources.source_log import unplanned_files
from tests.landing import folder_job
from tests.unit.jobs.stream.sources.test_source_hardening import BASE
from watermark.config import PipelineConfig


def config():
    return PipelineConfig.from_dict(
        {"version": 1, "strategy": "periodic", "params": {"delay_ms": 0, "period_ms": 10}, "window_ms": 1_000}
    )


def record(event_id, i, key="k"):
    return {
        "event_id": event_id,
        "key": key,
        "partition": "p",
        "event_time_ms": BASE + 10 * i,
        "arrival_time_ms": BASE + 10 * i + 5,
        "value": 1.0,
    }


def land(folder, files):
    """``{name: [record or raw bytes line, ...]}`` written oldest first (one second apart)."""
    folder.mkdir(parents=True, exist_ok=True)
    for j, (name, lines) in enumerate(files.items()):
        path = folder / name
        data = b"".join((x if isinstance(x, bytes) else json.dumps(x).encode()) + b"\n" for x in lines)
        path.write_bytes(data)
        os.utime(path, (1_700_000_000 + j, 1_700_000_000 + j))


def run(spark, tmp, metrics=None, **kw):
    opts = folder_job(tmp, config(), flush_at_end=True, **kw)
    reports = run_job(spark, opts, metrics)
    return DeltaTables(opts.output, "test-reader"), reports


def read(tables, name):
    try:
        return tables.read(name)
    except Exception:  # a table no batch wrote to
        return None


def counted_ids(tables):
    """Event ids in aggregates (by count) plus late_events, and the quarantine rows."""
    agg = read(tables, "aggregates")
    late = read(tables, "late_events")
    quarantine = read(tables, "quarantine")
    counted = int(np.sum(agg.column("count").to_numpy())) if agg is not None else 0
    late_ids = late.column("event_id").to_pylist() if late is not None else []
    return counted, late_ids, (quarantine.to_pylist() if quarantine is not None else [])


GLOB_NAMES = ["qm?.json", "bracket[1].json", "brace{a}.json", "star*.json", "back\\slash.json", "pct%41.json"]
# Names the glob characters above would also match: each must still be read once.
LOOKALIKES = ["qmX.json", "bracket1.json", "bracea.json", "starry.json", "plain.json", "pctA.json"]
# ... and one named as the source log spells bracket[1].json (URL-encoded).
LOOKALIKES += ["bracket%5B1%5D.json"]


@pytest.mark.parametrize("reader", ["spark", "arrow"])
def test_files_with_glob_characters_in_their_names_are_each_read_exactly_once(spark, tmp_path, reader):
    names = GLOB_NAMES + LOOKALIKES
    files = {name: [record(f"{name}-{i}", 3 * j + i) for i in range(3)] for j, name in enumerate(names)}
    land(tmp_path / "in", files)
    tables, reports = run(spark, tmp_path, reader=reader)
    counted, late_ids, quarantine = counted_ids(tables)
    assert sum(r.rows for r in reports) == 3 * len(names)
    assert counted + len(late_ids) == 3 * len(names)
    assert quarantine == []
    assert {r.path for r in reports} == {reader}  # the Arrow path reads such names too


def test_a_name_hadoop_cannot_open_is_quarantined_as_a_file_and_the_job_goes_on(spark, tmp_path):
    land(
        tmp_path / "in",
        {
            "before.json": [record(f"b{i}", i) for i in range(3)],
            "colon:x.json": [record(f"c{i}", 3 + i) for i in range(3)],
            "after.json": [record(f"a{i}", 6 + i) for i in range(3)],
        },
    )
    # A symbolic link to a file outside the landing folder (a private key): refused as a file, never read
    # (its lines used to be read, and copied into quarantine.raw as malformed records).
    (tmp_path / "secret").write_text("-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0B\n")
    (tmp_path / "in" / "link.json").symlink_to(tmp_path / "secret")
    tables, reports = run(spark, tmp_path, reader="spark")
    counted, late_ids, quarantine = counted_ids(tables)
    assert counted + len(late_ids) == 6
    assert not any("PRIVATE" in r["raw"] or "MIIE" in r["raw"] for r in quarantine), quarantine
    row, link = sorted(quarantine, key=lambda r: r["reason"], reverse=True)
    assert row["reason"] == "unreadable_file_name" and row["reason"] in QUARANTINE_REASONS
    assert row["file"].endswith("colon:x.json") and row["raw"].endswith("colon:x.json")
    assert row["line"] is None
    assert link["reason"] == "symlink" and link["reason"] in QUARANTINE_REASONS and link["line"] is None
    assert link["raw"] == str(tmp_path / "in" / "link.json")
    assert sum(r.quarantined for r in reports) == 2
    # A restart on the same checkpoint goes on (it used to fail the batch at every attempt).
    land(tmp_path / "in", {"later.json": [record(f"l{i}", 20 + i) for i in range(2)]})
    tables, reports = run(spark, tmp_path, reader="spark")
    counted, late_ids, quarantine = counted_ids(tables)
    assert counted + len(late_ids) == 8 and len(quarantine) == 2


def test_a_file_far_older_than_the_newest_is_read_whatever_its_age(spark, tmp_path):
    """A file landed with its times kept (``rsync -a``, ``cp -p``), 30 days before the newest one read.

    Spark's file source skipped it (``maxFileAge``, 7 days by default): two runs exited 0 without it.
    """
    land(tmp_path / "in", {"recent.json": [record(f"r{i}", i) for i in range(3)]})
    run(spark, tmp_path)
    copied = tmp_path / "in" / "copied.json"
    copied.write_bytes(b"".join(json.dumps(record(f"c{i}", 3 + i)).encode() + b"\n" for i in range(2)))
    os.utime(copied, (1_700_000_000 - 30 * 86_400, 1_700_000_000 - 30 * 86_400))
    tables, _ = run(spark, tmp_path)
    counted, late_ids, quarantine = counted_ids(tables)
    assert counted + len(late_ids) == 5 and not quarantine
    assert unplanned_files(str(tmp_path / "ck"), str(tmp_path / "in")) == []  # every file planned


def test_a_batch_of_only_unreadable_files_writes_their_quarantine_rows(spark, tmp_path):
    land(tmp_path / "in", {"a:b.json": [record("x", 0)]})
    tables, reports = run(spark, tmp_path)
    _, _, quarantine = counted_ids(tables)
    assert [r["reason"] for r in quarantine] == ["unreadable_file_name"]


def test_a_file_deleted_after_the_source_listed_it_is_quarantined_by_name_and_counted(
    spark, tmp_path, monkeypatch
):
    from prometheus_client import CollectorRegistry

    import jobs.stream.sources.landing as handler
    from monitoring.metrics import JobMetrics

    land(
        tmp_path / "in",
        {
            "kept.json": [record(f"k{i}", i) for i in range(4)],
            "gone.json": [record(f"g{i}", 4 + i) for i in range(5)],
        },
    )
    listed = handler.logged_batch_files

    def list_then_delete(checkpoint, batch_id):
        files = listed(checkpoint, batch_id)  # the source listed both files; one is deleted before it is read
        (tmp_path / "in" / "gone.json").unlink(missing_ok=True)
        return files

    monkeypatch.setattr(handler, "logged_batch_files", list_then_delete)
    metrics = JobMetrics(CollectorRegistry())
    tables, reports = run(spark, tmp_path, metrics=metrics)
    counted, late_ids, quarantine = counted_ids(tables)
    assert counted + len(late_ids) == 4
    (row,) = quarantine
    assert row["reason"] == "file_missing" and row["file"].endswith("gone.json") and row["line"] is None
    assert reports[0].quarantined == 1 and reports[0].reasons == {"file_missing": 1}
    sample = metrics.registry.get_sample_value
    assert sample("awm_quarantined_total", {"reason": "file_missing"}) == 1
    assert sample("awm_events_total", {"outcome": "quarantined"}) == 1


def test_invalid_utf8_in_a_text_field_is_quarantined_not_replaced(spark, tmp_path):
    ok = record("ok", 0)
    lines = [
        ok,
        b'{"event_id":"1","key":"a\xffb","partition":"p","event_time_ms":%d,"value":1}' % (BASE + 10),
        b'{"event_id":"2","key":"a\xfeb","partition":"p","event_time_ms":%d,"value":1}' % (BASE + 20),
        b'{"event_id":"3\xed\xa0\x80","key":"k","partition":"p","event_time_ms":%d,"value":1}' % (BASE + 30),
        # U+FFFD itself, well encoded, is text like any other.
        b'{"event_id":"4","key":"k\xef\xbf\xbd","partition":"p","event_time_ms":%d,"value":1}' % (BASE + 40),
    ]
    land(tmp_path / "in", {"a.json": lines})
    tables, reports = run(spark, tmp_path)  # the Arrow path passes such a batch to Spark's reader
    counted, late_ids, quarantine = counted_ids(tables)
    assert counted + len(late_ids) == 2
    assert sorted(r["reason"] for r in quarantine) == ["bad_encoding"] * 3
    assert sorted(r["line"] for r in quarantine) == [1, 2, 3]
    assert all("\ufffd" in r["raw"] for r in quarantine)
    keys = {r["key"] for r in read(tables, "aggregates").to_pylist()}
    assert keys == {"k", "k\ufffd"}


def test_invalid_utf8_in_a_csv_field_is_quarantined(spark, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.csv").write_bytes(
        b"event_id,key,partition,event_time_ms,value\n"
        + b"1,a\xffb,p,%d,1\n" % (BASE + 10)
        + b"2,cl\xc3\xa9,p,%d,1\n" % (BASE + 20)
        + b'3,"x,\xe2\x82\xac",p,%d,2\n' % (BASE + 30)
    )
    tables, reports = run(spark, tmp_path, format="csv")
    counted, late_ids, quarantine = counted_ids(tables)
    assert [(r["reason"], r["line"]) for r in quarantine] == [("bad_encoding", 0)]
    assert counted + len(late_ids) == 2
    keys = {r["key"] for r in read(tables, "aggregates").to_pylist()}
    assert keys == {"clé", "x,€"}


def test_quarantine_keeps_the_first_kib_of_a_huge_record_and_its_length(spark, tmp_path):
    huge = "{" + "x" * 5_000_000
    wide = json.dumps({"event_id": "w", "key": "é" * 40_000, "event_time_ms": BASE, "value": 1})
    land(tmp_path / "in", {"a.json": [huge.encode(), wide.encode(), record("ok", 1)]})
    tables, reports = run(spark, tmp_path, max_field_bytes=70_000)
    _, _, quarantine = counted_ids(tables)
    by_line = {r["line"]: r for r in quarantine}
    assert by_line[0]["reason"] == "malformed_json" and by_line[1]["reason"] == "record_too_long"
    first = by_line[0]["raw"]
    assert first.startswith("{xxx") and first.endswith("…[truncated, 5000001 bytes]")
    assert len(first.encode()) < 1100
    second = by_line[1]["raw"]
    # Not a malformed line: the record's fields as JSON (here 80,067 bytes), capped the same way.
    assert second.startswith('{"event_id":"w","key":"éé') and len(second.encode()) < 1100
    assert int(second.rsplit("…[truncated, ", 1)[1].removesuffix(" bytes]")) > 70_000


def timed(event_id, tp, key="k"):
    return {
        "event_id": event_id,
        "key": key,
        "partition": "p",
        "event_time_ms": tp,
        "arrival_time_ms": tp,
        "value": 1.0,
    }


DUPLICATES = {
    "0.json": [timed("a", BASE), timed("a", BASE + 5), timed("b", BASE + 10), {"event_id": "c", "key": "k"}],
    "1.json": [timed("a", BASE + 100), timed("c", BASE + 110)],  # a seen; c only in an invalid record
    "2.json": [timed("x", BASE + 5_000)],  # moves the clock: a and b fall out of the 1 s horizon
    "3.json": [timed("b", BASE + 5_010), timed("x", BASE + 5_020)],
}


def test_without_a_horizon_event_ids_are_not_deduplicated(spark, tmp_path):
    land(tmp_path / "in", DUPLICATES)
    tables, _ = run(spark, tmp_path)
    counted, late_ids, quarantine = counted_ids(tables)
    assert counted + len(late_ids) == 8 and [r["reason"] for r in quarantine] == ["missing_event_time"]


def test_repeated_event_ids_within_the_horizon_are_quarantined_once_each(spark, tmp_path):
    land(tmp_path / "in", DUPLICATES)
    tables, reports = run(spark, tmp_path, dedup_horizon_ms=1_000, max_files_per_trigger=1)
    assert len(reports) == 4
    counted, late_ids, quarantine = counted_ids(tables)
    duplicates = sorted(
        (r["file"].rsplit("/", 1)[-1], r["line"]) for r in quarantine if r["reason"] == "duplicate_event_id"
    )
    # a again in its batch, a again in the next one, x again in the last; b beyond the horizon counts.
    assert duplicates == [("0.json", 1), ("1.json", 0), ("3.json", 1)]
    assert counted + len(late_ids) == 5 and len(quarantine) == 4
    ids = sorted(p.name for p in (tmp_path / "ck" / "dedup").iterdir())
    assert ids == [f"ids-{n:012d}.arrow" for n in (1, 2, 3)]  # the last three batches' ids


def test_a_parquet_folder_whose_oldest_file_has_a_colon_takes_its_schema_from_the_next(spark, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path / "in"
    folder.mkdir()
    for j, name in enumerate(["a:b.parquet", "c.parquet"]):
        rows = [record(f"{name}-{i}", i) for i in range(3)]
        pq.write_table(pa.Table.from_pylist(rows), folder / name)
        os.utime(folder / name, (1_700_000_000 + j, 1_700_000_000 + j))
    tables, reports = run(spark, tmp_path, format="parquet")
    counted, late_ids, quarantine = counted_ids(tables)
    assert counted + len(late_ids) == 3
    assert [(r["reason"], r["file"].rsplit("/", 1)[-1]) for r in quarantine] == [
        ("unreadable_file_name", "a:b.parquet")
    ]
