"""One time syntax: the library parser on a corpus of time texts, and one instant given to a command.

The Spark and Arrow paths on the same corpus: tests/integration/spark/test_timeparse.py.
"""

import argparse
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest

from watermark.streams.timeparse import (
    EPOCH_MS_RE,
    ISO_RE,
    group_index,
    instant_ms,
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


def test_one_instant_given_as_text_means_what_the_job_reads_and_without_a_zone_is_utc():
    """:func:`instant_ms` (the backfill's interval, the re-tuning's end, a manual data-quality interval).

    The unified rule: a time without a zone is UTC. (Before, the backfill and the re-tuning refused it and
    the data-quality DAG read it in the worker's local time zone.)
    """
    for text, expected in CORPUS:
        if expected is None:
            with pytest.raises(ValueError, match="is not a time"):
                instant_ms(text)
        else:
            assert instant_ms(text) == expected, repr(text)
    for text in BLANK:
        with pytest.raises(ValueError, match="empty value"):
            instant_ms(text)
    assert instant_ms("2026-11-22T10:00:00") == instant_ms("2026-11-22T10:00:00+00:00") == 1_795_341_600_000


def test_the_backfill_reads_a_time_without_a_zone_as_utc():
    """The backfill's interval follows the unified rule (it used to refuse a time without a zone)."""
    from jobs.batch.backfill import options_from_args

    args = argparse.Namespace(
        tables="out",
        config=None,
        window_ms=1_000,
        slide_ms=None,
        interval_start="2026-11-22T10:00:00",
        interval_end="2026-11-22T11:00:00+00:00",
        max_retries=3,
        run_id=None,
    )
    options = options_from_args(args)
    assert (options.start_ms, options.end_ms) == (1_795_341_600_000, 1_795_345_200_000)
