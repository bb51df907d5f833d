"""What the job's metrics see of a finished batch (:class:`monitoring.metrics.BatchObservation`).

Every record in exactly one outcome (on time, straggler, late, quarantined), the watermark and each
partition's state (from the ``watermark_log`` rows), the fired windows' latencies, and the configuration
in force; from the driver path or from the stage in the executors.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from jobs.stream.report import BatchReport
from jobs.stream.stage.executors import ExecutorOutcome
from monitoring.metrics import BatchObservation, PartitionState
from watermark.config import PipelineConfig
from watermark.timeutil import NO_WATERMARK


def partition_states(log_rows: list[dict[str, Any]]) -> list[PartitionState]:
    """The metrics' view of the ``watermark_log`` rows."""
    return [
        PartitionState(
            partition=row["partition"],
            watermark_ms=row["partition_watermark_ms"],
            learned_delay_ms=row["learned_delay_ms"],
            sensitivity=row["sensitivity"],
            drifts=row["drifts"],
            holds_back=row["holds_back"],
            active=row["active"],
        )
        for row in log_rows
    ]


def observation(
    report: BatchReport,
    result: Any,
    narrow: pa.Table,
    fired: pa.Table,
    log_rows: list[dict[str, Any]],
    config: PipelineConfig,
) -> BatchObservation:
    """What the metrics need from a finished batch (every row in exactly one outcome)."""
    on_time = straggler = 0
    ingestion_clock = NO_WATERMARK
    if result is not None:
        straggler = result.n_stragglers
        on_time = narrow.num_rows - result.n_late - straggler
        if result.arrival_ms.size:
            ingestion_clock = int(result.arrival_ms[-1])
    by_watermark = ~np.asarray(fired.column("flushed").to_numpy(zero_copy_only=False), dtype=bool)
    partitions = partition_states(log_rows)
    return BatchObservation(
        batch_id=report.batch_id,
        on_time=on_time,
        straggler=straggler,
        late=report.late,
        quarantined=report.quarantined,
        quarantine_reasons=report.reasons,
        watermark_ms=report.watermark_ms,
        ingestion_clock_ms=ingestion_clock,
        partitions=partitions,
        emit_latency_ms=fired.column("emit_latency_ms").to_numpy(zero_copy_only=False)[by_watermark].tolist(),
        trigger_delay_ms=fired.column("trigger_delay_ms")
        .to_numpy(zero_copy_only=False)[by_watermark]
        .tolist(),
        flushed_windows=int((~by_watermark).sum()),
        open_windows=report.open_windows,
        config_version=config.version,
        strategy=config.strategy,
        late_slo_pct=config.late_slo_pct,
        idle_timeout_ms=config.idle_bound_ms,  # learned timeouts (auto): their cap
    )


def executors_observation(
    report: BatchReport, outcome: ExecutorOutcome, log_rows: list[dict[str, Any]], config: PipelineConfig
) -> BatchObservation:
    """What the metrics need from a batch whose stage ran in the executors."""
    return BatchObservation(
        batch_id=report.batch_id,
        on_time=outcome.valid - outcome.late - outcome.stragglers,
        straggler=outcome.stragglers,
        late=outcome.late,
        quarantined=outcome.invalid,
        watermark_ms=report.watermark_ms,
        ingestion_clock_ms=outcome.ingestion_clock_ms,
        partitions=partition_states(log_rows),
        emit_latency_ms=outcome.emit_latency_ms,
        trigger_delay_ms=outcome.trigger_delay_ms,
        flushed_windows=0,
        open_windows=outcome.open_windows,
        quarantine_reasons=report.reasons,
        config_version=config.version,
        strategy=config.strategy,
        late_slo_pct=config.late_slo_pct,
    )
