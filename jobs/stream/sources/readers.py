"""Reading landing files (JSON lines, CSV, Parquet), and numbering any source's records.

Every source (:mod:`jobs.stream.sources.kinds`) gives records as ``file`` plus every input field (text,
or typed where the reader types them) and the corrupt-record column. Each micro-batch's records are then
numbered: ``file`` becomes the index of the record's landing file among the batch's files and ``line`` a
record id, which :class:`RecordNumbers` turns into the record's 0-based number in its file.

Landing files are read exactly as the file source listed them (:class:`ListedFiles`), whatever their
modification time (:data:`MAX_FILE_AGE`): a file whose name Hadoop cannot open, that is gone, or that is a
symbolic link or resolves outside the landing root, is quarantined as a file (:func:`screen_files`).
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import numpy as np
import pyarrow as pa

from jobs.common.schemas import QUARANTINE_SCHEMA
from jobs.stream.options import FORMATS
from jobs.stream.sources.source_options import SourceOptions
from jobs.stream.sources.validate import CORRUPT, typed_json_schema
from watermark import storage
from watermark.storage import Location

log = logging.getLogger("jobs.stream")


def number_records(batch: Any, files: list[str]) -> Any:
    """A micro-batch of the source to ``(file, line, <fields>, <corrupt>)`` with compact record keys.

    ``file`` becomes the index of the record's landing file in ``files`` (the batch's files in landing
    order, :func:`jobs.stream.sources.source_log.landing_order`, so it orders records as the files landed)
    and ``line`` a ``monotonically_increasing_id``: it increases along each file, since the file source
    keeps a file's splits in order, and is the same in every action and on replay. :class:`RecordNumbers`
    turns it into the record's 0-based number in its file.
    """
    from pyspark.sql import functions as F

    pairs = [(spelling, i) for i, path in enumerate(files) for spelling in _uri_spellings(path)]
    index = F.create_map(*[F.lit(x) for pair in pairs for x in pair])
    line = F.col("_seq") if "_seq" in batch.columns else F.monotonically_increasing_id()
    return (
        batch.select(
            "*",
            F.element_at(index, F.col("file")).alias("_file"),
            line.alias("line"),
        )
        .drop("file")
        .withColumnRenamed("_file", "file")
    )


def _uri_spellings(path: str) -> list[str]:
    """A landing file's URI as the source log and ``_metadata.file_path`` may spell it."""
    if path.startswith("file:///"):
        return [path, "file:/" + path[len("file:///") :]]
    if path.startswith("file:/"):
        return [path, "file:///" + path[len("file:/") :]]
    return [path]


def modified_ms(uri: str) -> int:
    """Modification time of a landing file in epoch ms (0 for a missing file)."""
    try:
        found = storage.info(listed_location(uri))
    except OSError:
        return 0
    return (found.mtime_ms or 0) if found is not None else 0


class RecordNumbers:
    """0-based record number within its file for the record keys ``(file index, id)`` of one batch.

    Built from the keys of every record of the batch (valid or not); ids are unique across the batch.

    >>> import numpy as np
    >>> numbers = RecordNumbers(np.array([1, 0, 1, 0]), np.array([9, 3, 2**33, 4]))
    >>> numbers.lookup(np.array([2**33, 4, 9])).tolist()
    [1, 1, 0]
    """

    def __init__(self, file_ids: np.ndarray, ids: np.ndarray) -> None:
        fids = np.asarray(file_ids, np.int64)
        keys = np.asarray(ids, np.int64)
        order = np.lexsort((keys, fids))
        fsorted = fids[order]
        first = np.searchsorted(fsorted, fsorted, side="left")
        numbers = np.empty(order.size, np.int64)
        numbers[order] = np.arange(order.size) - first
        by_id = np.argsort(keys, kind="stable")
        self._ids = keys[by_id]
        self._numbers = numbers[by_id]

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        """Record numbers of ``ids`` (each must be a key the table was built from)."""
        pos = np.searchsorted(self._ids, np.asarray(ids, np.int64))
        return self._numbers[pos]


def oldest_input_ms(files: list[str] | None, started_s: float) -> int:
    """When the batch's oldest input entered the system: its oldest local landing file's modification time.

    Input that is not a local file (the rate source, object stores) counts from the batch's start.
    """
    oldest = int(started_s * 1000)
    for uri in files or []:
        where = listed_location(uri)
        if where.local:
            try:
                found = storage.info(where)
            except OSError:
                continue
            if found is not None and found.mtime_ms is not None:
                oldest = min(oldest, found.mtime_ms)
    return oldest


def _oldest_file(directory: str) -> Location | None:
    """The oldest landing file the job reads (a name with a colon, a symlink: quarantined, never read)."""
    files = [
        e
        for e in storage.listdir(directory)
        if not e.is_dir
        and not e.name.startswith((".", "_"))
        and ":" not in e.name
        and linked_reason(e.location, directory) is None
    ]
    oldest = min(files, key=lambda e: (e.mtime_ms or 0, e.name)) if files else None
    return oldest.location if oldest is not None else None


#: Bytes of a CSV landing file read for its header line.
CSV_HEADER_BYTES = 1 << 20


def csv_columns(directory: str, default: list[str], encoding: str = "utf-8") -> list[str]:
    """Column names of a CSV landing directory: the header of its oldest file, or ``default``."""
    import csv
    import io

    first = _oldest_file(directory)
    if first is None:
        return default
    with storage.open_input_file(first) as handle:
        head = handle.read(CSV_HEADER_BYTES).decode(encoding, errors="replace")
    header = next(csv.reader(io.StringIO(head, newline="")), None)
    if not header:
        msg = f"{first}: a CSV landing file must start with a header line"
        raise ValueError(msg)
    return header


#: The file source's ``maxFileAge``: older than any landing file can be. Spark's default (7 days) silently
#: skips, after the first batch, a file whose modification time is more than that before the newest file
#: the source has seen: a file copied with its times kept (``rsync -a``, ``cp -p``) was never read. The
#: age is measured from that newest file, not the clock, so a bound this large means every file is read
#: (Spark drops the bound itself only with ``latestFirst`` and ``maxFilesPerTrigger``; the job reads the
#: oldest first, and ``maxFilesPerTrigger`` only caps how many files a batch plans). The cost:
#: the source purges no entry from its map of the files it has seen (path and time, about 100 bytes plus
#: the path per file, on the driver, rebuilt from the source log at each start), so it grows with every
#: file that ever landed (about 200 MB for a million files); the source log holds them all anyway.
MAX_FILE_AGE = f"{2**62}ms"


class ListedFiles:
    """Landing files: the streaming file source, and batch reads of exactly the files a batch listed.

    Spark's file source (4.2) hands the files it listed to a reader that expands glob characters in their
    names: ``bracket[1].json`` reads ``bracket1.json`` too, and ``qm?.json`` the whole folder, so rows are
    counted several times. And a name Hadoop cannot make a URI of (``colon:x.json``) fails every attempt
    of the batch. :meth:`screen` sets aside the files that cannot be read (a missing file, such a name),
    to be quarantined as files; :meth:`frame` reads the others, each by its literal path (Hadoop's glob
    escapes), with the stream's schema and options.

    JSON is read with times as integers and the value as a number (:func:`typed_json_schema`); a record
    that does not fit lands in the corrupt-record column and ``validate`` re-reads it as text. CSV is read
    with every field as text; Parquet keeps its schema (taken from the oldest landing file). Either way
    ``validate`` checks the types, with a reason.
    """

    def __init__(self, spark: Any, options: SourceOptions) -> None:
        from pyspark.sql import types as T

        self.spark, self.options = spark, options
        self.names = list(dict.fromkeys(vars(options.fields).values()))
        text = T.StringType()
        if options.format == "json":
            self.schema = typed_json_schema(options.fields)
        elif options.format == "csv":
            # Read as Latin-1 (each byte one character), so that a field's bytes can be restored and
            # checked for UTF-8 (validate: bad_encoding) instead of being decoded with U+FFFD for bad ones.
            latin = [_latin1(n) for n in self.names]
            columns = csv_columns(options.input, latin, encoding="latin-1")
            self.schema = T.StructType([T.StructField(n, text) for n in [*columns, CORRUPT]])
        elif options.format == "parquet":
            first = _oldest_file(options.input)
            if first is not None:
                self.schema = spark.read.parquet(_literal(first.spark)).schema
            else:
                self.schema = T.StructType([T.StructField(n, text) for n in self.names])
        else:
            msg = f"--format must be one of {', '.join(FORMATS)}, got {options.format!r}"
            raise ValueError(msg)

    def _reader(self, reader: Any) -> Any:
        options = self.options
        reader = reader.format(options.format).schema(self.schema)
        if options.format == "csv":
            # enforceSchema=false: Spark checks every file's header against the first one's (by position).
            reader = reader.option("header", "true").option("enforceSchema", "false")
            reader = reader.option("encoding", "ISO-8859-1")
        if options.format != "parquet":
            reader = reader.option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", CORRUPT)
        return reader

    def _project(self, frame: Any) -> Any:
        from pyspark.sql import functions as F

        present = set(frame.columns)
        csv = self.options.format == "csv"

        def field(name: str) -> Any:
            read = _latin1(name) if csv else name
            if read in present:  # as read: validate() checks text fields and takes typed ones as they are
                column = F.col(f"`{read}`")
                # CSV is read as Latin-1: its bytes again, as text that may not be valid UTF-8.
                return F.encode(column, "ISO-8859-1").cast("string").alias(name) if csv else column
            return F.lit(None).cast("string").alias(name)

        corrupt = field(CORRUPT)
        return frame.select(
            F.col("_metadata.file_path").alias("file"), *[field(n) for n in self.names], corrupt
        )

    def stream(self) -> Any:
        """The streaming source (it lists the landing folder and logs each batch's files).

        Every file is considered whatever its modification time (:data:`MAX_FILE_AGE`).
        """
        reader = self._reader(self.spark.readStream).option("maxFileAge", MAX_FILE_AGE)
        if self.options.max_files_per_trigger:
            reader = reader.option("maxFilesPerTrigger", str(self.options.max_files_per_trigger))
        return self._project(reader.load(self.options.input))

    def frame(self, batch: Any, files: list[str], copies: dict[str, str] | None = None) -> Any:
        """The records of exactly ``files`` (source-log URIs), as the stream gives them.

        ``batch``, the stream's micro-batch, is returned as it is for a source that is not landing files.
        ``copies``: a file's screened copy to read in its place (:mod:`jobs.stream.sources.long_lines`);
        its records' ``file`` is still the landing file's URI.
        """
        if self.options.format not in ("json", "csv", "parquet"):
            return batch
        if not files:  # every file of the batch was set aside: no records, the stream's columns
            from pyspark.sql import types as T

            read = {f.name: f.dataType for f in self.schema.fields}
            columns = [("file", T.StringType())]
            columns += [(n, read.get(n, T.StringType())) for n in self.names if n != CORRUPT]
            columns.append((CORRUPT, T.StringType()))
            return self.spark.createDataFrame([], T.StructType([T.StructField(n, t) for n, t in columns]))
        copies = copies or {}
        frame = self._project(self._reader(self.spark.read).load([_literal(copies.get(f, f)) for f in files]))
        if not copies:
            return frame
        from pyspark.sql import functions as F

        pairs = [(spelling, uri) for uri, copy in copies.items() for spelling in _spellings_of(copy)]
        landing = F.create_map(*[F.lit(x) for pair in pairs for x in pair])
        return frame.withColumn("file", F.coalesce(F.element_at(landing, F.col("file")), F.col("file")))


def _spellings_of(where: str) -> list[str]:
    """How ``_metadata.file_path`` may spell the file at ``where`` (a local path or a URI): URL-encoded.

    >>> _spellings_of("/ck/a b.json"), _spellings_of("s3a://b/k/a.json")
    (['file:///ck/a%20b.json', 'file:/ck/a%20b.json'], ['s3a://b/k/a.json'])
    """
    parts = urlsplit(where)
    if not parts.scheme:
        return _uri_spellings("file://" + quote(where))
    return [f"{parts.scheme}://{parts.netloc}{quote(parts.path)}"]


def _latin1(name: str) -> str:
    """How a column name's UTF-8 bytes read as Latin-1 (the CSV reader's view of the header).

    >>> _latin1("key"), _latin1("clé")
    ('key', 'clÃ©')
    """
    return name.encode("utf-8", "surrogateescape").decode("latin-1")


#: Characters Hadoop's glob gives a meaning to (outside brackets); a backslash makes each literal.
_GLOB_CHARS = re.compile(r"([\\\[\]{}*?])")


def _literal(uri: str) -> str:
    r"""A path Spark's reader takes for the one file ``uri`` names (a source-log URI or a local path).

    The log spells a file as a URL-encoded URI; Spark's reader takes a Hadoop path, which it globs.

    >>> _literal("file:///in/qm%3F.json"), _literal("file:///in/b%5B1%5D.json"), _literal("/in/a{b}.json")
    ('file:///in/qm\\?.json', 'file:///in/b\\[1\\].json', '/in/a\\{b\\}.json')
    """
    parts = urlsplit(uri)
    if not parts.scheme:
        return _GLOB_CHARS.sub(r"\\\1", uri)
    path = _GLOB_CHARS.sub(r"\\\1", unquote(parts.path))
    return f"{parts.scheme}://{parts.netloc}{path}"


def listed_path(uri: str) -> str | None:
    """The local path of a file the source log names (URL-encoded), or None for a remote file.

    >>> listed_path("file:///in/qm%3F.json"), listed_path("file:/in/a%20b.json"), listed_path("s3a://b/k")
    ('/in/qm?.json', '/in/a b.json', None)
    """
    parts = urlsplit(uri)
    if parts.scheme in ("", "file"):
        return unquote(parts.path) if parts.scheme else uri
    return None


#: Quarantine reasons of a whole landing file (its ``line`` is null).
UNREADABLE_FILE_NAME = "unreadable_file_name"
FILE_MISSING = "file_missing"
SYMLINK = "symlink"
OUTSIDE_LANDING_ROOT = "outside_landing_root"


def linked_reason(where: str | Location, root: str | Location | None) -> str | None:
    """Why a landing file is not read as a link: ``symlink``, ``outside_landing_root``, or None.

    ``symlink`` for a local file that is a symbolic link, ``outside_landing_root`` for a local file whose
    resolved location is not below ``root`` (under a linked folder, say). Object stores have no links:
    their files are never set aside here; a local file is not checked against ``root`` when it is None.
    """
    where = Location.of(where)
    if not where.local:
        return None
    if os.path.islink(where.key):
        return SYMLINK
    if root is None or not Location.of(root).local:
        return None
    top = os.path.realpath(Location.of(root).key)
    resolved = os.path.realpath(where.key)
    return None if resolved.startswith(top.rstrip("/") + "/") else OUTSIDE_LANDING_ROOT


def listed_location(uri: str) -> Location:
    """The file a source-log URI (URL-encoded) names.

    >>> listed_location("file:///in/qm%3F.json"), listed_location("s3a://b/in/a%20b.json")
    (Location('/in/qm?.json'), Location('s3a://b/in/a b.json'))
    """
    path = listed_path(uri)
    if path is not None:
        return Location.of(path)
    parts = urlsplit(uri)
    return Location(parts.scheme.lower(), parts.netloc, unquote(parts.path).lstrip("/"))


def unreadable_reason(uri: str, root: str | None = None) -> str | None:
    """Why the listed file ``uri`` cannot be read (a :data:`QUARANTINE_REASONS` entry), or None.

    - ``unreadable_file_name``: a colon in the name; Hadoop's local file system cannot open it (its
      checksum file's name is not a valid URI), so each attempt of the batch would fail.
    - ``symlink``: a local file that is a symbolic link (Hadoop follows it, wherever it points: a link
      to a private key had its lines copied into ``quarantine.raw``); never read.
    - ``outside_landing_root``: a local file whose resolved location is not below ``root`` (the
      landing folder), say under a linked folder; never read.
    - ``file_missing``: a local file that is gone since the source listed it (deleted or moved).
    """
    path = listed_path(uri)
    name = (path if path is not None else unquote(urlsplit(uri).path)).rsplit("/", 1)[-1]
    if ":" in name:
        return UNREADABLE_FILE_NAME
    if path is not None and (linked := linked_reason(path, root)) is not None:
        return linked
    if path is not None and not storage.is_file(path):
        return FILE_MISSING
    return None


def screen_files(files: list[str] | None, root: str | None = None) -> tuple[list[str] | None, pa.Table]:
    """The batch's files that can be read (in order), and a row per file that cannot (``raw, reason, file``).

    ``root``: the landing folder (``--input``), below which every file read must resolve.

    Such a file is not read; the job quarantines it as a file (the ``quarantine`` row names it, ``line``
    null) and goes on, rather than failing the batch at every restart.
    """
    empty = pa.table({"raw": pa.array([], pa.string()), "reason": pa.array([], pa.string()),
                      "file": pa.array([], pa.string())})  # fmt: skip
    if files is None:
        return None, empty
    readable, raw, reasons, bad = [], [], [], []
    for uri in files:
        reason = unreadable_reason(uri, root)
        if reason is None:
            readable.append(uri)
            continue
        log.warning("landing file %s is quarantined as a file: %s", uri, reason)
        raw.append(listed_path(uri) or unquote(uri))
        reasons.append(reason)
        bad.append(uri)
    if not bad:
        return readable, empty
    return readable, pa.table({"raw": raw, "reason": reasons, "file": bad}, schema=empty.schema)


def file_quarantine_rows(unread: pa.Table, batch_id: int, ingest_ms: int) -> pa.Table:
    """``quarantine`` rows for the files :func:`screen_files` set aside (``line`` null: the whole file)."""
    n = unread.num_rows
    return pa.table(
        {
            "raw": unread.column("raw"),
            "reason": unread.column("reason"),
            "file": unread.column("file"),
            "line": pa.nulls(n, pa.int64()),
            "batch_id": np.full(n, batch_id, np.int64),
            "ingested_at_ms": np.full(n, ingest_ms, np.int64),
        },
        schema=QUARANTINE_SCHEMA,
    )


def reason_counts(quarantine: pa.Table) -> dict[str, int]:
    """Rows of a batch's ``quarantine`` rows by reason.

    >>> reason_counts(pa.table({"reason": ["file_missing", "bad_value", "bad_value"]}))
    {'bad_value': 2, 'file_missing': 1}
    """
    if not quarantine.num_rows:
        return {}
    counts = quarantine.column("reason").value_counts().to_pylist()
    return {c["values"]: int(c["counts"]) for c in sorted(counts, key=lambda c: c["values"])}
