"""Landing files: the feed's records written as numbered files of a directory, in arrival order.

Files are named ``feed-000001.json``, ``feed-000002.json``, ... so that lexical order is arrival order;
a run into a directory that already holds feed files continues after the highest number. The directory may
be a URI (``s3a://bucket/landing``: :mod:`watermark.storage`). Each file appears whole under its final name
(:func:`watermark.storage.write_bytes`: on a local disk a hidden temporary file, which Spark's file source
ignores, renamed into place; on an object store one PUT), so the job never sees a partial file. Spark's file
source takes files oldest first by modification time (in milliseconds): every local file gets a modification
time at least 1 ms after the previous one's, so that the order in which the job reads files is their arrival
order; an object store stamps each object when its PUT completes, and files of the same second are read in
name order (:func:`jobs.stream.sources.source_log.landing_order`).
"""

from __future__ import annotations

import math
import os
import re
import time
from typing import Any

import pyarrow as pa

from tools.feed.records import by_arrival, json_lines, normalise, utc
from watermark import storage
from watermark.progress import Progress, progress_line
from watermark.storage import Location

__all__ = ["FORMATS", "PACES", "check_options", "feed"]

FORMATS = ("json", "csv", "parquet")
PACES = ("fast", "realtime")

_PREFIX = "feed-"
_DIGITS = 6  # feed-000001 ... feed-999999: lexical order = numeric order
_MAX_NUMBER = 10**_DIGITS - 1
_FEED_FILE = re.compile(rf"^{_PREFIX}(\d+)\.(?:{'|'.join(FORMATS)})$")


def check_options(
    *,
    fmt: str = "json",
    rows_per_file: int = 1000,
    max_files: int | None = None,
    pace: str = "fast",
    speed: float = 1.0,
) -> None:
    """Validate the :func:`feed` options.

    Parameters
    ----------
    fmt, rows_per_file, max_files, pace, speed
        As for :func:`feed`.

    Raises
    ------
    ValueError
        If an option is invalid; the message names it.

    """
    if fmt not in FORMATS:
        msg = f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}"
        raise ValueError(msg)
    if pace not in PACES:
        msg = f"unknown pace {pace!r}; expected one of {', '.join(PACES)}"
        raise ValueError(msg)
    if isinstance(rows_per_file, bool) or not isinstance(rows_per_file, int) or rows_per_file < 1:
        msg = f"rows per file must be an integer >= 1, got {rows_per_file!r}"
        raise ValueError(msg)
    if max_files is not None and (
        isinstance(max_files, bool) or not isinstance(max_files, int) or max_files < 1
    ):
        msg = f"max files must be an integer >= 1, got {max_files!r}"
        raise ValueError(msg)
    if (
        isinstance(speed, bool)
        or not isinstance(speed, int | float)
        or not (math.isfinite(speed) and speed > 0)
    ):
        msg = f"speed must be a finite number > 0, got {speed!r}"
        raise ValueError(msg)


def feed(
    records: pa.Table,
    out_dir: str | os.PathLike[str],
    *,
    fmt: str = "json",
    rows_per_file: int = 1000,
    max_files: int | None = None,
    pace: str = "fast",
    speed: float = 1.0,
    arrival_time: bool = True,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Write records into numbered landing files, in arrival order, fast or paced in real time.

    Parameters
    ----------
    records : pyarrow.Table
        Columns ``event_id``, ``key``, ``event_time_ms``, ``arrival_time_ms``, ``value`` and optionally
        ``partition`` (see :data:`tools.feed.records.FIELDS`; other columns are ignored, types are cast),
        without nulls. They are stably sorted by ``arrival_time_ms`` first (a no-op for
        :func:`tools.feed.records.records_from_file` and :func:`tools.feed.records.records_from_synthetic`).
    out_dir : str or os.PathLike
        The landing directory, created if missing. Numbering continues after the highest existing
        ``feed-NNNNNN.*`` file in it.
    fmt : {"json", "csv", "parquet"}, default "json"
        JSON Lines (one object per line, fields in :data:`tools.feed.records.FIELDS` order), CSV with a
        header, or Parquet.
    rows_per_file : int, default 1000
        Records per file (the last file may hold fewer).
    max_files : int, optional
        Stop after this many files.
    pace : {"fast", "realtime"}, default "fast"
        ``"fast"`` writes as fast as possible. ``"realtime"`` releases file ``k`` when the wall clock
        reaches ``start + (first arrival in file k - first arrival of the run) / speed``.
    speed : float, default 1.0
        Real-time multiplier for ``pace="realtime"`` (2.0 = twice as fast), > 0.
    arrival_time : bool, default True
        Write ``arrival_time_ms``; when False the field is left out (the job then stamps its own
        ingestion time), though it still paces the feed.
    progress : callable, optional
        Called with one line per file, e.g. ``"file 12/97: 1,000 rows, arrival 2014-11-10T13:55:01Z"``.

    Returns
    -------
    dict
        ``{"files": N, "rows": M, "out": DIR, "first_arrival_ms": ..., "last_arrival_ms": ...}`` for the
        records written (arrival times are None when nothing was written).

    Raises
    ------
    ValueError
        If an option is invalid, a required column is missing or holds nulls, a value is not finite,
        or the file numbers would pass 999999.
    OSError
        If the directory or a file cannot be written.

    Examples
    --------
    >>> import tempfile
    >>> from tools.feed.records import records_from_synthetic
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     summary = feed(records_from_synthetic(2_500), tmp, rows_per_file=1_000)
    ...     names = sorted(os.listdir(tmp))
    >>> summary["files"], summary["rows"], names
    (3, 2500, ['feed-000001.json', 'feed-000002.json', 'feed-000003.json'])

    """
    check_options(fmt=fmt, rows_per_file=rows_per_file, max_files=max_files, pace=pace, speed=speed)
    table, tp_ms = by_arrival(normalise(records))

    files = math.ceil(table.num_rows / rows_per_file)
    if max_files is not None:
        files = min(files, max_files)
    rows = min(table.num_rows, files * rows_per_file)
    table, tp_ms = table.slice(0, rows), tp_ms[:rows]
    if not arrival_time:
        table = table.drop_columns(["arrival_time_ms"])

    out = Location.of(out_dir)
    storage.make_dirs(out)
    landed = storage.listdir(out)
    first_number = _highest_number(landed) + 1
    if files and first_number + files - 1 > _MAX_NUMBER:
        msg = f"{out}: {files} more files would number past {_PREFIX}{_MAX_NUMBER}; use an empty directory"
        raise ValueError(msg)

    lines = json_lines(table) if fmt == "json" and rows else None
    start = time.monotonic()
    last_mtime_ns = _newest_mtime_ns(landed)
    for k in range(files):
        lo, count = k * rows_per_file, min(rows_per_file, rows - k * rows_per_file)
        final = out / f"{_PREFIX}{first_number + k:0{_DIGITS}d}.{fmt}"
        if lines is not None:
            data = "".join(lines.slice(lo, count).to_pylist()).encode("utf-8")
        else:
            data = _table_bytes(table.slice(lo, count), fmt)
        if pace == "realtime":
            _sleep_until(start + (int(tp_ms[lo]) - int(tp_ms[0])) / 1000.0 / speed)
        # whole, under its final name at once; locally with a modification time after every earlier file's
        last_mtime_ns = max(time.time_ns(), last_mtime_ns + 1_000_000)
        storage.write_bytes(final, data, mtime_ns=last_mtime_ns)
        if progress is not None:
            line = f"file {k + 1}/{files}: {count:,} rows, arrival {utc(int(tp_ms[lo]))}"
            progress(progress_line(line, k + 1, files))
    return {
        "files": files,
        "rows": rows,
        "out": str(out),
        "first_arrival_ms": int(tp_ms[0]) if rows else None,
        "last_arrival_ms": int(tp_ms[-1]) if rows else None,
    }


def _newest_mtime_ns(landed: list[storage.Entry]) -> int:
    """Latest modification time among a folder's feed files (0 when there are none)."""
    times = [(e.mtime_ms or 0) * 1_000_000 for e in landed if e.name.startswith(_PREFIX)]
    return max(times, default=0)


def _highest_number(landed: list[storage.Entry]) -> int:
    """The highest number of a visible ``feed-NNNNNN.<format>`` file among a folder's entries, or 0."""
    numbers = [int(match.group(1)) for e in landed if (match := _FEED_FILE.match(e.name))]
    return max(numbers, default=0)


def _table_bytes(table: pa.Table, fmt: str) -> bytes:
    """One CSV (with a header) or Parquet file's bytes."""
    sink = pa.BufferOutputStream()
    if fmt == "csv":
        import pyarrow.csv as pacsv

        pacsv.write_csv(table, sink)
    else:
        import pyarrow.parquet as pq

        pq.write_table(table, sink)
    return bytes(sink.getvalue().to_pybytes())


def _sleep_until(deadline: float) -> None:
    """Sleep until ``time.monotonic()`` reaches ``deadline``."""
    while (remaining := deadline - time.monotonic()) > 0:
        time.sleep(remaining)
