r"""Feed a recorded stream into landing files or a Kafka topic, in arrival order, for a live run of the job.

``python -m tools.feed`` reads a recorded stream (a CSV or Parquet file, through
:func:`watermark.streams.recorded.read_stream`) or generates a synthetic one
(:func:`watermark.streams.synthetic.generate`), sorts it by arrival time and writes it as numbered landing
files (``--out DIR``) or produces it into a Kafka topic (``--kafka-bootstrap-servers HOST:PORT --topic NAME
[--partitions N]``), either as fast as possible or paced in (scaled) real time, so that the job's source picks
the records up as they would have arrived. The records' fields are those of :mod:`tools.feed.records`, the
landing files those of :mod:`tools.feed.landing`, the Kafka records and topic those of
:mod:`tools.feed.kafka`.

Progress (every file, every 10,000 records) is a bar on a terminal, else a plain line on standard error each
10 % of the work (:mod:`watermark.progress`).

Bad input prints one line ``error: ...`` on standard error and exits with status 2, as ``python -m
watermark`` does; a Kafka failure (broker unreachable, delivery failed) exits with status 1.

Examples
--------
Feed 2,500 synthetic events as JSON Lines, 1,000 records a file::

    python -m tools.feed --synthetic 2500 --out /tmp/landing --rows-per-file 1000

Produce 10,000 synthetic events from 4 source partitions into a 4-partition topic of a local broker
(``bin/kafka-local start``)::

    python -m tools.feed --synthetic 10000 --partitions 4 --kafka-bootstrap-servers 127.0.0.1:9092 \
        --topic events

Replay a recorded IoT stream at ten times its real speed::

    python -m tools.feed samples/ooo-iot-d1.csv --delimiter ';' --event-time S.Client.Detection.Time \
        --arrival-time S.Message.received.time.ms --partition S.Device.ID \
        --out /tmp/landing --pace realtime --speed 10

"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from tools.feed.kafka import KafkaFeedError, check_bootstrap_servers, feed_kafka
from tools.feed.landing import FORMATS, PACES, check_options, feed
from tools.feed.records import records_from_file, records_from_synthetic
from watermark.cli.log import CliError, entry_prog, plain_text, run_main
from watermark.cli.main import EXIT_BAD_INPUT, OneLineParser, delimiter_arg
from watermark.progress import ProgressReporter

__all__ = ["build_parser", "main"]

EXIT_INTERRUPTED = 130
EXIT_KAFKA_FAILED = 1

_FILE_FLAGS = {
    "event_time": "--event-time",
    "arrival_time": "--arrival-time",
    "delimiter": "--delimiter",
    "no_header": "--no-header",
    "time_format": "--time-format",
    "partition": "--partition",
    "key": "--key",
    "value": "--value",
}
_SYNTHETIC_FLAGS = {"seed": "--seed", "partitions": "--partitions", "keys": "--keys"}


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m tools.feed`` argument parser.

    Returns
    -------
    argparse.ArgumentParser
        The parser; its errors print one line and exit with status 2.

    """
    parser = OneLineParser(
        prog=entry_prog("python -m tools.feed"), description=plain_text(__doc__.splitlines()[0])
    )
    source = parser.add_argument_group("recorded source (INPUT)")
    source.add_argument(
        "input", nargs="?", metavar="INPUT", help="CSV or Parquet file of the recorded stream"
    )
    source.add_argument("--event-time", metavar="COL", help="event-time column (name, or index)")
    source.add_argument("--arrival-time", metavar="COL", help="arrival-time column")
    source.add_argument("--delimiter", type=delimiter_arg, help="CSV field separator (default ,)")
    source.add_argument("--no-header", action="store_true", help="the CSV has no header: COL is an index")
    source.add_argument(
        "--time-format",
        choices=("epoch_ms", "epoch_s", "iso"),
        help="how times are written (default epoch_ms)",
    )
    source.add_argument("--partition", metavar="COL", help="source-partition column")
    source.add_argument("--key", metavar="COL", help="key column (default: the partition, else 'all')")
    source.add_argument("--value", metavar="COL", help="numeric value column (default: 1.0)")

    synthetic = parser.add_argument_group("synthetic source")
    synthetic.add_argument("--synthetic", type=int, metavar="N", help="generate N out-of-order events")
    synthetic.add_argument("--seed", type=int, help="generator seed (default 0)")
    synthetic.add_argument(
        "--partitions",
        type=int,
        metavar="N",
        help="source partitions (default 8); with Kafka, the topic's partitions (and a synthetic source's)",
    )
    synthetic.add_argument("--keys", type=int, help="aggregation keys (default 1000)")

    output = parser.add_argument_group("output: landing files (--out) or a Kafka topic (--topic)")
    output.add_argument("--out", metavar="DIR", help="landing directory (created if missing)")
    output.add_argument("--format", choices=FORMATS, help="file format (default json)")
    output.add_argument(
        "--rows-per-file", type=int, metavar="N", help="records a landing file (default 1000)"
    )
    output.add_argument("--max-files", type=int, metavar="N", help="stop after N files")
    output.add_argument(
        "--kafka-bootstrap-servers",
        metavar="HOST:PORT",
        help="produce to Kafka (with --topic) instead of files",
    )
    output.add_argument("--topic", metavar="NAME", help="Kafka topic (created if missing, see --partitions)")
    output.add_argument(
        "--producer-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a confluent-kafka (librdkafka) setting of the producer and of the admin client that creates "
        "the topic (repeatable): security.protocol, sasl.mechanism, sasl.username, sasl.password, ssl.*, "
        "...; the job's Java spelling is taken too (a kafka. prefix; a SCRAM or PLAIN sasl.jaas.config); "
        "secret values are never printed",
    )
    output.add_argument(
        "--pace",
        choices=PACES,
        default="fast",
        help="fast, or realtime: at the recorded arrival times (default fast)",
    )
    output.add_argument(
        "--speed", type=float, default=1.0, metavar="X", help="realtime multiplier (default 1)"
    )
    output.add_argument("--no-arrival-time", action="store_true", help="leave arrival_time_ms out")
    output.add_argument("--quiet", action="store_true", help="no progress bar or lines on stderr")
    return parser


def _load(parser: argparse.ArgumentParser, args: argparse.Namespace) -> pa.Table:
    """The records of the source the arguments name (parser errors for inconsistent flags)."""

    def given(flags: dict[str, str]) -> list[str]:
        return [flag for attr, flag in flags.items() if getattr(args, attr) not in (None, False)]

    if args.synthetic is not None:
        if args.input is not None:
            parser.error("give either INPUT or --synthetic, not both")
        if stray := given(_FILE_FLAGS):
            parser.error(f"{stray[0]} applies only to an INPUT file, not to --synthetic")
        if args.synthetic < 1:
            parser.error(f"--synthetic must be >= 1, got {args.synthetic}")
        settings = {name: getattr(args, name) for name in _SYNTHETIC_FLAGS if getattr(args, name) is not None}
        return records_from_synthetic(args.synthetic, **settings)
    if args.input is None:
        parser.error("give an INPUT file or --synthetic N")
    kafka = args.topic is not None
    if stray := [flag for flag in given(_SYNTHETIC_FLAGS) if not (kafka and flag == "--partitions")]:
        parser.error(f"{stray[0]} applies only to --synthetic")
    if args.event_time is None or args.arrival_time is None:
        parser.error("INPUT needs --event-time COL and --arrival-time COL")
    return records_from_file(
        args.input,
        event_time=args.event_time,
        arrival_time=args.arrival_time,
        partition=args.partition,
        key=args.key,
        value=args.value,
        delimiter=args.delimiter or ",",
        header=not args.no_header,
        time_format=args.time_format or "epoch_ms",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m tools.feed``.

    Parameters
    ----------
    argv : sequence of str, optional
        The arguments (default: ``sys.argv[1:]``).

    Returns
    -------
    int
        The exit status: 0, 1 when Kafka fails (unreachable, a record not delivered), 2 for bad input,
        130 when interrupted.

    """
    from watermark.streams.input_error import InputError

    parser = build_parser()
    return run_main(
        parser,
        lambda args: _run(parser, args),
        argv,
        errors={
            (InputError, ValueError): EXIT_BAD_INPUT,
            KafkaFeedError: EXIT_KAFKA_FAILED,
            KeyboardInterrupt: EXIT_INTERRUPTED,
        },
    )


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """The feed the parsed arguments ask for; prints its summary (JSON) on standard output."""
    try:
        summary = _feed(parser, args)
    except OSError as exc:
        msg = f"{exc.filename or args.out}: {exc.strerror or exc}"
        raise CliError(msg, EXIT_BAD_INPUT) from None
    print(json.dumps(summary), flush=True)
    return 0


def _feed(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, Any]:
    from jobs.stream.options import librdkafka_config, parse_key_values

    kafka = _check_output(parser, args)
    options = {
        "fmt": args.format or "json",
        "rows_per_file": 1000 if args.rows_per_file is None else args.rows_per_file,
        "max_files": args.max_files,
        "pace": args.pace,
        "speed": args.speed,
    }
    check_options(**options)  # before loading, so a bad option fails fast
    producer_options = parse_key_values(args.producer_option, "--producer-option")
    if kafka:
        check_bootstrap_servers(args.kafka_bootstrap_servers)
        librdkafka_config(dict(producer_options))  # a JAAS line it cannot take: before loading
    if args.partitions is not None and args.partitions < 1:
        msg = f"--partitions must be >= 1, got {args.partitions}"
        raise ValueError(msg)
    records = _load(parser, args)
    with ProgressReporter("feed", unit="record" if kafka else "file", enabled=not args.quiet) as progress:
        if kafka:
            return feed_kafka(
                records,
                args.kafka_bootstrap_servers,
                args.topic,
                partitions=args.partitions,
                pace=args.pace,
                speed=args.speed,
                arrival_time=not args.no_arrival_time,
                progress=progress,
                producer_config=dict(producer_options),
            )
        return feed(records, args.out, **options, arrival_time=not args.no_arrival_time, progress=progress)


def _check_output(parser: argparse.ArgumentParser, args: argparse.Namespace) -> bool:
    """Whether the output is Kafka; parser errors for a missing, double or inconsistent output."""
    servers, topic = args.kafka_bootstrap_servers, args.topic
    if servers is None and topic is None:
        if args.out is None:
            parser.error("give --out DIR, or --kafka-bootstrap-servers HOST:PORT --topic NAME")
        if args.producer_option:
            parser.error("--producer-option applies only to Kafka output (--topic)")
        return False
    if args.out is not None:
        parser.error("give either --out or --kafka-bootstrap-servers/--topic, not both")
    if servers is None or topic is None:
        parser.error("Kafka output needs both --kafka-bootstrap-servers HOST:PORT and --topic NAME")
    for flag, value in (("--format", args.format), ("--rows-per-file", args.rows_per_file)):
        if value is not None:
            parser.error(f"{flag} applies only to --out (Kafka values are JSON, one record each)")
    if args.max_files is not None:
        parser.error("--max-files applies only to --out")
    return True
