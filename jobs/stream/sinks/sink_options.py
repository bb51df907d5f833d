"""What the sinks need of a run's options: where the tables are, under which application id, when to commit.

:class:`SinkOptions` is the part of :class:`jobs.stream.options.JobOptions` that building the job's Delta
tables and committing a batch's rows read (:mod:`jobs.stream.sinks.commit`); :class:`DeferPolicy` is when
the deferred tables commit (:mod:`jobs.stream.sinks.deferred`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DeferPolicy:
    """When the deferred tables (``late_events``, ``quarantine``, ``watermark_log``, ``arrivals``) commit.

    Every ``batches`` batches, or when the oldest batch waiting is ``max_delay_ms`` old (ingestion time),
    and when the query ends (:mod:`jobs.stream.sinks.deferred`). ``batches=1``: with every batch.
    """

    batches: int = 10
    max_delay_ms: int = 60_000

    def __post_init__(self) -> None:
        if not 1 <= self.batches <= 10_000:
            msg = f"--defer-batches must be between 1 and 10000, got {self.batches}"
            raise ValueError(msg)
        if not 0 <= self.max_delay_ms <= 86_400_000:
            msg = f"--defer-max-delay-ms must be between 0 and 1 day, got {self.max_delay_ms} ms"
            raise ValueError(msg)


@dataclass(frozen=True)
class SinkOptions:
    """The job's tables (``output``), their writer's application id, and when the deferred ones commit.

    ``checkpoint`` holds the deferred rows between commits, and names the application id when ``app_id``
    is None (:func:`jobs.stream.checkpoint.state.checkpoint_app_id`).
    """

    output: str
    checkpoint: str
    app_id: str | None  # Delta txnAppId; None: the checkpoint's own
    defer: DeferPolicy
