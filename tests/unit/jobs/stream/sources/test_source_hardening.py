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


def test_a_symlink_or_a_file_resolving_outside_the_landing_root_is_quarantined_as_a_file(tmp_path):
    """A link to a file outside the folder (a private key) was read: its lines copied into quarantine.raw.

    The job on such a link: tests/integration/spark/test_source_hardening.py.
    """
    from jobs.common.schemas import QUARANTINE_REASONS
    from jobs.stream.sources.readers import linked_reason, screen_files

    root, outside = tmp_path / "in", tmp_path / "elsewhere"
    root.mkdir()
    outside.mkdir()
    (outside / "key.pem").write_text("-----BEGIN PRIVATE KEY-----\n")
    (root / "plain.json").write_text("{}\n")
    (root / "link.json").symlink_to(outside / "key.pem")
    (root / "dir").symlink_to(outside)  # a linked folder: its files resolve outside the root
    (root / "inner").mkdir()
    (root / "inner" / "ok.json").write_text("{}\n")
    uris = [f"file://{root}/plain.json", f"file://{root}/link.json", f"file://{root}/dir/key.pem"]
    uris.append(f"file:{root}/inner/ok.json")
    readable, unread = screen_files(uris, str(root))
    assert readable == [uris[0], uris[3]]
    assert unread.column("reason").to_pylist() == ["symlink", "outside_landing_root"]
    assert unread.column("raw").to_pylist() == [f"{root}/link.json", f"{root}/dir/key.pem"]
    assert {"symlink", "outside_landing_root"} <= set(QUARANTINE_REASONS)
    assert linked_reason(f"{root}/link.json", None) == "symlink"  # a link whatever the root
    assert linked_reason(f"{root}/dir/key.pem", None) is None  # outside: only against a root
    assert linked_reason("s3a://bucket/in/link.json", str(root)) is None  # object stores have no links
    assert linked_reason(f"{root}/plain.json", f"file://{root}") is None  # the root as a URI


def test_the_files_no_batch_planned_are_those_under_the_input_missing_from_the_source_log(tmp_path):
    """A file the file source dropped unseen (maxFileAge did) is named after an available-now run."""
    import json
    from urllib.parse import quote

    from jobs.stream.sources.source_log import unplanned_files

    root, ck = tmp_path / "in", tmp_path / "ck"
    (root / "sub").mkdir(parents=True)
    for name in ("a b.json", "sub/c.json", "missed.json", ".hidden", "_SUCCESS", "d.json._COPYING_"):
        (root / name).write_text("{}\n")
    log = ck / "query" / "sources" / "0"
    log.mkdir(parents=True)

    def entry(*names):
        rows = [json.dumps({"path": "file://" + quote(f"{root}/{n}"), "timestamp": 1}) for n in names]
        return "v1\n" + "".join(r + "\n" for r in rows)

    (log / "9.compact").write_text(entry("a b.json"))  # the compaction holds the earlier entries
    (log / "10").write_text(entry("sub/c.json"))
    (log / ".11.tmp").write_text(entry("missed.json"))  # an interrupted write: not a planned batch
    missed = unplanned_files(str(ck), str(root))
    assert [w.spark for w in missed] == [f"{root}/missed.json"]
