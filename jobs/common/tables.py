"""Writes of the pipeline's Delta tables through delta-spark: idempotent appends, and creating a table.

Five tables live under one root directory, one sub-directory each (their schemas:
:data:`jobs.common.schemas.TABLES`):

================= ==============================================================================
``aggregates``    one row per fired (key, window): count, sum, min, max, trigger watermark, latencies
``late_events``   every late record, with the watermark it missed; the backfill reconciles them
``quarantine``    every invalid record, with its reason and where it came from
``watermark_log`` one row per batch and partition: the watermark and the generator's state
``arrivals``      every valid record's partition and times, in arrival order (the tuner's history)
================= ==============================================================================

**Writes** go through Spark: :meth:`DeltaTables.append` turns a batch's rows into a DataFrame and appends
them with ``DataFrame.write.format("delta")``, so the executors write the files and delta-spark commits.
Each append carries Delta's own idempotency options ``txnAppId`` (the writer's application id) and
``txnVersion`` (the micro-batch id): Delta records them in the commit and skips, atomically, an append
whose version is not above the one it recorded for that application, so a batch replayed after a crash is
never written twice. A batch with no rows for a table is not written to it: a replay recomputes the same
(empty) rows, so there is nothing to protect, and a micro-batch saves a Delta commit per empty table.

**Creation and evolution.** A table's first use in a run looks it up (``DeltaTables._look_up``). An
absent table is created by its first append, in the commit that holds its first rows, with its schema,
generated partition column and properties (:func:`creating_write`; the same metadata and protocol as
:func:`create_table`, which older tables were made with; the maintenance's layout migration checks it makes
the same). An
existing table is evolved to the code's schema: the columns a newer version of the code added are added to
the table (one ``ALTER TABLE ... ADD COLUMNS``, logged), and rows written before read null in them. A
column the table has and the code no longer has, or one whose type changed, is a :class:`TableSchemaError`
naming the table, the column and the migration (``docs/deployment.md``, Upgrading).

**Few files.** An Arrow batch goes to Spark in at most one partition per :data:`ROWS_PER_PARTITION` rows
(Spark's own default is one per 10,000), so a micro-batch's append writes few files.

**Layout.** Every table is partitioned by a UTC date that Delta generates from one of its times
(:data:`jobs.common.schemas.PARTITIONS`: ``window_date`` of ``aggregates``, ``event_date`` of
``late_events``, ``ingested_date`` of ``quarantine`` and ``watermark_log``, ``arrival_date`` of ``arrivals``;
generated columns, so writers never supply them and the backfill's MERGE inserts without them), so the
maintenance compacts only the dates written since its last run and drops old arrivals by date. Readers
prune by it with :func:`jobs.common.reads.day_range`. ``aggregates`` has Delta's Change Data Feed on
(:data:`jobs.common.schemas.PROPERTIES`), so a consumer sees the backfill's revisions as update pre- and
post-images. Tables created before this layout keep theirs (readers work on both).

**Reads** without Spark are :mod:`jobs.common.reads`; :class:`DeltaTables` has them too (it is a
:class:`jobs.common.reads.TableReader`).
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa

from jobs.common.reads import TableReader
from jobs.common.schemas import DAY_MS, PARTITIONS, PROPERTIES, TABLES
from jobs.common.session import arrow_frame

log = logging.getLogger(__name__)

#: Rows per Spark partition of an Arrow batch handed to Spark for an append (files per append: rows / this).
ROWS_PER_PARTITION = 100_000


def conform(data: pa.Table, schema: pa.Schema) -> pa.Table:
    """``data`` with exactly the columns of ``schema``, in its order and with its types.

    Raises
    ------
    ValueError
        If a column is missing, unexpected or duplicated (the message names them), or a value cannot be cast.
    TypeError
        If ``data`` or ``schema`` is not a pyarrow Table or Schema.

    """
    if not isinstance(data, pa.Table):
        msg = f"data must be a pyarrow.Table, got {type(data).__name__}"
        raise TypeError(msg)
    if not isinstance(schema, pa.Schema):
        msg = f"schema must be a pyarrow.Schema, got {type(schema).__name__}"
        raise TypeError(msg)
    for names, what in ((schema.names, "schema"), (data.column_names, "data")):
        duplicated = sorted({name for name in names if names.count(name) > 1})
        if duplicated:
            msg = f"duplicate column(s) in {what}: {', '.join(map(repr, duplicated))}"
            raise ValueError(msg)
    missing = [name for name in schema.names if name not in data.column_names]
    extra = [name for name in data.column_names if name not in schema.names]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing column(s) {', '.join(map(repr, missing))}")
        if extra:
            parts.append(f"unexpected column(s) {', '.join(map(repr, extra))}")
        msg = f"data does not match the schema: {'; '.join(parts)}"
        raise ValueError(msg)
    return data.select(schema.names).cast(schema)


def _check_batch_id(batch_id: object) -> int:
    if isinstance(batch_id, bool) or not isinstance(batch_id, int):
        msg = f"batch_id must be an int, got {type(batch_id).__name__}"
        raise TypeError(msg)
    if batch_id < 0:
        msg = f"batch_id must be >= 0, got {batch_id}"
        raise ValueError(msg)
    return int(batch_id)


#: A file of a Delta log that makes a table exist: a commit, a checkpoint, or the checkpoint pointer.
_COMMITTED_LOG_FILE = re.compile(r"^(\d{20}\.json|\d{20}\.checkpoint(\..*)?\.parquet|_last_checkpoint)$")


def clear_uncommitted_log(spark: Any, path: str) -> bool:
    """Remove what a creation killed before its first commit left in ``_delta_log``; whether it found one.

    delta-spark writes a table's first commit as a temporary file that it then renames. A process killed
    in between (the job under SIGKILL) leaves a ``_delta_log`` folder with no commit in it: no table, by
    Delta's protocol, yet ``DeltaTable.createIfNotExists`` then fails for ever with
    ``DELTA_TABLE_NOT_FOUND``. Such a folder holds nothing committed, so the files listed in it (and its
    empty sub-folders, such as ``_staged_commits``) are deleted one by one, each without recursion, through
    Hadoop's file system (local or remote), and the folder itself only if it is then empty; the creation
    then runs again. Nothing else is deleted: not a file written after the listing (a commit landing
    meanwhile survives), not a sub-folder that holds anything. A folder with any commit, checkpoint or
    ``_last_checkpoint`` is left alone. (Only the streaming job creates its tables; two processes creating
    the same table at the same instant are not a case this handles.)

    Hadoop's ``FileSystem`` is reached through PySpark's gateway (``spark._jvm``): PySpark has no Python
    API for it, and it is Hadoop's public API (the session's own settings for ``s3a://`` and the rest),
    not one of Delta's internal classes.
    """
    jvm = spark._jvm
    log_dir = jvm.org.apache.hadoop.fs.Path(path, "_delta_log")
    fs = log_dir.getFileSystem(spark._jsc.hadoopConfiguration())
    if not fs.exists(log_dir):
        return False
    found = list(fs.listStatus(log_dir))
    names = [status.getPath().getName() for status in found]
    if any(_COMMITTED_LOG_FILE.match(name) for name in names):
        return False
    log.warning(
        "%s: a creation of the table was interrupted before its first commit (its _delta_log holds %s): "
        "deleting those files and creating the table again",
        path,
        ", ".join(sorted(names)) or "nothing",
    )
    kept = []
    for status in found:
        entry = status.getPath()
        if status.isDirectory() and len(fs.listStatus(entry)) > 0:
            kept.append(entry.getName())  # not listed, so not known to be uncommitted: left alone
            continue
        _delete_one(fs, entry)
    if kept:
        log.warning("%s: left %s in _delta_log (not empty)", path, ", ".join(sorted(kept)))
    if len(fs.listStatus(log_dir)) == 0:
        _delete_one(fs, log_dir)
    return True


def _delete_one(fs: Any, entry: Any) -> None:
    """Delete a file or an empty folder, never recursively; a folder filled meanwhile is left alone."""
    try:
        fs.delete(entry, False)
    except Exception as exc:  # noqa: BLE001 - Hadoop refuses a folder that is no longer empty: keep it
        log.warning("%s: not deleted (%s)", entry.toString(), str(exc).splitlines()[0] if str(exc) else exc)


def create_table(spark: Any, path: str, table: str, schema: pa.Schema | None = None) -> None:
    """Create ``table`` at ``path`` (if absent) with its schema, generated partition column and properties.

    ``schema`` defaults to the table's in :data:`TABLES` (another one is for tests that build a table as an
    older version of the code did). A ``_delta_log`` left by a creation killed before its first commit is
    removed first (:func:`clear_uncommitted_log`).
    """
    from delta.tables import DeltaTable

    clear_uncommitted_log(spark, path)
    table_builder(DeltaTable.createIfNotExists(spark).location(path), table, schema).execute()


def generation_expression(table: str) -> str:
    """The SQL expression Delta generates ``table``'s date partition column from (:data:`PARTITIONS`).

    >>> generation_expression("aggregates")
    "DATE_ADD(DATE'1970-01-01', CAST(window_start_ms DIV 86400000 AS INT))"
    """
    source = PARTITIONS[table][1]
    return f"DATE_ADD(DATE'1970-01-01', CAST({source} DIV {DAY_MS} AS INT))"


def creating_write(frame: Any, table: str) -> Any:
    """The ``DataFrameWriter`` of an append that creates ``table`` with its rows, in one Delta commit.

    The frame's columns are those of :data:`TABLES` in their order, plus the date partition column computed
    by its generation expression and declared generated (the ``delta.generationExpression`` field metadata
    Delta keeps generated columns by), partitioned by it, with the table's :data:`PROPERTIES`: Delta then
    writes the metadata and protocol :func:`create_table` writes, in the commit that holds the first rows.
    On an existing table the same write is a plain append (the generated values are checked, the options
    that only a creation reads are ignored).
    """
    from pyspark.sql import functions as F

    columns = [F.col(name) for name in TABLES[table].names]
    writer_options = dict(PROPERTIES.get(table, {}))
    if table not in PARTITIONS:
        return _with_options(frame.select(*columns).write.format("delta"), writer_options)
    column, expression = PARTITIONS[table][0], generation_expression(table)
    generated = F.expr(expression).alias(column, metadata={"delta.generationExpression": expression})
    writer = frame.select(*columns, generated).write.format("delta").partitionBy(column)
    return _with_options(writer, writer_options)


def _with_options(writer: Any, options: Mapping[str, str]) -> Any:
    for key, value in options.items():
        writer = writer.option(key, value)
    return writer


def table_builder(builder: Any, table: str, schema: pa.Schema | None = None) -> Any:
    """A delta-spark ``DeltaTableBuilder`` with ``table``'s columns, generated partition column, properties.

    Used by :func:`create_table` (the layout migration, :mod:`jobs.batch.layout_migration`, replaces a table
    with its rows in one commit instead, and a test checks it makes the same schema and partitioning).
    """
    from pyspark.sql.pandas.types import from_arrow_schema
    from pyspark.sql.types import DateType

    for spark_field in from_arrow_schema(schema if schema is not None else TABLES[table]).fields:
        builder = builder.addColumn(spark_field.name, spark_field.dataType, nullable=True)
    if table in PARTITIONS:
        column, generated = PARTITIONS[table][0], generation_expression(table)
        builder = builder.addColumn(column, DateType(), generatedAlwaysAs=generated).partitionedBy(column)
    for key, value in PROPERTIES.get(table, {}).items():
        builder = builder.property(key, value)
    return builder


#: Where the upgrade of the tables is described (named by every schema error).
UPGRADING_DOC = "docs/deployment.md, section Upgrading"


class TableSchemaError(ValueError):
    """An existing table's schema is not one the code's can evolve from (a column removed or retyped)."""


def columns_to_add(table: str, existing: Any, expected: Any, generated: str | None = None) -> list[Any]:
    """The fields of ``expected`` that ``existing`` lacks (Spark ``StructType`` s): what evolution adds.

    A table may only gain nullable columns: a column of the table the code no longer has (other than the
    generated partition column ``generated``), or one whose type differs, raises :class:`TableSchemaError`
    naming the table, the column and :data:`UPGRADING_DOC`.

    >>> from pyspark.sql.types import LongType, StringType, StructField, StructType
    >>> old = StructType([StructField("key", StringType())])
    >>> new = StructType([StructField("key", StringType()), StructField("n", LongType())])
    >>> [f.name for f in columns_to_add("t", old, new)], columns_to_add("t", new, new)
    (['n'], [])
    """
    have = {field.name: field for field in existing.fields}
    want = {field.name: field for field in expected.fields}
    problems = [
        f"column {name!r} ({field.dataType.simpleString()}) is not in the code's schema (removed or renamed)"
        for name, field in have.items()
        if name not in want and name != generated
    ]
    problems += [
        f"column {name!r} is {have[name].dataType.simpleString()} in the table but "
        f"{field.dataType.simpleString()} in the code's schema"
        for name, field in want.items()
        if name in have and have[name].dataType != field.dataType
    ]
    if problems:
        msg = (
            f"table {table!r}: {'; '.join(problems)}. Only added nullable columns are evolved automatically; "
            f"migrate the table first ({UPGRADING_DOC})"
        )
        raise TableSchemaError(msg)
    return [field for name, field in want.items() if name not in have]


def _sql_table(path: str) -> str:
    """``delta.`path``` for Spark SQL (a backtick in the path doubled)."""
    return "delta.`" + path.replace("`", "``") + "`"


def evolve_table(spark: Any, path: str, table: str, schema: pa.Schema | None = None) -> list[str]:
    """Add to the existing table at ``path`` the columns of its schema (default :data:`TABLES`) it lacks.

    One ``ALTER TABLE ... ADD COLUMNS`` (one Delta commit, a metadata change) adds them all as nullable
    columns at the end; rows written before read null in them. Nothing is committed when the table has
    them all. Returns the names added (logged).

    Raises
    ------
    TableSchemaError
        If the table has a column the schema lacks, or one of another type (:func:`columns_to_add`).

    """
    from pyspark.sql.pandas.types import from_arrow_schema

    existing = spark.read.format("delta").load(path).schema
    expected = from_arrow_schema(schema if schema is not None else TABLES[table])
    generated = PARTITIONS[table][0] if table in PARTITIONS else None
    added = columns_to_add(table, existing, expected, generated)
    if not added:
        return []
    columns = ", ".join(f"`{field.name}` {field.dataType.simpleString()}" for field in added)
    spark.sql(f"ALTER TABLE {_sql_table(path)} ADD COLUMNS ({columns})")
    names = [field.name for field in added]
    log.warning(
        "%s: added column(s) %s to table %r (the code's schema is newer than the table's; rows written "
        "before read null in them)",
        path,
        ", ".join(names),
        table,
    )
    return names


class DeltaTables(TableReader):
    """The Delta tables under one root: idempotent per-batch appends through Spark, light reads without.

    Parameters
    ----------
    root : str or os.PathLike
        Directory holding one Delta table per sub-directory (``root/<table>``); it need not exist yet.
    app_id : str
        Delta application id (``txnAppId``) of this writer; batch ids are its ``txnVersion``s.
    spark : SparkSession, optional
        Needed to write; readers leave it out (or use :class:`jobs.common.reads.TableReader`).

    """

    def __init__(self, root: str | os.PathLike[str], app_id: str, spark: Any = None) -> None:
        super().__init__(root, app_id)
        self.spark = spark
        self._existing: set[str] = set()  # tables found (and evolved) or created by this writer in this run
        self._absent: set[str] = set()  # tables found absent: their first append creates them
        self._creating = threading.Lock()  # an append and prepare_state may both look a table up
        self._recorded: dict[str, int] = {}  # table -> a batch id the table records for app_id

    def append(
        self,
        table: str,
        data: Any,
        batch_id: int,
        *,
        schema: pa.Schema | None = None,
        app_id: str | None = None,
    ) -> bool:
        """Append ``data`` to ``table`` as batch ``batch_id`` of this writer, exactly once.

        Parameters
        ----------
        table : str
            Table name.
        data : pyarrow.Table or pyspark.sql.DataFrame
            The batch's rows. A pyarrow table is conformed to ``schema`` (default: the table's schema in
            :data:`TABLES`) and handed to Spark; a DataFrame is written as it is.
        batch_id : int
            Non-negative micro-batch id: Delta's ``txnVersion`` for this writer's ``txnAppId``.
        schema : pyarrow.Schema, optional
            Schema a pyarrow ``data`` is conformed to (default: the table's in :data:`TABLES`).
        app_id : str, optional
            The append's ``txnAppId`` in place of this writer's (the streaming job's flush at the end writes
            under its own, :func:`jobs.stream.checkpoint.state.flush_app_id`).

        Returns
        -------
        bool
            False when there was nothing to write (no rows), else True (Delta itself skips a version it
            already recorded for this application).

        """
        batch_id = _check_batch_id(batch_id)
        if self.spark is None:
            msg = "DeltaTables.append needs a SparkSession (DeltaTables(root, app_id, spark))"
            raise ValueError(msg)
        if isinstance(data, pa.Table):
            data = conform(data, schema if schema is not None else TABLES[table])
            if not data.num_rows:
                return False
            frame = arrow_frame(self.spark, data)
            frame = frame.coalesce(-(-data.num_rows // ROWS_PER_PARTITION))  # Spark: 1 per 10,000 rows
        else:
            frame = data
        exists = self._look_up(table)
        writer = frame.write.format("delta") if exists else creating_write(frame, table)
        started = time.perf_counter()
        try:
            (
                writer.mode("append")
                .option("txnAppId", self.app_id if app_id is None else app_id)
                .option("txnVersion", str(batch_id))
                .save(self.path(table))
            )
        except BaseException:
            with self._creating:
                self._absent.discard(table)  # looked up again by the next append
            raise
        if not exists:
            with self._creating:
                self._absent.discard(table)
                self._existing.add(table)
            log.info("created %s at %s with its first rows (batch %d)", table, self.path(table), batch_id)
        if app_id is None or app_id == self.app_id:  # another application's batch ids are not this writer's
            self._recorded[table] = max(batch_id, self._recorded.get(table, batch_id))
        log.debug("appended %s batch %d in %.2f s", table, batch_id, time.perf_counter() - started)
        return True

    def append_all(
        self, batch: Mapping[str, Any], batch_id: int, pool: ThreadPoolExecutor | None = None
    ) -> None:
        """Append one micro-batch's rows to several tables (side by side when ``pool`` is given)."""
        if pool is None:
            for table, data in batch.items():
                self.append(table, data, batch_id)
            return
        futures = [pool.submit(self.append, table, data, batch_id) for table, data in batch.items()]
        for future in futures:
            future.result()

    def _look_up(self, table: str) -> bool:
        """Whether ``table`` exists: looked up, and evolved to its schema, once per run.

        The first use of a table in a run (an append, :meth:`prepare_state`) clears a ``_delta_log`` left
        by a creation killed before its first commit (:func:`clear_uncommitted_log`); an existing table
        then gains the columns the code's schema added since (logged; a removed or retyped column raises
        :class:`TableSchemaError`). An absent one is created by its first append, in the commit that holds
        its first rows (:func:`creating_write`): a table created empty first would cost that append a
        reconstruction of the new table's state (delta-spark checks ``txnVersion`` against it), three
        Spark jobs per table. A table that is not one of :data:`TABLES` (a DataFrame appended as it is) is
        taken as existing: its first append creates it with the DataFrame's schema.
        """
        if table not in TABLES:
            return True
        from delta.tables import DeltaTable

        with self._creating:
            if table in self._existing:
                return True
            if table in self._absent:
                return False
            path = self.path(table)
            clear_uncommitted_log(self.spark, path)
            if DeltaTable.isDeltaTable(self.spark, path):
                evolve_table(self.spark, path, table)
                self._existing.add(table)
                return True
            self._absent.add(table)
            return False

    def prepare_state(self, table: str) -> bool:
        """Have delta-spark compute ``table``'s newest state now, ahead of the next idempotent append.

        An append with ``txnVersion`` asks Delta for the application ids the table recorded, which
        delta-spark 4.4 answers from a full reconstruction of the snapshot's state (three Spark jobs, not
        the version's checksum file). Computed here, from a thread of the caller's while the driver does
        other work, the append finds it done. The table is looked up and evolved here first (:meth:`_look_up`;
        its errors are raised); an absent one is left to its first append, which creates it.

        The state is computed through Delta's public write options only: an empty append with
        ``txnAppId`` = this writer's and ``txnVersion`` = a batch id the table already recorded for it.
        Delta checks the recorded version (computing the state), finds the batch written and skips the
        write: nothing is committed. The version used is the newest this writer appended in this run, or
        else the one the table's log records for it (:meth:`committed_version`, delta-rs); a table that
        records none for this writer yet is not prepared (its first append computes the state itself).

        Returns whether the state was computed (never for a table not in :data:`TABLES`). A failure of
        that empty append is logged as a warning (the next append then computes the state itself, as
        without this step) and returns False.
        """
        if self.spark is None or table not in TABLES or not self._look_up(table):
            return False
        recorded = self._recorded.get(table)
        if recorded is None:
            recorded = self.committed_version(table)
        if recorded is None:
            log.debug("%s: no batch of %s recorded yet, nothing to prepare", table, self.app_id)
            return False
        from pyspark.sql.pandas.types import from_arrow_schema

        empty = self.spark.createDataFrame([], from_arrow_schema(TABLES[table]))  # the table's own columns
        try:
            (
                empty.write.format("delta")
                .mode("append")
                .option("txnAppId", self.app_id)
                .option("txnVersion", str(recorded))
                .save(self.path(table))
            )
        except Exception as exc:  # noqa: BLE001 - logged; the next append computes the state itself
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            log.warning("%s: Delta state not prepared ahead (the next append computes it): %s", table, first)
            return False
        return True
