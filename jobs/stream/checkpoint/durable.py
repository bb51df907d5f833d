"""Durable writes in the checkpoint: a file's bytes and a folder's entries on disk before the job goes on.

A state, a batch's metadata or its pending rows are written to a temporary name, fsynced, and renamed into
place (:mod:`jobs.stream.checkpoint.layout` names both); these are the fsyncs.
"""

from __future__ import annotations

import os
from pathlib import Path


def write_durably(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` and fsync the file."""
    with path.open("wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def fsync_file(path: Path) -> None:
    """Fsync a file another writer (pyarrow's Parquet writer) has written and closed."""
    with path.open("rb+") as fh:
        os.fsync(fh.fileno())


def fsync_dir(path: Path) -> None:
    """Fsync a folder: the entries created or renamed in it are on disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
