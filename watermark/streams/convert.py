"""Convert a recorded stream's arrow columns to numpy: times as int64 epoch ms, labels, numbers.

A bad value raises :class:`RowFault` (its 0-based row and the reason), a column that cannot be used at all
:class:`ColumnFault`; the reader (:func:`watermark.streams.recorded.read_stream`) turns them into an
:class:`~watermark.streams.input_error.InputError` naming the file, row and column. Time text is parsed by
:mod:`watermark.streams.timeparse`. pyarrow is imported lazily, inside the functions that need it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from watermark.streams.timeparse import MAX_ABS_SECONDS, MS_PER_DAY, parse_text

__all__ = ["ColumnFault", "Int64Array", "RowFault", "to_epoch_ms", "to_floats", "to_labels"]

_MAX_ABS_MS_FLOAT = 2.0**63

Int64Array = npt.NDArray[np.int64]


class RowFault(Exception):
    """The value at ``index`` (0-based) is bad for ``reason``."""

    def __init__(self, index: int, reason: str) -> None:
        super().__init__(reason)
        self.index = index
        self.reason = reason


class ColumnFault(Exception):
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
            raise RowFault(self.index, self.reason)


def _np(array: Any) -> npt.NDArray[Any]:
    """Convert a null-free arrow array to numpy."""
    out: npt.NDArray[Any] = array.to_numpy(zero_copy_only=False)
    return out


def _mask(array: Any) -> npt.NDArray[np.bool_]:
    """Convert an arrow boolean array to a numpy mask, nulls counting as false."""
    import pyarrow.compute as pc

    return _np(pc.fill_null(array, False)).astype(bool, copy=False)


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


def to_floats(array: Any) -> npt.NDArray[np.float64]:
    """A numeric column (text or native Parquet type) as finite float64; the first bad row is a fault."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = array.type
    if pa.types.is_dictionary(kind):
        array = pc.cast(array, kind.value_type)
        kind = array.type
    if array.null_count:
        raise RowFault(int(np.argmax(_mask(array.is_null()))), "missing (null) value")
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind):
        trimmed = pc.utf8_trim_whitespace(pc.cast(array, pa.string()))
        blank = pc.equal(trimmed, "")
        if pc.any(blank).as_py():
            raise RowFault(int(np.argmax(_mask(blank))), "empty value")
        try:
            floats = pc.cast(trimmed, pa.float64())
        except pa.ArrowInvalid:
            raise RowFault(_first_cast_failure(trimmed, pa.float64()), "not a number") from None
    elif pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind):
        floats = pc.cast(array, pa.float64(), safe=False)
    else:
        msg = f"has type {kind}, which cannot hold numbers"
        raise ColumnFault(msg)
    values = np.asarray(floats.to_numpy(zero_copy_only=False), dtype=np.float64)
    finite = np.isfinite(values)
    if not finite.all():
        raise RowFault(int(np.argmin(finite)), "not a finite number")
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


def to_epoch_ms(array: Any, time_format: str) -> Int64Array:
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
        raise ColumnFault(msg)
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
    raise ColumnFault(msg)


def _text_to_epoch_ms(array: Any, time_format: str) -> Int64Array:
    """Parse a string column with the shared parser (:mod:`watermark.streams.timeparse`): bad rows fault."""
    parsed = parse_text(array, time_format)
    first = parsed.first()
    if first is not None:
        raise RowFault(*first)
    return parsed.ms


def to_labels(array: Any) -> npt.NDArray[Any]:
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
