"""Every name under the job's ``--checkpoint`` folder: the one module that knows the checkpoint's layout.

The other modules ask a :class:`CheckpointLayout` for the paths they read and write; none joins a name
under the checkpoint itself. ``N`` is a batch id: 12 digits, zero-padded, in the job's own names, plain in
Spark's logs.

.. code-block:: text

    CHECKPOINT/
    ├── app-id                   the Delta application id (txnAppId) of this checkpoint's writes
    ├── query/                   Spark's own checkpoint of the streaming query (its checkpointLocation)
    │   ├── offsets/N            what batch N reads (Spark's offset log; .N.<uuid>.tmp while written)
    │   ├── commits/N            batch N ran to its end (Spark's commit log; .N.<uuid>.tmp likewise)
    │   └── sources/0/           the landing files of each batch (the file source's log):
    │       ├── N                    one file per batch (JSON lines after a version line) ...
    │       └── N.compact            ... until Spark compacts them (every entry up to N, with its batchId)
    ├── stage/                   the watermark stage (jobs.stream.checkpoint.state)
    │   ├── batch-N.json         batch N's ingestion time and configuration, written before it runs
    │   ├── state-N/             the stage's state after batch N (the newest three kept)
    │   │   ├── wm-A.json            generator snapshots, configuration version, floor, open-window folder
    │   │   ├── open-A.parquet       open windows
    │   │   ├── owners-A.parquet     the partition owning each key (partition-scoped mode)
    │   │   └── manifest.json        names, sizes and SHA-256 of the files above, written last
    │   ├── flush.json           --flush-at-end under way: the batch whose state it closes (removed after)
    │   ├── open/batch-N/        open windows after batch N when its stage ran in the executors
    │   │                        (Parquet by the executors, _SUCCESS last; jobs.stream.stage.executors)
    │   ├── screened/batch-N/    copies of batch N's landing files with lines too long replaced by a
    │   │                        placeholder (jobs.stream.sources.long_lines); removed after the batch
    │   └── pending/             the deferred tables' rows (jobs.stream.sinks.deferred)
    │       └── batch-N/
    │           ├── TABLE.parquet        a Parquet file written by the driver,
    │           ├── TABLE/               a Parquet folder written by the executors (_SUCCESS last),
    │           ├── TABLE.arrow          an Arrow IPC file (checkpoints of earlier versions)
    │           └── meta.json        ingestion time, and how each table's rows are kept; written last
    └── dedup/                   event ids of the deduplication horizon (jobs.stream.checkpoint.dedup)
        └── ids-N.arrow          the ids known after batch N (the newest three kept)

``A`` names the attempt that wrote a state (a batch run again writes new files and a new manifest).

Every name is a :class:`watermark.storage.Location`: the checkpoint may be a local folder or a prefix on an
object store (``s3a://bucket/checkpoints/job``). **How each file is committed**, so that nothing depends on
rename or fsync (an object becomes visible whole when its PUT completes; on a local file system
:func:`watermark.storage.write_bytes` writes a temporary file, fsyncs it and renames it in):

================================ ======================================================================
``app-id``                       one write, before the first batch; never changed
``stage/batch-N.json``           one write before batch N runs; rewritten whole only to pin a refused
                                 configuration's rollback (a replay reads the newest)
``stage/state-N/``               write-once data files named by the attempt that wrote them
                                 (``wm-A.json``, ``open-A.parquet``, ``owners-A.parquet``), then
                                 ``manifest.json`` last, naming them with their sizes and SHA-256: a state
                                 exists when its manifest does; a replay of batch N writes new files and a
                                 new manifest (the old files are removed after it)
``stage/screened/batch-N/``      streamed by the driver before Spark reads batch N; written again
                                 whole when the batch runs again (a kill leaves at most a partial copy
                                 that the next screen of the batch replaces)
``stage/open/batch-N/``          Parquet written by Spark's executors, ``_SUCCESS`` last (Spark's commit
                                 protocol); the state that names it is written after it
``stage/pending/batch-N/``       the tables' rows first, ``meta.json`` last: a folder without it is an
                                 interrupted put (removed at start, its batch runs again)
``stage/flush.json``             one write before the flush's Delta append (its batch and application
                                 id), removed after the state's rewrite: a run that finds it finishes
                                 the flush before Spark starts (the append again, which Delta skips when
                                 it committed, then the rewrite)
``dedup/ids-N.arrow``            one write per batch
``query/``                       Spark's own checkpoint (its checkpoint file manager)
================================ ======================================================================

Checkpoints written by earlier versions (``state-N/`` with fixed names, ``.state-N.tmp`` and
``.state-N.old`` folders, ``stage/pending/.batch-N.tmp``) are local and still read.
"""

from __future__ import annotations

from watermark import storage
from watermark.storage import Location

QUERY = "query"
STAGE = "stage"
DEDUP = "dedup"
APP_ID_FILE = "app-id"
#: The files of a ``state-N`` folder: its data files by role (``ROLE-ATTEMPT.suffix``), and the manifest.
STATE_SUFFIXES = {"wm": ".json", "open": ".parquet", "owners": ".parquet"}
MANIFEST = "manifest.json"
#: The fixed names of a state's files in checkpoints of earlier versions (``state-N/wm.json``, ...).
LEGACY_STATE_FILES = {"wm": "wm.json", "open": "open.parquet", "owners": "owners.parquet"}
#: The file of a pending batch that says what it holds.
PENDING_META = "meta.json"
#: What Spark writes last in a Parquet folder it wrote.
SPARK_DONE = "_SUCCESS"


def _numbered(folder: Location, prefix: str, suffix: str = "") -> list[tuple[int, Location]]:
    """Entries ``<prefix>N<suffix>`` of ``folder`` (N all digits), by N; none when ``folder`` is missing."""
    found = []
    for entry in storage.listdir(folder):
        name = entry.name
        if name.startswith(prefix) and name.endswith(suffix):
            number = name[len(prefix) : len(name) - len(suffix)]
            if number.isdigit():
                found.append((int(number), entry.location))
    return sorted(found, key=lambda item: item[0])


def spark_done(folder: str | Location) -> Location:
    """The marker Spark writes last in a Parquet folder (the folder is whole when it exists)."""
    return Location.of(folder) / SPARK_DONE


class CheckpointLayout:
    """The names under one checkpoint folder (see the module's tree)."""

    def __init__(self, checkpoint: str | Location) -> None:
        self.root = Location.of(checkpoint)

    # -- the application id ------------------------------------------------------------------------------
    @property
    def app_id(self) -> Location:
        """``app-id``: the Delta application id of the tables this checkpoint writes."""
        return self.root / APP_ID_FILE

    # -- Spark's query checkpoint ------------------------------------------------------------------------
    @property
    def query(self) -> Location:
        """``query/``: the streaming query's ``checkpointLocation`` (Spark's own)."""
        return self.root / QUERY

    @property
    def offsets(self) -> Location:
        """``query/offsets``: Spark's offset log, one file ``N`` per planned batch."""
        return self.query / "offsets"

    @property
    def commits(self) -> Location:
        """``query/commits``: Spark's commit log, one file ``N`` per batch that ran to its end."""
        return self.query / "commits"

    def spark_logs(self) -> list[Location]:
        """Spark's logs where a killed query leaves a ``.N.<uuid>.tmp``: offsets, commits, the source's."""
        return [self.offsets, self.commits, self.source_log]

    def commit(self, batch_id: int) -> Location:
        """``query/commits/N``."""
        return self.commits / str(batch_id)

    def committed_batches(self) -> list[int]:
        """The batches in Spark's commit log, in order."""
        return sorted(int(e.name) for e in storage.listdir(self.commits) if e.name.isdigit())

    def has_offsets(self) -> bool:
        """Whether Spark's offset log has planned a batch."""
        return any(e.name.isdigit() for e in storage.listdir(self.offsets))

    @property
    def source_log(self) -> Location:
        """``query/sources/0``: the file source's log of the files each batch read."""
        return self.query / "sources" / "0"

    def source_log_entry(self, batch_id: int) -> Location:
        """``query/sources/0/N``: batch N's files, until Spark compacts the log."""
        return self.source_log / str(batch_id)

    def source_log_compactions(self) -> list[tuple[int, Location]]:
        """``query/sources/0/N.compact`` files by N (each holds every entry up to N)."""
        return _numbered(self.source_log, "", ".compact")

    # -- the stage's state -------------------------------------------------------------------------------
    @property
    def stage(self) -> Location:
        """``stage/``: the watermark stage's state, batch by batch."""
        return self.root / STAGE

    def batch_meta(self, batch_id: int) -> Location:
        """``stage/batch-N.json``: batch N's ingestion time and configuration."""
        return self.stage / f"batch-{batch_id:012d}.json"

    def batch_metas(self) -> list[tuple[int, Location]]:
        """Every ``stage/batch-N.json``, by N."""
        return _numbered(self.stage, "batch-", ".json")

    def state(self, batch_id: int) -> Location:
        """``stage/state-N/``: the stage's state after batch N."""
        return self.stage / f"state-{batch_id:012d}"

    def states(self) -> list[tuple[int, Location]]:
        """Every ``stage/state-N/`` folder, by N (complete or not)."""
        return [(n, e) for n, e in _numbered(self.stage, "state-")]

    @staticmethod
    def state_file(folder: Location, role: str, attempt: str) -> Location:
        """A data file of a state folder: ``wm-A.json``, ``open-A.parquet`` or ``owners-A.parquet``."""
        return folder / f"{role}-{attempt}{STATE_SUFFIXES[role]}"

    def states_set_aside(self) -> list[tuple[Location, Location]]:
        """``(stage/.state-N.old, stage/state-N)``: states a save of an earlier version set aside."""
        return [
            (e.location, self.stage / e.name[1 : -len(".old")])
            for e in storage.listdir(self.stage)
            if e.name.startswith(".state-") and e.name.endswith(".old")
        ]

    def states_unfinished(self) -> list[Location]:
        """Every ``stage/.state-N.tmp``: states a save of an earlier version never renamed into place."""
        return [
            e.location
            for e in storage.listdir(self.stage)
            if e.name.startswith(".state-") and e.name.endswith(".tmp")
        ]

    def open_windows(self, batch_id: int) -> Location:
        """``stage/open/batch-N``: the open windows after batch N when its stage ran in the executors."""
        return self.stage / "open" / f"batch-{batch_id:012d}"

    def open_windows_dirs(self) -> list[tuple[int, Location]]:
        """Every ``stage/open/batch-N``, by N."""
        return _numbered(self.stage / "open", "batch-")

    def open_windows_ref(self, folder: str | Location) -> str:
        """How a state names its open-window folder: relative to ``stage/``, so that a checkpoint can move."""
        return Location.of(folder).relative_to(self.stage)

    def open_windows_at(self, ref: str) -> Location:
        """The open-window folder a state names (:meth:`open_windows_ref`)."""
        return self.stage / ref

    def screened(self, batch_id: int) -> Location:
        """``stage/screened/batch-N``: batch N's landing files with their too-long lines set aside."""
        return self.stage / "screened" / f"batch-{batch_id:012d}"

    def screened_batches(self) -> list[tuple[int, Location]]:
        """Every ``stage/screened/batch-N``, by N."""
        return _numbered(self.stage / "screened", "batch-")

    # -- the deferred tables' rows -----------------------------------------------------------------------
    @property
    def pending(self) -> Location:
        """``stage/pending/``: the deferred tables' rows, one folder per batch."""
        return self.stage / "pending"

    def pending_batch(self, batch_id: int) -> Location:
        """``stage/pending/batch-N/``: batch N's deferred rows (complete when its ``meta.json`` exists)."""
        return self.pending / f"batch-{batch_id:012d}"

    def pending_batches(self) -> list[tuple[int, Location]]:
        """Every ``stage/pending/batch-N``, by N (complete or not)."""
        return _numbered(self.pending, "batch-")

    def pending_unfinished(self) -> list[Location]:
        """Every ``stage/pending/.batch-*``: rows a put of an earlier version never renamed into place."""
        return [e.location for e in storage.listdir(self.pending) if e.name.startswith(".batch-")]

    @staticmethod
    def pending_table(folder: Location, table: str, kind: str) -> Location:
        """Where a pending batch's ``folder`` keeps ``table``'s rows, by how they are kept (``kind``).

        ``parquet_file``: ``TABLE.parquet`` (the driver's); ``parquet``: the folder ``TABLE`` (the
        executors'); ``arrow``: ``TABLE.arrow`` (checkpoints of earlier versions).
        """
        return folder / {"arrow": f"{table}.arrow", "parquet_file": f"{table}.parquet"}.get(kind, table)

    # -- deduplication -----------------------------------------------------------------------------------
    @property
    def dedup(self) -> Location:
        """``dedup/``: the event ids of the deduplication horizon."""
        return self.root / DEDUP

    def seen_ids(self, batch_id: int) -> Location:
        """``dedup/ids-N.arrow``: the ids known after batch N."""
        return self.dedup / f"ids-{batch_id:012d}.arrow"

    def seen_ids_batches(self) -> list[int]:
        """The batches with a ``dedup/ids-N.arrow``, in order."""
        return [n for n, _ in _numbered(self.dedup, "ids-", ".arrow")]
