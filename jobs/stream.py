"""``python -m jobs.stream``: windowed aggregates through the adaptive watermark stage, into Delta tables.

A PySpark Structured Streaming job over a landing directory of JSON-lines (the embedded default), CSV or
Parquet files, or Spark's rate source for load tests. Each micro-batch, in ``foreachBatch``:

1. **Validate.** Landing files are read by Spark's reader with every field as text (every record keeps its
   file and record number); each field is checked and typed with native Spark expressions. Bad records go
   to the ``quarantine`` table with a reason from :data:`QUARANTINE_REASONS`; the job never crashes on
   them and never drops them.
2. **Watermark stage.** The narrow columns of the valid rows (partition, event time, arrival time, file,
   line) are collected to the driver as Arrow, put in arrival order (arrival time, file, line) and run
   through the per-partition generators (:mod:`jobs.stage`). Rows are labelled in Spark with a short
   ``CASE`` over the compressed lateness thresholds: no row-id join, no Python UDF.
3. **Windows.** Spark aggregates the on-time rows per (key, window); the driver merges those partials into
   the open windows and fires those the watermark closed (:mod:`jobs.windows`), into ``aggregates``.
4. **Late rows** go to ``late_events`` with the watermark they missed and by how much.
5. **Watermark log**: one row per partition per batch, into ``watermark_log``.

Exactly once: the Delta writes are idempotent per batch id (:class:`jobs.tables.DeltaTables`), and the
batch's ingestion time, configuration and the stage's state (generator snapshots, open windows) are
checkpointed per batch under ``CHECKPOINT/stage``, so a batch replayed after a crash recomputes exactly
the same rows.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from jobs.arrow_path import (
    NARROW_SCHEMA,
    LateThresholds,
    RecordChecks,
    local_path,
    plan_splits,
    run_aggregate,
    run_collect,
    spill_dir,
    splits_rdd,
)
from jobs.spark import arrow_frame, ship_code
from jobs.stage import label_thresholds, run_stage
from jobs.tables import (
    AGGREGATES_SCHEMA,
    LATE_SCHEMA,
    QUARANTINE_SCHEMA,
    TABLES,
    WATERMARK_LOG_SCHEMA,
    DeltaTables,
)
from jobs.windows import PARTIAL_SCHEMA, empty_partials, fire, flush, merge_partials
from monitoring.metrics import BatchObservation, JobMetrics, PartitionState
from watermark.combine import PartitionedWatermark
from watermark.config import ConfigError, ConfigWatcher, PipelineConfig, load_config, write_config
from watermark.evaluate import WindowSpec
from watermark.timeutil import NO_WATERMARK

log = logging.getLogger("jobs.stream")

#: Why a record is quarantined (the first that applies).
QUARANTINE_REASONS = (
    "record_too_long",
    "malformed_json",
    "malformed_csv",
    "missing_event_id",
    "missing_key",
    "missing_event_time",
    "bad_event_time",
    "event_time_before_1970",
    "event_time_in_future",
    "bad_arrival_time",
    "arrival_time_before_1970",
    "missing_value",
    "bad_value",
)

_CORRUPT = "__corrupt_record__"
#: Columns of a source record that give a slot's value instead of the record's own field (Kafka).
SOURCE_COLUMNS = {"partition": "_source_partition", "tp": "_source_arrival_ms"}

#: A CASE with more pieces than this labels rows with a broadcast join of the late rows' keys instead.
MAX_THRESHOLD_PIECES = 256


@dataclass(frozen=True)
class Fields:
    """Input field names (each renameable by a flag)."""

    event_id: str = "event_id"
    key: str = "key"
    partition: str = "partition"
    event_time: str = "event_time_ms"
    arrival_time: str = "arrival_time_ms"
    value: str = "value"


FORMATS = ("json", "csv", "parquet", "rate", "kafka")
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


@dataclass(frozen=True)
class KafkaOptions:
    """The Kafka source (``--format kafka``): one watermark partition per Kafka partition."""

    bootstrap_servers: str = ""
    topic: str = ""
    starting_offsets: str = "earliest"  # or "latest"; a restart resumes from the checkpoint's offsets
    max_offsets_per_trigger: int | None = None


@dataclass(frozen=True)
class JobOptions:
    """Everything a run of the job needs."""

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
    reader: str = (
        "arrow"  # JSON: "arrow" (pyarrow in executors; Spark's reader for unclean batches) or "spark"
    )
    app_id: str = "jobs.stream"
    progress: bool = True
    metrics_port: int | None = None  # serve Prometheus metrics on this port (0: any free port)
    metrics_host: str = "127.0.0.1"
    arrival_history: bool = True  # write the ``arrivals`` table (the re-tuning DAG's history)


# -- pure DataFrame transformations ----------------------------------------------------------------------
def number_records(batch: Any, files: list[str]) -> Any:
    """A micro-batch of the source to ``(file, line, <fields>, <corrupt>)`` with compact record keys.

    ``file`` becomes the index of the record's landing file in ``files`` (the batch's files, sorted by
    path, so it orders records like the path does) and ``line`` a ``monotonically_increasing_id``: it
    increases along each file, since the file source keeps a file's splits in order, and is the same in
    every action and on replay. :class:`RecordNumbers` turns it into the record's 0-based number in its file.
    """
    from pyspark.sql import functions as F

    pairs = [(spelling, i) for i, path in enumerate(files) for spelling in _uri_spellings(path)]
    index = F.create_map(*[F.lit(x) for pair in pairs for x in pair])
    line = F.col("_seq") if "_seq" in batch.columns else F.monotonically_increasing_id()
    return (
        batch.select(
            "*",
            F.element_at(index, F.col("file")).alias("_file"),
            line.alias("line"),
        )
        .drop("file")
        .withColumnRenamed("_file", "file")
    )


def _uri_spellings(path: str) -> list[str]:
    """A landing file's URI as the source log and ``_metadata.file_path`` may spell it."""
    if path.startswith("file:///"):
        return [path, "file:/" + path[len("file:///") :]]
    if path.startswith("file:/"):
        return [path, "file:///" + path[len("file:/") :]]
    return [path]


def logged_batch_files(checkpoint: str, batch_id: int) -> list[str] | None:
    """The landing files of micro-batch ``batch_id`` from the file source's log, or None when not found.

    The log (``query/sources/0``) has one file per batch (``N``, JSON lines after a version line) until
    Spark compacts it into ``N.compact`` files that hold every earlier entry with its ``batchId``.
    """
    root = Path(checkpoint) / "query" / "sources" / "0"
    candidates = [root / str(batch_id)]
    compacts = sorted(
        (int(p.name.split(".")[0]), p) for p in root.glob("*.compact") if p.name.split(".")[0].isdigit()
    )
    candidates += [p for n, p in compacts if n >= batch_id][:1]
    for path in candidates:
        if not path.exists():
            continue
        entries = [json.loads(line) for line in path.read_text().splitlines()[1:] if line.strip()]
        files = [e["path"] for e in entries if int(e.get("batchId", batch_id)) == batch_id]
        if files:
            return sorted(files)
    return None


class RecordNumbers:
    """0-based record number within its file for the record keys ``(file index, id)`` of one batch.

    Built from the keys of every record of the batch (valid or not); ids are unique across the batch.

    >>> import numpy as np
    >>> numbers = RecordNumbers(np.array([1, 0, 1, 0]), np.array([9, 3, 2**33, 4]))
    >>> numbers.lookup(np.array([2**33, 4, 9])).tolist()
    [1, 1, 0]
    """

    def __init__(self, file_ids: np.ndarray, ids: np.ndarray) -> None:
        fids = np.asarray(file_ids, np.int64)
        keys = np.asarray(ids, np.int64)
        order = np.lexsort((keys, fids))
        fsorted = fids[order]
        first = np.searchsorted(fsorted, fsorted, side="left")
        numbers = np.empty(order.size, np.int64)
        numbers[order] = np.arange(order.size) - first
        by_id = np.argsort(keys, kind="stable")
        self._ids = keys[by_id]
        self._numbers = numbers[by_id]

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        """Record numbers of ``ids`` (each must be a key the table was built from)."""
        pos = np.searchsorted(self._ids, np.asarray(ids, np.int64))
        return self._numbers[pos]


#: Slots whose values are epoch milliseconds, and the slot whose value is a double.
_TIME_SLOTS = ("event_time", "arrival_time")
_VALUE_SLOT = "value"


def typed_json_schema(fields: Fields) -> Any:
    """The schema JSON landing files are read with: times as LONG, the value as DOUBLE, the rest as text.

    A field name shared by slots of different kinds (say key and partition both ``device``) stays text. A
    record whose fields do not parse with these types lands whole in the corrupt-record column, and
    :func:`validate` re-reads it as text (:func:`text_schema`) to accept ISO-8601 times and give reasons.
    """
    from pyspark.sql import types as T

    kinds: dict[str, set[str]] = {}
    for slot, name in vars(fields).items():
        kinds.setdefault(name, set()).add(
            "long" if slot in _TIME_SLOTS else "double" if slot == _VALUE_SLOT else "text"
        )
    types = {"long": T.LongType(), "double": T.DoubleType(), "text": T.StringType()}
    return T.StructType(
        [T.StructField(n, types[next(iter(k))] if len(k) == 1 else T.StringType()) for n, k in kinds.items()]
        + [T.StructField(_CORRUPT, T.StringType())]
    )


def text_schema(names: list[str]) -> Any:
    """Every field as text, plus the corrupt-record column."""
    from pyspark.sql import types as T

    return T.StructType([T.StructField(n, T.StringType()) for n in [*names, _CORRUPT]])


def validate(
    records: Any,
    fields: Fields,
    *,
    ingest_ms: int,
    future_bound_ms: int,
    max_field_bytes: int,
    malformed: str = "malformed_json",
    reread_corrupt: bool = False,
    plans: dict[Any, list[list[Any]]] | None = None,
) -> Any:
    """Typed columns and ``reason`` (null for a valid row) from records.

    A field read as text is checked here (trimmed, then parsed, with a reason when it does not parse). A
    time field read as an integer, or a value read as a number, is taken as it is. With
    ``reread_corrupt`` (JSON read with :func:`typed_json_schema`), a record in the corrupt-record column is
    parsed again with every field as text, and validated as text: only a record that is not JSON at all is
    ``malformed``. The work is split in projections (re-read, text, typed values, reason) so that each
    expression is evaluated once per row. ``raw`` is the line of a malformed or re-read record and the
    record's fields re-serialised as JSON otherwise (only the quarantine action computes it).

    Building the expressions takes a few thousand calls into the JVM; ``plans``, a dict the caller keeps
    across batches, holds them for the next batch with the same input types and options.
    """
    from pyspark.sql import functions as F

    types = tuple((f.name, f.dataType.simpleString()) for f in records.schema.fields)
    key = (types, fields, future_bound_ms, max_field_bytes, malformed, reread_corrupt)
    steps = plans.get(key) if plans is not None else None
    if steps is None:
        steps = validation_steps(
            dict(types),
            fields,
            future_bound_ms=future_bound_ms,
            max_field_bytes=max_field_bytes,
            malformed=malformed,
            reread_corrupt=reread_corrupt,
        )
        if plans is not None:
            plans[key] = steps
    frame = records.select("*", F.lit(ingest_ms).alias("_ingest_ms"))
    for step in steps:
        frame = frame.select(*step)
    return frame


def validation_steps(
    types: dict[str, str],
    fields: Fields,
    *,
    future_bound_ms: int,
    max_field_bytes: int,
    malformed: str,
    reread_corrupt: bool,
) -> list[list[Any]]:
    """The projections :func:`validate` applies to records whose columns have these Spark types.

    ``types`` maps each column to its type's simple string; the ingestion time is the column ``_ingest_ms``.
    """
    from pyspark.sql import functions as F

    names = list(dict.fromkeys(vars(fields).values()))
    slots = {
        "event_id": fields.event_id,
        "key": fields.key,
        "partition": fields.partition,
        "te": fields.event_time,
        "tp": fields.arrival_time,
        "value": fields.value,
    }
    integral = ("tinyint", "smallint", "int", "bigint")
    typed_ok = {"te": integral, "tp": integral, "value": (*integral, "float", "double", "decimal")}
    # Slots the source itself gives (Kafka: the partition and the record timestamp), whatever the record says.
    sourced = {slot: column for slot, column in SOURCE_COLUMNS.items() if column in types}

    def is_text(name: str) -> bool:
        return types.get(name) == "string"

    def is_typed(slot: str) -> bool:
        return types.get(slots[slot], "").split("(")[0] in typed_ok.get(slot, ())

    def col(name: str) -> Any:
        return F.col(f"`{name}`")

    steps: list[list[Any]] = []
    retyped = F.col(_CORRUPT).isNotNull()
    if reread_corrupt:
        options = {"columnNameOfCorruptRecord": _CORRUPT}
        again = F.when(retyped, F.from_json(F.col(_CORRUPT), text_schema(names), options))
        steps.append([*[col(n) for n in types], F.col("_ingest_ms"), again.alias("_again")])

    def source_text(name: str) -> Any:
        """The field as text, when there is a text form (None for a typed field of a plain read)."""
        if not reread_corrupt:
            return col(name) if is_text(name) else None
        again = F.col("_again").getField(name)
        return F.when(retyped, again).otherwise(col(name)) if is_text(name) else again

    def text(value: Any) -> Any:
        value = F.trim(value)
        return F.when(value != "", value)

    lengths = [F.coalesce(F.octet_length(c), F.lit(0)) for c in map(source_text, names) if c is not None]
    too_long = (F.greatest(*lengths) if len(lengths) > 1 else lengths[0] if lengths else F.lit(0)) > F.lit(
        max_field_bytes
    )
    corrupt = F.col("_again").getField(_CORRUPT).isNotNull() if reread_corrupt else retyped
    raw = F.coalesce(F.col(_CORRUPT), F.to_json(F.struct(*[col(n) for n in names])))
    projected = [
        F.col("file"),
        F.col("line"),
        F.col("_ingest_ms"),
        raw.alias("raw"),
        too_long.alias("_too_long"),
        F.coalesce(corrupt, F.lit(False)).alias("_corrupt"),
    ]
    fast_slots = [slot for slot in typed_ok if is_typed(slot) or slot in sourced]
    for slot, name in slots.items():
        if slot in sourced:
            given_col = col(sourced[slot])
            projected.append(given_col.alias(f"_{slot}_v" if slot in fast_slots else f"_{slot}"))
            if slot in fast_slots:
                projected.append(F.lit(None).cast("string").alias(f"_{slot}"))
            continue
        source = source_text(name)
        if slot in fast_slots:
            projected.append(
                (F.when(~retyped, col(name)) if reread_corrupt else col(name)).alias(f"_{slot}_v")
            )
        elif source is None:
            source = col(name).cast("string")
        text_value = text(source) if source is not None else F.lit(None).cast("string")
        projected.append(text_value.alias(f"_{slot}"))
    steps.append(projected)

    def epoch_ms(value: Any) -> Any:
        """Epoch milliseconds from integral text, else from an ISO-8601 timestamp."""
        return F.coalesce(value.try_cast("long"), F.unix_millis(value.try_cast("timestamp")))

    def typed_value(slot: str, parse: Any) -> Any:
        """The typed value of ``slot``: as read when typed, else parsed from its text."""
        parsed = parse(F.col(f"_{slot}"))
        if slot not in fast_slots:
            return parsed
        return F.coalesce(F.col(f"_{slot}_v").cast("double" if slot == "value" else "long"), parsed)

    def given(slot: str) -> Any:
        """The field is there (not absent, null or blank)."""
        has_text = F.col(f"_{slot}").isNotNull()
        return has_text | F.col(f"_{slot}_v").isNotNull() if slot in fast_slots else has_text

    carried = ["file", "line", "_ingest_ms", "raw", "_too_long", "_corrupt", *[f"_{s}" for s in slots]]
    steps.append(
        [
            *[F.col(c) for c in carried],
            typed_value("te", epoch_ms).alias("event_time_ms"),
            F.coalesce(typed_value("tp", epoch_ms), F.when(~given("tp"), F.col("_ingest_ms"))).alias(
                "arrival_time_ms"
            ),
            typed_value("value", lambda v: v.try_cast("double")).alias("value"),
            given("te").alias("_te_given"),
            given("value").alias("_value_given"),
        ]
    )
    te, tp, value = F.col("event_time_ms"), F.col("arrival_time_ms"), F.col("value")
    finite = value.isNotNull() & ~F.isnan(value) & (F.abs(value) != float("inf"))
    reason = F.coalesce(
        F.when(F.col("_too_long"), F.lit("record_too_long")),
        F.when(F.col("_corrupt"), F.lit(malformed)),
        F.when(F.col("_event_id").isNull(), F.lit("missing_event_id")),
        F.when(F.col("_key").isNull(), F.lit("missing_key")),
        F.when(~F.col("_te_given"), F.lit("missing_event_time")),
        F.when(te.isNull(), F.lit("bad_event_time")),
        F.when(te < 0, F.lit("event_time_before_1970")),
        F.when(te > F.col("_ingest_ms") + F.lit(future_bound_ms), F.lit("event_time_in_future")),
        F.when(tp.isNull(), F.lit("bad_arrival_time")),
        F.when(tp < 0, F.lit("arrival_time_before_1970")),
        F.when(~F.col("_value_given"), F.lit("missing_value")),
        F.when(~finite, F.lit("bad_value")),
    )
    steps.append(
        [
            F.col("file"),
            F.col("line"),
            F.col("raw"),
            F.col("_event_id").alias("event_id"),
            F.col("_key").alias("key"),
            F.coalesce(F.col("_partition"), F.lit("")).alias("partition"),
            te,
            tp,
            value,
            reason.alias("reason"),
        ]
    )
    return steps


def assign_windows(rows: Any, window: WindowSpec) -> Any:
    """``rows`` with a ``window_start_ms`` column: one row per window holding the row's event time.

    Windows are aligned to epoch 0; with a slide, a row is repeated for every window that holds it.
    """
    from pyspark.sql import functions as F

    te = F.col("event_time_ms")
    step = window.step_ms
    last_start = te - F.pmod(te, F.lit(step))
    if window.slide_ms is None or window.slide_ms == window.window_ms:
        return rows.withColumn("window_start_ms", last_start)
    back = (-(-window.window_ms // step) - 1) * step
    return rows.withColumn(
        "window_start_ms", F.explode(F.sequence(last_start - F.lit(back), last_start, F.lit(step)))
    ).filter(F.col("window_start_ms") > te - F.lit(window.window_ms))


def window_partials(rows: Any, window: WindowSpec) -> Any:
    """Partial aggregates (count, sum, min, max) of ``rows`` per key and window, aligned to epoch 0."""
    from pyspark.sql import functions as F

    grouped = (
        assign_windows(rows, window)
        .groupBy("key", "window_start_ms")
        .agg(
            F.count(F.lit(1)).alias("count"),
            F.sum("value").alias("sum"),
            F.min("value").alias("min"),
            F.max("value").alias("max"),
        )
    )
    return grouped.withColumn("window_end_ms", F.col("window_start_ms") + F.lit(window.window_ms)).select(
        *PARTIAL_SCHEMA.names
    )


def late_expression(
    keys: pa.Table, order: np.ndarray, late: np.ndarray, te: np.ndarray, wm_sorted: np.ndarray | None = None
) -> Any | None:
    """Spark column ``event_time_ms < threshold(arrival key)`` reproducing the stage's labels, or None.

    ``keys`` are the narrow rows (``arrival_time_ms``, ``file``, ``line``), ``order`` their arrival order,
    ``late`` and ``te`` per narrow row. None when the thresholds need more than
    :data:`MAX_THRESHOLD_PIECES` pieces (the caller then joins on the late rows' keys).
    """
    from pyspark.sql import functions as F

    th = label_thresholds(te[order], late[order], wm_sorted)
    if th.starts.size > MAX_THRESHOLD_PIECES:
        return None
    tp = keys.column("arrival_time_ms").to_numpy()[order]
    files = keys.column("file")
    lines = keys.column("line").to_numpy()[order]
    starts, values = th.starts.tolist(), th.values.tolist()
    arrival = "named_struct('t', CAST(arrival_time_ms AS BIGINT), 'f', file, 'l', CAST(line AS BIGINT))"

    def at_or_after(k: int) -> str:
        """``arrival key >= key of piece k's first row``, on the arrival time alone when that decides it.

        When piece ``k`` starts at the first arrival of its arrival time, no earlier row shares that time,
        so comparing times is exact and much cheaper than comparing (time, file, line) structs.
        """
        first = starts[k]
        if first == 0 or tp[first - 1] < tp[first]:
            return f"arrival_time_ms >= {int(tp[first])}L"
        name = files[int(order[first])].as_py()
        if isinstance(name, str):
            name = "'" + name.replace("\\", "\\\\").replace("'", "\\'") + "'"
        return f"{arrival} >= named_struct('t', {int(tp[first])}L, 'f', {name}, 'l', {int(lines[first])}L)"

    def tree(lo: int, hi: int) -> str:
        """Threshold of pieces lo..hi-1 as a balanced CASE: log2(pieces) comparisons per row."""
        if hi - lo == 1:
            return f"{values[lo]}L"
        mid = (lo + hi) // 2
        return f"CASE WHEN {at_or_after(mid)} THEN {tree(mid, hi)} ELSE {tree(lo, mid)} END"

    threshold = F.expr(tree(0, len(starts)))  # one expression, one call into the JVM
    return F.col("event_time_ms") < threshold


# -- per-batch state under the checkpoint ----------------------------------------------------------------
@dataclass
class SavedStage:
    """The stage's state after a batch."""

    watermark: PartitionedWatermark
    open_windows: pa.Table
    config_version: int
    closed_until_ms: int = NO_WATERMARK  # end of the last window --flush-at-end closed (a watermark floor)


class StageStore:
    """Batch-versioned stage state under ``CHECKPOINT/stage``.

    ``batch-N.json`` (ingestion time, configuration) is written before batch N is processed, ``state-N/``
    (generator snapshots, open windows) after it.
    """

    keep = 3

    def __init__(self, checkpoint: str) -> None:
        self.root = Path(checkpoint) / "stage"
        self.root.mkdir(parents=True, exist_ok=True)

    def _meta_path(self, batch_id: int) -> Path:
        return self.root / f"batch-{batch_id:012d}.json"

    def batch_meta(self, batch_id: int, config: PipelineConfig) -> tuple[int, PipelineConfig]:
        """The batch's ingestion time and configuration: fixed at its first attempt, reused on replays."""
        path = self._meta_path(batch_id)
        if path.exists():
            meta = json.loads(path.read_text())
            return int(meta["ingest_ms"]), PipelineConfig.from_dict(meta["config"])
        ingest_ms = int(time.time() * 1000)
        tmp = path.with_name("." + path.name)
        tmp.write_text(json.dumps({"ingest_ms": ingest_ms, "config": config.to_dict()}))
        os.replace(tmp, path)
        return ingest_ms, config

    def _states(self) -> list[tuple[int, Path]]:
        out = []
        for p in self.root.glob("state-*"):
            if p.is_dir() and (p / "wm.json").exists():
                out.append((int(p.name.split("-")[1]), p))
        return sorted(out)

    def latest_batch(self) -> int | None:
        """Batch id of the newest saved state."""
        states = self._states()
        return states[-1][0] if states else None

    def load_before(self, batch_id: int) -> SavedStage | None:
        """State of the newest batch before ``batch_id``."""
        candidates = [(b, p) for b, p in self._states() if b < batch_id]
        if not candidates:
            return None
        _, path = candidates[-1]
        snap = json.loads((path / "wm.json").read_text())
        open_windows = pq.read_table(path / "open.parquet").cast(PARTIAL_SCHEMA)
        return SavedStage(
            PartitionedWatermark.from_snapshot(snap["watermark"]),
            open_windows,
            int(snap["config_version"]),
            int(snap.get("closed_until_ms", NO_WATERMARK)),
        )

    def save(
        self,
        batch_id: int,
        watermark: PartitionedWatermark,
        open_windows: pa.Table,
        version: int,
        closed_until_ms: int = NO_WATERMARK,
    ) -> None:
        """Write batch ``batch_id``'s state atomically (a directory renamed into place); keep the last few."""
        final = self.root / f"state-{batch_id:012d}"
        tmp = self.root / f".state-{batch_id:012d}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        (tmp / "wm.json").write_text(
            json.dumps(
                {
                    "watermark": watermark.snapshot(),
                    "config_version": version,
                    "closed_until_ms": closed_until_ms,
                }
            )
        )
        pq.write_table(open_windows, tmp / "open.parquet")
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        states = self._states()
        for _, old in states[: -self.keep]:
            shutil.rmtree(old, ignore_errors=True)


# -- where a batch's rows come from -----------------------------------------------------------------------
class SparkRows:
    """A batch read by Spark's reader: validated in Spark, typed columns cached for the batch's actions."""

    path = "spark"
    collect_seconds = 0.0  # the collect happens in narrow()

    def __init__(self, spark: Any, rows: Any, parsed: Any, pool: ThreadPoolExecutor) -> None:
        self.spark, self.rows, self.parsed, self.pool = spark, rows, parsed, pool

    def narrow(self) -> pa.Table:
        """``file, line, valid, partition, event_time_ms, arrival_time_ms`` of every record."""
        parsed = self.parsed
        return parsed.select(
            "file",
            "line",
            parsed.reason.isNull().alias("valid"),
            "partition",
            "event_time_ms",
            "arrival_time_ms",
        ).toArrow()

    def quarantined(self) -> pa.Table:
        """``raw, reason, file, line`` of the invalid records."""
        rows = self.rows
        return rows.filter(rows.reason.isNotNull()).select("raw", "reason", "file", "line").toArrow()

    def aggregate(
        self, narrow: pa.Table, result: Any, window: WindowSpec, report: BatchReport, tick: float
    ) -> tuple[list[pa.Table], pa.Table, float]:
        """Partials of the on-time rows and the late rows in full (Spark labels them by thresholds)."""
        parsed = self.parsed
        valid = parsed.filter(parsed.reason.isNull())
        te = narrow.column("event_time_ms").to_numpy()
        late_expr = (
            late_expression(narrow, result.order, result.late, te, result.wm_at_arrival)
            if result.n_late
            else None
        )
        late_keys = None
        if result.n_late and late_expr is None:
            keys = narrow.select(["file", "line"]).filter(pa.array(result.late))
            late_keys = arrow_frame(self.spark, keys)
        on_time = valid
        if late_expr is not None:
            on_time = valid.filter(~late_expr)
        elif late_keys is not None:
            from pyspark.sql import functions as F

            on_time = valid.join(F.broadcast(late_keys), ["file", "line"], "left_anti")
        tick = report.mark("label", tick)
        # The late rows are collected while Spark aggregates the on-time ones: two jobs at once keep the
        # cores busy through each other's scheduling gaps.
        late_rows = self.pool.submit(_collect_late, valid, late_expr, late_keys) if result.n_late else None
        partials = window_partials(on_time, window).toArrow()
        tick = report.mark("partials", tick)
        late = late_rows.result() if late_rows is not None else LATE_SCHEMA.empty_table()
        tick = report.mark("late", tick)
        return [partials], late, tick


def _collect_late(valid: Any, late_expr: Any, late_keys: Any) -> pa.Table:
    cols = ["event_id", "key", "partition", "event_time_ms", "arrival_time_ms", "value", "file", "line"]
    if late_expr is not None:
        return valid.filter(late_expr).select(*cols).toArrow()
    return valid.join(late_keys, ["file", "line"], "inner").select(*cols).toArrow()


class ArrowRows:
    """A clean JSON batch on the Arrow path (:mod:`jobs.arrow_path`), after its first pass."""

    path = "arrow"

    def __init__(
        self, rdd: Any, checks: RecordChecks, job: str, batch_id: int, narrow: pa.Table | None
    ) -> None:
        self.rdd, self.checks, self.job, self.batch_id = rdd, checks, job, batch_id
        self._narrow = narrow
        self.collect_seconds = 0.0  # the first pass, before the handler's phases start

    def narrow(self) -> pa.Table:
        """``file, line, valid, partition, event_time_ms, arrival_time_ms`` of every record (all valid)."""
        narrow = self._narrow
        if narrow is None:
            return NARROW_SCHEMA.empty_table()
        return narrow.add_column(2, "valid", pa.array(np.ones(narrow.num_rows, bool)))

    def quarantined(self) -> pa.Table:
        """Never called: a batch on the Arrow path has no invalid record."""
        msg = "a batch on the Arrow path has no invalid record"
        raise AssertionError(msg)

    def aggregate(
        self, narrow: pa.Table, result: Any, window: WindowSpec, report: BatchReport, tick: float
    ) -> tuple[list[pa.Table], pa.Table, float]:
        """Second pass: executors label rows by the stage's thresholds and aggregate the on-time ones."""
        te = narrow.column("event_time_ms").to_numpy()
        th = label_thresholds(te[result.order], result.late[result.order], result.wm_at_arrival)
        thresholds = LateThresholds.from_stage(narrow, result.order, th.starts, th.values)
        tick = report.mark("label", tick)
        partials, late, report.reparsed = run_aggregate(
            self.rdd, self.checks, self.job, self.batch_id, thresholds, window.window_ms, window.step_ms
        )
        tick = report.mark("partials", tick)
        return partials, late, tick


# -- the foreachBatch handler ----------------------------------------------------------------------------
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

    def mark(self, phase: str, since: float) -> float:
        """Add the time since ``since`` to ``phase``; returns now."""
        now = time.perf_counter()
        self.phases[phase] = self.phases.get(phase, 0.0) + now - since
        return now


class BatchHandler:
    """``foreachBatch`` target: runs the watermark stage and writes the tables for one micro-batch."""

    def __init__(self, spark: Any, options: JobOptions, metrics: JobMetrics | None = None) -> None:
        self.spark = spark
        self.options = options
        self.metrics = metrics
        self.tables = DeltaTables(options.output, options.app_id, spark)
        self._writers = ThreadPoolExecutor(max_workers=len(TABLES), thread_name_prefix="delta-writes")
        self.store = StageStore(options.checkpoint)
        self.watcher = ConfigWatcher(options.config_path, options.config) if options.config_path else None
        self.reports: list[BatchReport] = []
        self._files: list[str] = []
        self._closed_until = NO_WATERMARK
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="late-rows")
        self._numbers: RecordNumbers | None = None
        self._plans: dict[Any, list[list[Any]]] = {}  # validate()'s expressions, built once per run
        self._arrow_off = ""  # why the Arrow path is off for the rest of the run (empty: it is on)

    def _config(self) -> PipelineConfig:
        if self.watcher is None:
            return self.options.config
        change = self.watcher.poll()
        if change is not None and change.refused_reason:
            log.warning("configuration refused: %s", change.refused_reason)
            if self.metrics is not None:
                self.metrics.config_refused.inc()
        elif change is not None and change.applied is not None:
            log.warning("configuration version %d applies from the next batch", change.applied.version)
        return self.watcher.current

    def __call__(self, batch: Any, batch_id: int) -> None:
        """Process one micro-batch of landing files (idempotent per ``batch_id``)."""
        started = time.time()
        tick = time.perf_counter()
        ingest_ms, config = self.store.batch_meta(batch_id, self._config())
        saved = self.store.load_before(batch_id)
        if saved is None:
            watermark = PartitionedWatermark(
                config.strategy, config.params, idle_timeout_ms=config.idle_timeout_ms
            )
            open_windows, version = empty_partials(), config.version
            self._closed_until = NO_WATERMARK
        else:
            watermark, open_windows, version = saved.watermark, saved.open_windows, saved.config_version
            self._closed_until = saved.closed_until_ms
        if version != config.version:
            watermark = watermark.reconfigured(
                config.strategy, config.params, idle_timeout_ms=config.idle_timeout_ms
            )
            log.warning(
                "batch %d: configuration version %d in force (was %d)", batch_id, config.version, version
            )
        opts = self.options
        if opts.format == "rate":
            files: list[str] | None = [RATE_FILE]
        elif opts.format == "kafka":
            files = kafka_batch_files(batch)
        else:
            files = logged_batch_files(opts.checkpoint, batch_id)
        if self.metrics is not None:
            self.metrics.batch_started(batch_id, oldest_input_ms(files, started))
        arrow = self._arrow_rows(files, batch_id, ingest_ms)
        if arrow is not None:
            self._process(arrow, files, batch_id, ingest_ms, config, watermark, open_windows, started, tick)
            return
        if files is None:  # not in the source log (another source layout): ask Spark, at one more action
            files = sorted(r[0] for r in batch.select("file").distinct().collect())
        records = number_records(batch, files)
        rows = validate(
            records,
            opts.fields,
            ingest_ms=ingest_ms,
            future_bound_ms=opts.future_bound_ms,
            max_field_bytes=opts.max_field_bytes,
            malformed="malformed_json" if opts.format == "kafka" else f"malformed_{opts.format}",
            reread_corrupt=opts.format in ("json", "kafka"),
            plans=self._plans,
        )
        # The typed columns are kept for the batch's few actions, so that the files are parsed once; the
        # quarantine action (only when the batch has invalid records) re-reads them for the raw text.
        parsed = rows.drop("raw").persist()
        try:
            source = SparkRows(self.spark, rows, parsed, self._pool)
            self._process(source, files, batch_id, ingest_ms, config, watermark, open_windows, started, tick)
        finally:
            parsed.unpersist()

    def _arrow_rows(self, files: list[str] | None, batch_id: int, ingest_ms: int) -> ArrowRows | None:
        """The batch on the Arrow path after its first pass, or None when Spark's reader must read it."""
        opts = self.options
        if opts.reader != "arrow" or opts.format != "json" or not files or self._arrow_off:
            return None
        names = list(vars(opts.fields).values())
        if len(set(names)) != len(names):
            return None  # a field name shared by two slots: the Spark path's typing rules apply
        paths = [local_path(f) for f in files]
        if any(p is None for p in paths):
            return None
        try:
            sizes = [os.path.getsize(p) for p in paths if p is not None]
        except OSError:
            return None
        f = opts.fields
        checks = RecordChecks(
            f.event_id,
            f.key,
            f.partition,
            f.event_time,
            f.arrival_time,
            f.value,
            ingest_ms=ingest_ms,
            future_bound_ms=opts.future_bound_ms,
            max_field_bytes=opts.max_field_bytes,
        )
        splits = plan_splits(
            [p for p in paths if p is not None], sizes, self.spark.sparkContext.defaultParallelism
        )
        rdd = splits_rdd(self.spark, splits)
        tick = time.perf_counter()
        try:
            collected = run_collect(rdd, splits, checks, opts.checkpoint, batch_id)
        except Exception as exc:  # the executors cannot run the Arrow path (say, no pyarrow there)
            self._arrow_off = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:300]}"
            log.warning(
                "the Arrow path failed (%s); this run reads JSON with Spark's reader from now on",
                self._arrow_off,
            )
            return None
        if not collected.clean:
            log.info("batch %d: %s; read with Spark's JSON reader", batch_id, collected.why)
            shutil.rmtree(spill_dir(opts.checkpoint), ignore_errors=True)  # this machine's kept splits
            return None
        rows = ArrowRows(rdd, checks, opts.checkpoint, batch_id, collected.narrow)
        rows.collect_seconds = time.perf_counter() - tick
        return rows

    def _process(
        self,
        source: SparkRows | ArrowRows,
        files: list[str],
        batch_id: int,
        ingest_ms: int,
        config: PipelineConfig,
        watermark: PartitionedWatermark,
        open_windows: pa.Table,
        started: float,
        prepared: float,
    ) -> None:
        opts = self.options
        tick = time.perf_counter()
        prepare = tick - prepared
        narrow_all = source.narrow()
        if narrow_all.column("file").null_count:
            msg = (
                f"batch {batch_id}: records whose landing file is not among the batch's files {files[:3]}..."
            )
            raise RuntimeError(msg)
        valid_mask = np.asarray(narrow_all.column("valid").to_numpy(zero_copy_only=False), dtype=bool)
        narrow = narrow_all.filter(pa.array(valid_mask)).drop_columns(["valid"])
        self._files = files
        self._numbers = RecordNumbers(
            narrow_all.column("file").to_numpy(), narrow_all.column("line").to_numpy()
        )
        report = BatchReport(batch_id=batch_id, rows=narrow_all.num_rows, config_version=config.version)
        report.phases["prepare"] = prepare - source.collect_seconds
        report.phases["collect"] = source.collect_seconds
        tick = report.mark("collect", tick)
        report.quarantined = int((~valid_mask).sum())
        rows_out: dict[str, Any] = {
            "quarantine": self._quarantine_rows(source, report.quarantined, batch_id, ingest_ms)
        }
        tick = report.mark("quarantine", tick)

        if narrow.num_rows:
            result = run_stage(watermark, narrow, config.straggler_ms, self._closed_until)
            tick = report.mark("stage", tick)
            partials, late, tick = source.aggregate(narrow, result, config.window, report, tick)
            if late.num_rows != result.n_late:
                msg = f"batch {batch_id}: {late.num_rows} late rows labelled, the stage found {result.n_late}"
                raise RuntimeError(msg)
            open_windows = merge_partials(open_windows, *partials)
            fired, open_windows = fire(open_windows, result.wm_after, result.arrival_ms)
            tick = report.mark("windows", tick)
            report.late = result.n_late
            rows_out["late_events"] = self._late_rows(late, narrow, result, batch_id, ingest_ms)
            log_rows = self._log_rows(watermark, narrow, result, batch_id, config, ingest_ms)
            rows_out["watermark_log"] = pa.Table.from_pylist(log_rows, schema=WATERMARK_LOG_SCHEMA)
            if opts.arrival_history:
                rows_out["arrivals"] = self._arrival_rows(
                    narrow.take(pa.array(result.order)), batch_id, ingest_ms
                )
        else:
            result, log_rows = None, []
            fired = flush(empty_partials())
        rows_out["aggregates"] = _aggregate_rows(fired, batch_id, config.version)
        # One Spark job per table with rows, run side by side: each is a delta-spark append that Delta
        # makes idempotent (txnAppId = the job's application id, txnVersion = the batch id).
        self.tables.append_all(rows_out, batch_id, self._writers)
        self.store.save(batch_id, watermark, open_windows, config.version, self._closed_until)
        report.mark("write", tick)
        report.path = source.path
        report.fired = fired.num_rows
        report.open_windows = open_windows.num_rows
        report.watermark_ms = watermark.watermark_ms
        report.seconds = time.time() - started
        self.reports.append(report)
        if self.metrics is not None:
            self.metrics.batch_done(observation(report, result, narrow, fired, log_rows, config))
        if opts.progress:
            wm = "none" if report.watermark_ms == NO_WATERMARK else f"{report.watermark_ms}"
            print(
                f"batch {batch_id}: {report.rows:,} rows ({report.path} reader), "
                f"{report.quarantined:,} quarantined, "
                f"{report.late:,} late, "
                f"{report.fired:,} windows fired, {report.open_windows:,} open, watermark {wm}, "
                f"config v{report.config_version}, {report.seconds:.2f} s",
                file=sys.stderr,
                flush=True,
            )

    def _record_keys(self, table: pa.Table) -> tuple[pa.Array, pa.Array]:
        """``(file path, record number)`` columns for the compact record keys of ``table``."""
        assert self._numbers is not None
        paths = pa.array(self._files, pa.string()).take(table.column("file").combine_chunks())
        if self.options.format == "kafka":  # a record's number is its offset in its partition
            return paths, table.column("line").combine_chunks().cast(pa.int64())
        return paths, pa.array(self._numbers.lookup(table.column("line").to_numpy()), pa.int64())

    def _quarantine_rows(
        self, source: SparkRows | ArrowRows, count: int, batch_id: int, ingest_ms: int
    ) -> pa.Table:
        if count:
            bad = source.quarantined()
            n = bad.num_rows
            paths, lines = self._record_keys(bad)
            bad = pa.table(
                {
                    "raw": bad.column("raw"),
                    "reason": bad.column("reason"),
                    "file": paths,
                    "line": lines,
                    "batch_id": np.full(n, batch_id, np.int64),
                    "ingested_at_ms": np.full(n, ingest_ms, np.int64),
                }
            )
        else:
            bad = QUARANTINE_SCHEMA.empty_table()
        return bad

    def _late_rows(
        self, late: pa.Table, narrow: pa.Table, result: Any, batch_id: int, ingest_ms: int
    ) -> pa.Table:
        if not late.num_rows:
            return LATE_SCHEMA.empty_table()
        cols = late.schema.names
        # The watermark each late row missed, by its record id (ids are unique within the batch).
        ids = narrow.column("line").to_numpy()
        by_id = np.argsort(ids, kind="stable")
        pos = by_id[np.searchsorted(ids[by_id], late.column("line").to_numpy())]
        wm = result.wm_missed[pos]
        te = late.column("event_time_ms").to_numpy()
        n = late.num_rows
        paths, lines = self._record_keys(late)
        return pa.table(
            {
                **{c: late.column(c) for c in cols[:6]},
                "watermark_ms": wm,
                "late_by_ms": wm - te,
                "file": paths,
                "line": lines,
                "batch_id": np.full(n, batch_id, np.int64),
                "reconciled": np.zeros(n, bool),
                "ingested_at_ms": np.full(n, ingest_ms, np.int64),
            }
        )

    def _arrival_rows(self, ordered: pa.Table, batch_id: int, ingest_ms: int) -> pa.Table:
        n = ordered.num_rows
        return pa.table(
            {
                "partition": ordered.column("partition"),
                "event_time_ms": ordered.column("event_time_ms"),
                "arrival_time_ms": ordered.column("arrival_time_ms"),
                "batch_id": np.full(n, batch_id, np.int64),
                "ingested_at_ms": np.full(n, ingest_ms, np.int64),
            }
        )

    def _log_rows(
        self,
        watermark: PartitionedWatermark,
        narrow: pa.Table,
        result: Any,
        batch_id: int,
        config: PipelineConfig,
        ingest_ms: int,
    ) -> list[dict[str, Any]]:
        encoded = narrow.column("partition").combine_chunks().dictionary_encode()
        part = encoded.indices.to_numpy()
        index = {k: i for i, k in enumerate(encoded.dictionary.to_pylist())}
        te = narrow.column("event_time_ms").to_numpy()
        active = set(watermark.active_partitions())
        rows = []
        now = int(time.time() * 1000)
        for key, gen in watermark.generators.items():
            mine = part == index.get(key, -1)
            diag = gen.diagnostics()
            rows.append(
                {
                    "batch_id": batch_id,
                    "partition": str(key),
                    "partition_watermark_ms": gen.watermark_ms,
                    "global_watermark_ms": watermark.watermark_ms,
                    "max_event_time_ms": int(te[mine].max()) if mine.any() else None,
                    "events": int(mine.sum()),
                    "late": int((result.late & mine).sum()),
                    "stragglers": int(((result.classes == 1) & mine).sum()),
                    "learned_delay_ms": diag.get("delay_ms"),
                    "sensitivity": diag.get("sensitivity"),
                    "drifts": diag.get("drifts"),
                    "holds_back": key == watermark.holdback_partition,
                    "active": key in active,
                    "strategy": config.strategy,
                    "config_version": config.version,
                    "ingested_at_ms": ingest_ms,
                    "processed_at_ms": now,
                }
            )
        return rows


def oldest_input_ms(files: list[str] | None, started_s: float) -> int:
    """When the batch's oldest input entered the system: its oldest local landing file's modification time.

    Input that is not a local file (the rate source, object stores) counts from the batch's start.
    """
    oldest = started_s
    for uri in files or []:
        path = local_path(uri)
        if path is not None:
            try:
                oldest = min(oldest, os.path.getmtime(path))
            except OSError:
                pass
    return int(oldest * 1000)


def observation(
    report: BatchReport,
    result: Any,
    narrow: pa.Table,
    fired: pa.Table,
    log_rows: list[dict[str, Any]],
    config: PipelineConfig,
) -> BatchObservation:
    """What the metrics need from a finished batch (every row in exactly one outcome)."""
    on_time = straggler = 0
    ingestion_clock = NO_WATERMARK
    if result is not None:
        straggler = result.n_stragglers
        on_time = narrow.num_rows - result.n_late - straggler
        if result.arrival_ms.size:
            ingestion_clock = int(result.arrival_ms[-1])
    by_watermark = ~np.asarray(fired.column("flushed").to_numpy(zero_copy_only=False), dtype=bool)
    partitions = [
        PartitionState(
            partition=row["partition"],
            watermark_ms=row["partition_watermark_ms"],
            learned_delay_ms=row["learned_delay_ms"],
            sensitivity=row["sensitivity"],
            drifts=row["drifts"],
            holds_back=row["holds_back"],
            active=row["active"],
        )
        for row in log_rows
    ]
    return BatchObservation(
        batch_id=report.batch_id,
        on_time=on_time,
        straggler=straggler,
        late=report.late,
        quarantined=report.quarantined,
        watermark_ms=report.watermark_ms,
        ingestion_clock_ms=ingestion_clock,
        partitions=partitions,
        emit_latency_ms=fired.column("emit_latency_ms").to_numpy(zero_copy_only=False)[by_watermark].tolist(),
        trigger_delay_ms=fired.column("trigger_delay_ms")
        .to_numpy(zero_copy_only=False)[by_watermark]
        .tolist(),
        flushed_windows=int((~by_watermark).sum()),
        open_windows=report.open_windows,
        config_version=config.version,
        strategy=config.strategy,
        late_slo_pct=config.late_slo_pct,
    )


def _aggregate_rows(fired: pa.Table, batch_id: int, version: int) -> pa.Table:
    n = fired.num_rows
    now = int(time.time() * 1000)
    return (
        pa.table(
            {
                **{name: fired.column(name) for name in fired.schema.names},
                "revision": np.zeros(n, np.int64),
                "late_count": np.zeros(n, np.int64),
                "reconciled_batch_id": pa.nulls(n, pa.int64()),
                "batch_id": np.full(n, batch_id, np.int64),
                "config_version": np.full(n, version, np.int64),
                "emitted_at_ms": np.full(n, now, np.int64),
            }
        )
        .select(AGGREGATES_SCHEMA.names)
        .cast(AGGREGATES_SCHEMA)
    )


# -- running ---------------------------------------------------------------------------------------------
def _oldest_file(directory: str) -> Path | None:
    files = [p for p in Path(directory).iterdir() if p.is_file() and not p.name.startswith((".", "_"))]
    return min(files, key=lambda p: (p.stat().st_mtime_ns, p.name)) if files else None


def csv_columns(directory: str, default: list[str]) -> list[str]:
    """Column names of a CSV landing directory: the header of its oldest file, or ``default``."""
    import csv

    first = _oldest_file(directory)
    if first is None:
        return default
    with first.open(newline="", encoding="utf-8", errors="replace") as handle:
        header = next(csv.reader(handle), None)
    if not header:
        msg = f"{first}: a CSV landing file must start with a header line"
        raise ValueError(msg)
    return header


def source_stream(spark: Any, options: JobOptions) -> Any:
    """The input as a stream of records: ``file`` plus every input field as text (and the corrupt record).

    JSON is read with times as integers and the value as a number (:func:`typed_json_schema`); a record
    that does not fit lands in the corrupt-record column and :func:`validate` re-reads it as text. CSV is
    read with every field as text; Parquet keeps its schema (taken from the oldest landing file). Either
    way :func:`validate` checks the types, with a reason. The rate source generates records for load
    tests (see :class:`RateOptions`).
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    names = list(dict.fromkeys(vars(options.fields).values()))
    if options.format == "rate":
        return rate_stream(spark, options.rate, options.fields)
    if options.format == "kafka":
        return kafka_stream(spark, options.kafka, options.fields)
    text = T.StringType()
    if options.format == "json":
        schema = typed_json_schema(options.fields)
        reader = spark.readStream.format("json").schema(schema)
    elif options.format == "csv":
        columns = csv_columns(options.input, names)
        schema = T.StructType([T.StructField(n, text) for n in [*columns, _CORRUPT]])
        # enforceSchema=false: Spark checks every file's header against the first one's (by position).
        reader = (
            spark.readStream.format("csv")
            .schema(schema)
            .option("header", "true")
            .option("enforceSchema", "false")
        )
    elif options.format == "parquet":
        first = _oldest_file(options.input)
        if first is not None:
            schema = spark.read.parquet(str(first)).schema
        else:
            schema = T.StructType([T.StructField(n, text) for n in names])
        reader = spark.readStream.format("parquet").schema(schema)
    else:
        msg = f"--format must be one of {', '.join(FORMATS)}, got {options.format!r}"
        raise ValueError(msg)
    if options.format != "parquet":
        reader = reader.option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", _CORRUPT)
    if options.max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", str(options.max_files_per_trigger))
    stream = reader.load(options.input)
    present = set(stream.columns)

    def field(name: str) -> Any:
        if name in present:  # as read: validate() checks text fields and takes typed ones as they are
            return F.col(f"`{name}`")
        return F.lit(None).cast("string").alias(name)

    corrupt = F.col(_CORRUPT) if _CORRUPT in present else F.lit(None).cast("string").alias(_CORRUPT)
    return stream.select(F.col("_metadata.file_path").alias("file"), *[field(n) for n in names], corrupt)


def rate_stream(spark: Any, rate: RateOptions, fields: Fields) -> Any:
    """Spark's rate source as records, for load tests.

    The sequence number is the event id and the record key; key and delay are hashed from it; arrival
    time is the rate source's timestamp and event time the arrival minus the delay.
    """
    from pyspark.sql import functions as F

    stream = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", str(rate.rows_per_second))
        .option("numPartitions", str(rate.num_partitions))
        .load()
    )
    seq = F.col("value")
    tp = F.unix_millis("timestamp")
    delay = F.pmod(F.xxhash64(seq, F.lit("delay")), F.lit(rate.max_delay_ms + 1))
    values = {
        "event_id": seq.cast("string"),
        "key": F.concat(F.lit("k"), F.pmod(F.xxhash64(seq, F.lit("key")), F.lit(rate.keys)).cast("string")),
        "partition": F.pmod(seq, F.lit(rate.partitions)).cast("string"),
        "event_time_ms": tp - delay,
        "arrival_time_ms": tp,
        "value": F.pmod(seq, F.lit(1000)) / F.lit(10.0),
    }
    slots = dict(zip(vars(Fields()).values(), vars(fields).values(), strict=True))  # default -> given name
    named = {name: values[default] for default, name in slots.items()}
    return stream.select(
        F.lit(RATE_FILE).alias("file"),
        *[column.alias(name) for name, column in named.items()],
        F.lit(None).cast("string").alias(_CORRUPT),
        seq.alias("_seq"),
    )


def kafka_stream(spark: Any, kafka: KafkaOptions, fields: Fields) -> Any:
    """A Kafka topic as records: each value a JSON event, parsed as landing files are.

    ``file`` is ``TOPIC/PARTITION`` and the record's number (``_seq``) its offset, so a quarantined value
    names its topic, partition and offset. The watermark partition is the Kafka partition and the arrival
    time the record's timestamp (:data:`SOURCE_COLUMNS`), whatever the value holds: give production topics
    ``message.timestamp.type=LogAppendTime`` so that it is the broker's ingestion time. Spark keeps the
    offsets in the query's checkpoint, so a replayed batch reads the same records.
    """
    from pyspark.sql import functions as F

    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("subscribe", kafka.topic)
        .option("startingOffsets", kafka.starting_offsets)
        .option("failOnDataLoss", "true")
    )
    if kafka.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(kafka.max_offsets_per_trigger))
    stream = reader.load()
    value = F.col("value").cast("string")
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT}
    parsed = F.from_json(value, typed_json_schema(fields), options).alias("_rec")
    names = list(dict.fromkeys(vars(fields).values()))
    # A value that is not a JSON object at all parses to null: it is kept whole as a corrupt record.
    corrupt = F.coalesce(
        F.col(f"_rec.{_CORRUPT}"), F.when(F.col("_rec").isNull(), F.coalesce(value, F.lit("")))
    )
    return stream.select(
        F.concat_ws("/", F.col("topic"), F.col("partition").cast("string")).alias("file"),
        parsed,
        F.col("partition").cast("string").alias(SOURCE_COLUMNS["partition"]),
        F.unix_millis(F.col("timestamp")).alias(SOURCE_COLUMNS["tp"]),
        F.col("offset").alias("_seq"),
        value.alias("_value"),
    ).select(
        "file",
        *[F.col(f"_rec.`{n}`").alias(n) for n in names],
        corrupt.alias(_CORRUPT),
        SOURCE_COLUMNS["partition"],
        SOURCE_COLUMNS["tp"],
        "_seq",
    )


def kafka_batch_files(batch: Any) -> list[str]:
    """The ``TOPIC/PARTITION`` names of a Kafka micro-batch, in partition order (one small action)."""
    pairs = {
        (r[0], int(r[1])) for r in batch.select("file", SOURCE_COLUMNS["partition"]).distinct().collect()
    }
    return [name for name, _ in sorted(pairs, key=lambda p: (p[0].rsplit("/", 1)[0], p[1]))]


def clear_interrupted_log_writes(query_checkpoint: Path) -> list[Path]:
    """Remove the temporary files a killed query left in its offset and commit logs; returns them.

    Spark writes a log entry to ``.N.<uuid>.tmp`` and renames it into place, so such a file is never
    state. A SIGKILL between the two leaves it behind, and Spark 4.2 then refuses to start a query whose
    offset log has a file but no batch 0 (``STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY``).
    """
    removed = []
    for log_dir in ("offsets", "commits"):
        folder = query_checkpoint / log_dir
        if not folder.is_dir():
            continue
        for path in folder.iterdir():
            if path.is_file() and path.name.startswith(".") and (path.name.endswith((".tmp", ".tmp.crc"))):
                path.unlink()
                removed.append(path)
    return removed


def run_job(spark: Any, options: JobOptions, metrics: JobMetrics | None = None) -> list[BatchReport]:
    """Run the streaming query until the input is exhausted (``available-now``) or forever (``interval=``).

    With ``options.metrics_port`` set (and no ``metrics`` passed) the run serves its Prometheus metrics on
    ``options.metrics_host`` for its duration; with ``metrics`` the caller owns the registry and serving.
    """
    if options.format == "rate" and options.trigger == "available-now":
        msg = "--format rate never runs out of input: use --trigger interval=<duration> (and --max-batches N)"
        raise ValueError(msg)
    server = None
    if metrics is None and options.metrics_port is not None:
        metrics, server = serve_metrics(options)
    try:
        return _run_query(spark, options, metrics)
    finally:
        if server is not None:
            server.stop()


def serve_metrics(options: JobOptions) -> tuple[JobMetrics, Any]:
    """A fresh registry of the job's metrics, served on ``options.metrics_host:metrics_port``.

    Raises :class:`monitoring.server.MetricsPortBusy` when the port is taken.
    """
    from prometheus_client import CollectorRegistry

    from monitoring.server import serve

    assert options.metrics_port is not None
    metrics = JobMetrics(CollectorRegistry())
    server = serve(metrics.registry, options.metrics_port, options.metrics_host)
    print(f"metrics at {server.url}", file=sys.stderr, flush=True)
    return metrics, server


def _run_query(spark: Any, options: JobOptions, metrics: JobMetrics | None) -> list[BatchReport]:
    if options.format not in ("rate", "kafka"):
        Path(options.input).mkdir(parents=True, exist_ok=True)
    for path in clear_interrupted_log_writes(Path(options.checkpoint) / "query"):
        log.warning("removed %s, left by an interrupted run", path)
    files = source_stream(spark, options)
    if options.format == "json" and options.reader == "arrow":
        ship_code(spark)
    handler = BatchHandler(spark, options, metrics)
    listener = None
    if metrics is not None:
        from monitoring.listener import MetricsListener

        config = handler.watcher.current if handler.watcher is not None else options.config
        metrics.config_applied(config.version, config.strategy, config.late_slo_pct)
        listener = MetricsListener(metrics)
        spark.streams.addListener(listener)
    writer = files.writeStream.foreachBatch(handler).option(
        "checkpointLocation", str(Path(options.checkpoint) / "query")
    )
    if options.trigger == "available-now":
        writer = writer.trigger(availableNow=True)
    elif options.trigger.startswith("interval="):
        writer = writer.trigger(processingTime=options.trigger.split("=", 1)[1])
    else:
        msg = f"--trigger must be available-now or interval=<duration>, got {options.trigger!r}"
        raise ValueError(msg)
    query = writer.start()
    if listener is not None:
        listener.follow(query.id)
    try:
        if options.max_batches is None:
            query.awaitTermination()
        else:
            while query.isActive and len(handler.reports) < options.max_batches:
                query.awaitTermination(0.2)
            query.stop()
            if query.exception() is not None:
                raise RuntimeError(str(query.exception()))
    finally:
        if listener is not None:
            spark.streams.removeListener(listener)
    shutil.rmtree(spill_dir(options.checkpoint), ignore_errors=True)
    if options.flush_at_end:
        flushed = flush_open_windows(spark, options)
        if metrics is not None:
            metrics.windows.labels("flush").inc(flushed)
    return handler.reports


def flush_open_windows(spark: Any, options: JobOptions) -> int:
    """Close every open window (``flushed``) after the input is exhausted; idempotent per last batch.

    The last batch's state is then rewritten with no open window and a watermark floor at the end of the
    last flushed window, so a later run on the same checkpoint treats rows of flushed windows as late
    instead of reopening the windows.
    """
    store = StageStore(options.checkpoint)
    last = store.latest_batch()
    if last is None:
        return 0
    saved = store.load_before(last + 1)
    assert saved is not None
    flushed = flush(saved.open_windows)
    tables = DeltaTables(options.output, options.app_id + ".flush", spark)
    tables.append("aggregates", _aggregate_rows(flushed, last, saved.config_version), last)
    if flushed.num_rows:
        ends = flushed.column("window_end_ms").to_numpy()
        closed_until = max(saved.closed_until_ms, int(ends.max()))
        store.save(last, saved.watermark, empty_partials(), saved.config_version, closed_until)
    return flushed.num_rows


# -- command line ----------------------------------------------------------------------------------------
def summarize(output: str) -> dict[str, Any]:
    """Figures of a finished run read back from its Delta tables."""
    tables = DeltaTables(output, "jobs.stream.summary")
    out: dict[str, Any] = {"output": os.path.abspath(output)}
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


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m jobs.stream`` argument parser."""
    from watermark.cli import OneLineParser

    p = OneLineParser(prog="python -m jobs.stream", description=__doc__.splitlines()[0])
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
    p.add_argument("--rate-rows-per-second", type=int, default=RateOptions.rows_per_second)
    p.add_argument("--rate-keys", type=int, default=RateOptions.keys)
    p.add_argument("--rate-partitions", type=int, default=RateOptions.partitions)
    p.add_argument(
        "--rate-max-delay-ms", type=int, default=RateOptions.max_delay_ms, help="event time = arrival - delay"
    )
    p.add_argument("--max-batches", type=int, help="stop after this many micro-batches")
    p.add_argument("--output", required=True, help="directory of the Delta tables")
    p.add_argument("--checkpoint", required=True, help="checkpoint directory (query offsets and stage state)")
    p.add_argument(
        "--config", help="versioned watermark configuration (JSON); created from the flags if absent"
    )
    p.add_argument("--strategy", default="adaptive", help="watermark strategy (without --config)")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="strategy parameter")
    p.add_argument("--window-ms", type=int, default=1_000)
    p.add_argument("--slide-ms", type=int)
    p.add_argument("--late-slo-pct", type=float, default=1.0)
    p.add_argument("--idle-timeout-ms", type=int)
    p.add_argument("--trigger", default="available-now", help="available-now or interval=5s")
    p.add_argument("--max-files-per-trigger", type=int)
    p.add_argument("--flush-at-end", action="store_true", help="close all open windows when the input ends")
    p.add_argument(
        "--future-bound-ms", type=int, default=86_400_000, help="quarantine event times this far ahead"
    )
    p.add_argument(
        "--max-field-bytes",
        type=int,
        default=65_536,
        help="quarantine records with a longer field (record_too_long)",
    )
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
    p.add_argument(
        "--no-arrival-history",
        action="store_true",
        help="do not write the arrivals table (every record's partition and times: the re-tuning input)",
    )
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
    return p


def options_from_args(args: argparse.Namespace) -> JobOptions:
    """Validate the flags and resolve the configuration (the file wins; a missing file is created)."""
    from watermark.registry import parse_settings

    flags = PipelineConfig.from_dict(
        {
            "version": 1,
            "strategy": args.strategy,
            "params": parse_settings(args.set),
            "window_ms": args.window_ms,
            "slide_ms": args.slide_ms,
            "late_slo_pct": args.late_slo_pct,
            "idle_timeout_ms": args.idle_timeout_ms,
        }
    )
    config = flags
    if args.config:
        if Path(args.config).exists():
            config = load_config(args.config)
        else:
            write_config(args.config, flags)
    fields = Fields(**{name: getattr(args, f"{name}_field") for name in vars(Fields())})
    if args.format not in ("rate", "kafka") and not args.input:
        msg = f"--input is required with --format {args.format}"
        raise ValueError(msg)
    if args.format in ("rate", "kafka") and args.input:
        msg = f"--format {args.format} reads no --input"
        raise ValueError(msg)
    if args.format == "kafka" and not (args.kafka_bootstrap_servers and args.topic):
        msg = "--format kafka needs --kafka-bootstrap-servers HOST:PORT and --topic NAME"
        raise ValueError(msg)
    if args.format != "kafka" and (args.kafka_bootstrap_servers or args.topic):
        msg = "--kafka-bootstrap-servers and --topic are for --format kafka"
        raise ValueError(msg)
    if args.format == "rate" and args.trigger == "available-now":
        msg = "--format rate never runs out of input: use --trigger interval=<duration> (and --max-batches N)"
        raise ValueError(msg)
    if not 0 <= args.metrics_port <= 65_535:
        msg = f"--metrics-port must be a port number (0 serves none), got {args.metrics_port}"
        raise ValueError(msg)
    for flag in (
        "rate_rows_per_second",
        "rate_keys",
        "rate_partitions",
        "max_batches",
        "max_offsets_per_trigger",
    ):
        value = getattr(args, flag)
        if value is not None and value < 1:
            msg = f"--{flag.replace('_', '-')} must be at least 1, got {value}"
            raise ValueError(msg)
    if args.rate_max_delay_ms < 0:
        msg = f"--rate-max-delay-ms must be >= 0, got {args.rate_max_delay_ms}"
        raise ValueError(msg)
    rate = RateOptions(
        rows_per_second=args.rate_rows_per_second,
        keys=args.rate_keys,
        partitions=args.rate_partitions,
        max_delay_ms=args.rate_max_delay_ms,
    )
    kafka = KafkaOptions(
        bootstrap_servers=args.kafka_bootstrap_servers or "",
        topic=args.topic or "",
        starting_offsets=args.starting_offsets,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
    )
    return JobOptions(
        input=args.input or "",
        format=args.format,
        rate=rate,
        kafka=kafka,
        max_batches=args.max_batches,
        output=args.output,
        checkpoint=args.checkpoint,
        config=config,
        config_path=args.config,
        trigger=args.trigger,
        max_files_per_trigger=args.max_files_per_trigger,
        flush_at_end=args.flush_at_end,
        fields=fields,
        future_bound_ms=args.future_bound_ms,
        max_field_bytes=args.max_field_bytes,
        reader=args.reader,
        metrics_port=args.metrics_port or None,
        metrics_host=args.metrics_host,
        arrival_history=not args.no_arrival_history,
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point; prints the run's summary as JSON."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    try:
        options = options_from_args(args)
    except (ConfigError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from jobs.spark import build_session
    from monitoring.server import MetricsPortBusy

    metrics, server = None, None
    if options.metrics_port is not None:  # bound before Spark starts, so a busy port fails at once
        try:
            metrics, server = serve_metrics(options)
        except MetricsPortBusy as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    spark = build_session("jobs.stream")
    try:
        run_job(spark, options, metrics)
    except KeyboardInterrupt:
        for query in spark.streams.active:
            query.stop()
        print(
            "interrupted: restart with the same --checkpoint to continue exactly where it stopped",
            file=sys.stderr,
        )
        return 130
    finally:
        spark.stop()
        if server is not None:
            server.stop()
    print(json.dumps(summarize(options.output)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
