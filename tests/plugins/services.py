"""The processes and servers the tests start: JVMs, local servers, Airflow's home, the run's shared Kafka
broker and S3 server, a Spark standalone cluster.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: The run's folder of shared servers this controller made (pytest_configure), stopped and removed at its end.
_RUN_DIR = pytest.StashKey[str]()


def pytest_configure(config):
    if "PYTEST_XDIST_WORKER" not in os.environ and RUN_DIR_ENV not in os.environ:
        # the servers the workers share (shared_server) live here; the workers inherit the variable
        os.environ[RUN_DIR_ENV] = tempfile.mkdtemp(prefix="awm-test-run-")
        config.stash[_RUN_DIR] = os.environ[RUN_DIR_ENV]


def pytest_unconfigure(config):
    if config.stash.get(_RUN_DIR, None) is not None:  # the run's controller: the shared servers stop
        _stop_shared_servers()


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
