"""What a run of the job needs: the input field names, the source's options, and :class:`JobOptions`."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from jobs.stream.sinks.sink_options import DeferPolicy, SinkOptions
from jobs.stream.sources.kinds import SOURCES, SourceKind, source_kind
from jobs.stream.sources.record_rules import (
    DEFAULT_MAX_ARRIVAL_AHEAD_MS,
    DEFAULT_MAX_EVENT_AHEAD_MS,
    DEFAULT_MAX_RECORD_BYTES,
    RecordRules,
    check_max_arrival_ahead_ms,
    check_max_event_ahead_ms,
    check_max_record_bytes,
)
from jobs.stream.sources.source_options import SourceOptions
from jobs.stream.stage.stage_options import StageOptions
from watermark.config import PipelineConfig


@dataclass(frozen=True)
class Fields:
    """Input field names (each renameable by a flag)."""

    event_id: str = "event_id"
    key: str = "key"
    partition: str = "partition"
    event_time: str = "event_time_ms"
    arrival_time: str = "arrival_time_ms"
    value: str = "value"


FORMATS = tuple(SOURCES)
RATE_FILE = "rate"  # the ``file`` of rate-source records (their ``line`` is the sequence number)
DEFAULT_METRICS_PORT = 9108  # the job's /metrics (infra/prometheus/prometheus.yml scrapes it)


@dataclass(frozen=True)
class RateOptions:
    """Spark's rate source for load tests (``--format rate``)."""

    rows_per_second: int = 10_000
    keys: int = 1_000
    partitions: int = 8
    max_delay_ms: int = 2_000  # event time = arrival time - a hashed delay in [0, max_delay_ms]
    num_partitions: int = 2  # Spark partitions of the source
    #: Set: Spark's ``rate-micro-batch`` source instead: batch N holds exactly rows [N * rows_per_batch,
    #: (N + 1) * rows_per_batch), stamped from ``start_ms`` on at ``rows_per_second``, whatever the wall
    #: clock; a restart replays identical batches (the chaos test compares a killed run with an unbroken one).
    rows_per_batch: int | None = None
    start_ms: int = 1_700_000_000_000


# --------------------------------------------------------------------------------------------------
# Kafka: the source's options, the allowed set, and keeping secrets out of every output

#: Named options of Spark's Kafka source that ``--kafka-option`` may set (besides every ``kafka.*`` client
#: setting), lower-cased (Spark reads source options case-insensitively) to their documented spelling. None
#: of them changes how Spark cuts the topic into partitions (one Spark partition per Kafka partition).
KAFKA_SOURCE_OPTIONS = {
    name.lower(): name
    for name in (
        "failOnDataLoss",
        "startingTimestamp",
        "startingOffsetsByTimestamp",
        "startingOffsetsByTimestampStrategy",
        "groupIdPrefix",
        "kafkaConsumer.pollTimeoutMs",
        "fetchOffset.numRetries",
        "fetchOffset.retryIntervalMs",
    )
}
_ONE_PARTITION = (
    "it splits a Kafka partition into several Spark partitions, and the watermark stage needs exactly one "
    "Spark partition per Kafka partition (one watermark partition each)"
)
#: Options ``--kafka-option`` refuses, lower-cased, with the reason (the error names it). Anything else that
#: is neither ``kafka.*`` nor in :data:`KAFKA_SOURCE_OPTIONS` is refused too, as not (yet) supported.
KAFKA_REFUSED_OPTIONS = {
    "minpartitions": _ONE_PARTITION,
    "maxrecordsperpartition": _ONE_PARTITION,
    "subscribe": "the job reads the one topic --topic names",
    "subscribepattern": "the job reads the one topic --topic names",
    "assign": "the job reads every partition of the one topic --topic names",
    "topic": "the topic is --topic",
    "startingoffsets": "it is --starting-offsets (a restart resumes from the checkpoint's offsets)",
    "maxoffsetspertrigger": "it is --max-offsets-per-trigger",
    "endingoffsets": "a streaming query has no end (Spark refuses it)",
    "endingtimestamp": "a streaming query has no end (Spark refuses it)",
    "endingoffsetsbytimestamp": "a streaming query has no end (Spark refuses it)",
    "kafka.bootstrap.servers": "it is --kafka-bootstrap-servers",
    "kafka.key.deserializer": "Spark reads keys as bytes and refuses a deserializer",
    "kafka.value.deserializer": "Spark reads values as bytes and refuses a deserializer",
    "kafka.auto.offset.reset": "Spark refuses it: where a new query starts is --starting-offsets",
    "kafka.enable.auto.commit": "Spark refuses it: the offsets live in the checkpoint",
    "kafka.interceptor.classes": "Spark refuses it (an interceptor may change the records)",
}
KAFKA_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: A key whose value is a secret (``kafka.sasl.jaas.config``, ``kafka.ssl.key.password``,
#: ``kafka.ssl.keystore.key``, ``sasl.password``, a token...): its value never appears in any output.
SECRET_KEY = re.compile(r"password|secret|jaas|token|key|credential", re.IGNORECASE)
REDACTED = "***"
#: ``name="value"`` or ``name=value`` options of a JAAS login module line.
_JAAS_OPTION = re.compile(r'([A-Za-z_][\w.-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s";]+))')
_JAAS_MODULE = re.compile(r"^\s*([\w.$]+)\s+(required|requisite|sufficient|optional)\b")


def is_secret_key(key: str) -> bool:
    """Whether the value of option ``key`` is a secret (never shown: logs, errors, summaries, metrics).

    >>> [is_secret_key(k) for k in ("kafka.sasl.jaas.config", "kafka.ssl.key.password", "kafka.group.id")]
    [True, True, False]
    """
    return SECRET_KEY.search(key) is not None


def parse_jaas(value: str) -> tuple[str, dict[str, str]]:
    r"""The login module and the options of a one-entry JAAS line (``sasl.jaas.config``).

    >>> parse_jaas('org.example.ScramLoginModule required username="a" password="p\\"q";')
    ('org.example.ScramLoginModule', {'username': 'a', 'password': 'p"q'})
    """
    match = _JAAS_MODULE.match(value)
    if match is None:
        msg = "sasl.jaas.config must be '<LoginModule class> required name=\"value\" ...;'"
        raise ValueError(msg)
    rest = value[match.end() :]
    options = {}
    for m in _JAAS_OPTION.finditer(rest):
        text = m.group(2) if m.group(2) is not None else m.group(3)
        options[m.group(1)] = re.sub(r"\\(.)", r"\1", text)
    return match.group(1), options


def secret_values(options: Mapping[str, str]) -> list[str]:
    """Every secret in ``options``, longest first (a longer secret is replaced before a part of it).

    The values of secret keys, and the secret options of a JAAS line (its password may be quoted alone).

    >>> jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="pw1";'
    >>> secret_values({"kafka.sasl.jaas.config": jaas, "kafka.group.id": "g"})[1:]
    ['pw1']
    """
    found: set[str] = set()
    for key, value in options.items():
        if not is_secret_key(key) or not value:
            continue
        found.add(value)
        if "jaas" in key.lower():
            try:
                _, jaas = parse_jaas(value)
            except ValueError:
                continue
            found |= {v for name, v in jaas.items() if v and is_secret_key(name)}
    return sorted(found, key=lambda v: (-len(v), v))


def redact_options(options: Mapping[str, str]) -> dict[str, str]:
    """``options`` with the value of every secret key replaced by ``***`` (for logs, reports, errors).

    >>> redact_options({"kafka.security.protocol": "SASL_SSL", "kafka.sasl.jaas.config": "x required;"})
    {'kafka.security.protocol': 'SASL_SSL', 'kafka.sasl.jaas.config': '***'}
    """
    return {key: REDACTED if is_secret_key(key) and value else value for key, value in options.items()}


def redact_text(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of each secret replaced by ``***`` (an error message, a log line).

    >>> redact_text("login failed for password=hunter2", ["hunter2"])
    'login failed for password=***'
    """
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return text


#: JAAS login modules whose username and password librdkafka takes as ``sasl.username``/``sasl.password``.
_JAAS_USER_MODULES = ("ScramLoginModule", "PlainLoginModule")


def librdkafka_config(options: Mapping[str, Any]) -> dict[str, Any]:
    """Kafka client settings in Java's spelling (the job's ``kafka.*`` options) as confluent-kafka's.

    librdkafka names ``security.protocol``, ``sasl.mechanism`` (its alias of ``sasl.mechanisms``) and the
    ``ssl.*`` locations as Java does, but has no ``sasl.jaas.config``: a SCRAM or PLAIN login line becomes
    ``sasl.username`` and ``sasl.password`` (unless they are given too). A ``kafka.`` prefix is dropped, so
    the job's ``--kafka-option`` list works as it is. Other settings pass unchanged (librdkafka refuses
    one it does not know, by name).

    >>> jaas = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="u" password="p";'
    >>> librdkafka_config({"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.jaas.config": jaas})
    {'security.protocol': 'SASL_PLAINTEXT', 'sasl.username': 'u', 'sasl.password': 'p'}
    """
    out: dict[str, Any] = {}
    jaas: str | None = None
    for key, value in options.items():
        name = key[len("kafka.") :] if key.lower().startswith("kafka.") else key
        if name == "sasl.jaas.config":
            jaas = value
        else:
            out[name] = value
    if jaas is not None:
        module, settings = parse_jaas(jaas)
        if not module.endswith(_JAAS_USER_MODULES) or not {"username", "password"} <= set(settings):
            msg = (
                "sasl.jaas.config: confluent-kafka takes a ScramLoginModule or PlainLoginModule line with "
                "username and password (or give sasl.username and sasl.password)"
            )
            raise ValueError(msg)
        out.setdefault("sasl.username", settings["username"])
        out.setdefault("sasl.password", settings["password"])
    return out


def parse_key_values(entries: Iterable[str], flag: str) -> list[tuple[str, str]]:
    """``KEY=VALUE`` entries as pairs (split at the first ``=``; the value kept as it is, spaces included).

    A key given twice (whatever its case) is refused; errors name the key, never the value.

    >>> parse_key_values(["kafka.security.protocol=SASL_SSL", "kafka.ssl.endpoint.identification.algorithm="],
    ...                  "--kafka-option")
    [('kafka.security.protocol', 'SASL_SSL'), ('kafka.ssl.endpoint.identification.algorithm', '')]
    """
    pairs: list[tuple[str, str]] = []
    seen: set[str] = set()
    for entry in entries:
        key, equals, value = entry.partition("=")
        key = key.strip()
        if not equals or not key or any(c.isspace() for c in key):
            shown = key if key and not any(c.isspace() for c in key) else "..."
            msg = f"{flag} takes KEY=VALUE, got {shown}{'' if equals else ' (no =)'}"
            raise ValueError(msg)
        if key.lower() in seen:
            msg = f"{flag} {key} is given twice"
            raise ValueError(msg)
        seen.add(key.lower())
        pairs.append((key, value))
    return pairs


def check_kafka_source_options(
    options: Iterable[tuple[str, str]] | Mapping[str, str], topic: str = ""
) -> tuple[tuple[str, str], ...]:
    """The ``--kafka-option`` pairs checked against the allowed set, keys in their canonical spelling.

    Allowed: every ``kafka.*`` Kafka consumer setting (``kafka.security.protocol``, ``kafka.sasl.*``,
    ``kafka.ssl.*``, ``kafka.group.id``, timeouts...) except those of :data:`KAFKA_REFUSED_OPTIONS`, and the
    named source options of :data:`KAFKA_SOURCE_OPTIONS`. A ValueError (one line, naming the option and
    why; never a secret value) for anything else, or for a value Spark or the Kafka client would refuse
    only once the query runs.

    >>> check_kafka_source_options({"FAILONDATALOSS": "False", "kafka.group.id": "awm"})
    (('failOnDataLoss', 'false'), ('kafka.group.id', 'awm'))
    >>> check_kafka_source_options({"minPartitions": "8"})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: --kafka-option minPartitions is refused: it splits a Kafka partition into several Spark ...
    """
    pairs = list(options.items()) if isinstance(options, Mapping) else list(options)
    checked: list[tuple[str, str]] = []
    seen: set[str] = set()
    for key, value in pairs:
        if not isinstance(key, str) or not isinstance(value, str):
            msg = f"--kafka-option keys and values are text, got {type(key).__name__} {key!r}"
            raise ValueError(msg)
        lower = key.lower()
        if lower in seen:
            msg = f"--kafka-option {key} is given twice"
            raise ValueError(msg)
        seen.add(lower)
        if lower in KAFKA_REFUSED_OPTIONS:
            msg = f"--kafka-option {key} is refused: {KAFKA_REFUSED_OPTIONS[lower]}"
            raise ValueError(msg)
        if lower.startswith("kafka."):
            name = key[len("kafka.") :]
            if not name:
                msg = "--kafka-option kafka. needs a Kafka client setting after the prefix"
                raise ValueError(msg)
            _check_client_value(name, value)
            checked.append((f"kafka.{name}", value))
        elif lower in KAFKA_SOURCE_OPTIONS:
            canonical = KAFKA_SOURCE_OPTIONS[lower]
            checked.append((canonical, _check_source_value(canonical, value, topic)))
        else:
            named = ", ".join(sorted(KAFKA_SOURCE_OPTIONS.values()))
            msg = f"--kafka-option {key} is not supported: give kafka.<client setting> or one of {named}"
            raise ValueError(msg)
    return tuple(checked)


def _check_client_value(name: str, value: str) -> None:
    """Refuse a Kafka client value that would fail only when the query starts."""
    if name.lower() == "security.protocol" and value.strip().upper() not in KAFKA_SECURITY_PROTOCOLS:
        msg = f"--kafka-option kafka.security.protocol must be one of {', '.join(KAFKA_SECURITY_PROTOCOLS)}"
        raise ValueError(msg)
    if name.lower() == "sasl.jaas.config":
        if not value.rstrip().endswith(";"):
            msg = "--kafka-option kafka.sasl.jaas.config must end with ';' (the JAAS line's end)"
            raise ValueError(msg)
        parse_jaas(value)  # its errors name the form, never the value
    if name.lower() == "sasl.mechanism" and not value.strip():
        msg = "--kafka-option kafka.sasl.mechanism needs a mechanism (PLAIN, SCRAM-SHA-512, ...)"
        raise ValueError(msg)


def _check_source_value(name: str, value: str, topic: str) -> str:
    """A named source option's value, checked (Spark would refuse it only when the query starts)."""
    text = value.strip()
    if name == "failOnDataLoss":
        if text.lower() not in ("true", "false"):
            msg = f"--kafka-option failOnDataLoss must be true or false, got {text!r}"
            raise ValueError(msg)
        return text.lower()
    if name == "startingOffsetsByTimestampStrategy":
        if text.lower() not in ("error", "latest"):
            msg = f"--kafka-option {name} must be error or latest, got {text!r}"
            raise ValueError(msg)
        return text.lower()
    if name == "startingOffsetsByTimestamp":
        try:
            doc = json.loads(text)
        except json.JSONDecodeError:
            doc = None
        valid = isinstance(doc, dict) and all(
            isinstance(parts, dict)
            and all(p.isdigit() and isinstance(t, int) and not isinstance(t, bool) for p, t in parts.items())
            for parts in doc.values()
        )
        if not valid:
            msg = f'--kafka-option {name} takes JSON {{"TOPIC": {{"PARTITION": EPOCH_MS}}}}, got {text!r}'
            raise ValueError(msg)
        if topic and set(doc) != {topic}:
            msg = f"--kafka-option {name} must name the topic --topic reads ({topic!r}) only"
            raise ValueError(msg)
        return text
    if name == "groupIdPrefix":
        if not text:
            msg = "--kafka-option groupIdPrefix needs a prefix"
            raise ValueError(msg)
        return text
    least = 1 if name == "kafkaConsumer.pollTimeoutMs" else 0  # the timestamp, retries and intervals: >= 0
    if not text.isdigit() or int(text) < least:
        msg = f"--kafka-option {name} must be an integer >= {least}, got {text!r}"
        raise ValueError(msg)
    return str(int(text))


@dataclass(frozen=True, repr=False)
class KafkaOptions:
    """The Kafka source (``--format kafka``): one watermark partition per Kafka partition.

    ``options`` are the ``--kafka-option`` pairs, checked (:func:`check_kafka_source_options`); its secrets
    never appear in the object's ``repr`` (nor in :meth:`describe`).
    """

    bootstrap_servers: str = ""
    topic: str = ""
    starting_offsets: str = "earliest"  # or "latest"; a restart resumes from the checkpoint's offsets
    max_offsets_per_trigger: int | None = None
    options: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", check_kafka_source_options(self.options, self.topic))

    def reader_options(self) -> dict[str, str]:
        """Every option of Spark's Kafka source, in the order they are set.

        ``failOnDataLoss`` is true unless ``--kafka-option failOnDataLoss=false``.
        """
        out = {
            "kafka.bootstrap.servers": self.bootstrap_servers,
            "subscribe": self.topic,
            "startingOffsets": self.starting_offsets,
            "failOnDataLoss": "true",
        }
        if self.max_offsets_per_trigger:
            out["maxOffsetsPerTrigger"] = str(self.max_offsets_per_trigger)
        out.update(self.options)
        return out

    def secrets(self) -> list[str]:
        """The secrets of the options (:func:`secret_values`), for :func:`redact_text` on error messages."""
        return secret_values(dict(self.options))

    def describe(self) -> str:
        """One line for the log: servers, topic and every option, secrets as ``***``."""
        shown = redact_options(self.reader_options())
        return ", ".join(f"{k}={v}" for k, v in shown.items())

    def __repr__(self) -> str:
        return (
            f"KafkaOptions(bootstrap_servers={self.bootstrap_servers!r}, topic={self.topic!r}, "
            f"starting_offsets={self.starting_offsets!r}, "
            f"max_offsets_per_trigger={self.max_offsets_per_trigger!r}, "
            f"options={tuple(redact_options(dict(self.options)).items())!r})"
        )


@dataclass(frozen=True)
class JobOptions:
    """Everything a run of the job needs: what the command line builds.

    Each stage takes its part: :attr:`source_options` (with :attr:`record_rules`), :attr:`stage_options`
    (the watermark stage's) and :attr:`sink_options`.
    """

    input: str
    output: str
    checkpoint: str
    config: PipelineConfig
    config_path: str | None = None
    format: str = "json"
    rate: RateOptions = field(default_factory=RateOptions)
    kafka: KafkaOptions = field(default_factory=KafkaOptions)
    max_batches: int | None = None  # stop after this many micro-batches (for the rate source)
    trigger: str = "available-now"
    max_files_per_trigger: int | None = None
    flush_at_end: bool = False
    fields: Fields = field(default_factory=Fields)
    future_bound_ms: int = 86_400_000
    max_field_bytes: int = 65_536
    #: How far ahead an event time of its arrival, and an arrival of the ingestion time (record_rules).
    max_event_ahead_ms: int = DEFAULT_MAX_EVENT_AHEAD_MS  # event_time_ahead_of_arrival
    max_arrival_ahead_ms: int = DEFAULT_MAX_ARRIVAL_AHEAD_MS  # arrival_time_in_future
    #: A record's line (JSON, CSV) may be this long in bytes; a longer one is ``record_too_long``, read with
    #: bounded memory (:data:`DEFAULT_MAX_RECORD_BYTES`).
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    reader: str = (
        "arrow"  # JSON: "arrow" (pyarrow in executors; Spark's reader for unclean batches) or "spark"
    )
    app_id: str | None = None  # Delta txnAppId; None: the checkpoint's own (state.checkpoint_app_id)
    progress: bool = True
    metrics_port: int | None = None  # serve Prometheus metrics on this port (0: any free port)
    metrics_host: str = "127.0.0.1"
    arrival_history: bool = True  # write the ``arrivals`` table (the re-tuning DAG's history)
    #: Quarantine repeated event ids (``duplicate_event_id``) within a batch and this far back in arrival
    #: time (jobs.stream.checkpoint.dedup); None: event ids are not deduplicated.
    dedup_horizon_ms: int | None = None
    #: Where the watermark stage runs: "executors" (per Kafka partition, where Spark reads it; partition-
    #: scoped mode on Kafka only), "driver", or "auto" (executors whenever they can).
    stage_in: str = "auto"
    #: The ingestion clock between arrivals. "arrivals": it moves with the records' arrival times only (a
    #: replay of recorded times: windows fire when arrivals move the watermark). "wall": the arrival times
    #: are stamped by the wall clock (Kafka's ``LogAppendTime``, a landing time), so the clock also moves to
    #: each batch's instant (its recorded start, less ``clock_margin_ms``) and windows fire at batch
    #: boundaries; with ``--trigger interval=...`` on Kafka every trigger is a batch (a timer source),
    #: so windows fire on the trigger's timer when no record comes.
    clock: str = "arrivals"
    #: "wall" clock: how far behind a batch's start the clock stops, for records stamped just before the
    #: batch was planned (they are read by the next batch) and for skew between the broker's and the
    #: driver's clocks.
    clock_margin_ms: int = 1_000
    #: When ``late_events``, ``watermark_log`` and ``arrivals`` are committed (jobs.stream.sinks.deferred).
    defer: DeferPolicy = field(default_factory=DeferPolicy)

    def __post_init__(self) -> None:
        if self.clock not in CLOCKS:
            msg = f"clock must be one of {', '.join(CLOCKS)}, got {self.clock!r}"
            raise ValueError(msg)
        if not 0 <= self.clock_margin_ms <= 86_400_000:
            msg = f"clock_margin_ms must be between 0 and 86400000 (one day), got {self.clock_margin_ms}"
            raise ValueError(msg)
        check_max_event_ahead_ms(self.max_event_ahead_ms)
        check_max_arrival_ahead_ms(self.max_arrival_ahead_ms)
        check_max_record_bytes(self.max_record_bytes)
        if self.stage_in not in STAGE_SITES:
            msg = f"stage_in must be one of {', '.join(STAGE_SITES)}, got {self.stage_in!r}"
            raise ValueError(msg)
        if self.stage_in == "executors" and self.config.partition_mode == "keyed":
            msg = (
                "--stage-in executors cannot run partition mode keyed: a Kafka partition's executor judges "
                "by partition; key-scoped firing runs its stage on the driver (--stage-in driver or auto)"
            )
            raise ValueError(msg)
        if self.stage_in == "executors" and not self.source.partition_per_task:
            msg = (
                "--stage-in executors needs the Kafka source (--format kafka), where a Kafka partition is "
                "a Spark partition"
            )
            raise ValueError(msg)

    @property
    def timer(self) -> bool:
        """Whether a timer source makes every trigger a batch (wall clock, Kafka, an interval trigger)."""
        return self.clock == "wall" and self.source.timer and self.trigger != "available-now"

    @property
    def source(self) -> SourceKind:
        """The source ``format`` names (:mod:`jobs.stream.sources.kinds`)."""
        return source_kind(self.format)

    @property
    def record_rules(self) -> RecordRules:
        """What a record must meet: its fields' names, the bounds of its times and sizes."""
        return RecordRules(
            fields=self.fields,
            future_bound_ms=self.future_bound_ms,
            max_field_bytes=self.max_field_bytes,
            max_event_ahead_ms=self.max_event_ahead_ms,
            max_record_bytes=self.max_record_bytes,
            max_arrival_ahead_ms=self.max_arrival_ahead_ms,
        )

    @property
    def source_options(self) -> SourceOptions:
        """What opening the source's stream and reading a batch's input need."""
        return SourceOptions(
            format=self.format,
            input=self.input,
            checkpoint=self.checkpoint,
            record_rules=self.record_rules,
            rate=self.rate,
            kafka=self.kafka,
            max_files_per_trigger=self.max_files_per_trigger,
            timer=self.timer,
            reader=self.reader,
            dedup_horizon_ms=self.dedup_horizon_ms,
        )

    @property
    def stage_options(self) -> StageOptions:
        """What the watermark stage needs: its configuration and state's place, where it runs, its clock."""
        return StageOptions(
            checkpoint=self.checkpoint,
            config=self.config,
            config_path=self.config_path,
            format=self.format,
            stage_in=self.stage_in,
            clock=self.clock,
            clock_margin_ms=self.clock_margin_ms,
            arrival_history=self.arrival_history,
        )

    @property
    def sink_options(self) -> SinkOptions:
        """What the job's tables and a batch's commit need."""
        return SinkOptions(
            output=self.output, checkpoint=self.checkpoint, app_id=self.app_id, defer=self.defer
        )


STAGE_SITES = ("auto", "executors", "driver")
CLOCKS = ("arrivals", "wall")
TIMER_FILE = "_timer"  # the ``file`` of the timer source's rows (filtered out before anything else)


_UNITS_MS = {
    "ms": 1,
    "millisecond": 1,
    "milliseconds": 1,
    "s": 1_000,
    "sec": 1_000,
    "second": 1_000,
    "seconds": 1_000,
    "m": 60_000,
    "min": 60_000,
    "minute": 60_000,
    "minutes": 60_000,
    "h": 3_600_000,
    "hour": 3_600_000,
    "hours": 3_600_000,
}


def trigger_interval_ms(trigger: str) -> int | None:
    """The micro-batch interval of ``--trigger`` in ms, or None for ``available-now``; ValueError otherwise.

    ``interval=`` takes a number and a unit, with or without a space: ``1s``, ``500ms``, ``2 seconds``,
    ``1.5min``, ``1h``.

    >>> triggers = ("available-now", "interval=1s", "interval=2 seconds", "interval=1.5min")
    >>> [trigger_interval_ms(t) for t in triggers]
    [None, 1000, 2000, 90000]
    >>> trigger_interval_ms("interval=soon")
    Traceback (most recent call last):
    ...
    ValueError: --trigger interval needs a number and a unit (ms, s, min, h), e.g. interval=5s; got 'soon'
    """
    if trigger == "available-now":
        return None
    if not trigger.startswith("interval="):
        msg = f"--trigger must be available-now or interval=<duration> (e.g. interval=5s), got {trigger!r}"
        raise ValueError(msg)
    text = trigger.split("=", 1)[1].strip().lower()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([a-z]+)", text)
    if match is None or match.group(2) not in _UNITS_MS:
        msg = f"--trigger interval needs a number and a unit (ms, s, min, h), e.g. interval=5s; got {text!r}"
        raise ValueError(msg)
    ms = round(float(match.group(1)) * _UNITS_MS[match.group(2)])
    if not 1 <= ms <= 86_400_000:
        msg = f"--trigger interval must be between 1 ms and 1 day, got {text!r}"
        raise ValueError(msg)
    return ms
