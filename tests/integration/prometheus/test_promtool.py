"""Prometheus configuration, recording and alert rules through promtool: its checks and its unit tests
(the rules' content, runbooks and links: tests/unit/monitoring/test_alert_rules.py)."""

import subprocess

import pytest

from tests.unit.monitoring.test_alert_rules import PROM, TESTS


@pytest.fixture
def promtool(local_server):
    """``promtool(*args)``: runs promtool (a missing one fails the test naming bin/bootstrap.sh)."""
    path = local_server.binary("promtool")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([path, *args], capture_output=True, text=True, check=False)

    return run


def test_the_prometheus_config_and_its_rule_files_pass_promtool_check(promtool):
    result = promtool("check", "config", str(PROM / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 16 rules found" in result.stdout + result.stderr


def test_the_rule_files_pass_promtool_check_rules(promtool):
    files = [
        PROM / "alert_rules.yml",
        PROM / "recording_rules.yml",
        PROM / "tests" / "alert_rules_without_annotations.yml",
    ]
    result = promtool("check", "rules", *map(str, files))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("test_file", TESTS, ids=lambda p: p.name)
def test_every_promtool_unit_test_passes(promtool, test_file):
    result = promtool("test", "rules", str(test_file))
    assert result.returncode == 0, result.stdout + result.stderr
