"""What a run of the job needs: the input field names, the source's options, and :class:`JobOptions`."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from watermark.config import PipelineConfig


@dataclass(frozen=True)
class Fields:
    """Input field names (each renameable by a flag)."""

    event_id: str = "event_id"
    key: str = "key"
    partition: str = "partition"
    event_time: str = "event_time_ms"
    arrival_time: str = "arrival_time_ms"
    value: str = "value"


FORMATS = ("json", "csv", "parquet", "rate", "kafka")
RATE_FILE = "rate"  # the ``file`` of rate-source records (their ``line`` is the sequence number)
DEFAULT_METRICS_PORT = 9108  # the job's /metrics (infra/prometheus/prometheus.yml scrapes it)


@dataclass(frozen=True)
class RateOptions:
    """Spark's rate source for load tests (``--format rate``)."""

    rows_per_second: int = 10_000
    keys: int = 1_000
    partitions: int = 8
    max_delay_ms: int = 2_000  # event time = arrival time - a hashed delay in [0, max_delay_ms]
    num_partitions: int = 2  # Spark partitions of the source
    #: Set: Spark's ``rate-micro-batch`` source instead: batch N holds exactly rows [N * rows_per_batch,
    #: (N + 1) * rows_per_batch), stamped from ``start_ms`` on at ``rows_per_second``, whatever the wall
    #: clock; a restart replays identical batches (the chaos test compares a killed run with an unbroken one).
    rows_per_batch: int | None = None
    start_ms: int = 1_700_000_000_000


@dataclass(frozen=True)
class KafkaOptions:
    """The Kafka source (``--format kafka``): one watermark partition per Kafka partition."""

    bootstrap_servers: str = ""
    topic: str = ""
    starting_offsets: str = "earliest"  # or "latest"; a restart resumes from the checkpoint's offsets
    max_offsets_per_trigger: int | None = None


@dataclass(frozen=True)
class DeferPolicy:
    """When the deferred tables (``late_events``, ``watermark_log``, ``arrivals``) are committed.

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
class JobOptions:
    """Everything a run of the job needs."""

    input: str
    output: str
    checkpoint: str
    config: PipelineConfig
    config_path: str | None = None
    format: str = "json"
    rate: RateOptions = field(default_factory=RateOptions)
    kafka: KafkaOptions = field(default_factory=KafkaOptions)
    max_batches: int | None = None  # stop after this many micro-batches (for the rate source)
    trigger: str = "available-now"
    max_files_per_trigger: int | None = None
    flush_at_end: bool = False
    fields: Fields = field(default_factory=Fields)
    future_bound_ms: int = 86_400_000
    max_field_bytes: int = 65_536
    reader: str = (
        "arrow"  # JSON: "arrow" (pyarrow in executors; Spark's reader for unclean batches) or "spark"
    )
    app_id: str | None = None  # Delta txnAppId; None: the checkpoint's own (state.checkpoint_app_id)
    progress: bool = True
    metrics_port: int | None = None  # serve Prometheus metrics on this port (0: any free port)
    metrics_host: str = "127.0.0.1"
    arrival_history: bool = True  # write the ``arrivals`` table (the re-tuning DAG's history)
    #: Quarantine repeated event ids (``duplicate_event_id``) within a batch and this far back in arrival
    #: time (jobs.stream.checkpoint.dedup); None: event ids are not deduplicated.
    dedup_horizon_ms: int | None = None
    #: Where the watermark stage runs: "executors" (per Kafka partition, where Spark reads it; partition-
    #: scoped mode on Kafka only), "driver", or "auto" (executors whenever they can).
    stage_in: str = "auto"
    #: The ingestion clock between arrivals. "arrivals": it moves with the records' arrival times only (a
    #: replay of recorded times: windows fire when arrivals move the watermark). "wall": the arrival times
    #: are stamped by the wall clock (Kafka's ``LogAppendTime``, a landing time), so the clock also moves to
    #: each batch's instant (its recorded start, less ``clock_margin_ms``) and windows fire at batch
    #: boundaries; with ``--trigger interval=...`` on Kafka every trigger is a batch (a timer source),
    #: so windows fire on the trigger's timer when no record comes.
    clock: str = "arrivals"
    #: "wall" clock: how far behind a batch's start the clock stops, for records stamped just before the
    #: batch was planned (they are read by the next batch) and for skew between the broker's and the
    #: driver's clocks.
    clock_margin_ms: int = 1_000
    #: When ``late_events``, ``watermark_log`` and ``arrivals`` are committed (jobs.stream.sinks.deferred).
    defer: DeferPolicy = field(default_factory=DeferPolicy)

    def __post_init__(self) -> None:
        if self.clock not in CLOCKS:
            msg = f"clock must be one of {', '.join(CLOCKS)}, got {self.clock!r}"
            raise ValueError(msg)
        if not 0 <= self.clock_margin_ms <= 86_400_000:
            msg = f"clock_margin_ms must be between 0 and 86400000 (one day), got {self.clock_margin_ms}"
            raise ValueError(msg)
        if self.stage_in not in STAGE_SITES:
            msg = f"stage_in must be one of {', '.join(STAGE_SITES)}, got {self.stage_in!r}"
            raise ValueError(msg)
        if self.stage_in == "executors" and self.format != "kafka":
            msg = (
                "--stage-in executors needs the Kafka source (--format kafka), where a Kafka partition is "
                "a Spark partition"
            )
            raise ValueError(msg)

    @property
    def timer(self) -> bool:
        """Whether a timer source makes every trigger a batch (wall clock, Kafka, an interval trigger)."""
        return self.clock == "wall" and self.format == "kafka" and self.trigger != "available-now"

    def boundary_ms(self, ingest_ms: int) -> int | None:
        """The ingestion-clock instant of a batch's boundary (wall clock), or None (arrival clock)."""
        return ingest_ms - self.clock_margin_ms if self.clock == "wall" else None


STAGE_SITES = ("auto", "executors", "driver")
CLOCKS = ("arrivals", "wall")
TIMER_FILE = "_timer"  # the ``file`` of the timer source's rows (filtered out before anything else)


_UNITS_MS = {
    "ms": 1,
    "millisecond": 1,
    "milliseconds": 1,
    "s": 1_000,
    "sec": 1_000,
    "second": 1_000,
    "seconds": 1_000,
    "m": 60_000,
    "min": 60_000,
    "minute": 60_000,
    "minutes": 60_000,
    "h": 3_600_000,
    "hour": 3_600_000,
    "hours": 3_600_000,
}


def trigger_interval_ms(trigger: str) -> int | None:
    """The micro-batch interval of ``--trigger`` in ms, or None for ``available-now``; ValueError otherwise.

    ``interval=`` takes a number and a unit, with or without a space: ``1s``, ``500ms``, ``2 seconds``,
    ``1.5min``, ``1h``.

    >>> triggers = ("available-now", "interval=1s", "interval=2 seconds", "interval=1.5min")
    >>> [trigger_interval_ms(t) for t in triggers]
    [None, 1000, 2000, 90000]
    >>> trigger_interval_ms("interval=soon")
    Traceback (most recent call last):
    ...
    ValueError: --trigger interval needs a number and a unit (ms, s, min, h), e.g. interval=5s; got 'soon'
    """
    if trigger == "available-now":
        return None
    if not trigger.startswith("interval="):
        msg = f"--trigger must be available-now or interval=<duration> (e.g. interval=5s), got {trigger!r}"
        raise ValueError(msg)
    text = trigger.split("=", 1)[1].strip().lower()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([a-z]+)", text)
    if match is None or match.group(2) not in _UNITS_MS:
        msg = f"--trigger interval needs a number and a unit (ms, s, min, h), e.g. interval=5s; got {text!r}"
        raise ValueError(msg)
    ms = round(float(match.group(1)) * _UNITS_MS[match.group(2)])
    if not 1 <= ms <= 86_400_000:
        msg = f"--trigger interval must be between 1 ms and 1 day, got {text!r}"
        raise ValueError(msg)
    return ms
