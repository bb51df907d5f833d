"""The Arrow path in Spark's Python workers: its two passes over a batch's splits of JSON-lines files.

The driver side (planning the splits, running the passes, building the lateness thresholds) is
:mod:`jobs.stream.sources.arrow_reader`, which also explains the path as a whole. Here:

* :func:`collect_pass` (first pass) reads each split (:func:`read_split`), checks that every record is
  valid exactly as the Spark path would judge it (:func:`parse_clean`), keeps the parsed split for the
  second pass (in the worker's memory and as a node-local file) and returns its narrow columns;
* :func:`aggregate_pass` (second pass) labels each split's rows with the :class:`LateThresholds` and
  returns the partial aggregates of its on-time rows and its late rows in full.

What both sides share: :class:`Split`, :class:`RecordChecks`, :class:`LateThresholds`, the record ids and the
Arrow IPC blobs the passes return. It imports pyarrow, numpy and the light parts of the library.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import stat
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from jobs.common.schemas import RECORD_SCHEMA
from jobs.common.windows import table_partials
from jobs.stream.workers.frozen_imports import freeze_imports
from watermark.windowspec import WindowSpec

#: Parsed splits a worker keeps between the two passes, in rows (beyond it the second pass parses again).
CACHE_MAX_ROWS = 20_000_000


@dataclass(frozen=True)
class Split:
    """Records of one landing file whose line starts at a byte in ``[start, end)``."""

    sid: int  # unique in the batch; record ids are ``sid << 32 | record number in the split``
    file: int  # index of the file in the batch's files (landing order: modification time, then name)
    path: str  # local path
    start: int
    end: int
    size: int  # the file's size when the batch was planned


@dataclass(frozen=True)
class RecordChecks:
    """Field names and the Spark path's validity bounds a clean record must meet."""

    event_id: str
    key: str
    partition: str
    event_time: str
    arrival_time: str
    value: str
    ingest_ms: int
    future_bound_ms: int
    max_field_bytes: int
    #: An event time more than this ahead of its arrival time is quarantined (event_time_ahead_of_arrival).
    max_event_ahead_ms: int
    #: A record's line may be this long (bytes, without its newline); a longer one makes the split unclean.
    max_record_bytes: int
    #: An arrival time more than this ahead of the batch's ingestion time is quarantined
    #: (arrival_time_in_future; jobs.stream.sources.record_rules.DEFAULT_MAX_ARRIVAL_AHEAD_MS).
    max_arrival_ahead_ms: int = 300_000
    #: The run's private folder for parsed splits (:func:`jobs.stream.sources.arrow_reader.spill_dir`);
    #: empty: kept in memory only.
    spill: str = ""


class RecordTooLong(ValueError):
    """A split has a line longer than the record bound (``--max-record-bytes``): it is not read whole."""


def _is_remote(path: str) -> bool:
    """Whether a split's path is an object store's URI (``s3a://bucket/key``) rather than a local path."""
    return "://" in path


def _open_split_file(path: str) -> Any:
    """The split's file for reading, local or on an object store.

    A local file is opened directly; a file on an object store through ``pyarrow.fs`` (ranged reads;
    :mod:`watermark.storage`, configured from the worker's environment).
    """
    if not _is_remote(path):
        return open(path, "rb")  # noqa: SIM115 - the caller's with-block closes it
    from watermark import storage

    return storage.open_input_file(storage.Location.of(path))


def read_split(split: Split, max_record_bytes: int | None = None) -> bytes:
    """The bytes of the lines that start in ``[start, end)``, each with its newline.

    With ``max_record_bytes``, a line longer than it (without its newline) raises :class:`RecordTooLong`,
    and at most that many bytes are read past the split's end to finish the split's last line: a worker
    holds its split plus at most the bound, however long a line is.
    """
    with _open_split_file(split.path) as handle:
        begin = max(split.start - 1, 0)
        handle.seek(begin)
        data: bytes = handle.read(split.end - begin)
        if split.start > 0:
            cut = data.find(b"\n")
            if cut < 0:
                return b""  # no line starts in the range
            data = data[cut + 1 :]
        if data and not data.endswith(b"\n"):
            tail = []
            so_far = len(data) - (data.rfind(b"\n") + 1)  # of the last line, within the split
            while True:
                chunk = handle.read(1 << 16)
                if not chunk:
                    break
                newline = chunk.find(b"\n")
                if newline >= 0:
                    tail.append(chunk[: newline + 1])
                    break
                tail.append(chunk)
                so_far += len(chunk)
                if max_record_bytes is not None and so_far > max_record_bytes:
                    msg = f"{split.path}: a line longer than {max_record_bytes} bytes"
                    raise RecordTooLong(msg)
            data += b"".join(tail)
    if max_record_bytes is not None and has_long_line(data, max_record_bytes):
        msg = f"{split.path}: a line longer than {max_record_bytes} bytes"
        raise RecordTooLong(msg)
    return data


def has_long_line(data: bytes, bound: int) -> bool:
    r"""Whether ``data`` has a line longer than ``bound`` bytes (its newline not counted).

    Such a line covers a whole aligned block of ``bound // 2`` bytes, so only the blocks without a newline
    are measured: a few ``find`` calls per block, no copy.

    >>> has_long_line(b"ab\ncdef\n", 4), has_long_line(b"ab\ncdefg\n", 4), has_long_line(b"abcde", 4)
    (False, True, True)
    """
    if len(data) <= bound:
        return False
    half = max(bound // 2, 1)
    for block in range(0, len(data), half):
        if data.find(b"\n", block, block + half) >= 0:
            continue
        begin = data.rfind(b"\n", 0, block) + 1
        end = data.find(b"\n", block)
        if (end if end >= 0 else len(data)) - begin > bound:
            return True
    return False


def _lines(data: bytes) -> int:
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def parse_clean(data: bytes, checks: RecordChecks) -> tuple[pa.Table | None, str]:
    """The records of ``data`` as the Spark path's valid rows, or ``(None, why)`` if any is not plainly valid.

    Plainly valid: one JSON object per non-blank line, ids and keys non-empty text without surrounding
    whitespace (the Spark path trims), the partition absent, null or such text, integer times within the
    bounds (the event time at most ``max_event_ahead_ms`` ahead of the arrival time), a finite number for
    the value, and no text field longer than ``max_field_bytes``. The arrival time, when absent or null, is
    the ingestion time.
    """
    import pyarrow.json as pj

    if not data.strip():
        return (RECORD_SCHEMA.empty_table(), "") if not data else (None, "blank lines")
    if not valid_utf8(data):  # anywhere in a record: the Spark path quarantines it (bad_encoding)
        return None, "text that is not UTF-8"
    c = checks
    schema = pa.schema(
        [
            (c.event_id, pa.string()),
            (c.key, pa.string()),
            (c.partition, pa.string()),
            (c.event_time, pa.int64()),
            (c.arrival_time, pa.int64()),
            (c.value, pa.float64()),
        ]
    )
    try:
        table = pj.read_json(
            pa.BufferReader(data),
            read_options=pj.ReadOptions(use_threads=False, block_size=len(data) + 1),
            parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        return None, f"not plain typed JSON: {str(exc).splitlines()[0][:200]}"
    if table.num_rows != _lines(data):
        return None, "blank lines or several records on a line"
    table = table.combine_chunks()  # one chunk per column (the data holds at least one record)
    event_id, key, part = (table.column(n).chunk(0) for n in schema.names[:3])
    try:
        for text in (event_id, key, part):
            text.validate(full=True)  # UTF-8
    except pa.ArrowInvalid:
        return None, "text that is not UTF-8"
    for name, text in ((c.event_id, event_id), (c.key, key)):
        if text.null_count or not _all(pc.greater(pc.binary_length(text), 0)):
            return None, f"a missing {name}"
    for name, text in ((c.event_id, event_id), (c.key, key), (c.partition, part)):
        if not _all(pc.equal(pc.utf8_trim_whitespace(text), text)):
            return None, f"{name} with surrounding whitespace"
        longest = pc.max(pc.binary_length(text)).as_py()
        if longest is not None and longest > c.max_field_bytes:
            return None, f"{name} longer than {c.max_field_bytes} bytes"
    # Times: JSON integers only (int64 above), epoch ms as the Spark path types them. Any other form of the
    # time syntax (watermark.streams.timeparse: a string, ISO-8601, a fraction) fails the typed read, and the
    # batch goes to the Spark path, which parses it in that syntax: identical results
    # (tests/integration/spark/test_timeparse.py).
    te = table.column(c.event_time).chunk(0)
    if te.null_count:
        return None, f"a missing {c.event_time}"
    low, high = pc.min_max(te).values()
    if low.as_py() < 0 or high.as_py() > c.ingest_ms + c.future_bound_ms:
        return None, f"{c.event_time} before 1970 or beyond the future bound"
    tp = pc.fill_null(table.column(c.arrival_time).chunk(0), pa.scalar(c.ingest_ms, pa.int64()))
    low, high = pc.min_max(tp).values()
    if low.as_py() < 0 or high.as_py() > c.ingest_ms + c.max_arrival_ahead_ms:
        return (
            None,
            f"{c.arrival_time} before 1970 or more than {c.max_arrival_ahead_ms} ms ahead of ingestion",
        )
    ahead = pc.max(pc.subtract(te, tp)).as_py()  # both within [0, ingest + future bound]: no overflow
    if ahead is not None and ahead > c.max_event_ahead_ms:
        return None, f"{c.event_time} more than {c.max_event_ahead_ms} ms ahead of {c.arrival_time}"
    value = table.column(c.value).chunk(0)
    if value.null_count or not _all(pc.is_finite(value)):
        return None, f"a missing or non-finite {c.value}"
    records = pa.table(
        {
            "event_id": event_id,
            "key": key,
            "partition": pc.fill_null(part, ""),
            "event_time_ms": te,
            "arrival_time_ms": tp,
            "value": value,
        }
    )
    return records, ""


def valid_utf8(data: bytes) -> bool:
    r"""Whether ``data`` is valid UTF-8 (checked by Arrow in place, without decoding a copy).

    >>> valid_utf8("clé".encode()), valid_utf8(b"a\xffb"), valid_utf8(b"\xed\xa0\x80")
    (True, False, False)
    """
    offsets = pa.py_buffer(np.array([0, len(data)], np.int64).tobytes())
    text = pa.Array.from_buffers(pa.large_string(), 1, [None, offsets, pa.py_buffer(data)])
    try:
        text.validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


def _all(flags: pa.Array) -> bool:
    return bool(pc.all(flags).as_py())


def record_ids(split: Split, rows: int) -> NDArray[np.int64]:
    """Ids of a split's records: unique in the batch and increasing along each file."""
    ids: NDArray[np.int64] = (np.int64(split.sid) << np.int64(32)) + np.arange(rows, dtype=np.int64)
    return ids


def to_blob(table: pa.Table) -> bytes:
    """``table`` as Arrow IPC stream bytes."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    blob: bytes = sink.getvalue().to_pybytes()
    return blob


def from_blobs(blobs: Iterable[bytes | None]) -> list[pa.Table]:
    """Tables back from :func:`to_blob` bytes (None skipped)."""
    return [pa.ipc.open_stream(pa.py_buffer(b)).read_all() for b in blobs if b is not None]


# -- lateness thresholds over the arrival key --------------------------------------------------------------
@dataclass(frozen=True)
class LateThresholds:
    """The stage's labels as pieces over the arrival key ``(arrival time, file, record id)``.

    Piece ``k`` starts at key ``(tp[k], file[k], line[k])``; a row at or after it (and before piece ``k+1``)
    is late iff its event time is below ``values[k]``. ``tie[k]``: the piece starts after an earlier row
    with the same arrival time, so the file and record id decide.
    """

    tp: NDArray[np.int64]
    file: NDArray[np.int64]
    line: NDArray[np.int64]
    values: NDArray[np.int64]
    tie: NDArray[np.bool_]

    def late(
        self, te: NDArray[np.int64], tp: NDArray[np.int64], file: NDArray[np.int64], line: NDArray[np.int64]
    ) -> NDArray[np.bool_]:
        """Per row: late (event time below the threshold of the piece its arrival key falls in).

        >>> th = LateThresholds(np.array([10, 20, 20]), np.array([0, 0, 1]), np.array([0, 5, 0]),
        ...                     np.array([100, 200, 300]), np.array([False, False, True]))
        >>> th.late(np.array([150, 150, 250, 250]), np.array([15, 20, 20, 20]),
        ...         np.array([0, 0, 0, 1]), np.array([0, 5, 9, 3])).tolist()
        [False, True, False, True]
        """
        if self.tp.size == 0:
            return np.zeros(te.size, bool)
        piece = np.searchsorted(self.tp, tp, side="right") - 1
        for k in np.flatnonzero(self.tie):
            same = np.flatnonzero(tp == self.tp[k])
            if same.size == 0:
                continue
            before = (file[same] < self.file[k]) | (
                (file[same] == self.file[k]) & (line[same] < self.line[k])
            )
            rows = same[before]
            piece[rows] = np.minimum(piece[rows], k - 1)
        threshold = np.where(piece >= 0, self.values[np.maximum(piece, 0)], np.iinfo(np.int64).min)
        flags: NDArray[np.bool_] = te < threshold
        return flags


# -- executor side -----------------------------------------------------------------------------------------
#: Parsed clean splits a Python worker keeps from the first pass to the second: (job, batch, sid) -> records.
_CACHE: dict[tuple[str, int, int], pa.Table] = {}

#: A run's spill folder: ``wm-arrow-<128 random bits>`` (:func:`jobs.stream.sources.arrow_reader.spill_dir`).
SPILL_NAME = re.compile(r"wm-arrow-[0-9a-f]{32}")
#: A spill folder younger than this is never swept (its run may not have locked it yet).
SPILL_GRACE_S = 60.0
#: A worker sweeps a spill folder's siblings at most this often.
SWEEP_EVERY_S = 300.0
#: Spill folders this process holds a shared lock on: folder -> the lock file's descriptor.
_HELD: dict[str, int] = {}
#: When this process last swept each local folder (monotonic seconds).
_SWEPT: dict[str, float] = {}


def hold_spill(folder: Path) -> None:
    """Mark the run's spill folder used by this worker: a shared lock on the folder itself while it lives.

    A killed run's workers die with it (the JVM that started them is gone) and their locks with them, so a
    folder nobody holds is a killed run's (:func:`sweep_spills`). Locks on folders removed since (runs that
    ended) are let go.
    """
    for path, fd in list(_HELD.items()):
        if not os.path.isdir(path):
            os.close(fd)
            del _HELD[path]
    key = str(folder)
    if key in _HELD:
        return
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:  # a sweeper is removing it right now: this run's files are parsed again
        os.close(fd)
        return
    _HELD[key] = fd


def sweep_spills(current: Path, grace_s: float = SPILL_GRACE_S) -> list[Path]:
    """Remove the spill folders beside ``current`` that killed runs left; returns those removed.

    A run removes its folder when it ends; a run killed (SIGKILL, a lost driver) leaves it, with a batch's
    parsed splits in it. A sibling is removed when it is this user's, named as a spill folder, untouched for
    ``grace_s`` and locked by no live worker (:func:`hold_spill`): it is taken with an exclusive lock, so a
    worker of a live run can never lose its folder under it. Removing a live run's folder would cost only
    parsing again (a kept split is a cache): the grace is not a safety margin.
    """
    removed: list[Path] = []
    now = time.time()
    try:
        siblings = list(current.parent.iterdir())
    except OSError:
        return removed
    for folder in siblings:
        if folder == current or not SPILL_NAME.fullmatch(folder.name):
            continue
        try:
            info = os.lstat(folder)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
                continue
            newest = max([info.st_mtime, *(os.lstat(f).st_mtime for f in folder.iterdir())])
            if now - newest < grace_s:
                continue
            fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # a live worker holds it
            os.close(fd)
            continue
        try:
            shutil.rmtree(folder, ignore_errors=True)
        finally:
            os.close(fd)
        removed.append(folder)
    return removed


def _sweep_now(folder: Path) -> None:
    """:func:`sweep_spills` beside the run's folder, at most every :data:`SWEEP_EVERY_S` per worker."""
    base = str(folder.parent)
    at = time.monotonic()
    last = _SWEPT.get(base)
    if last is not None and at - last < SWEEP_EVERY_S:
        return
    _SWEPT[base] = at
    sweep_spills(folder)


def private_folder(folder: Path) -> Path:
    """``folder`` (created 0700 if missing), or OSError when it is not a folder of ours alone.

    The driver makes the run's spill folder with it, and the passes check the folder with it before every
    write and read of a kept split.
    """
    folder.mkdir(mode=0o700, exist_ok=True)
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        msg = f"{folder} is not a folder private to this user: parsed splits are not kept"
        raise OSError(msg)
    return folder


def _split_tag(split: Split) -> dict[bytes, bytes]:
    """What a kept split must say it is: the file, byte range and size it was parsed from."""
    return {b"awm.split": f"{split.path}\0{split.start}\0{split.end}\0{split.size}".encode()}


def _spill_path(folder: str, batch_id: int, sid: int) -> Path:
    return Path(folder) / f"b{batch_id}-s{sid}.arrow"


def _keep(job: str, batch_id: int, split: Split, records: pa.Table, folder: str = "") -> None:
    """Keep a parsed split for the second pass: in this worker's memory and as a node-local Arrow file.

    The second pass of a split may run in another Python worker (Spark hands tasks to idle workers), which
    then reads the file instead of parsing again. Splits of the job's earlier batches are dropped.
    """
    sid = split.sid
    for key in [k for k in _CACHE if k[0] == job and k[1] != batch_id]:
        del _CACHE[key]
    if sum(t.num_rows for t in _CACHE.values()) + records.num_rows <= CACHE_MAX_ROWS:
        _CACHE[(job, batch_id, sid)] = records
    if not folder:
        return
    try:
        spill = private_folder(Path(folder))
        hold_spill(spill)
        _sweep_now(spill)  # the folders killed runs left beside it (the first batch of a run sweeps)
        for old in spill.glob("b*-s*.arrow"):
            if not old.name.startswith(f"b{batch_id}-"):
                old.unlink(missing_ok=True)
        target = _spill_path(folder, batch_id, sid)
        temporary = target.with_suffix(f".{os.getpid()}.tmp")
        tagged = records.replace_schema_metadata(_split_tag(split))
        with pa.OSFile(str(temporary), "wb") as sink, pa.ipc.new_file(sink, tagged.schema) as writer:
            writer.write_table(tagged)
        os.replace(temporary, target)
    except OSError:
        pass  # no room, or no private folder: the second pass parses the split again


def _take(job: str, batch_id: int, split: Split, folder: str = "") -> pa.Table | None:
    """A split kept by :func:`_keep` (memory first, then the file), or None; the file is removed.

    A file is taken only from the private folder and only if it names this very split (path, byte range,
    size); anything else is ignored and the split is parsed again.
    """
    records = _CACHE.pop((job, batch_id, split.sid), None)
    if not folder:
        return records
    path = _spill_path(folder, batch_id, split.sid)
    try:
        if records is None and path.exists():
            private_folder(Path(folder))
            with pa.OSFile(str(path), "rb") as source:
                kept = pa.ipc.open_file(source).read_all()
            if kept.schema.metadata == _split_tag(split):
                records = kept.replace_schema_metadata(None)
        path.unlink(missing_ok=True)
    except (OSError, pa.ArrowInvalid):
        records = None
    return records


def _file_changed(split: Split) -> bool:
    try:
        if _is_remote(split.path):
            from watermark import storage

            found = storage.info(storage.Location.of(split.path))
            return found is None or found.size != split.size
        return os.path.getsize(split.path) != split.size
    except OSError:
        return True


@dataclass(frozen=True)
class SplitCollected:
    """What the first pass returns for one split."""

    sid: int
    clean: bool
    why: str
    rows: int
    narrow: bytes | None  # partition, event_time_ms, arrival_time_ms as an IPC blob (None when unclean)


@dataclass(frozen=True)
class SplitAggregated:
    """What the second pass returns for one split."""

    sid: int
    reparsed: bool
    partials: bytes  # window partials of its on-time rows (IPC blob)
    late: bytes  # its late rows, LATE_ROWS_SCHEMA (IPC blob)


def collect_pass(
    splits: Iterable[Split], checks: RecordChecks, job: str, batch_id: int
) -> Iterator[SplitCollected]:
    """First pass (executors): per split, whether it is clean and its narrow columns."""
    freeze_imports()
    for split in splits:
        if _file_changed(split):
            records, why = None, f"{split.path} changed size since the batch was planned"
        else:
            try:
                records, why = parse_clean(read_split(split, checks.max_record_bytes), checks)
            except RecordTooLong as exc:  # Spark's reader quarantines it (record_too_long)
                records, why = None, str(exc)
        if records is None:
            yield SplitCollected(split.sid, False, why or "unclean records", 0, None)
            continue
        _keep(job, batch_id, split, records, checks.spill)
        narrow = records.select(["partition", "event_time_ms", "arrival_time_ms"])
        yield SplitCollected(split.sid, True, "", records.num_rows, to_blob(narrow))


def aggregate_pass(
    splits: Iterable[Split],
    checks: RecordChecks,
    job: str,
    batch_id: int,
    thresholds: LateThresholds,
    window: WindowSpec,
) -> Iterator[SplitAggregated]:
    """Second pass (executors): per split, the partials of its on-time rows and its late rows."""
    freeze_imports()
    for split in splits:
        records = _take(job, batch_id, split, checks.spill)
        reparsed = records is None
        if records is None:
            records, why = parse_clean(read_split(split, checks.max_record_bytes), checks)
            if records is None:
                msg = f"split {split.path} [{split.start}, {split.end}) no longer parses cleanly: {why}"
                raise RuntimeError(msg)
        n = records.num_rows
        ids = record_ids(split, n)
        te = records.column("event_time_ms").to_numpy()
        tp = records.column("arrival_time_ms").to_numpy()
        late = thresholds.late(te, tp, np.full(n, split.file, np.int64), ids)
        on_time = records.filter(pa.array(~late))
        partials = table_partials(on_time, window)
        late_rows = records.filter(pa.array(late))
        late_rows = late_rows.append_column(
            "file", pa.array(np.full(late_rows.num_rows, split.file, np.int32))
        ).append_column("line", pa.array(ids[late]))
        yield SplitAggregated(split.sid, reparsed, to_blob(partials), to_blob(late_rows))
