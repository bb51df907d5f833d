"""What reading the source needs of a run's options: the source, where its input is, what a record must meet.

:class:`SourceOptions` is the part of :class:`jobs.stream.options.JobOptions` that opening the source's
stream and reading a batch's input read: the source readers (:class:`jobs.stream.sources.kinds.SourceReader`:
:mod:`.landing`, :mod:`.kafka_topic`, :mod:`.rate_source`), the landing files' reader
(:class:`jobs.stream.sources.readers.ListedFiles`), a batch's input (:mod:`.batch_input`) and the Arrow
reader (:mod:`.arrow_reader`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from jobs.stream.sources.kinds import SourceKind, source_kind

if TYPE_CHECKING:
    from jobs.stream.options import Fields, KafkaOptions, RateOptions
    from jobs.stream.sources.record_rules import RecordRules


@dataclass(frozen=True)
class SourceOptions:
    """The source and its options, the input's place, the reader, and the records' rules.

    The fields mean what :class:`jobs.stream.options.JobOptions`'s of the same names do (which checks them).
    """

    format: str
    input: str  # the landing folder (sources that read landing files)
    checkpoint: str  # the file source's log, the screened copies of long lines, the ids seen
    record_rules: RecordRules
    rate: RateOptions
    kafka: KafkaOptions
    max_files_per_trigger: int | None
    timer: bool  # a timer source makes every trigger a batch (JobOptions.timer)
    reader: str  # JSON: "arrow" or "spark"
    dedup_horizon_ms: int | None  # None: event ids are not deduplicated

    @property
    def source(self) -> SourceKind:
        """The source ``format`` names (:mod:`jobs.stream.sources.kinds`)."""
        return source_kind(self.format)

    @property
    def fields(self) -> Fields:
        """The input field names (:attr:`RecordRules.fields`)."""
        return self.record_rules.fields
