r"""Read a recorded stream (event time, arrival time, optional partition and key) from CSV or Parquet.

The replay evaluation feeds a recorded stream to watermark generators in arrival order. This module
loads such a stream into numpy arrays: :func:`read_stream` returns a :class:`RecordedStream` with int64
epoch-millisecond event times (``te_ms``) and arrival times (``tp_ms``) in file order, and optionally
the partition and key columns as strings.

Any problem with the input raises :class:`~watermark.streams.input_error.InputError`, whose message is a
single line naming the file and, where it applies, the column, the data row and (for CSV) the line at
fault, e.g.::

    data.csv: line 7 (data row 6), column 'te': not an ISO-8601 time: '2013-13-01 00:00:00'

The file's columns are read by :mod:`watermark.streams.columns` and converted by
:mod:`watermark.streams.convert`; pyarrow is imported lazily, so importing this module stays cheap.

Examples
--------
>>> import pathlib, tempfile
>>> with tempfile.TemporaryDirectory() as tmp:
...     path = pathlib.Path(tmp, "s.csv")
...     _ = path.write_text("te,tp,dev\n1000,1200,a\n900,1300,b\n")
...     stream = read_stream(path, event_time="te", arrival_time="tp", partition="dev")
>>> len(stream), stream.te_ms.tolist(), stream.tp_ms.tolist(), stream.partition.tolist()
(2, [1000, 900], [1200, 1300], ['a', 'b'])

"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from watermark import storage
from watermark.streams.columns import Columns, LineOf, check_delimiter, is_parquet, read_csv, read_parquet
from watermark.streams.convert import ColumnFault, Int64Array, RowFault, to_epoch_ms, to_floats, to_labels
from watermark.streams.input_error import InputError, show
from watermark.streams.timeparse import TIME_FORMATS

__all__ = ["TIME_FORMATS", "RecordedStream", "read_stream"]


@dataclass(frozen=True)
class RecordedStream:
    """A recorded stream, one entry per record, in file order.

    Attributes
    ----------
    te_ms : numpy.ndarray
        int64 event times, epoch milliseconds.
    tp_ms : numpy.ndarray
        int64 arrival (processing) times, epoch milliseconds.
    partition : numpy.ndarray or None
        Object array of ``str``, the partition column, or None when none was asked for.
    key : numpy.ndarray or None
        Object array of ``str``, the key column, or None when none was asked for.
    source : str
        The path as given to :func:`read_stream`.
    value : numpy.ndarray or None
        float64 values of the value column (finite), or None when none was asked for.

    """

    te_ms: Int64Array
    tp_ms: Int64Array
    partition: npt.NDArray[Any] | None
    key: npt.NDArray[Any] | None
    source: str
    value: npt.NDArray[np.float64] | None = None

    def __len__(self) -> int:
        """Return the number of records."""
        return len(self.te_ms)


def read_stream(
    path: str | os.PathLike[str],
    *,
    event_time: str,
    arrival_time: str,
    partition: str | None = None,
    key: str | None = None,
    delimiter: str = ",",
    header: bool = True,
    time_format: str = "epoch_ms",
    value: str | None = None,
) -> RecordedStream:
    r"""Read a recorded stream from a CSV or Parquet file.

    Parquet is recognised by the suffix ``.parquet`` or ``.pq`` or by its magic bytes ``PAR1`` at the
    start of the file; anything else is read as CSV (compressed CSV such as ``.csv.gz`` works too).
    CSV columns are all read as text, so no type is inferred; only the requested columns are converted.

    Parameters
    ----------
    path : str or os.PathLike
        The file: a path, or a URI (``s3a://bucket/stream.csv``: :mod:`watermark.storage`).
    event_time, arrival_time : str
        The event-time and arrival-time columns: names, or with ``header=False`` 0-based column indices
        written as digits (``"2"``). For Parquet, ``header=False`` lets a column be given either way.
    partition, key : str, optional
        Columns returned as strings in :attr:`RecordedStream.partition` / :attr:`RecordedStream.key`.
    value : str, optional
        A numeric column returned as finite float64 in :attr:`RecordedStream.value`.
    delimiter : str, default ","
        CSV field separator, a single character (``"\t"`` written as two characters is taken as a tab).
    header : bool, default True
        Whether the first CSV row holds column names.
    time_format : {"epoch_ms", "epoch_s", "iso"}, default "epoch_ms"
        How time text is written: integer epoch milliseconds (integral decimals such as ``"12.0"``
        accepted), epoch seconds (decimals allowed, rounded to the nearest millisecond, halves away from
        zero), or ISO-8601 (``2013-01-01 00:00:00``, ``T`` separator, fractions of seconds - truncated to
        the millisecond -, ``Z`` or offsets ``+01:00`` / ``+0100`` / ``+01``; naive times are UTC): the
        syntax of :mod:`watermark.streams.timeparse`, which the streaming job reads time text with too.
        Parquet timestamp and date columns are read natively whatever this says (naive = UTC); Parquet
        integer and float columns are taken as ``epoch_ms`` or ``epoch_s`` as given.

    Returns
    -------
    RecordedStream
        The stream, in file order.

    Raises
    ------
    InputError
        If the file cannot be read, has no data rows, lacks a column, or holds a missing or
        unparseable time, or a missing or empty partition/key value. The message is one line.

    """
    where = storage.Location.of(path) if isinstance(path, str) and "://" in path else None
    options = (event_time, arrival_time, partition, key, delimiter, header, time_format, value)
    if where is not None and not where.local:
        return _read_object_store(where, lambda copy: _read_file(copy, None, *options))
    return _read_file(path, where, *options)


def _read_file(
    path: str | os.PathLike[str],
    where: storage.Location | None,
    event_time: str,
    arrival_time: str,
    partition: str | None,
    key: str | None,
    delimiter: str,
    header: bool,
    time_format: str,
    value: str | None,
) -> RecordedStream:
    """:func:`read_stream` of a local file (``where``: its location when given as a URI)."""
    source = os.fspath(path) if where is None else where.spark
    _check_time_format(source, time_format)
    roles = _roles(source, event_time, arrival_time, partition, key, value)
    if is_parquet(source):
        columns, line_of = read_parquet(source, roles, header)
    else:
        columns, line_of = read_csv(source, roles, check_delimiter(source, delimiter), header)
    convert = _Converter(source, columns, line_of, time_format)
    return RecordedStream(
        te_ms=convert.times("event_time"),
        tp_ms=convert.times("arrival_time"),
        partition=convert.labels("partition"),
        key=convert.labels("key"),
        source=source,
        value=convert.numbers("value"),
    )


def _read_object_store(where: storage.Location, read: Callable[[str], RecordedStream]) -> RecordedStream:
    """Read a file of an object store through a local copy (``read`` reads it); errors name the URI."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="awm-stream-") as tmp:
        copy = f"{tmp}/{where.name}"
        try:
            data = storage.read_bytes(where)
        except OSError as exc:
            msg = f"{where}: cannot read the file: {exc}"
            raise InputError(msg) from None
        with open(copy, "wb") as fh:
            fh.write(data)
        try:
            return read(copy)
        except InputError as exc:
            msg = str(exc).replace(copy, str(where))
            raise InputError(msg) from None


def _check_time_format(source: str, time_format: str) -> None:
    """Raise InputError unless ``time_format`` is one of :data:`TIME_FORMATS`."""
    if time_format not in TIME_FORMATS:
        msg = f"{source}: unknown time format {time_format!r}; expected one of {', '.join(TIME_FORMATS)}"
        raise InputError(msg)


def _roles(
    source: str,
    event_time: str,
    arrival_time: str,
    partition: str | None,
    key: str | None,
    value: str | None,
) -> dict[str, str]:
    """The requested columns by role; each must be a non-empty string."""
    roles: dict[str, str] = {"event_time": event_time, "arrival_time": arrival_time}
    if partition is not None:
        roles["partition"] = partition
    if key is not None:
        roles["key"] = key
    if value is not None:
        roles["value"] = value
    for role, column in roles.items():
        if not isinstance(column, str) or not column:
            msg = f"{source}: the {role.replace('_', ' ')} column must be a non-empty string, got {column!r}"
            raise InputError(msg)
    return roles


@dataclass(frozen=True)
class _Converter:
    """Convert the columns read from ``source``; a fault becomes an InputError naming its row and column."""

    source: str
    columns: Columns
    line_of: LineOf
    time_format: str

    def fail(self, role: str, fault: RowFault) -> InputError:
        """The error for a bad value of ``role``'s column: file, line or data row, column, value."""
        label, array = self.columns[role]
        line = self.line_of(fault.index)
        where = f"data row {fault.index + 1}" if line is None else f"line {line} (data row {fault.index + 1})"
        value = array[fault.index].as_py()
        shown = "" if value is None else f": {show(value)}"
        return InputError(f"{self.source}: {where}, column {label}: {fault.reason}{shown}")

    def times(self, role: str) -> Int64Array:
        """A time column as int64 epoch ms."""
        label, array = self.columns[role]
        try:
            return to_epoch_ms(array, self.time_format)
        except RowFault as fault:
            raise self.fail(role, fault) from None
        except ColumnFault as fault:
            msg = f"{self.source}: column {label}: {fault}"
            raise InputError(msg) from None

    def labels(self, role: str) -> npt.NDArray[Any] | None:
        """A partition or key column as strings, or None when it was not asked for."""
        if role not in self.columns:
            return None
        try:
            return to_labels(self.columns[role][1])
        except RowFault as fault:
            raise self.fail(role, fault) from None

    def numbers(self, role: str) -> npt.NDArray[np.float64] | None:
        """A value column as finite float64, or None when it was not asked for."""
        if role not in self.columns:
            return None
        label, array = self.columns[role]
        try:
            return to_floats(array)
        except RowFault as fault:
            raise self.fail(role, fault) from None
        except ColumnFault as fault:
            msg = f"{self.source}: column {label}: {fault}"
            raise InputError(msg) from None
