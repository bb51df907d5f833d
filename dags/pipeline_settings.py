"""Defaults every DAG of the pipeline shares, read from the environment (no other work at import).

=====================  ==============================================  ===================================
variable               meaning                                         default
=====================  ==============================================  ===================================
``AWM_TABLES``         the streaming job's ``--output`` (Delta tables)  ``<project>/out/demo/tables``
``AWM_CONFIG``         the job's ``--config`` (watermark configuration) ``<project>/out/demo/watermark.json``
``AWM_REPORTS``        where backfill and re-tuning reports go          ``<project>/out/reports``
``AWM_SPARK_CONN_ID``  Airflow connection of the Spark master           ``awm_spark_local`` (local)
``AWM_PUSHGATEWAY``    Pushgateway ``host:port`` for task outcomes       empty: nothing is pushed
``AWM_PYTHON``         Python of the Spark driver and workers           this interpreter
=====================  ==============================================  ===================================

Each becomes the default of a typed DAG parameter, so a run can override it (``--conf`` or the UI).
"""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TABLES = os.environ.get("AWM_TABLES", str(ROOT / "out" / "demo" / "tables"))
CONFIG = os.environ.get("AWM_CONFIG", str(ROOT / "out" / "demo" / "watermark.json"))
REPORTS = os.environ.get("AWM_REPORTS", str(ROOT / "out" / "reports"))
SPARK_CONN_ID = os.environ.get("AWM_SPARK_CONN_ID", "awm_spark_local")
#: The default connection, local Spark on every core, defined here so the backfill runs with no set-up; a
#: cluster gets a connection of its own name (``AWM_SPARK_CONN_ID``), which this never shadows.
LOCAL_SPARK_CONNECTION = '{"conn_type": "spark", "host": "local[*]"}'
os.environ.setdefault("AIRFLOW_CONN_AWM_SPARK_LOCAL", LOCAL_SPARK_CONNECTION)
PUSHGATEWAY = os.environ.get("AWM_PUSHGATEWAY", "")
PYTHON = os.environ.get("AWM_PYTHON", sys.executable)

START = datetime(2026, 1, 1, tzinfo=UTC)
TAGS = ["awm"]
DEFAULT_ARGS: dict[str, Any] = {
    "owner": "awm",
    "retries": 2,
    "retry_delay": timedelta(minutes=1),
    "retry_exponential_backoff": True,
    "max_retry_delay": timedelta(minutes=15),
}


def location_params(reports: str) -> dict[str, Any]:
    """The typed params every DAG that reads the tables shares (``reports``: what goes in that folder)."""
    from airflow.sdk import Param

    return {
        "tables": Param(TABLES, type="string", description="the streaming job's --output"),
        "config": Param(CONFIG, type="string", description="the job's --config"),
        "reports": Param(REPORTS, type="string", description=reports),
        "pushgateway": Param(PUSHGATEWAY, type="string", description="Pushgateway host:port; empty: no push"),
    }


def push(gateway: str, task: str, *, ok: bool, values: dict[str, float] | None, duration_s: float) -> str:
    """Push a task outcome to the Pushgateway (when one is configured); returns what was done, for the log."""
    if not gateway:
        return f"no Pushgateway configured (AWM_PUSHGATEWAY / param pushgateway): {task} outcome not pushed"
    from monitoring.push import push_outcome

    try:
        push_outcome(gateway, task, ok=ok, values=values if ok else None, duration_s=duration_s)
    except OSError as exc:  # an unreachable gateway must not hide the task's own outcome
        return f"could not push the {task} outcome to {gateway}: {exc}"
    return f"pushed the {task} outcome ({'success' if ok else 'failure'}) to {gateway}"
