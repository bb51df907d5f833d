"""Read the requested columns of a recorded stream's CSV or Parquet file as arrow arrays.

:func:`read_csv` reads CSV columns all as text (no type is inferred); :func:`read_parquet` reads Parquet
columns with their native types. Both return the columns by role (``event_time``, ``partition``, ...) with
a label for messages, and a function from a data row to its file line (CSV only). Any problem raises
:class:`~watermark.streams.input_error.InputError`. pyarrow is imported lazily, inside the functions that
need it, so importing this module stays cheap.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from watermark.streams.input_error import InputError, arrow_error_text, list_columns

__all__ = ["Columns", "LineOf", "check_delimiter", "is_parquet", "read_csv", "read_parquet"]

_PARQUET_SUFFIXES = (".parquet", ".pq")
_PARQUET_MAGIC = b"PAR1"

Columns = dict[str, tuple[str, Any]]  # role -> (label for messages, arrow array)
LineOf = Callable[[int], int | None]  # data row index -> file line, when known


def check_delimiter(source: str, delimiter: str) -> str:
    """Validate the CSV delimiter: one character, not a quote or a line break."""
    if delimiter == "\\t":
        delimiter = "\t"
    if not isinstance(delimiter, str) or len(delimiter) != 1 or delimiter in '"\r\n':
        msg = f"{source}: invalid delimiter {delimiter!r}: use a single character, not a quote or line break"
        raise InputError(msg)
    return delimiter


def is_parquet(source: str) -> bool:
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
        msg = f"{source}: cannot read the file: {arrow_error_text(exc)}"
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
    return InputError(f"{source}: column {column!r} not found{hint}; columns are: {list_columns(names)}")


def read_csv(source: str, roles: dict[str, str], delimiter: str, header: bool) -> tuple[Columns, LineOf]:
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
        text = arrow_error_text(exc)
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
        msg = f"{source}: cannot read CSV: {arrow_error_text(exc)}"
        raise InputError(msg) from None
    if table.num_rows == 0:
        msg = f"{source}: no data rows"
        raise InputError(msg)
    columns = {role: (label, table.column(name).combine_chunks()) for role, (name, label) in fields.items()}

    def line_of(index: int) -> int:
        return _csv_line_of_row(source, delimiter, header, index)

    return columns, line_of


def read_parquet(source: str, roles: dict[str, str], header: bool) -> tuple[Columns, LineOf]:
    """Read the requested Parquet columns with their native types."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(source)
        names: list[str] = list(parquet.schema_arrow.names)
    except (pa.ArrowException, OSError) as exc:
        msg = f"{source}: cannot read Parquet: {arrow_error_text(exc)}"
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
        msg = f"{source}: cannot read Parquet: {arrow_error_text(exc)}"
        raise InputError(msg) from None
    columns = {role: (label, table.column(name).combine_chunks()) for role, (name, label) in fields.items()}

    def line_of(index: int) -> None:
        return None

    return columns, line_of
