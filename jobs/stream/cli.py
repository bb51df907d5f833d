"""The command line: ``python -m jobs.stream`` flags, their validation, and the run's summary."""

from __future__ import annotations

import argparse
import json
import logging
from typing import Any

import numpy as np

from jobs.common.schemas import TABLES
from jobs.common.tables import DeltaTables
from jobs.stream.checkpoint.state import (
    CheckpointError,
    StageStore,
    check_not_rewound,
    checkpoint_app_id,
)
from jobs.stream.flag_checks import check_counts, check_source_flags, config_doc
from jobs.stream.options import (
    DEFAULT_METRICS_PORT,
    FORMATS,
    Fields,
    JobOptions,
    KafkaOptions,
    RateOptions,
    trigger_interval_ms,
)
from jobs.stream.run import run_job, serve_metrics
from jobs.stream.sinks.sink_options import DeferPolicy
from jobs.stream.sources.kinds import source_kind
from jobs.stream.sources.landing import check_landing_input
from jobs.stream.sources.record_rules import (
    DEFAULT_MAX_ARRIVAL_AHEAD_MS,
    DEFAULT_MAX_EVENT_AHEAD_MS,
    DEFAULT_MAX_RECORD_BYTES,
    check_max_arrival_ahead_ms,
    check_max_event_ahead_ms,
    check_max_record_bytes,
)
from jobs.stream.sources.source_log import unplanned_files
from watermark import storage
from watermark.config import (
    IDLE_TIMEOUT_WINDOWS,
    MIN_DEFAULT_IDLE_TIMEOUT_MS,
    ConfigError,
    PipelineConfig,
    default_idle_timeout_ms,
    load_config,
    write_config,
)
from watermark.storage import Location

log = logging.getLogger("jobs.stream")


def summarize(output: str) -> dict[str, Any]:
    """Figures of a finished run read back from its Delta tables."""
    tables = DeltaTables(output, "jobs.stream.summary")
    out: dict[str, Any] = {"output": Location.of(output).spark}
    agg = tables.read("aggregates")
    late = tables.read("late_events", columns=["batch_id"]).num_rows
    quarantined = tables.read("quarantine", columns=["batch_id"]).num_rows
    counted = int(np.asarray(agg.column("count").to_numpy()).sum()) if agg.num_rows else 0
    flushed = np.asarray(agg.column("flushed").to_numpy(zero_copy_only=False), dtype=bool)
    latency = np.asarray(agg.column("emit_latency_ms").to_numpy(zero_copy_only=False), dtype=float)[~flushed]
    events = counted + late
    out |= {
        "events": events,
        "late": late,
        "late_pct": round(100.0 * late / events, 4) if events else 0.0,
        "windows": agg.num_rows,
        "windows_flushed": int(flushed.sum()),
        "emit_latency_ms": {
            "p50": round(float(np.percentile(latency, 50)), 1) if latency.size else None,
            "p99": round(float(np.percentile(latency, 99)), 1) if latency.size else None,
        },
        "quarantined": quarantined,
        "tables": {name: tables.path(name) for name in TABLES},
    }
    return out


def idle_timeout_summary(config: PipelineConfig) -> dict[str, Any]:
    """The partition idleness timeout in force and where it comes from (for the run's summary)."""
    idle = config.idle_timeout_ms
    if idle is None:
        rule = "none: a silent partition stalls the watermark (idle_timeout_ms null)"
    elif isinstance(idle, str):
        rule = f"learned per partition from its own gaps (auto, at most {config.idle_bound_ms} ms)"
    elif idle == default_idle_timeout_ms(config.window):
        rule = f"default: max({IDLE_TIMEOUT_WINDOWS} windows, {MIN_DEFAULT_IDLE_TIMEOUT_MS // 1000} s)"
    else:
        rule = "set by the configuration"
    return {"idle_timeout_ms": idle, "idle_timeout": rule}


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m jobs.stream`` argument parser."""
    import jobs.stream as package
    from watermark.cli.log import entry_prog, plain_text
    from watermark.cli.main import OneLineParser

    p = OneLineParser(
        prog=entry_prog("python -m jobs.stream"), description=plain_text(package.__doc__.splitlines()[0])
    )
    for add_flags in (
        _source_flags,
        _run_flags,
        _watermark_flags,
        _execution_flags,
        _validation_flags,
        _metrics_flags,
        _table_flags,
        _reader_flags,
    ):
        add_flags(p)
    return p


def _source_flags(p: argparse.ArgumentParser) -> None:
    """The input: landing files, a Kafka topic, or Spark's rate source."""
    p.add_argument("--input", help="landing directory (not with --format rate or kafka)")
    p.add_argument(
        "--format",
        default="json",
        choices=FORMATS,
        help="landing file format (JSON lines, CSV with a header, Parquet), rate: Spark's rate source, "
        "or kafka: a Kafka topic of JSON values",
    )
    p.add_argument("--kafka-bootstrap-servers", metavar="HOST:PORT", help="Kafka brokers (--format kafka)")
    p.add_argument("--topic", help="Kafka topic to read (--format kafka)")
    p.add_argument(
        "--starting-offsets",
        choices=("earliest", "latest"),
        default=KafkaOptions.starting_offsets,
        help="where a new query starts reading the topic (a restart resumes from its checkpoint)",
    )
    p.add_argument(
        "--max-offsets-per-trigger", type=int, metavar="N", help="Kafka records per micro-batch at most"
    )
    p.add_argument(
        "--kafka-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an option of Spark's Kafka source (repeatable): any kafka.<consumer setting> "
        "(kafka.security.protocol, kafka.sasl.mechanism, kafka.sasl.jaas.config, kafka.ssl.*, "
        "kafka.group.id, ...) or failOnDataLoss (default true), startingTimestamp, "
        "startingOffsetsByTimestamp[Strategy], groupIdPrefix, kafkaConsumer.pollTimeoutMs, "
        "fetchOffset.numRetries, fetchOffset.retryIntervalMs; options that would split a Kafka partition "
        "(minPartitions, maxRecordsPerPartition) or replace a flag are refused; secret values are never "
        "logged",
    )
    p.add_argument(
        "--rate-rows-per-second",
        type=int,
        default=RateOptions.rows_per_second,
        help="rows a second (--format rate)",
    )
    p.add_argument(
        "--rate-rows-per-batch",
        type=int,
        metavar="N",
        help="deterministic rate source: exactly N rows per micro-batch, timestamps advancing N / "
        "rows-per-second seconds a batch whatever the wall clock (a restart replays identical batches)",
    )
    p.add_argument("--rate-keys", type=int, default=RateOptions.keys, help="keys (--format rate)")
    p.add_argument(
        "--rate-partitions", type=int, default=RateOptions.partitions, help="partitions (--format rate)"
    )
    p.add_argument(
        "--rate-max-delay-ms", type=int, default=RateOptions.max_delay_ms, help="event time = arrival - delay"
    )


def _run_flags(p: argparse.ArgumentParser) -> None:
    """How many batches, and where the tables and the checkpoint go."""
    p.add_argument("--max-batches", type=int, help="stop after this many micro-batches")
    p.add_argument("--output", required=True, help="directory of the Delta tables")
    p.add_argument("--checkpoint", required=True, help="checkpoint directory (query offsets and stage state)")


def _watermark_flags(p: argparse.ArgumentParser) -> None:
    """The watermark configuration (or the flags it is created from)."""
    p.add_argument(
        "--config", help="versioned watermark configuration (JSON); created from the flags if absent"
    )
    p.add_argument(
        "--strategy",
        default="slo",
        help="watermark strategy (without --config; default slo, the late-rate SLO watermark)",
    )
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="strategy parameter")
    p.add_argument("--window-ms", type=int, default=1_000, help="window length (default 1000)")
    p.add_argument("--slide-ms", type=int, help="window slide (default: tumbling windows)")
    p.add_argument(
        "--late-slo-pct", type=float, default=1.0, help="target late share, %% (the slo strategy's target)"
    )
    p.add_argument(
        "--partition-mode",
        choices=("min", "global", "scoped", "keyed"),
        help="how partitions make the watermark (default: scoped for Kafka, each partition on its own; "
        "min over partitions otherwise; keyed: each key on its own, its windows fired by its own "
        "watermark, when several keys share a partition; the stage then runs on the driver)",
    )
    p.add_argument(
        "--idle-timeout-ms",
        metavar="MS|auto|none",
        help="ingestion time without arrivals after which a partition stops holding the watermark back "
        "(default: max(10 windows, 60 s); none: never, so a silent partition stalls the watermark; auto, "
        "partition-scoped mode: learned per partition from its own gaps)",
    )
    p.add_argument(
        "--partition-retention-ms",
        metavar="MS|none",
        help="ingestion time without arrivals after which a partition that holds no open window is "
        "forgotten, with its keys (default: max(idle timeout, 100 windows, 1 h); none: never)",
    )


def _execution_flags(p: argparse.ArgumentParser) -> None:
    """Where the stage runs, the ingestion clock, and the trigger."""
    p.add_argument(
        "--stage-in",
        choices=("auto", "executors", "driver"),
        default="auto",
        help="where the watermark stage runs: executors (each Kafka partition judged by the executor "
        "that reads it, partition-scoped mode on Kafka; rows never reach the driver), driver (the batch's "
        "narrow columns collected), or auto (default: executors whenever they can)",
    )
    p.add_argument(
        "--clock",
        choices=("arrivals", "wall"),
        default="arrivals",
        help="the ingestion clock: arrivals (default: it moves with the records' arrival times only, as in "
        "a replay of recorded times) or wall (arrival times are the wall clock, Kafka's LogAppendTime: "
        "the clock also moves to each batch's start, so windows fire at batch boundaries, and with "
        "--trigger interval=... on Kafka at every trigger even when no record comes)",
    )
    p.add_argument(
        "--clock-margin-ms",
        type=int,
        default=1_000,
        help="wall clock: how far behind a batch's start the clock stops (records stamped just before "
        "the batch was planned, clock skew between the broker and the driver; default 1000)",
    )
    p.add_argument(
        "--trigger",
        default="available-now",
        help="available-now, or interval=DURATION (5s, 500ms, 2 minutes)",
    )
    p.add_argument("--max-files-per-trigger", type=int, help="landing files per micro-batch at most")
    p.add_argument("--flush-at-end", action="store_true", help="close all open windows when the input ends")


#: ``--future-bound-ms``'s range: from 1 s (a smaller bound quarantines records of a correct producer
#: whose clock is a moment ahead) to 365 days (a larger one lets a record move a partition's watermark by
#: more than a year; near 2**63 the bound overflowed Spark's ``_ingest_ms + bound`` in every batch, on
#: every restart).
FUTURE_BOUND_RANGE_MS = (1_000, 365 * 86_400_000)
#: ``--max-field-bytes``'s range: 64 bytes (an event id, a key or an ISO-8601 time must fit: 0 quarantined
#: every record and exited 0) to 64 MiB (a field the readers hold in memory).
MAX_FIELD_BYTES_RANGE = (64, 64 * 1024 * 1024)


def _validation_flags(p: argparse.ArgumentParser) -> None:
    """What validation quarantines."""
    p.add_argument(
        "--future-bound-ms",
        type=int,
        default=86_400_000,
        help="quarantine event times this far ahead of the ingestion clock "
        f"({FUTURE_BOUND_RANGE_MS[0]} to {FUTURE_BOUND_RANGE_MS[1]}: 1 s to 365 days; default one day)",
    )
    p.add_argument(
        "--max-field-bytes",
        type=int,
        default=65_536,
        help="quarantine records with a longer field (record_too_long; "
        f"{MAX_FIELD_BYTES_RANGE[0]} to {MAX_FIELD_BYTES_RANGE[1]}, default 65536)",
    )
    p.add_argument(
        "--max-event-ahead-ms",
        type=int,
        default=DEFAULT_MAX_EVENT_AHEAD_MS,
        help="quarantine a record whose event time is more than this ahead of its own arrival time "
        "(event_time_ahead_of_arrival: producer clock skew; 0 to 86400000, default "
        f"{DEFAULT_MAX_EVENT_AHEAD_MS})",
    )
    p.add_argument(
        "--max-arrival-ahead-ms",
        type=int,
        default=DEFAULT_MAX_ARRIVAL_AHEAD_MS,
        help="quarantine a record whose arrival time is more than this ahead of the batch's ingestion time "
        "(arrival_time_in_future: producer clock skew; 0 to 86400000, default "
        f"{DEFAULT_MAX_ARRIVAL_AHEAD_MS})",
    )
    p.add_argument(
        "--max-record-bytes",
        type=int,
        default=DEFAULT_MAX_RECORD_BYTES,
        help="a JSON or CSV record's line may be this long; a longer one is quarantined (record_too_long) "
        f"without being read whole (1024 to {1 << 30}, default {DEFAULT_MAX_RECORD_BYTES})",
    )
    p.add_argument(
        "--dedup-horizon-ms",
        type=int,
        default=None,
        help="quarantine a repeated event_id (duplicate_event_id) within a batch and this far back in "
        "arrival time (default: ids are not deduplicated)",
    )


def _metrics_flags(p: argparse.ArgumentParser) -> None:
    """The Prometheus metrics server."""
    p.add_argument(
        "--metrics-port",
        type=int,
        default=DEFAULT_METRICS_PORT,
        help="serve Prometheus metrics at http://HOST:PORT/metrics while running "
        f"(default {DEFAULT_METRICS_PORT}; 0 serves none)",
    )
    p.add_argument(
        "--metrics-host", default="127.0.0.1", help="address the metrics server binds (default 127.0.0.1)"
    )


def _table_flags(p: argparse.ArgumentParser) -> None:
    """What the deferred tables hold, and when they are committed."""
    p.add_argument(
        "--no-arrival-history",
        action="store_true",
        help="do not write the arrivals table (every record's partition and times: the re-tuning input)",
    )
    p.add_argument(
        "--defer-batches",
        type=int,
        default=DeferPolicy.batches,
        help="commit late_events, quarantine, watermark_log and arrivals every N batches (their rows wait in "
        "the checkpoint; aggregates are committed with every batch); 1 commits them with every batch "
        f"(default {DeferPolicy.batches})",
    )
    p.add_argument(
        "--defer-max-delay-ms",
        type=int,
        default=DeferPolicy.max_delay_ms,
        help="commit the deferred tables sooner when their oldest batch is this old (ingestion time; "
        f"default {DeferPolicy.max_delay_ms})",
    )


def _reader_flags(p: argparse.ArgumentParser) -> None:
    """How JSON is read, and the input's field names."""
    p.add_argument(
        "--reader",
        choices=("arrow", "spark"),
        default="arrow",
        help="JSON files: arrow = parsed by pyarrow in the executors (batches with an invalid record fall "
        "back to Spark's reader), spark = always Spark's reader (default arrow)",
    )
    for name, default in vars(Fields()).items():
        p.add_argument(
            f"--{name.replace('_', '-')}-field", default=default, help=f"input field (default {default})"
        )


def locations(args: argparse.Namespace) -> dict[str, str]:
    """The run's locations (``input``, ``output``, ``checkpoint``, ``config``) as Spark takes them.

    Each may be a path or a URI (:mod:`watermark.storage`); an unknown scheme, a missing bucket or storage
    that does not answer is a :class:`watermark.storage.StorageError` (one line, exit 2) before anything
    is written.
    """
    out = {}
    for name in ("input", "output", "checkpoint", "config"):
        given = getattr(args, name)
        if given:
            where = Location.of(given)
            storage.check_reachable(where, f"--{name}")
            out[name] = where.spark
    return out


def options_from_args(args: argparse.Namespace) -> JobOptions:
    """Validate the flags and resolve the configuration (the file wins; a missing file is created)."""
    check_bounds(args)
    kafka = kafka_options(args)  # first: one option refused fails the run before anything is written
    flags = PipelineConfig.from_dict(config_doc(args))
    places = locations(args)
    check_source_flags(args)
    check_counts(args)
    check_max_event_ahead_ms(args.max_event_ahead_ms)  # before the checkpoint's application id is made
    check_max_arrival_ahead_ms(args.max_arrival_ahead_ms)
    check_max_record_bytes(args.max_record_bytes)
    if source_kind(args.format).landing_files:  # a missing folder: refused, never created (an empty input)
        check_landing_input(places["input"])
    config = resolve_config(args, places, flags)  # after every refusal of the flags: it may write the file
    fields = Fields(**{name: getattr(args, f"{name}_field") for name in vars(Fields())})
    rate = RateOptions(
        rows_per_second=args.rate_rows_per_second,
        keys=args.rate_keys,
        partitions=args.rate_partitions,
        max_delay_ms=args.rate_max_delay_ms,
        rows_per_batch=args.rate_rows_per_batch,
    )
    app_id = checkpoint_app_id(places["checkpoint"], places["output"])  # a reset checkpoint is refused here
    StageStore(places["checkpoint"]).check()  # so is a missing or damaged newest state (CheckpointError)
    check_not_rewound(places["checkpoint"], places["output"], app_id)  # and tables ahead of the checkpoint
    return JobOptions(
        app_id=app_id,
        input=places["input"] if args.input else "",
        format=args.format,
        rate=rate,
        kafka=kafka,
        max_batches=args.max_batches,
        output=places["output"],
        checkpoint=places["checkpoint"],
        config=config,
        config_path=places.get("config"),
        trigger=args.trigger,
        max_files_per_trigger=args.max_files_per_trigger,
        flush_at_end=args.flush_at_end,
        fields=fields,
        future_bound_ms=args.future_bound_ms,
        max_field_bytes=args.max_field_bytes,
        max_event_ahead_ms=args.max_event_ahead_ms,
        max_arrival_ahead_ms=args.max_arrival_ahead_ms,
        max_record_bytes=args.max_record_bytes,
        reader=args.reader,
        metrics_port=args.metrics_port or None,
        metrics_host=args.metrics_host,
        arrival_history=not args.no_arrival_history,
        defer=DeferPolicy(args.defer_batches, args.defer_max_delay_ms),
        stage_in=args.stage_in,
        clock=args.clock,
        clock_margin_ms=args.clock_margin_ms,
        dedup_horizon_ms=args.dedup_horizon_ms,
    )


def check_bounds(args: argparse.Namespace) -> None:
    """Refuse the bounds that Spark and the readers take as they are, before anything is read or written."""
    for flag, (low, high) in (
        ("future_bound_ms", FUTURE_BOUND_RANGE_MS),
        ("max_field_bytes", MAX_FIELD_BYTES_RANGE),
    ):
        value = getattr(args, flag)
        if not low <= value <= high:
            msg = f"--{flag.replace('_', '-')} must be between {low} and {high}, got {value}"
            raise ValueError(msg)


def kafka_options(args: argparse.Namespace) -> KafkaOptions:
    """The Kafka source's options from the flags (a refused ``--kafka-option`` raises ``ValueError``)."""
    from jobs.stream.options import parse_key_values

    return KafkaOptions(
        bootstrap_servers=args.kafka_bootstrap_servers or "",
        topic=args.topic or "",
        starting_offsets=args.starting_offsets,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        options=tuple(parse_key_values(args.kafka_option, "--kafka-option")),
    )


def resolve_config(args: argparse.Namespace, places: dict[str, str], flags: PipelineConfig) -> PipelineConfig:
    """The configuration in force: ``--config``'s file when it exists (else it is written from the flags)."""
    if not args.config:
        return flags
    if storage.exists(places["config"]):
        return load_config(places["config"])
    write_config(places["config"], flags)
    return flags


def main(argv: list[str] | None = None) -> int:
    """Entry point; prints the run's summary as JSON."""
    from watermark.cli.log import run_main

    return run_main(build_parser(), _run, argv, errors={})


#: Kafka client errors that mean the broker refused the job's login or rights: the client does not retry
#: them, and Spark fails the query after ``fetchOffset.numRetries`` attempts (3, a second apart).
KAFKA_REFUSED = (
    r"org\.apache\.kafka\.common\.errors\."
    r"(\w*(?:Authentication|Authorization)Exception|UnsupportedSaslMechanismException|IllegalSaslStateException)"
    r":? *([^\n]*)"
)
EXIT_FAILED = 1  # the run failed (a refused Kafka login); 2 is bad input, found before anything starts


def kafka_failure(exc: BaseException, kafka: KafkaOptions) -> None:
    """Raise a one-line :class:`CliError` (exit 1) for a failed Kafka query whose broker refused the login.

    Any other error that quotes a secret of ``--kafka-option`` is raised as one line with it redacted;
    other errors are left to the caller.
    """
    import re

    from jobs.stream.options import redact_text
    from watermark.cli.log import CliError

    text = str(exc)
    secrets = kafka.secrets()
    refused = re.search(KAFKA_REFUSED, text)
    if refused is not None:
        detail = re.sub(r"\s*SQLSTATE: \w+\s*$", "", refused.group(2)).strip()
        msg = (
            f"Kafka at {kafka.bootstrap_servers} refused the job ({refused.group(1)}: {detail}); check "
            "--kafka-option kafka.security.protocol, kafka.sasl.mechanism and kafka.sasl.jaas.config"
        )
        raise CliError(redact_text(msg, secrets), EXIT_FAILED) from None
    if any(secret in text for secret in secrets):
        first = text.strip().splitlines()[0] if text.strip() else ""
        msg = f"{type(exc).__name__}: {redact_text(first, secrets)}"
        raise CliError(msg, EXIT_FAILED) from None


def _run(args: argparse.Namespace) -> int:
    from jobs.common.session import build_session
    from monitoring.server import MetricsPortBusy
    from watermark.cli.log import usage_errors

    with usage_errors(ConfigError, ValueError, CheckpointError, OSError):  # OSError: storage failing
        options = options_from_args(args)
    metrics, server = None, None
    if options.metrics_port is not None:  # bound before Spark starts, so a busy port fails at once
        with usage_errors(MetricsPortBusy):
            metrics, server = serve_metrics(options)
    idle = idle_timeout_summary(options.config)
    log.info("partition idle timeout: %s ms (%s)", idle["idle_timeout_ms"], idle["idle_timeout"])
    spark = build_session("jobs.stream")
    try:
        run_job(spark, options, metrics)
    except KeyboardInterrupt:
        for query in spark.streams.active:
            query.stop()
        log.warning("interrupted: restart with the same --checkpoint to continue exactly where it stopped")
        return 130
    except Exception as exc:
        if options.source.authenticates:
            kafka_failure(exc, options.kafka)  # a refused login as one line; never a secret
        raise
    finally:
        spark.stop()
        if server is not None:
            server.stop()
    config = options.config
    if options.config_path:  # the version in force at the end, if the file still holds a valid one
        try:
            config = max(config, load_config(options.config_path), key=lambda c: c.version)
        except ConfigError:
            pass
    print(json.dumps(summarize(options.output) | idle_timeout_summary(config) | unplanned_summary(options)))
    return 0


#: Unplanned files the summary names (it counts them all).
UNPLANNED_LISTED = 20


def unplanned_summary(options: JobOptions) -> dict[str, Any]:
    """After an available-now run of landing files, the files no batch planned (each warned about), or {}.

    Every file present when the run started should be in the file source's log (read, or quarantined as a
    file); one that is not was dropped by the source unseen. With ``--max-batches`` or an interval trigger
    the run stops with files to go: nothing is checked.
    """
    if not options.source.landing_files or options.max_batches is not None:
        return {}
    if trigger_interval_ms(options.trigger) is not None:
        return {}
    missed = unplanned_files(options.checkpoint, options.input)
    for where in missed:
        log.warning(
            "landing file %s was never planned by the file source: neither read nor quarantined", where
        )
    if not missed:
        return {}
    return {"unplanned_files": len(missed), "unplanned": [w.spark for w in missed[:UNPLANNED_LISTED]]}
