"""Outcomes of batch tasks (late-data backfill, threshold tuning) pushed to a Prometheus Pushgateway.

A batch task lives too briefly to be scraped, so it pushes one group of gauges per task when it ends,
successful or not. The push adds to the group (``pushadd``) rather than replacing it, so the last success
stays visible after a failure: alerts compare ``..._last_failure_timestamp_seconds`` with
``..._last_success_timestamp_seconds`` and check the last success's age.

Examples
--------
>>> from prometheus_client import CollectorRegistry
>>> registry = outcome_registry("backfill", ok=True, values={"corrected_windows": 3}, now_s=100.0,
...                             duration_s=2.5)
>>> registry.get_sample_value("awm_backfill_last_success_timestamp_seconds")
100.0
>>> registry.get_sample_value("awm_backfill_corrected_windows")
3.0
>>> outcome_registry("backfill", ok=True, values={"rows": 1}, now_s=1.0)
Traceback (most recent call last):
...
ValueError: backfill pushes no value 'rows'; known: corrected_windows, reconciled_events, late_events_read

"""

from __future__ import annotations

import time
from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Gauge, pushadd_to_gateway

from monitoring.metrics import PREFIX

#: What each task may push besides its timestamps, with help texts (base units in the names).
TASK_VALUES: dict[str, dict[str, str]] = {
    "backfill": {
        "corrected_windows": "Windows the last successful backfill corrected (revision + 1).",
        "reconciled_events": "Late events the last successful backfill marked reconciled.",
        "late_events_read": "Late events in the interval the last successful backfill read.",
    },
    "tuning": {
        "published": "1 if the last successful tuning run published a new configuration version, else 0.",
        "config_version": "Configuration version the last successful tuning run left in force.",
        "dropped_ratio": "Late (dropped) ratio of the chosen setting on the tuning history (0..1).",
        "emit_latency_seconds": "Mean emit latency of the chosen setting on the tuning history.",
        "running_emit_latency_seconds": "Mean emit latency of the running setting on the same history.",
    },
    "quality": {
        "expectations": "Expectations the last successful data-quality run checked.",
        "failed_expectations": "Expectations the last successful data-quality run found broken (0).",
        "rows_checked": "Rows of the checked interval the last successful data-quality run read.",
    },
    "maintenance": {
        "files_before": "Active data files of all tables before the last successful maintenance.",
        "files_after": "Active data files of all tables after the last successful maintenance.",
        "files_vacuumed": "Data files the last successful maintenance's VACUUM deleted.",
        "arrivals_deleted": "Arrivals rows past their retention the last successful maintenance deleted.",
    },
}
#: Pushgateway job label of the batch tasks.
PUSH_JOB = "awm_batch_tasks"


def outcome_registry(
    task: str,
    *,
    ok: bool,
    values: Mapping[str, float] | None = None,
    now_s: float | None = None,
    duration_s: float | None = None,
) -> CollectorRegistry:
    """A fresh registry holding one run's outcome of ``task`` (``backfill`` or ``tuning``)."""
    if task not in TASK_VALUES:
        msg = f"unknown task {task!r}; known: {', '.join(TASK_VALUES)}"
        raise ValueError(msg)
    known = TASK_VALUES[task]
    for name in values or {}:
        if name not in known:
            msg = f"{task} pushes no value {name!r}; known: {', '.join(known)}"
            raise ValueError(msg)
    now = time.time() if now_s is None else now_s
    registry = CollectorRegistry()
    base = f"{PREFIX}_{task}"
    Gauge(f"{base}_last_run_timestamp_seconds", f"When the last {task} run ended.", registry=registry).set(
        now
    )
    outcome = "success" if ok else "failure"
    Gauge(
        f"{base}_last_{outcome}_timestamp_seconds",
        f"When the last {outcome} of {task} ended.",
        registry=registry,
    ).set(now)
    Gauge(f"{base}_last_run_ok", f"1 if the last {task} run succeeded, else 0.", registry=registry).set(
        int(ok)
    )
    if duration_s is not None:
        Gauge(
            f"{base}_last_run_duration_seconds", f"Duration of the last {task} run.", registry=registry
        ).set(duration_s)
    if ok:
        for name, value in (values or {}).items():
            Gauge(f"{base}_{name}", known[name], registry=registry).set(value)
    return registry


def push_outcome(
    gateway: str,
    task: str,
    *,
    ok: bool,
    values: Mapping[str, float] | None = None,
    duration_s: float | None = None,
    instance: str = "default",
    timeout_s: float = 10.0,
) -> None:
    """Push one run's outcome of ``task`` to the Pushgateway at ``gateway`` (``host:port`` or a URL)."""
    registry = outcome_registry(task, ok=ok, values=values, duration_s=duration_s)
    pushadd_to_gateway(
        gateway,
        job=PUSH_JOB,
        registry=registry,
        grouping_key={"task": task, "instance": instance},
        timeout=timeout_s,
    )
