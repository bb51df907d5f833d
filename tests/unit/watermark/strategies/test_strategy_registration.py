"""A strategy declares itself: registered through the registry alone (``tests/toy_strategy.py``), it is in
the tuner's search space, ``awm compare``'s default grid, the command line's help and the contract tests.

Each check runs in a process of its own, which imports the toy strategy: the registry of this process (and
of every other test) keeps the eight design strategies.
"""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from watermark.strategies.registry import STRATEGIES

ROOT = Path(__file__).resolve().parents[4]
IOT = ["samples/ooo-iot-d1.csv", "--delimiter", ";", "--event-time", "S.Client.Detection.Time"]
IOT += ["--arrival-time", "S.Message.received.time.ms"]


def run_with_toy(code: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a new interpreter at the repository's root, after registering the toy strategy."""
    script = "import tests.toy_strategy\ntests.toy_strategy.install()\n" + textwrap.dedent(code)
    return subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=600, check=False
    )


def test_the_toy_strategy_is_not_registered_here():
    assert "toylag" not in STRATEGIES


def test_a_registered_strategy_is_in_the_tuners_space_and_awm_compare_and_tune_replay_it():
    proc = run_with_toy(f"""
        from watermark.cli.main import main
        from watermark.strategies.registry import comparison_grid, monotone_params, search_space
        assert search_space()["toylag"][:2] == [{{"lag_ms": 0}}, {{"lag_ms": 50}}]
        assert monotone_params()["toylag"] == "lag_ms"
        assert comparison_grid()["toylag"] == [{{"lag_ms": 100}}, {{"lag_ms": 1000}}]
        print("== compare")
        assert main(["compare", *{IOT!r}, "--window-ms", "1000", "--strategies", "toylag", "--json"]) == 0
        print("== tune")
        assert main(["tune", *{IOT!r}, "--window-ms", "1000", "--target-late-pct", "1",
                     "--strategies", "toylag", "--json"]) == 0
    """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    compare, tune = proc.stdout.split("== compare\n")[1].split("== tune\n")
    rows = [row for row in json_rows(compare) if row.get("strategy") == "toylag"]
    assert len(rows) == 2 and {str(row["params"]) for row in rows} == {"{'lag_ms': 100}", "{'lag_ms': 1000}"}
    chosen = json_rows(tune)[-1]
    assert chosen["strategy"] == "toylag" and chosen["dropped_pct"] <= 1.0
    assert chosen["params"]["lag_ms"] % 50 == 0  # one of its declared search space


def json_rows(text: str) -> list[dict]:
    """The rows of a command's ``--json`` output (one object, or a list of them)."""
    data = json.loads(text)
    return data if isinstance(data, list) else [data]


def test_the_command_lines_help_names_a_registered_strategy():
    proc = run_with_toy("""
        from watermark.cli.main import build_parser
        parser = build_parser()
        sub = next(a for a in parser._actions if a.dest == "command").choices
        for command in ("replay", "compare", "tune"):
            print(command, " ".join(sub[command].format_help().split()))
    """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    helps = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    assert (
        "one of periodic, adaptive, sliding, percentile, band, ingestion, slo, fleet, toylag"
        in helps["replay"]
    )
    assert all("toylag" in helps[c] for c in ("compare", "tune"))


def test_the_contract_tests_run_on_a_registered_strategy():
    proc = run_with_toy("""
        import sys
        import pytest
        sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "-p", "no:tests.suite_costs", "-p", "no:xdist",
                              "tests/unit/watermark/strategies/test_contract.py", "-k", "toylag"]))
    """)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    summary = proc.stdout.strip().splitlines()[-1]
    passed = int(summary.split(" passed")[0].split()[-1])
    assert passed >= 9 and "failed" not in summary, summary  # every contract test parametrised by strategy
