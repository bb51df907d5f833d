"""Issue 29, items 10 and 11 (part), without Spark: how far an event time may be ahead of its arrival time
(``event_time_ahead_of_arrival``), and records too long to read whole (``record_too_long``). The job on
landing files: tests/integration/spark/test_record_bounds.py."""

import base64
import io
import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobs.common.schemas import QUARANTINE_REASONS
from jobs.stream.cli import main
from jobs.stream.options import DEFAULT_MAX_EVENT_AHEAD_MS, JobOptions
from jobs.stream.sources.long_lines import LongLineScreen, long_lines, placeholder, write_screened
from jobs.stream.workers.arrow_path import RecordTooLong, Split, collect_pass, has_long_line, read_split
from tests.unit.jobs.stream.workers.test_arrow_path import CHECKS
from watermark.config import PipelineConfig
from watermark.storage import Location
from watermark.streams.recorded import read_stream
from watermark.streams.synthetic import generate


def test_event_time_ahead_of_arrival_is_a_quarantine_reason_after_the_arrival_time_checks():
    reasons = list(QUARANTINE_REASONS)
    assert reasons.index("arrival_time_in_future") < reasons.index("event_time_ahead_of_arrival")
    assert reasons.index("event_time_ahead_of_arrival") < reasons.index("missing_value")


@pytest.mark.parametrize(
    ("path", "te", "tp", "delimiter", "header", "time_format"),
    [
        (
            "samples/ooo-iot-d1.csv",
            "S.Client.Detection.Time",
            "S.Message.received.time.ms",
            ";",
            True,
            "epoch_ms",
        ),
        (
            "samples/ooo-iot-d2.csv",
            "S.Client.Detection.Time",
            "S.Message.received.time.ms",
            ";",
            True,
            "epoch_ms",
        ),
        ("samples/debs2015-taxi-sample.csv", "2", "3", ",", False, "iso"),
    ],
)
def test_no_record_of_a_bundled_stream_trips_the_default_skew_bound(
    path, te, tp, delimiter, header, time_format
):
    stream = read_stream(
        path, event_time=te, arrival_time=tp, delimiter=delimiter, header=header, time_format=time_format
    )
    ahead = int((stream.te_ms - stream.tp_ms).max())
    assert ahead <= 0 < DEFAULT_MAX_EVENT_AHEAD_MS  # 0 ms at most (the taxi sample), the default 5 min


def test_no_record_of_a_synthetic_stream_trips_the_default_skew_bound():
    for seed in range(3):
        stream = generate(seed=seed)
        assert int((stream.te_ms - stream.tp_ms).max()) <= 0


@pytest.mark.parametrize("value", [-1, 86_400_001])
def test_the_skew_bound_is_range_checked(tmp_path, capsys, value):
    config = PipelineConfig.from_dict({"version": 1, "strategy": "periodic", "window_ms": 1_000})
    with pytest.raises(ValueError, match="--max-event-ahead-ms must be between 0 and 86400000"):
        JobOptions(input="in", output="out", checkpoint="ck", config=config, max_event_ahead_ms=value)
    argv = ["--input", str(tmp_path / "in"), "--output", str(tmp_path / "out")]
    argv += ["--checkpoint", str(tmp_path / "ck"), "--metrics-port", "0", "--max-event-ahead-ms", str(value)]
    assert main(argv) == 2
    assert "--max-event-ahead-ms must be between 0 and 86400000" in capsys.readouterr().err
    assert not (tmp_path / "ck").exists()  # refused before the checkpoint's application id is made


# --------------------------------------------------------------------------------------------------
# Item 11 (part): a line too long to read whole


def brute_long_lines(data: bytes, bound: int) -> list[tuple[int, int]]:
    found, start = [], 0
    for piece in data.split(b"\n"):
        if len(piece) > bound:
            found.append((start, len(piece)))
        start += len(piece) + 1
    return found


@given(st.lists(st.integers(0, 40), max_size=30), st.integers(1, 20), st.integers(1, 16), st.booleans())
def test_the_scan_finds_every_line_longer_than_the_bound_whatever_the_chunks(lengths, bound, chunk, end):
    data = b"\n".join(b"x" * n for n in lengths) + (b"\n" if end and lengths else b"")
    assert long_lines(io.BytesIO(data).read, bound, chunk=chunk) == brute_long_lines(data, bound)
    assert has_long_line(data, bound) == bool(brute_long_lines(data, bound))


def write_split_file(path, lines):
    path.write_bytes(b"".join(lines))
    return path.stat().st_size


def test_a_split_stops_reading_a_line_at_the_bound_and_says_so(tmp_path):
    short = b'{"a":1}\n'
    path = tmp_path / "f.json"
    size = write_split_file(path, [short, b"y" * 5_000 + b"\n", short])
    # The split ends inside the long line: finishing it would read 5 KB; the bound stops it at 1 KiB.
    split = Split(0, 0, str(path), 0, len(short) + 10, size)
    with pytest.raises(RecordTooLong, match="a line longer than 1024 bytes"):
        read_split(split, 1_024)
    assert read_split(split, 8_000) == short + b"y" * 5_000 + b"\n"  # within the bound: as before
    whole = Split(0, 0, str(path), 0, size, size)  # the long line inside the split
    with pytest.raises(RecordTooLong):
        read_split(whole, 1_024)
    later = Split(1, 0, str(path), len(short) + 10, size, size)  # starts inside it: only the last line
    assert read_split(later, 1_024) == short


def test_a_split_with_a_line_too_long_is_unclean_and_goes_to_spark_s_reader(tmp_path):
    path = tmp_path / "f.json"
    good = (line_of(0) + "\n").encode()
    size = write_split_file(path, [good, b'{"pad":"' + b"z" * 3_000 + b'"}\n', good])
    checks = replace(CHECKS, max_record_bytes=1_024)
    (collected,) = collect_pass([Split(0, 0, str(path), 0, size, size)], checks, "job", 0)
    assert not collected.clean and "a line longer than 1024 bytes" in collected.why


def line_of(i):
    return json.dumps(
        {
            "event_id": f"e{i}",
            "key": "k",
            "event_time_ms": 1_000 + i,
            "arrival_time_ms": 2_000 + i,
            "value": 1,
        }
    )


def test_a_screened_copy_is_the_file_with_each_long_line_as_a_placeholder(tmp_path):
    long_1 = b'{"event_id":"big",' + b"p" * 3_000 + b"}"
    long_2 = b"q" * 2_000  # the last line, without a newline
    data = b"a\n" + long_1 + b"\n\nb\n" + long_2
    (tmp_path / "in.json").write_bytes(data)
    cuts = long_lines(io.BytesIO(data).read, 1_024)
    assert cuts == [(2, len(long_1)), (len(data) - 2_000, 2_000)]
    write_screened(
        Location.of(str(tmp_path / "in.json")), Location.of(str(tmp_path / "out.json")), cuts, "M:"
    )
    copy = (tmp_path / "out.json").read_bytes().split(b"\n")
    assert copy[0] == b"a" and copy[2:4] == [b"", b"b"]  # every other byte as it was, the same lines
    assert copy[1] == placeholder("M:", len(long_1), long_1[:1_024])
    assert copy[1].startswith(b"M:%d:" % len(long_1))
    assert base64.b64decode(copy[1].split(b":")[2]) == long_1[:1_024]
    assert copy[4] == b"M:2000:" + base64.b64encode(b"q" * 1_024)
    assert len(copy) == 5  # no newline added at the end


def test_the_screen_copies_only_files_with_a_long_line_and_keeps_one_batch_s_copies(tmp_path):
    (tmp_path / "in").mkdir()
    small = tmp_path / "in" / "small.json"  # no larger than the bound: never opened
    small.write_bytes(b"s" * 1_024)
    fine = tmp_path / "in" / "fine.json"  # larger, but every line within the bound
    fine.write_bytes((b"f" * 1_000 + b"\n") * 5)
    bad = tmp_path / "in" / "bad.json"
    bad.write_bytes(b"x\n" + b"b" * 2_000 + b"\ny\n")
    screen = LongLineScreen(str(tmp_path / "ck"), "json", 1_024)
    files = [f"file://{p}" for p in (small, fine, bad)]
    copies = screen.screen(files, 7)
    assert list(copies) == [files[2]]
    copy = Path(copies[files[2]])
    assert copy.parent == Path(str(screen.layout.screened(7)))
    assert copy.read_bytes().split(b"\n")[0::2] == [b"x", b"y"]
    assert copy.read_bytes().split(b"\n")[1].startswith(screen.marker.encode() + b"2000:")
    screen.screen(files, 8)
    assert not copy.exists()  # batch 7's copies are gone once batch 8 is screened
    assert [n for n, _ in screen.layout.screened_batches()] == [8]
    screen.clear()
    assert screen.layout.screened_batches() == []
    assert LongLineScreen(str(tmp_path / "ck"), "parquet", 1_024).screen(files, 9) == {}  # not lines
    assert LongLineScreen(str(tmp_path / "ck"), "json", 1_024).marker != screen.marker  # a token per run


@pytest.mark.parametrize("value", [1_023, (1 << 30) + 1])
def test_the_record_bound_is_range_checked(tmp_path, capsys, value):
    config = PipelineConfig.from_dict({"version": 1, "strategy": "periodic", "window_ms": 1_000})
    with pytest.raises(ValueError, match="--max-record-bytes must be between 1024 and 1073741824"):
        JobOptions(input="in", output="out", checkpoint="ck", config=config, max_record_bytes=value)
    argv = ["--input", str(tmp_path / "in"), "--output", str(tmp_path / "out")]
    argv += ["--checkpoint", str(tmp_path / "ck"), "--metrics-port", "0", "--max-record-bytes", str(value)]
    assert main(argv) == 2
    assert "--max-record-bytes must be between 1024 and 1073741824" in capsys.readouterr().err
    assert not (tmp_path / "ck").exists()
