"""Validation: each record's fields checked and typed with native Spark expressions, or a quarantine reason.

The source gives every record as ``(file, line, <fields>, <corrupt record>)`` with each field as text (or,
for JSON, times as integers and the value as a number: :func:`typed_json_schema`). :func:`validate` trims,
parses and types the fields and gives the first of :data:`QUARANTINE_REASONS` that applies, or null.
"""

from __future__ import annotations

from typing import Any

from jobs.common.schemas import QUARANTINE_REASONS
from jobs.stream.options import Fields
from jobs.stream.sources.record_rules import DEFAULT_MAX_ARRIVAL_AHEAD_MS, DEFAULT_MAX_EVENT_AHEAD_MS
from watermark.streams.timeparse import spark_epoch_ms

__all__ = [
    "CORRUPT",
    "QUARANTINE_REASONS",
    "SOURCE_COLUMNS",
    "text_schema",
    "typed_json_schema",
    "validate",
    "validation_steps",
]

#: The corrupt-record column: a record Spark could not parse with the schema, whole.
CORRUPT = "__corrupt_record__"
#: Columns of a source record that give a slot's value instead of the record's own field (Kafka).
SOURCE_COLUMNS = {"partition": "_source_partition", "tp": "_source_arrival_ms"}


#: ``quarantine.raw`` keeps at most this many bytes of a record, then ``…[truncated, N bytes]``.
RAW_MAX_BYTES = 1024

#: Slots whose values are epoch milliseconds, and the slot whose value is a double.
_TIME_SLOTS = ("event_time", "arrival_time")
_VALUE_SLOT = "value"


def typed_json_schema(fields: Fields) -> Any:
    """The schema JSON landing files are read with: times as LONG, the value as DOUBLE, the rest as text.

    A field name shared by slots of different kinds (say key and partition both ``device``) stays text. A
    record whose fields do not parse with these types lands whole in the corrupt-record column, and
    :func:`validate` re-reads it as text (:func:`text_schema`) to accept ISO-8601 times and give reasons.
    """
    from pyspark.sql import types as T

    kinds: dict[str, set[str]] = {}
    for slot, name in vars(fields).items():
        kinds.setdefault(name, set()).add(
            "long" if slot in _TIME_SLOTS else "double" if slot == _VALUE_SLOT else "text"
        )
    types = {"long": T.LongType(), "double": T.DoubleType(), "text": T.StringType()}
    return T.StructType(
        [T.StructField(n, types[next(iter(k))] if len(k) == 1 else T.StringType()) for n, k in kinds.items()]
        + [T.StructField(CORRUPT, T.StringType())]
    )


def text_schema(names: list[str]) -> Any:
    """Every field as text, plus the corrupt-record column."""
    from pyspark.sql import types as T

    return T.StructType([T.StructField(n, T.StringType()) for n in [*names, CORRUPT]])


def validate(
    records: Any,
    fields: Fields,
    *,
    ingest_ms: int,
    future_bound_ms: int,
    max_field_bytes: int,
    max_event_ahead_ms: int = DEFAULT_MAX_EVENT_AHEAD_MS,
    max_arrival_ahead_ms: int = DEFAULT_MAX_ARRIVAL_AHEAD_MS,
    malformed: str = "malformed_json",
    reread_corrupt: bool = False,
    plans: dict[Any, list[list[Any]]] | None = None,
    too_long_marker: str | None = None,
) -> Any:
    """Typed columns and ``reason`` (null for a valid row) from records.

    A field read as text is checked here (trimmed, then parsed, with a reason when it does not parse). A
    time field read as an integer, or a value read as a number, is taken as it is. With
    ``reread_corrupt`` (JSON read with :func:`typed_json_schema`), a record in the corrupt-record column is
    parsed again with every field as text, and validated as text: only a record that is not JSON at all is
    ``malformed``. The work is split in projections (re-read, text, typed values, reason) so that each
    expression is evaluated once per row. ``raw`` is the line of a malformed or re-read record and the
    record's fields re-serialised as JSON otherwise (only the quarantine action computes it).

    ``too_long_marker``: the start of the placeholder lines a screened copy holds in place of lines too long
    to read (:mod:`jobs.stream.sources.long_lines`); such a line is ``record_too_long``, its ``raw`` the
    line's head and ``…[truncated, N bytes]``.

    Building the expressions takes a few thousand calls into the JVM; ``plans``, a dict the caller keeps
    across batches, holds them for the next batch with the same input types and options.
    """
    from pyspark.sql import functions as F

    types = tuple((f.name, f.dataType.simpleString()) for f in records.schema.fields)
    key = (
        types,
        fields,
        future_bound_ms,
        max_field_bytes,
        max_event_ahead_ms,
        max_arrival_ahead_ms,
        malformed,
        reread_corrupt,
        too_long_marker,
    )
    steps = plans.get(key) if plans is not None else None
    if steps is None:
        steps = validation_steps(
            dict(types),
            fields,
            future_bound_ms=future_bound_ms,
            max_field_bytes=max_field_bytes,
            max_event_ahead_ms=max_event_ahead_ms,
            max_arrival_ahead_ms=max_arrival_ahead_ms,
            malformed=malformed,
            reread_corrupt=reread_corrupt,
            too_long_marker=too_long_marker,
        )
        if plans is not None:
            plans[key] = steps
    frame = records.select("*", F.lit(ingest_ms).alias("_ingest_ms"))
    for step in steps:
        frame = frame.select(*step)
    return frame


def validation_steps(
    types: dict[str, str],
    fields: Fields,
    *,
    future_bound_ms: int,
    max_field_bytes: int,
    malformed: str,
    reread_corrupt: bool,
    max_event_ahead_ms: int = DEFAULT_MAX_EVENT_AHEAD_MS,
    too_long_marker: str | None = None,
    max_arrival_ahead_ms: int = DEFAULT_MAX_ARRIVAL_AHEAD_MS,
) -> list[list[Any]]:
    """The projections :func:`validate` applies to records whose columns have these Spark types.

    ``types`` maps each column to its type's simple string; the ingestion time is the column ``_ingest_ms``.
    """
    steps = _Steps(types, fields, reread_corrupt)
    return [
        *([steps.reread()] if reread_corrupt else []),
        steps.texts(max_field_bytes, too_long_marker),
        steps.typed(),
        steps.judged(future_bound_ms, max_event_ahead_ms, malformed, max_arrival_ahead_ms),
    ]


#: Spark's integral types, and the types a typed read may give each typed slot.
_INTEGRAL = ("tinyint", "smallint", "int", "bigint")
_TYPED_OK = {"te": _INTEGRAL, "tp": _INTEGRAL, "value": (*_INTEGRAL, "float", "double", "decimal")}


class _Steps:
    """The projections of :func:`validation_steps` for one input's column types and options."""

    def __init__(self, types: dict[str, str], fields: Fields, reread_corrupt: bool) -> None:
        self.types = types
        self.reread_corrupt = reread_corrupt
        self.names = list(dict.fromkeys(vars(fields).values()))
        self.slots = {
            "event_id": fields.event_id,
            "key": fields.key,
            "partition": fields.partition,
            "te": fields.event_time,
            "tp": fields.arrival_time,
            "value": fields.value,
        }
        # Slots the source itself gives (Kafka: the partition and the record timestamp), whatever the record
        # says.
        self.sourced = {slot: column for slot, column in SOURCE_COLUMNS.items() if column in types}
        # Slots read typed (or given by the source): their value as read, their text when re-read.
        self.fast_slots = [slot for slot in _TYPED_OK if self._is_typed(slot) or slot in self.sourced]

    def _is_text(self, name: str) -> bool:
        return self.types.get(name) == "string"

    def _is_typed(self, slot: str) -> bool:
        return self.types.get(self.slots[slot], "").split("(")[0] in _TYPED_OK.get(slot, ())

    @staticmethod
    def _col(name: str) -> Any:
        from pyspark.sql import functions as F

        return F.col(f"`{name}`")

    @staticmethod
    def _retyped() -> Any:
        """The record did not fit the typed read: it is in the corrupt-record column."""
        from pyspark.sql import functions as F

        return F.col(CORRUPT).isNotNull()

    def reread(self) -> list[Any]:
        """Re-read a record that did not fit the typed read, with every field as text (``_again``)."""
        from pyspark.sql import functions as F

        options = {"columnNameOfCorruptRecord": CORRUPT}
        again = F.when(self._retyped(), F.from_json(F.col(CORRUPT), text_schema(self.names), options))
        return [*[self._col(n) for n in self.types], F.col("_ingest_ms"), again.alias("_again")]

    def _source_text(self, name: str) -> Any:
        """The field as text, when there is a text form (None for a typed field of a plain read)."""
        from pyspark.sql import functions as F

        if not self.reread_corrupt:
            return self._col(name) if self._is_text(name) else None
        again = F.col("_again").getField(name)
        return F.when(self._retyped(), again).otherwise(self._col(name)) if self._is_text(name) else again

    def texts(self, max_field_bytes: int, too_long_marker: str | None = None) -> list[Any]:
        """``raw``, the record-wide checks (length, encoding, corrupt) and every slot's trimmed text."""
        from pyspark.sql import functions as F

        names, col = self.names, self._col
        texts = [c for c in map(self._source_text, names) if c is not None]
        lengths = [F.coalesce(F.octet_length(c), F.lit(0)) for c in texts]
        longest = F.greatest(*lengths) if len(lengths) > 1 else lengths[0] if lengths else F.lit(0)
        too_long = longest > F.lit(max_field_bytes)
        raw = capped_raw(F.coalesce(F.col(CORRUPT), F.to_json(F.struct(*[col(n) for n in names]))))
        if too_long_marker is not None:  # a screened copy's placeholder of a line too long to read
            placeholder = F.coalesce(F.col(CORRUPT).startswith(F.lit(too_long_marker)), F.lit(False))
            too_long = too_long | placeholder
            raw = F.when(placeholder, placeholder_raw(F.col(CORRUPT), too_long_marker)).otherwise(raw)
        corrupt = F.col("_again").getField(CORRUPT).isNotNull() if self.reread_corrupt else self._retyped()
        # Invalid UTF-8 would become U+FFFD (so different bad keys collide): a text field as read, or the
        # record's raw text (JSON's parser sets such a record aside whole, and its re-read would replace
        # them).
        as_read = [col(n) for n in names if self._is_text(n)]
        invalid = [F.coalesce(~F.is_valid_utf8(c), F.lit(False)) for c in [*as_read, F.col(CORRUPT)]]
        bad_encoding = invalid[0] if len(invalid) == 1 else F.greatest(*invalid)
        projected = [
            F.col("file"),
            F.col("line"),
            F.col("_ingest_ms"),
            raw.alias("raw"),
            too_long.alias("_too_long"),
            bad_encoding.alias("_bad_encoding"),
            F.coalesce(corrupt, F.lit(False)).alias("_corrupt"),
        ]
        for slot, name in self.slots.items():
            projected.extend(self._slot_columns(slot, name))
        return projected

    def _slot_columns(self, slot: str, name: str) -> list[Any]:
        """``_<slot>`` (the trimmed text, null when blank) and, for a fast slot, ``_<slot>_v`` (as read)."""
        from pyspark.sql import functions as F

        fast = slot in self.fast_slots
        if slot in self.sourced:
            given_col = self._col(self.sourced[slot])
            columns = [given_col.alias(f"_{slot}_v" if fast else f"_{slot}")]
            if fast:
                columns.append(F.lit(None).cast("string").alias(f"_{slot}"))
            return columns
        columns = []
        source = self._source_text(name)
        if fast:
            read = F.when(~self._retyped(), self._col(name)) if self.reread_corrupt else self._col(name)
            columns.append(read.alias(f"_{slot}_v"))
        elif source is None:
            source = self._col(name).cast("string")
        if source is not None:
            trimmed = F.trim(source)
            text_value = F.when(trimmed != "", trimmed)
        else:
            text_value = F.lit(None).cast("string")
        columns.append(text_value.alias(f"_{slot}"))
        return columns

    def _typed_value(self, slot: str, parse: Any) -> Any:
        """The typed value of ``slot``: as read when typed, else parsed from its text."""
        from pyspark.sql import functions as F

        parsed = parse(F.col(f"_{slot}"))
        if slot not in self.fast_slots:
            return parsed
        return F.coalesce(F.col(f"_{slot}_v").cast("double" if slot == "value" else "long"), parsed)

    def _given(self, slot: str) -> Any:
        """The field is there (not absent, null or blank)."""
        from pyspark.sql import functions as F

        has_text = F.col(f"_{slot}").isNotNull()
        return has_text | F.col(f"_{slot}_v").isNotNull() if slot in self.fast_slots else has_text

    def typed(self) -> list[Any]:
        """The typed event time, arrival time (the ingestion time when not given) and value."""
        from pyspark.sql import functions as F

        carried = [
            *["file", "line", "_ingest_ms", "raw", "_too_long", "_bad_encoding", "_corrupt"],
            *[f"_{s}" for s in self.slots],
        ]
        # Times in the job's time syntax and meaning (:mod:`watermark.streams.timeparse`).
        event = self._typed_value("te", spark_epoch_ms)
        arrival = F.coalesce(
            self._typed_value("tp", spark_epoch_ms), F.when(~self._given("tp"), F.col("_ingest_ms"))
        )
        return [
            *[F.col(c) for c in carried],
            event.alias("event_time_ms"),
            arrival.alias("arrival_time_ms"),
            self._typed_value("value", lambda v: v.try_cast("double")).alias("value"),
            self._given("te").alias("_te_given"),
            self._given("value").alias("_value_given"),
        ]

    def judged(
        self,
        future_bound_ms: int,
        max_event_ahead_ms: int,
        malformed: str,
        max_arrival_ahead_ms: int = DEFAULT_MAX_ARRIVAL_AHEAD_MS,
    ) -> list[Any]:
        """The valid row's columns and its ``reason``: the first of the quarantine reasons that applies.

        ``event_time_ahead_of_arrival``: an event time more than ``max_event_ahead_ms`` ahead of the record's
        own arrival time (the batch's ingestion time when it has none; on Kafka the record's timestamp). One
        such record would move its partition's event-time frontier ahead of every record that follows it
        (under ``periodic`` or ``adaptive`` all of them late, for up to the future bound, a day); the bound
        caps that at the clock skew a real producer has.

        ``arrival_time_in_future``: an arrival time more than ``max_arrival_ahead_ms`` ahead of the batch's
        ingestion time. A record arrives before the batch that reads it; one far ahead would move the
        ingestion clock (``ingestion``'s watermark, the idle timeout) by as much, for good.
        """
        from pyspark.sql import functions as F

        te, tp, value = F.col("event_time_ms"), F.col("arrival_time_ms"), F.col("value")
        finite = value.isNotNull() & ~F.isnan(value) & (F.abs(value) != float("inf"))
        reason = F.coalesce(
            F.when(F.col("_too_long"), F.lit("record_too_long")),
            F.when(F.col("_bad_encoding"), F.lit("bad_encoding")),
            F.when(F.col("_corrupt"), F.lit(malformed)),
            F.when(F.col("_event_id").isNull(), F.lit("missing_event_id")),
            F.when(F.col("_key").isNull(), F.lit("missing_key")),
            F.when(~F.col("_te_given"), F.lit("missing_event_time")),
            F.when(te.isNull(), F.lit("bad_event_time")),
            F.when(te < 0, F.lit("event_time_before_1970")),
            F.when(te > F.col("_ingest_ms") + F.lit(future_bound_ms), F.lit("event_time_in_future")),
            F.when(tp.isNull(), F.lit("bad_arrival_time")),
            F.when(tp < 0, F.lit("arrival_time_before_1970")),
            # One arrival far ahead would move the ingestion clock for good (every later record late).
            F.when(tp > F.col("_ingest_ms") + F.lit(max_arrival_ahead_ms), F.lit("arrival_time_in_future")),
            F.when(te - tp > F.lit(max_event_ahead_ms), F.lit("event_time_ahead_of_arrival")),
            F.when(~F.col("_value_given"), F.lit("missing_value")),
            F.when(~finite, F.lit("bad_value")),
        )
        return [
            F.col("file"),
            F.col("line"),
            F.col("raw"),
            F.col("_event_id").alias("event_id"),
            F.col("_key").alias("key"),
            F.coalesce(F.col("_partition"), F.lit("")).alias("partition"),
            te,
            tp,
            value,
            reason.alias("reason"),
        ]


def placeholder_raw(line: Any, marker: str) -> Any:
    """``raw`` of a placeholder line (``MARKER<length>:<base64 head>``): its head, ``…[truncated, N bytes]``.

    The same text :func:`capped_raw` gives a record longer than :data:`RAW_MAX_BYTES`.
    """
    from pyspark.sql import functions as F

    rest = F.substring(line, len(marker) + 1, 1 << 30)
    size = F.substring_index(rest, ":", 1)
    head = F.unbase64(F.substring_index(rest, ":", -1)).cast("string")
    return F.make_valid_utf8(F.concat(head, F.lit("…[truncated, "), size, F.lit(" bytes]")))


def capped_raw(raw: Any) -> Any:
    """A record's text as ``quarantine.raw`` stores it: valid UTF-8, at most about a KiB.

    Invalid bytes are replaced by U+FFFD; a text longer than :data:`RAW_MAX_BYTES` bytes keeps its first
    ones and ``…[truncated, N bytes]`` (N: the whole length).
    """
    from pyspark.sql import functions as F

    size = F.octet_length(raw)
    head = F.substring(raw.cast("binary"), 1, RAW_MAX_BYTES).cast("string")
    mark = F.concat(F.lit("…[truncated, "), size.cast("string"), F.lit(" bytes]"))
    return F.make_valid_utf8(F.when(size > RAW_MAX_BYTES, F.concat(head, mark)).otherwise(raw))
