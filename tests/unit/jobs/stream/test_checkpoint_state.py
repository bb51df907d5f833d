"""The stage state under ``CHECKPOINT/stage``: atomic, checksummed, refused when missing or damaged, and
validated against the configuration version it claims; a configuration that fails to apply is rolled back."""

import json
import logging
import os
from pathlib import Path

import pytest

from jobs.common.windows import empty_partials
from jobs.stream.checkpoint.state import MANIFEST, CheckpointError, StageStore, _sha256
from watermark.config import PipelineConfig, write_config
from watermark.partitions.combine import PartitionedWatermark
from watermark.strategies.registry import make

V1 = PipelineConfig.from_dict(
    {"version": 1, "strategy": "periodic", "params": {"delay_ms": 100}, "window_ms": 1_000}
)


def watermark_of(config: PipelineConfig) -> PartitionedWatermark:
    return PartitionedWatermark(
        config.strategy, config.params, idle_timeout_ms=config.idle_timeout_ms, mode=config.partition_mode
    )


def run_batches(store: StageStore, batches: int, config: PipelineConfig = V1) -> PartitionedWatermark:
    """What the handler does per batch: metadata first, state after."""
    pw = watermark_of(config)
    for batch in range(batches):
        store.batch_meta(batch, config)
        pw.process(["a", "b"], [1_000 * batch, 1_000 * batch + 5], [1_000 * batch + 10, 1_000 * batch + 20])
        store.save(batch, pw, empty_partials(), config.version)
    return pw


def state(store: StageStore, batch: int) -> Path:
    return Path(store.root.key) / f"state-{batch:012d}"


def manifest_of(folder: Path) -> dict:
    return json.loads((folder / MANIFEST).read_text())


def role_file(store: StageStore, batch: int, role: str) -> Path:
    """The file of ``role`` (wm, open, owners) that batch ``batch``'s manifest names."""
    folder = state(store, batch)
    names = [name for name, entry in manifest_of(folder)["files"].items() if entry["role"] == role]
    assert len(names) == 1
    return folder / names[0]


def refusal(store: StageStore, batch_id: int) -> str:
    """The refusal of the state batch ``batch_id`` continues from, as a restart finds it (a running job
    continues from the state it saved itself, which it keeps in memory)."""
    with pytest.raises(CheckpointError) as info:
        StageStore(store.root.parent).load_before(batch_id)
    text = str(info.value)
    assert "the whole checkpoint folder and the tables from one" in text and "new --checkpoint" in text
    return text


def test_a_state_folder_is_complete_with_a_manifest_of_checksums_written_last(tmp_path):
    store = StageStore(str(tmp_path))
    pw = run_batches(store, 2)
    folder = state(store, 1)
    manifest = manifest_of(folder)
    assert manifest["format"] == 3
    assert sorted(entry["role"] for entry in manifest["files"].values()) == ["open", "wm"]
    for name, entry in manifest["files"].items():
        data = (folder / name).read_bytes()
        assert entry == {"role": entry["role"], "bytes": len(data), "sha256": _sha256(data)}
    assert sorted(p.name for p in folder.iterdir()) == sorted([MANIFEST, *manifest["files"]])
    saved = store.load_before(2)
    assert saved is not None and saved.batch_id == 1 and saved.config == V1
    assert saved.watermark.snapshot() == pw.snapshot()
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]  # nothing temporary left


def test_a_deleted_newest_wm_file_is_refused_naming_the_file(tmp_path):
    store = StageStore(str(tmp_path))
    run_batches(store, 4)
    wm = role_file(store, 3, "wm")
    wm.unlink()
    text = refusal(store, 4)  # before: silently went on from state-2
    assert str(wm) in text


def test_a_deleted_newest_state_folder_is_refused_naming_it(tmp_path):
    import shutil

    store = StageStore(str(tmp_path))
    run_batches(store, 4)
    shutil.rmtree(state(store, 3))
    assert str(state(store, 3)) in refusal(store, 4)
    for batch in (0, 1, 2):
        shutil.rmtree(state(store, batch), ignore_errors=True)
    assert str(state(store, 3)) in refusal(store, 4)  # no state at all, but batch 3 ran


@pytest.mark.parametrize("role", ["wm", "open"])
def test_a_truncated_state_file_is_refused_naming_it(tmp_path, role):
    store = StageStore(str(tmp_path))
    run_batches(store, 3)
    file = role_file(store, 2, role)
    data = file.read_bytes()
    file.write_bytes(data[: len(data) // 2])
    text = refusal(store, 3)  # before: a raw JSON or pyarrow error naming no file
    assert str(file) in text and "checksum" in text


def test_a_newest_state_without_its_manifest_is_missing_once_its_batch_committed(tmp_path):
    store = StageStore(str(tmp_path))
    run_batches(store, 3)
    (state(store, 2) / MANIFEST).unlink()
    assert str(state(store, 2)) in refusal(store, 3)  # batch 2's metadata says it ran


def test_a_save_killed_before_its_manifest_is_discarded_and_the_batch_replays_from_the_state_before(
    tmp_path,
):
    store = StageStore(str(tmp_path))
    run_batches(store, 3)
    # SIGKILL while batch 3's state was written: its files, but no manifest.
    partial = state(store, 3)
    partial.mkdir()
    (partial / "wm-0123456789ab.json").write_text('{"format": 3, "waterm')
    store = StageStore(str(tmp_path))  # the restart
    assert not partial.exists()
    saved = store.load_before(3)  # Spark replays batch 3
    assert saved is not None and saved.batch_id == 2


def test_a_rewrite_killed_before_its_manifest_leaves_the_state_it_replaces_whole(tmp_path, monkeypatch):
    from watermark import storage

    store = StageStore(str(tmp_path))
    pw = run_batches(store, 3)
    before = manifest_of(state(store, 2))
    real = storage.write_bytes

    def killed_at_the_manifest(where, data):
        if str(where).endswith(MANIFEST):
            raise KeyboardInterrupt  # the process dies here
        real(where, data)

    monkeypatch.setattr(storage, "write_bytes", killed_at_the_manifest)
    with pytest.raises(KeyboardInterrupt):
        store.save(2, pw, empty_partials(), V1.version, closed_until_ms=99_000)  # the flush's rewrite
    monkeypatch.setattr(storage, "write_bytes", real)
    store = StageStore(str(tmp_path))
    saved = store.load_before(3)
    assert saved is not None and saved.closed_until_ms != 99_000 and manifest_of(state(store, 2)) == before
    store.save(2, pw, empty_partials(), V1.version, closed_until_ms=99_000)  # the rewrite runs again
    assert store.load_before(3).closed_until_ms == 99_000
    assert sorted(p.name for p in state(store, 2).iterdir()) == sorted(
        [MANIFEST, *manifest_of(state(store, 2))["files"]]
    )  # the files of the attempts no manifest names are gone


def test_a_state_of_the_previous_format_with_fixed_names_is_still_read(tmp_path):
    store = StageStore(str(tmp_path))
    pw = run_batches(store, 2)
    folder = state(store, 1)
    files = {}
    for role, name in (("wm", "wm.json"), ("open", "open.parquet")):
        data = role_file(store, 1, role).read_bytes()
        if role == "wm":
            doc = json.loads(data)
            doc["format"] = 2
            data = json.dumps(doc).encode()
        (folder / name).write_bytes(data)
        files[name] = {"bytes": len(data), "sha256": _sha256(data)}
    for old in manifest_of(folder)["files"]:
        (folder / old).unlink()
    (folder / MANIFEST).write_text(json.dumps({"format": 2, "batch_id": 1, "files": files}))
    saved = StageStore(str(tmp_path)).load_before(2)
    assert saved is not None and saved.watermark.snapshot() == pw.snapshot()


def test_a_rewrite_of_the_previous_version_killed_between_its_renames_restores_the_state_set_aside(tmp_path):
    store = StageStore(str(tmp_path))
    run_batches(store, 3)
    os.replace(state(store, 2), Path(store.root.key) / ".state-000000000002.old")  # killed after this rename
    store = StageStore(str(tmp_path))
    saved = store.load_before(3)
    assert saved is not None and saved.batch_id == 2


def test_the_check_at_start_verifies_the_state_of_the_last_committed_batch(tmp_path):
    store = StageStore(str(tmp_path))
    run_batches(store, 3)
    commits = tmp_path / "query" / "commits"
    commits.mkdir(parents=True)
    for batch in range(3):
        (commits / str(batch)).write_text("v1\n{}\n")
    store.check()
    damaged = role_file(store, 2, "open")
    damaged.write_bytes(b"")
    with pytest.raises(CheckpointError, match=damaged.name):
        StageStore(str(tmp_path)).check()


def test_a_republished_file_keeps_the_mode_of_the_file_it_replaces(tmp_path):
    path = tmp_path / "watermark.json"
    write_config(path, V1)
    os.chmod(path, 0o644)
    write_config(path, V1.with_version(2, params={"delay_ms": 300}))
    assert (path.stat().st_mode & 0o777) == 0o644  # mkstemp's 0600 would lock another user's job out


def rewrite_state(store: StageStore, batch: int, change) -> None:
    """Edit the wm file and record the edit in the manifest (a consistent, but foreign, state)."""
    folder = state(store, batch)
    wm = role_file(store, batch, "wm")
    doc = json.loads(wm.read_text())
    change(doc)
    wm.write_text(json.dumps(doc))
    manifest = manifest_of(folder)
    data = wm.read_bytes()
    manifest["files"][wm.name] = {"role": "wm", "bytes": len(data), "sha256": _sha256(data)}
    (folder / MANIFEST).write_text(json.dumps(manifest))


def test_a_snapshot_whose_strategy_is_not_its_config_versions_is_refused(tmp_path):
    store = StageStore(str(tmp_path))
    run_batches(store, 2)

    def to_ingestion(doc):
        wm = doc["watermark"]
        wm["strategy"], wm["params"] = "ingestion", {}
        for part in wm["partitions"]:
            part[2] = make("ingestion").snapshot()

    rewrite_state(store, 1, to_ingestion)
    text = refusal(store, 2)
    assert "does not match configuration version 1" in text and "'ingestion'" in text


def test_a_snapshot_whose_parameters_or_version_differ_from_its_config_version_is_refused(tmp_path):
    store = StageStore(str(tmp_path))
    run_batches(store, 2)

    def other_delay(doc):
        doc["watermark"]["params"] = {"delay_ms": 5}
        for part in doc["watermark"]["partitions"]:
            part[2]["params"] = {"delay_ms": 5, "period_ms": 200}

    rewrite_state(store, 1, other_delay)
    assert "parameters" in refusal(store, 2)
    rewrite_state(store, 1, lambda doc: doc.update(config_version=7))
    assert "claims configuration version 7" in refusal(store, 2)


def test_a_partition_generator_of_another_strategy_than_its_snapshot_is_refused(tmp_path):
    store = StageStore(str(tmp_path))
    run_batches(store, 2)

    def plant(doc):
        doc["watermark"]["partitions"][0][2] = make("ingestion").snapshot()

    rewrite_state(store, 1, plant)
    assert "partition 'a'" in refusal(store, 2)


# -- a configuration that fails while a batch applies it ---------------------------------------------------
def test_a_version_that_fails_to_apply_is_refused_and_rolled_back(tmp_path, monkeypatch, caplog):
    from prometheus_client import CollectorRegistry

    from jobs.stream.handler import BatchHandler
    from jobs.stream.options import JobOptions
    from monitoring.metrics import JobMetrics

    path = tmp_path / "watermark.json"
    write_config(path, V1)
    metrics = JobMetrics(CollectorRegistry())
    options = JobOptions(
        input=str(tmp_path / "in"),
        output=str(tmp_path / "out"),
        checkpoint=str(tmp_path / "ck"),
        config=V1,
        config_path=str(path),
    )
    handler = BatchHandler(None, options, metrics)
    run_batches(handler.states.store, 1)
    v2 = V1.with_version(2, params={"delay_ms": 300})
    write_config(path, v2)
    _, config = handler.states.store.batch_meta(1, handler.states.config())
    assert config.version == 2
    saved = handler.states.store.load_before(1)
    assert saved is not None

    def broken(self, *args, **kwargs):
        msg = "int too large to convert"
        raise OverflowError(msg)

    monkeypatch.setattr(PartitionedWatermark, "reconfigured", broken)
    with caplog.at_level(logging.WARNING, logger="jobs.stream"):
        watermark, config = handler.states.reconfigure(1, saved, config)
    assert config == V1 and watermark is saved.watermark
    assert any("version 2 failed to apply" in r.getMessage() for r in caplog.records)
    assert metrics.registry.get_sample_value("awm_config_refused_total") == 1
    assert handler.states.watcher is not None and handler.states.watcher.current == V1
    assert handler.states.config() == V1  # the failing file is not applied again until it changes
    assert handler.states.store.batch_meta(1, v2)[1] == V1  # a replay of the batch runs version 1 too
    handler.states.store.save(1, watermark, empty_partials(), config.version)
    assert handler.states.store.load_before(2) is not None  # and its state matches its pinned version


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"window_ms": 2_000}, "the window (1000 ms, slide None -> 2000 ms, slide None)"),
        ({"straggler_ms": 0}, "the straggler band"),
        ({"partition_mode": "scoped"}, "the partition mode (min -> scoped)"),
    ],
)
def test_a_restart_with_another_window_band_or_mode_is_refused_before_any_batch(tmp_path, change, needle):
    """Flags of another shape than the checkpoint's state: exit 2 (CheckpointError) before any batch; flags
    of the same shape with other parameters go on from the state (reconfigured, each partition's watermark
    a floor)."""
    from jobs.stream.handler import BatchHandler
    from jobs.stream.options import JobOptions

    folders = {name: str(tmp_path / name) for name in ("input", "output", "checkpoint")}
    first = JobOptions(**folders, config=V1)
    run_batches(BatchHandler(None, first).states.store, 2)
    other = PipelineConfig.from_dict(V1.to_dict() | {"version": 2} | change)
    with pytest.raises(CheckpointError) as info:
        BatchHandler(None, JobOptions(**folders, config=other))
    text = str(info.value)
    assert needle in text and "the command line" in text and "batch 1" in text
    assert "start a new --output and --checkpoint" in text
    same_shape = JobOptions(**folders, config=V1.with_version(2, params={"delay_ms": 300}))
    assert BatchHandler(None, same_shape).states.start(2).config.version == 2


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"window_ms": 2_000}, "the window"),
        ({"partition_mode": "scoped"}, "the partition mode (min -> scoped)"),
    ],
)
def test_a_file_changing_the_shape_while_the_job_was_down_is_refused_and_the_state_version_goes_on(
    tmp_path, change, needle, caplog
):
    """As a running job refuses such a version: a log line and ``awm_config_refused_total``; the restart
    runs the state's version, and the file is read again only when it changes."""
    from prometheus_client import CollectorRegistry

    from jobs.stream.handler import BatchHandler
    from jobs.stream.options import JobOptions
    from monitoring.metrics import JobMetrics

    path = tmp_path / "watermark.json"
    write_config(path, V1)
    folders = {name: str(tmp_path / name) for name in ("input", "output", "checkpoint")}
    run_batches(BatchHandler(None, JobOptions(**folders, config=V1, config_path=str(path))).states.store, 2)
    edited = PipelineConfig.from_dict(V1.to_dict() | {"version": 2} | change)
    write_config(path, edited)
    metrics = JobMetrics(CollectorRegistry())
    with caplog.at_level(logging.WARNING, logger="jobs.stream"):
        handler = BatchHandler(None, JobOptions(**folders, config=edited, config_path=str(path)), metrics)
    assert any(needle in r.getMessage() and "version 2" in r.getMessage() for r in caplog.records)
    assert metrics.registry.get_sample_value("awm_config_refused_total") == 1
    assert handler.states.start(2).config == V1
    write_config(path, V1.with_version(3, params={"delay_ms": 300}))  # the same shape: applies
    assert handler.states.config().version == 3


def test_a_run_reads_each_state_and_batch_metadata_it_wrote_from_memory_not_the_store(tmp_path, monkeypatch):
    """On an object store every read is a request: batch after batch, the run continues from the state it
    saved and the metadata it wrote without reading or listing them again."""
    from watermark import storage

    store = StageStore(str(tmp_path))
    run_batches(store, 2)
    calls = []
    for name in ("read_bytes", "read_text", "exists", "listdir"):
        real = getattr(storage, name)
        monkeypatch.setattr(
            storage, name, lambda *a, real=real, name=name, **k: calls.append(name) or real(*a, **k)
        )
    saved = store.load_before(2)
    assert saved is not None and saved.batch_id == 1 and saved.config == V1
    assert store.batch_meta(1, V1)[1] == V1
    assert calls == []
