"""What the watermark stage needs of a run's options: its configuration, where it runs, its clock.

:class:`StageOptions` is the part of :class:`jobs.stream.options.JobOptions` that the stage from batch to
batch (:mod:`jobs.stream.stage.states`), a batch's two ways through it (:mod:`jobs.stream.paths`) and the
handler's choice between them (:mod:`jobs.stream.handler`) read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from jobs.stream.sources.kinds import SourceKind, source_kind

if TYPE_CHECKING:
    from watermark.config import PipelineConfig


@dataclass(frozen=True)
class StageOptions:
    """The stage's configuration and state's place, the source it judges, where it runs, and its clock.

    The fields mean what :class:`jobs.stream.options.JobOptions`'s of the same names do (which checks them).
    """

    checkpoint: str  # where the stage's state is saved batch after batch
    config: PipelineConfig  # the configuration the run starts with
    config_path: str | None  # ``--config``: the file it is hot-reloaded from (None: the flags' only)
    format: str  # the source's (its kind: where the stage may run, what a record's key is)
    stage_in: str  # "executors", "driver" or "auto"
    clock: str  # "arrivals" or "wall"
    clock_margin_ms: int  # wall clock: how far behind a batch's start its boundary is
    arrival_history: bool  # the stage makes the rows of the ``arrivals`` table

    @property
    def source(self) -> SourceKind:
        """The source ``format`` names (:mod:`jobs.stream.sources.kinds`)."""
        return source_kind(self.format)

    def boundary_ms(self, ingest_ms: int) -> int | None:
        """The ingestion-clock instant of a batch's boundary (wall clock), or None (arrival clock)."""
        return ingest_ms - self.clock_margin_ms if self.clock == "wall" else None
