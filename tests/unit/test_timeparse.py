"""One time syntax: the library parser, the Spark path and the Arrow path agree on a corpus of time texts."""

import json
import re
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest

from jobs.stream.options import Fields
from jobs.stream.sources.validate import CORRUPT, text_schema, typed_json_schema, validate
from jobs.stream.workers.arrow_path import RecordChecks, parse_clean
from watermark.timeparse import (
    EPOCH_MS_RE,
    ISO_RE,
    group_index,
    java_regex,
    parse_job_text,
    parse_text,
)

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def ms(*args, tz=UTC, micro=0):
    return (datetime(*args, microsecond=micro, tzinfo=tz) - EPOCH) // timedelta(milliseconds=1)


BASE = ms(2020, 9, 13, 12, 26, 40)  # 1_600_000_000_000
# (text, epoch ms or None when rejected)
CORPUS = [
    # integers: signs, white space, leading zeros, integral decimals, the int64 range
    ("1600000000000", BASE),
    ("0", 0),
    ("+1600000000000", BASE),
    ("-1", -1),
    ("-0", 0),
    (" 1600000000000 ", BASE),
    ("\t1600000000000\r\n", BASE),
    ("0001600000000000", BASE),
    ("1600000000000.", BASE),
    ("1600000000000.000", BASE),
    ("9223372036854775807", 2**63 - 1),
    ("-9223372036854775808", -(2**63)),
    ("123456789012345678", 123456789012345678),
    ("1234567890123456789", 1234567890123456789),
    ("00000000000000000000000000012", 12),
    # integers rejected: fractions, exponents, out of range, odd signs and separators
    ("1600000000000.5", None),
    ("1.6e12", None),
    ("9223372036854775808", None),
    ("-9223372036854775809", None),
    ("99999999999999999999", None),
    ("+-12", None),
    ("--12", None),
    ("1_600", None),
    ("1 600", None),
    ("0x10", None),
    ("\x0b12", None),  # vertical tab: not white space here (Java's \s would say it is)
    ("12\u2028", None),  # Java's $ would match before it
    ("١٢", None),  # non-ASCII digits
    # ISO-8601: zones, offsets, no zone (UTC), fractions of 1 to 9 digits and more, date only
    ("2020-09-13T12:26:40Z", BASE),
    ("2020-09-13T12:26:40z", BASE),
    ("2020-09-13t12:26:40Z", BASE),
    ("2020-09-13 12:26:40", BASE),
    ("2020-09-13T12:26:40", BASE),
    ("  2020-09-13T12:26:40  ", BASE),
    ("2020-09-13T12:26:40 Z", BASE),
    ("2020-09-13T14:26:40+02:00", BASE),
    ("2020-09-13T14:26:40+0200", BASE),
    ("2020-09-13T14:26:40+02", BASE),
    ("2020-09-13T07:56:40-04:30", BASE),
    ("2020-09-13T12:26:40-00:00", BASE),
    ("2020-09-13T12:26", ms(2020, 9, 13, 12, 26)),
    ("2020-09-13T12", ms(2020, 9, 13, 12)),
    ("2020-09-13", ms(2020, 9, 13)),
    ("2020-09-13Z", ms(2020, 9, 13)),
    ("2020-09-13 +02:00", ms(2020, 9, 12, 22)),
    *[(f"2020-09-13T12:26:40.{'987654321'[:n]}", BASE + int(f"{'987'[:n]:0<3}")) for n in range(1, 10)],
    ("2020-09-13T12:26:40.1234567891234", BASE + 123),
    ("2020-09-13T12:26:40,5", BASE + 500),
    ("2020-09-13T14:26:40.999+02:00", BASE + 999),
    ("1969-12-31T23:59:59.999Z", -1),
    ("1969-12-31T23:59:59.9999Z", -1),  # truncated: toward the earlier time before 1970 too
    ("1970-01-01", 0),
    ("2000-02-29", ms(2000, 2, 29)),
    ("2024-02-29T23:59:59", ms(2024, 2, 29, 23, 59, 59)),
    ("0000-01-01", -62_167_219_200_000),
    ("0001-01-01", ms(1, 1, 1)),
    ("9999-12-31T23:59:59.999Z", ms(9999, 12, 31, 23, 59, 59, micro=999_000)),
    ("2020-09-13T00:00:00+23:59", ms(2020, 9, 12, 0, 1)),
    # ISO-8601 rejected: calendar, clock and offset ranges, other layouts, zone names
    ("2019-02-29", None),
    ("1900-02-29", None),
    ("2020-13-01", None),
    ("2020-00-10", None),
    ("2020-04-31", None),
    ("2020-01-00", None),
    ("2020-09-13T24:00:00", None),
    ("2020-09-13T23:60:00", None),
    ("2020-09-13T23:59:60", None),
    ("2020-09-13T12:26:40+24:00", None),
    ("2020-09-13T12:26:40+02:60", None),
    ("2020-09-13T12:26:40 UTC", None),
    ("2020-09-13T12:26:40 Europe/Paris", None),
    ("2020-09-13T12:26:40.", None),
    ("2020-9-13", None),
    ("20200913T122640Z", None),
    ("2020-09-13T1:26", None),
    ("+2020-09-13", None),
    ("10000-01-01", None),
    ("13/09/2020 12:26", None),
    ("2020-09-13T12:26:40ZZ", None),
    ("2020-09-13TT12:26:40", None),
    # garbage
    ("yesterday", None),
    ("NaN", None),
    ("Infinity", None),
    ("null", None),
    ("#12", None),
    ("0,1,2", None),
    ("true", None),
]
BLANK = ["", " ", "   "]  # missing, not a time (the job: missing_event_time)


def lib(texts):
    return parse_job_text(pa.array(texts, pa.string()))


def test_the_corpus_means_what_it_says():
    parsed = lib([t for t, _ in CORPUS])
    got = [None if bad else int(v) for v, bad in zip(parsed.ms, parsed.bad, strict=True)]
    assert got == [expected for _, expected in CORPUS]


def test_each_text_alone_and_in_a_mixed_column_gives_the_same_answer():
    # A column of one text can take arrow's vectorised casts; a mixed column takes the general parser.
    texts = [t for t, _ in CORPUS] + BLANK
    mixed = lib(texts)
    for i, text in enumerate(texts):
        alone = lib([text, text])
        assert (bool(alone.bad[0]), int(alone.ms[0])) == (bool(mixed.bad[i]), int(mixed.ms[i])), repr(text)
        assert alone.reasons[0] == mixed.reasons[i], repr(text)


def test_the_job_syntax_is_epoch_ms_else_iso():
    texts = [t for t, _ in CORPUS] + BLANK
    job, epoch, iso = lib(texts), parse_text(pa.array(texts), "epoch_ms"), parse_text(pa.array(texts), "iso")
    for i, text in enumerate(texts):
        assert epoch.bad[i] or iso.bad[i], repr(text)  # the forms never overlap
        one = epoch if not epoch.bad[i] else iso
        assert (job.bad[i], job.ms[i]) == (one.bad[i], one.ms[i]), repr(text)
    blank = lib(BLANK)
    assert blank.bad.all() and set(blank.reasons) == {"empty value"}


def test_the_regular_expressions_read_the_same_in_re2_java_and_python():
    assert list(group_index(EPOCH_MS_RE)) == ["neg", "int"]
    assert list(group_index(ISO_RE))[:3] == ["year", "month", "day"]
    assert "(?P<" not in java_regex(ISO_RE) and "\\s" not in ISO_RE and "$" not in ISO_RE


# --------------------------------------------------------------------------------------------------
# The Spark path and the Arrow path.

FIELDS = Fields()
INGEST = ms(2100, 1, 1)
FUTURE = 2**63 - 1 - INGEST  # no time is in the future: the test compares parsing alone
CHECKS = RecordChecks(
    "event_id",
    "key",
    "partition",
    "event_time_ms",
    "arrival_time_ms",
    "value",
    ingest_ms=INGEST,
    future_bound_ms=FUTURE,
    max_field_bytes=1_000,
)
# JSON integers only: Spark re-reads a JSON number with a fraction or exponent as the text of a double
# ("1e3" as "1000.0", "1600000000000.0" as "1.6E12"), which is not the token's text
# (see docs/streaming-job.md, "Input").
JSON_INTEGER = re.compile(r"-?(?:0|[1-9][0-9]*)")


def spark_rows(frame, reread_corrupt=False):
    rows = validate(
        frame,
        FIELDS,
        ingest_ms=INGEST,
        future_bound_ms=FUTURE,
        max_field_bytes=1_000,
        reread_corrupt=reread_corrupt,
    )
    return {int(r["event_id"]): (r["event_time_ms"], r["reason"]) for r in rows.collect()}


def text_frame(spark, records):
    """Records as a text source gives them (CSV): file, line, then every field and the corrupt record."""
    schema = ", ".join(f"`{f.name}` string" for f in text_schema(list(dict.fromkeys(vars(FIELDS).values()))))
    return spark.createDataFrame(records, f"file string, line bigint, {schema}")


def assert_same_as_library(texts, rows):
    parsed = lib(texts)
    for i, text in enumerate(texts):
        value, reason = rows[i]
        if parsed.bad[i]:
            want = "missing_event_time" if parsed.reasons[i] == "empty value" else "bad_event_time"
            assert (value, reason) == (None, want), repr(text)
        else:
            assert value == int(parsed.ms[i]), repr(text)
            assert reason in (None, "event_time_before_1970"), repr(text)


@pytest.mark.spark
def test_the_spark_path_reads_time_text_as_the_library(spark):
    texts = [t for t, _ in CORPUS] + BLANK
    records = [("f.csv", i, str(i), "k", "p", text, str(BASE), "1.5", None) for i, text in enumerate(texts)]
    assert_same_as_library(texts, spark_rows(text_frame(spark, records)))


@pytest.mark.spark
def test_the_spark_path_ignores_the_session_time_zone(spark):
    texts = ["2020-09-13T12:26:40", "2020-09-13", "2020-09-13 12:26:40.5", "2020-09-13T12:26:40Z"]
    before = spark.conf.get("spark.sql.session.timeZone")
    try:
        spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
        records = [("f.csv", i, str(i), "k", "p", t, str(BASE), "1", None) for i, t in enumerate(texts)]
        rows = spark_rows(text_frame(spark, records))
    finally:
        spark.conf.set("spark.sql.session.timeZone", before)
    assert [rows[i][0] for i in range(len(texts))] == [BASE, ms(2020, 9, 13), BASE + 500, BASE]


def json_lines(texts):
    """Each text as a JSON string, and, where it is a JSON integer, also as that number: (text, line)."""
    lines = []
    for text in texts:
        for raw in (json.dumps(text), text if JSON_INTEGER.fullmatch(text) else None):
            if raw is None:
                continue
            i = len(lines)
            record = f'{{"event_id": "{i}", "key": "k", "partition": "p", "event_time_ms": {raw}, '
            lines.append((text, record + f'"arrival_time_ms": {BASE}, "value": 1.5}}'))
    return lines


@pytest.mark.spark
def test_json_times_as_strings_and_numbers_on_the_spark_and_arrow_paths(spark, tmp_path):
    from pyspark.sql import functions as F

    texts = [t for t, _ in CORPUS] + BLANK
    lines = json_lines(texts)
    path = tmp_path / "in.json"
    path.write_text("".join(line + "\n" for _, line in lines))
    names = list(dict.fromkeys(vars(FIELDS).values()))
    read = (
        spark.read.schema(typed_json_schema(FIELDS))
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT)
        .json(str(path))
    )
    frame = read.select(F.lit("in.json").alias("file"), F.lit(0).alias("line"), *names, CORRUPT)
    rows = spark_rows(frame, reread_corrupt=True)
    assert_same_as_library([t for t, _ in lines], rows)

    # The Arrow path takes a line only when its time is a JSON integer, read as the Spark path reads it; any
    # other line makes the split unclean, and the batch goes to the Spark path (checked above).
    parsed = lib([t for t, _ in lines])
    clean = []
    for i, (text, line) in enumerate(lines):
        records, why = parse_clean((line + "\n").encode(), CHECKS)
        if records is None:
            continue
        clean.append(text)
        assert records.column("event_time_ms").to_pylist() == [int(parsed.ms[i])] == [rows[i][0]], repr(text)
        assert rows[i][1] is None, why
    assert "1600000000000" in clean and "-1" not in clean  # the Arrow path leaves times before 1970 out
    assert all(re.fullmatch("-?[0-9]+", t) for t in clean)
