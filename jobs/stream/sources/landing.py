"""Landing files under ``--input`` (JSON lines, CSV, Parquet): the sources of :mod:`.kinds` that read files.

The streaming file source lists the files and logs each batch's list; the records are then read from
exactly those files (:class:`jobs.stream.sources.readers.ListedFiles`), less those that cannot be read,
which are quarantined as files (:func:`jobs.stream.sources.readers.screen_files`).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from jobs.stream.sources.readers import ListedFiles, screen_files
from jobs.stream.sources.source_log import logged_batch_files
from jobs.stream.sources.source_options import SourceOptions


def open_stream(spark: Any, options: SourceOptions) -> Any:
    """The file source's stream of the landing files (:meth:`ListedFiles.stream`)."""
    return ListedFiles(spark, options).stream()


def batch_files(batch: Any, batch_id: int, options: SourceOptions) -> tuple[Any, list[str] | None, pa.Table]:
    """The batch, the files the source logged for it less those set aside, and those set aside."""
    files, unread = screen_files(logged_batch_files(options.checkpoint, batch_id))
    return batch, files, unread
