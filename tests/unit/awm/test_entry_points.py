"""The command lines as packaged: the entry point awm and its subcommands, complete --help, logging formats,
progress output (the root command itself: tests/unit/awm/test_awm_cli.py)."""

from __future__ import annotations

import argparse
import importlib
import io
import json
import logging
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from awm.cli import COMMANDS
from tests.samples import IOT, IOT_TIMES
from watermark.cli.log import (
    CliError,
    add_logging_flags,
    command_prog,
    plain_text,
    run_main,
    setup_logging,
)
from watermark.cli.main import STRATEGY_NAMES
from watermark.progress import ProgressReporter, progress_line
from watermark.strategies.registry import STRATEGIES

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent
IOT_FLAGS = IOT_TIMES

#: The command lines: the root command, each subcommand's module, and bin/kafka-local's.
CLI_MODULES = sorted({"awm.cli", "tools.local.kafka", *(command.module for command in COMMANDS.values())})
RST = re.compile(r"``|:[a-z]+:`")


def parser_of(module: str) -> argparse.ArgumentParser:
    parser = importlib.import_module(module).build_parser()
    add_logging_flags(parser)  # as run_main does
    return parser


def walk(parser: argparse.ArgumentParser, path: str = ""):
    """(subcommand path, name, action) for every action of the parser and of its subcommands."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                yield path, f"subcommand {choice.dest}", choice
            for name, sub in action.choices.items():
                yield from walk(sub, f"{path}{name} ")
        else:
            yield path, "/".join(action.option_strings) or action.dest, action


def squeeze(text: str) -> str:
    return re.sub(r"\s+", "", text)


def command_parser(name: str) -> argparse.ArgumentParser:
    """The parser whose help ``awm NAME --help`` prints."""
    command = COMMANDS[name]
    with command_prog("awm" if command.named else f"awm {name}"):
        parser = parser_of(command.module)
    if not command.named:
        return parser
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return subs.choices[name]


def test_the_one_script_in_pyproject_is_the_root_command():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"awm": "awm.cli:main"}


@pytest.mark.parametrize("module", CLI_MODULES)
def test_every_flag_has_help(module):
    missing = [
        f"{path}{where}"
        for path, where, action in walk(parser_of(module))
        if not isinstance(action, argparse._HelpAction)
        and (not action.help or not action.help.strip() or action.help == argparse.SUPPRESS)
    ]
    assert missing == []


@pytest.mark.slow
def test_awm_is_installed_and_each_subcommand_help_lists_every_flag():
    assert (BIN / "awm").exists(), f"awm is not installed in {BIN}: run bin/bootstrap.sh (pip install -e .)"
    root = subprocess.run([str(BIN / "awm"), "--help"], capture_output=True, text=True, check=False)
    assert root.returncode == 0, root.stderr
    for name, command in COMMANDS.items():
        assert re.search(rf"^\s+{name}\s+{re.escape(command.help[:20])}", root.stdout, re.M), name
    runs = {
        name: subprocess.Popen(
            [str(BIN / "awm"), name, "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for name in COMMANDS
    }
    for name, proc in runs.items():
        out, err = proc.communicate()
        assert proc.returncode == 0, f"awm {name}: {err}"
        assert out.startswith(f"usage: awm {name} ")
        assert not RST.search(out), f"awm {name} --help shows reStructuredText"
        flat = squeeze(out)
        for path, where, action in walk(command_parser(name)):
            if path:  # a subcommand's own flags: in its own --help
                continue
            for flag in action.option_strings:
                assert flag in out, f"awm {name} --help lacks {flag}"
            if action.help and action.help != argparse.SUPPRESS:
                text = action.help.replace("%%", "%").replace(STRATEGY_NAMES, ", ".join(STRATEGIES))
                assert squeeze(text) in flat, f"awm {name}: help of {where}"


def test_python_m_watermark_help_lists_tune_in_plain_text():
    proc = subprocess.run(
        [sys.executable, "-m", "watermark", "--help"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^\s+tune\s+choose the strategy", proc.stdout, re.M)
    assert "{replay,compare,tune,synth,strategies}" in proc.stdout or "COMMAND" in proc.stdout
    assert not RST.search(proc.stdout)
    tune = subprocess.run(
        [sys.executable, "-m", "watermark", "tune", "--help"], capture_output=True, text=True, check=False
    )
    assert tune.returncode == 0 and "--target-late-pct" in tune.stdout and "--log-format" in tune.stdout
    assert not RST.search(tune.stdout)


def test_plain_text_strips_rst():
    assert plain_text("see ``python -m tools.feed`` and :func:`watermark.streams.recorded.read_stream`") == (
        "see python -m tools.feed and watermark.streams.recorded.read_stream"
    )


# --------------------------------------------------------------------------------------------------
# Logging and errors.


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="t")
    p.add_argument("--fail", choices=("value", "cli", "boom"))
    return p


def _handler(args: argparse.Namespace) -> int:
    log = logging.getLogger("jobs.test")
    log.info("working on %d rows", 3)
    log.debug("hidden at INFO")
    try:
        1 / 0  # noqa: B018
    except ZeroDivisionError:
        log.warning("recovered", exc_info=True)
    if args.fail == "value":
        msg = "bad value"
        raise ValueError(msg)
    if args.fail == "cli":
        msg = "no such file"
        raise CliError(msg, 7)
    if args.fail == "boom":
        msg = "unexpected"
        raise RuntimeError(msg)
    print("result")
    return 0


def test_json_log_format_gives_one_parseable_object_per_line(capsys):
    assert run_main(_parser(), _handler, ["--log-format", "json"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "result\n"
    records = [json.loads(line) for line in captured.err.splitlines()]
    assert [(r["level"], r["logger"], r["message"]) for r in records] == [
        ("INFO", "jobs.test", "working on 3 rows"),
        ("WARNING", "jobs.test", "recovered"),
    ]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", r["time"]) for r in records)
    assert "exception" not in records[0]
    assert "ZeroDivisionError: division by zero" in records[1]["exception"]
    assert records[1]["exception"].startswith("Traceback")


@pytest.mark.parametrize(
    ("fail", "code", "needle"), [("value", 2, "error: bad value"), ("cli", 7, "error: no such file")]
)
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_known_errors_are_one_line_with_their_exit_status(capsys, fail, code, needle, fmt):
    argv = ["--fail", fail, "--log-level", "ERROR", "--log-format", fmt]
    assert run_main(_parser(), _handler, argv) == code
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    if fmt == "json":
        record = json.loads(err)
        assert (record["level"], record["message"]) == ("ERROR", needle)
    else:
        assert err == needle + "\n"


def test_an_unexpected_error_is_logged_with_its_traceback_and_exit_1(capsys):
    assert run_main(_parser(), _handler, ["--fail", "boom", "--log-format", "json"]) == 1
    last = json.loads(capsys.readouterr().err.splitlines()[-1])
    assert last["level"] == "CRITICAL" and last["message"] == "error: RuntimeError: unexpected"
    assert "raise RuntimeError(msg)" in last["exception"]


def test_log_level_filters_and_text_format_names_level_and_logger(capsys):
    assert run_main(_parser(), _handler, ["--log-level", "debug"]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert lines[:2] == ["INFO jobs.test: working on 3 rows", "DEBUG jobs.test: hidden at INFO"]
    assert lines[2] == "WARNING jobs.test: recovered" and lines[3] == "Traceback (most recent call last):"


def test_setup_logging_replaces_only_its_own_handler():
    root = logging.getLogger()
    other = logging.NullHandler()
    root.addHandler(other)
    try:
        first = setup_logging("INFO", "text")
        second = setup_logging("WARNING", "json")
        assert first not in root.handlers and second in root.handlers and other in root.handlers
        assert root.level == logging.WARNING
    finally:
        root.removeHandler(other)
        root.removeHandler(second)


def test_the_compare_command_logs_json_progress_and_keeps_its_table_on_stdout(tmp_path):
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps({"periodic": [{"delay_ms": d, "period_ms": 10} for d in range(0, 1000, 50)]}))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "watermark",
            "--log-format",
            "json",
            "compare",
            str(IOT),
            *IOT_FLAGS,
            "--window-ms",
            "1000",
            "--grid",
            str(grid),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("| periodic") == 20
    records = [json.loads(line) for line in proc.stderr.splitlines()]
    progress = [r["message"] for r in records if r["logger"] == "awm.progress"]
    # 20 runs, stderr not a terminal: the first run, then one line each 10 % (the 20th run is the 100 %).
    assert progress[0].startswith("[1/20] periodic") and progress[-1].startswith("[20/20] periodic")
    assert len(progress) == 11


def test_the_subcommand_accepts_the_logging_flags_after_its_name(capsys):
    from watermark.cli.main import main

    assert main(["strategies", "--log-format", "json", "--log-level", "WARNING"]) == 0
    assert "periodic" in capsys.readouterr().out
    assert logging.getLogger().level == logging.WARNING


# --------------------------------------------------------------------------------------------------
# Progress.


def test_progress_off_a_terminal_logs_a_plain_line_each_ten_percent(capsys):
    setup_logging("INFO", "text")
    with ProgressReporter("feed", unit="file", bar=None, stream=io.StringIO()) as progress:
        progress("loading")  # a line without a count: always shown
        for k in range(1, 101):
            progress(progress_line(f"file {k}/100", k, 100))
        progress(progress_line("file 100/100", 100, 100))  # the same last line again: not repeated
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["loading", "file 1/100", *(f"file {k}/100" for k in range(10, 101, 10))]


def test_progress_lines_are_plain_strings_for_callers_that_collect_them():
    seen: list[str] = []
    seen.append(progress_line("[1/2] periodic", 1, 2))
    assert seen == ["[1/2] periodic"] and json.dumps(seen) == '["[1/2] periodic"]'


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_on_a_terminal_draws_a_bar(capsys):
    terminal = Terminal()
    with ProgressReporter("compare", unit="run", stream=terminal) as progress:
        for k in range(1, 5):
            progress(progress_line(f"[{k}/4] periodic", k, 4))
    drawn = terminal.getvalue()
    assert "\r" in drawn and "compare: 100%" in drawn and "4/4" in drawn and "[4/4] periodic" in drawn
    assert capsys.readouterr().err == ""  # nothing logged besides the bar


def test_quiet_progress_reports_nothing(capsys):
    setup_logging("INFO", "text")
    terminal = Terminal()
    with ProgressReporter("feed", enabled=False, stream=terminal) as progress:
        progress(progress_line("file 1/1", 1, 1))
    assert terminal.getvalue() == "" and capsys.readouterr().err == ""


def test_feed_off_a_terminal_prints_plain_progress_lines(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tools.feed",
            "--synthetic",
            "2000",
            "--out",
            str(tmp_path / "landing"),
            "--rows-per-file",
            "100",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("file 1/20: 100 rows, arrival ")
    assert [line.split(":")[0] for line in lines] == ["file 1/20", *(f"file {k}/20" for k in range(2, 21, 2))]
    assert json.loads(proc.stdout)["files"] == 20
