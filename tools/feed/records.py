"""The feed's records: read from a recorded stream or generated, in arrival order, and their JSON text.

Records carry the job's default input fields, in this order:

=================== ======= ==========================================================================
field               type    meaning
=================== ======= ==========================================================================
``event_id``        string  0-based row number in the source file, or the generator's event id
``key``             string  the ``--key`` column; else the partition; else ``"all"``
``partition``       string  the ``--partition`` column (omitted when the source has none)
``event_time_ms``   int64   event time, epoch milliseconds
``arrival_time_ms`` int64   recorded arrival time, epoch ms (omitted with ``--no-arrival-time``)
``value``           double  the ``--value`` column, else 1.0
=================== ======= ==========================================================================

:func:`records_from_file` reads a recorded stream (a CSV or Parquet file, through
:func:`watermark.streams.recorded.read_stream`), :func:`records_from_synthetic` generates one
(:func:`watermark.streams.synthetic.generate`); both sort it by arrival time. :func:`normalise` and
:func:`by_arrival` check and order the records a writer is given, :func:`json_lines` writes each as the
JSON object a landing file's line or a Kafka record's value holds.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "FIELDS",
    "by_arrival",
    "json_lines",
    "normalise",
    "records_from_file",
    "records_from_synthetic",
    "utc",
]

#: The record fields in output order, with their arrow types; ``partition`` is optional.
FIELDS: dict[str, pa.DataType] = {
    "event_id": pa.string(),
    "key": pa.string(),
    "partition": pa.string(),
    "event_time_ms": pa.int64(),
    "arrival_time_ms": pa.int64(),
    "value": pa.float64(),
}
_OPTIONAL_FIELDS = ("partition",)

_JSON_SPECIAL = r'["\\\x00-\x1f]'  # characters a JSON string must escape (RE2 syntax)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def records_from_file(
    path: str | os.PathLike[str],
    *,
    event_time: str,
    arrival_time: str,
    partition: str | None = None,
    key: str | None = None,
    value: str | None = None,
    delimiter: str = ",",
    header: bool = True,
    time_format: str = "epoch_ms",
) -> pa.Table:
    """Read a recorded stream into feed records, in arrival order.

    Parameters
    ----------
    path : str or os.PathLike
        A CSV or Parquet file, as for :func:`watermark.streams.recorded.read_stream`.
    event_time, arrival_time : str
        The event-time and arrival-time columns (names, or 0-based indices with ``header=False``).
    partition : str, optional
        The source-partition column; without it the records have no ``partition`` field.
    key : str, optional
        The aggregation-key column; by default the key is the partition, else ``"all"``.
    value : str, optional
        A numeric column for ``value``; by default every value is 1.0.
    delimiter : str, default ","
        CSV field separator.
    header : bool, default True
        Whether the first CSV row holds column names.
    time_format : {"epoch_ms", "epoch_s", "iso"}, default "epoch_ms"
        How time text is written (see :func:`watermark.streams.recorded.read_stream`).

    Returns
    -------
    pyarrow.Table
        The records (fields as in :data:`FIELDS`), sorted by arrival time; ties keep file order.
        ``event_id`` is the 0-based data row number in the file.

    Raises
    ------
    watermark.streams.input_error.InputError
        If the file cannot be read or holds a bad time, label or value; the message is one line.

    """
    from watermark.streams.recorded import read_stream

    stream = read_stream(
        path,
        event_time=event_time,
        arrival_time=arrival_time,
        partition=partition,
        key=key,
        delimiter=delimiter,
        header=header,
        time_format=time_format,
        value=value,
    )
    n = len(stream)
    values = np.ones(n, dtype=np.float64) if stream.value is None else stream.value
    keys = stream.key if stream.key is not None else stream.partition
    return _records(
        event_id=np.arange(n, dtype=np.int64),
        key=np.full(n, "all", dtype=object) if keys is None else keys,
        partition=stream.partition,
        te_ms=stream.te_ms,
        tp_ms=stream.tp_ms,
        value=values,
    )


def records_from_synthetic(events: int, *, seed: int = 0, partitions: int = 8, keys: int = 1_000) -> pa.Table:
    """Generate a synthetic out-of-order stream as feed records, in arrival order.

    Parameters
    ----------
    events : int
        Number of records, >= 1.
    seed : int, default 0
        Seed of :func:`watermark.streams.synthetic.generate`.
    partitions : int, default 8
        Number of source partitions; ``partition`` is the partition code as text (``"0"``, ``"1"``, ...).
    keys : int, default 1000
        Number of aggregation keys; ``key`` is the key code as text.

    Returns
    -------
    pyarrow.Table
        The records (fields as in :data:`FIELDS`), sorted by arrival time, ties by ``event_id``;
        ``event_id`` is the generator's event id as text.

    Raises
    ------
    ValueError
        If a parameter is invalid.

    Examples
    --------
    >>> table = records_from_synthetic(100, partitions=3, seed=1)
    >>> table.num_rows, table.column_names
    (100, ['event_id', 'key', 'partition', 'event_time_ms', 'arrival_time_ms', 'value'])

    """
    from watermark.streams.synthetic import generate

    stream = generate(events=events, seed=seed, partitions=partitions, keys=keys)
    return _records(
        event_id=stream.event_id,
        key=stream.key,
        partition=stream.partition,
        te_ms=stream.te_ms,
        tp_ms=stream.tp_ms,
        value=stream.value,
    )


def _records(
    *,
    event_id: npt.NDArray[Any],
    key: npt.NDArray[Any],
    partition: npt.NDArray[Any] | None,
    te_ms: npt.NDArray[np.int64],
    tp_ms: npt.NDArray[np.int64],
    value: npt.NDArray[np.float64],
) -> pa.Table:
    """Build the record table, stably sorted by arrival time."""
    order = np.argsort(tp_ms, kind="stable")

    def text(array: npt.NDArray[Any]) -> pa.Array:
        picked = array[order]
        if picked.dtype == object:
            return pa.array(picked, type=pa.string())
        return pc.cast(pa.array(picked), pa.string())

    columns: dict[str, pa.Array] = {"event_id": text(event_id), "key": text(key)}
    if partition is not None:
        columns["partition"] = text(partition)
    columns["event_time_ms"] = pa.array(te_ms[order], type=pa.int64())
    columns["arrival_time_ms"] = pa.array(tp_ms[order], type=pa.int64())
    columns["value"] = pa.array(value[order], type=pa.float64())
    return pa.table(columns)


def normalise(records: pa.Table) -> pa.Table:
    """Select the record fields in output order, cast to their types; reject nulls and non-finite values."""
    names = [name for name in FIELDS if name in records.column_names]
    missing = [name for name in FIELDS if name not in names and name not in _OPTIONAL_FIELDS]
    if missing:
        present = ", ".join(records.column_names) or "(none)"
        msg = f"the records lack the column(s) {', '.join(missing)}; columns are: {present}"
        raise ValueError(msg)
    columns = {}
    for name in names:
        column = records.column(name)
        if column.null_count:
            msg = f"the records' {name} column holds {column.null_count:,} null value(s)"
            raise ValueError(msg)
        try:
            columns[name] = pc.cast(column, FIELDS[name])
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            msg = f"the records' {name} column ({column.type}) cannot be cast to {FIELDS[name]}: {exc}"
            raise ValueError(msg) from None
    table = pa.table(columns)
    if table.num_rows and not pc.all(pc.is_finite(table.column("value"))).as_py():
        msg = "the records' value column holds NaN or infinite values, which JSON cannot carry"
        raise ValueError(msg)
    return table


def by_arrival(table: pa.Table) -> tuple[pa.Table, npt.NDArray[np.int64]]:
    """The records stably sorted by ``arrival_time_ms`` (unchanged when already sorted), and those times."""
    tp_ms = np.asarray(table.column("arrival_time_ms").to_numpy(), dtype=np.int64)
    if len(tp_ms) > 1 and bool((np.diff(tp_ms) < 0).any()):
        order = np.argsort(tp_ms, kind="stable")
        table, tp_ms = table.take(pa.array(order)), tp_ms[order]
    return table, tp_ms


def json_lines(table: pa.Table) -> pa.ChunkedArray:
    """One JSON object per record, each ending in a newline, fields in table order."""
    parts: list[Any] = []
    for index, name in enumerate(table.column_names):
        parts.append(("{" if index == 0 else ",") + json.dumps(name) + ":")
        parts.append(_json_values(table.column(name)))
    parts.append("}\n")
    return pc.binary_join_element_wise(*parts, "")


def _json_values(column: pa.ChunkedArray) -> Any:
    """JSON text of each value of a string, int64 or float64 column (finite values only)."""
    if pa.types.is_string(column.type):
        if pc.any(pc.match_substring_regex(column, _JSON_SPECIAL)).as_py():
            return pa.array([json.dumps(v, ensure_ascii=False) for v in column.to_pylist()], pa.string())
        return pc.binary_join_element_wise('"', column, '"', "")
    text = pc.cast(column, pa.string())
    if pa.types.is_floating(column.type):  # arrow writes 1.0 as "1": keep it a JSON double
        text = pc.if_else(
            pc.match_substring_regex(text, "[.e]"), text, pc.binary_join_element_wise(text, ".0", "")
        )
    return text


def utc(ms: int) -> str:
    """Epoch milliseconds as ``YYYY-MM-DDTHH:MM:SSZ`` (or ``<ms> ms`` when out of the calendar range)."""
    try:
        return (_EPOCH + timedelta(milliseconds=ms)).strftime("%Y-%m-%dT%H:%M:%SZ")
    except OverflowError:
        return f"{ms} ms"
