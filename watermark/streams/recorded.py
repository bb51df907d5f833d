r"""Read a recorded stream (event time, arrival time, optional partition and key) from CSV or Parquet.

The replay evaluation feeds a recorded stream to watermark generators in arrival order. This module
loads such a stream into numpy arrays: :func:`read_stream` returns a :class:`RecordedStream` with int64
epoch-millisecond event times (``te_ms``) and arrival times (``tp_ms``) in file order, and optionally
the partition and key columns as strings.

Any problem with the input raises :class:`InputError`, whose message is a single line naming the file
and, where it applies, the column, the data row and (for CSV) the line at fault, e.g.::

    data.csv: line 7 (data row 6), column 'te': not an ISO-8601 time: '2013-13-01 00:00:00'

pyarrow is imported lazily, inside the functions that need it, so importing this module stays cheap.

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

import csv
import io
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from watermark import storage
from watermark.streams.timeparse import MAX_ABS_SECONDS, MS_PER_DAY, TIME_FORMATS, parse_text

__all__ = ["TIME_FORMATS", "InputError", "RecordedStream", "read_stream"]


_PARQUET_SUFFIXES = (".parquet", ".pq")
_PARQUET_MAGIC = b"PAR1"
_VALUE_WIDTH = 40  # offending values are shown truncated to about this many characters
_MAX_LISTED_COLUMNS = 15
_MAX_ABS_MS_FLOAT = 2.0**63

Int64Array = npt.NDArray[np.int64]


class InputError(ValueError):
    """Bad input: the message is ONE line naming the file, and the row or column at fault.

    Parameters
    ----------
    message : str
        The description; any line breaks in it are replaced by spaces.

    """

    def __init__(self, message: str) -> None:
        super().__init__(message.replace("\r\n", " ").replace("\n", " ").replace("\r", " "))


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
    if where is not None and not where.local:  # an object store: read a local copy, errors name the URI
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
                return read_stream(
                    copy,
                    event_time=event_time,
                    arrival_time=arrival_time,
                    partition=partition,
                    key=key,
                    delimiter=delimiter,
                    header=header,
                    time_format=time_format,
                    value=value,
                )
            except InputError as exc:
                msg = str(exc).replace(copy, str(where))
                raise InputError(msg) from None
    source = os.fspath(path) if where is None else where.spark
    if time_format not in TIME_FORMATS:
        msg = f"{source}: unknown time format {time_format!r}; expected one of {', '.join(TIME_FORMATS)}"
        raise InputError(msg)
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

    if _is_parquet(source):
        columns, line_of = _read_parquet(source, roles, header)
    else:
        columns, line_of = _read_csv(source, roles, _check_delimiter(source, delimiter), header)

    def fail(role: str, fault: _RowFault) -> InputError:
        label, array = columns[role]
        line = line_of(fault.index)
        where = f"data row {fault.index + 1}" if line is None else f"line {line} (data row {fault.index + 1})"
        value = array[fault.index].as_py()
        shown = "" if value is None else f": {_show(value)}"
        return InputError(f"{source}: {where}, column {label}: {fault.reason}{shown}")

    def times(role: str) -> Int64Array:
        label, array = columns[role]
        try:
            return _to_epoch_ms(array, time_format)
        except _RowFault as fault:
            raise fail(role, fault) from None
        except _ColumnFault as fault:
            msg = f"{source}: column {label}: {fault}"
            raise InputError(msg) from None

    def labels(role: str) -> npt.NDArray[Any] | None:
        if role not in columns:
            return None
        try:
            return _to_labels(columns[role][1])
        except _RowFault as fault:
            raise fail(role, fault) from None

    def numbers(role: str) -> npt.NDArray[np.float64] | None:
        if role not in columns:
            return None
        label, array = columns[role]
        try:
            return _to_floats(array)
        except _RowFault as fault:
            raise fail(role, fault) from None
        except _ColumnFault as fault:
            msg = f"{source}: column {label}: {fault}"
            raise InputError(msg) from None

    return RecordedStream(
        te_ms=times("event_time"),
        tp_ms=times("arrival_time"),
        partition=labels("partition"),
        key=labels("key"),
        source=source,
        value=numbers("value"),
    )


# --------------------------------------------------------------------------------------------------
# Internal faults: raised by the converters, turned into InputError with file/row context by the caller.


class _RowFault(Exception):
    """The value at ``index`` (0-based) is bad for ``reason``."""

    def __init__(self, index: int, reason: str) -> None:
        super().__init__(reason)
        self.index = index
        self.reason = reason


class _ColumnFault(Exception):
    """The column as a whole cannot be used (for example, the wrong type)."""


class _Faults:
    """The earliest bad row over several vectorised checks."""

    def __init__(self) -> None:
        self.index: int | None = None
        self.reason = ""

    def at(self, index: int, reason: str) -> None:
        """Record a bad row."""
        if self.index is None or index < self.index:
            self.index, self.reason = index, reason

    def where(self, bad: npt.NDArray[np.bool_], reason: str) -> None:
        """Record the first row where ``bad`` is true, if any."""
        if bad.any():
            self.at(int(np.argmax(bad)), reason)

    def check(self) -> None:
        """Raise the earliest recorded fault, if any."""
        if self.index is not None:
            raise _RowFault(self.index, self.reason)


# --------------------------------------------------------------------------------------------------
# Small helpers.


def _show(value: object) -> str:
    """Quote a value for a message, truncated to about ``_VALUE_WIDTH`` characters."""
    text = value if isinstance(value, str) else str(value)
    if len(text) > _VALUE_WIDTH:
        text = text[: _VALUE_WIDTH - 3] + "..."
    return repr(text)


def _list_columns(names: Sequence[str]) -> str:
    """List column names for a message, truncated when there are many."""
    shown = ", ".join(_show(name) for name in names[:_MAX_LISTED_COLUMNS])
    if len(names) > _MAX_LISTED_COLUMNS:
        shown += f", ... ({len(names)} columns)"
    return shown or "(none)"


def _check_delimiter(source: str, delimiter: str) -> str:
    """Validate the CSV delimiter: one character, not a quote or a line break."""
    if delimiter == "\\t":
        delimiter = "\t"
    if not isinstance(delimiter, str) or len(delimiter) != 1 or delimiter in '"\r\n':
        msg = f"{source}: invalid delimiter {delimiter!r}: use a single character, not a quote or line break"
        raise InputError(msg)
    return delimiter


def _is_parquet(source: str) -> bool:
    """Tell Parquet by suffix or magic bytes; raise InputError if the file cannot be opened."""
    try:
        with open(source, "rb") as file:
            magic = file.read(len(_PARQUET_MAGIC))
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        msg = f"{source}: cannot read the file: {reason}"
        raise InputError(msg) from None
    if not magic:
        msg = f"{source}: no data rows (the file is empty)"
        raise InputError(msg)
    return magic == _PARQUET_MAGIC or source.lower().endswith(_PARQUET_SUFFIXES)


def _np(array: Any) -> npt.NDArray[Any]:
    """Convert a null-free arrow array to numpy."""
    out: npt.NDArray[Any] = array.to_numpy(zero_copy_only=False)
    return out


def _mask(array: Any) -> npt.NDArray[np.bool_]:
    """Convert an arrow boolean array to a numpy mask, nulls counting as false."""
    import pyarrow.compute as pc

    return _np(pc.fill_null(array, False)).astype(bool, copy=False)


def _arrow_error_text(exc: BaseException) -> str:
    """Return the first line of an error message, shortened."""
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."


# --------------------------------------------------------------------------------------------------
# CSV.

Columns = dict[str, tuple[str, Any]]  # role -> (label for messages, arrow array)
LineOf = Callable[[int], int | None]  # data row index -> file line, when known


def _open_text(source: str, errors: str = "replace") -> io.TextIOWrapper:
    """Open a (possibly compressed) text file the way pyarrow reads it."""
    import pyarrow as pa

    stream = pa.input_stream(source)  # decompresses by suffix, like pyarrow.csv.read_csv
    return io.TextIOWrapper(stream, encoding="utf-8-sig", errors=errors, newline="")


def _first_bad_utf8_line(source: str) -> int | None:
    """Return the number of the first line that is not valid UTF-8, if any."""
    try:
        with _open_text(source, errors="surrogateescape") as text:
            for number, line in enumerate(text, start=1):
                if any("\udc80" <= char <= "\udcff" for char in line):
                    return number
    except OSError:
        pass
    return None


def _csv_rows(source: str, delimiter: str) -> Iterator[tuple[int, list[str]]]:
    """Yield (first line number, fields) for every non-empty CSV row, as pyarrow would see them."""
    with _open_text(source) as text:
        reader = csv.reader(text, delimiter=delimiter)
        line = 1
        for row in reader:
            if row:
                yield line, row
            line = reader.line_num + 1


def _first_csv_row(source: str, delimiter: str) -> list[str] | None:
    """Return the first non-empty row (the header when there is one), or None."""
    try:
        for _, row in _csv_rows(source, delimiter):
            return row
    except (OSError, csv.Error) as exc:
        msg = f"{source}: cannot read the file: {_arrow_error_text(exc)}"
        raise InputError(msg) from None
    return None


def _csv_line_of_row(source: str, delimiter: str, header: bool, index: int) -> int:
    """Return the line where data row ``index`` (0-based) starts; a plain count if the scan fails."""
    fallback = index + 1 + int(header)
    try:
        for number, (line, _) in enumerate(_csv_rows(source, delimiter), start=-int(header)):
            if number == index:
                return line
    except (OSError, csv.Error):
        pass
    return fallback


def _csv_bad_width(source: str, delimiter: str) -> tuple[int, int, int] | None:
    """Find the first row whose field count differs from the first row's: (line, expected, found)."""
    expected = None
    try:
        for line, row in _csv_rows(source, delimiter):
            if expected is None:
                expected = len(row)
            elif len(row) != expected:
                return line, expected, len(row)
    except (OSError, csv.Error):
        pass
    return None


def _column_index(source: str, column: str, count: int) -> int:
    """Parse a 0-based column index written as digits and check it against the column count."""
    if not (column.isascii() and column.isdigit()):
        msg = f"{source}: column {column!r}: without a header, give columns as 0-based indices such as '2'"
        raise InputError(msg)
    index = int(column)
    if index >= count:
        msg = f"{source}: column index {index} is out of range: the file has {count} columns (0-{count - 1})"
        raise InputError(msg)
    return index


def _missing_column(
    source: str, column: str, names: Sequence[str], delimiter: str | None = None
) -> InputError:
    """Build the error for a column name that is not in the file."""
    hint = ""
    if column.isascii() and column.isdigit():
        hint = " (column indices need header=False / --no-header)"
    elif delimiter is not None and len(names) == 1:
        hint = f" (the header has a single column: is the delimiter {delimiter!r} right?)"
    return InputError(f"{source}: column {column!r} not found{hint}; columns are: {_list_columns(names)}")


def _read_csv(source: str, roles: dict[str, str], delimiter: str, header: bool) -> tuple[Columns, LineOf]:
    """Read the requested CSV columns as text."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    first = _first_csv_row(source, delimiter)
    if first is None:
        msg = f"{source}: no data rows"
        raise InputError(msg)
    fields: dict[str, tuple[str, str]] = {}  # role -> (arrow column name, label)
    for role, column in roles.items():
        if header:
            if column not in first:
                raise _missing_column(source, column, first, delimiter)
            fields[role] = (column, repr(column))
        else:
            index = _column_index(source, column, len(first))
            fields[role] = (f"f{index}", str(index))
    include = list(dict.fromkeys(name for name, _ in fields.values()))
    try:
        table = pcsv.read_csv(
            source,
            read_options=pcsv.ReadOptions(autogenerate_column_names=not header),
            parse_options=pcsv.ParseOptions(delimiter=delimiter),
            convert_options=pcsv.ConvertOptions(
                include_columns=include,
                column_types={name: pa.string() for name in include},
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
            ),
        )
    except pa.ArrowInvalid as exc:
        text = _arrow_error_text(exc)
        if "Empty CSV file" in text:
            msg = f"{source}: no data rows"
            raise InputError(msg) from None
        bad_line = _first_bad_utf8_line(source) if "UTF8" in text else None
        if bad_line is not None:
            msg = f"{source}: line {bad_line}: invalid UTF-8 text"
            raise InputError(msg) from None
        bad = _csv_bad_width(source, delimiter) if "parse error" in text else None
        if bad is not None:
            line, expected, found = bad
            msg = (
                f"{source}: line {line}: expected {expected} fields, found {found} (delimiter {delimiter!r})"
            )
        else:
            msg = f"{source}: cannot parse CSV: {text}"
        raise InputError(msg) from None
    except (pa.ArrowException, OSError) as exc:
        msg = f"{source}: cannot read CSV: {_arrow_error_text(exc)}"
        raise InputError(msg) from None
    if table.num_rows == 0:
        msg = f"{source}: no data rows"
        raise InputError(msg)
    columns = {role: (label, table.column(name).combine_chunks()) for role, (name, label) in fields.items()}

    def line_of(index: int) -> int:
        return _csv_line_of_row(source, delimiter, header, index)

    return columns, line_of


# --------------------------------------------------------------------------------------------------
# Parquet.


def _read_parquet(source: str, roles: dict[str, str], header: bool) -> tuple[Columns, LineOf]:
    """Read the requested Parquet columns with their native types."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(source)
        names: list[str] = list(parquet.schema_arrow.names)
    except (pa.ArrowException, OSError) as exc:
        msg = f"{source}: cannot read Parquet: {_arrow_error_text(exc)}"
        raise InputError(msg) from None
    fields: dict[str, tuple[str, str]] = {}
    for role, column in roles.items():
        if column in names:
            fields[role] = (column, repr(column))
        elif not header and column.isascii() and column.isdigit():
            index = _column_index(source, column, len(names))
            fields[role] = (names[index], f"{index} ({names[index]!r})")
        else:
            raise _missing_column(source, column, names)
    if parquet.metadata.num_rows == 0:
        msg = f"{source}: no data rows"
        raise InputError(msg)
    try:
        table = parquet.read(columns=list(dict.fromkeys(name for name, _ in fields.values())))
    except (pa.ArrowException, OSError) as exc:
        msg = f"{source}: cannot read Parquet: {_arrow_error_text(exc)}"
        raise InputError(msg) from None
    columns = {role: (label, table.column(name).combine_chunks()) for role, (name, label) in fields.items()}

    def line_of(index: int) -> None:
        return None

    return columns, line_of


# --------------------------------------------------------------------------------------------------
# Conversion.


def _first_cast_failure(array: Any, target: Any) -> int:
    """Index of the first value whose cast fails, by bisection (the cast of ``array`` must fail)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    lo, hi = 0, len(array)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            pc.cast(array.slice(lo, mid - lo), target)
        except pa.ArrowInvalid:
            hi = mid
        else:
            lo = mid
    return lo


def _to_floats(array: Any) -> npt.NDArray[np.float64]:
    """A numeric column (text or native Parquet type) as finite float64; the first bad row is a fault."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = array.type
    if pa.types.is_dictionary(kind):
        array = pc.cast(array, kind.value_type)
        kind = array.type
    if array.null_count:
        raise _RowFault(int(np.argmax(_mask(array.is_null()))), "missing (null) value")
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind):
        trimmed = pc.utf8_trim_whitespace(pc.cast(array, pa.string()))
        blank = pc.equal(trimmed, "")
        if pc.any(blank).as_py():
            raise _RowFault(int(np.argmax(_mask(blank))), "empty value")
        try:
            floats = pc.cast(trimmed, pa.float64())
        except pa.ArrowInvalid:
            raise _RowFault(_first_cast_failure(trimmed, pa.float64()), "not a number") from None
    elif pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind):
        floats = pc.cast(array, pa.float64(), safe=False)
    else:
        msg = f"has type {kind}, which cannot hold numbers"
        raise _ColumnFault(msg)
    values = np.asarray(floats.to_numpy(zero_copy_only=False), dtype=np.float64)
    finite = np.isfinite(values)
    if not finite.all():
        raise _RowFault(int(np.argmin(finite)), "not a finite number")
    return values


def _cast(array: Any, target: Any, faults: _Faults, reason: str) -> Any:
    """Cast, recording the first failing row; failed casts give an all-null array of the target type."""
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        return pc.cast(array, target)
    except pa.ArrowInvalid:
        faults.at(_first_cast_failure(array, target), reason)
        return pa.nulls(len(array), target)


def _to_epoch_ms(array: Any, time_format: str) -> Int64Array:
    """Convert a time column (text or native Parquet type) to int64 epoch ms."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = array.type
    if pa.types.is_dictionary(kind):
        array = pc.cast(array, kind.value_type)
        kind = array.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind):
        return _text_to_epoch_ms(pc.cast(array, pa.string()), time_format)
    if pa.types.is_decimal(kind) and time_format != "iso":
        return _text_to_epoch_ms(pc.cast(array, pa.string()), time_format)
    return _native_to_epoch_ms(array, time_format)


def _native_to_epoch_ms(array: Any, time_format: str) -> Int64Array:
    """Convert a native (non-text) Parquet column to int64 epoch ms."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = array.type
    faults = _Faults()
    faults.where(_mask(array.is_null()), "missing (null) value")
    if pa.types.is_timestamp(kind) or pa.types.is_date(kind):
        if pa.types.is_date32(kind):
            raw = _np(pc.fill_null(pc.cast(array, pa.int32()), 0)).astype(np.int64)
            factor, divisor = MS_PER_DAY, 1
        else:
            raw = _np(pc.fill_null(pc.cast(array, pa.int64()), 0)).astype(np.int64, copy=False)
            unit = "ms" if pa.types.is_date64(kind) else kind.unit
            factor, divisor = {"s": (1000, 1), "ms": (1, 1), "us": (1, 1000), "ns": (1, 1_000_000)}[unit]
        if factor != 1:
            faults.where(np.abs(raw) > MAX_ABS_SECONDS, "time out of the int64 millisecond range")
        faults.check()
        return raw * factor if factor != 1 else np.floor_divide(raw, divisor)
    if time_format == "iso" and (
        pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind)
    ):
        msg = f"holds numbers ({kind}), not ISO-8601 text; use time format epoch_ms or epoch_s"
        raise _ColumnFault(msg)
    if pa.types.is_integer(kind):
        values = _np(pc.fill_null(_cast(array, pa.int64(), faults, "value out of the int64 range"), 0))
        values = values.astype(np.int64, copy=False)
        if time_format == "epoch_s":
            faults.where(np.abs(values) > MAX_ABS_SECONDS, "time out of the int64 millisecond range")
            faults.check()
            return values * 1000
        faults.check()
        return np.array(values, dtype=np.int64)
    if pa.types.is_floating(kind):
        floats = _np(pc.fill_null(pc.cast(array, pa.float64()), 0.0)).astype(np.float64, copy=False)
        with np.errstate(invalid="ignore", over="ignore"):
            scaled = floats * 1000.0  # nearest ms, halves away from zero as for text
            ms = floats if time_format == "epoch_ms" else np.copysign(np.floor(np.abs(scaled) + 0.5), scaled)
            faults.where(~np.isfinite(ms) | (np.abs(ms) >= _MAX_ABS_MS_FLOAT), "not a finite time in range")
            if time_format == "epoch_ms":
                faults.where(np.isfinite(ms) & (ms != np.trunc(ms)), "not an integral epoch_ms value")
        faults.check()
        return ms.astype(np.int64)
    msg = f"has type {kind}, which cannot hold times"
    raise _ColumnFault(msg)


def _text_to_epoch_ms(array: Any, time_format: str) -> Int64Array:
    """Parse a string column with the shared parser (:mod:`watermark.streams.timeparse`): bad rows fault."""
    parsed = parse_text(array, time_format)
    first = parsed.first()
    if first is not None:
        raise _RowFault(*first)
    return parsed.ms


def _to_labels(array: Any) -> npt.NDArray[Any]:
    """Partition or key values as an object array of ``str``; null or blank values are errors."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not pa.types.is_string(array.type):
        array = pc.cast(array, pa.string())
    faults = _Faults()
    faults.where(_mask(array.is_null()), "missing (null) value")
    faults.where(_mask(pc.equal(pc.utf8_trim_whitespace(array), "")), "empty value")
    faults.check()
    encoded = pc.dictionary_encode(array)
    distinct = np.array(encoded.dictionary.to_pylist(), dtype=object)
    labels: npt.NDArray[Any] = distinct[_np(encoded.indices)]
    return labels
