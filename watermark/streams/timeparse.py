r"""Time text: ONE definition of its syntax and meaning, for replay, the Spark path and the Arrow path.

A time is an int64 number of epoch milliseconds. Text gives it in one of :data:`TIME_FORMATS`:

``epoch_ms``
    A decimal integer of milliseconds, optionally signed (``+``/``-``), optionally followed by a point and
    zeros only (``"12."``, ``"12.000"``); any value of the int64 range, leading zeros allowed. Not
    accepted: other fractions (``"12.5"``), exponents (``"1e3"``), digit separators.
``epoch_s``
    A decimal number of seconds (``"12"``, ``"-1.5"``, ``".25"``), rounded to the nearest millisecond, halves
    away from zero; ``|seconds|`` at most :data:`MAX_ABS_SECONDS`. (Replay only.)
``iso``
    ISO-8601: ``YYYY-MM-DD``, optionally followed by ``T``, ``t`` or a space and ``hh``, ``hh:mm`` or
    ``hh:mm:ss``, the seconds optionally with a fraction of any number of digits after ``.`` or ``,``
    (truncated to the millisecond: ``.1239`` is 123 ms, also before 1970, where that is toward the
    earlier time), then optionally, after optional white space, a zone: ``Z``/``z`` (UTC) or an offset
    ``+hh``, ``+hhmm`` or ``+hh:mm`` (hours 0-23, minutes 0-59; also ``-``). **A time without a zone is
    UTC** (never the reader's or Spark's session time zone). The date is proleptic Gregorian, years
    0000-9999; hours 00-23, minutes and seconds 00-59 (no leap second, no ``24:00``).

In every format, white space (space, tab, line feed, form feed, carriage return) around the text is
ignored, and empty or all-white text is missing, not a time.

The streaming job (Spark path) accepts :data:`JOB_FORMATS`: a text is ``epoch_ms`` when it has that form,
else ``iso`` (the two forms never overlap). :func:`spark_epoch_ms` builds its Spark SQL expression from the
same regular expressions (:data:`EPOCH_MS_RE`, :data:`ISO_RE`, valid in RE2, which pyarrow uses, and, once
:func:`java_regex` renames the groups, in Java, which Spark uses) and the same calendar arithmetic
(:func:`civil_ms`, written once over numpy arrays or Spark columns), so it does not depend on Spark's
timestamp parser or session time zone. :func:`parse_job_text` is its pyarrow/numpy twin
(``tests/unit/watermark/streams/test_timeparse.py`` holds all of them to the same answers on a corpus of
texts). One instant
given as text to a command or a DAG (the backfill's interval, say) has the same syntax and meaning:
:func:`instant_ms`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "EPOCH_MS_RE",
    "EPOCH_S_RE",
    "FORMAT_NAMES",
    "ISO_RE",
    "JOB_FORMATS",
    "MAX_ABS_SECONDS",
    "TIME_FORMATS",
    "Parsed",
    "civil_ms",
    "group_index",
    "instant_ms",
    "java_regex",
    "parse_job_text",
    "parse_text",
    "spark_epoch_ms",
]

TIME_FORMATS = ("epoch_ms", "epoch_s", "iso")
#: The streaming job's time syntax: integral epoch milliseconds, else ISO-8601.
JOB_FORMATS = ("epoch_ms", "iso")
FORMAT_NAMES = {
    "epoch_ms": "an integer epoch_ms time",
    "epoch_s": "an epoch_s number",
    "iso": "an ISO-8601 time",
}

#: |seconds| must stay below this for seconds * 1000 (+ rounding) to fit in int64.
MAX_ABS_SECONDS = (2**63 - 1) // 1000 - 1
MS_PER_DAY = 86_400_000
_INT64_MAX_DIGITS = {"": "9223372036854775807", "-": "9223372036854775808"}

# The accepted forms, in the common subset of RE2 and Java regular expressions: explicit character classes
# (Java's \s and $ mean more than RE2's), \A and \z anchors, groups named as Java allows (letters, digits).
_WS = "[ \\t\\n\\f\\r]*"
_D = "[0-9]"
EPOCH_MS_RE = rf"\A{_WS}(?:\+|(?P<neg>-))?(?P<int>{_D}+)(?:\.0*)?{_WS}\z"
EPOCH_S_RE = rf"\A{_WS}(?P<sign>[+-]?)(?P<int>{_D}*)(?:\.(?P<frac>{_D}*))?{_WS}\z"
ISO_RE = (
    rf"\A{_WS}(?P<year>{_D}{{4}})-(?P<month>{_D}{{2}})-(?P<day>{_D}{{2}})"
    rf"(?:[Tt ](?P<hour>{_D}{{2}})(?::(?P<minute>{_D}{{2}})(?::(?P<second>{_D}{{2}})"
    rf"(?:[.,](?P<fraction>{_D}+))?)?)?)?"
    rf"{_WS}(?:(?P<utc>[Zz])|(?P<zsign>[+-])(?P<zhour>{_D}{{2}})(?::?(?P<zminute>{_D}{{2}}))?)?{_WS}\z"
)
_PATTERNS = {"epoch_ms": EPOCH_MS_RE, "epoch_s": EPOCH_S_RE, "iso": ISO_RE}

BoolArray = npt.NDArray[np.bool_]
Int64Array = npt.NDArray[np.int64]


def java_regex(pattern: str) -> str:
    """The pattern in Java's syntax (Spark's ``rlike``, ``regexp_extract``): named groups as ``(?<name>``."""
    return pattern.replace("(?P<", "(?<")


def group_index(pattern: str) -> dict[str, int]:
    """The number of each named group (as ``regexp_extract`` takes it; RE2, Java and Python agree)."""
    return dict(re.compile(pattern.replace("\\A", "^").replace("\\z", "$")).groupindex)


# --------------------------------------------------------------------------------------------------
# The meaning of ISO-8601 parts, written once for numpy arrays and Spark columns.


class _Ops:
    """What :func:`civil_ms` needs beyond + - * % and comparisons: a choice and a division."""

    def __init__(self, where: Callable[[Any, Any, Any], Any], div: Callable[[Any, int], Any]) -> None:
        self.where = where
        self.div = div  # of a non-negative integer by a positive constant, rounded down


NUMPY_OPS = _Ops(np.where, np.floor_divide)


def civil_ms(parts: dict[str, Any], ops: _Ops = NUMPY_OPS) -> tuple[Any, Any, Any, Any]:
    """Epoch ms of ISO-8601 parts, and whether the date, the time of day and the offset are valid.

    ``parts`` holds integers (0 where the text has no such part): ``year`` (0-9999), ``month``, ``day``,
    ``hour``, ``minute``, ``second``, ``milli`` (the fraction's first three digits), ``zsign`` (1 or -1),
    ``zhour`` and ``zminute``. The date is proleptic Gregorian (H. Hinnant's days from civil, the years
    counted from March and shifted by 400 so that every division is of a non-negative number).
    """
    year, month, day = parts["year"], parts["month"], parts["day"]
    where, div = ops.where, ops.div
    leap = ((year % 4) == 0) & (((year % 100) != 0) | ((year % 400) == 0))
    month_days = where(month == 2, where(leap, 29, 28), 30 + (month + div(month, 8)) % 2)
    date_ok = (month >= 1) & (month <= 12) & (day >= 1) & (day <= month_days)
    time_ok = (parts["hour"] <= 23) & (parts["minute"] <= 59) & (parts["second"] <= 59)
    offset_ok = (parts["zhour"] <= 23) & (parts["zminute"] <= 59)
    shifted = year + 400 - where(month <= 2, 1, 0)  # years from March, 400 years on: never negative
    day_of_year = div(153 * ((month + 9) % 12) + 2, 5) + day - 1
    days = shifted * 365 + div(shifted, 4) - div(shifted, 100) + div(shifted, 400) + day_of_year - 865_565
    clock = ((parts["hour"] * 60 + parts["minute"]) * 60 + parts["second"]) * 1000 + parts["milli"]
    offset = parts["zsign"] * (parts["zhour"] * 3_600_000 + parts["zminute"] * 60_000)
    return days * MS_PER_DAY + clock - offset, date_ok, time_ok, offset_ok


# --------------------------------------------------------------------------------------------------
# pyarrow/numpy: replay (watermark.streams.recorded) and the reference for the job's syntax.


class Parsed:
    """Epoch ms per row (0 where rejected) and, per row, the first reason it was rejected (or None)."""

    def __init__(self, n: int) -> None:
        self.ms: Int64Array = np.zeros(n, dtype=np.int64)
        self.bad: BoolArray = np.zeros(n, dtype=bool)
        self.reasons: npt.NDArray[Any] = np.full(n, None, dtype=object)

    def reject(self, rows: BoolArray, reason: str) -> None:
        """Reject ``rows`` for ``reason``, unless an earlier check already did."""
        new = rows & ~self.bad
        if new.any():
            self.reasons[new] = reason
            self.bad |= new

    def first(self) -> tuple[int, str] | None:
        """The first rejected row and its reason, if any."""
        if not self.bad.any():
            return None
        index = int(np.argmax(self.bad))
        return index, str(self.reasons[index])


def _np(array: Any) -> npt.NDArray[Any]:
    out: npt.NDArray[Any] = array.to_numpy(zero_copy_only=False)
    return out


def _mask(array: Any) -> BoolArray:
    import pyarrow.compute as pc

    return _np(pc.fill_null(array, False)).astype(bool, copy=False)


def _digits(array: Any) -> Int64Array:
    """Digit strings of at most 18 digits (null or empty meaning 0) as int64."""
    import pyarrow as pa
    import pyarrow.compute as pc

    filled = pc.fill_null(array, "")
    filled = pc.if_else(pc.equal(filled, ""), "0", filled)
    return np.array(_np(pc.cast(filled, pa.int64())), dtype=np.int64)


def _without_leading_zeros(array: Any) -> Any:
    import pyarrow.compute as pc

    stripped = pc.utf8_ltrim(pc.fill_null(array, ""), characters="0")
    return pc.if_else(pc.equal(stripped, ""), "0", stripped)


def _fast(array: Any, time_format: str) -> Int64Array | None:
    """The plain forms arrow casts directly; None when the column needs the general parser.

    Each cast is first tried on the first value alone, because a failing cast of a large column is slow.
    Every form accepted here is accepted, with the same meaning, by the general parser.
    """
    import decimal

    import pyarrow as pa
    import pyarrow.compute as pc

    if array.null_count or not len(array):
        return None
    targets = {
        "epoch_ms": [pa.int64()],
        "epoch_s": [pa.int64(), pa.decimal128(20, 3)],
        "iso": [pa.timestamp("ms"), pa.timestamp("ms", tz="UTC")],
    }[time_format]
    for target in targets:
        try:
            pc.cast(array.slice(0, 1), target)
            converted = pc.cast(array, target)
            if pa.types.is_decimal(target):  # seconds with up to 3 decimals, exactly
                if pc.any(pc.match_substring_regex(array, "[eE]")).as_py():
                    continue  # exponent notation is not part of the accepted syntax
                scale = pa.scalar(decimal.Decimal(1000), pa.decimal128(4, 0))
                return np.array(_np(pc.cast(pc.multiply(converted, scale), pa.int64())), dtype=np.int64)
            values = np.array(_np(pc.cast(converted, pa.int64())), dtype=np.int64)
        except pa.ArrowInvalid:
            continue
        if time_format != "epoch_s":
            return values
        if not (np.abs(values) > MAX_ABS_SECONDS).any():
            return values * 1000
    return None


def parse_text(array: Any, time_format: str) -> Parsed:
    """Parse a pyarrow string array in ``time_format``: epoch ms, or per row the reason it is rejected."""
    import pyarrow as pa
    import pyarrow.compute as pc

    out = Parsed(len(array))
    fast = _fast(array, time_format)
    if fast is not None:
        out.ms = fast
        return out

    out.reject(_mask(array.is_null()), "missing (null) value")
    blank = _mask(pc.equal(pc.utf8_trim_whitespace(array), ""))
    out.reject(blank, "empty value")
    parts = pc.extract_regex(array, _PATTERNS[time_format])
    out.reject(_mask(parts.is_null()), f"not {FORMAT_NAMES[time_format]}")

    def part(name: str) -> Any:
        return pc.struct_field(parts, name)

    if time_format == "epoch_ms":
        sign = pc.fill_null(part("neg"), "")
        digits = _without_leading_zeros(part("int"))
        length = _np(pc.utf8_length(digits))
        limit = pc.if_else(pc.equal(sign, "-"), _INT64_MAX_DIGITS["-"], _INT64_MAX_DIGITS[""])
        too_big = (length > 19) | ((length == 19) & _mask(pc.greater(digits, limit)))
        out.reject(too_big, "value out of the int64 range")
        signed = pc.if_else(pa.array(out.bad), "0", pc.binary_join_element_wise(sign, digits, ""))
        ms = np.array(_np(pc.cast(signed, pa.int64())), dtype=np.int64)
    elif time_format == "epoch_s":
        whole, frac = part("int"), part("frac")
        no_digits = _mask(pc.and_(pc.equal(whole, ""), pc.equal(frac, "")))
        out.reject(no_digits, f"not {FORMAT_NAMES[time_format]}")
        whole = _without_leading_zeros(whole)
        too_big = _np(pc.utf8_length(whole)) > len(str(MAX_ABS_SECONDS))
        out.reject(too_big, "time out of the int64 millisecond range")
        seconds = _digits(pc.if_else(pa.array(too_big), "0", whole))
        out.reject(seconds > MAX_ABS_SECONDS, "time out of the int64 millisecond range")
        padded = pc.utf8_rpad(pc.fill_null(frac, ""), width=4, padding="0")
        millis = _digits(pc.utf8_slice_codeunits(padded, 0, 3))
        round_up = _digits(pc.utf8_slice_codeunits(padded, 3, 4)) >= 5
        magnitude = np.where(out.bad, 0, seconds * 1000 + millis + round_up)
        ms = np.where(_mask(pc.equal(part("sign"), "-")), -magnitude, magnitude)
    else:
        fraction = pc.utf8_rpad(pc.fill_null(part("fraction"), ""), width=3, padding="0")
        values = {
            name: _digits(part(name))
            for name in ("year", "month", "day", "hour", "minute", "second", "zhour", "zminute")
        }
        values["milli"] = _digits(pc.utf8_slice_codeunits(fraction, 0, 3))
        values["zsign"] = np.where(_mask(pc.equal(part("zsign"), "-")), -1, 1).astype(np.int64)
        ms, date_ok, time_ok, offset_ok = civil_ms(values)
        out.reject(~date_ok, "invalid date")
        out.reject(~time_ok, "time of day out of range")
        out.reject(~offset_ok, "UTC offset out of range")
    out.ms = np.where(out.bad, 0, ms).astype(np.int64, copy=False)
    return out


def parse_job_text(array: Any) -> Parsed:
    """The job's syntax (:data:`JOB_FORMATS`): ``epoch_ms`` where the text has that form, else ISO."""
    import pyarrow.compute as pc

    epoch, iso = parse_text(array, "epoch_ms"), parse_text(array, "iso")
    numeric = _mask(pc.match_substring_regex(array, EPOCH_MS_RE))
    out = Parsed(len(array))
    out.ms = np.where(numeric, epoch.ms, iso.ms)
    out.bad = np.where(numeric, epoch.bad, iso.bad)
    out.reasons = np.where(numeric, epoch.reasons, iso.reasons)
    return out


def instant_ms(text: str) -> int:
    """Epoch ms of one instant in the job's syntax (:data:`JOB_FORMATS`); an ISO time without a zone is UTC.

    The instants given to commands and DAGs (the backfill's interval, the re-tuning's end, a manual data
    quality interval) follow this rule, the job's own (:func:`parse_job_text`), so a text means the same
    instant everywhere: a time without a zone is UTC, never the local time zone.

    >>> instant_ms("2026-11-22T10:00:00+00:00"), instant_ms("2026-11-22T10:00:00"), instant_ms("1500")
    (1795341600000, 1795341600000, 1500)
    >>> instant_ms("2026-11-22T11:00:00+01:00") == instant_ms(" 2026-11-22 10:00Z ")
    True
    >>> instant_ms("22/11/2026")
    Traceback (most recent call last):
    ...
    ValueError: '22/11/2026' is not a time (not an ISO-8601 time): give epoch milliseconds or ISO-8601
    """
    import pyarrow as pa

    parsed = parse_job_text(pa.array([text], pa.string()))
    rejected = parsed.first()
    if rejected is not None:
        msg = f"{text!r} is not a time ({rejected[1]}): give epoch milliseconds or ISO-8601"
        raise ValueError(msg)
    return int(parsed.ms[0])


# --------------------------------------------------------------------------------------------------
# Spark: the same syntax and meaning as a native expression.


def _spark_ops() -> _Ops:
    from pyspark.sql import functions as F

    return _Ops(
        lambda cond, a, b: F.when(cond, a).otherwise(b),
        lambda a, b: F.floor(a / F.lit(b)),  # exact: the operands stay far below 2**53
    )


def spark_epoch_ms(text: Any) -> Any:
    """A Spark column of epoch ms from a string column in the job's syntax (:data:`JOB_FORMATS`), else null.

    The same answers as :func:`parse_job_text` (null where it rejects a row), whatever the session time zone
    or ANSI mode: the regular expressions pick the parts, integer arithmetic gives the time. Plain digits
    are cast at once; otherwise each regular expression runs at most once per row (``regexp_replace``
    writes the parts as one list; the text is unchanged exactly when it does not match), and no cast can
    fail, so no exception is thrown per row. The ISO arithmetic refers to its parts many times: it runs in a
    lambda (``transform`` over a one-element array), which binds each value once and keeps the generated
    code small wherever the expression is used (no reliance on Spark's common subexpression elimination).
    """
    from pyspark.sql import functions as F

    def let(value: Any, body: Callable[[Any], Any]) -> Any:
        """``body(value)`` with ``value`` evaluated once."""
        return F.get(F.transform(F.array(value), body), 0)

    # Each part with a prefix or suffix that gives it a value when the part is absent: "0" before a number
    # (0), "000" after the fraction (its first three digits are the milliseconds), "1" after the sign.
    names = group_index(ISO_RE)
    iso_list = ",".join(
        {"fraction": "${fraction}000", "zsign": "${zsign}1"}.get(name, f"0${{{name}}}") for name in names
    )

    def iso_ms(listed: Any) -> Any:
        numbers = ("year", "month", "day", "hour", "minute", "second", "zsign", "zhour", "zminute")
        parts = {name: F.get(listed, names[name] - 1).cast("long") for name in numbers}
        parts["milli"] = F.substring(F.get(listed, names["fraction"] - 1), 1, 3).cast("long")
        ms, date_ok, time_ok, offset_ok = civil_ms(parts, _spark_ops())
        return F.when(date_ok & time_ok & offset_ok, ms)

    def iso(replaced: Any) -> Any:
        return F.when(replaced != text, let(F.split(replaced, ",", -1), iso_ms))

    def epoch(replaced: Any) -> Any:
        return F.when(replaced != text, F.substring(replaced, 2, 1 << 30).try_cast("long"))

    # Every ISO time has a "-" after the year: the regular expression only runs on texts that have one.
    iso_text = F.regexp_replace(text, java_regex(ISO_RE), iso_list)
    epoch_text = F.regexp_replace(text, java_regex(EPOCH_MS_RE), "#${neg}${int}")  # "#": never a match's text
    plain = F.length(text).between(1, 18) & (F.translate(text, "0123456789", "") == "")
    # One mention of each: an expression in several branches would be evaluated for every row.
    return F.when(plain, text.cast("long")).otherwise(
        F.coalesce(F.when(text.contains("-"), let(iso_text, iso)), let(epoch_text, epoch))
    )
