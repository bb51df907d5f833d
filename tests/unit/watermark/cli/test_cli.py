"""``python -m watermark``: replay, compare, synth; bad input gives one line and exit status 2."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.samples import IOT, IOT_TIMES, TAXI
from watermark.cli.main import main

ROOT = Path(__file__).resolve().parents[4]
IOT_FLAGS = IOT_TIMES
REQUIRED_KEYS = {
    "events",
    "late",
    "dropped_pct",
    "windows",
    "windows_fired",
    "trigger_delay_ms",
    "emit_latency_ms",
    "stragglers_pct",
    "watermarks_emitted",
}


def run_json(capsys, *argv):
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_replay_json_on_a_real_stream_has_every_documented_field(capsys):
    s = run_json(
        capsys,
        "replay",
        str(IOT),
        *IOT_FLAGS,
        "--strategy",
        "periodic",
        "--set",
        "delay_ms=1000",
        "--set",
        "period_ms=200",
        "--window-ms",
        "1000",
        "--json",
    )
    assert REQUIRED_KEYS <= set(s)
    assert s["events"] == 9_600
    assert 0 <= s["late"] < s["events"]
    assert s["windows_fired"] <= s["windows"]
    assert set(s["emit_latency_ms"]) == {"mean", "p50", "p95", "p99"}
    assert s["params"] == {"delay_ms": 1000, "period_ms": 200}


def test_replay_no_header_iso_times_and_column_indices(capsys):
    s = run_json(
        capsys,
        "replay",
        str(TAXI),
        "--no-header",
        "--time-format",
        "iso",
        "--event-time",
        "2",
        "--arrival-time",
        "3",
        "--strategy",
        "periodic",
        "--set",
        "delay_ms=600000",
        "--window-ms",
        "60000",
        "--json",
    )
    assert s["events"] == 10_004
    assert s["dropped_pct"] < 50


def test_replay_with_partitions_and_sliding_windows(capsys):
    s = run_json(
        capsys,
        "replay",
        str(IOT),
        *IOT_FLAGS,
        "--partition",
        "S.Device.ID",
        "--idle-timeout-ms",
        "5000",
        "--strategy",
        "adaptive",
        "--set",
        "warmup=100",
        "--window-ms",
        "1000",
        "--slide-ms",
        "500",
        "--json",
    )
    assert s["partitions"] == 8
    assert s["slide_ms"] == 500


def test_replay_text_output_is_a_readable_report(capsys):
    assert main(["replay", str(IOT), *IOT_FLAGS, "--strategy", "sliding", "--window-ms", "1000"]) == 0
    out = capsys.readouterr().out
    assert "late (dropped)" in out and "emit latency ms" in out and "9,600" in out


def write(tmp_path, text, name="s.csv"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("content", "argv", "needle"),
    [
        ("te,tp\n1,2\n", ["--event-time", "nope", "--arrival-time", "tp"], "column 'nope' not found"),
        ("te,tp\n1,2\n3,x\n", ["--event-time", "te", "--arrival-time", "tp"], "line 3"),
        ("te,tp\n", ["--event-time", "te", "--arrival-time", "tp"], "no data rows"),
        ("", ["--event-time", "te", "--arrival-time", "tp"], ""),
        (
            "te,tp\n1,2\n",
            ["--event-time", "te", "--arrival-time", "tp", "--set", "delay_ms=-3"],
            "delay_ms must be >= 0",
        ),
        (
            "te,tp\n1,2\n",
            ["--event-time", "te", "--arrival-time", "tp", "--set", "delay_ms"],
            "--set expects name=value",
        ),
        (
            "te,tp\n1,2\n",
            ["--event-time", "te", "--arrival-time", "tp", "--strategy", "magic"],
            "unknown strategy",
        ),
        (
            "te,tp\n1,2\n",
            ["--event-time", "te", "--arrival-time", "tp", "--window-ms", "0"],
            "window_ms must be >= 1",
        ),
    ],
)
def test_bad_input_is_one_line_on_stderr_and_exit_status_2(tmp_path, capsys, content, argv, needle):
    path = write(tmp_path, content)
    full = ["replay", path, *argv]
    if "--strategy" not in full:
        full += ["--strategy", "periodic"]
    if "--window-ms" not in full:
        full += ["--window-ms", "1000"]
    assert main(full) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert err.count("\n") == 1
    assert needle in err


def test_missing_file_and_missing_flags_exit_2(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "watermark",
            "replay",
            str(tmp_path / "absent.csv"),
            "--event-time",
            "a",
            "--arrival-time",
            "b",
            "--strategy",
            "periodic",
            "--window-ms",
            "10",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1
    proc = subprocess.run(
        [sys.executable, "-m", "watermark", "replay"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 2
    assert "error:" in proc.stderr


def test_compare_prints_one_table_row_per_setting_and_window(tmp_path, capsys):
    grid = tmp_path / "grid.json"
    grid.write_text(
        json.dumps(
            {
                "periodic": [{"delay_ms": 0, "period_ms": 10}, {"delay_ms": 1000, "period_ms": 200}],
                "ingestion": [{"max_event_time_lag_ms": 500}],
            }
        )
    )
    assert main(["compare", str(IOT), *IOT_FLAGS, "--window-ms", "100,1000", "--grid", str(grid)]) == 0
    captured = capsys.readouterr()
    rows = [
        line
        for line in captured.out.splitlines()
        if line.startswith("| periodic") or line.startswith("| ingestion")
    ]
    assert len(rows) == 6
    assert "[6/6]" in captured.err  # progress on stderr


def test_compare_json_lets_later_settings_be_compared(capsys):
    rows = run_json(
        capsys, "compare", str(IOT), *IOT_FLAGS, "--window-ms", "1000", "--strategies", "periodic", "--json"
    )
    by_delay = {r["grid_params"]["delay_ms"]: r for r in rows}
    # A longer bounded delay never drops more on the same data.
    assert by_delay[0]["dropped_pct"] >= by_delay[100]["dropped_pct"] >= by_delay[1000]["dropped_pct"]


def test_synth_writes_a_parquet_file_the_replay_can_read(tmp_path, capsys):
    out = tmp_path / "s.parquet"
    info = run_json(capsys, "synth", "--events", "5000", "--seed", "3", "--output", str(out))
    assert info["events"] == 5_000 and out.exists()
    s = run_json(
        capsys,
        "replay",
        str(out),
        "--event-time",
        "event_time_ms",
        "--arrival-time",
        "arrival_time_ms",
        "--partition",
        "partition",
        "--strategy",
        "ingestion",
        "--window-ms",
        "1000",
        "--json",
    )
    assert s["events"] == 5_000 and s["partitions"] == 8


def test_strategies_lists_all_six(capsys):
    assert main(["strategies"]) == 0
    out = capsys.readouterr().out
    for name in ("periodic", "adaptive", "sliding", "percentile", "band", "ingestion"):
        assert name in out
