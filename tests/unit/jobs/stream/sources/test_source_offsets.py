"""The landing files of a micro-batch, read from Spark's own logs: a batch that Spark planned after a kill
between the file source's log and the offset log reads the entries of its whole offset range."""

import json

from jobs.stream.sources.source_log import logged_batch_files, source_offsets


def write_logs(ck, offsets: dict[int, int], entries: dict[int, list[str]]) -> None:
    """Spark's offset log (``{"logOffset": K}`` per batch) and the file source's log (files per entry K)."""
    (ck / "query" / "offsets").mkdir(parents=True)
    (ck / "query" / "sources" / "0").mkdir(parents=True)
    for batch, end in offsets.items():
        meta = json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": {}})
        (ck / "query" / "offsets" / str(batch)).write_text(f"v1\n{meta}\n{json.dumps({'logOffset': end})}")
    for entry, files in entries.items():
        lines = [json.dumps({"path": f, "timestamp": 1_000, "batchId": entry}) for f in files]
        (ck / "query" / "sources" / "0" / str(entry)).write_text("\n".join(["v1", *lines]))


def test_a_batch_reads_its_own_entry_of_the_source_log(tmp_path):
    write_logs(tmp_path, {0: 0, 1: 1}, {0: ["s3a://b/in/f1.json"], 1: ["s3a://b/in/f2.json"]})
    assert source_offsets(str(tmp_path), 1) == (0, 1)
    assert logged_batch_files(str(tmp_path), 1) == ["s3a://b/in/f2.json"]
    assert logged_batch_files(str(tmp_path), 0) == ["s3a://b/in/f1.json"]


def test_a_batch_planned_after_a_kill_between_the_two_logs_reads_every_entry_of_its_range(tmp_path):
    # Killed after the source log's entry 6 (file 7) and before offsets/6: the restart plans batch 6 over
    # entries 6 and 7 (file 8), and no later batch reads file 8 again.
    entries = {k: [f"s3a://b/in/feed-{k + 1:06d}.json"] for k in range(8)}
    write_logs(tmp_path, {5: 5, 6: 7}, entries)
    assert source_offsets(str(tmp_path), 6) == (5, 7)
    assert logged_batch_files(str(tmp_path), 6) == [
        "s3a://b/in/feed-000007.json",
        "s3a://b/in/feed-000008.json",
    ]


def test_without_the_offset_log_the_entry_of_the_batch_id_is_taken(tmp_path):
    write_logs(tmp_path, {}, {3: ["/in/a.json"]})
    assert source_offsets(str(tmp_path), 3) is None
    assert logged_batch_files(str(tmp_path), 3) == ["/in/a.json"]
    assert logged_batch_files(str(tmp_path), 4) is None


def test_the_temporary_files_a_killed_query_left_in_spark_s_logs_are_removed_at_start(tmp_path):
    from jobs.stream.run import clear_interrupted_log_writes

    write_logs(tmp_path, {0: 0}, {0: ["/in/a.json"]})
    left = [
        tmp_path / "query" / "offsets" / ".1.ff0cd3d8.tmp",
        tmp_path / "query" / "commits" / "..0.ff0cd3d8.tmp.crc",
        tmp_path / "query" / "sources" / "0" / ".1.9c0b6294.tmp",
    ]
    (tmp_path / "query" / "commits").mkdir()
    for path in left:
        path.write_text("")
    removed = clear_interrupted_log_writes(str(tmp_path))
    assert sorted(r.name for r in removed) == sorted(p.name for p in left)
    assert not any(p.exists() for p in left) and (tmp_path / "query" / "sources" / "0" / "0").exists()
