"""The watermark stage's state per micro-batch under ``CHECKPOINT/stage`` (generators, open windows).

A state folder ``state-N/`` holds the generator snapshots (``wm-A.json``), the open windows
(``open-A.parquet``), the key owners (``owners-A.parquet``, partition-scoped mode) and, written last,
``manifest.json``: the name, SHA-256 and size of each (the names are
:mod:`jobs.stream.checkpoint.layout`'s; ``A`` is the attempt that wrote them). Every file is written once,
whole (:func:`watermark.storage.write_bytes`: one PUT on an object store), so nothing depends on rename or
fsync: a SIGKILL during a save leaves files no manifest names, which are removed, and a state whose
manifest exists is complete. A batch run again writes new files and a new manifest over the old one, so a
kill at any point leaves either state whole. A manifest that does not match its files, or a state missing
while batch ``N + 1`` runs, is damage: the job refuses to go on (:class:`CheckpointError`) instead of falling
back to older state.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from jobs.common.reads import job_app_ids, tables_written, written_versions
from jobs.common.schemas import PARTIAL_SCHEMA
from jobs.stream.checkpoint.layout import (
    LEGACY_STATE_FILES,
    MANIFEST,
    CheckpointLayout,
    spark_done,
)
from jobs.stream.stage.scoped import OWNERS_SCHEMA
from watermark import storage
from watermark.config import PipelineConfig
from watermark.partitions.combine import PartitionedWatermark
from watermark.storage import Location
from watermark.timeutil import NO_WATERMARK

log = logging.getLogger("jobs.stream")

#: The manifest's ``format``: 3 = attempt-named files with their roles; 2 = fixed names (earlier versions).
STATE_FORMAT = 3
LEGACY_STATE_FORMAT = 2
RECOVERY = (
    "the checkpoint is damaged. To recover, restore the whole checkpoint folder and the tables from one "
    "backup taken while the job was stopped (the two together: a checkpoint behind its tables is refused), "
    "or start over with a new --checkpoint and a new --output (a new checkpoint reads its input from the "
    "start); do not delete state folders by hand (docs/streaming-job.md, Recovery procedures)"
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


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def parquet_bytes(table: pa.Table) -> bytes:
    """``table`` as the bytes of one Parquet file (written whole by :func:`watermark.storage.write_bytes`)."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return bytes(sink.getvalue().to_pybytes())


def read_parquet_bytes(data: bytes) -> pa.Table:
    """The table in the bytes of one Parquet file."""
    return pq.read_table(pa.BufferReader(data))


def remove_entry(entry: storage.Entry) -> None:
    """Delete a listed file or folder."""
    if entry.is_dir:
        storage.remove_tree(entry.location)
    else:
        storage.remove(entry.location)


class StageStore:
    """Batch-versioned stage state under ``CHECKPOINT/stage``.

    ``batch-N.json`` (ingestion time, configuration) is written before batch N is processed, ``state-N/``
    (generator snapshots, open windows, manifest) after it.
    """

    keep = 3

    def __init__(self, checkpoint: str | Location) -> None:
        self.layout = CheckpointLayout(checkpoint)
        self.root = self.layout.stage
        storage.make_dirs(self.root)
        self._recover_interrupted_saves()
        self.discard_unfinished()
        # What this run knows without asking the store again (it is the checkpoint's one writer): the
        # complete states (listed once, then kept up to date by save and prune) and the files of the state
        # it saved last (the next batch continues from it). On an object store each is a request saved at
        # every batch; the state a run starts from is read and verified from the store.
        self._complete: list[tuple[int, Location]] | None = None
        self._saved: tuple[Location, dict[str, tuple[Location, bytes]]] | None = None
        self._metas: dict[int, tuple[int, PipelineConfig]] = {}  # batch metadata this run wrote or read

    def _recover_interrupted_saves(self) -> None:
        """Undo what a save of an earlier version, killed half-way, left (local checkpoints only)."""
        for path, final in self.layout.states_set_aside():
            if storage.exists(final):
                storage.remove_tree(path)
            else:  # killed between setting the old state aside and renaming the new one in
                storage.replace_local(path, final)
                log.warning("restored %s, set aside by an interrupted save", final)
        for path in self.layout.states_unfinished():
            storage.remove_tree(path)  # never renamed in: its batch runs again

    def _meta_path(self, batch_id: int) -> Location:
        return self.layout.batch_meta(batch_id)

    def _read_meta(self, path: Location) -> tuple[int, PipelineConfig]:
        try:
            meta = json.loads(storage.read_text(path))
            return int(meta["ingest_ms"]), PipelineConfig.from_dict(meta["config"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            msg = f"{path}: unreadable batch metadata ({type(exc).__name__}: {exc}); {RECOVERY}"
            raise CheckpointError(msg) from None

    def _write_meta(self, batch_id: int, ingest_ms: int, config: PipelineConfig) -> None:
        doc = {"ingest_ms": ingest_ms, "config": config.to_dict()}
        self._metas.pop(batch_id, None)
        storage.write_bytes(self._meta_path(batch_id), json.dumps(doc).encode())
        self._metas[batch_id] = (ingest_ms, config)

    def _known_meta(self, batch_id: int) -> tuple[int, PipelineConfig] | None:
        """Batch ``batch_id``'s metadata, from this run's memory or the store (None when there is none)."""
        if batch_id not in self._metas:
            path = self._meta_path(batch_id)
            if not storage.exists(path):
                return None
            self._metas[batch_id] = self._read_meta(path)
        return self._metas[batch_id]

    def batch_meta(self, batch_id: int, config: PipelineConfig) -> tuple[int, PipelineConfig]:
        """The batch's ingestion time and configuration: fixed at its first attempt, reused on replays."""
        known = self._known_meta(batch_id)
        if known is not None:
            return known
        ingest_ms = int(time.time() * 1000)
        self._write_meta(batch_id, ingest_ms, config)
        return ingest_ms, config

    def repin(self, batch_id: int, config: PipelineConfig) -> None:
        """Fix batch ``batch_id`` to ``config`` (a refused configuration rolled back): replays use it too."""
        ingest_ms, _ = self._read_meta(self._meta_path(batch_id))
        self._write_meta(batch_id, ingest_ms, config)

    def _folders(self) -> list[tuple[int, Location]]:
        """The complete states (a manifest, or a state of an earlier version), by batch."""
        if self._complete is None:
            self._complete = []
            for number, folder in self.layout.states():
                names = {e.name for e in storage.listdir(folder)}
                if MANIFEST in names or LEGACY_STATE_FILES["wm"] in names:
                    self._complete.append((number, folder))
        return list(self._complete)

    def latest_batch(self) -> int | None:
        """Batch id of the newest saved state."""
        folders = self._folders()
        return folders[-1][0] if folders else None

    def _committed_before(self, batch_id: int) -> bool:
        """Whether batch ``batch_id - 1`` ran to its end: Spark committed it, or its metadata exists."""
        previous = batch_id - 1
        if previous < 0:
            return False
        return storage.exists(self.layout.commit(previous)) or storage.exists(self._meta_path(previous))

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

    def _load(self, number: int, path: Location) -> SavedStage:
        files = self._verify(path)
        wm_file, wm_bytes = files["wm"]
        try:
            snap = json.loads(wm_bytes.decode("utf-8"))
            watermark = PartitionedWatermark.from_snapshot(snap["watermark"])
            version = int(snap["config_version"])
            closed = int(snap.get("closed_until_ms", NO_WATERMARK))
            open_dir = snap.get("open_dir")
            if open_dir is not None:
                open_dir = self.layout.open_windows_at(str(open_dir)).spark
                if not storage.exists(spark_done(open_dir)):  # Spark writes it last
                    msg = f"{open_dir}: the open windows of this state are missing or incomplete"
                    raise ValueError(msg)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            msg = f"{wm_file}: unreadable stage state ({type(exc).__name__}: {exc}); {RECOVERY}"
            raise CheckpointError(msg) from None
        tables: dict[str, pa.Table | None] = {"owners": None}
        for role, schema in (("open", PARTIAL_SCHEMA), ("owners", OWNERS_SCHEMA)):
            if role not in files:
                continue
            file, data = files[role]
            try:
                tables[role] = read_parquet_bytes(data).cast(schema)
            except (OSError, pa.ArrowException, ValueError) as exc:
                msg = f"{file}: unreadable stage state ({type(exc).__name__}: {exc}); {RECOVERY}"
                raise CheckpointError(msg) from None
        config = None
        known = self._known_meta(number)
        if known is not None:
            _, config = known
            check_state_config(wm_file, watermark, version, config)
        open_windows = tables["open"]
        assert open_windows is not None
        return SavedStage(
            watermark, open_windows, version, closed, tables["owners"], open_dir, config, number
        )

    def _verify(self, path: Location) -> dict[str, tuple[Location, bytes]]:
        """The state's files by role (``wm``, ``open``, ``owners``), checked against its manifest."""
        if self._saved is not None and self._saved[0] == path:
            return dict(self._saved[1])  # saved by this run: the bytes its manifest was made from
        manifest = path / MANIFEST
        if not storage.exists(manifest):
            return self._legacy_files(path)
        try:
            doc = json.loads(storage.read_text(manifest))
            files = dict(doc["files"])
            if doc.get("format") == LEGACY_STATE_FORMAT:
                roles = {role: name for role, name in LEGACY_STATE_FILES.items() if name in files}
            elif doc.get("format") == STATE_FORMAT:
                roles = {str(entry["role"]): name for name, entry in files.items()}
            else:
                msg = "not a state manifest"
                raise ValueError(msg)
            if not {"wm", "open"} <= set(roles):
                msg = "not a state manifest"
                raise ValueError(msg)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            msg = f"{manifest}: unreadable manifest ({type(exc).__name__}: {exc}); {RECOVERY}"
            raise CheckpointError(msg) from None
        out = {}
        for role, name in sorted(roles.items()):
            want = files[name]
            if "/" in name or name.startswith("."):
                msg = f"{manifest}: {name!r} is not a file of the state; {RECOVERY}"
                raise CheckpointError(msg)
            file = path / name
            try:
                data = storage.read_bytes(file)
            except FileNotFoundError:
                msg = f"{file} is missing (listed in {manifest}); {RECOVERY}"
                raise CheckpointError(msg) from None
            if len(data) != want.get("bytes") or _sha256(data) != want.get("sha256"):
                msg = (
                    f"{file} does not match its checksum in {manifest} ({len(data)} bytes, "
                    f"{want.get('bytes')} recorded): it was truncated or changed; {RECOVERY}"
                )
                raise CheckpointError(msg)
            out[role] = (file, data)
        return out

    def _legacy_files(self, path: Location) -> dict[str, tuple[Location, bytes]]:
        """The files of a state written before manifests existed (``wm.json`` without ``format``)."""
        wm_file = path / LEGACY_STATE_FILES["wm"]
        legacy = False
        if storage.exists(wm_file):
            try:
                legacy = "format" not in json.loads(storage.read_text(wm_file))
            except (OSError, ValueError, TypeError):
                legacy = False
        if not legacy:
            msg = f"{path / MANIFEST} is missing: {path.name} is incomplete or damaged; {RECOVERY}"
            raise CheckpointError(msg)
        out = {}
        for role, name in LEGACY_STATE_FILES.items():
            file = path / name
            try:
                out[role] = (file, storage.read_bytes(file))
            except FileNotFoundError:
                if role == "owners":
                    continue
                msg = f"{file}: unreadable stage state (missing); {RECOVERY}"
                raise CheckpointError(msg) from None
        return out

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
        """Write batch ``batch_id``'s state, each file once and whole, the manifest last; keep the last few.

        A state already there (a batch run again, or the flush at the end rewriting the last state) stays
        whole until the new manifest replaces its own; its files are removed after that.
        """
        folder = self.layout.state(batch_id)
        attempt = uuid.uuid4().hex[:12]
        doc = {
            "format": STATE_FORMAT,
            "batch_id": batch_id,
            "watermark": watermark.snapshot(),
            "config_version": version,
            "closed_until_ms": closed_until_ms,
            # relative to the stage folder, so that a checkpoint can move
            "open_dir": None if open_dir is None else self.layout.open_windows_ref(open_dir),
        }
        contents = {"wm": json.dumps(doc).encode(), "open": parquet_bytes(open_windows)}
        if owners is not None:
            contents["owners"] = parquet_bytes(owners)
        files: dict[str, Any] = {}
        written: dict[str, tuple[Location, bytes]] = {}
        for role, data in contents.items():
            file = self.layout.state_file(folder, role, attempt)
            storage.write_bytes(file, data)
            files[file.name] = {"role": role, "bytes": len(data), "sha256": _sha256(data)}
            written[role] = (file, data)
        manifest = {"format": STATE_FORMAT, "batch_id": batch_id, "files": files}
        self._saved = None
        storage.write_bytes(folder / MANIFEST, json.dumps(manifest, sort_keys=True).encode())
        self._saved = (folder, written)
        complete = dict(self._folders())
        complete[batch_id] = folder
        self._complete = sorted(complete.items())
        for entry in storage.listdir(folder):  # an earlier attempt's files, now named by no manifest
            if entry.name != MANIFEST and entry.name not in files:
                remove_entry(entry)
        self._prune()

    def discard_unfinished(self) -> None:
        """Remove states a killed save left without a manifest (their batches run again)."""
        for _number, folder in self.layout.states():
            names = {e.name for e in storage.listdir(folder)}
            if MANIFEST not in names and LEGACY_STATE_FILES["wm"] not in names:
                storage.remove_tree(folder)
        self._complete = None

    def _prune(self) -> None:
        states = self._folders()
        for _, old in states[: -self.keep]:
            storage.remove_tree(old)
        self._complete = states[-self.keep :]
        # A restart replays batches after the newest state; a meta file older than the oldest kept state is
        # never read again (one file per batch would otherwise grow without bound).
        oldest = states[-self.keep :][0][0]
        for number, meta in self.layout.batch_metas():
            if number < oldest:
                self._metas.pop(number, None)
                storage.remove(meta)


def check_state_config(
    where: Location, watermark: PartitionedWatermark, version: int, config: PipelineConfig
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


def checkpoint_app_id(checkpoint: str | Location, output: str | Location) -> str:
    """The Delta application id (``txnAppId``) of the job writing ``output`` from ``checkpoint``.

    Delta skips a batch whose ``txnVersion`` its application already committed, so the id must belong to
    the checkpoint: after a checkpoint reset Spark numbers batches from 0 again, and under the old id every
    batch up to the old highest would be skipped as written. The id is created with the checkpoint and
    stored in it (``CHECKPOINT/app-id``). A checkpoint from before the file existed, which already has
    query offsets, keeps the id it wrote with (``jobs.stream``); one whose tables were written under another
    id lost the file, and is refused (:class:`CheckpointError`).

    Raises
    ------
    ValueError
        For a new checkpoint whose ``output`` already holds the pipeline's tables: they were written from
        another checkpoint, and starting over would write its input a second time.

    """
    layout = CheckpointLayout(checkpoint)
    path = layout.app_id
    if storage.exists(path):
        text = storage.read_text(path).strip()
        if not text or len(text) > 200 or not text.isprintable():
            msg = f"{path}: not an application id; restore it from a backup, or start a new checkpoint"
            raise ValueError(msg)
        return text
    if layout.has_offsets():
        lost = [i for i in job_app_ids(output) if i != "jobs.stream"]
        if lost and not written_versions(output, ["jobs.stream"]):  # the file deleted, not a legacy id
            msg = f"{path} is missing, but {layout.root} has query offsets and the tables under {output} "
            msg += f"were written under {', '.join(lost)}: put its line back ({lost[0]}); {RECOVERY}"
            raise CheckpointError(msg)
        app_id = "jobs.stream"
    else:
        written = tables_written(output)
        if written:
            msg = (
                f"{layout.root} is a new checkpoint, but {Location.of(output)} already holds tables written "
                f"from another one ({', '.join(written)}): restart with the checkpoint that wrote them, or "
                "write to a new --output (a new checkpoint reads its input from the start)"
            )
            raise ValueError(msg)
        app_id = f"jobs.stream-{uuid.uuid4().hex}"
    storage.write_text(path, app_id + "\n")
    return app_id


# -- a rewound checkpoint ----------------------------------------------------------------------------------

#: Appended to the checkpoint's application id for the Delta appends of ``--flush-at-end`` (their
#: ``txnVersion`` is the batch whose state they close).
FLUSH_APP_SUFFIX = ".flush"
REWOUND = (
    "To recover (docs/streaming-job.md, Recovery procedures): put back the checkpoint that wrote those "
    "batches; or restore the tables' folders, _delta_log included, from a copy taken together with this "
    "checkpoint (Delta's RESTORE keeps the batch ids and is not enough); or start over with a new --output "
    "and a new --checkpoint (a new checkpoint reads its input from the start)"
)


def flush_app_id(app_id: str) -> str:
    """The Delta application id (``txnAppId``) of the flush at the end, for the checkpoint's ``app_id``."""
    return app_id + FLUSH_APP_SUFFIX


def last_planned_batch(checkpoint: str | Location) -> int | None:
    """The newest batch in Spark's offset log (None: none): committed, or the one a restart runs first.

    Spark writes ``offsets/N`` before batch N runs and ``commits/N`` after, so this is the newest committed
    batch or the one after it; no table and no stage state of this checkpoint holds a later batch.
    """
    planned = [int(e.name) for e in storage.listdir(CheckpointLayout(checkpoint).offsets) if e.name.isdigit()]
    return max(planned) if planned else None


def newest_stage_batch(checkpoint: str | Location) -> tuple[int, Location] | None:
    """The newest batch the stage wrote anything for (a state, pending rows, batch metadata), and where."""
    layout = CheckpointLayout(checkpoint)
    entries = [*layout.states(), *layout.pending_batches(), *layout.batch_metas()]
    return max(entries, key=lambda entry: entry[0]) if entries else None


def check_not_rewound(checkpoint: str | Location, output: str | Location, app_id: str) -> None:
    """Refuse a checkpoint behind its own tables or stage state: Spark's query log was deleted or rewound.

    Delta skips an append whose ``txnVersion`` its application id already committed, so the batches a
    rewound query cuts again (numbered from 0 after ``CHECKPOINT/query`` is deleted; from the copy's last
    batch after the checkpoint is restored from an older copy) would be skipped as written, new input in
    them included. The rule: with P the newest batch in Spark's offset log (none when it is empty), every
    table's ``txnVersion`` for the checkpoint's application id and for its flush's
    (:func:`flush_app_id`) is at most P, and so is every batch of the stage's state. P is the last
    committed batch, or the one after it that a kill interrupted (its appends may be done: Spark runs it
    again under the same id, on the same input, and Delta skipping it is right). A table *behind* P is
    not refused: a batch without rows for a table writes nothing to it, and the deferred tables hold the
    batches up to their last commit, the others waiting in ``stage/pending``.

    Raises
    ------
    CheckpointError
        Naming the table or the stage folder that is ahead, the batches, and how to recover.

    """
    planned = last_planned_batch(checkpoint)
    offsets = CheckpointLayout(checkpoint).offsets
    log_ends = f"{offsets} is empty" if planned is None else f"{offsets} ends at batch {planned}"
    newest = -1 if planned is None else planned
    ahead = [v for v in written_versions(output, [app_id, flush_app_id(app_id)]) if v[2] > newest]
    if ahead:
        where, writer, version = max(ahead, key=lambda v: v[2])
        msg = (
            f"{where} holds batch {version} of this checkpoint's application id {writer}, but {log_ends}: "
            "the checkpoint was rewound (its query folder deleted, or restored from an older copy), and "
            f"Delta would skip the batches cut again up to {version} as already written, new input in them "
            f"included. {REWOUND}"
        )
        raise CheckpointError(msg)
    stage = newest_stage_batch(checkpoint)
    if stage is not None and stage[0] > newest:
        msg = (
            f"{stage[1]} belongs to batch {stage[0]}, but {log_ends}: Spark's query checkpoint was deleted "
            f"or replaced, and its batches would not continue from the stage's state. {REWOUND}"
        )
        raise CheckpointError(msg)


# -- the flush at the end of input -------------------------------------------------------------------------

#: ``stage/flush.json``: the flush at the end's intent, written before its Delta append, removed after the
#: state's rewrite.
FLUSH_INTENT = "flush.json"


@dataclass(frozen=True)
class FlushIntent:
    """A flush at the end under way: the state it closes, and its Delta append's application id."""

    batch_id: int  # the batch whose state it closes: also the append's txnVersion
    app_id: str  # the append's txnAppId


def _flush_intent_path(checkpoint: str | Location) -> Location:
    return CheckpointLayout(checkpoint).stage / FLUSH_INTENT


def record_flush_intent(checkpoint: str | Location, intent: FlushIntent) -> None:
    """Write the intent (one write, whole) before the flush's Delta append."""
    doc = {"batch_id": intent.batch_id, "txn_app_id": intent.app_id, "txn_version": intent.batch_id}
    storage.write_bytes(_flush_intent_path(checkpoint), json.dumps(doc).encode())


def read_flush_intent(checkpoint: str | Location) -> FlushIntent | None:
    """The intent of a flush that did not finish (None: none); :class:`CheckpointError` when unreadable."""
    path = _flush_intent_path(checkpoint)
    try:
        doc = json.loads(storage.read_text(path))
        intent = FlushIntent(int(doc["batch_id"]), str(doc["txn_app_id"]))
        if int(doc["txn_version"]) != intent.batch_id:
            msg = "txn_version is not batch_id"
            raise ValueError(msg)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        msg = f"{path}: unreadable flush intent ({type(exc).__name__}: {exc}); {RECOVERY}"
        raise CheckpointError(msg) from None
    return intent


def clear_flush_intent(checkpoint: str | Location) -> None:
    """Remove the intent: the flush's append is in Delta and the state it closed is rewritten."""
    storage.remove(_flush_intent_path(checkpoint))
