import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "default",
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("thorough", parent=settings.get_profile("default"), max_examples=1000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# Every Spark JVM of the suite (each worker's session, the jobs tests start as processes, spark-submit under
# Airflow: they inherit the environment) compiles with C1 only, as the local Kafka broker does. The suite's
# JVMs live seconds to minutes on tiny inputs, and C2's compiler threads took a third of their CPU: a 6-batch
# job on the rate source used 66-72 s of CPU instead of 99-134 s, four test_stream tests 231 s instead of 275.
# Spark's launcher adds SPARK_SUBMIT_OPTS to the driver's java command (local mode: the only JVM); what the
# code computes is the same. Set SPARK_SUBMIT_OPTS (even empty) to run them otherwise.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1")

#: Test files that take minutes on the two-core machine (SIGKILL loops, DAG runs through spark-submit, Kafka
#: streams, backfill races), largest first. They are collected first, so that bin/test's three workers
#: (``--dist loadfile``) start them first and the suite does not end on one of them running alone.
SLOW_FILES = (
    "test_stream_chaos.py",
    "test_stream_exactly_once.py",
    "test_stream_exactly_once_kafka.py",
    "test_dags.py",
    "test_stream_kafka.py",
    "test_backfill_races.py",
    "test_backfill.py",
    "test_maintenance.py",
    "test_retune.py",
)


def pytest_collection_modifyitems(config, items):
    """Move the tests of :data:`SLOW_FILES` to the front, in that order; every other test keeps its order."""
    rank = {name: i for i, name in enumerate(SLOW_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOW_FILES)))


@pytest.fixture(scope="session")
def spark():
    """One local Spark session for every Spark test of the run."""
    from jobs.common.session import build_session

    session = build_session("tests", master="local[2]", shuffle_partitions=2)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory):
    """An Airflow home with a migrated SQLite metadata DB and the project's DAGs folder.

    Airflow reads its configuration when first imported, so this fixture sets the environment before any
    test imports it (tests import airflow inside their bodies only).
    """
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    home = tmp_path_factory.mktemp("airflow")
    env = airflow_environment(home, root)
    os.environ.update(env)
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=300,
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


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory):
    """One local Kafka broker (KRaft, jars from .jvm/kafka) on a free port for the run, stopped at the end.

    ``kafka_broker.bootstrap_servers`` is its address; ``kafka_broker.create_topic(name, partitions)`` makes a
    topic. A missing jar set fails the test with a message naming bin/bootstrap.sh (it is never skipped).

    It may take 120 s to answer, not bin/kafka-local's 30: the suite's other workers keep both cores busy
    with Spark JVMs, and a CI run once saw a start pass 30 s there (test_kafka_local checks the 30 s alone).
    """
    from tools.local.kafka import LocalKafka, free_port

    broker = LocalKafka(port=free_port(), dir=tmp_path_factory.mktemp("kafka"), start_timeout=120)
    broker.start()
    yield broker
    broker.stop()
