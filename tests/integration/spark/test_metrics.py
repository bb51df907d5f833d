"""The job's Prometheus metrics over a real run, checked against the job's own tables (the metrics alone:
tests/unit/monitoring/test_metrics.py)."""

import os
import time

import pytest
from prometheus_client import CollectorRegistry

from jobs.common.tables import DeltaTables
from jobs.stream.run import run_job
from monitoring.metrics import JobMetrics
from tests.integration.spark.test_stream import config, iot_records
from tests.landing import folder_job, good, write_lines
from tools.feed.landing import feed
from watermark.timeutil import NO_WATERMARK


def test_a_job_run_counts_every_row_once_as_its_tables_do(spark, tmp_path):
    inp = tmp_path / "in"
    feed(iot_records(1_500), inp, rows_per_file=500)
    bad = inp / "zz-bad.json"
    write_lines(bad, [good(1, 5, 6), "{not json", good(2, -5, 6)])
    later = max(p.stat().st_mtime for p in inp.iterdir()) + 60
    os.utime(bad, (later, later))  # files are read oldest first: this one last
    registry = CollectorRegistry()
    metrics = JobMetrics(registry)
    opts = folder_job(tmp_path, config("periodic", {"delay_ms": 2_000}), max_files_per_trigger=1)
    started_s = time.time()
    reports = run_job(spark, opts, metrics)
    assert reports[-1].watermark_ms > 0
    sink = DeltaTables(opts.output, "r")

    def value(name, **labels):
        return registry.get_sample_value(name, labels) or 0.0

    outcomes = {
        o: value("awm_events_total", outcome=o) for o in ("on_time", "straggler", "late", "quarantined")
    }
    assert sum(outcomes.values()) == 1_503
    assert outcomes["late"] == sink.read("late_events").num_rows
    assert outcomes["quarantined"] == sink.read("quarantine").num_rows == 2
    assert outcomes["straggler"] == sum(r["stragglers"] for r in sink.read("watermark_log").to_pylist())
    aggregates = sink.read("aggregates")
    assert value("awm_windows_emitted_total", trigger="watermark") == aggregates.num_rows
    assert value("awm_window_emit_latency_seconds_count") == aggregates.num_rows
    assert value("awm_batches_total") == len(reports) == 4
    assert value("awm_event_time_watermark_seconds") * 1000 == reports[-1].watermark_ms
    assert value("awm_config_version") == 1 and value("awm_config_info", strategy="periodic") == 1
    log = sink.read("watermark_log").to_pylist()
    last = [r for r in log if r["batch_id"] == reports[-1].batch_id]
    for row in last:
        exported = registry.get_sample_value(
            "awm_partition_event_time_watermark_seconds", {"partition": row["partition"]}
        )
        if row["partition_watermark_ms"] == NO_WATERMARK:  # a partition with no watermark yet has no series
            assert exported is None
        else:
            assert exported * 1000 == pytest.approx(row["partition_watermark_ms"])
        assert value("awm_partition_holds_back", partition=row["partition"]) == float(row["holds_back"])
    # Caught up at the last batch: the lag counts from then, within the run (the metrics' clock is the wall's)
    assert 0.0 <= value("awm_processing_time_watermark_lag_seconds") <= time.time() - started_s
    # Spark's listener events arrive asynchronously: once its listener bus is empty, every batch's progress
    # has reached the metrics (however long the machine took to deliver them).
    spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty(600_000)
    assert value("awm_batch_duration_seconds_count") == 4
    assert value("awm_input_rows_total") == 1_503
