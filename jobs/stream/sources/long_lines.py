"""Records too long to read whole (``record_too_long``), found and set aside with bounded memory.

Spark's line reader (Hadoop's ``LineRecordReader``, under the JSON and CSV sources) holds a whole line in
memory, and so did the Arrow path's read of a split: one multi-gigabyte line without a newline failed its
batch, at every restart. A record is now at most ``--max-record-bytes`` long (the bytes of its line, without
the newline; default :data:`jobs.stream.sources.record_rules.DEFAULT_MAX_RECORD_BYTES`, 16 MiB), and
neither reader ever holds a longer one:

- **The Arrow path** (:func:`jobs.stream.workers.arrow_path.read_split`, with
  :func:`~jobs.stream.workers.arrow_path.has_long_line`) reads its split and, to end the
  split's last line, at most ``max_record_bytes`` past the split's end; a line longer than the bound, inside
  the split or across its end, makes the split unclean, and the batch goes to Spark's reader. A worker holds
  its split (at most 128 MiB) plus at most the bound.
- **Spark's reader** gets no line longer than the bound: before it reads a batch's landing files,
  :class:`LongLineScreen` scans every JSON or CSV file larger than the bound (a file no larger cannot hold a
  longer line: the others are not opened) for such lines (:func:`long_lines`, a chunk of
  :data:`CHUNK_BYTES` at a time). A file that has one is given to Spark as a *screened copy*
  (``CHECKPOINT/stage/screened/batch-N/``, :meth:`jobs.stream.checkpoint.layout.CheckpointLayout.screened`):
  the file's bytes, streamed through a chunk at a time, with each long line replaced by a short placeholder
  line: :attr:`LongLineScreen.marker` (a random token of the run, so no landing record can pose as one),
  the line's length and its first :data:`~jobs.stream.sources.validate.RAW_MAX_BYTES` bytes in base64.
  Validation (:func:`jobs.stream.sources.validate.validate`, ``too_long_marker``) quarantines the
  placeholder as ``record_too_long`` with ``raw`` = the line's head and ``…[truncated, N bytes]``, exactly
  as a record with a field too long; every other byte is the file's own, so the other records keep their
  text and their numbers (``line``), and the rows name the landing file, not the copy. The copies of a
  batch are removed when the next batch is screened and when the run ends; a batch run again screens again.

Memory: the driver holds one chunk (1 MiB), the scan's newline offsets within it, and one line's head
(1 KiB), whatever the length of a line or a file; Spark's executors hold lines of at most the bound. The
cost: one more read of each landing file larger than the bound (only files that have a long line are
copied), and one metadata call per file per batch to learn its size.
"""

from __future__ import annotations

import base64
import logging
import secrets
from collections.abc import Callable
from typing import Any

import numpy as np

from jobs.stream.checkpoint.layout import CheckpointLayout
from jobs.stream.sources.readers import listed_location
from jobs.stream.sources.validate import RAW_MAX_BYTES
from watermark import storage
from watermark.storage import Location

log = logging.getLogger("jobs.stream")

#: Bytes of a landing file the screen reads (and copies) at a time.
CHUNK_BYTES = 1 << 20
#: Formats whose records are lines (Parquet's are not; a Kafka value is bounded by the broker).
LINE_FORMATS = ("json", "csv")


def long_lines(read: Callable[[int], bytes], bound: int, chunk: int = CHUNK_BYTES) -> list[tuple[int, int]]:
    r"""``(offset, length)`` of every line longer than ``bound`` bytes in the stream ``read`` gives.

    A line's length excludes its newline; the last line may have none. The stream is read ``chunk`` bytes
    at a time and nothing of it is kept: only the offset where the current line started.

    >>> import io
    >>> long_lines(io.BytesIO(b"ab\n" + b"x" * 9 + b"\nc\n" + b"y" * 5).read, 4, chunk=4)
    [(3, 9), (15, 5)]
    """
    found: list[tuple[int, int]] = []
    offset = 0  # of the chunk in the stream
    start = 0  # of the current line
    while True:
        data = read(chunk)
        if not data:
            break
        newlines = np.flatnonzero(np.frombuffer(data, np.uint8) == 0x0A) + offset
        if newlines.size:
            starts = np.concatenate(([start], newlines[:-1] + 1))
            lengths = newlines - starts
            for i in np.flatnonzero(lengths > bound):
                found.append((int(starts[i]), int(lengths[i])))
            start = int(newlines[-1]) + 1
        offset += len(data)
    if offset - start > bound:
        found.append((start, offset - start))
    return found


def placeholder(marker: str, length: int, head: bytes) -> bytes:
    """The line a screened copy holds in place of a line of ``length`` bytes starting with ``head``.

    >>> placeholder("awm-record-too-long:t:", 70_000_000, b'{"a"')
    b'awm-record-too-long:t:70000000:eyJhIg=='
    """
    return f"{marker}{length}:".encode() + base64.b64encode(head[:RAW_MAX_BYTES])


def _copy(source: Any, sink: Any, size: int) -> None:
    """``size`` bytes from ``source`` to ``sink``, a chunk at a time."""
    while size > 0:
        data = source.read(min(CHUNK_BYTES, size))
        if not data:
            return
        sink.write(data)
        size -= len(data)


def write_screened(source: Location, target: Location, cuts: list[tuple[int, int]], marker: str) -> None:
    """Copy ``source`` to ``target`` with each line ``(offset, length)`` of ``cuts`` as a placeholder.

    Streamed: a chunk at a time, never a line whole (of a long line only its head is read).
    """
    storage.make_dirs(target.parent)
    fs, path = target.filesystem()
    with storage.open_input_file(source) as reader, fs.open_output_stream(path) as writer:
        at = 0
        for offset, length in cuts:
            _copy(reader, writer, offset - at)
            head = reader.read(min(RAW_MAX_BYTES, length))
            writer.write(placeholder(marker, length, head))
            reader.seek(offset + length)
            at = offset + length
        _copy(reader, writer, 1 << 62)


class LongLineScreen:
    """The screen of one run: which landing files of a batch have a line too long, and their copies."""

    def __init__(self, checkpoint: str, fmt: str, bound: int) -> None:
        self.layout = CheckpointLayout(checkpoint)
        self.format = fmt
        self.on = fmt in LINE_FORMATS
        self.bound = bound
        #: The start of a placeholder line; its token is new for each run, so no input line can match it.
        self.marker = f"awm-record-too-long:{secrets.token_hex(16)}:"

    def screen(self, files: list[str], batch_id: int) -> dict[str, str]:
        """``{landing file URI: screened copy}`` for the batch's files that have a line too long.

        The other batches' copies are removed first (a batch run again writes its own again).
        """
        self.clear(keep=batch_id)
        if not self.on:
            return {}
        copies: dict[str, str] = {}
        for index, uri in enumerate(files):
            source = listed_location(uri)
            found = storage.info(source)
            if found is None or found.size is None or found.size <= self.bound:
                continue
            with storage.open_input_file(source) as reader:
                cuts = long_lines(reader.read, self.bound)
            if not cuts:
                continue
            target = self.layout.screened(batch_id) / f"{index:06d}.{self.format}"
            write_screened(source, target, cuts, self.marker)
            log.warning(
                "batch %d: %s has %d line(s) longer than --max-record-bytes %d (the longest %d bytes): "
                "quarantined as record_too_long",
                batch_id,
                uri,
                len(cuts),
                self.bound,
                max(length for _, length in cuts),
            )
            copies[uri] = target.spark
        return copies

    def clear(self, keep: int | None = None) -> None:
        """Remove the screened copies of every batch but ``keep``."""
        for number, folder in self.layout.screened_batches():
            if number != keep:
                storage.remove_tree(folder)
