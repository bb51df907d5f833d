"""Idempotent per-batch appends to Delta tables, written with ``deltalake`` (delta-rs), not with Spark.

A streaming micro-batch (``foreachBatch``) may be replayed after a crash: the same ``batch_id`` comes
back and must not be written twice. Each append records a Delta *application transaction*
(``txn`` action: ``appId`` = the sink's ``app_id``, ``version`` = the batch id) in the same commit as
the data. Before writing, :meth:`DeltaSink.append` reads the table's recorded version for ``app_id``
and skips the batch when it is ``>= batch_id``. delta-rs only records the ``txn`` action, it does not
enforce it, so the check is done here.

Idempotency is per table: a batch written to several tables, where a crash interrupted it between two
tables, writes only the missing tables on replay. Batch ids of one ``app_id`` must increase, as Spark's
do: once batch ``n`` is committed, every batch ``<= n`` of that ``app_id`` is skipped for that table.

A missing table is first created, with the given schema, by a commit of its own (no data, no ``txn``),
then the batch is appended in a second commit. So a table's Delta version 0 is its creation and its
first batch is version 1.

Concurrency. The version check and the write use the same table snapshot: delta-rs rebases an append
on top of commits made after its snapshot, but refuses (``CommitFailedError: Concurrent transaction
failed``) when one of them carries a ``txn`` of the same ``app_id``, so a batch that another writer of
this app committed meanwhile is never appended twice. (Loading the table afresh for the write would
rebase over that commit silently.) The creation is kept apart from the data because delta-rs 1.6.6
sometimes rebases a losing concurrent create commit (protocol, metadata, *data and txn*) on top of the
winning one instead of failing it, which would duplicate a batch; a duplicated empty create commit is
harmless. Failed commits (:class:`deltalake.exceptions.CommitFailedError`: ``Protocol changed`` /
``Metadata changed since last commit`` when tables are created concurrently, ``Concurrent transaction
failed``) are retried with exponential backoff and full jitter, re-reading the recorded version before
each attempt, where the batch is usually found written.

Tables are read with pyarrow's local filesystem: the root is a local directory.
"""

from __future__ import annotations

import logging
import os
import random
import time

import pyarrow as pa
import pyarrow.fs as pafs
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError, TableNotFoundError

__all__ = ["DeltaSink"]

logger = logging.getLogger(__name__)


class DeltaSink:
    """Idempotent per-batch writes of several Delta tables under one root directory.

    Parameters
    ----------
    root : str or os.PathLike
        Local directory holding one Delta table per sub-directory (``root/<table>``). It need not
        exist yet.
    app_id : str
        Application id recorded with every append; replays are detected per ``(table, app_id)``.
    max_retries : int, default 8
        How many times a commit that failed with :class:`~deltalake.exceptions.CommitFailedError`
        is retried before the error is raised.
    backoff_base : float, default 0.05
        Seconds; the ``n``-th retry (``n`` from 0) sleeps a uniformly random time in
        ``[0, min(backoff_max, backoff_base * 2**n)]``.
    backoff_max : float, default 2.0
        Upper bound, in seconds, of one backoff sleep.

    Notes
    -----
    Instances hold no open table handles and may be shared between threads.

    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        app_id: str,
        *,
        max_retries: int = 8,
        backoff_base: float = 0.05,
        backoff_max: float = 2.0,
    ) -> None:
        if not isinstance(app_id, str) or not app_id:
            msg = f"app_id must be a non-empty string, got {app_id!r}"
            raise ValueError(msg)
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            msg = f"max_retries must be a non-negative int, got {max_retries!r}"
            raise ValueError(msg)
        if backoff_base < 0 or backoff_max < 0:
            msg = f"backoff_base and backoff_max must be >= 0, got {backoff_base!r} and {backoff_max!r}"
            raise ValueError(msg)
        self.root = os.path.abspath(os.fspath(root))
        self.app_id = app_id
        self.max_retries = max_retries
        self.backoff_base = float(backoff_base)
        self.backoff_max = float(backoff_max)

    def __repr__(self) -> str:
        return f"DeltaSink(root={self.root!r}, app_id={self.app_id!r}, max_retries={self.max_retries})"

    def path(self, table: str) -> str:
        """Directory of ``table``: ``root/<table>``.

        Parameters
        ----------
        table : str
            Table name: a single path component (no separators, not ``.`` or ``..``).

        Returns
        -------
        str
            Absolute path of the table directory.

        Raises
        ------
        ValueError
            If ``table`` is not a valid name.

        """
        if (
            not isinstance(table, str)
            or table in ("", ".", "..")
            or "/" in table
            or os.sep in table
            or (os.altsep is not None and os.altsep in table)
        ):
            msg = f"table must be a plain directory name, got {table!r}"
            raise ValueError(msg)
        return os.path.join(self.root, table)

    def exists(self, table: str) -> bool:
        """Whether ``table`` is an existing Delta table (it has at least one commit).

        Parameters
        ----------
        table : str
            Table name.

        Returns
        -------
        bool
            True if ``root/<table>`` holds a Delta table.

        """
        return DeltaTable.is_deltatable(self.path(table))

    def committed_version(self, table: str) -> int | None:
        """The batch id last recorded by this sink's ``app_id`` in ``table``.

        Parameters
        ----------
        table : str
            Table name.

        Returns
        -------
        int or None
            The application transaction version for ``app_id``; None if the table does not exist or
            this ``app_id`` never wrote to it.

        """
        dt = self._open(table)
        return None if dt is None else dt.transaction_version(self.app_id)

    def append(self, table: str, data: pa.Table, batch_id: int, *, schema: pa.Schema) -> bool:
        """Append ``data`` as batch ``batch_id`` unless this app already committed it (or a later one).

        The table is created with ``schema`` if it does not exist, also when ``data`` has no rows: the
        table then exists with its schema and the batch id is recorded (delta-rs writes a commit with
        the ``txn`` action and no files), so a replay of that batch is skipped. Retries on commit
        conflicts, re-checking the recorded version first: a batch committed meanwhile by another
        writer with the same ``app_id`` is skipped.

        Parameters
        ----------
        table : str
            Table name.
        data : pyarrow.Table
            Rows of the batch. Columns are matched to ``schema`` by name, reordered and cast.
        batch_id : int
            Non-negative batch id, recorded as the application transaction version.
        schema : pyarrow.Schema
            Schema of the table (used to create it, and to conform ``data``).

        Returns
        -------
        bool
            True if the batch was written, False if it was skipped as already committed.

        Raises
        ------
        ValueError
            If ``batch_id`` is negative, ``data`` lacks a column of ``schema`` or has a column not in
            it (the message names the columns), or a value cannot be cast (``pyarrow.ArrowInvalid``,
            a ``ValueError``).
        TypeError
            If ``batch_id`` is not an int, or ``data``/``schema`` are not a pyarrow Table/Schema.
        deltalake.exceptions.CommitFailedError
            The last commit failure, if the commit still fails after ``max_retries`` retries.
        deltalake.exceptions.DeltaError
            Other delta-rs errors (not retried), e.g. ``SchemaMismatchError`` when the existing
            table's schema differs from ``schema``.

        """
        batch_id = _check_batch_id(batch_id)
        path = self.path(table)
        conformed = _conform(data, schema)
        commit = CommitProperties(app_transactions=[Transaction(app_id=self.app_id, version=batch_id)])
        attempt = 0
        while True:
            try:
                dt = self._open(table)
                if dt is None:
                    # A commit of its own, without data or txn: creating the table in the batch's commit
                    # is not safe, as delta-rs may rebase a losing concurrent create (data and txn
                    # included) on top of the winning one instead of failing it.
                    DeltaTable.create(path, schema, mode="ignore")
                    logger.info("created (or found) Delta table %s at %s", table, path)
                    dt = DeltaTable(path)
                committed = dt.transaction_version(self.app_id)
                if committed is not None and committed >= batch_id:
                    logger.info(
                        "skip %s batch %d: app %r already committed batch %d",
                        table,
                        batch_id,
                        self.app_id,
                        committed,
                    )
                    return False
                # Write on the snapshot whose txn version was just checked, not on a fresh load of the
                # path: if another writer of this app_id committed after it, delta-rs refuses to rebase
                # ("Concurrent transaction failed") instead of appending a duplicate.
                write_deltalake(dt, conformed, mode="append", commit_properties=commit)
            except CommitFailedError as err:
                if attempt >= self.max_retries:
                    logger.warning(
                        "commit of %s batch %d failed after %d retries: %s", table, batch_id, attempt, err
                    )
                    raise
                delay = random.uniform(0.0, min(self.backoff_max, self.backoff_base * 2.0**attempt))
                logger.info(
                    "commit of %s batch %d failed (%s); retry %d/%d in %.3f s",
                    table,
                    batch_id,
                    err,
                    attempt + 1,
                    self.max_retries,
                    delay,
                )
                time.sleep(delay)
                attempt += 1
            else:
                logger.debug("wrote %s batch %d (%d rows)", table, batch_id, conformed.num_rows)
                return True

    def read(self, table: str) -> pa.Table:
        """The whole current content of ``table``.

        Parameters
        ----------
        table : str
            Table name.

        Returns
        -------
        pyarrow.Table
            All rows, with the table's schema (no rows if only empty batches were written).

        Raises
        ------
        FileNotFoundError
            If the table does not exist.

        """
        path = self.path(table)
        dt = self._open(table)
        if dt is None:
            msg = f"Delta table {table!r} does not exist (no Delta log under {path})"
            raise FileNotFoundError(msg)
        # pyarrow's LocalFileSystem rather than delta-rs's default PyFileSystem(DeltaStorageHandler):
        # with the latter, the interpreter intermittently aborts at exit ("terminate called without an
        # active exception") after a read, with deltalake 1.6.6 and pyarrow 26.
        filesystem = pafs.SubTreeFileSystem(path, pafs.LocalFileSystem())
        return dt.to_pyarrow_table(filesystem=filesystem)

    def _open(self, table: str) -> DeltaTable | None:
        try:
            return DeltaTable(self.path(table))
        except TableNotFoundError:
            return None


def _check_batch_id(batch_id: object) -> int:
    if isinstance(batch_id, bool) or not isinstance(batch_id, int):
        msg = f"batch_id must be an int, got {type(batch_id).__name__}"
        raise TypeError(msg)
    if batch_id < 0:
        msg = f"batch_id must be >= 0, got {batch_id}"
        raise ValueError(msg)
    return int(batch_id)


def _conform(data: pa.Table, schema: pa.Schema) -> pa.Table:
    """``data`` with exactly the columns of ``schema``, in its order and with its types."""
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
