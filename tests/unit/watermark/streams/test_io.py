"""Tests for watermark.streams.recorded: reading recorded streams from CSV and Parquet."""

from __future__ import annotations

import gzip
import re
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.samples import SAMPLES
from watermark.streams.input_error import InputError
from watermark.streams.recorded import TIME_FORMATS, RecordedStream, read_stream


def ms(*args: int, tz: timezone = UTC, micro: int = 0) -> int:
    """Epoch milliseconds of a calendar time, computed independently of the code under test."""
    moment = datetime(*args, tzinfo=tz) + timedelta(microseconds=micro)  # type: ignore[misc]
    return (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)


def write(tmp_path: Path, text: str, name: str = "stream.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def read_te(tmp_path: Path, values: list[str], time_format: str) -> list[int]:
    """Write one time column and read it back (as both event and arrival time)."""
    body = "".join(f'"{value}"\n' for value in values)
    stream = read_stream(
        write(tmp_path, "te\n" + body), event_time="te", arrival_time="te", time_format=time_format
    )
    assert stream.tp_ms.tolist() == stream.te_ms.tolist()
    return [int(v) for v in stream.te_ms]


def error(call: Callable[[], Any]) -> str:
    """Run ``call``, expect an InputError, check it is one line, return the message."""
    with pytest.raises(InputError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message and "\r" not in message
    assert isinstance(info.value, ValueError)
    return message


# ------------------------------------------------------------------------------------------------
# Happy paths


def test_epoch_ms_basic(tmp_path: Path) -> None:
    path = write(tmp_path, "te,tp\n1415624019862,1415624021690\n1415624021569,1415624021787\n")
    stream = read_stream(path, event_time="te", arrival_time="tp")
    assert isinstance(stream, RecordedStream)
    assert len(stream) == 2
    assert stream.te_ms.dtype == np.int64 and stream.tp_ms.dtype == np.int64
    assert stream.te_ms.tolist() == [1415624019862, 1415624021569]
    assert stream.tp_ms.tolist() == [1415624021690, 1415624021787]
    assert stream.partition is None and stream.key is None
    assert stream.source == str(path)
    assert TIME_FORMATS == ("epoch_ms", "epoch_s", "iso")


def test_epoch_ms_integral_floats_signs_and_spaces(tmp_path: Path) -> None:
    values = ["1415624021690.0", "1415624021690.", " 12 ", "-5", "+7", "0", "-1000.000"]
    assert read_te(tmp_path, values, "epoch_ms") == [1415624021690, 1415624021690, 12, -5, 7, 0, -1000]


def test_epoch_ms_all_integral_floats(tmp_path: Path) -> None:
    assert read_te(tmp_path, ["1415624021690.0", "1415624021691.0"], "epoch_ms") == [
        1415624021690,
        1415624021691,
    ]


def test_epoch_s_integers(tmp_path: Path) -> None:
    assert read_te(tmp_path, ["1415624021", "-1", "0"], "epoch_s") == [1415624021000, -1000, 0]


def test_epoch_s_three_decimals(tmp_path: Path) -> None:
    assert read_te(tmp_path, ["1415624021.690", "1.5", "-0.25", "2."], "epoch_s") == [
        1415624021690,
        1500,
        -250,
        2000,
    ]


def test_epoch_s_rounds_to_nearest_ms(tmp_path: Path) -> None:
    values = ["1415624021.6905", "1415624021.69049", "0.0004", "-0.0005", "-1.2346", " 1.5 ", ".5", "+3.1"]
    assert read_te(tmp_path, values, "epoch_s") == [
        1415624021691,
        1415624021690,
        0,
        -1,
        -1235,
        1500,
        500,
        3100,
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2013-01-01 00:00:00", ms(2013, 1, 1)),
        ("2013-01-01T00:00:00", ms(2013, 1, 1)),
        ("2013-01-01T12:34:56.5", ms(2013, 1, 1, 12, 34, 56, micro=500_000)),
        ("2013-01-01T12:34:56.123", ms(2013, 1, 1, 12, 34, 56, micro=123_000)),
        ("2013-01-01T12:34:56.123999", ms(2013, 1, 1, 12, 34, 56, micro=123_000)),  # truncated
        ("2013-01-01T00:00:00Z", ms(2013, 1, 1)),
        ("2013-01-01 00:00:00.250Z", ms(2013, 1, 1, micro=250_000)),
        ("2013-01-01T00:00:00+01:00", ms(2013, 1, 1, tz=timezone(timedelta(hours=1)))),
        ("2014-11-10T13:53:41.690+0100", 1415624021690),
        ("2013-01-01T00:00:00-05:30", ms(2013, 1, 1, tz=timezone(-timedelta(hours=5, minutes=30)))),
        ("2012-02-29 23:59:59", ms(2012, 2, 29, 23, 59, 59)),
        ("1969-12-31T23:59:59.999Z", -1),
        ("1950-06-01 00:00:00", ms(1950, 6, 1)),
    ],
)
def test_iso_single_form(tmp_path: Path, text: str, expected: int) -> None:
    # A column of one form (the vectorised arrow fast path where it applies) ...
    assert read_te(tmp_path, [text, text], "iso") == [expected, expected]
    # ... and the same value among other forms (the general parser) agree.
    mixed = read_te(tmp_path, [text, "2013-01-01T00:00:00+01:00", "2013-01-01 00:00:00", " " + text], "iso")
    assert mixed == [expected, ms(2012, 12, 31, 23), ms(2013, 1, 1), expected]


def test_iso_mixed_offsets_and_precision(tmp_path: Path) -> None:
    values = [
        "2013-01-01 00:00:00",
        "2013-01-01T00:00:00Z",
        "2013-01-01T01:00:00+01:00",
        "2013-01-01T01:00:00+0100",
        "2013-01-01T01:00:00.000+01",
        "2013-01-01t00:00:00.000000z",
    ]
    assert read_te(tmp_path, values, "iso") == [ms(2013, 1, 1)] * len(values)


def test_semicolon_delimiter_quoted_header_and_fields(tmp_path: Path) -> None:
    text = (
        '"S.Client.Detection.Time";"S.Message.received.time.ms";"S.Device.ID";"note"\n'
        '1415624019862;1415624021690;"dev_15";"a;b"\n'
        '1415624021569;"1415624021787";"dev_7";NA\n'
    )
    stream = read_stream(
        write(tmp_path, text),
        event_time="S.Client.Detection.Time",
        arrival_time="S.Message.received.time.ms",
        partition="S.Device.ID",
        key="note",
        delimiter=";",
    )
    assert stream.te_ms.tolist() == [1415624019862, 1415624021569]
    assert stream.tp_ms.tolist() == [1415624021690, 1415624021787]
    assert stream.partition is not None and stream.key is not None
    assert stream.partition.tolist() == ["dev_15", "dev_7"]
    assert stream.key.tolist() == ["a;b", "NA"]  # read as text: NA is not null


def test_partition_and_key_are_strings(tmp_path: Path) -> None:
    text = "te,tp,p,k\n1,2,7,001\n3,4,8,1.50\n5,6,7,x\n"
    stream = read_stream(write(tmp_path, text), event_time="te", arrival_time="tp", partition="p", key="k")
    assert stream.partition is not None and stream.key is not None
    assert stream.partition.tolist() == ["7", "8", "7"]
    assert stream.key.tolist() == ["001", "1.50", "x"]  # not type-inferred
    assert all(type(v) is str for v in [*stream.partition, *stream.key])
    assert len(stream.partition) == len(stream)


def test_same_column_for_several_roles(tmp_path: Path) -> None:
    stream = read_stream(write(tmp_path, "t,p\n5,a\n6,b\n"), event_time="t", arrival_time="t", key="p")
    assert stream.te_ms.tolist() == stream.tp_ms.tolist() == [5, 6]


def test_no_header_with_indices(tmp_path: Path) -> None:
    text = "a,x,2013-01-01 00:00:00,2013-01-01 00:02:00\nb,y,2013-01-01 00:01:00,2013-01-01 00:03:00\n"
    stream = read_stream(
        write(tmp_path, text),
        event_time="2",
        arrival_time="3",
        partition="0",
        header=False,
        time_format="iso",
    )
    assert stream.te_ms.tolist() == [ms(2013, 1, 1), ms(2013, 1, 1, 0, 1)]
    assert stream.tp_ms.tolist() == [ms(2013, 1, 1, 0, 2), ms(2013, 1, 1, 0, 3)]
    assert stream.partition is not None and stream.partition.tolist() == ["a", "b"]


def test_tab_delimiter_and_escaped_tab(tmp_path: Path) -> None:
    path = write(tmp_path, "te\ttp\n1\t2\n")
    for delimiter in ("\t", "\\t"):
        assert read_stream(path, event_time="te", arrival_time="tp", delimiter=delimiter).tp_ms.tolist() == [
            2
        ]


def test_gzip_csv_and_pathlike(tmp_path: Path) -> None:
    path = tmp_path / "stream.csv.gz"
    path.write_bytes(gzip.compress(b"te,tp\n1,2\n3,4\n"))
    stream = read_stream(path, event_time="te", arrival_time="tp")
    assert stream.te_ms.tolist() == [1, 3] and stream.source == str(path)


def test_bom_and_crlf(tmp_path: Path) -> None:
    path = tmp_path / "stream.csv"
    path.write_bytes(b"\xef\xbb\xbfte,tp\r\n1,2\r\n3,4\r\n")
    assert read_stream(path, event_time="te", arrival_time="tp").tp_ms.tolist() == [2, 4]


def test_returned_arrays_are_owned(tmp_path: Path) -> None:
    stream = read_stream(write(tmp_path, "te,tp\n1,2\n"), event_time="te", arrival_time="tp")
    stream.te_ms[0] = 9  # plain, writeable numpy arrays
    assert stream.te_ms.tolist() == [9]


# ------------------------------------------------------------------------------------------------
# Parquet


def write_parquet(path: Path, columns: dict[str, Any]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table(columns), path)
    return path


def test_parquet_named_text_columns(tmp_path: Path) -> None:
    path = write_parquet(
        tmp_path / "s.parquet",
        {"te": ["2013-01-01 00:00:00", "2013-01-01T00:00:01Z"], "tp": ["2013-01-01T01:00:02+01:00"] * 2},
    )
    stream = read_stream(path, event_time="te", arrival_time="tp", time_format="iso")
    assert stream.te_ms.tolist() == [ms(2013, 1, 1), ms(2013, 1, 1, 0, 0, 1)]
    assert stream.tp_ms.tolist() == [ms(2013, 1, 1, 0, 0, 2)] * 2


def test_parquet_native_timestamps_any_time_format(tmp_path: Path) -> None:
    import pyarrow as pa

    moment = datetime(2013, 1, 1, 0, 0, 1, 500_999, tzinfo=UTC)
    naive = moment.replace(tzinfo=None)
    expected = ms(2013, 1, 1, 0, 0, 1, micro=500_000)
    path = write_parquet(
        tmp_path / "s.pq",
        {
            "naive_us": pa.array([naive], pa.timestamp("us")),
            "utc_ns": pa.array([moment], pa.timestamp("ns", tz="UTC")),
            "paris_ms": pa.array([moment], pa.timestamp("ms", tz="Europe/Paris")),
            "old_s": pa.array(
                [datetime(1969, 12, 31, 23, 59, 59, tzinfo=UTC).replace(tzinfo=None)], pa.timestamp("s")
            ),
            "day": pa.array([date(2013, 1, 2)], pa.date32()),
        },
    )
    for time_format in TIME_FORMATS:
        stream = read_stream(path, event_time="naive_us", arrival_time="utc_ns", time_format=time_format)
        assert stream.te_ms.tolist() == stream.tp_ms.tolist() == [expected]
    stream = read_stream(path, event_time="paris_ms", arrival_time="old_s")
    assert stream.te_ms.tolist() == [expected] and stream.tp_ms.tolist() == [-1000]
    assert read_stream(path, event_time="day", arrival_time="day").te_ms.tolist() == [ms(2013, 1, 2)]


def test_parquet_native_numbers(tmp_path: Path) -> None:
    import pyarrow as pa

    path = write_parquet(
        tmp_path / "s.parquet",
        {
            "i64": pa.array([1415624021690, -5], pa.int64()),
            "u32": pa.array([1415624021, 0], pa.uint32()),
            "f_ms": pa.array([1415624021690.0, 3.0], pa.float64()),
            "f_s": pa.array([1415624021.0625, -1.0625], pa.float64()),
            "dev": pa.array([3, 4], pa.int32()),
            "cat": pa.array(["a", "b"]).dictionary_encode(),
        },
    )
    stream = read_stream(path, event_time="i64", arrival_time="f_ms", partition="dev", key="cat")
    assert stream.te_ms.tolist() == [1415624021690, -5]
    assert stream.tp_ms.tolist() == [1415624021690, 3]
    assert stream.partition is not None and stream.partition.tolist() == ["3", "4"]
    assert stream.key is not None and stream.key.tolist() == ["a", "b"]
    stream = read_stream(path, event_time="u32", arrival_time="f_s", time_format="epoch_s")
    assert stream.te_ms.tolist() == [1415624021000, 0]
    assert stream.tp_ms.tolist() == [1415624021063, -1063]  # nearest ms, halves away from zero


def test_parquet_indices_without_header_and_magic_detection(tmp_path: Path) -> None:
    path = write_parquet(tmp_path / "stream.dat", {"a": ["x", "y"], "te": [1, 2], "tp": [3, 4]})
    stream = read_stream(path, event_time="1", arrival_time="tp", key="0", header=False)
    assert stream.te_ms.tolist() == [1, 2] and stream.tp_ms.tolist() == [3, 4]
    assert stream.key is not None and stream.key.tolist() == ["x", "y"]


# ------------------------------------------------------------------------------------------------
# The real samples


def test_sample_ooo_iot_d1() -> None:
    stream = read_stream(
        SAMPLES / "ooo-iot-d1.csv",
        event_time="S.Client.Detection.Time",
        arrival_time="S.Message.received.time.ms",
        partition="S.Device.ID",
        delimiter=";",
    )
    assert len(stream) == 9600
    assert stream.te_ms.dtype == np.int64 and stream.tp_ms.dtype == np.int64
    assert int(stream.te_ms[0]) == 1415624019862 and int(stream.tp_ms[0]) == 1415624021690
    assert stream.partition is not None and len(set(stream.partition.tolist())) == 8
    assert stream.partition[0] == "dev_15"


def test_sample_ooo_iot_d1_iso_received_time_matches_ms_column() -> None:
    path = SAMPLES / "ooo-iot-d1.csv"
    iso, millis = "S.Message.received.time", "S.Message.received.time.ms"  # "2014-11-10T13:53:41.690+0100"
    as_iso = read_stream(path, event_time=iso, arrival_time=iso, delimiter=";", time_format="iso")
    as_ms = read_stream(path, event_time=millis, arrival_time=millis, delimiter=";")
    assert len(as_iso) == 9600 and np.array_equal(as_iso.te_ms, as_ms.te_ms)


def test_sample_debs2015_taxi() -> None:
    stream = read_stream(
        SAMPLES / "debs2015-taxi-sample.csv",
        event_time="2",
        arrival_time="3",
        header=False,
        time_format="iso",
    )
    assert len(stream) == 10004
    assert stream.te_ms.dtype == np.int64
    assert int(stream.te_ms[0]) == 1356998400000 == ms(2013, 1, 1)
    assert int(stream.tp_ms[0]) == 1356998520000
    assert bool(np.all(np.diff(stream.tp_ms) >= 0))  # the sample is sorted by drop-off time


# ------------------------------------------------------------------------------------------------
# Errors


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.csv"
    message = error(lambda: read_stream(path, event_time="te", arrival_time="tp"))
    assert str(path) in message and "No such file" in message


def test_directory_is_an_error(tmp_path: Path) -> None:
    message = error(lambda: read_stream(tmp_path, event_time="te", arrival_time="tp"))
    assert str(tmp_path) in message and "cannot read" in message


@pytest.mark.parametrize("text", ["", "te;tp\n", '"te";"tp"\n\n', "\n\n"])
def test_no_data_rows(tmp_path: Path, text: str) -> None:
    path = write(tmp_path, text)
    message = error(lambda: read_stream(path, event_time="te", arrival_time="tp", delimiter=";"))
    assert message.startswith(f"{path}: no data rows")


def test_no_data_rows_parquet(tmp_path: Path) -> None:
    import pyarrow as pa

    path = write_parquet(
        tmp_path / "s.parquet", {"te": pa.array([], pa.int64()), "tp": pa.array([], pa.int64())}
    )
    assert error(lambda: read_stream(path, event_time="te", arrival_time="tp")) == f"{path}: no data rows"


def test_missing_column_lists_available(tmp_path: Path) -> None:
    path = write(tmp_path, "te,tp,dev\n1,2,a\n")
    message = error(lambda: read_stream(path, event_time="te", arrival_time="tp", partition="device"))
    assert message == f"{path}: column 'device' not found; columns are: 'te', 'tp', 'dev'"


def test_missing_column_list_is_truncated(tmp_path: Path) -> None:
    names = [f"column_{i}" for i in range(40)]
    path = write(tmp_path, ",".join(names) + "\n" + ",".join("1" * 40) + "\n")
    message = error(lambda: read_stream(path, event_time="te", arrival_time="column_1"))
    assert "'te' not found" in message and "'column_0'" in message
    assert "'column_39'" not in message and "(40 columns)" in message


def test_missing_column_hints(tmp_path: Path) -> None:
    path = write(tmp_path, "te;tp\n1;2\n")
    assert "is the delimiter ','" in error(lambda: read_stream(path, event_time="te", arrival_time="tp"))
    assert "header=False" in error(lambda: read_stream(path, event_time="0", arrival_time="1", delimiter=";"))


def test_missing_column_parquet(tmp_path: Path) -> None:
    path = write_parquet(tmp_path / "s.parquet", {"te": [1], "tp": [2]})
    message = error(lambda: read_stream(path, event_time="te", arrival_time="arrival"))
    assert message == f"{path}: column 'arrival' not found; columns are: 'te', 'tp'"
    message = error(lambda: read_stream(path, event_time="te", arrival_time="5", header=False))
    assert "column index 5" in message and "the file has 2 columns" in message


def test_column_index_out_of_range(tmp_path: Path) -> None:
    path = write(tmp_path, "1,2,3\n4,5,6\n")
    message = error(lambda: read_stream(path, event_time="0", arrival_time="3", header=False))
    assert message == f"{path}: column index 3 is out of range: the file has 3 columns (0-2)"


def test_column_name_without_header(tmp_path: Path) -> None:
    path = write(tmp_path, "1,2,3\n")
    message = error(lambda: read_stream(path, event_time="te", arrival_time="1", header=False))
    assert "'te'" in message and "0-based indices" in message


def test_bad_time_names_column_row_line_and_value(tmp_path: Path) -> None:
    path = write(tmp_path, "te,tp\n1,2\n3,4\n5,12x\n")
    message = error(lambda: read_stream(path, event_time="te", arrival_time="tp"))
    assert message == f"{path}: line 4 (data row 3), column 'tp': not an integer epoch_ms time: '12x'"


def test_bad_time_without_header_line_equals_row(tmp_path: Path) -> None:
    path = write(tmp_path, "1,2\n3,oops\n")
    message = error(lambda: read_stream(path, event_time="0", arrival_time="1", header=False))
    assert message == f"{path}: line 2 (data row 2), column 1: not an integer epoch_ms time: 'oops'"


def test_bad_time_line_counts_blank_and_multiline_rows(tmp_path: Path) -> None:
    path = write(tmp_path, 'te,tp,note\n1,2,"two\nlines"\n\n3,4,x\nbad,5,y\n')
    message = error(lambda: read_stream(path, event_time="te", arrival_time="tp"))
    assert "line 6 (data row 3), column 'te'" in message and "'bad'" in message


def test_bad_time_value_is_truncated(tmp_path: Path) -> None:
    path = write(tmp_path, "te,tp\n1,2\n" + "9" * 30 + "x" * 100 + ",3\n")
    message = error(lambda: read_stream(path, event_time="te", arrival_time="tp"))
    shown = re.search(r": ('[^']*')$", message)
    assert shown is not None and shown.group(1).endswith("...'") and len(shown.group(1)) <= 45
    assert "line 3 (data row 2), column 'te'" in message


@pytest.mark.parametrize(
    ("time_format", "value", "reason"),
    [
        ("epoch_ms", "", "empty value"),
        ("epoch_ms", "  ", "empty value"),
        ("epoch_ms", "NA", "not an integer epoch_ms time: 'NA'"),
        ("epoch_ms", "1415624021690.5", "not an integer epoch_ms time: '1415624021690.5'"),
        ("epoch_ms", "1e12", "not an integer epoch_ms time: '1e12'"),
        ("epoch_ms", "99999999999999999999", "out of the int64 range: '99999999999999999999'"),
        ("epoch_s", "1.2.3", "not an epoch_s number: '1.2.3'"),
        ("epoch_s", ".", "not an epoch_s number: '.'"),
        ("epoch_s", "9999999999999999", "out of the int64 millisecond range"),
        ("iso", "2013-02-30 00:00:00", "invalid date: '2013-02-30 00:00:00'"),
        ("iso", "2013-01-01 24:00:00", "time of day out of range: '2013-01-01 24:00:00'"),
        ("iso", "2013-01-01T00:00:00+25:00", "UTC offset out of range"),
        ("iso", "01/02/2013 00:00", "not an ISO-8601 time: '01/02/2013 00:00'"),
        ("iso", "1415624021690", "not an ISO-8601 time: '1415624021690'"),
    ],
)
def test_bad_time_values(tmp_path: Path, time_format: str, value: str, reason: str) -> None:
    good = {"epoch_ms": "1", "epoch_s": "1.5", "iso": "2013-01-01 00:00:00"}[time_format]
    path = write(tmp_path, f'te,tp\n"{good}",{good}\n"{value}",{good}\n')
    message = error(lambda: read_stream(path, event_time="te", arrival_time="tp", time_format=time_format))
    assert message.startswith(f"{path}: line 3 (data row 2), column 'te': ")
    assert reason in message


def test_first_bad_row_is_reported(tmp_path: Path) -> None:
    # Row 3 fails the syntax check, row 2 only the calendar check: row 2 must be named.
    path = write(tmp_path, "te,tp\n2013-01-01,0\n2013-02-30,0\nnonsense,0\n")
    message = error(lambda: read_stream(path, event_time="te", arrival_time="te", time_format="iso"))
    assert "(data row 2)" in message and "invalid date" in message


def test_wrong_number_of_fields(tmp_path: Path) -> None:
    path = write(tmp_path, "te,tp,dev\n1,2,a\n3,4,b\n5,6\n7,8,c\n")
    message = error(lambda: read_stream(path, event_time="te", arrival_time="tp"))
    assert message.startswith(f"{path}: line 4: expected 3 fields, found 2")


def test_partition_and_key_empty_values(tmp_path: Path) -> None:
    path = write(tmp_path, 'te,tp,p,k\n1,2,a,x\n3,4,"",y\n5,6,c,\n')
    message = error(lambda: read_stream(path, event_time="te", arrival_time="tp", partition="p"))
    assert message == f"{path}: line 3 (data row 2), column 'p': empty value: ''"
    message = error(lambda: read_stream(path, event_time="te", arrival_time="tp", key="k"))
    assert message == f"{path}: line 4 (data row 3), column 'k': empty value: ''"


def test_parquet_nulls(tmp_path: Path) -> None:
    path = write_parquet(
        tmp_path / "s.parquet", {"te": [1, None, 3], "tp": ["1", "2", None], "p": ["a", None, "b"]}
    )
    message = error(lambda: read_stream(path, event_time="te", arrival_time="te"))
    assert message == f"{path}: data row 2, column 'te': missing (null) value"
    message = error(lambda: read_stream(path, event_time="tp", arrival_time="tp"))
    assert message == f"{path}: data row 3, column 'tp': missing (null) value"
    message = error(lambda: read_stream(path, event_time="te", arrival_time="te", partition="p"))
    assert "column 'te'" in message  # times are checked before the partition
    path = write_parquet(tmp_path / "t.parquet", {"te": [1, 2], "p": ["a", None]})
    message = error(lambda: read_stream(path, event_time="te", arrival_time="te", partition="p"))
    assert message == f"{path}: data row 2, column 'p': missing (null) value"


def test_parquet_column_errors(tmp_path: Path) -> None:
    path = write_parquet(tmp_path / "s.parquet", {"te": [1, 2], "flag": [True, False], "f": [1.0, 1.5]})
    message = error(lambda: read_stream(path, event_time="te", arrival_time="te", time_format="iso"))
    assert message.startswith(f"{path}: column 'te': holds numbers") and "epoch_ms" in message
    message = error(lambda: read_stream(path, event_time="flag", arrival_time="te"))
    assert message == f"{path}: column 'flag': has type bool, which cannot hold times"
    message = error(lambda: read_stream(path, event_time="f", arrival_time="te"))
    assert message == f"{path}: data row 2, column 'f': not an integral epoch_ms value: '1.5'"


def test_corrupt_parquet(tmp_path: Path) -> None:
    path = tmp_path / "s.parquet"
    path.write_bytes(b"PAR1 this is not really parquet")
    message = error(lambda: read_stream(path, event_time="te", arrival_time="tp"))
    assert message.startswith(f"{path}: cannot read Parquet: ")


def test_bad_arguments(tmp_path: Path) -> None:
    path = write(tmp_path, "te,tp\n1,2\n")
    message = error(lambda: read_stream(path, event_time="te", arrival_time="tp", delimiter=";;"))
    assert message.startswith(f"{path}: invalid delimiter ';;'")
    assert "invalid delimiter" in error(
        lambda: read_stream(path, event_time="te", arrival_time="tp", delimiter='"')
    )
    message = error(lambda: read_stream(path, event_time="te", arrival_time="tp", time_format="epoch_us"))
    assert "unknown time format 'epoch_us'" in message and "epoch_ms, epoch_s, iso" in message
    assert "event time column" in error(lambda: read_stream(path, event_time="", arrival_time="tp"))


def test_invalid_utf8_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "s.csv"
    path.write_bytes(b"te,tp\n1,2\n\xff\xfe,3\n")
    message = error(lambda: read_stream(path, event_time="te", arrival_time="tp"))
    assert message == f"{path}: line 3: invalid UTF-8 text"


def test_input_error_message_is_forced_to_one_line() -> None:
    assert str(InputError("a\nb\r\nc")) == "a b c"


# ------------------------------------------------------------------------------------------------
# Size (speed is measured by benchmarks, never asserted here)


def test_large_csv_round_trips_every_value(tmp_path: Path) -> None:
    n = 200_000
    tp = 1_415_624_000_000 + np.arange(n, dtype=np.int64) * 10
    te = tp - (np.arange(n, dtype=np.int64) * 7919) % 5000
    lines = "\n".join(f"{a},{b},dev_{a % 8}" for a, b in zip(te.tolist(), tp.tolist(), strict=True))
    path = write(tmp_path, "te,tp,dev\n" + lines + "\n")
    stream = read_stream(path, event_time="te", arrival_time="tp", partition="dev")
    assert np.array_equal(stream.te_ms, te) and np.array_equal(stream.tp_ms, tp)
    assert stream.partition is not None and stream.partition[:2].tolist() == [
        f"dev_{te[0] % 8}",
        f"dev_{te[1] % 8}",
    ]


def test_value_column_is_read_as_finite_floats_and_bad_values_name_the_row(tmp_path: Path) -> None:
    path = write(tmp_path, "te,tp,v\n1,2,1.5\n3,4, 7 \n")
    stream = read_stream(path, event_time="te", arrival_time="tp", value="v")
    assert stream.value is not None and stream.value.tolist() == [1.5, 7.0]
    assert read_stream(path, event_time="te", arrival_time="tp").value is None
    bad = write(tmp_path, "te,tp,v\n1,2,1.5\n3,4,abc\n", name="bad.csv")
    with pytest.raises(InputError, match=r"line 3 \(data row 2\), column 'v': not a number: 'abc'"):
        read_stream(bad, event_time="te", arrival_time="tp", value="v")
    nan = write(tmp_path, "te,tp,v\n1,2,nan\n", name="nan.csv")
    with pytest.raises(InputError, match="not a finite number"):
        read_stream(nan, event_time="te", arrival_time="tp", value="v")
