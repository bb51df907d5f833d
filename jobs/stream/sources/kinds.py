"""What the rest of the job needs to know of each source (``--format``), declared in one place.

A source is one :class:`SourceKind` in :data:`SOURCES`: the flags it takes and requires, whether it reads
the landing files of ``--input``, what a record's key means (a file and a line, or a Kafka partition and an
offset), the partition mode it defaults to, whether a Spark partition of its batches is one watermark
partition (so the stage can run in the executors), whether a wall-clock timer may drive it, and whether it
ever runs out of input. The modules outside ``jobs/stream/sources/`` ask the kind, never the format's
name. How a source's stream is opened and what a batch read is its reader module's (a
:class:`SourceReader`: :mod:`.landing`, :mod:`.kafka_topic`, :mod:`.rate_source`). A new source is its
reader module and its kind registered here (docs/architecture.md, "Adding a source").

This module imports nothing of the job's (but, for its types, the source's options), so the options and
the command line can use it.

Examples
--------
>>> from jobs.stream.sources.kinds import source_kind
>>> source_kind("kafka").offset_keys, source_kind("csv").landing_files
(True, True)
>>> source_kind("avro")
Traceback (most recent call last):
...
ValueError: --format must be one of json, csv, parquet, rate, kafka, got 'avro'

"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast

if TYPE_CHECKING:
    from jobs.stream.sources.source_options import SourceOptions


class SourceReader(Protocol):
    """How a source is read: the module a :class:`SourceKind` names (:attr:`SourceKind.reader`).

    Either function takes the source's part of the run's options
    (:class:`~jobs.stream.sources.source_options.SourceOptions`).
    """

    def open_stream(self, spark: Any, options: SourceOptions) -> Any:
        """The source as a stream of records: ``file`` plus every input field and the corrupt record."""

    def batch_files(
        self, batch: Any, batch_id: int, options: SourceOptions
    ) -> tuple[Any, list[str] | None, Any]:
        """A micro-batch's records, the names of what it read, and the files set aside.

        The records are the batch less rows that are not records (a timer's); the names are None when the
        source's log does not name them (ask Spark); the files set aside are a table of those that cannot
        be read, quarantined as files.
        """


@dataclass(frozen=True)
class SourceKind:
    """One source of records, as the job's options, stage and tables see it."""

    name: str
    #: The module that reads it (a :class:`SourceReader`), imported when the job first reads.
    reader: str = "jobs.stream.sources.landing"
    #: It reads the landing files the file source lists under ``--input`` (else it takes no ``--input``).
    landing_files: bool = True
    #: A record's key is its Kafka partition and offset (else its file and line).
    offset_keys: bool = False
    #: The partition mode when ``--partition-mode`` is not given.
    default_partition_mode: str = "min"
    #: A Spark partition of a batch holds one watermark partition: the stage may run in the executors.
    partition_per_task: bool = False
    #: A wall-clock timer source may make every trigger a batch (``--clock wall``).
    timer: bool = False
    #: It never runs out of input: it needs ``--trigger interval=...``.
    endless: bool = False
    #: The command line's options (argparse names) only this source takes ...
    own_flags: tuple[str, ...] = ()
    #: ... which of them it requires, and the message when one is missing.
    required_flags: tuple[str, ...] = ()
    required_message: str = ""
    #: The message when one of :attr:`own_flags` is given with another source.
    foreign_message: str = ""
    #: The quarantine reason of a record its reader cannot parse.
    malformed_reason: str = ""
    #: Whether a record that does not fit the typed schema is read again as text (JSON text).
    reread_corrupt: bool = False
    #: It logs in to a service (Kafka's SASL): a refused login is told in one line, without a secret.
    authenticates: bool = False

    def reading(self) -> SourceReader:
        """The source's reader module (:attr:`reader`)."""
        return cast(SourceReader, importlib.import_module(self.reader))

    @property
    def endless_refusal(self) -> str:
        """Why an endless source (:attr:`endless`) refuses to start without an interval trigger."""
        return (
            f"--format {self.name} never runs out of input: use --trigger interval=<duration> "
            "(and --max-batches N)"
        )

    def check_flags(self, args: Any) -> None:
        """Refuse the flags that do not fit this source (``args``: the parsed command line)."""
        if self.landing_files and not args.input:
            msg = f"--input is required with --format {self.name}"
            raise ValueError(msg)
        if not self.landing_files and args.input:
            msg = f"--format {self.name} reads no --input"
            raise ValueError(msg)
        if any(not getattr(args, flag) for flag in self.required_flags):
            raise ValueError(self.required_message)
        for other in SOURCES.values():
            if other is not self and any(getattr(args, flag, None) for flag in other.own_flags):
                raise ValueError(other.foreign_message)


def _files(name: str, reread_corrupt: bool = False) -> SourceKind:
    return SourceKind(name, malformed_reason=f"malformed_{name}", reread_corrupt=reread_corrupt)


#: Every source by its ``--format`` name, in the order the command line lists them.
SOURCES: dict[str, SourceKind] = {
    kind.name: kind
    for kind in (
        _files("json", reread_corrupt=True),
        _files("csv"),
        _files("parquet"),
        SourceKind(
            "rate",
            reader="jobs.stream.sources.rate_source",
            landing_files=False,
            endless=True,
            malformed_reason="malformed_rate",
        ),
        SourceKind(
            "kafka",
            reader="jobs.stream.sources.kafka_topic",
            landing_files=False,
            offset_keys=True,
            default_partition_mode="scoped",
            partition_per_task=True,
            timer=True,
            own_flags=("kafka_bootstrap_servers", "topic", "kafka_option"),
            required_flags=("kafka_bootstrap_servers", "topic"),
            required_message="--format kafka needs --kafka-bootstrap-servers HOST:PORT and --topic NAME",
            foreign_message="--kafka-bootstrap-servers, --topic and --kafka-option are for --format kafka",
            malformed_reason="malformed_json",
            reread_corrupt=True,
            authenticates=True,
        ),
    )
}


def source_kind(name: str) -> SourceKind:
    """The source ``--format name`` reads, or a ``ValueError`` naming the choices."""
    try:
        return SOURCES[name]
    except KeyError:
        msg = f"--format must be one of {', '.join(SOURCES)}, got {name!r}"
        raise ValueError(msg) from None
