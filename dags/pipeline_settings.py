"""What every DAG of the pipeline shares: its Assets, timeouts, and settings read from Airflow at run time.

Nothing here reads the environment or the metadata DB when a DAG file is parsed. Settings are Airflow
Variables and Connections, looked up by the first task of each run (:func:`resolve`), which hands them to
the others by XCom. A run's conf (``--conf`` or the UI) may give only the Params its DAG declares: Airflow
merges any key of ``dag_run.conf`` into ``params`` (``core.dag_run_conf_overrides_params``, on by default,
checks the declared ones against their schema and lets any other key through), so :func:`resolve` fails
the run on a key no Param declares. Of the settings, only the locations ``tables``, ``config`` and
``reports`` are Params; the Python of Spark (hence the first ``PATH`` entry of ``spark-submit``) and the
retentions come from their Variables only, whoever triggers the run.

Variables (built-in default in parentheses):

- ``awm_tables``: the streaming job's ``--output``, the Delta tables (``<project>/out/demo/tables``)
- ``awm_config``: the job's ``--config``, its watermark configuration (``<project>/out/demo/watermark.json``)
- ``awm_reports``: re-tuning reports and plots (``<project>/out/reports``)
- ``awm_python``: Python of the Spark driver and executors (the worker's interpreter)
- ``awm_vacuum_retain_hours``: VACUUM keeps files removed less than this long ago (``168``, 7 days; below
  Delta's own 168 h floor only with ``awm_vacuum_allow_below_floor``)
- ``awm_vacuum_allow_below_floor``: ``true`` lets ``awm_vacuum_retain_hours`` go below 168 h, with a warning
  in the task's log each run (``false``: such a retention fails the run)
- ``awm_arrivals_retain_days``: ``arrivals`` rows that arrived longer ago are deleted, by date (``30``)

Connections:

- ``awm_spark``: the Spark master the backfill and maintenance jobs are submitted to (type ``spark``; host
  ``local[*]``, ``spark://HOST`` with a port, ``yarn`` or ``k8s://...``)
- ``awm_pushgateway``: the Pushgateway (host, port) for every DAG's outcome; not defined: nothing is pushed

Results pass between tasks by XCom, or as files under the tables' own storage (``<tables>/_reports/``),
never on a worker's local disk.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import Asset

from dags import outcome

log = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parents[1]
#: Built-in defaults of the Variables (used when a Variable is not defined).
VARIABLES: dict[str, str] = {
    "awm_tables": str(ROOT / "out" / "demo" / "tables"),
    "awm_config": str(ROOT / "out" / "demo" / "watermark.json"),
    "awm_reports": str(ROOT / "out" / "reports"),
    "awm_python": "",  # empty: the interpreter running the task
    "awm_vacuum_retain_hours": "168",
    "awm_arrivals_retain_days": "30",
}
#: The settings a run's params may give (each a Param of the DAGs: :func:`location_params`, ``reports`` of
#: the re-tuning DAG); every other one comes from its Variable only.
RUN_PARAMS = frozenset({"tables", "config", "reports"})
#: Delta's own default VACUUM retention (``delta.deletedFileRetentionDuration``, 7 days): the floor.
VACUUM_FLOOR_HOURS = 168.0
#: The Variable that, set to ``true``, allows a VACUUM retention below the floor (logged each run).
ALLOW_BELOW_FLOOR = "awm_vacuum_allow_below_floor"
SPARK_CONN_ID = "awm_spark"
PUSHGATEWAY_CONN_ID = outcome.PUSHGATEWAY_CONN_ID


def tables_location() -> str:
    """Parse time: the tables' location the Assets are named by (Variable ``awm_tables``, else the default).

    The DAG processor reads the Variable when it parses the DAG files (an environment variable
    ``AIRFLOW_VAR_AWM_TABLES`` answers without the metadata database); where no Variable can be read, the
    built-in default names them.
    """
    try:
        from airflow.sdk import Variable

        return str(Variable.get("awm_tables", default=VARIABLES["awm_tables"]))
    except Exception:  # noqa: BLE001 - no Variable store while parsing (a test's DagBag): the default
        return VARIABLES["awm_tables"]


def table_asset(table: str) -> Asset:
    """The Asset of one table, named by its real URI (``s3a://bucket/tables/aggregates``, ``file:///...``)."""
    from watermark.storage import Location

    return Asset(name=f"awm_{table}", uri=(Location.of(tables_location()) / table).uri, group="awm")


#: The backfill's output. One Asset per table, named by the table's URI; an event's ``extra`` names the
#: tables' location and the data interval the backfill reconciled, which the data-quality DAG checks.
AGGREGATES = table_asset("aggregates")
LATE_EVENTS = table_asset("late_events")

START = datetime(2026, 1, 1, tzinfo=UTC)
TAGS = ["awm"]
#: Every task's default; DAGs and tasks set tighter ``execution_timeout``\\ s where they know better.
TASK_TIMEOUT = timedelta(minutes=30)


def default_args(task: str) -> dict[str, Any]:
    """Default arguments of a DAG reporting as ``task``: retries, a timeout, the failure notifier.

    ``task`` is ``backfill``, ``tuning``, ``quality`` or ``maintenance``; the notifier is
    :class:`dags.outcome.PushOutcome`.
    """
    return {
        "owner": "awm",
        "retries": 2,
        "retry_delay": timedelta(minutes=1),
        "retry_exponential_backoff": True,
        "max_retry_delay": timedelta(minutes=15),
        "execution_timeout": TASK_TIMEOUT,
        "on_failure_callback": outcome.PushOutcome(task),
    }


def location_params() -> dict[str, Any]:
    """Params every DAG shares; empty means: the Airflow Variable (then the built-in default)."""
    from airflow.sdk import Param

    return {
        "tables": Param("", type="string", description="the streaming job's --output; empty: awm_tables"),
        "config": Param("", type="string", description="the job's --config; empty: Variable awm_config"),
    }


def resolve(
    params: Mapping[str, Any], *, declared: Iterable[str], conf: Mapping[str, Any] | None = None
) -> dict[str, str]:
    """Run time: every setting, from the run's params (:data:`RUN_PARAMS` only), else Variable, else default.

    ``params`` are the task's (Airflow merges the run's conf into them), ``declared`` the names of the
    DAG's Params and ``conf`` the run's ``dag_run.conf``. Also the worker's ``PATH`` with the Spark
    driver's Python (Variable ``awm_python``) first: ``spark-submit`` runs from it.

    Raises
    ------
    AirflowFailException
        (the run fails, no retry) if the run's conf or params hold a key no Param declares, if
        ``awm_vacuum_retain_hours`` or ``awm_arrivals_retain_days`` is not a number >= 0, or if the VACUUM
        retention is below :data:`VACUUM_FLOOR_HOURS` without ``awm_vacuum_allow_below_floor=true``.

    """
    import os
    import sys

    from airflow.sdk import Variable
    from airflow.sdk.exceptions import AirflowFailException

    known = set(declared)
    undeclared = sorted((set(params) | set(conf or {})) - known)
    if undeclared:
        msg = (
            f"this run's conf gives {', '.join(map(repr, undeclared))}, which no Param of the DAG declares "
            f"(its Params: {', '.join(sorted(known)) or 'none'}). The Python of Spark, the PATH and the "
            "retentions are Airflow Variables (awm_python, awm_vacuum_retain_hours, "
            "awm_arrivals_retain_days), never a run's conf: trigger the run without those keys"
        )
        raise AirflowFailException(msg)
    out = {}
    for name, default in VARIABLES.items():
        key = name.removeprefix("awm_")
        given = params.get(key) if key in RUN_PARAMS and key in known else None
        out[key] = str(given) if given not in (None, "") else str(Variable.get(name, default=default))
    out["python"] = out["python"] or sys.executable
    out["path"] = os.pathsep.join([str(Path(out["python"]).parent), os.environ.get("PATH", "")])
    out["root"] = str(ROOT)
    out["spark_local_ip"] = os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")
    for key in ("vacuum_retain_hours", "arrivals_retain_days"):
        try:
            value = float(out[key])
        except ValueError:
            value = float("nan")
        if not value >= 0:  # NaN too
            msg = f"the Variable awm_{key} must be a number >= 0, got {out[key]!r}"
            raise AirflowFailException(msg)
    hours = float(out["vacuum_retain_hours"])
    if hours < VACUUM_FLOOR_HOURS:
        allowed = str(Variable.get(ALLOW_BELOW_FLOOR, default="false")).strip().lower() == "true"
        if not allowed:
            msg = (
                f"the Variable awm_vacuum_retain_hours is {out['vacuum_retain_hours']}, below Delta's "
                f"{VACUUM_FLOOR_HOURS:g} h: VACUUM would delete files that a reader older than that, or an "
                "append not committed yet, still needs. Raise it, or set the Variable "
                f"{ALLOW_BELOW_FLOOR}=true to allow it explicitly"
            )
            raise AirflowFailException(msg)
        log.warning(
            "VACUUM retention %s h is below Delta's %g h floor, allowed by the Variable %s=true: files "
            "removed less than %s h ago are deleted, which a reader older than that or an append not "
            "committed yet may still need",
            out["vacuum_retain_hours"],
            VACUUM_FLOOR_HOURS,
            ALLOW_BELOW_FLOOR,
            out["vacuum_retain_hours"],
        )
    return out


def resolve_run(context: Mapping[str, Any]) -> dict[str, str]:
    """:func:`resolve` for the task whose ``context`` is given.

    The DAG's and the task's Params are the declared ones; the run's ``dag_run.conf`` is checked too.
    """
    declared = set(context["dag"].params) | set(getattr(context.get("task"), "params", None) or {})
    conf = getattr(context.get("dag_run"), "conf", None) or {}
    return resolve(context["params"], declared=declared, conf=conf)


def check_spark_connection() -> dict[str, str]:
    """Run time: the Spark connection exists, and so do the jars the jobs need (``spark-submit --jars``)."""
    from airflow.sdk import BaseHook

    from jobs.common.session import project_jars

    try:
        conn = BaseHook.get_connection(SPARK_CONN_ID)
    except Exception as exc:  # AirflowNotFoundException; its module moves between Airflow versions
        msg = (
            f"the Spark connection {SPARK_CONN_ID!r} is not defined ({exc}). Create it, e.g. "
            f"airflow connections add {SPARK_CONN_ID} --conn-type spark --conn-host 'local[*]' "
            "(local) or --conn-host spark://HOST --conn-port 7077 (a cluster); or set "
            f"AIRFLOW_CONN_{SPARK_CONN_ID.upper()}"
        )
        raise RuntimeError(msg) from None
    try:
        jars = ",".join(project_jars())
    except FileNotFoundError as exc:
        raise RuntimeError(str(exc)) from None
    master = f"{conn.conn_type}://{conn.host or ''}{':' + str(conn.port) if conn.port else ''}"
    return {"master": master, "jars": jars}


def xcom(key: str, task_id: str = "settings") -> str:
    """A template pulling ``key`` of a task's XCom dict (``settings`` by default)."""
    return f"{{{{ ti.xcom_pull(task_ids='{task_id}')['{key}'] }}}}"


def report_path(job: str) -> str:
    """Where a submitted job's JSON report goes: on the tables' storage, one file per data interval.

    A retry or a rerun of the interval replaces it; :func:`read_report` checks that it is this run's.
    """
    return xcom("tables") + f"/_reports/{job}/{{{{ data_interval_start.strftime('%Y%m%dT%H%M%SZ') }}}}.json"


def spark_job(task_id: str, script: str, name: str, args: list[str], timeout: timedelta) -> Any:
    """A ``SparkSubmitOperator`` running ``jobs/batch/<script>`` with ``args`` on ``awm_spark``.

    The jars come from the ``check_spark_connection`` task, the Python and the paths from ``settings``
    (:func:`resolve`); the job writes its report to :func:`report_path` of ``task_id``, stamped with the
    run id.
    """
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    return SparkSubmitOperator(
        task_id=task_id,
        conn_id=SPARK_CONN_ID,
        application=str(ROOT / "jobs" / "batch" / script),
        name=name,
        jars=xcom("jars", "check_spark_connection"),
        application_args=[*args, "--report", report_path(task_id), "--run-id", "{{ run_id }}"],
        conf={"spark.pyspark.python": xcom("python"), "spark.pyspark.driver.python": xcom("python")},
        env_vars={"PYTHONPATH": xcom("root"), "PATH": xcom("path"), "SPARK_LOCAL_IP": xcom("spark_local_ip")},
        execution_timeout=timeout,
    )


#: The prefix of the store names under which the DAGs attach a remote scheme's file system (below).
STORE_PREFIX = "awm_storage"


def object_path(where: str) -> Any:
    """Airflow's ``ObjectStoragePath`` for a location the pipeline uses (a path or URI).

    A local path is a ``file://`` path. On an object store the path reads through the file system
    :mod:`watermark.storage` gives the location (configured from the same AWS, Azure or Google environment
    as the jobs), attached to Airflow as a store of its own: the DAGs need no provider package per cloud,
    and a task reads exactly what the job it submitted wrote.
    """
    from airflow.sdk import ObjectStoragePath

    from watermark.storage import Location

    loc = Location.of(where)
    if loc.local:
        return ObjectStoragePath(loc.uri)
    from airflow.sdk.io import attach
    from fsspec.implementations.arrow import ArrowFSWrapper

    fs, path = loc.filesystem()
    store = f"{STORE_PREFIX}_{id(fs):x}"  # one store per file system (watermark.storage caches them)
    attach(loc.scheme, conn_id=store, fs=ArrowFSWrapper(fs))
    return ObjectStoragePath(f"{loc.scheme}://{path}", conn_id=store)


def tables_of_report(path: str) -> str:
    """The tables' location of a report written at :func:`report_path` (``TABLES/_reports/JOB/STAMP``)."""
    from watermark.storage import Location

    return Location.of(path).parent.parent.parent.spark


def read_report(path: str, run_id: str, what: str) -> dict[str, Any]:
    """The report a :func:`spark_job` of run ``run_id`` wrote at ``path``; an error if the job failed."""
    import json

    file = object_path(path)
    report: dict[str, Any] | None = json.loads(file.read_text()) if file.exists() else None
    if report is None or report.get("run_id") != run_id:
        msg = f"{what} did not succeed (no report of run {run_id} at {path})"
        raise RuntimeError(msg)
    return report
