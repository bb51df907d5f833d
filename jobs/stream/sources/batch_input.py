"""A micro-batch's input: the files (or Kafka partitions) it read, then its records numbered and validated.

What a batch read is its source's (:meth:`jobs.stream.sources.kinds.SourceKind.reading`): landing files
are the ones the file source logged for the batch, in landing order, less those that cannot be read
(quarantined as files, :func:`screen_files`); Kafka's are its ``TOPIC/PARTITION`` names, the rate source's
one name. The records are read from exactly those files
(:class:`jobs.stream.sources.readers.ListedFiles`), numbered, validated
(:mod:`jobs.stream.sources.validate`) and, with ``--dedup-horizon-ms``, their repeated ids marked
(:mod:`jobs.stream.checkpoint.dedup`).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from jobs.stream.checkpoint.dedup import SeenIds, mark_duplicates
from jobs.stream.sources.long_lines import LongLineScreen
from jobs.stream.sources.readers import ListedFiles, modified_ms, number_records, screen_files
from jobs.stream.sources.source_log import landing_order
from jobs.stream.sources.source_options import SourceOptions
from jobs.stream.sources.validate import validate


class BatchInput:
    """The input of each micro-batch of one run."""

    def __init__(self, spark: Any, options: SourceOptions) -> None:
        self.spark, self.options = spark, options
        self._reader = options.source.reading()
        #: What a record must meet (the fields, the bounds of its times and sizes).
        self.rules = options.record_rules
        # Landing files: read exactly the files the source listed; set aside those that cannot be read.
        self._listed = ListedFiles(spark, options) if options.source.landing_files else None
        self._plans: dict[Any, list[list[Any]]] = {}  # validate()'s expressions, built once per run
        # Lines too long to read whole (record_too_long): landing files' copies without them.
        self.screen = (
            LongLineScreen(options.checkpoint, options.format, self.rules.max_record_bytes)
            if self._listed is not None
            else None
        )
        horizon = options.dedup_horizon_ms
        #: The event ids of the horizon (``--dedup-horizon-ms``), or None: ids are not deduplicated.
        self.seen = SeenIds(options.checkpoint, horizon) if horizon is not None else None

    def files(self, batch: Any, batch_id: int) -> tuple[Any, list[str] | None, pa.Table]:
        """The batch (without the timer's row), its files, and the files set aside (quarantined as files).

        The files are None when the source log does not name them (another source layout):
        :meth:`listed_by_spark` asks Spark.
        """
        return self._reader.batch_files(batch, batch_id, self.options)

    def listed_by_spark(self, batch: Any) -> tuple[list[str] | None, pa.Table]:
        """The batch's files as Spark's micro-batch names them (one more action), and those set aside."""
        uris = [r[0] for r in batch.select("file").distinct().collect()]
        root = self.options.input if self.options.source.landing_files else None
        return screen_files(landing_order((uri, modified_ms(uri)) for uri in uris), root)

    def records(self, batch: Any, files: list[str], batch_id: int, ingest_ms: int) -> Any:
        """The batch's records, numbered and validated (``reason`` null for a valid one)."""
        opts = self.options
        marker = None
        if self._listed is not None:
            copies = self.screen.screen(files, batch_id) if self.screen is not None else {}
            batch = self._listed.frame(batch, files, copies)
            marker = self.screen.marker if self.screen is not None and self.screen.on else None
        records = number_records(batch, files)
        rules = self.rules
        rows = validate(
            records,
            rules.fields,
            ingest_ms=ingest_ms,
            future_bound_ms=rules.future_bound_ms,
            max_field_bytes=rules.max_field_bytes,
            max_event_ahead_ms=rules.max_event_ahead_ms,
            max_arrival_ahead_ms=rules.max_arrival_ahead_ms,
            malformed=opts.source.malformed_reason,
            reread_corrupt=opts.source.reread_corrupt,
            plans=self._plans,
            too_long_marker=marker,
        )
        if self.seen is not None:  # repeated event ids: duplicate_event_id
            rows = mark_duplicates(self.spark, rows, self.seen, batch_id)
        return rows

    def close(self) -> None:
        """Remove the screened copies of the run's last batch."""
        if self.screen is not None:
            self.screen.clear()
