"""The suite's tiers and markers, the fast tier's guard, and the order the workers get the files.

Tiers are folders: ``tests/unit`` (no JVM, broker or server), ``tests/integration/{spark,kafka,airflow,
prometheus,s3}`` (a real Spark, Kafka broker, Airflow, Prometheus or S3 server) and ``tests/system``
(end-to-end runs: SIGKILLs, chaos, fuzzing the job, a real Airflow scheduler). The markers that say what a
test needs are not written by hand: :func:`pytest_collection_modifyitems` derives them from the fixtures the
test uses (directly or through other fixtures), so they cannot go stale; it refuses a unit test that has one
of them and an integration test that has none. ``pytest --fast`` (``bin/test --fast``) runs only the tests
with none of them and fails a test that starts a JVM, Spark, Prometheus or PostgreSQL anyway.
"""

from __future__ import annotations

import os
import shlex
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings

from tests import suite_costs

TESTS = Path(__file__).resolve().parents[1]

#: The test files handed out first, longest first (relative to tests/): from the last whole-suite report
#: (out/suite-costs.json), else from the per-file budget of tests/budget.toml (a fresh clone). They are
#: collected first, so that bin/test's workers (``--dist loadfile``) start them first and the suite does not
#: end on one of them alone: xdist gives each worker a file, and the next one in this order as soon as the
#: worker has two tests or fewer left to run.
SLOW_FILES = tuple(suite_costs.schedule())
#: The test files handed out last, after every other: they stop their worker's Spark session and kill its JVM
#: on purpose, and a session built again in a new JVM compiles everything again (a new JVM's first small
#: job run costs about 29 CPU s, a warm one's 4): placed anywhere else, the files after them paid for it.
LAST_FILES = ("integration/spark/test_spark_fixture.py",)

#: Fixture -> the marker every test using it (directly or through another fixture) gets. A test that starts
#: a JVM, broker or server without ``spark``, ``kafka_broker`` or ``airflow_home`` requests ``jvm_process``
#: or ``local_server``, which also give it what it needs (an environment, free ports, binaries).
FIXTURE_MARKERS = {
    "spark": "spark",
    "spark_sessions": "spark",  # what fixtures of a module scope use
    "kafka_broker": "kafka",
    "airflow_home": "airflow",
    "jvm_process": "jvm",
    "local_server": "server",
    "s3_server": "server",  # a local S3-compatible server (moto), tools/local/s3.py
    "spark_cluster": "jvm",  # a Spark standalone master and two workers, each its own JVM
}
HEAVY_MARKERS = frozenset(FIXTURE_MARKERS.values())

#: Programs a test of the fast tier may not start: refused by name in the test's process (the command's
#: first word), and shadowed by a failing shim first on PATH and as $JAVA_HOME/bin/java for its children.
GUARDED_PROGRAMS = (
    "java",
    "spark-submit",
    "spark-class",
    "pyspark",
    "prometheus",
    "prometheus-pushgateway",
    "promtool",
    "initdb",
    "pg_ctl",
    "postgres",
    "airflow",
)


def pytest_addoption(parser):
    parser.addoption(
        "--fast",
        action="store_true",
        help="run only the tests with none of the markers " + ", ".join(sorted(HEAVY_MARKERS)) + " (no JVM, "
        "broker or server), and fail a test that starts java, spark-submit, prometheus, promtool, PostgreSQL "
        "or airflow anyway; property tests draw 20 examples (hypothesis profile 'fast'), not 60",
    )


def pytest_configure(config):
    if config.getoption("--fast", default=False):
        _guard_processes(Path(tempfile.mkdtemp(prefix="awm-fast-guard-")))
        if "HYPOTHESIS_PROFILE" not in os.environ:
            settings.load_profile("fast")
    # xdist's --dist loadfile hands out the files with the most tests first unless told not to reorder: the
    # collection order (SLOW_FILES first, pytest_collection_modifyitems) is the order the workers get them.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    """Markers from fixtures; unit tests have none, integration tests one at least (system tests: end-to-end
    runs, which may start nothing heavy, as the wheel's); ``--fast`` deselects them; slow files first."""
    wrong = []
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        derived = {marker for fixture, marker in FIXTURE_MARKERS.items() if fixture in names}
        by_hand = {m.name for m in item.iter_markers() if m.name in HEAVY_MARKERS} - derived
        if by_hand:
            wrong.append(f"{item.nodeid}: marker {sorted(by_hand)} by hand (markers come from fixtures)")
        for marker in sorted(derived):
            item.add_marker(marker)
        tier = _tier(item)
        if tier == "unit" and derived:
            fixtures = sorted(f for f, m in FIXTURE_MARKERS.items() if m in derived)
            wrong.append(f"{item.nodeid}: a unit test using {fixtures}: move it to integration or system")
        elif tier == "integration" and not derived:
            wrong.append(
                f"{item.nodeid}: an integration test using none of the fixtures {sorted(FIXTURE_MARKERS)}: "
                "move it to tests/unit (or request the fixture of what it starts)"
            )
    if wrong:
        raise pytest.UsageError("tests in the wrong tier or with hand-written markers:\n" + "\n".join(wrong))

    if config.getoption("--fast", default=False):
        kept = [item for item in items if not any(item.get_closest_marker(m) for m in HEAVY_MARKERS)]
        deselected = [item for item in items if item not in kept]
        if deselected:
            config.hook.pytest_deselected(items=deselected)
            items[:] = kept

    rank = {name: i for i, name in enumerate(SLOW_FILES)}
    rank.update({name: len(SLOW_FILES) + 1 + i for i, name in enumerate(LAST_FILES)})
    items.sort(key=lambda item: rank.get(_relative(item), len(SLOW_FILES)))


def _relative(item) -> str:
    try:
        return item.path.relative_to(TESTS).as_posix()
    except ValueError:  # doctests of the packages
        return ""


def _tier(item) -> str:
    return _relative(item).partition("/")[0] if "/" in _relative(item) else ""


def _guard_processes(shims: Path) -> None:
    """Fail a test that starts a guarded program, in this process or in a process it starts.

    In this process, ``subprocess.Popen`` refuses the command before it runs (pyspark's gateway launch
    included). Processes started from here (``python -m jobs.stream``, bin/kafka-local) find a shim that
    exits 97 with the same message first on PATH and as ``$JAVA_HOME/bin/java`` (Spark's launcher uses it).
    """
    message = (
        "{program}: the fast tier (bin/test --fast, pytest --fast) runs tests that start no JVM, broker or "
        "server; request the fixture of what the test starts (spark, kafka_broker, airflow_home, "
        "jvm_process, local_server) and move it to tests/integration or tests/system"
    )
    (shims / "bin").mkdir(parents=True, exist_ok=True)
    for program in GUARDED_PROGRAMS:
        shim = shims / "bin" / program
        text = message.format(program=program)
        shim.write_text(f"#!/bin/sh\necho {shlex.quote('error: ' + text)} >&2\nexit 97\n")
        shim.chmod(shim.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    os.environ["PATH"] = os.pathsep.join([str(shims / "bin"), os.environ.get("PATH", "")])
    os.environ["JAVA_HOME"] = str(shims)

    execute_child = subprocess.Popen._execute_child  # type: ignore[attr-defined]

    def guarded(self, args, executable, *rest, **kwargs):
        words = shlex.split(os.fsdecode(args)) if isinstance(args, str | bytes) else list(args)
        program = os.fsdecode(executable or (words[0] if words else ""))
        name = os.path.basename(program)
        if name in GUARDED_PROGRAMS:
            pytest.fail(message.format(program=name), pytrace=False)
        return execute_child(self, args, executable, *rest, **kwargs)

    subprocess.Popen._execute_child = guarded  # type: ignore[attr-defined]
