"""Fixtures of the DAG tests (``test_dags.py`` and ``test_dags_retuning_day.py``, two files so that the
suite's workers run the day-long re-tuning beside the other DAG runs)."""

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def dagbag(airflow_home):
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(ROOT / "dags"))


@pytest.fixture
def pushgateway(tmp_path, monkeypatch, local_server):
    """A Pushgateway, configured as the DAGs' Connection ``awm_pushgateway``."""
    from tools.local.prometheus import start_pushgateway

    gateway = start_pushgateway(tmp_path / "pushgateway", port=local_server.free_port())
    host, port = gateway.url.removeprefix("http://").rsplit(":", 1)
    monkeypatch.setenv(
        "AIRFLOW_CONN_AWM_PUSHGATEWAY", json.dumps({"conn_type": "http", "host": host, "port": int(port)})
    )
    yield gateway
    gateway.stop()
