"""Checks of the streaming job's flags that need no storage, and the watermark configuration they give.

:func:`jobs.stream.cli.options_from_args` runs them in its order: each refusal is a ``ValueError`` whose
message names the flag (exit 2).
"""

from __future__ import annotations

import argparse
from typing import Any

from jobs.stream.options import trigger_interval_ms
from jobs.stream.sources.kinds import source_kind


def config_doc(args: argparse.Namespace) -> dict[str, Any]:
    """The watermark configuration the flags give, as a document.

    :meth:`watermark.config.PipelineConfig.from_dict` makes the configuration of it (and checks it).
    """
    from watermark.strategies.registry import parse_settings

    doc: dict[str, Any] = {
        "version": 1,
        "strategy": args.strategy,
        "params": parse_settings(args.set),
        "window_ms": args.window_ms,
        "slide_ms": args.slide_ms,
        "late_slo_pct": args.late_slo_pct,
        "partition_mode": args.partition_mode or source_kind(args.format).default_partition_mode,
    }
    if args.idle_timeout_ms is not None:  # absent: the default (config.default_idle_timeout_ms)
        doc["idle_timeout_ms"] = idle_timeout_flag(args.idle_timeout_ms)
    if args.partition_retention_ms is not None:  # absent: config.default_partition_retention_ms
        doc["partition_retention_ms"] = partition_retention_flag(args.partition_retention_ms)
    return doc


def idle_timeout_flag(given: str) -> int | str | None:
    """``--idle-timeout-ms``: a number of milliseconds, ``auto`` or ``none`` (None).

    >>> idle_timeout_flag("5000"), idle_timeout_flag(" Auto "), idle_timeout_flag("none")
    (5000, 'auto', None)
    """
    idle = given.strip().lower()
    if idle not in ("none", "auto") and not idle.isdigit():
        msg = f"--idle-timeout-ms must be a number of milliseconds, auto or none, got {given!r}"
        raise ValueError(msg)
    return None if idle == "none" else idle if idle == "auto" else int(idle)


def partition_retention_flag(given: str) -> int | None:
    """``--partition-retention-ms``: a number of milliseconds or ``none`` (None).

    >>> partition_retention_flag("60000"), partition_retention_flag("NONE")
    (60000, None)
    """
    kept = given.strip().lower()
    if kept != "none" and not kept.isdigit():
        msg = f"--partition-retention-ms must be a number of milliseconds or none, got {given!r}"
        raise ValueError(msg)
    return None if kept == "none" else int(kept)


def check_source_flags(args: argparse.Namespace) -> None:
    """Refuse flags that do not fit ``--format``: input, Kafka's, a rate source that would never end."""
    kind = source_kind(args.format)
    kind.check_flags(args)
    if trigger_interval_ms(args.trigger) is None and kind.endless:  # a bad --trigger: its error
        raise ValueError(kind.endless_refusal)


def check_counts(args: argparse.Namespace) -> None:
    """Refuse a metrics port out of range, and counts below 1 (a rate source's delay below 0)."""
    if not 0 <= args.metrics_port <= 65_535:
        msg = f"--metrics-port must be a port number (0 serves none), got {args.metrics_port}"
        raise ValueError(msg)
    for flag in (
        "rate_rows_per_second",
        "rate_rows_per_batch",
        "rate_keys",
        "rate_partitions",
        "max_batches",
        "max_offsets_per_trigger",
    ):
        value = getattr(args, flag)
        if value is not None and value < 1:
            msg = f"--{flag.replace('_', '-')} must be at least 1, got {value}"
            raise ValueError(msg)
    if args.rate_max_delay_ms < 0:
        msg = f"--rate-max-delay-ms must be >= 0, got {args.rate_max_delay_ms}"
        raise ValueError(msg)
