"""The worker's Spark session and the options of the Spark JVMs the tests start.

Each xdist worker has one local session (:class:`SparkSessions`: the ``spark`` and ``spark_sessions``
fixtures), built when first needed, warmed up once (:func:`warm_up`) and built again when found dead; the
JVMs the tests start (jobs as processes, ``spark-submit``) inherit :data:`INTERPRETED` and C1-only options
through ``SPARK_SUBMIT_OPTS``, with the class-data archive ``bin/bootstrap.sh`` made.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import suite_costs
from tools.local.prebuild import C1_ONLY, ready_class_archive

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


#: The Spark scratch folder this run made (pytest_configure), removed at its end.
_SPARK_SCRATCH = pytest.StashKey[str]()


def pytest_configure(config):
    fast = config.getoption("--fast", default=False)
    if not fast and _OWN_SPARK_SUBMIT_OPTS and "PYTEST_XDIST_WORKER" not in os.environ:
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


def pytest_unconfigure(config):
    scratch = config.stash.get(_SPARK_SCRATCH, None)
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)


#: How the worker's own session compiles: "c2" (C1, then C2 for the code that stays hot: :data:`LATE_C2`),
#: "c2-default" (the JVM's own tiers) or "c1" (C1 only, as the JVMs the tests start). The session lives as
#: long as the run and does most of its Spark work.
SESSION_JIT = os.environ.get("AWM_TEST_SESSION_JIT", "c2")
#: C2 compiles a method after four times the JVM's default invocations and loops, C1's profiled code
#: after five times. The suite's sessions run thousands of small Spark jobs and Delta commits through ever new
#: plans: after a dozen warm job runs C2's compiler thread still took 1.7 of the 5 CPU s of each (/proc per
#: thread), compiling code that was about to go cold. test_stream.py and test_backfill.py on one worker: 143
#: and 152 CPU s with the C2 thresholds (the shared set-up included), 164 and 168 with the default tiers; a
#: job run, a backfill and two maintenance runs in a session (its JVM's CPU): 106 with the default tiers,
#: 94-96 with the C2 thresholds, 89 with both, 95 with C1 only (and its wall time 20 % longer)
#: (docs/development.md).
LATE_C2 = (
    "-XX:Tier4InvocationThreshold=20000 -XX:Tier4MinInvocationThreshold=2400 -XX:Tier4CompileThreshold=60000 "
    "-XX:Tier4BackEdgeThreshold=160000 "
    "-XX:Tier3InvocationThreshold=1000 -XX:Tier3MinInvocationThreshold=500 -XX:Tier3CompileThreshold=10000"
)


@contextlib.contextmanager
def _session_jvm_options() -> Iterator[None]:
    """While a worker's session is built: the suite's JVM options without :data:`C1_ONLY`, with
    :data:`LATE_C2` (as :data:`SESSION_JIT` says); the JVMs the tests start keep C1 only. Options the
    caller set are kept."""
    options = os.environ.get("SPARK_SUBMIT_OPTS")
    if SESSION_JIT == "c1" or options is None or not options.startswith(f"{C1_ONLY} {INTERPRETED}"):
        yield
        return
    session = options.removeprefix(C1_ONLY).lstrip()
    os.environ["SPARK_SUBMIT_OPTS"] = f"{LATE_C2} {session}" if SESSION_JIT == "c2" else session
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
    from jobs.stream.run import run_job
    from tests.landing import folder_job, good, write_lines
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
        options = folder_job(folder, config, max_files_per_trigger=1, flush_at_end=True)
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
