"""The file source's log: which landing files a micro-batch reads, in the order the job reads them.

Spark's file source records each micro-batch's files in its log under the checkpoint (``query/sources/0``)
before the batch runs; the job reads a batch's list from there (:func:`logged_batch_files`), so a replayed
batch reads the same files, and numbers their records in landing order (:func:`landing_order`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from jobs.stream.checkpoint.layout import CheckpointLayout
from jobs.stream.sources.readers import listed_location
from watermark import storage
from watermark.storage import Location


def source_offsets(checkpoint: str, batch_id: int) -> tuple[int, int] | None:
    """The file source's log entries ``(start, end]`` micro-batch ``batch_id`` reads, from Spark's offset log.

    Spark writes a batch's files to the source's log (``query/sources/0/K``) before the batch's offsets
    (``query/offsets/N``, whose source line is ``{"logOffset": K}``); a query killed between the two plans
    the next batch over every entry written since, so one batch may read the entries of several ``K``.
    None when the offset log does not say (then the entry ``K = N`` alone is taken).
    """
    layout = CheckpointLayout(checkpoint)

    def end_of(number: int) -> int | None:
        try:
            lines = storage.read_text(layout.offsets / str(number)).splitlines()
            return int(json.loads(lines[2])["logOffset"])
        except (FileNotFoundError, IndexError, KeyError, TypeError, ValueError):
            return None

    end = end_of(batch_id)
    start = -1 if batch_id == 0 else end_of(batch_id - 1)
    if end is None or start is None or end < start:
        return None
    return start, end


def logged_batch_files(checkpoint: str, batch_id: int) -> list[str] | None:
    """The landing files of micro-batch ``batch_id`` from the file source's log, or None when not found.

    The batch reads the log entries of its offset range (:func:`source_offsets`; usually the one entry
    ``batch_id``). The log (``query/sources/0``) has one file per entry (``K``, JSON lines after a version
    line) until Spark compacts it into ``K.compact`` files that hold every earlier entry with its
    ``batchId`` (:class:`jobs.stream.checkpoint.layout.CheckpointLayout` names them).
    """
    span = source_offsets(checkpoint, batch_id)
    entries = range(span[0] + 1, span[1] + 1) if span is not None else [batch_id]
    found: list[tuple[str, int]] = []
    for entry in entries:
        files = _log_entry(checkpoint, entry)
        if files is None:
            return None
        found += files
    return landing_order(found) if found else None


def _log_entry(checkpoint: str, entry: int) -> list[tuple[str, int]] | None:
    """The ``(path, modification time)`` of the source log's entry ``entry``, or None when not found."""
    layout = CheckpointLayout(checkpoint)
    candidates = [layout.source_log_entry(entry)]
    candidates += [p for n, p in layout.source_log_compactions() if n >= entry][:1]
    for path in candidates:
        try:
            text = storage.read_text(path)
        except FileNotFoundError:
            continue
        mine = [r for r in _log_rows(text) if int(r.get("batchId", entry)) == entry]
        if mine:
            return [(r["path"], int(r.get("timestamp", 0))) for r in mine]
    return None


def _log_rows(text: str) -> list[dict[str, Any]]:
    """The entries of a source-log file: JSON lines after its version line."""
    return [json.loads(line) for line in text.splitlines()[1:] if line.strip()]


def landing_order(files: Iterable[tuple[str, int]]) -> list[str]:
    """Paths of ``(path, modification time)`` pairs in the order the job reads them: by time, then by name.

    Object stores keep whole seconds, so files landed within a second share a modification time, and
    Spark's file source orders files by modification time alone; the name decides between them here.

    >>> landing_order([("file:///in/b.json", 1_000), ("file:///in/c.json", 0), ("file:///in/a.json", 1_000)])
    ['file:///in/c.json', 'file:///in/a.json', 'file:///in/b.json']
    """
    return [path for path, _ in sorted(files, key=lambda f: (f[1], f[0]))]


def logged_files(checkpoint: str) -> set[Location]:
    """Every file the source log records, in any batch (its entries and its compactions)."""
    layout = CheckpointLayout(checkpoint)
    found: set[Location] = set()
    for entry in storage.listdir(layout.source_log):
        name = entry.name.removesuffix(".compact")
        if entry.is_dir or not name.isdigit():  # a temporary file or its checksum
            continue
        try:
            text = storage.read_text(entry.location)
        except FileNotFoundError:  # removed by a compaction meanwhile: the compaction holds it
            continue
        found.update(listed_location(row["path"]) for row in _log_rows(text))
    return found


def unplanned_files(checkpoint: str, root: str) -> list[Location]:
    """The files under the landing folder ``root`` that no batch of the source log planned, by location.

    After an available-now run every file present when it started was planned (read, or quarantined as a
    file); one that was not is lost unless someone looks: the caller warns about each. Names Spark's file
    source ignores are left out (a component starting with ``.`` or ``_``, an ``._COPYING_`` file); so is
    nothing else, so a file landed after the run's last listing is reported too (the next run reads it).
    """
    place = Location.of(root)
    logged = logged_files(checkpoint)
    missed = []
    for entry in storage.walk_files(place):
        parts = entry.location.relative_to(place).split("/")
        if any(p.startswith((".", "_")) for p in parts) or entry.name.endswith("._COPYING_"):
            continue
        if entry.location not in logged:
            missed.append(entry.location)
    return sorted(missed, key=lambda where: where.spark)
