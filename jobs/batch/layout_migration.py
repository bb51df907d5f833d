"""``--migrate-layout``: rewrite in place, with its date partition column, each table created before it.

``arrivals``, ``quarantine`` and ``watermark_log`` were unpartitioned in earlier versions
(:data:`jobs.common.schemas.PARTITIONS`); :mod:`jobs.batch.maintenance` keeps working on them, with a
warning naming this migration. Run it with the streaming job stopped.

**Safe to interrupt at any point.** Each table is rewritten in ONE Delta commit: a ``REPLACE TABLE ... AS
SELECT`` (delta-spark's ``DataFrameWriterV2.replace``) of the rows of the table's version read
(``versionAsOf``, pinned), with the generated date column added (declared generated, as
:func:`jobs.common.tables.creating_write` declares it), partitioned by it. The commit changes the
partitioning and replaces the files together; Delta writes its log entry atomically, so a kill (SIGKILL
included) before it leaves the table as it was (the files already written are orphans VACUUM removes) and a
kill after it leaves the table migrated, so a rerun migrates what is left, the same way. Nothing is recorded
outside the Delta log. (Earlier versions committed a ``REPLACE`` of the empty table, then an ``INSERT`` of
the rows in a second commit: killed between the two, the table was left empty and partitioned. A rerun finds
that state, the newest commit a ``REPLACE TABLE`` of the previous layout, and rewrites the rows of the
version before it, while time travel still holds them, i.e. before VACUUM removes their files.)

The table keeps its location, its history, its properties (given again to the replacement, with
:data:`jobs.common.schemas.PROPERTIES`) and the application ids the streaming job recorded (``txnAppId``:
the table's state, not its files), so the stream's idempotency holds across the migration. A commit made by
another writer between the read and the rewrite (the streaming job not stopped) would be replaced without
its rows: the rewrite's ``readVersion`` (in its commit info) then differs from the version read and the
table is rewritten again from that version, which holds them.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from typing import Any

from jobs.common.reads import open_delta, table_path
from jobs.common.schemas import PARTITIONS, PROPERTIES, TABLES
from watermark.storage import Location

log = logging.getLogger(__name__)

#: The operations of the commit earlier versions of the migration replaced the table with.
REPLACE_OPERATIONS = ("REPLACE TABLE", "CREATE OR REPLACE TABLE")
#: The operations of the migration's commit (a replacement with the rows: ``REPLACE TABLE ... AS SELECT``).
REWRITE_OPERATIONS = ("REPLACE TABLE AS SELECT", "CREATE OR REPLACE TABLE AS SELECT")
#: Rewrites tried when another writer commits between the read and the rewrite (module docstring).
MAX_REWRITES = 5


@dataclass
class MigrationReport:
    """The tables ``--migrate-layout`` rewrote with their date partition column."""

    migrated: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


def table_layout(path: str, table: str) -> str | None:
    """The table's date partition column when the table has it, else None (created before it)."""
    if table not in PARTITIONS:
        return None
    dt = open_delta(path)
    column = PARTITIONS[table][0]
    return column if dt is not None and column in list(dt.metadata().partition_columns) else None


def reached(step: str, table: str) -> None:
    """A step boundary of the migration of ``table``: nothing to do (a test interrupts the migration here).

    The steps: ``read`` (the version to rewrite is known), ``commit`` (the rewrite about to commit),
    ``committed`` (the table migrated; the next table not yet started).
    """


def _version_to_rewrite(spark: Any, path: str, table: str) -> tuple[int, int] | None:
    """(the version whose rows the table is rewritten from, the newest); None: already partitioned.

    The newest version for a table of the previous layout; for a table an earlier version of the migration
    left empty (its ``REPLACE`` committed, not its ``INSERT``), the version before the ``REPLACE``.
    """
    from delta.tables import DeltaTable

    newest: Any = DeltaTable.forPath(spark, path).history(1).select("version", "operation").first()
    version = int(newest["version"])
    if table_layout(path, table) is None:
        return version, version
    if newest["operation"] not in REPLACE_OPERATIONS or version == 0:
        return None
    before = spark.read.format("delta").option("versionAsOf", version - 1).load(path)
    if PARTITIONS[table][0] in before.columns:
        return None  # a replacement of a partitioned table: not a migration's
    log.warning(
        "%s: an earlier --migrate-layout was interrupted after its REPLACE (version %d): rewriting the rows "
        "of version %d",
        table,
        version,
        version - 1,
    )
    return version - 1, version


def _rewrite(spark: Any, path: str, table: str, version: int) -> tuple[int, int]:
    """Overwrite the table, partitioned, with the rows of ``version``, in one commit: (version, readVersion).

    A column the code's schema has and the old table lacks (added since) is written null; a column the table
    has and the code's schema lacks, or one retyped, raises :class:`jobs.common.tables.TableSchemaError`
    (nothing committed).
    """
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    from jobs.common.tables import columns_to_add, generation_expression

    frame = spark.read.format("delta").option("versionAsOf", version).load(path)
    column, expression = PARTITIONS[table][0], generation_expression(table)
    for added in columns_to_add(table, frame.schema, from_arrow_schema(TABLES[table]), column):
        frame = frame.withColumn(added.name, F.lit(None).cast(added.dataType))
    generated = F.expr(expression).alias(column, metadata={"delta.generationExpression": expression})
    writer = (
        frame.select(*[F.col(name) for name in TABLES[table].names], generated)
        .writeTo(_quoted(path))
        .using("delta")
        .partitionedBy(F.col(column))
    )
    kept = dict(open_delta(path).metadata().configuration)
    for key, value in {**kept, **PROPERTIES.get(table, {})}.items():
        writer = writer.tableProperty(key, value)
    reached("commit", table)
    writer.replace()
    for row in DeltaTable.forPath(spark, path).history(20).collect():  # newest first
        if row["operation"] in REWRITE_OPERATIONS:
            return int(row["version"]), int(row["readVersion"])
    msg = f"{table}: the rewrite's commit is not in the table's history"
    raise RuntimeError(msg)


def _migrate(spark: Any, path: str, table: str, source: int, newest: int) -> None:
    """Rewrite the table from version ``source``; again from a newer one while others commit meanwhile."""
    resumed = source != newest  # the version before an interrupted REPLACE: its rows are not in newer ones
    for _ in range(MAX_REWRITES):
        committed, read = _rewrite(spark, path, table, source)
        if read == newest:
            return
        if resumed:
            msg = (
                f"{table}: versions {newest + 1}..{read} were committed during the migration: stop the "
                f"streaming job; the rows are in versions {source} and {read}"
            )
            raise RuntimeError(msg)
        log.warning(
            "%s: versions %d..%d were committed while it was rewritten from version %d (is the streaming "
            "job stopped?): rewriting it from version %d",
            table,
            newest + 1,
            read,
            source,
            read,
        )
        source, newest, resumed = read, committed, False  # ``committed`` holds the rows of ``read``
    msg = f"{table}: other commits kept coming while it was rewritten: stop the streaming job and rerun"
    raise RuntimeError(msg)


def migrate_layout(spark: Any, root: str) -> list[str]:
    """Rewrite in place, with its date partition column, each table created before it; the tables migrated.

    One Delta commit per table (module docstring): interrupted at any point, the table holds every row, in
    one layout or the other, and a rerun finishes the migration.
    """
    from delta.tables import DeltaTable

    migrated = []
    for table in TABLES:
        path = table_path(root, table)
        if table not in PARTITIONS or not DeltaTable.isDeltaTable(spark, path):
            continue
        versions = _version_to_rewrite(spark, path, table)
        if versions is None:
            continue
        reached("read", table)
        _migrate(spark, path, table, *versions)
        column = PARTITIONS[table][0]
        log.info("%s: rewritten partitioned by %s (from version %d)", table, column, versions[0])
        reached("committed", table)
        migrated.append(table)
    return migrated


def _quoted(path: str) -> str:
    return "delta.`" + Location.of(path).spark.replace("`", "``") + "`"
