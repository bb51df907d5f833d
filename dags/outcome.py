"""One way for every DAG to report its outcome: pushed to the Pushgateway (Connection ``awm_pushgateway``).

- Success: the DAG's last task calls :func:`report_outcome` with its figures (``awm_<task>_*`` gauges).
- Failure: :class:`PushOutcome`, a notifier, is every task's ``on_failure_callback`` (``default_args``) and
  every DAG's: a task that raises, times out (``execution_timeout``) or a run past its ``dagrun_timeout``
  pushes ``awm_<task>_last_run_ok 0`` and ``..._last_failure_timestamp_seconds``. The alerts
  ``Awm<Task>Failing`` compare it with the last success.

A Pushgateway that is not configured or not reachable never hides the task's own outcome: the helper logs
what it did and returns.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from airflow.sdk import BaseNotifier

log = logging.getLogger(__name__)

PUSHGATEWAY_CONN_ID = "awm_pushgateway"


def pushgateway() -> str:
    """``host:port`` of the Pushgateway Connection; empty when it is not defined."""
    from airflow.sdk import BaseHook

    try:
        conn = BaseHook.get_connection(PUSHGATEWAY_CONN_ID)
    except Exception:  # AirflowNotFoundException: no Pushgateway configured
        return ""
    host = conn.host or ""
    if "://" in host:
        return f"{host}:{conn.port}" if conn.port else host
    return f"http://{host}:{conn.port}" if conn.port else f"http://{host}"


def _duration_s(context: Mapping[str, Any]) -> float | None:
    ti = context.get("ti") or context.get("task_instance")
    started = getattr(ti, "start_date", None)
    if started is None:
        run = context.get("dag_run")
        started = getattr(run, "start_date", None)
    if started is None:
        return None
    return max(0.0, (datetime.now(UTC) - started).total_seconds())


def report_outcome(
    task: str,
    *,
    ok: bool,
    context: Mapping[str, Any] | None = None,
    values: Mapping[str, float] | None = None,
    duration_s: float | None = None,
    see: str | None = None,
) -> str:
    """Push one outcome of ``task``; returns what was done (also logged).

    ``task``: ``backfill``, ``tuning``, ``quality`` or ``maintenance`` (:data:`monitoring.push.TASK_VALUES`).
    ``see``: where the run's own results are (data quality: its Data Docs page), named in the message.
    """
    gateway = pushgateway()
    if not gateway:
        message = f"no Pushgateway connection {PUSHGATEWAY_CONN_ID!r}: {task} outcome not pushed"
    else:
        from monitoring.push import push_outcome

        took = duration_s if duration_s is not None else _duration_s(context or {})
        try:
            push_outcome(gateway, task, ok=ok, values=values, duration_s=took)
        except OSError as exc:  # an unreachable gateway must not hide the task's own outcome
            message = f"could not push the {task} outcome to {gateway}: {exc}"
        else:
            message = f"pushed the {task} outcome ({'success' if ok else 'failure'}) to {gateway}"
    if see:
        message += f"; results: {see}"
    log.info("%s", message)
    return message


class PushOutcome(BaseNotifier):
    """Failure notifier (``on_failure_callback``) of a DAG reporting as ``task``."""

    def __init__(self, task: str) -> None:
        super().__init__()
        self.task = task

    def notify(self, context: Any) -> None:
        """Push the failure; never raises (a callback's error would hide the failure itself)."""
        try:
            what = report_outcome(self.task, ok=False, context=context)
        except Exception as exc:  # noqa: BLE001 - the failure being reported matters more
            what = f"could not report the {self.task} failure: {exc}"
        ti = context.get("ti") if hasattr(context, "get") else None
        where = f" (task {ti.task_id})" if ti is not None else ""
        log.warning("%s failed%s: %s", self.task, where, what)
        print(f"{self.task} failed{where}: {what}")
