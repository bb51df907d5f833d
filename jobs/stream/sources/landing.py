"""Landing files under ``--input`` (JSON lines, CSV, Parquet): the sources of :mod:`.kinds` that read files.

The streaming file source lists the files and logs each batch's list; the records are then read from
exactly those files (:class:`jobs.stream.sources.readers.ListedFiles`), less those that cannot be read,
which are quarantined as files (:func:`jobs.stream.sources.readers.screen_files`). A missing landing
folder is an error (:func:`check_landing_input`), never an empty input.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from jobs.stream.sources.readers import ListedFiles, screen_files
from jobs.stream.sources.source_log import logged_batch_files
from jobs.stream.sources.source_options import SourceOptions
from watermark import storage
from watermark.storage import Location


def check_landing_input(where: str, what: str = "--input") -> None:
    """Refuse a local landing folder that does not exist or is not a folder (``ValueError``: exit 2).

    The job used to create it and exit 0 with no event, its summary naming tables no batch made: a typo
    in ``--input`` passed for an empty input. On an object store a prefix with no object is an empty
    folder (they have no folders); its bucket is checked with the other locations.
    """
    place = Location.of(where)
    if not place.local:
        return
    found = storage.info(place)
    if found is None:
        msg = f"{what} {place}: no such folder; create it (mkdir -p {place}) or correct the location"
        raise ValueError(msg)
    if not found.is_dir:
        msg = f"{what} {place}: not a folder (the landing files' folder is expected)"
        raise ValueError(msg)


def open_stream(spark: Any, options: SourceOptions) -> Any:
    """The file source's stream of the landing files (:meth:`ListedFiles.stream`)."""
    return ListedFiles(spark, options).stream()


def batch_files(batch: Any, batch_id: int, options: SourceOptions) -> tuple[Any, list[str] | None, pa.Table]:
    """The batch, the files the source logged for it less those set aside, and those set aside."""
    files, unread = screen_files(logged_batch_files(options.checkpoint, batch_id), options.input)
    return batch, files, unread
