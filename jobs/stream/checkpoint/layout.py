"""Every name under the job's ``--checkpoint`` folder: the one module that knows the checkpoint's layout.

The other modules ask a :class:`CheckpointLayout` for the paths they read and write; none joins a name
under the checkpoint itself. ``N`` is a batch id: 12 digits, zero-padded, in the job's own names, plain in
Spark's logs.

.. code-block:: text

    CHECKPOINT/
    ├── app-id                   the Delta application id (txnAppId) of this checkpoint's writes
    ├── .app-id.tmp              (app-id while it is written)
    ├── query/                   Spark's own checkpoint of the streaming query (its checkpointLocation)
    │   ├── offsets/N            what batch N reads (Spark's offset log; .N.<uuid>.tmp while written)
    │   ├── commits/N            batch N ran to its end (Spark's commit log; .N.<uuid>.tmp likewise)
    │   └── sources/0/           the landing files of each batch (the file source's log):
    │       ├── N                    one file per batch (JSON lines after a version line) ...
    │       └── N.compact            ... until Spark compacts them (every entry up to N, with its batchId)
    ├── stage/                   the watermark stage (jobs.stream.checkpoint.state)
    │   ├── batch-N.json         batch N's ingestion time and configuration, written before it runs
    │   ├── .batch-N.json        (batch-N.json while it is written)
    │   ├── state-N/             the stage's state after batch N (the newest three kept)
    │   │   ├── wm.json              generator snapshots, configuration version, floor, open-window folder
    │   │   ├── open.parquet         open windows
    │   │   ├── owners.parquet       the partition owning each key (partition-scoped mode)
    │   │   └── manifest.json        size and SHA-256 of every other file, written last
    │   ├── .state-N.tmp/        a state being written (discarded at start: its batch runs again)
    │   ├── .state-N.old/        a state being replaced (put back at start when state-N is missing)
    │   ├── open/batch-N/        open windows after batch N when its stage ran in the executors
    │   │                        (Parquet by the executors, _SUCCESS last; jobs.stream.stage.executors)
    │   └── pending/             the deferred tables' rows (jobs.stream.sinks.deferred)
    │       ├── batch-N/
    │       │   ├── meta.json        ingestion time, and how each table's rows are kept:
    │       │   ├── TABLE.parquet        a Parquet file written by the driver,
    │       │   ├── TABLE/               a Parquet folder written by the executors (_SUCCESS last),
    │       │   └── TABLE.arrow          an Arrow IPC file (checkpoints of earlier versions)
    │       └── .batch-N.tmp/    a batch's rows being written (discarded at start)
    └── dedup/                   event ids of the deduplication horizon (jobs.stream.checkpoint.dedup)
        ├── ids-N.arrow          the ids known after batch N (the newest three kept)
        └── .ids-N.arrow.PID.tmp (ids-N.arrow while process PID writes it)

Paths are :class:`pathlib.Path` on the local (or mounted) file system.
"""

from __future__ import annotations

import os
from pathlib import Path

QUERY = "query"
STAGE = "stage"
DEDUP = "dedup"
APP_ID_FILE = "app-id"
#: The files of a ``state-N`` folder.
WM_FILE = "wm.json"
OPEN_FILE = "open.parquet"
OWNERS_FILE = "owners.parquet"
MANIFEST = "manifest.json"
#: The file of a pending batch that says what it holds.
PENDING_META = "meta.json"
#: What Spark writes last in a Parquet folder it wrote.
SPARK_DONE = "_SUCCESS"


def _numbered(folder: Path, prefix: str, suffix: str = "") -> list[tuple[int, Path]]:
    """Entries ``<prefix>N<suffix>`` of ``folder`` (N all digits), by N; none when ``folder`` is missing."""
    found = []
    for path in folder.glob(f"{prefix}*{suffix}"):
        number = path.name[len(prefix) : len(path.name) - len(suffix)]
        if number.isdigit():
            found.append((int(number), path))
    return sorted(found)


def spark_done(folder: str | Path) -> Path:
    """The marker Spark writes last in a Parquet folder (the folder is whole when it exists)."""
    return Path(folder) / SPARK_DONE


class CheckpointLayout:
    """The names under one checkpoint folder (see the module's tree)."""

    def __init__(self, checkpoint: str | Path) -> None:
        self.root = Path(checkpoint)

    # -- the application id ------------------------------------------------------------------------------
    @property
    def app_id(self) -> Path:
        """``app-id``: the Delta application id of the tables this checkpoint writes."""
        return self.root / APP_ID_FILE

    @property
    def app_id_tmp(self) -> Path:
        """``.app-id.tmp``: the application id while it is written."""
        return self.root / f".{APP_ID_FILE}.tmp"

    # -- Spark's query checkpoint ------------------------------------------------------------------------
    @property
    def query(self) -> Path:
        """``query/``: the streaming query's ``checkpointLocation`` (Spark's own)."""
        return self.root / QUERY

    @property
    def offsets(self) -> Path:
        """``query/offsets``: Spark's offset log, one file ``N`` per planned batch."""
        return self.query / "offsets"

    @property
    def commits(self) -> Path:
        """``query/commits``: Spark's commit log, one file ``N`` per batch that ran to its end."""
        return self.query / "commits"

    def spark_logs(self) -> list[Path]:
        """The offset and commit logs (where a killed query may leave a temporary ``.N.<uuid>.tmp``)."""
        return [self.offsets, self.commits]

    def commit(self, batch_id: int) -> Path:
        """``query/commits/N``."""
        return self.commits / str(batch_id)

    def committed_batches(self) -> list[int]:
        """The batches in Spark's commit log (in no order)."""
        commits = self.commits
        return [int(p.name) for p in commits.iterdir() if p.name.isdigit()] if commits.is_dir() else []

    def has_offsets(self) -> bool:
        """Whether Spark's offset log has planned a batch."""
        offsets = self.offsets
        return offsets.is_dir() and any(p.name.isdigit() for p in offsets.iterdir())

    @property
    def source_log(self) -> Path:
        """``query/sources/0``: the file source's log of the files each batch read."""
        return self.query / "sources" / "0"

    def source_log_entry(self, batch_id: int) -> Path:
        """``query/sources/0/N``: batch N's files, until Spark compacts the log."""
        return self.source_log / str(batch_id)

    def source_log_compactions(self) -> list[tuple[int, Path]]:
        """``query/sources/0/N.compact`` files by N (each holds every entry up to N)."""
        root = self.source_log
        return sorted(
            (int(p.name.split(".")[0]), p) for p in root.glob("*.compact") if p.name.split(".")[0].isdigit()
        )

    # -- the stage's state -------------------------------------------------------------------------------
    @property
    def stage(self) -> Path:
        """``stage/``: the watermark stage's state, batch by batch."""
        return self.root / STAGE

    def batch_meta(self, batch_id: int) -> Path:
        """``stage/batch-N.json``: batch N's ingestion time and configuration."""
        return self.stage / f"batch-{batch_id:012d}.json"

    def batch_meta_tmp(self, batch_id: int) -> Path:
        """``stage/.batch-N.json``: batch N's metadata while it is written."""
        return self.stage / f".batch-{batch_id:012d}.json"

    def batch_metas(self) -> list[tuple[int, Path]]:
        """Every ``stage/batch-N.json``, by N."""
        return _numbered(self.stage, "batch-", ".json")

    def state(self, batch_id: int) -> Path:
        """``stage/state-N/``: the stage's state after batch N."""
        return self.stage / f"state-{batch_id:012d}"

    def state_tmp(self, batch_id: int) -> Path:
        """``stage/.state-N.tmp/``: batch N's state while it is written."""
        return self.stage / f".state-{batch_id:012d}.tmp"

    def state_set_aside(self, batch_id: int) -> Path:
        """``stage/.state-N.old/``: batch N's previous state while a new one replaces it."""
        return self.stage / f".state-{batch_id:012d}.old"

    def states(self) -> list[tuple[int, Path]]:
        """Every ``stage/state-N/`` folder, by N."""
        return [(n, p) for n, p in _numbered(self.stage, "state-") if p.is_dir()]

    def states_set_aside(self) -> list[tuple[Path, Path]]:
        """``(stage/.state-N.old, stage/state-N)`` for every state a save set aside."""
        return [(p, self.stage / p.name[1 : -len(".old")]) for p in self.stage.glob(".state-*.old")]

    def states_unfinished(self) -> list[Path]:
        """Every ``stage/.state-N.tmp``: states a save never renamed into place."""
        return list(self.stage.glob(".state-*.tmp"))

    def open_windows(self, batch_id: int) -> Path:
        """``stage/open/batch-N``: the open windows after batch N when its stage ran in the executors."""
        return self.stage / "open" / f"batch-{batch_id:012d}"

    def open_windows_dirs(self) -> list[tuple[int, Path]]:
        """Every ``stage/open/batch-N``, by N."""
        return _numbered(self.stage / "open", "batch-")

    def open_windows_ref(self, folder: str) -> str:
        """How a state names its open-window folder: relative to ``stage/``, so that a checkpoint can move."""
        return os.path.relpath(folder, self.stage)

    def open_windows_at(self, ref: str) -> Path:
        """The open-window folder a state names (:meth:`open_windows_ref`)."""
        return self.stage / ref

    # -- the deferred tables' rows -----------------------------------------------------------------------
    @property
    def pending(self) -> Path:
        """``stage/pending/``: the deferred tables' rows, one folder per batch."""
        return self.stage / "pending"

    def pending_batch(self, batch_id: int) -> Path:
        """``stage/pending/batch-N/``: batch N's deferred rows."""
        return self.pending / f"batch-{batch_id:012d}"

    def pending_batch_tmp(self, batch_id: int) -> Path:
        """``stage/pending/.batch-N.tmp/``: batch N's deferred rows while they are written."""
        return self.pending / f".batch-{batch_id:012d}.tmp"

    def pending_batches(self) -> list[tuple[int, Path]]:
        """Every ``stage/pending/batch-N``, by N."""
        return _numbered(self.pending, "batch-")

    def pending_unfinished(self) -> list[Path]:
        """Every ``stage/pending/.batch-*``: rows a put never renamed into place."""
        return list(self.pending.glob(".batch-*"))

    @staticmethod
    def pending_table(folder: Path, table: str, kind: str) -> Path:
        """Where a pending batch's ``folder`` keeps ``table``'s rows, by how they are kept (``kind``).

        ``parquet_file``: ``TABLE.parquet`` (the driver's); ``parquet``: the folder ``TABLE`` (the
        executors'); ``arrow``: ``TABLE.arrow`` (checkpoints of earlier versions).
        """
        return folder / {"arrow": f"{table}.arrow", "parquet_file": f"{table}.parquet"}.get(kind, table)

    # -- deduplication -----------------------------------------------------------------------------------
    @property
    def dedup(self) -> Path:
        """``dedup/``: the event ids of the deduplication horizon."""
        return self.root / DEDUP

    def seen_ids(self, batch_id: int) -> Path:
        """``dedup/ids-N.arrow``: the ids known after batch N."""
        return self.dedup / f"ids-{batch_id:012d}.arrow"

    def seen_ids_tmp(self, batch_id: int) -> Path:
        """``dedup/.ids-N.arrow.PID.tmp``: the ids of batch N while this process writes them."""
        target = self.seen_ids(batch_id)
        return target.with_name(f".{target.name}.{os.getpid()}.tmp")

    def seen_ids_batches(self) -> list[int]:
        """The batches with a ``dedup/ids-N.arrow``, in order."""
        return [n for n, _ in _numbered(self.dedup, "ids-", ".arrow")]
