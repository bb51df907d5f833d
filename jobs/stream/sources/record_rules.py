"""What a record must meet to be counted: the part of the job's options that validating records needs."""

from __future__ import annotations

from dataclasses import dataclass

from jobs.stream.options import Fields, JobOptions


@dataclass(frozen=True)
class RecordRules:
    """A record's fields' names and the bounds of its times and sizes.

    What reading and validating a batch's records needs of :class:`~jobs.stream.options.JobOptions`
    (:mod:`jobs.stream.sources.batch_input`, :mod:`jobs.stream.sources.arrow_reader`).
    """

    fields: Fields
    future_bound_ms: int
    max_field_bytes: int
    max_event_ahead_ms: int
    max_record_bytes: int

    @classmethod
    def of(cls, options: JobOptions) -> RecordRules:
        """The rules of a run's options."""
        return cls(
            options.fields,
            options.future_bound_ms,
            options.max_field_bytes,
            options.max_event_ahead_ms,
            options.max_record_bytes,
        )
