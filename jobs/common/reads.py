"""Light reads of the pipeline's Delta tables, without Spark: delta-rs for the log, pyarrow for the files.

Airflow tasks, the batch jobs' planning reads, tests and the streaming job's summary read the tables
through here (:class:`TableReader`, :func:`read_delta`), and so does the streaming job's check of a
checkpoint against the tables it wrote (:func:`tables_written`, :func:`written_versions`); writes go
through Spark (:mod:`jobs.common.tables`).

The tables' root may be a local folder or a URI (``s3a://bucket/tables``: :mod:`watermark.storage`). delta-rs
reads the log (with the storage options of :mod:`jobs.common.object_store` on an object store); the data
files are read with pyarrow's file system for the location, not delta-rs's own file-system handler: with
the latter, a process that read a table aborts now and then at exit (``terminate called without an active
exception``, exit 134; a thread teardown race between delta-rs and pyarrow). A data file the log names
outside the table's folder (``..``, an absolute path or another URI) is refused, never read. A table with
deletion vectors or column mapping (which the pipeline does not turn on, an operator may) is read by
delta-rs's own engine instead (:func:`read_delta_scan`, logged), after the same check of its files.
A table written by an older version of the code reads null in the columns added since
(:func:`missing_columns`).
``tests/integration/spark/test_tables.py`` runs a reader of every table in a fresh process several times
and requires exit status 0 each time.

Every read filters at the files: each data file's guarantee is what the Delta log says of it
(:func:`file_guarantee`), and the date-partitioned tables (:data:`jobs.common.schemas.PARTITIONS`) are
pruned by day (:func:`day_range`).
"""

from __future__ import annotations

import functools
import logging
import operator
import os
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc

from jobs.common.schemas import DAY_MS, PARTITIONS, TABLES
from watermark import storage
from watermark.storage import Location, StorageError

log = logging.getLogger(__name__)


def table_path(root: str | os.PathLike[str] | Location, table: str) -> str:
    """Location of ``table`` under ``root`` (a path or URI, as Spark takes it); a plain folder name only."""
    if (
        not isinstance(table, str)
        or table in ("", ".", "..")
        or "/" in table
        or os.sep in table
        or (os.altsep is not None and os.altsep in table)
    ):
        msg = f"table must be a plain directory name, got {table!r}"
        raise ValueError(msg)
    return (Location.of(root) / table).spark


def day_of(ms: int) -> Any:
    """The UTC date holding the epoch-ms instant ``ms`` (a partition value of :data:`PARTITIONS`).

    >>> day_of(1795341600000), day_of(0)
    (datetime.date(2026, 11, 22), datetime.date(1970, 1, 1))
    """
    import datetime

    return datetime.date(1970, 1, 1) + datetime.timedelta(days=ms // DAY_MS)


def day_range(table: str, lo_ms: int | None, hi_ms: int | None) -> Any:
    """A pyarrow filter on ``table``'s date partition for instants in ``[lo_ms, hi_ms]`` (None: open).

    Tables that are not partitioned (or were created before the layout) get no filter (None): the
    caller's own predicate on the epoch-ms column still applies.
    """
    if table not in PARTITIONS:
        return None
    column = pc.field(PARTITIONS[table][0])
    parts = []
    if lo_ms is not None:
        parts.append(column >= pa.scalar(day_of(lo_ms), pa.date32()))
    if hi_ms is not None:
        parts.append(column <= pa.scalar(day_of(hi_ms), pa.date32()))
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else parts[0] & parts[1]


def read_delta(
    dt: Any,
    path: str,
    columns: list[str] | None = None,
    where: Any = None,
    days: tuple[int | None, int | None] | None = None,
) -> pa.Table:
    """Rows of the Delta table ``dt`` (at ``path``, a path or URI) read by pyarrow from the snapshot's files.

    delta-rs lists the files of the snapshot with their Delta statistics; pyarrow reads them through its
    file system for ``path`` (not delta-rs's handler, which can abort the process at exit: module docstring).
    Each file becomes a fragment whose guarantee is what the Delta log says of it (:func:`file_guarantee`:
    its partition values, and the min/max of its integer columns), so ``where`` skips a file the log rules
    out before the file is opened, then the Parquet files' own statistics skip row groups. delta-rs's own
    dataset is not used: for a column delta-spark keeps no min/max of (booleans) it guarantees
    ``column >= null``, which prunes every file for any filter on that column.

    ``days=(lo_ms, hi_ms)`` (epoch ms, None: open) adds the date-partition filter of :func:`day_range` when
    the table (named by ``path``'s last component) is partitioned that way; the caller's ``where`` on the
    epoch-ms column keeps the result exact.

    A table that needs more of its reader than this (deletion vectors, column mapping: any reader feature
    other than ``timestampNtz``, or a column mapping mode) is read by delta-rs's own engine instead
    (:func:`read_delta_scan`, logged once per table), which applies them; every data file its log names is
    still checked to lie inside the table first (:func:`data_file_name`).

    Raises
    ------
    watermark.storage.StorageError
        If the log names a data file outside the table's folder.
    NotImplementedError
        If the table needs a reader feature delta-rs does not read either (the message names them).

    """
    import pyarrow.dataset as pads
    import pyarrow.fs as pafs

    features = set(dt.protocol().reader_features or [])
    mapping = dt.metadata().configuration.get("delta.columnMapping.mode", "none")
    if features - PYARROW_READER_FEATURES or mapping != "none":
        return read_delta_scan(dt, path, columns, where, days, features, mapping)
    where_ = Location.of(path)
    table = where_.name
    fs, root = where_.filesystem()
    schema = dt.to_pyarrow_dataset(filesystem=pafs.SubTreeFileSystem(root, fs)).schema
    partition_columns = list(dt.metadata().partition_columns)
    parquet = pads.ParquetFileFormat()
    actions = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
    fragments = [
        parquet.make_fragment(
            f"{root}/{data_file_name(where_, action['path'])}",
            filesystem=fs,
            partition_expression=file_guarantee(action, schema, partition_columns),
            file_size=action.get("size_bytes"),
        )
        for action in actions
    ]
    dataset = pads.FileSystemDataset(fragments, schema, parquet, fs)
    if days is not None and table in PARTITIONS and PARTITIONS[table][0] in partition_columns:
        pruning = day_range(table, *days)
        if pruning is not None:
            where = pruning if where is None else pruning & where
    return dataset.to_table(columns=columns, filter=where)


#: Reader features the pyarrow path of :func:`read_delta` applies itself (others: :func:`read_delta_scan`).
PYARROW_READER_FEATURES = frozenset({"timestampNtz"})
_scan_logged: set[tuple[str, str]] = set()


def read_delta_scan(
    dt: Any,
    path: str,
    columns: list[str] | None,
    where: Any,
    days: tuple[int | None, int | None] | None,
    features: set[str],
    mapping: str,
) -> pa.Table:
    """Rows of ``dt`` read by delta-rs's engine (``DeltaTable.scan``: deletion vectors, column mapping).

    ``where`` and the day pruning are then applied by pyarrow, and ``columns`` selected. The data files
    the log names are checked first (:func:`data_file_name`). Every column of every file of the snapshot
    is read (no pruning by the log's statistics): the fallback for tables the pipeline itself does not
    write that way (an operator who turned deletion vectors or column mapping on). delta-rs's engine
    returns strings as ``string_view``; they come back as ``string``, as from the pyarrow path.
    """
    from deltalake.exceptions import DeltaProtocolError

    where_ = Location.of(path)
    for logged in pa.table(dt.get_add_actions(flatten=False)).column("path").to_pylist():
        data_file_name(where_, logged)
    why = f"reader features {sorted(features)}, column mapping mode {mapping!r}"
    if (path, why) not in _scan_logged:
        _scan_logged.add((path, why))
        log.info("%s: read through delta-rs's engine (%s), not the pyarrow file reader", path, why)
    try:
        data = pa.table(dt.scan())
    except DeltaProtocolError as err:
        msg = f"{path}: the table needs reader features delta-rs does not read ({why}): {err}"
        raise NotImplementedError(msg) from err
    data = data.cast(pa.schema([_without_views(field) for field in data.schema]))
    table = where_.name
    partition_columns = list(dt.metadata().partition_columns)
    if days is not None and table in PARTITIONS and PARTITIONS[table][0] in partition_columns:
        pruning = day_range(table, *days)
        if pruning is not None:
            where = pruning if where is None else pruning & where
    if where is not None:
        data = data.filter(where)
    return data.select(columns) if columns is not None else data


def _without_views(field: pa.Field) -> pa.Field:
    """``field`` with view types as plain ones (``string_view`` -> ``string``) and no Delta metadata."""
    kind = field.type
    if kind == pa.string_view():
        kind = pa.string()
    elif kind == pa.binary_view():
        kind = pa.binary()
    return pa.field(field.name, kind, field.nullable)


def data_file_name(table: Location, logged: str) -> str:
    """The relative name of a data file the Delta log names; refuses one outside the table's folder.

    >>> data_file_name(Location.of("/t/aggregates"), "window_date=2026-11-22/part-0%3A1.parquet")
    'window_date=2026-11-22/part-0:1.parquet'
    >>> data_file_name(Location.of("/t/aggregates"), "..%2F..%2Fetc%2Fsecret.parquet")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    watermark.storage.StorageError: /t/aggregates: the Delta log names a data file outside the table ...
    """
    name = unquote(logged)
    parts = name.split("/")
    if not name or name.startswith("/") or ":" in parts[0] or any(p in ("", ".", "..") for p in parts):
        msg = f"{table}: the Delta log names a data file outside the table ({logged}); refusing to read it"
        raise StorageError(msg)
    return name


def file_guarantee(action: Mapping[str, Any], schema: pa.Schema, partition_columns: list[str]) -> Any:
    """What the Delta log guarantees of every row of one data file (a flattened add action of delta-rs).

    - each partition column equals the file's partition value (or is null);
    - each integer column lies within the file's ``min``/``max`` statistics, or is null where the file
      counts nulls in it (or does not say); it is null when every value is; a column whose statistics are
      missing is unconstrained.

    Only integer columns are used: delta-spark truncates long strings' max and keeps no min/max for
    booleans, and a float's statistics say nothing of NaN.

    >>> import datetime
    >>> schema = pa.schema([("day", pa.date32()), ("batch_id", pa.int64()), ("note", pa.string())])
    >>> action = {"partition.day": datetime.date(2026, 11, 22), "min.batch_id": 3, "max.batch_id": 9,
    ...           "null_count.batch_id": 0, "min.note": "a", "max.note": "z"}
    >>> print(file_guarantee(action, schema, ["day"]))
    ((day == 2026-11-22) and ((batch_id >= 3) and (batch_id <= 9)))
    """
    conditions = []
    for name in partition_columns:
        value = action.get(f"partition.{name}")
        field = pc.field(name)
        kind = schema.field(name).type
        conditions.append(field.is_null() if value is None else field == pa.scalar(value).cast(kind))
    for column in schema:
        if column.name in partition_columns or not pa.types.is_integer(column.type):
            continue
        low, high = action.get(f"min.{column.name}"), action.get(f"max.{column.name}")
        nulls, field = action.get(f"null_count.{column.name}"), pc.field(column.name)
        if nulls is not None and nulls == action.get("num_records"):
            conditions.append(field.is_null())
        elif low is not None and high is not None:
            within = (field >= pa.scalar(low, column.type)) & (field <= pa.scalar(high, column.type))
            conditions.append(within if nulls == 0 else within | field.is_null())
    return functools.reduce(operator.and_, conditions) if conditions else pc.scalar(True)


def missing_columns(dt: Any, table: str, columns: list[str] | None) -> list[str]:
    """The columns of ``columns`` that the code's schema of ``table`` has and the Delta table not yet.

    A table written by an older version of the code lacks the columns added since, until the writer
    evolves it (:func:`jobs.common.tables.evolve_table`); readers see null in them meanwhile, as they see
    null in the rows written before the evolution.
    """
    if columns is None or table not in TABLES:
        return []
    present = {field.name for field in dt.schema().fields}
    return [name for name in columns if name not in present and name in TABLES[table].names]


def delta_location(path: str | Location) -> tuple[str, dict[str, str] | None]:
    """What delta-rs opens for a table at ``path``: its URI and storage options (None on a local disk)."""
    where = Location.of(path)
    if where.local:
        return where.key, None
    from jobs.common.object_store import deltalake_storage_options

    scheme = "s3" if where.scheme in ("s3a", "s3n") else where.scheme
    return f"{scheme}://{where.authority}/{where.key}", deltalake_storage_options(os.environ)


def open_delta(path: str | Location) -> Any:
    """The Delta table at ``path`` (a path or URI) as delta-rs's ``DeltaTable``; None when there is none."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    uri, options = delta_location(path)
    try:
        return DeltaTable(uri, storage_options=options)
    except TableNotFoundError:
        return None


class TableReader:
    """The Delta tables under one root, read without Spark (delta-rs and pyarrow).

    Parameters
    ----------
    root : str or os.PathLike
        Directory holding one Delta table per sub-directory (``root/<table>``); it need not exist yet.
    app_id : str
        Delta application id (``txnAppId``) whose committed batches :meth:`committed_version` reports.

    """

    def __init__(self, root: str | os.PathLike[str], app_id: str) -> None:
        if not isinstance(app_id, str) or not app_id:
            msg = f"app_id must be a non-empty string, got {app_id!r}"
            raise ValueError(msg)
        self.root = Location.of(root).spark
        self.app_id = app_id

    def __repr__(self) -> str:
        return f"{type(self).__name__}(root={self.root!r}, app_id={self.app_id!r})"

    def path(self, table: str) -> str:
        """Directory of ``table``: ``root/<table>``."""
        return table_path(self.root, table)

    def _open(self, table: str) -> Any:
        return open_delta(self.path(table))

    def exists(self, table: str) -> bool:
        """Whether ``table`` is a Delta table (it has at least one commit)."""
        from deltalake import DeltaTable

        uri, options = delta_location(self.path(table))
        return bool(DeltaTable.is_deltatable(uri, storage_options=options))

    def committed_version(self, table: str) -> int | None:
        """The newest batch id this writer's application id committed to ``table`` (None: none)."""
        dt = self._open(table)
        if dt is None:
            return None
        version = dt.transaction_version(self.app_id)
        return None if version is None else int(version)

    def read(
        self,
        table: str,
        columns: list[str] | None = None,
        filters: Any = None,
        days: tuple[int | None, int | None] | None = None,
    ) -> pa.Table:
        """Rows of ``table`` (optionally some columns, filtered by a pyarrow expression), without Spark.

        A table that does not exist yet (no batch wrote a row to it) reads as no rows with its schema when
        it is one of :data:`TABLES`. The pipeline's tables read as their :data:`TABLES` schema (the
        generated date partition column only when named in ``columns``). ``days=(lo_ms, hi_ms)`` prunes
        the date partitions to instants in that range (:func:`read_delta`).

        Raises
        ------
        FileNotFoundError
            If ``table`` is not a Delta table and not one of the pipeline's tables.

        """
        path = self.path(table)
        dt = self._open(table)
        if dt is None:
            if table in TABLES:
                empty = TABLES[table].empty_table()
                return empty.select(columns) if columns else empty
            msg = f"Delta table {table!r} does not exist (no Delta log under {path})"
            raise FileNotFoundError(msg)
        if columns is None and table in TABLES:
            columns = list(TABLES[table].names)
        absent = missing_columns(dt, table, columns)
        if not absent:
            return read_delta(dt, path, columns, filters, days)
        assert columns is not None
        log.info(
            "%s: no column(s) %s yet (written by an older version of the code): read as nulls",
            path,
            ", ".join(absent),
        )
        data = read_delta(dt, path, [c for c in columns if c not in absent], filters, days)
        nulls = {name: pa.nulls(data.num_rows, TABLES[table].field(name).type) for name in absent}
        return pa.table({name: nulls[name] if name in nulls else data.column(name) for name in columns})

    def version(self, table: str) -> int | None:
        """The table's newest Delta version, or None when it does not exist."""
        dt = self._open(table)
        return None if dt is None else int(dt.version())


def tables_written(output: str | Location) -> list[str]:
    """The folders under ``output`` holding a Delta log with at least one entry, by name."""
    root = Location.of(output)
    return [
        entry.name
        for entry in storage.listdir(root)
        if entry.is_dir and storage.listdir(entry.location / "_delta_log")
    ]


def written_versions(output: str | Location, app_ids: list[str]) -> list[tuple[str, str, int]]:
    """The ``txnVersion`` each of the pipeline's tables under ``output`` holds for each of ``app_ids``.

    ``(table location, application id, version)`` for each Delta ``txn`` action found, read with
    ``deltalake`` (without Spark).
    """
    found = []
    for table in TABLES:
        path = table_path(output, table)
        dt = open_delta(path)
        if dt is None:
            continue
        for app_id in app_ids:
            version = dt.transaction_version(app_id)
            if version is not None:
                found.append((path, app_id, int(version)))
    return found


#: The newest commits of a table :func:`job_app_ids` reads (a stream's appends carry its id in each).
APP_ID_COMMITS = 50
_APP_ID = re.compile(r'"txn"\s*:\s*\{[^}]*"appId"\s*:\s*"([^"]+)"')


def job_app_ids(output: str | Location) -> list[str]:
    """The job's application ids (``txnAppId`` ``jobs.stream...``) in the newest commits of the tables.

    Under ``output``; a flush's id (``.flush``) counts as its checkpoint's. Read from the JSON logs.
    """
    found: set[str] = set()
    for table in TABLES:
        log_dir = Location.of(table_path(output, table)) / "_delta_log"
        if not storage.exists(log_dir):
            continue
        commits = sorted(e.name for e in storage.listdir(log_dir) if e.name.endswith(".json"))
        for name in commits[-APP_ID_COMMITS:]:
            for app_id in _APP_ID.findall(storage.read_text(log_dir / name)):
                if app_id.startswith("jobs.stream"):
                    found.add(app_id.removesuffix(".flush"))
    return sorted(found)
