"""The watermark stage's state per micro-batch under ``CHECKPOINT/stage`` (generators, open windows).

A state folder ``state-N/`` holds ``wm.json`` (generator snapshots), ``open.parquet`` (open windows),
``owners.parquet`` (partition-scoped mode) and, written last, ``manifest.json``: the SHA-256 and size of
every other file (the names are :mod:`jobs.stream.checkpoint.layout`'s). The folder is built under a
temporary name (every file fsynced) and renamed into place, so a SIGKILL during a save leaves only the
temporary folder, which is discarded (Spark replays the batch). A ``state-N`` folder that does not match its
manifest, or is missing while batch ``N + 1`` runs, is damage: the job refuses to go on
(:class:`CheckpointError`) instead of falling back to older state.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from jobs.common.schemas import PARTIAL_SCHEMA
from jobs.stream.checkpoint.durable import fsync_dir, fsync_file, write_durably
from jobs.stream.checkpoint.layout import (
    MANIFEST,
    OPEN_FILE,
    OWNERS_FILE,
    WM_FILE,
    CheckpointLayout,
    spark_done,
)
from jobs.stream.stage.scoped import OWNERS_SCHEMA
from watermark.combine import PartitionedWatermark
from watermark.config import PipelineConfig
from watermark.timeutil import NO_WATERMARK

log = logging.getLogger("jobs.stream")

#: ``wm.json``'s ``format``: 2 = the folder has a ``manifest.json`` (folders without the field predate it).
STATE_FORMAT = 2
RECOVERY = (
    "the checkpoint is damaged. To recover, restore the whole checkpoint folder from a backup taken while "
    "the job was stopped, or start over with a new --checkpoint and a new --output (a new checkpoint reads "
    "its input from the start); do not delete state folders by hand"
)


class CheckpointError(RuntimeError):
    """The checkpoint's stage state is missing, damaged, or does not match the configuration it names."""


@dataclass
class SavedStage:
    """The stage's state after a batch."""

    watermark: PartitionedWatermark
    open_windows: pa.Table
    config_version: int
    closed_until_ms: int = NO_WATERMARK  # end of the last window --flush-at-end closed (a watermark floor)
    owners: pa.Table | None = (
        None  # partition-scoped mode: the partition owning each key (jobs.stream.stage.scoped)
    )
    #: When the batch ran its stage in the executors: the Parquet folder of its open windows
    #: (``open_windows`` is then empty; :mod:`jobs.stream.stage.executors`).
    open_dir: str | None = None
    config: PipelineConfig | None = None  # the configuration the state was made under (its batch's)
    batch_id: int = -1  # the batch the state is the result of


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class StageStore:
    """Batch-versioned stage state under ``CHECKPOINT/stage``.

    ``batch-N.json`` (ingestion time, configuration) is written before batch N is processed, ``state-N/``
    (generator snapshots, open windows, manifest) after it.
    """

    keep = 3

    def __init__(self, checkpoint: str) -> None:
        self.layout = CheckpointLayout(checkpoint)
        self.root = self.layout.stage
        self.root.mkdir(parents=True, exist_ok=True)
        self._recover_interrupted_saves()

    def _recover_interrupted_saves(self) -> None:
        """Undo what a save killed half-way left: a temporary folder, or a replaced state set aside."""
        for path, final in self.layout.states_set_aside():
            if final.exists():
                shutil.rmtree(path, ignore_errors=True)
            else:  # killed between setting the old state aside and renaming the new one in
                os.replace(path, final)
                log.warning("restored %s, set aside by an interrupted save", final)
        for path in self.layout.states_unfinished():
            shutil.rmtree(path, ignore_errors=True)  # never renamed in: its batch runs again

    def _meta_path(self, batch_id: int) -> Path:
        return self.layout.batch_meta(batch_id)

    def _read_meta(self, path: Path) -> tuple[int, PipelineConfig]:
        try:
            meta = json.loads(path.read_text(encoding="utf-8"))
            return int(meta["ingest_ms"]), PipelineConfig.from_dict(meta["config"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            msg = f"{path}: unreadable batch metadata ({type(exc).__name__}: {exc}); {RECOVERY}"
            raise CheckpointError(msg) from None

    def _write_meta(self, batch_id: int, ingest_ms: int, config: PipelineConfig) -> None:
        path = self._meta_path(batch_id)
        tmp = self.layout.batch_meta_tmp(batch_id)
        write_durably(tmp, json.dumps({"ingest_ms": ingest_ms, "config": config.to_dict()}).encode())
        os.replace(tmp, path)

    def batch_meta(self, batch_id: int, config: PipelineConfig) -> tuple[int, PipelineConfig]:
        """The batch's ingestion time and configuration: fixed at its first attempt, reused on replays."""
        path = self._meta_path(batch_id)
        if path.exists():
            return self._read_meta(path)
        ingest_ms = int(time.time() * 1000)
        self._write_meta(batch_id, ingest_ms, config)
        return ingest_ms, config

    def repin(self, batch_id: int, config: PipelineConfig) -> None:
        """Fix batch ``batch_id`` to ``config`` (a refused configuration rolled back): replays use it too."""
        ingest_ms, _ = self._read_meta(self._meta_path(batch_id))
        self._write_meta(batch_id, ingest_ms, config)

    def _folders(self) -> list[tuple[int, Path]]:
        return self.layout.states()

    def latest_batch(self) -> int | None:
        """Batch id of the newest saved state."""
        folders = self._folders()
        return folders[-1][0] if folders else None

    def _committed_before(self, batch_id: int) -> bool:
        """Whether batch ``batch_id - 1`` ran to its end: Spark committed it, or its metadata exists."""
        previous = batch_id - 1
        commit = self.layout.commit(previous)
        return previous >= 0 and (commit.exists() or self._meta_path(previous).exists())

    def check(self) -> None:
        """Verify the state the next batch starts from (at start); raises :class:`CheckpointError`."""
        done = self.layout.committed_batches()
        if done:
            self.load_before(max(done) + 1)
        elif self._folders():
            self.load_before(self._folders()[-1][0] + 1)

    def load_before(self, batch_id: int) -> SavedStage | None:
        """State of batch ``batch_id - 1``, the one batch ``batch_id`` continues from (verified).

        None for the first batch of a checkpoint. Raises :class:`CheckpointError` naming the file when that
        state is missing or damaged, or does not match the configuration of the batch that made it: older
        state would give wrong tables.
        """
        folders = [(b, p) for b, p in self._folders() if b < batch_id]
        if not folders:
            if self._committed_before(batch_id):
                missing = self.layout.state(batch_id - 1)
                msg = (
                    f"{missing} is missing (the state of batch {batch_id - 1}, which batch {batch_id} "
                    f"continues from): {RECOVERY}"
                )
                raise CheckpointError(msg)
            return None
        number, path = folders[-1]
        if number != batch_id - 1:
            missing = self.layout.state(batch_id - 1)
            msg = (
                f"{missing} is missing (the state of batch {batch_id - 1}, which batch {batch_id} continues "
                f"from; the newest older one is {path.name}): {RECOVERY}"
            )
            raise CheckpointError(msg)
        return self._load(number, path)

    def _load(self, number: int, path: Path) -> SavedStage:
        self._verify(path)
        wm_file = path / WM_FILE
        try:
            snap = json.loads(wm_file.read_text(encoding="utf-8"))
            watermark = PartitionedWatermark.from_snapshot(snap["watermark"])
            version = int(snap["config_version"])
            closed = int(snap.get("closed_until_ms", NO_WATERMARK))
            open_dir = snap.get("open_dir")
            if open_dir is not None:
                open_dir = str(self.layout.open_windows_at(str(open_dir)))
                if not spark_done(open_dir).exists():  # Spark writes it last
                    msg = f"{open_dir}: the open windows of this state are missing or incomplete"
                    raise ValueError(msg)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            msg = f"{wm_file}: unreadable stage state ({type(exc).__name__}: {exc}); {RECOVERY}"
            raise CheckpointError(msg) from None
        tables: dict[str, pa.Table | None] = {}
        for name, schema in ((OPEN_FILE, PARTIAL_SCHEMA), (OWNERS_FILE, OWNERS_SCHEMA)):
            file = path / name
            if name == OWNERS_FILE and not file.exists():
                tables[name] = None
                continue
            try:
                tables[name] = pq.read_table(file).cast(schema)
            except (OSError, pa.ArrowException, ValueError) as exc:
                msg = f"{file}: unreadable stage state ({type(exc).__name__}: {exc}); {RECOVERY}"
                raise CheckpointError(msg) from None
        config = None
        meta = self._meta_path(number)
        if meta.exists():
            _, config = self._read_meta(meta)
            check_state_config(wm_file, watermark, version, config)
        open_windows = tables[OPEN_FILE]
        assert open_windows is not None
        return SavedStage(
            watermark, open_windows, version, closed, tables[OWNERS_FILE], open_dir, config, number
        )

    def _verify(self, path: Path) -> None:
        """Check the folder against its manifest (the sizes and SHA-256 of its files)."""
        manifest = path / MANIFEST
        if not manifest.exists():
            wm_file = path / WM_FILE
            legacy = False
            if wm_file.exists():
                try:
                    legacy = "format" not in json.loads(wm_file.read_text(encoding="utf-8"))
                except (OSError, ValueError, TypeError):
                    legacy = False
            if legacy:  # written before manifests existed: read as is (errors still name the file)
                return
            msg = f"{manifest} is missing: {path.name} is incomplete or damaged; {RECOVERY}"
            raise CheckpointError(msg)
        try:
            doc = json.loads(manifest.read_text(encoding="utf-8"))
            files = dict(doc["files"])
            if doc.get("format") != STATE_FORMAT or not {WM_FILE, OPEN_FILE} <= set(files):
                msg = "not a state manifest"
                raise ValueError(msg)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            msg = f"{manifest}: unreadable manifest ({type(exc).__name__}: {exc}); {RECOVERY}"
            raise CheckpointError(msg) from None
        for name, want in sorted(files.items()):
            file = path / name
            if os.sep in name or name.startswith(".") or not file.is_file():
                msg = f"{file} is missing (listed in {manifest}); {RECOVERY}"
                raise CheckpointError(msg)
            size = file.stat().st_size
            if size != want.get("bytes") or _sha256(file) != want.get("sha256"):
                msg = (
                    f"{file} does not match its checksum in {manifest} ({size} bytes, "
                    f"{want.get('bytes')} recorded): it was truncated or changed; {RECOVERY}"
                )
                raise CheckpointError(msg)

    def oldest_batch(self) -> int | None:
        """Batch id of the oldest state kept."""
        states = self._folders()
        return states[0][0] if states else None

    def save(
        self,
        batch_id: int,
        watermark: PartitionedWatermark,
        open_windows: pa.Table,
        version: int,
        closed_until_ms: int = NO_WATERMARK,
        owners: pa.Table | None = None,
        open_dir: str | None = None,
    ) -> None:
        """Write batch ``batch_id``'s state atomically and durably; keep the last few.

        The files are written and fsynced in a temporary folder, the manifest last, and the folder is
        renamed into place (a state already there, when a batch's state is rewritten, is set aside first
        and restored by the next start if the save is killed in between).
        """
        final = self.layout.state(batch_id)
        tmp = self.layout.state_tmp(batch_id)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        doc = {
            "format": STATE_FORMAT,
            "batch_id": batch_id,
            "watermark": watermark.snapshot(),
            "config_version": version,
            "closed_until_ms": closed_until_ms,
            # relative to the stage folder, so that a checkpoint can move
            "open_dir": None if open_dir is None else self.layout.open_windows_ref(open_dir),
        }
        write_durably(tmp / WM_FILE, json.dumps(doc).encode())
        pq.write_table(open_windows, tmp / OPEN_FILE)
        names = [WM_FILE, OPEN_FILE]
        if owners is not None:
            pq.write_table(owners, tmp / OWNERS_FILE)
            names.append(OWNERS_FILE)
        files: dict[str, Any] = {}
        for name in names:
            file = tmp / name
            if name.endswith(".parquet"):
                fsync_file(file)
            files[name] = {"bytes": file.stat().st_size, "sha256": _sha256(file)}
        manifest = {"format": STATE_FORMAT, "batch_id": batch_id, "files": files}
        write_durably(tmp / MANIFEST, json.dumps(manifest, sort_keys=True).encode())
        fsync_dir(tmp)
        old = self.layout.state_set_aside(batch_id)
        if final.exists():
            shutil.rmtree(old, ignore_errors=True)
            os.replace(final, old)
        os.replace(tmp, final)
        fsync_dir(self.root)
        shutil.rmtree(old, ignore_errors=True)
        self._prune()

    def _prune(self) -> None:
        states = self._folders()
        for _, old in states[: -self.keep]:
            shutil.rmtree(old, ignore_errors=True)
        # A restart replays batches after the newest state; a meta file older than the oldest kept state is
        # never read again (one file per batch would otherwise grow without bound).
        oldest = states[-self.keep :][0][0]
        for number, meta in self.layout.batch_metas():
            if number < oldest:
                meta.unlink(missing_ok=True)


def check_state_config(
    where: Path, watermark: PartitionedWatermark, version: int, config: PipelineConfig
) -> None:
    """Refuse a state whose generators are not those of the configuration version it claims."""
    if config.version != version:
        msg = (
            f"{where}: the state claims configuration version {version}, but its batch ran version "
            f"{config.version}; {RECOVERY}"
        )
        raise CheckpointError(msg)
    wrong = watermark.mismatch(
        config.strategy, config.params, idle_timeout_ms=config.idle_timeout_ms, mode=config.partition_mode
    )
    if wrong:
        msg = f"{where}: the state does not match configuration version {version}: {wrong}; {RECOVERY}"
        raise CheckpointError(msg)


def checkpoint_app_id(checkpoint: str, output: str) -> str:
    """The Delta application id (``txnAppId``) of the job writing ``output`` from ``checkpoint``.

    Delta skips a batch whose ``txnVersion`` its application already committed, so the id must belong to
    the checkpoint: after a checkpoint reset Spark numbers batches from 0 again, and under the old id every
    batch up to the old highest would be skipped as written. The id is created with the checkpoint and
    stored in it (``CHECKPOINT/app-id``). A checkpoint from before the file existed, which already has
    query offsets, keeps the id it wrote with (``jobs.stream``).

    Raises
    ------
    ValueError
        For a new checkpoint whose ``output`` already holds the pipeline's tables: they were written from
        another checkpoint, and starting over would write its input a second time.

    """
    layout = CheckpointLayout(checkpoint)
    path = layout.app_id
    if path.exists():
        text = path.read_text(encoding="utf-8").strip()
        if not text or len(text) > 200 or not text.isprintable():
            msg = f"{path}: not an application id; restore it from a backup, or start a new checkpoint"
            raise ValueError(msg)
        return text
    if layout.has_offsets():
        app_id = "jobs.stream"
    else:
        written = sorted(p.parent.name for p in Path(output).glob("*/_delta_log") if any(p.iterdir()))
        if written:
            msg = (
                f"{checkpoint} is a new checkpoint, but {output} already holds tables written from another "
                f"one ({', '.join(written)}): restart with the checkpoint that wrote them, or write to a new "
                "--output (a new checkpoint reads its input from the start)"
            )
            raise ValueError(msg)
        app_id = f"jobs.stream-{uuid.uuid4().hex}"
    layout.root.mkdir(parents=True, exist_ok=True)
    tmp = layout.app_id_tmp
    tmp.write_text(app_id + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return app_id
