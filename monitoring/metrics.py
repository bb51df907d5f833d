"""The streaming job's Prometheus metrics: one prefix (``awm_``), base units, a registry passed in.

The job hands :class:`JobMetrics` one :class:`BatchObservation` per micro-batch (plain numbers, built by the
job from what it already computed) and tells it when a batch starts and ends. Counters and histograms are
updated then; everything that depends on the scrape's wall clock (watermark lag against the wall clock, the
processing-time watermark lag) or on state the job holds (per-partition watermarks, the adaptive
generator's learned delay) is produced fresh at each scrape by a custom collector.

Time values are exported in seconds (Prometheus base units) even though the job keeps milliseconds.

Examples
--------
>>> from prometheus_client import CollectorRegistry
>>> registry = CollectorRegistry()
>>> metrics = JobMetrics(registry, clock=lambda: 1_000.0)
>>> metrics.batch_started(0, oldest_input_ms=990_000)
>>> registry.get_sample_value("awm_processing_time_watermark_lag_seconds")
10.0
>>> metrics.batch_done(BatchObservation(batch_id=0, on_time=90, late=10, watermark_ms=995_000,
...                                     ingestion_clock_ms=999_000))
>>> registry.get_sample_value("awm_events_total", {"outcome": "late"})
10.0
>>> registry.get_sample_value("awm_event_time_watermark_lag_seconds", {"clock": "ingestion"})
4.0
>>> registry.get_sample_value("awm_processing_time_watermark_lag_seconds")
0.0

"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from watermark.processing_time import ProcessingTimeWatermark
from watermark.timeutil import NO_WATERMARK

PREFIX = "awm"
#: Event outcomes: every input row ends in exactly one (on-time excludes stragglers).
OUTCOMES = ("on_time", "straggler", "late", "quarantined")
#: Emit latency and trigger delay buckets, seconds (windows from 100 ms to hours).
LATENCY_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, float("inf"))
#: Batch duration buckets, seconds.
DURATION_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, float("inf"))
#: Rows per batch buckets.
ROWS_BUCKETS = (0, 10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000, float("inf"))
#: At most this many partitions get per-partition series (the one holding the watermark back always does).
MAX_PARTITION_SERIES = 100


@dataclass(frozen=True)
class PartitionState:
    """One source partition after a batch (a row of ``watermark_log``)."""

    partition: str
    watermark_ms: int
    learned_delay_ms: int | None = None
    sensitivity: float | None = None
    drifts: int | None = None
    holds_back: bool = False
    active: bool = True


@dataclass(frozen=True)
class BatchObservation:
    """What one micro-batch did, in the job's units (milliseconds, row counts)."""

    batch_id: int
    on_time: int = 0
    straggler: int = 0
    late: int = 0
    quarantined: int = 0
    #: Quarantine rows by reason (``jobs.common.schemas.QUARANTINE_REASONS``); a whole landing file
    #: quarantined as a file (``file_missing``, ``unreadable_file_name``, ``symlink``,
    #: ``outside_landing_root``) is one row.
    quarantine_reasons: Mapping[str, int] = field(default_factory=dict)
    watermark_ms: int = NO_WATERMARK  # global event-time watermark after the batch
    ingestion_clock_ms: int = NO_WATERMARK  # latest arrival time read so far
    partitions: Sequence[PartitionState] = ()
    emit_latency_ms: Sequence[int] = ()  # windows the watermark fired in this batch
    trigger_delay_ms: Sequence[int] = ()
    flushed_windows: int = 0  # windows closed by the end of input
    open_windows: int = 0
    config_version: int = 0
    strategy: str = ""
    late_slo_pct: float = 1.0
    idle_timeout_ms: int | None = None  # the configuration's partition idleness timeout (None: never idle)


@dataclass
class _State:
    watermark_ms: int = NO_WATERMARK
    ingestion_clock_ms: int = NO_WATERMARK
    partitions: dict[str, PartitionState] = field(default_factory=dict)
    open_windows: int = 0
    config_version: int = 0
    strategy: str = ""
    late_slo_pct: float | None = None
    last_batch_s: float | None = None
    idle_timeout_s: float | None = None  # inf: partitions never go idle; None: not known yet


class JobMetrics:
    """The job's metrics in ``registry``; ``clock`` gives the wall clock in seconds (tests pass their own)."""

    def __init__(self, registry: CollectorRegistry, clock: Callable[[], float] = time.time) -> None:
        self.registry = registry
        self.clock = clock
        self._lock = threading.Lock()
        self._state = _State()
        self._ptw = ProcessingTimeWatermark(start_ms=int(clock() * 1000))
        #: Scrapes begun and finished (markers registered first and last): a failure recorded while
        #: ``scrapes_begun`` was n has been seen by Prometheus once ``scrapes_done`` exceeds n.
        self.scrapes_begun = 0
        self.scrapes_done = 0
        self._failure_recorded = False
        self._scraped = threading.Condition()
        registry.register(_ScrapeMarker(self, begin=True))
        _JOB_METRICS[registry] = self
        p = PREFIX
        self.events = Counter(
            f"{p}_events",
            "Input rows by outcome (on_time, straggler, late, quarantined).",
            ["outcome"],
            registry=registry,
        )
        for outcome in OUTCOMES:
            self.events.labels(outcome)
        self.quarantined = Counter(
            f"{p}_quarantined",
            "Quarantine rows by reason (a landing file quarantined as a file, say file_missing, is one).",
            ["reason"],
            registry=registry,
        )
        self.windows = Counter(
            f"{p}_windows_emitted",
            "Windows written to the aggregates table, by what closed them.",
            ["trigger"],
            registry=registry,
        )
        for trigger in ("watermark", "flush"):
            self.windows.labels(trigger)
        self.emit_latency = Histogram(
            f"{p}_window_emit_latency_seconds",
            "Ingestion time at which a window fired minus the window's end (windows fired by the watermark).",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.trigger_delay = Histogram(
            f"{p}_window_trigger_delay_seconds",
            "Watermark that fired a window minus the window's end.",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.batches = Counter(f"{p}_batches", "Micro-batches the job completed.", registry=registry)
        self.batch_duration = Histogram(
            f"{p}_batch_duration_seconds",
            "Micro-batch duration as Spark's StreamingQueryListener reports it.",
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.batch_rows = Histogram(
            f"{p}_batch_input_rows",
            "Input rows per micro-batch, valid or not (counted by the job).",
            buckets=ROWS_BUCKETS,
            registry=registry,
        )
        self.input_rows = Counter(
            f"{p}_input_rows",
            "Input rows the job read, valid or not (counted by the job).",
            registry=registry,
        )
        self.config_refused = Counter(
            f"{p}_config_refused",
            "Configuration versions refused (invalid, not newer, or a window change).",
            registry=registry,
        )
        self.query_failures = Counter(
            f"{p}_query_terminated_with_error",
            "Streaming queries that ended with an exception.",
            registry=registry,
        )
        registry.register(_ScrapeTimeCollector(self))
        registry.register(_ScrapeMarker(self, begin=False))

    # -- the query's end ------------------------------------------------------------------------------------
    def query_failed(self) -> None:
        """The streaming query ended with an error: count it (once, whoever notices first)."""
        with self._lock:
            if self._failure_recorded:
                return
            self._failure_recorded = True
        self.query_failures.inc()

    def wait_until_scraped(self, timeout_s: float) -> bool:
        """Block until a scrape begun after this call has finished (False: none within ``timeout_s``)."""
        with self._scraped:
            begun = self.scrapes_begun
            return self._scraped.wait_for(lambda: self.scrapes_done > begun, timeout=timeout_s)

    def _scrape_marker(self, begin: bool) -> None:
        with self._scraped:
            if begin:
                self.scrapes_begun += 1
            else:
                self.scrapes_done += 1
                self._scraped.notify_all()

    # -- called by the job ----------------------------------------------------------------------------------
    def batch_started(self, batch_id: int, oldest_input_ms: int) -> None:
        """A batch whose oldest input entered the system at ``oldest_input_ms`` (wall clock) started."""
        with self._lock:
            if batch_id in self._ptw.in_flight:
                self._ptw.completed(batch_id)
            self._ptw.started(batch_id, oldest_input_ms)

    def batch_done(self, obs: BatchObservation) -> None:
        """Record a completed batch."""
        for outcome in OUTCOMES:
            count = getattr(obs, outcome)
            if count:
                self.events.labels(outcome).inc(count)
        for reason, count in obs.quarantine_reasons.items():
            if count:
                self.quarantined.labels(reason).inc(count)
        for value in obs.emit_latency_ms:
            self.emit_latency.observe(value / 1000)
        for value in obs.trigger_delay_ms:
            self.trigger_delay.observe(value / 1000)
        self.windows.labels("watermark").inc(len(obs.emit_latency_ms))
        self.windows.labels("flush").inc(obs.flushed_windows)
        self.batches.inc()
        rows = obs.on_time + obs.straggler + obs.late + obs.quarantined
        self.input_rows.inc(rows)
        self.batch_rows.observe(rows)
        with self._lock:
            s = self._state
            if obs.watermark_ms != NO_WATERMARK:
                s.watermark_ms = max(s.watermark_ms, obs.watermark_ms)
            if obs.ingestion_clock_ms != NO_WATERMARK:
                s.ingestion_clock_ms = max(s.ingestion_clock_ms, obs.ingestion_clock_ms)
            if obs.partitions:
                s.partitions = {p.partition: p for p in obs.partitions}
            s.open_windows = obs.open_windows
            s.config_version, s.strategy, s.late_slo_pct = obs.config_version, obs.strategy, obs.late_slo_pct
            s.idle_timeout_s = _idle_seconds(obs.idle_timeout_ms)
            s.last_batch_s = self.clock()
            if obs.batch_id in self._ptw.in_flight:
                self._ptw.completed(obs.batch_id, now_ms=int(s.last_batch_s * 1000))
            else:
                self._ptw.caught_up(int(s.last_batch_s * 1000))

    def query_idle(self) -> None:
        """A trigger found no new input (Spark's ``onQueryIdle``): the job is caught up now.

        Without batches or idle triggers the processing-time lag grows with the time since the last
        completed batch, so a trigger stuck before it starts a batch pages on-call.
        """
        with self._lock:
            self._ptw.caught_up(int(self.clock() * 1000))

    def config_applied(
        self, version: int, strategy: str, late_slo_pct: float, idle_timeout_ms: int | None = None
    ) -> None:
        """The configuration in force (before the first batch, and whenever a new version applies)."""
        with self._lock:
            s = self._state
            s.config_version, s.strategy, s.late_slo_pct = version, strategy, late_slo_pct
            s.idle_timeout_s = _idle_seconds(idle_timeout_ms)

    def query_progress(self, duration_s: float) -> None:
        """One ``QueryProgressEvent``: a micro-batch's duration.

        Its ``numInputRows`` is not used: on the Arrow path the job reads the batch's files itself and
        Spark counts none of them, so rows are counted by the job (:meth:`batch_done`).
        """
        self.batch_duration.observe(duration_s)

    # -- read by the collector ----------------------------------------------------------------------
    def _snapshot(self) -> tuple[_State, int]:
        """A copy of the state and the processing-time lag, taken together."""
        with self._lock:
            now_ms = int(self.clock() * 1000)
            lag = self._ptw.lag_ms(now_ms)
            state = replace(self._state, partitions=dict(self._state.partitions))
            return state, lag


def _idle_seconds(idle_timeout_ms: int | None) -> float:
    return float("inf") if idle_timeout_ms is None else idle_timeout_ms / 1000


def _shown(partitions: dict[str, PartitionState]) -> list[PartitionState]:
    """The partitions given series, at most the cap, the ones an on-call engineer looks for first.

    The holding-back one, then the active ones furthest behind (lowest watermark first: with more
    partitions than the cap, as keys are in the keyed mode, the series show the laggards), then the idle
    ones; ties by name.
    """
    ordered = sorted(
        partitions.values(), key=lambda p: (not p.holds_back, not p.active, p.watermark_ms, p.partition)
    )
    return ordered[:MAX_PARTITION_SERIES]


#: The :class:`JobMetrics` of each registry (the metrics server finds the job's through its registry).
_JOB_METRICS: weakref.WeakKeyDictionary[CollectorRegistry, JobMetrics] = weakref.WeakKeyDictionary()


def job_metrics_of(registry: CollectorRegistry) -> JobMetrics | None:
    """The :class:`JobMetrics` registered in ``registry`` (None: none)."""
    return _JOB_METRICS.get(registry)


class _ScrapeMarker(Collector):
    """Counts scrapes: registered first (a scrape begins) and last (it has collected everything)."""

    def __init__(self, metrics: JobMetrics, begin: bool) -> None:
        self.metrics = metrics
        self.begin = begin

    def describe(self) -> list[GaugeMetricFamily]:
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        self.metrics._scrape_marker(self.begin)
        return iter(())


class _ScrapeTimeCollector(Collector):
    """Gauges computed at each scrape from the job's last batch and the wall clock."""

    def __init__(self, metrics: JobMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        p = PREFIX
        state, pt_lag_ms = self.metrics._snapshot()
        partitions = state.partitions
        now_s = self.metrics.clock()
        wm = GaugeMetricFamily(
            f"{p}_event_time_watermark_seconds", "Global event-time watermark (epoch seconds)."
        )
        lag = GaugeMetricFamily(
            f"{p}_event_time_watermark_lag_seconds",
            "Clock minus the global event-time watermark; clock=wall (this scrape) or ingestion (latest "
            "arrival time read).",
            labels=["clock"],
        )
        if state.watermark_ms != NO_WATERMARK:
            wm.add_metric([], state.watermark_ms / 1000)
            lag.add_metric(["wall"], now_s - state.watermark_ms / 1000)
            if state.ingestion_clock_ms != NO_WATERMARK:
                lag.add_metric(["ingestion"], (state.ingestion_clock_ms - state.watermark_ms) / 1000)
        yield wm
        yield lag
        yield GaugeMetricFamily(
            f"{p}_processing_time_watermark_lag_seconds",
            "Wall clock minus the entry time of the oldest input not yet fully processed (0 when caught up).",
            value=pt_lag_ms / 1000,
        )
        ingest = GaugeMetricFamily(
            f"{p}_ingestion_clock_seconds",
            "Latest arrival (ingestion) time the job has read (epoch seconds).",
        )
        if state.ingestion_clock_ms != NO_WATERMARK:
            ingest.add_metric([], state.ingestion_clock_ms / 1000)
        yield ingest
        last = GaugeMetricFamily(
            f"{p}_last_batch_timestamp_seconds", "Wall-clock time the last micro-batch completed."
        )
        if state.last_batch_s is not None:
            last.add_metric([], state.last_batch_s)
        yield last
        yield GaugeMetricFamily(
            f"{p}_open_windows", "Windows open after the last batch.", value=state.open_windows
        )
        yield GaugeMetricFamily(
            f"{p}_config_version",
            "Version of the watermark configuration in force.",
            value=state.config_version,
        )
        info = GaugeMetricFamily(f"{p}_config_info", "The strategy in force (value 1).", labels=["strategy"])
        if state.strategy:
            info.add_metric([state.strategy], 1)
        yield info
        slo = GaugeMetricFamily(f"{p}_late_slo_ratio", "Late-rate SLO of the configuration in force (0..1).")
        if state.late_slo_pct is not None:
            slo.add_metric([], state.late_slo_pct / 100)
        yield slo
        idle = GaugeMetricFamily(
            f"{p}_partition_idle_timeout_seconds",
            "Ingestion time without arrivals after which a partition stops holding the watermark back "
            "(+Inf: never, so a silent partition stalls the watermark).",
        )
        if state.idle_timeout_s is not None:
            idle.add_metric([], state.idle_timeout_s)
        yield idle
        yield from self._partitions(state, partitions, now_s)

    def _partitions(
        self, state: _State, partitions: dict[str, PartitionState], now_s: float
    ) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        p = PREFIX
        labels = ["partition"]
        wm = GaugeMetricFamily(
            f"{p}_partition_event_time_watermark_seconds",
            "Event-time watermark of one source partition.",
            labels=labels,
        )
        lag = GaugeMetricFamily(
            f"{p}_partition_event_time_watermark_lag_seconds",
            "Clock minus one partition's event-time watermark (clock as for the global lag).",
            labels=["partition", "clock"],
        )
        holds = GaugeMetricFamily(
            f"{p}_partition_holds_back",
            "1 for the partition whose watermark is the global one.",
            labels=labels,
        )
        active = GaugeMetricFamily(
            f"{p}_partition_active",
            "1 if the partition takes part in the global watermark (not idle).",
            labels=labels,
        )
        delay = GaugeMetricFamily(
            f"{p}_learned_delay_seconds",
            "Delay the partition's generator has learned (or is set to).",
            labels=labels,
        )
        sens = GaugeMetricFamily(
            f"{p}_adaptive_sensitivity", "The adaptive generator's ADWIN sensitivity (delta).", labels=labels
        )
        drifts = CounterMetricFamily(
            f"{p}_adaptive_drifts", "Drifts the adaptive generator's ADWIN detected.", labels=labels
        )
        shown = _shown(partitions)
        for part in shown:
            key = [part.partition]
            holds.add_metric(key, 1 if part.holds_back else 0)
            active.add_metric(key, 1 if part.active else 0)
            if part.watermark_ms != NO_WATERMARK:
                wm.add_metric(key, part.watermark_ms / 1000)
                lag.add_metric([part.partition, "wall"], now_s - part.watermark_ms / 1000)
                if state.ingestion_clock_ms != NO_WATERMARK:
                    lag.add_metric(
                        [part.partition, "ingestion"], (state.ingestion_clock_ms - part.watermark_ms) / 1000
                    )
            if part.learned_delay_ms is not None:
                delay.add_metric(key, part.learned_delay_ms / 1000)
            if part.sensitivity is not None:
                sens.add_metric(key, part.sensitivity)
            if part.drifts is not None:
                drifts.add_metric(key, part.drifts)
        yield from (wm, lag, holds, active, delay, sens, drifts)
        yield GaugeMetricFamily(
            f"{p}_partitions", "Source partitions the job has seen.", value=len(partitions)
        )
        watermarks = [
            x.watermark_ms for x in partitions.values() if x.active and x.watermark_ms != NO_WATERMARK
        ]
        spread = GaugeMetricFamily(
            f"{p}_watermark_holdback_seconds",
            "Highest active partition watermark minus the global watermark: how far the slowest partition "
            "holds the global watermark back.",
        )
        if watermarks and state.watermark_ms != NO_WATERMARK:
            spread.add_metric([], max(0.0, (max(watermarks) - state.watermark_ms) / 1000))
        yield spread
