"""One time syntax on the Spark path and the Arrow path: they agree with the library parser on its corpus
(the corpus and the library's own checks: tests/unit/watermark/streams/test_timeparse.py)."""

import json
import re

from jobs.stream.options import Fields
from jobs.stream.sources.validate import CORRUPT, text_schema, typed_json_schema, validate
from jobs.stream.workers.arrow_path import RecordChecks, parse_clean
from tests.unit.watermark.streams.test_timeparse import BASE, BLANK, CORPUS, lib, ms

FIELDS = Fields()

INGEST = ms(2100, 1, 1)

FUTURE = 2**63 - 1 - INGEST  # no time is in the future: the test compares parsing alone
AHEAD = 2**63 - 1  # nor ahead of its arrival time (event - arrival never exceeds it)

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
    max_event_ahead_ms=AHEAD,
    max_record_bytes=1 << 20,
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
        max_event_ahead_ms=AHEAD,
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


def test_the_spark_path_reads_time_text_as_the_library(spark):
    texts = [t for t, _ in CORPUS] + BLANK
    records = [("f.csv", i, str(i), "k", "p", text, str(BASE), "1.5", None) for i, text in enumerate(texts)]
    assert_same_as_library(texts, spark_rows(text_frame(spark, records)))


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
