"""The root command awm: its table of subcommands, lazy imports, program names, --version, handed-on flags."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import logging
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import watermark.cli.main
from awm.cli import COMMANDS, main
from watermark.cli import log as clilog

ROOT = Path(__file__).resolve().parents[3]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]

#: Modules only a run (not a --help) may need: a Spark JVM, the Delta and Airflow stacks.
HEAVY = ("pyspark", "delta", "airflow", "great_expectations", "confluent_kafka")


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )


def test_the_table_has_every_command_and_each_module_has_a_main():
    assert list(COMMANDS) == [
        *watermark.cli.main.COMMANDS,
        "stream",
        "feed",
        "backfill",
        "retune",
        "quality",
        "maintain",
    ]
    assert list(watermark.cli.main.COMMANDS) == ["replay", "compare", "tune", "synth", "strategies"]
    assert {name for name, c in COMMANDS.items() if c.named} == set(watermark.cli.main.COMMANDS)
    modules = {c.module for c in COMMANDS.values()}
    assert modules == {
        "watermark.cli.main",
        "jobs.stream.cli",
        "tools.feed.cli",
        "jobs.batch.backfill",
        "jobs.batch.retune",
        "jobs.batch.quality",
        "jobs.batch.maintenance",
    }
    for module in modules:
        assert callable(importlib.import_module(module).main), module


def test_help_imports_no_subcommand_and_each_subcommand_help_imports_no_spark():
    """``awm --help`` imports none of the subcommands' modules; ``awm X --help`` neither Spark nor Airflow."""
    proc = run_python(
        f"""
import contextlib, io, json, sys
from awm.cli import COMMANDS, main
seen = {{}}
for argv in [["--help"], *([name, "--help"] for name in COMMANDS)]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main(argv)
    loaded = sorted({{m.split(".")[0] for m in sys.modules}} & set({HEAVY!r}) | {{
        c.module for c in COMMANDS.values() if c.module in sys.modules and c.module != "watermark.cli.main"}})
    seen[" ".join(argv)] = [out.getvalue().splitlines()[0], loaded]
print(json.dumps(seen))
"""
    )
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    usage, loaded = seen["--help"]
    assert usage.startswith("usage: awm [-h] [--version]") and loaded == []
    for name in COMMANDS:
        usage, loaded = seen[f"{name} --help"]
        assert usage.startswith(f"usage: awm {name} "), usage
        assert not set(loaded) & set(HEAVY), f"awm {name} --help imported {loaded}"


def test_the_library_never_imports_the_jobs_the_tools_or_the_root_command():
    outside = {"jobs", "tools", "awm", "monitoring", "dags"}
    found = []
    for path in sorted((ROOT / "watermark").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            found += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in outside]
    assert found == []


@pytest.mark.parametrize("argv", [["--version"], *([name, "--version"] for name in COMMANDS)])
def test_version_everywhere(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code in (0, None)
    assert capsys.readouterr().out == f"awm {VERSION}\n"


def test_version_of_bin_kafka_local_and_python_m(capsys):
    from tools.local import kafka

    with pytest.raises(SystemExit):
        kafka.main(["--version"])
    assert capsys.readouterr().out == f"awm {VERSION}\n"
    proc = subprocess.run(
        [sys.executable, "-m", "awm", "--version"], capture_output=True, text=True, timeout=120, check=False
    )
    assert (proc.returncode, proc.stdout) == (0, f"awm {VERSION}\n")


def test_version_without_metadata_is_the_source_trees_then_unknown(monkeypatch, tmp_path):
    assert clilog.package_version() == importlib.metadata.version("adaptive-watermarks") == VERSION

    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    assert clilog.package_version() == VERSION  # this tree's pyproject.toml
    monkeypatch.setattr(clilog, "__file__", str(tmp_path / "watermark" / "clilog.py"))
    assert clilog.package_version() == "unknown"  # a copy of the package without pyproject.toml
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "another"\nversion = "9"\n')
    assert clilog.version_text() == "awm unknown"


def test_a_subcommand_shows_awm_and_its_name_as_its_program(capsys):
    with pytest.raises(SystemExit):
        main(["maintain", "--help"])  # a parser that names itself jobs/batch/maintenance.py
    assert capsys.readouterr().out.startswith("usage: awm maintain [-h] --tables TABLES")
    assert clilog.entry_prog("python -m tools.feed") == "python -m tools.feed"  # no name left behind


def test_usage_errors_of_the_subcommand_name_it(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["replay", "in.csv", "--event-time", "a"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the following arguments are required: --arrival-time")
    assert err.rstrip().endswith("(see awm replay --help)")


@pytest.mark.parametrize(
    ("argv", "needle"),
    [([], "the following arguments are required: COMMAND"), (["nope"], "invalid choice: 'nope'")],
)
def test_usage_errors_of_the_root_are_one_line_and_exit_2(argv, needle, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err and err.rstrip().endswith("(see awm --help)")


def test_logging_flags_before_the_subcommand_are_handed_on(capsys):
    assert main(["--log-level", "warning", "--log-format", "json", "strategies"]) == 0
    assert "periodic" in capsys.readouterr().out
    assert logging.getLogger().level == logging.WARNING
    assert main(["--log-level", "WARNING", "strategies", "--log-level", "ERROR"]) == 0  # the later one wins
    assert logging.getLogger().level == logging.ERROR
