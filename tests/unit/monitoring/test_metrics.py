"""The job's Prometheus metrics, a fresh registry per test (over a real run of the job:
tests/integration/spark/test_metrics.py)."""

import socket
import urllib.request

import pytest
from prometheus_client import CollectorRegistry

from jobs.stream.cli import main
from monitoring.metrics import MAX_PARTITION_SERIES, BatchObservation, JobMetrics, PartitionState
from monitoring.push import outcome_registry
from monitoring.server import MetricsPortBusy, serve


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def fresh(now: float = 1_000.0) -> tuple[CollectorRegistry, JobMetrics, Clock]:
    clock = Clock(now)
    registry = CollectorRegistry()
    return registry, JobMetrics(registry, clock=clock), clock


def test_processing_time_lag_grows_while_a_batch_runs_and_since_the_last_batch_until_a_trigger_idles():
    registry, metrics, clock = fresh(1_000.0)
    lag = "awm_processing_time_watermark_lag_seconds"
    assert registry.get_sample_value(lag) == 0.0
    metrics.batch_started(3, oldest_input_ms=995_000)
    assert registry.get_sample_value(lag) == 5.0
    clock.now = 1_060.0  # stuck for a minute
    assert registry.get_sample_value(lag) == 65.0
    metrics.batch_done(BatchObservation(batch_id=3))
    assert registry.get_sample_value(lag) == 0.0
    clock.now = 1_100.0  # no batch since: a stuck trigger must not look caught up
    assert registry.get_sample_value(lag) == 40.0
    metrics.query_idle()  # the trigger ran and found no input
    clock.now = 1_101.0
    assert registry.get_sample_value(lag) == 1.0


def test_event_time_lag_against_the_ingestion_clock_stays_put_on_idle_input_while_wall_lag_grows():
    registry, metrics, clock = fresh(2_000.0)
    metrics.batch_done(
        BatchObservation(batch_id=0, on_time=5, watermark_ms=1_000_000, ingestion_clock_ms=1_004_000)
    )
    name = "awm_event_time_watermark_lag_seconds"
    assert registry.get_sample_value(name, {"clock": "ingestion"}) == 4.0
    assert registry.get_sample_value(name, {"clock": "wall"}) == 1_000.0
    clock.now = 2_600.0
    assert registry.get_sample_value(name, {"clock": "ingestion"}) == 4.0
    assert registry.get_sample_value(name, {"clock": "wall"}) == 1_600.0


def test_no_watermark_yet_exports_no_watermark_series():
    registry, metrics, _ = fresh()
    metrics.batch_done(BatchObservation(batch_id=0, on_time=3))
    assert registry.get_sample_value("awm_event_time_watermark_seconds") is None
    assert registry.get_sample_value("awm_event_time_watermark_lag_seconds", {"clock": "wall"}) is None
    assert registry.get_sample_value("awm_events_total", {"outcome": "on_time"}) == 3.0


def test_outcome_counters_and_window_histograms_add_up_over_batches():
    registry, metrics, _ = fresh()
    metrics.batch_done(
        BatchObservation(
            batch_id=0, on_time=7, straggler=1, late=2, quarantined=1, emit_latency_ms=[500, 2_000]
        )
    )
    metrics.batch_done(
        BatchObservation(batch_id=1, on_time=3, late=1, trigger_delay_ms=[100], flushed_windows=4)
    )
    got = {
        o: registry.get_sample_value("awm_events_total", {"outcome": o})
        for o in ("on_time", "straggler", "late", "quarantined")
    }
    assert got == {"on_time": 10.0, "straggler": 1.0, "late": 3.0, "quarantined": 1.0}
    assert registry.get_sample_value("awm_window_emit_latency_seconds_sum") == 2.5
    assert registry.get_sample_value("awm_window_emit_latency_seconds_bucket", {"le": "1.0"}) == 1.0
    assert registry.get_sample_value("awm_window_trigger_delay_seconds_count") == 1.0
    assert registry.get_sample_value("awm_windows_emitted_total", {"trigger": "flush"}) == 4.0
    assert registry.get_sample_value("awm_batches_total") == 2.0


def test_partition_series_show_who_holds_the_watermark_back_and_stay_bounded():
    registry, metrics, _ = fresh()
    parts = [
        PartitionState(f"p{i:04d}", 2_000_000 + i, holds_back=False) for i in range(MAX_PARTITION_SERIES + 50)
    ]
    parts.append(
        PartitionState(
            "zz-slow", 1_000_000, learned_delay_ms=1_500, sensitivity=0.25, drifts=3, holds_back=True
        )
    )
    metrics.batch_done(BatchObservation(batch_id=0, watermark_ms=1_000_000, partitions=parts))
    assert registry.get_sample_value("awm_partition_holds_back", {"partition": "zz-slow"}) == 1.0
    assert registry.get_sample_value("awm_learned_delay_seconds", {"partition": "zz-slow"}) == 1.5
    assert registry.get_sample_value("awm_adaptive_drifts_total", {"partition": "zz-slow"}) == 3.0
    shown = [s for m in registry.collect() if m.name == "awm_partition_holds_back" for s in m.samples]
    assert len(shown) == MAX_PARTITION_SERIES
    assert registry.get_sample_value("awm_partitions") == MAX_PARTITION_SERIES + 51
    # The fastest active partition is 1,000 s (plus 149 ms) ahead of the global watermark.
    assert registry.get_sample_value("awm_watermark_holdback_seconds") == pytest.approx(1_000.149)


def test_beyond_the_cap_the_series_show_the_active_partitions_furthest_behind():
    registry, metrics, _ = fresh()
    parts = [PartitionState(f"k{i:04d}", 2_000_000 - i, holds_back=i == 149) for i in range(150)]
    parts.append(PartitionState("gone", 1_000, active=False))
    metrics.batch_done(BatchObservation(batch_id=0, watermark_ms=2_000_000 - 149, partitions=parts))
    shown = {s.labels["partition"] for m in registry.collect() if m.name == "awm_partition_holds_back"
             for s in m.samples}  # fmt: skip
    assert shown == {f"k{i:04d}" for i in range(50, 150)}  # the 100 lowest watermarks; not the idle one


def test_the_server_serves_the_registry_on_localhost_and_a_busy_port_is_a_clear_error():
    registry, metrics, _ = fresh()
    metrics.batch_done(BatchObservation(batch_id=0, late=2))
    server = serve(registry, 0)
    try:
        assert server.host == "127.0.0.1"
        body = urllib.request.urlopen(server.url, timeout=5).read().decode()
        assert 'awm_events_total{outcome="late"} 2.0' in body
        with pytest.raises(MetricsPortBusy, match="in use"):
            serve(CollectorRegistry(), server.port)
    finally:
        server.stop()


def test_the_job_refuses_a_busy_metrics_port_before_starting_spark(tmp_path, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        (tmp_path / "in").mkdir()
        args = ["--input", str(tmp_path / "in"), "--output", str(tmp_path / "out")]
        code = main([*args, "--checkpoint", str(tmp_path / "ck"), "--metrics-port", str(port)])
    assert code == 2
    assert f"metrics port 127.0.0.1:{port} is in use" in capsys.readouterr().err


def test_batch_task_outcomes_keep_the_last_success_after_a_failure():
    ok = outcome_registry("tuning", ok=True, values={"published": 1, "config_version": 4}, now_s=10.0)
    failed = outcome_registry("tuning", ok=False, now_s=20.0)
    assert ok.get_sample_value("awm_tuning_last_success_timestamp_seconds") == 10.0
    assert failed.get_sample_value("awm_tuning_last_success_timestamp_seconds") is None  # pushadd keeps it
    assert failed.get_sample_value("awm_tuning_last_failure_timestamp_seconds") == 20.0
    assert failed.get_sample_value("awm_tuning_last_run_ok") == 0.0
    with pytest.raises(ValueError, match="unknown task"):
        outcome_registry("compaction", ok=True)


def test_spark_s_idle_event_of_the_followed_query_tells_the_metrics_the_job_is_caught_up():
    from types import SimpleNamespace

    from monitoring.listener import MetricsListener

    registry, metrics, clock = fresh(1_000.0)
    metrics.batch_done(BatchObservation(batch_id=0))
    clock.now = 1_030.0
    listener = MetricsListener(metrics)
    listener.follow("q-1")
    listener.onQueryIdle(SimpleNamespace(id="another-query"))  # not ours: nothing changes
    assert registry.get_sample_value("awm_processing_time_watermark_lag_seconds") == 30.0
    listener.onQueryIdle(SimpleNamespace(id="q-1"))
    clock.now = 1_032.0
    assert registry.get_sample_value("awm_processing_time_watermark_lag_seconds") == 2.0


def test_the_partition_idle_timeout_in_force_is_a_gauge_and_never_idle_is_infinite():
    registry, metrics, _ = fresh()
    name = "awm_partition_idle_timeout_seconds"
    assert registry.get_sample_value(name) is None  # not known before the configuration is
    metrics.config_applied(1, "periodic", 1.0, 60_000)
    assert registry.get_sample_value(name) == 60.0
    metrics.batch_done(BatchObservation(batch_id=0, idle_timeout_ms=None))
    assert registry.get_sample_value(name) == float("inf")


class JavaValue:
    """What py4j hands the listener for a JVM object: methods returning further objects or values."""

    def __init__(self, **methods) -> None:
        for name, value in methods.items():
            setattr(self, name, lambda value=value: value)


def java_id(query_id: str) -> JavaValue:
    return JavaValue(toString=query_id)


def test_the_listener_spark_calls_reads_only_the_followed_querys_duration_idleness_and_failure():
    from monitoring.listener import MetricsListener, _LeanJavaListener

    registry, metrics, clock = fresh(1_000.0)
    listener = MetricsListener(metrics)
    listener.follow("q-1")
    java = _LeanJavaListener(listener)
    count = "awm_batch_duration_seconds_count"
    java.onQueryStarted(JavaValue())
    java.onQueryProgress(JavaValue(progress=JavaValue(id=java_id("q-1"), batchDuration=2_500)))
    java.onQueryProgress(JavaValue(progress=JavaValue(id=java_id("another"), batchDuration=9_000)))
    assert registry.get_sample_value(count) == 1.0
    assert registry.get_sample_value("awm_batch_duration_seconds_sum") == 2.5
    metrics.batch_done(BatchObservation(batch_id=0))
    clock.now = 1_030.0
    java.onQueryIdle(JavaValue(id=java_id("another")))
    assert registry.get_sample_value("awm_processing_time_watermark_lag_seconds") == 30.0
    java.onQueryIdle(JavaValue(id=java_id("q-1")))
    clock.now = 1_031.0
    assert registry.get_sample_value("awm_processing_time_watermark_lag_seconds") == 1.0
    failures = "awm_query_terminated_with_error_total"
    no_error = JavaValue(isDefined=False)
    java.onQueryTerminated(JavaValue(id=java_id("q-1"), exception=no_error))
    error = JavaValue(isDefined=True, get="java.lang.RuntimeException: boom")
    java.onQueryTerminated(JavaValue(id=java_id("another"), exception=error))
    assert registry.get_sample_value(failures) == 0.0
    java.onQueryTerminated(JavaValue(id=java_id("q-1"), exception=error))
    assert registry.get_sample_value(failures) == 1.0
