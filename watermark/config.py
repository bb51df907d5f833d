"""The pipeline's watermark configuration: a validated, versioned JSON document.

One document says which strategy and parameters the watermark stage runs, the window, the late-rate
SLO and the partition idleness timeout (absent: :func:`default_idle_timeout_ms`, max(10 windows, 60 s);
``null``: partitions never go idle; ``"auto"``, partition-scoped mode only: learned per partition from its
own gaps, :mod:`watermark.partitions.idle`). With a strategy whose target is a late share (``"slo"``,
``"fleet"``) and no ``late_slo_pct`` among the params, its target is the document's ``late_slo_pct``.
``partition_mode`` (``"min"``, the default, ``"global"``, ``"scoped"`` or ``"keyed"``: each key fires its
own windows, the job judging each record by its key's generator) says how partitions make the watermark
(:class:`~watermark.partitions.combine.PartitionedWatermark`). The streaming job re-reads it at
batch boundaries (:class:`ConfigWatcher`); the re-tuning DAG publishes new versions with
:func:`write_config`. A new version applies only if it is valid and its ``version`` is higher than the
running one; anything else is refused with a reason and the running configuration is kept. The window,
the straggler band and the partition mode cannot change under a job (its open windows were cut and owned
under the old ones, :func:`shape_change`): such a version is refused too, by a running job and at a
restart.

Example document::

    {
      "version": 3,
      "strategy": "adaptive",
      "params": {"late_threshold": 0.1, "heartbeat_ms": 200},
      "window_ms": 1000,
      "slide_ms": null,
      "late_slo_pct": 0.5,
      "idle_timeout_ms": 10000,
      "straggler_ms": 500,
      "note": "tuned on 2026-11-21 history"
    }
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from watermark import storage
from watermark.base import check_float, check_int
from watermark.evaluation.replay import DEFAULT_STRAGGLER_MS
from watermark.partitions.idle import IdleLearning
from watermark.partitions.state import AUTO, COMBINATION_MODES, SCOPED_MODES
from watermark.strategies.registry import make, required_params, strategy_class
from watermark.windowspec import WindowSpec

_FIELDS = (
    "version",
    "strategy",
    "params",
    "window_ms",
    "slide_ms",
    "late_slo_pct",
    "idle_timeout_ms",
    "straggler_ms",
    "note",
    "partition_mode",
    "partition_retention_ms",
)
_REQUIRED = ("version", "strategy", "window_ms")


#: ``idle_timeout_ms`` when a document does not give one: this many windows of ingestion time...
IDLE_TIMEOUT_WINDOWS = 10
#: ...and at least this long (one minute), so that short windows do not drop partitions between bursts.
MIN_DEFAULT_IDLE_TIMEOUT_MS = 60_000


def default_idle_timeout_ms(window: WindowSpec) -> int:
    """The idleness timeout of a document without ``idle_timeout_ms``: max(10 windows, 60 s).

    A partition silent that long stops holding the watermark back, so one silent partition cannot stall
    the stream (Flink's ``withIdleness``); when it speaks again it counts again (its older rows are late).

    >>> default_idle_timeout_ms(WindowSpec(1_000)), default_idle_timeout_ms(WindowSpec(60_000))
    (60000, 600000)
    """
    return max(IDLE_TIMEOUT_WINDOWS * window.window_ms, MIN_DEFAULT_IDLE_TIMEOUT_MS)


#: ``partition_retention_ms`` when a document does not give one: at least this many windows...
RETENTION_WINDOWS = 100
#: ...and at least one hour (and never below the idleness timeout).
MIN_DEFAULT_RETENTION_MS = 3_600_000


def default_partition_retention_ms(window: WindowSpec, idle_timeout_ms: int | str | None) -> int:
    """How long a partition stays silent before it is forgotten, when a document does not say.

    max(the idleness timeout, 100 windows, 1 hour): a partition (and, in partition-scoped mode, the keys it
    owns) without an arrival for that long, and without an open window, is forgotten
    (:meth:`watermark.partitions.combine.PartitionedWatermark.evict`), so the stage's state and the cost of a
    batch follow the partitions alive.

    >>> default_partition_retention_ms(WindowSpec(1_000), 60_000)
    3600000
    >>> default_partition_retention_ms(WindowSpec(60_000), 600_000)
    6000000
    """
    return max(
        idle_bound_ms(idle_timeout_ms) or 0, RETENTION_WINDOWS * window.window_ms, MIN_DEFAULT_RETENTION_MS
    )


def idle_bound_ms(idle_timeout_ms: int | str | None) -> int | None:
    """The longest idle timeout a partition may have: the fixed one, or the cap of learned ones (``"auto"``).

    >>> idle_bound_ms(60_000), idle_bound_ms("auto"), idle_bound_ms(None)
    (60000, 600000, None)
    """
    if isinstance(idle_timeout_ms, str):
        return IdleLearning().cap_ms
    return idle_timeout_ms


class ConfigError(ValueError):
    """An invalid configuration document; the message is one line."""


@dataclass(frozen=True)
class PipelineConfig:
    """A validated configuration version (build it with :meth:`from_dict` or :func:`load_config`)."""

    version: int
    strategy: str
    params: Mapping[str, Any]
    window: WindowSpec
    late_slo_pct: float = 1.0
    #: Milliseconds, ``"auto"`` (learned per partition, partition-scoped mode:
    #: :mod:`watermark.partitions.idle`) or None.
    idle_timeout_ms: int | str | None = None
    straggler_ms: int = DEFAULT_STRAGGLER_MS
    note: str | None = None
    source: str | None = field(default=None, compare=False)
    #: How partitions make the watermark (:data:`watermark.partitions.state.COMBINATION_MODES`).
    partition_mode: str = "min"
    #: Silence after which a partition without an open window is forgotten (None: never; a document
    #: without the field: :func:`default_partition_retention_ms`).
    partition_retention_ms: int | None = None

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], *, source: str | None = None) -> PipelineConfig:
        """Validate a document; raises :class:`ConfigError` naming the field at fault.

        Examples
        --------
        >>> cfg = PipelineConfig.from_dict({"version": 1, "strategy": "periodic", "window_ms": 1000,
        ...                                 "params": {"delay_ms": "500"}})
        >>> cfg.params, cfg.window.window_ms, cfg.late_slo_pct
        ({'delay_ms': 500, 'period_ms': 200}, 1000, 1.0)

        """
        where = f"{source}: " if source else ""
        if not isinstance(doc, Mapping):
            msg = f"{where}the configuration must be a JSON object, got {type(doc).__name__}"
            raise ConfigError(msg)
        unknown = sorted(set(doc) - set(_FIELDS))
        if unknown:
            msg = f"{where}unknown field(s) {', '.join(unknown)}; allowed: {', '.join(_FIELDS)}"
            raise ConfigError(msg)
        missing = [f for f in _REQUIRED if doc.get(f) is None]
        if missing:
            msg = f"{where}missing required field(s) {', '.join(missing)}"
            raise ConfigError(msg)
        try:
            version = check_int("version", doc["version"], 1)
            params = doc.get("params") or {}
            if not isinstance(params, Mapping):
                msg = f"params must be an object of name: value, got {type(params).__name__}"
                raise ValueError(msg)
            slo = check_float("late_slo_pct", doc.get("late_slo_pct", 1.0), 0.0, 100.0)
            targets = "late_slo_pct" in required_params(strategy_class(str(doc["strategy"])))
            if targets and "late_slo_pct" not in params:
                params = {**params, "late_slo_pct": slo}  # slo's and fleet's target is the document's SLO
            generator = make(str(doc["strategy"]), params)  # validates names and values
            window = WindowSpec(doc["window_ms"], doc.get("slide_ms"))
            idle: int | str | None = default_idle_timeout_ms(window)
            if "idle_timeout_ms" in doc:  # null: a partition never goes idle (it can stall the watermark)
                given = doc["idle_timeout_ms"]
                if isinstance(given, str) and given.strip().lower() == AUTO:
                    idle = AUTO  # learned per partition from its own gaps
                else:
                    idle = None if given is None else check_int("idle_timeout_ms", given, 1)
            straggler = check_int("straggler_ms", doc.get("straggler_ms", DEFAULT_STRAGGLER_MS), 0)
            mode = doc.get("partition_mode") or "min"
            if mode not in COMBINATION_MODES:
                msg = f"partition_mode must be one of {', '.join(COMBINATION_MODES)}, got {mode!r}"
                raise ValueError(msg)
            if idle == AUTO and mode not in SCOPED_MODES:
                msg = (
                    f"idle_timeout_ms 'auto' (learned per partition) needs partition_mode scoped or keyed: "
                    f"{mode}"
                )
                raise ValueError(msg)
            retention: int | None = default_partition_retention_ms(window, idle)
            if "partition_retention_ms" in doc:  # null: partitions are never forgotten
                kept = doc["partition_retention_ms"]
                retention = None if kept is None else check_int("partition_retention_ms", kept, 1)
            note = doc.get("note")
            if note is not None and not isinstance(note, str):
                msg = f"note must be text, got {type(note).__name__}"
                raise ValueError(msg)
        except ConfigError:
            raise
        except ValueError as exc:
            msg = f"{where}{exc}"
            raise ConfigError(msg) from None
        return cls(
            version=version,
            strategy=generator.name,
            params=generator.params,
            window=window,
            late_slo_pct=slo,
            idle_timeout_ms=idle,
            straggler_ms=straggler,
            note=note,
            source=source,
            partition_mode=mode,
            partition_retention_ms=retention,
        )

    def to_dict(self) -> dict[str, Any]:
        """The document form (what :func:`write_config` stores)."""
        return (
            {
                "version": self.version,
                "strategy": self.strategy,
                "params": dict(self.params),
                "window_ms": self.window.window_ms,
                "slide_ms": self.window.slide_ms,
                "late_slo_pct": self.late_slo_pct,
                "idle_timeout_ms": self.idle_timeout_ms,
                "straggler_ms": self.straggler_ms,
                "note": self.note,
            }
            | ({} if self.partition_mode == "min" else {"partition_mode": self.partition_mode})
            | (
                {}
                if self.partition_retention_ms == self.default_retention_ms
                else {"partition_retention_ms": self.partition_retention_ms}
            )
        )

    @property
    def idle_bound_ms(self) -> int | None:
        """The longest idle timeout a partition may have (the cap of learned ones; None: never idle)."""
        return idle_bound_ms(self.idle_timeout_ms)

    @property
    def default_retention_ms(self) -> int:
        """The ``partition_retention_ms`` a document without the field has (its window and idle timeout's)."""
        return default_partition_retention_ms(self.window, self.idle_timeout_ms)

    def with_version(self, version: int, **changes: Any) -> PipelineConfig:
        """A copy as a new version with some fields changed (validated again)."""
        doc = self.to_dict() | changes | {"version": version}
        return PipelineConfig.from_dict(doc, source=self.source)


#: A configuration document is a few hundred bytes; anything beyond this is refused unread.
MAX_CONFIG_BYTES = 1 << 20


def _read_limited(path: str | os.PathLike[str] | storage.Location) -> bytes:
    """The file's bytes, at most ``MAX_CONFIG_BYTES + 1`` of them (a larger file is not read whole)."""
    with storage.open_input_file(storage.Location.of(path)) as f:
        return bytes(f.read(MAX_CONFIG_BYTES + 1))


def load_config(path: str | os.PathLike[str] | storage.Location) -> PipelineConfig:
    """Read and validate a configuration file (a path or URI); raises :class:`ConfigError` in one line."""
    try:
        name = str(storage.Location.of(path))
        raw = _read_limited(path)
    except (OSError, storage.StorageError) as exc:
        msg = f"{path}: cannot read the configuration: {exc}"
        raise ConfigError(msg) from None
    if len(raw) > MAX_CONFIG_BYTES:
        msg = f"{name}: the configuration is larger than {MAX_CONFIG_BYTES:,} bytes"
        raise ConfigError(msg)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        msg = f"{name}: not UTF-8 text (byte {exc.start})"
        raise ConfigError(msg) from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        msg = f"{name}: not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        raise ConfigError(msg) from None
    return PipelineConfig.from_dict(doc, source=name)


def write_config(path: str | os.PathLike[str], config: PipelineConfig) -> None:
    """Publish whole (a reader never sees half a document; a local file keeps its mode)."""
    write_text_atomically(path, json.dumps(config.to_dict(), indent=2) + "\n")


def write_text_atomically(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to the file ``path`` (a path or URI) whole: :func:`watermark.storage.write_bytes`."""
    storage.write_text(storage.Location.of(path), text)


def shape_change(running: PipelineConfig, candidate: PipelineConfig) -> str:
    """What ``candidate`` changes that a job cannot take over from ``running`` ('' when nothing).

    The window (length and slide), the straggler band and the partition mode shape the open windows and
    who fires them: open windows of the old window merge with partials of another length, and a window
    judged by another mode's watermark can be emitted a second time. The strategy, its parameters, the
    SLO and the idleness timeout may change (each partition keeps its watermark as a floor).

    Examples
    --------
    >>> a = PipelineConfig.from_dict({"version": 1, "strategy": "periodic", "window_ms": 1000})
    >>> shape_change(a, a.with_version(2, straggler_ms=0))
    'the straggler band (500 ms -> 0 ms)'
    >>> shape_change(a, a.with_version(2, params={"delay_ms": 9}))
    ''

    """
    changes = []
    if candidate.window != running.window:
        changes.append(
            f"the window ({running.window.window_ms} ms, slide {running.window.slide_ms} -> "
            f"{candidate.window.window_ms} ms, slide {candidate.window.slide_ms})"
        )
    if candidate.straggler_ms != running.straggler_ms:
        changes.append(f"the straggler band ({running.straggler_ms} ms -> {candidate.straggler_ms} ms)")
    if candidate.partition_mode != running.partition_mode:
        changes.append(f"the partition mode ({running.partition_mode} -> {candidate.partition_mode})")
    return ", ".join(changes)


@dataclass(frozen=True)
class ConfigChange:
    """What a :meth:`ConfigWatcher.poll` found: an applied version, or a refused one with its reason."""

    applied: PipelineConfig | None
    refused_reason: str | None = None


class ConfigWatcher:
    """Re-read the configuration file at batch boundaries and decide whether a new version applies.

    Examples
    --------
    >>> import json, pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "watermark.json"
    >>> _ = path.write_text(json.dumps({"version": 1, "strategy": "periodic", "window_ms": 1000}))
    >>> watcher = ConfigWatcher(path)
    >>> watcher.current.version
    1
    >>> _ = path.write_text(json.dumps({"version": 2, "strategy": "periodic", "window_ms": 500}))
    >>> print(watcher.poll().refused_reason)  # doctest: +ELLIPSIS
    version 2 changes the window (1000 ms, slide None -> 500 ms, slide None) under a running job; ...
    >>> watcher.current.version
    1

    """

    def __init__(self, path: str | os.PathLike[str], current: PipelineConfig | None = None) -> None:
        self.path = storage.Location.of(path)
        self._current = current if current is not None else load_config(path)
        self._seen: str | None = self._stamp()
        self._last_refusal: str | None = None

    @property
    def current(self) -> PipelineConfig:
        """The configuration in force."""
        return self._current

    def _stamp(self) -> str | None:
        """A hash of the content: a rewrite with the same size and modification time is a change too."""
        try:
            return hashlib.sha256(_read_limited(self.path)).hexdigest()
        except OSError:
            return None

    def poll(self) -> ConfigChange | None:
        """Check the file: ``None`` if unchanged, else the version applied or the reason for refusing it."""
        stamp = self._stamp()
        if stamp == self._seen:
            return None
        self._seen = stamp
        try:
            candidate = load_config(self.path)
        except ConfigError as exc:
            return self._refuse(f"invalid configuration, keeping version {self._current.version}: {exc}")
        running = self._current
        if candidate.version <= running.version:
            if candidate.to_dict() == running.to_dict():
                return None
            return self._refuse(
                f"version {candidate.version} is not newer than the running version {running.version}"
            )
        if changed := shape_change(running, candidate):
            return self._refuse(
                f"version {candidate.version} changes {changed} under a running job; its open windows were "
                "made by the running version: start a new output and checkpoint to use it"
            )
        self._current = candidate
        self._last_refusal = None
        return ConfigChange(applied=candidate)

    def roll_back(self, previous: PipelineConfig, reason: str) -> ConfigChange:
        """Put ``previous`` back in force: the running version failed to apply (refused for ``reason``).

        The file is not read again until it changes, so the failing version is not retried.
        """
        self._current = previous
        return self._refuse(reason)

    def _refuse(self, reason: str) -> ConfigChange:
        self._last_refusal = reason
        return ConfigChange(applied=None, refused_reason=reason)
