"""What one micro-batch did: :class:`BatchReport` (for the progress line, the tests and benchmarks)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from watermark.timeutil import NO_WATERMARK

log = logging.getLogger("jobs.stream")


@dataclass
class BatchReport:
    """What one micro-batch did (for the progress line and tests)."""

    batch_id: int
    rows: int = 0
    quarantined: int = 0
    late: int = 0
    fired: int = 0
    open_windows: int = 0
    watermark_ms: int = NO_WATERMARK
    config_version: int = 0
    seconds: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)  # seconds spent in each step
    reparsed: int = 0  # Arrow path: splits the second pass had to parse again
    path: str = ""  # "arrow" (JSON parsed by pyarrow in the executors) or "spark" (Spark's reader)
    stage_in: str = "driver"  # where the watermark stage ran: "driver" or "executors"
    driver_bytes: int = 0  # bytes of results the driver collected from the executors for the batch
    driver_cpu_s: float = 0.0  # CPU seconds of the driver's Python process for the batch
    reasons: dict[str, int] = field(default_factory=dict)  # quarantine rows by reason

    def mark(self, phase: str, since: float) -> float:
        """Add the time since ``since`` to ``phase``; returns now."""
        now = time.perf_counter()
        self.phases[phase] = self.phases.get(phase, 0.0) + now - since
        return now


def log_progress(report: BatchReport) -> None:
    """The batch's progress line (``--progress``)."""
    wm = "none" if report.watermark_ms == NO_WATERMARK else f"{report.watermark_ms}"
    log.info(  # bare: the text log format writes the line alone, like a progress line
        "batch %d: %s rows (%s reader, stage in %s), %s quarantined, %s late, %s windows fired, "
        "%s open, watermark %s, config v%d, %.2f s",
        report.batch_id,
        f"{report.rows:,}",
        report.path,
        report.stage_in,
        f"{report.quarantined:,}",
        f"{report.late:,}",
        f"{report.fired:,}",
        f"{report.open_windows:,}",
        wm,
        report.config_version,
        report.seconds,
        extra={"bare": True},
    )
