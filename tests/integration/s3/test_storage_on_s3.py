"""watermark.storage and the job's checkpoint state on a real S3-compatible server (moto, fixture s3_server):
whole writes, listings, deletes, the refusals of a missing bucket and of storage that does not answer, the
stage state committed without rename, pending rows, deduplication ids, the hot-reloaded configuration and
the light reader, all on ``s3a://``."""

import json
import time

import pyarrow as pa
import pytest

from jobs.common.windows import empty_partials
from jobs.stream.checkpoint.dedup import IDS_SCHEMA, SeenIds
from jobs.stream.checkpoint.layout import MANIFEST
from jobs.stream.checkpoint.state import CheckpointError, StageStore, checkpoint_app_id
from jobs.stream.sinks.deferred import PendingRows
from tests.unit.jobs.stream.sinks.test_deferred import BASE, arrivals
from tests.unit.jobs.stream.test_checkpoint_state import V1, run_batches
from watermark import storage
from watermark.config import ConfigWatcher, write_config
from watermark.storage import Location, StorageError


@pytest.fixture
def bucket(s3_server):
    return s3_server.new_bucket()


def test_files_are_written_whole_listed_and_deleted_on_s3(bucket):
    root = Location.of(f"s3a://{bucket}/cp")
    storage.write_text(root / "a" / "one.json", '{"v": 1}')
    storage.write_text(root / "a" / "one.json", '{"v": 2}')
    storage.write_bytes(root / "a" / "sub" / "two.bin", b"\x00\x01")
    assert json.loads(storage.read_text(root / "a" / "one.json")) == {"v": 2}
    assert [(e.name, e.is_dir) for e in storage.listdir(root / "a")] == [("one.json", False), ("sub", True)]
    assert [e.location.relative_to(root) for e in storage.walk_files(root)] == ["a/one.json", "a/sub/two.bin"]
    assert storage.is_file(root / "a" / "one.json") and storage.exists(root / "a")
    assert storage.listdir(root / "missing") == []
    with pytest.raises(FileNotFoundError, match="missing.json"):
        storage.read_bytes(root / "missing.json")
    storage.remove_tree(root / "a")
    storage.remove(root / "nothing")
    assert storage.walk_files(root) == []


def test_a_missing_bucket_and_storage_that_does_not_answer_are_one_line_each(s3_server, monkeypatch):
    with pytest.raises(StorageError, match="'no-such-bucket' does not exist") as info:
        storage.check_reachable("s3a://no-such-bucket/tables", "--output")
    assert "\n" not in str(info.value)
    from tests.plugins.services import free_port

    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    started = time.monotonic()
    with pytest.raises(StorageError, match="cannot be reached") as info:
        storage.check_reachable("s3a://any/tables", "--output")
    assert "\n" not in str(info.value) and time.monotonic() - started < 120


def test_the_stage_state_is_committed_without_rename_and_refused_when_damaged_on_s3(bucket):
    checkpoint = f"s3a://{bucket}/ck"
    store = StageStore(checkpoint)
    pw = run_batches(store, 4)
    saved = store.load_before(4)
    assert saved is not None and saved.batch_id == 3 and saved.watermark.snapshot() == pw.snapshot()
    assert [n for n, _ in store._folders()] == [1, 2, 3]  # the newest three kept
    folder = Location.of(checkpoint) / "stage" / "state-000000000003"
    manifest = json.loads(storage.read_text(folder / MANIFEST))
    wm = next(name for name, entry in manifest["files"].items() if entry["role"] == "wm")
    storage.write_bytes(folder / wm, b'{"format": 3}')  # changed behind the job's back
    with pytest.raises(CheckpointError, match="does not match its checksum"):
        StageStore(checkpoint).load_before(4)
    storage.remove(folder / MANIFEST)  # a save killed before its manifest: batch 3 runs again
    store = StageStore(checkpoint)
    assert store.latest_batch() == 2 and not storage.exists(folder)
    store.save(3, pw, empty_partials(), V1.version)
    assert store.load_before(4).batch_id == 3


def test_pending_rows_and_deduplication_ids_live_on_s3(bucket):
    checkpoint = f"s3a://{bucket}/ck"
    pending = PendingRows(checkpoint)
    pending.put(0, BASE, {"arrivals": arrivals(0, 3)})
    pending.put(1, BASE + 1, {"arrivals": arrivals(1, 2)})
    pending.put(1, BASE + 1, {"arrivals": arrivals(1, 1)})  # the batch run again: its rows replaced
    assert [(p.batch_id, dict(p.tables)) for p in pending.batches()] == [
        (0, {"arrivals": "parquet_file"}),
        (1, {"arrivals": "parquet_file"}),
    ]
    half = Location.of(checkpoint) / "stage" / "pending" / "batch-000000000002"
    storage.write_bytes(half / "arrivals.parquet", b"partial")  # a put killed before its meta.json
    assert [p.batch_id for p in PendingRows(checkpoint).batches()] == [0, 1] and not storage.exists(half)
    seen = SeenIds(checkpoint, horizon_ms=10_000)
    ids = pa.table({"event_id": ["a", "b"], "arrival_time_ms": [BASE, BASE + 5]}, schema=IDS_SCHEMA)
    seen.save(0, seen.before(0), ids)
    assert sorted(seen.before(1).column("event_id").to_pylist()) == ["a", "b"]


def test_a_configuration_on_s3_is_hot_reloaded_and_a_new_checkpoint_claims_its_output(bucket):
    config = f"s3a://{bucket}/conf/watermark.json"
    write_config(config, V1)
    watcher = ConfigWatcher(config)
    assert watcher.poll() is None
    write_config(config, V1.with_version(2, params={"delay_ms": 300}))
    change = watcher.poll()
    assert change is not None and change.applied is not None and change.applied.version == 2
    output = f"s3a://{bucket}/tables"
    app_id = checkpoint_app_id(f"s3a://{bucket}/ck", output)
    assert app_id.startswith("jobs.stream-") and checkpoint_app_id(f"s3a://{bucket}/ck", output) == app_id
    storage.write_text(Location.of(output) / "aggregates" / "_delta_log" / "00000000000000000000.json", "{}")
    with pytest.raises(ValueError, match="already holds tables written from another one"):
        checkpoint_app_id(f"s3a://{bucket}/other-ck", output)


def test_the_light_reader_reads_a_delta_table_on_s3(bucket):
    import os

    from deltalake import write_deltalake

    from jobs.common.object_store import deltalake_storage_options
    from jobs.common.reads import TableReader

    write_deltalake(
        f"s3://{bucket}/tables/t",
        pa.table({"x": [3, 1, 2]}),
        storage_options=deltalake_storage_options(os.environ),
    )
    reader = TableReader(f"s3a://{bucket}/tables", "reader")
    assert reader.exists("t") and sorted(reader.read("t").column("x").to_pylist()) == [1, 2, 3]
    assert not reader.exists("absent")


def test_a_recorded_stream_on_s3_reads_as_the_same_file_on_disk_and_its_errors_name_the_uri(bucket, tmp_path):
    from watermark.streams.input_error import InputError
    from watermark.streams.recorded import read_stream

    text = "te,tp,dev\n1000,1200,a\n900,1300,b\n"
    (tmp_path / "s.csv").write_text(text)
    storage.write_text(f"s3a://{bucket}/streams/s.csv", text)
    local = read_stream(str(tmp_path / "s.csv"), event_time="te", arrival_time="tp", partition="dev")
    remote = read_stream(f"s3a://{bucket}/streams/s.csv", event_time="te", arrival_time="tp", partition="dev")
    assert remote.te_ms.tolist() == local.te_ms.tolist() and remote.partition.tolist() == ["a", "b"]
    with pytest.raises(InputError, match=f"s3a://{bucket}/streams/s.csv: .*'nope'"):
        read_stream(f"s3a://{bucket}/streams/s.csv", event_time="nope", arrival_time="tp")
