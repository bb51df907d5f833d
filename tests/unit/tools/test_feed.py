"""``python -m tools.feed``: a recorded or synthetic stream into landing files, in arrival order."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from tests.samples import IOT, IOT_FLAGS
from tools.feed.cli import main
from tools.feed.landing import feed
from tools.feed.records import records_from_file, records_from_synthetic

ROOT = Path(__file__).resolve().parents[3]

# Seven rows out of arrival order; rows 1 and 4 (0-based) tie at arrival 1500 and must keep file order.
CSV = """te,tp,dev,k,v
1000,1700,a,x,1.5
1100,1500,b,y,2
1200,1300,a,x,-3.25
1300,1900,b,z,4e1
1400,1500,a,y,5
1500,1600,b,x,6
1600,2000,a,z,7
"""
# Data rows by arrival time, stable: (event_id, tp).
ARRIVAL_ORDER = [("2", 1300), ("1", 1500), ("4", 1500), ("5", 1600), ("0", 1700), ("3", 1900), ("6", 2000)]
CSV_FLAGS = ["--event-time", "te", "--arrival-time", "tp", "--partition", "dev", "--key", "k", "--value", "v"]
FIELDS = ["event_id", "key", "partition", "event_time_ms", "arrival_time_ms", "value"]


def write_csv(tmp_path: Path, text: str = CSV, name: str = "stream.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def run(capsys, *argv: str) -> tuple[int, str, str]:
    """Run main(); parser errors raise SystemExit, which counts as the exit status."""
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def feed_files(out: Path) -> list[Path]:
    return sorted(p for p in out.iterdir() if p.name.startswith("feed-"))


def json_rows(out: Path) -> list[dict]:
    return [json.loads(line) for path in feed_files(out) for line in path.read_text().splitlines()]


def test_csv_out_of_arrival_order_becomes_json_files_in_arrival_order(tmp_path, capsys):
    out = tmp_path / "landing"
    code, stdout, stderr = run(capsys, write_csv(tmp_path), *CSV_FLAGS, "--out", out, "--rows-per-file", 3)
    assert code == 0
    summary = json.loads(stdout)
    assert summary == {
        "files": 3,
        "rows": 7,
        "out": str(out),
        "first_arrival_ms": 1300,
        "last_arrival_ms": 2000,
    }

    files = feed_files(out)
    assert [p.name for p in files] == ["feed-000001.json", "feed-000002.json", "feed-000003.json"]
    assert len(files) == math.ceil(7 / 3)
    assert sorted(os.listdir(out)) == [p.name for p in files]  # nothing hidden left behind
    assert [len(p.read_text().splitlines()) for p in files] == [3, 3, 1]

    rows = json_rows(out)
    assert [(r["event_id"], r["arrival_time_ms"]) for r in rows] == ARRIVAL_ORDER
    assert all(list(r) == FIELDS for r in rows)
    first = rows[0]
    assert first == {
        "event_id": "2",
        "key": "x",
        "partition": "a",
        "event_time_ms": 1200,
        "arrival_time_ms": 1300,
        "value": -3.25,
    }
    for r in rows:
        assert (
            isinstance(r["event_id"], str) and isinstance(r["key"], str) and isinstance(r["partition"], str)
        )
        assert type(r["event_time_ms"]) is int and type(r["arrival_time_ms"]) is int
        assert type(r["value"]) is float
    assert [r["value"] for r in rows] == [-3.25, 2.0, 5.0, 6.0, 1.5, 40.0, 7.0]

    # One progress line per file on stderr, the last one for the single-row file.
    lines = stderr.splitlines()
    assert len(lines) == 3
    assert lines[0] == "file 1/3: 3 rows, arrival 1970-01-01T00:00:01Z"
    assert lines[2].startswith("file 3/3: 1 rows")


def test_defaults_key_from_partition_else_all_and_value_one(tmp_path):
    path = write_csv(tmp_path)
    with_partition = records_from_file(path, event_time="te", arrival_time="tp", partition="dev")
    assert with_partition.column("key").to_pylist() == with_partition.column("partition").to_pylist()
    assert set(with_partition.column("value").to_pylist()) == {1.0}

    bare = records_from_file(path, event_time="te", arrival_time="tp")
    assert bare.column_names == ["event_id", "key", "event_time_ms", "arrival_time_ms", "value"]
    assert set(bare.column("key").to_pylist()) == {"all"}
    assert bare.schema.field("event_time_ms").type == pa.int64()

    out = tmp_path / "out"
    feed(bare, out)
    assert all("partition" not in r for r in json_rows(out))


def test_no_arrival_time_drops_the_field(tmp_path, capsys):
    out = tmp_path / "landing"
    code, stdout, _ = run(
        capsys, write_csv(tmp_path), *CSV_FLAGS, "--out", out, "--no-arrival-time", "--quiet"
    )
    assert code == 0
    rows = json_rows(out)
    assert len(rows) == 7
    assert all(list(r) == ["event_id", "key", "partition", "event_time_ms", "value"] for r in rows)
    # Still fed in arrival order, and the summary still reports the arrival span.
    assert [r["event_id"] for r in rows] == [eid for eid, _ in ARRIVAL_ORDER]
    assert json.loads(stdout)["first_arrival_ms"] == 1300


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_csv_and_parquet_round_trip(tmp_path, capsys, fmt):
    out = tmp_path / "landing"
    code, _, stderr = run(
        capsys,
        write_csv(tmp_path),
        *CSV_FLAGS,
        "--out",
        out,
        "--format",
        fmt,
        "--rows-per-file",
        4,
        "--quiet",
    )
    assert code == 0 and stderr == ""
    files = feed_files(out)
    assert [p.name for p in files] == [f"feed-000001.{fmt}", f"feed-000002.{fmt}"]
    if fmt == "csv":
        types = {"event_id": pa.string(), "key": pa.string(), "partition": pa.string()}
        read = [pacsv.read_csv(p, convert_options=pacsv.ConvertOptions(column_types=types)) for p in files]
    else:
        read = [pq.read_table(p) for p in files]
    table = pa.concat_tables(read)
    assert table.column_names == FIELDS
    assert table.schema.field("event_time_ms").type == pa.int64()
    assert table.schema.field("arrival_time_ms").type == pa.int64()
    assert table.schema.field("value").type == pa.float64()
    assert [(r["event_id"], r["arrival_time_ms"]) for r in table.to_pylist()] == ARRIVAL_ORDER
    assert table.column("value").to_pylist() == [-3.25, 2.0, 5.0, 6.0, 1.5, 40.0, 7.0]


def test_a_second_run_continues_the_numbering_and_leaves_no_temporary_file(tmp_path, capsys):
    out = tmp_path / "landing"
    out.mkdir()
    (out / "feed-000007.json").write_text("")  # from an earlier run
    (out / ".feed-000099.json.123.tmp").write_text("")  # a crashed run's temporary: not a feed file
    (out / "notes-000500.json").write_text("")
    records = records_from_file(write_csv(tmp_path), event_time="te", arrival_time="tp")

    first = feed(records, out, rows_per_file=5)
    assert first["files"] == 2
    second = feed(records, out, fmt="csv", rows_per_file=5)
    assert second["files"] == 2
    names = sorted(p.name for p in feed_files(out))
    assert names == [
        "feed-000007.json",
        "feed-000008.json",
        "feed-000009.json",
        "feed-000010.csv",
        "feed-000011.csv",
    ]
    hidden = sorted(name for name in os.listdir(out) if name.startswith("."))
    assert hidden == [".feed-000099.json.123.tmp"]  # ours are all renamed into place


def test_max_files_stops_early(tmp_path, capsys):
    out = tmp_path / "landing"
    code, stdout, _ = run(
        capsys, write_csv(tmp_path), *CSV_FLAGS, "--out", out, "--rows-per-file", 2, "--max-files", 2
    )
    assert code == 0
    summary = json.loads(stdout)
    assert (summary["files"], summary["rows"], summary["last_arrival_ms"]) == (2, 4, 1600)
    assert len(feed_files(out)) == 2
    assert [r["event_id"] for r in json_rows(out)] == ["2", "1", "4", "5"]


def test_realtime_pace_waits_for_the_scaled_arrival_times(tmp_path):
    # Five one-row files, arrivals 2.5 s apart (10 s in all): at speed 50 they are due 0, 50, ..., 200 ms.
    arrivals = [1_000_000, 1_002_500, 1_005_000, 1_007_500, 1_010_000]
    records = pa.table(
        {
            "event_id": [str(i) for i in range(5)],
            "key": ["k"] * 5,
            "event_time_ms": arrivals,
            "arrival_time_ms": arrivals,
            "value": [1.0] * 5,
        }
    )
    released: list[float] = []
    start = time.monotonic()
    summary = feed(
        records,
        tmp_path,
        rows_per_file=1,
        pace="realtime",
        speed=50,
        progress=lambda line: released.append(time.monotonic() - start),
    )
    elapsed = time.monotonic() - start
    assert summary["files"] == 5
    due = [(a - arrivals[0]) / 1000 / 50 for a in arrivals]
    assert elapsed >= 0.8 * due[-1]  # lower bounds only: a slow machine may take longer
    assert all(t >= 0.8 * d for t, d in zip(released, due, strict=True))


def test_synthetic_source(tmp_path, capsys):
    out = tmp_path / "landing"
    code, stdout, _ = run(
        capsys, "--synthetic", 2500, "--partitions", 3, "--seed", 5, "--out", out, "--quiet"
    )
    assert code == 0
    assert json.loads(stdout)["rows"] == 2500
    rows = json_rows(out)
    assert len(rows) == 2500 and len(feed_files(out)) == 3
    assert {r["partition"] for r in rows} == {"0", "1", "2"}
    assert sorted(int(r["event_id"]) for r in rows) == list(range(2500))
    arrivals = [r["arrival_time_ms"] for r in rows]
    assert arrivals == sorted(arrivals)
    assert all(list(r) == FIELDS for r in rows)

    table = records_from_synthetic(2500, partitions=3, seed=5)
    assert [r["event_id"] for r in rows] == table.column("event_id").to_pylist()


def test_feed_sorts_escapes_and_handles_an_empty_table(tmp_path):
    records = pa.table(
        {
            "value": [2.0, 1.0, 0.5],  # column order and extra columns do not matter
            "event_id": [10, 11, 12],  # cast to string
            "key": ['quote " back \\ tab \t', "naïve ☃", "plain"],
            "arrival_time_ms": [30, 10, 20],
            "event_time_ms": [3, 1, 2],
            "extra": ["x", "y", "z"],
        }
    )
    summary = feed(records, tmp_path / "a")
    assert (summary["first_arrival_ms"], summary["last_arrival_ms"]) == (10, 30)
    rows = json_rows(tmp_path / "a")
    assert [r["key"] for r in rows] == ["naïve ☃", "plain", 'quote " back \\ tab \t']
    assert [r["event_id"] for r in rows] == ["11", "12", "10"]

    empty = feed(records.slice(0, 0), tmp_path / "b")
    assert empty == {
        "files": 0,
        "rows": 0,
        "out": str(tmp_path / "b"),
        "first_arrival_ms": None,
        "last_arrival_ms": None,
    }
    assert os.listdir(tmp_path / "b") == []

    with pytest.raises(ValueError, match="value"):
        feed(records.set_column(0, "value", pa.array([1.0, math.nan, 2.0])), tmp_path / "c")
    with pytest.raises(ValueError, match="arrival_time_ms"):
        feed(records.drop_columns(["arrival_time_ms"]), tmp_path / "c")


BAD_VALUE = "te,tp,v\n1,2,1.5\n3,4,abc\n"


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--synthetic", "10"], "--out"),
        (["--synthetic", "10", "--out", "{out}", "--rows-per-file", "0"], "rows per file"),
        (["--synthetic", "10", "--out", "{out}", "--speed", "0"], "speed"),
        (["--synthetic", "10", "--out", "{out}", "--speed", "-2"], "speed"),
        (["--synthetic", "0", "--out", "{out}"], "--synthetic"),
        (["--out", "{out}"], "INPUT"),
        (["{csv}", "--synthetic", "3", "--out", "{out}"], "not both"),
        (["{csv}", "--out", "{out}"], "--event-time"),
        (["{csv}", "--event-time", "te", "--arrival-time", "nope", "--out", "{out}"], "'nope' not found"),
        (["{missing}", "--event-time", "te", "--arrival-time", "tp", "--out", "{out}"], "cannot read"),
        (
            ["{csv}", "--event-time", "te", "--arrival-time", "tp", "--value", "v", "--out", "{out}"],
            "line 3 (data row 2), column 'v': not a number: 'abc'",
        ),
    ],
)
def test_bad_input_prints_one_line_and_exits_2(tmp_path, capsys, argv, needle):
    names = {"out": tmp_path / "out", "csv": write_csv(tmp_path, BAD_VALUE), "missing": tmp_path / "none.csv"}
    code, stdout, stderr = run(capsys, *(arg.format(**names) for arg in argv))
    assert code == 2
    assert stdout == ""
    assert stderr.startswith("error: ") and stderr.endswith("\n") and stderr.count("\n") == 1
    assert needle in stderr
    assert not (tmp_path / "out").exists() or feed_files(tmp_path / "out") == []


def test_bad_input_via_the_module_entry_point(tmp_path):
    path = write_csv(tmp_path, BAD_VALUE)
    argv = [sys.executable, "-m", "tools.feed", str(path), "--event-time", "te", "--arrival-time", "missing"]
    done = subprocess.run([*argv, "--out", str(tmp_path / "out")], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1
    assert "'missing' not found" in done.stderr


def test_the_iot_sample_feeds_all_its_rows(tmp_path, capsys):
    out = tmp_path / "landing"
    code, stdout, stderr = run(
        capsys,
        IOT,
        *IOT_FLAGS,
        "--out",
        out,
        "--format",
        "parquet",
    )
    assert code == 0
    summary = json.loads(stdout)
    assert (summary["files"], summary["rows"]) == (10, 9_600)
    assert len(stderr.splitlines()) == 10
    assert stderr.splitlines()[0] == "file 1/10: 1,000 rows, arrival 2014-11-10T12:53:41Z"
    table = pa.concat_tables(pq.read_table(p) for p in feed_files(out))
    assert table.num_rows == 9_600
    arrivals = table.column("arrival_time_ms").to_pylist()
    assert arrivals == sorted(arrivals)
    assert (arrivals[0], arrivals[-1]) == (summary["first_arrival_ms"], summary["last_arrival_ms"])
    assert table.column("partition").to_pylist() == table.column("key").to_pylist()
    assert len(set(table.column("partition").to_pylist())) > 1


def test_files_get_strictly_increasing_modification_times_a_millisecond_apart(tmp_path):
    from tools.feed.landing import feed
    from tools.feed.records import records_from_synthetic

    feed(records_from_synthetic(5_000), tmp_path, rows_per_file=100)
    feed(
        records_from_synthetic(1_000, seed=1), tmp_path, rows_per_file=100
    )  # a second run continues the order
    files = sorted(p for p in tmp_path.iterdir() if p.name.startswith("feed-"))
    mtimes = [p.stat().st_mtime_ns // 1_000_000 for p in files]  # Spark compares milliseconds
    assert len(files) == 60
    assert all(b > a for a, b in zip(mtimes, mtimes[1:], strict=False))
