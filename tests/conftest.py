"""The suite's fixtures, markers and tiers.

Tiers are folders: ``tests/unit`` (no JVM, broker or server), ``tests/integration/{spark,kafka,airflow,
prometheus}`` (a real Spark, Kafka broker, Airflow or Prometheus) and ``tests/system`` (end-to-end runs:
SIGKILLs, chaos, fuzzing the job, a real Airflow scheduler). The markers that say what a test needs are not
written by hand: :func:`pytest_collection_modifyitems` derives them from the fixtures the test uses (directly
or through other fixtures), so they cannot go stale; it refuses a unit test that has one of them and an
integration test that has none. ``pytest --fast`` (``bin/test --fast``) runs only the tests with none of them
and fails a test that starts a JVM, Spark, Prometheus or PostgreSQL anyway.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

pytest.register_assert_rewrite("tests.suite_costs")
from tests import suite_costs  # noqa: E402
from tools.local.prebuild import C1_ONLY, ready_class_archive  # noqa: E402

#: What each test costs (wall, CPU of the process tree, JVMs, job runs) and the budget: tests/suite_costs.py.
pytest_plugins = ["tests.suite_costs"]

settings.register_profile(
    "default",
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("thorough", parent=settings.get_profile("default"), max_examples=1000)
#: pytest --fast's (unless HYPOTHESIS_PROFILE names one): the property tests with a third of the examples.
settings.register_profile("fast", parent=settings.get_profile("default"), max_examples=20)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# The Spark JVMs the tests start (the jobs run as processes, spark-submit under Airflow: they inherit the
# environment) compile with C1 only, as the local Kafka broker does: they live seconds to minutes on tiny
# inputs, and C2's compiler threads took a third of their CPU (a 6-batch job on the rate source used 66-72 s
# of CPU instead of 99-134 s). Each worker's own session is the exception (SESSION_JIT, SparkSessions.get): it
# lives as long as the run and does most of its Spark work, which C2's code does with less CPU than C1's
# (test_stream.py, both at once under the same load: 546 CPU s in 18:03 with C2, 605 in 21:53 with C1).
# Spark's launcher adds SPARK_SUBMIT_OPTS to the driver's java command (local mode: the only JVM); what the
# code computes is the same. Set SPARK_SUBMIT_OPTS (even empty) to run them otherwise. pytest_configure adds
# a class-data archive of Spark's classes to these options (bin/bootstrap.sh makes it: prebuild.py).
# The same JVMs evaluate Spark's expressions interpreted (spark.sql.codegen.factoryMode, the mode Spark's own
# test suites run beside codegen, computing the same rows): on the suite's tiny batches generating the code
# cost more than running it. Each idempotent Delta append rebuilds the table's state in Spark jobs whose tasks
# generated a projection of Delta's wide action schema every time: a 39-batch job used 74 s of CPU instead of
# 86 (the product's sessions keep Spark's default; bin/run and benchmarks/ run with it).
INTERPRETED = "-Dspark.sql.codegen.factoryMode=NO_CODEGEN"
#: Whether the options are the suite's own (not set by the caller, nor inherited by an xdist worker).
_OWN_SPARK_SUBMIT_OPTS = "SPARK_SUBMIT_OPTS" not in os.environ
os.environ.setdefault("SPARK_SUBMIT_OPTS", f"{C1_ONLY} {INTERPRETED}")

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"

#: The test files handed out first, longest first (relative to tests/): from the last whole-suite report
#: (out/suite-costs.json), else from the per-file budget of tests/budget.toml (a fresh clone). They are
#: collected first, so that bin/test's workers (``--dist loadfile``) start them first and the suite does not
#: end on one of them alone: xdist gives each worker a file, and the next one in this order as soon as the
#: worker has two tests or fewer left to run.
SLOW_FILES = tuple(suite_costs.schedule())

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


#: The Spark scratch folder this run made (pytest_configure), removed at its end.
_SPARK_SCRATCH = pytest.StashKey[str]()
#: The run's folder of shared servers this controller made (pytest_configure), stopped and removed at its end.
_RUN_DIR = pytest.StashKey[str]()


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
    elif _OWN_SPARK_SUBMIT_OPTS and "PYTEST_XDIST_WORKER" not in os.environ:
        # (xdist's workers inherit the options from the controller's environment)
        archive = ready_class_archive()  # bin/bootstrap.sh makes it (tools/local/prebuild.py)
        if archive is not None:
            os.environ["SPARK_SUBMIT_OPTS"] = (
                f"{C1_ONLY} {INTERPRETED} -XX:SharedArchiveFile={archive} -Xlog:cds*=off"
            )
    if "SPARK_LOCAL_DIRS" not in os.environ and "PYTEST_XDIST_WORKER" not in os.environ:
        # Spark's scratch (blockmgr-*, spark-* with a copy of the session's jars: 35 MB) goes to a folder
        # of the run's own, removed at its end: a JVM a test kills cannot remove its own, which left 450 MB
        # in /tmp run after run (the workers, and the JVMs the tests start, inherit the variable).
        scratch = tempfile.mkdtemp(prefix="awm-test-spark-scratch-")
        os.environ["SPARK_LOCAL_DIRS"] = scratch
        config.stash[_SPARK_SCRATCH] = scratch
    if "PYTEST_XDIST_WORKER" not in os.environ and RUN_DIR_ENV not in os.environ:
        # the servers the workers share (shared_server) live here; the workers inherit the variable
        os.environ[RUN_DIR_ENV] = tempfile.mkdtemp(prefix="awm-test-run-")
        config.stash[_RUN_DIR] = os.environ[RUN_DIR_ENV]
    # xdist's --dist loadfile hands out the files with the most tests first unless told not to reorder: the
    # collection order (SLOW_FILES first, pytest_collection_modifyitems) is the order the workers get them.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_unconfigure(config):
    if config.stash.get(_RUN_DIR, None) is not None:  # the run's controller: the shared servers stop
        _stop_shared_servers()
    scratch = config.stash.get(_SPARK_SCRATCH, None)
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)


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
    items.sort(key=lambda item: rank.get(_relative(item), len(SLOW_FILES)))


def _relative(item) -> str:
    try:
        return item.path.relative_to(TESTS).as_posix()
    except ValueError:  # doctests of the packages
        return ""


def _tier(item) -> str:
    return _relative(item).partition("/")[0] if "/" in _relative(item) else ""


# --------------------------------------------------------------------------------------------------
# The fast tier's guard


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


# --------------------------------------------------------------------------------------------------
# Spark


#: How the worker's own session compiles: "c2" (C1 and C2, the JVM's default tiers) or "c1" (C1 only, as the
#: JVMs the tests start). The session lives as long as the run and does most of its Spark work.
SESSION_JIT = os.environ.get("AWM_TEST_SESSION_JIT", "c2")


@contextlib.contextmanager
def _session_jvm_options() -> Iterator[None]:
    """While a worker's session is built: the suite's JVM options without :data:`C1_ONLY` (unless
    :data:`SESSION_JIT` is ``c1``); the JVMs the tests start keep C1 only. Options the caller set are kept."""
    options = os.environ.get("SPARK_SUBMIT_OPTS")
    if SESSION_JIT == "c1" or options is None or not options.startswith(f"{C1_ONLY} {INTERPRETED}"):
        yield
        return
    os.environ["SPARK_SUBMIT_OPTS"] = options.removeprefix(C1_ONLY).lstrip()
    try:
        yield
    finally:
        os.environ["SPARK_SUBMIT_OPTS"] = options


#: The records of the warm-up job run (:func:`warm_up`): two micro-batches, late rows, a bad line.
WARM_UP_LINES = 60


def warm_up(session) -> None:
    """Run the job once on two tiny landing files in a new session, before its first test: the JIT's
    warm-up of the paths every job run takes (Spark's planning, the Delta appends and their state, the
    stage) is then the shared set-up's, not the first Spark file's on the worker. A new session's first
    small job run costs about 29 CPU s, the fourth about 4: without this a file's figure depended on
    whether it was its worker's first (docs/development.md). Its folder is removed; nothing is asserted."""
    from jobs.stream.options import JobOptions
    from jobs.stream.run import run_job
    from tests.integration.spark.test_stream import good, write_lines
    from watermark.config import PipelineConfig

    folder = Path(tempfile.mkdtemp(prefix="awm-warm-up-"))
    try:
        base = 1_600_000_000_000
        for f in range(2):
            lines = [
                good(
                    f"{f}-{i}",
                    te=base + 1_000 * f + 20 * i - (700 if i % 7 == 0 else 0),
                    tp=base + 1_000 * f + 20 * i,
                    key=f"k{i % 3}",
                    part=f"p{i % 2}",
                    value=i / 4,
                )
                for i in range(WARM_UP_LINES // 2)
            ]
            write_lines(folder / "in" / f"{f}.json", [*lines, "{not json"])
        config = PipelineConfig.from_dict(
            {"version": 1, "strategy": "periodic", "params": {"delay_ms": 100}, "window_ms": 1_000}
        )
        options = JobOptions(
            input=str(folder / "in"),
            output=str(folder / "out"),
            checkpoint=str(folder / "ck"),
            config=config,
            progress=False,
            max_files_per_trigger=1,
            flush_at_end=True,
        )
        jobs = suite_costs.RECORDER.in_process_jobs
        try:
            run_job(session, options)
        finally:
            suite_costs.RECORDER.in_process_jobs = jobs  # the test's job runs only
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class SparkSessions:
    """The worker's local Spark session: built when first needed, built again when found dead.

    A test that pytest-timeout interrupts in the middle of a Spark call, one that stops the session or loses
    its JVM, must not break the tests after it on the worker. After each test the thread's connection to the
    JVM is dropped if a call on it was interrupted (its answer, unread, would be taken by the next call for
    its own), and the streaming queries and jobs the test left running are stopped. Before each use the
    session's context must not be stopped and its JVM must answer, and after a failed test or fixture a
    trivial job must run; a session failing these is stopped and a new one built (in a new JVM if the old
    one died).
    """

    def __init__(self) -> None:
        self.session = None
        self.suspect = False
        self.warmed = False

    def get(self):
        if self.suspect:
            self.settle()
        if self.session is not None and not self._alive(self.session, job=self.suspect):
            self.discard()
        self.suspect = False
        if self.session is None:
            from jobs.common.session import build_session

            with suite_costs.shared_setup("spark session"):
                with _session_jvm_options():
                    self.session = build_session("tests", master="local[2]", shuffle_partitions=2)
                if not self.warmed:  # once a worker: a session built again mostly runs in the same JVM
                    self.warmed = True
                    warm_up(self.session)
        return self.session

    @staticmethod
    def _alive(session, job: bool) -> bool:
        try:
            jsc = session._jsc
            if jsc is None or jsc.sc().isStopped():
                return False
            return not job or session.range(3).count() == 3
        except Exception:  # a dead gateway or JVM: py4j errors of every kind
            return False

    @staticmethod
    def reconnect(always: bool = False) -> None:
        """Close this thread's connection to the JVM (the next call opens a new one) if a call on it was
        interrupted, which leaves it out of py4j's pool with its answer unread, or ``always``."""
        from pyspark import SparkContext

        client = getattr(SparkContext._gateway, "_gateway_client", None)
        connection = client.get_thread_connection() if hasattr(client, "get_thread_connection") else None
        if connection is not None and (always or connection not in client.deque):
            connection.close(reset=True)

    def settle(self) -> None:
        """After a test: stop the streaming queries and jobs it left running (a failed or interrupted one),
        on a new connection to the JVM if it failed."""
        if self.session is None:
            return
        self.reconnect(always=self.suspect)
        try:
            for query in self.session.streams.active:
                query.stop()
            self.session.sparkContext.cancelAllJobs()
        except Exception:
            self.suspect = True

    def discard(self) -> None:
        from pyspark import SparkContext
        from pyspark.sql import SparkSession

        session, self.session = self.session, None
        try:
            session.stop()
        except Exception:
            pass
        gateway = SparkContext._gateway
        proc = getattr(gateway, "proc", None)
        if gateway is not None and (proc is None or proc.poll() is not None):  # its JVM is gone: a new one
            SparkContext._gateway = None
            SparkContext._jvm = None
        SparkContext._active_spark_context = None
        SparkSession._instantiatedSession = None
        SparkSession._activeSession = None

    def stop(self) -> None:
        if self.session is not None:
            try:
                self.session.stop()
            except Exception:
                pass
            self.session = None


SPARK_SESSIONS = SparkSessions()


@pytest.fixture(scope="session")
def spark_sessions():
    """The worker's :class:`SparkSessions` (fixtures of a module scope call ``spark_sessions.get()``)."""
    yield SPARK_SESSIONS
    SPARK_SESSIONS.stop()


@pytest.fixture
def spark(spark_sessions):
    """The worker's local Spark session (one for every Spark test of the worker), checked working."""
    yield spark_sessions.get()
    spark_sessions.settle()


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item, settings):
    """pytest-timeout's signal method, made safe for a test in the middle of a Spark call.

    Its exception, raised while the test's thread waits for the JVM's answer, leaves that answer unread on
    the thread's connection to the JVM, and pyspark's next call there (its own clean-up in the same ``with``)
    would wait for it for ever: the handler closes that connection first (the next call opens a new one),
    so the test fails, and the ``spark`` fixture cancels the job and hands the next test a working session.
    The thread method (and a test not on the main thread) is pytest-timeout's own.
    """
    if settings.method != "signal" or threading.current_thread() is not threading.main_thread():
        return None
    from pytest_timeout import timeout_sigalrm

    def handler(signum, frame):
        __tracebackhide__ = True
        SparkSessions.reconnect()
        timeout_sigalrm(item, settings)

    def cancel():
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)

    item.cancel_timeout = cancel
    signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, settings.timeout)
    return True


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """A failed test or fixture that used the Spark session makes its next use check it thoroughly."""
    report = yield
    if report.failed and "spark_sessions" in getattr(item, "fixturenames", ()):
        SPARK_SESSIONS.suspect = True
    return report


# --------------------------------------------------------------------------------------------------
# Processes: JVMs and servers started by the tests themselves


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class LocalProcesses:
    """What a test that starts JVMs or servers as processes needs: their environment, ports, binaries."""

    env: dict[str, str] = field(default_factory=dict)
    root: Path = ROOT

    @staticmethod
    def free_port() -> int:
        return free_port()

    @staticmethod
    def binary(name: str) -> str:
        path = shutil.which(name)
        if path is None:
            pytest.fail(f"{name} not found: bin/bootstrap.sh installs it (Debian package)")
        return path


def _process_environment() -> dict[str, str]:
    """The environment of a child JVM: the suite's (C1-only JVMs), local Spark, the project importable."""
    return os.environ | {
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYTHONPATH": str(ROOT),
        "PYSPARK_PYTHON": sys.executable,
    }


@pytest.fixture
def jvm_process():
    """For a test that starts a JVM as a process (a job as ``python -m jobs.stream``, spark-submit, the Kafka
    broker's manager, java itself): marks it ``jvm``; gives its environment and free ports."""
    return LocalProcesses(env=_process_environment())


@pytest.fixture
def local_server():
    """For a test that starts a server or its tool (Prometheus, the Pushgateway, promtool, PostgreSQL,
    ``airflow standalone``): marks it ``server``; gives binaries, free ports and an environment."""
    return LocalProcesses(env=_process_environment())


# --------------------------------------------------------------------------------------------------
# Airflow and Kafka


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory):
    """An Airflow home with a migrated SQLite metadata DB and the project's DAGs folder.

    Airflow reads its configuration when first imported, so this fixture sets the environment before any
    test imports it (tests import airflow inside their bodies only).
    """
    home = tmp_path_factory.mktemp("airflow")
    env = airflow_environment(home, ROOT)
    os.environ.update(env)
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return home


def airflow_environment(home, root) -> dict:
    """Settings for a throwaway Airflow: SQLite DB, no examples, the local Spark connection ``awm_spark``."""
    return {
        "AIRFLOW_CONN_AWM_SPARK": '{"conn_type": "spark", "host": "local[*]"}',
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(root / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
        "SPARK_LOCAL_IP": "127.0.0.1",
    }


#: The servers one run shares between its workers (name -> the class that runs one in a directory).
SHARED_SERVERS = {"kafka": ("tools.local.kafka_broker", "LocalKafka"), "s3": ("tools.local.s3", "LocalS3")}
#: The run's folder for what its workers share (the servers' directories and locks), set by the controller.
RUN_DIR_ENV = "AWM_TEST_RUN_DIR"


def _server_class(name: str):
    import importlib

    module, cls = SHARED_SERVERS[name]
    return getattr(importlib.import_module(module), cls)


def shared_server(name: str, start_timeout: float = 600):
    """The run's one server ``name`` (:data:`SHARED_SERVERS`), started by the first worker that needs it.

    Each server class keeps a state file in its directory, so a second object on the same directory finds
    the running server (its address) instead of starting another. A lock in the run's folder makes the
    first worker start it while the others wait; the controller stops it at the end of the run
    (:func:`pytest_unconfigure`), not a worker, which may finish first. Each test uses its own topic or
    bucket on it. Up to ``start_timeout`` s to start: the suite keeps both cores busy (a CI run once saw a
    broker's start take over 30 s); how long it takes is no test's subject.
    """
    import fcntl

    folder = Path(os.environ.get(RUN_DIR_ENV) or tempfile.mkdtemp(prefix="awm-test-run-"))
    os.environ.setdefault(RUN_DIR_ENV, str(folder))
    with (folder / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        server = _server_class(name)(port=free_port(), dir=folder / name, start_timeout=start_timeout)
        if not server.status()["running"]:
            server.start()
    return server


def _stop_shared_servers() -> None:
    folder = os.environ.get(RUN_DIR_ENV)
    if not folder:
        return
    for name in SHARED_SERVERS:
        if (Path(folder) / name).is_dir():
            try:
                _server_class(name)(dir=Path(folder) / name).stop()
            except Exception as error:  # a server that will not stop must not fail the run's end
                print(f"suite: could not stop the shared {name} server: {error}", file=sys.stderr)
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def kafka_broker():
    """The run's local Kafka broker (KRaft, jars from .jvm/kafka), shared by the workers (each test its own
    topic), stopped at the run's end (:func:`shared_server`).

    ``kafka_broker.bootstrap_servers`` is its address; ``kafka_broker.create_topic(name, partitions)`` makes a
    topic. A missing jar set fails the test with a message naming bin/bootstrap.sh (it is never skipped).
    """
    return shared_server("kafka")


#: The AWS variables that would point a client elsewhere than the local S3 server: unset while it runs.
AWS_OVERRIDES = ("AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION", "AWS_PROFILE")


@pytest.fixture(scope="session")
def s3_server():
    """The run's local S3-compatible server (moto, ``tools/local/s3.py``), shared by the workers and stopped
    at the run's end (:func:`shared_server`); marks its tests ``server``.

    While a worker uses it, the worker's environment points the standard AWS clients at it
    (``s3_server.env()``: ``AWS_ENDPOINT_URL``, the key pair, ``AWS_REGION``; the other AWS variables of
    :data:`AWS_OVERRIDES` unset), so Spark sessions built from then on
    (:func:`jobs.common.session.build_session`), delta-rs
    (``jobs.common.object_store.deltalake_storage_options``) and boto3 reach it; a Spark session built
    before it gets the settings from ``jobs.common.object_store.apply_s3a_settings``.
    ``s3_server.new_bucket()`` makes a fresh bucket (each test its own: objects live in the server's memory
    until the run ends). At the worker's end its environment is restored.
    """
    server = shared_server("s3")
    saved = {name: os.environ.get(name) for name in (*server.env(), *AWS_OVERRIDES)}
    for name in AWS_OVERRIDES:
        os.environ.pop(name, None)
    os.environ.update(server.env())
    try:
        yield server
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory):
    """A local Spark standalone cluster for the run (``bin/spark-local``'s): a master and two workers of one
    core, each its own JVM, on free ports, stopped at the end; marks its tests ``jvm``.

    ``spark_cluster.master_url`` is the master; ``spark_cluster.python`` the workers' Python (the project's
    dependencies without the project, made once per lock under ``out/spark-worker-env/``), for
    ``spark.pyspark.python``. Up to 600 s to start, as the Kafka broker: the suite keeps the cores busy.
    """
    from tools.local.spark_cluster import LocalSparkCluster

    port = free_port()
    ui_port = free_port()
    while ui_port == port:
        ui_port = free_port()
    cluster = LocalSparkCluster(
        port=port, ui_port=ui_port, dir=tmp_path_factory.mktemp("spark-cluster"), start_timeout=600
    )
    cluster.start()
    yield cluster
    cluster.stop()
