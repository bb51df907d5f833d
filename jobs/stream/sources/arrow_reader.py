"""The Arrow reader of landing files: a micro-batch of JSON lines parsed with pyarrow in Spark's executors.

Spark's JSON reader parses a record about three times slower than pyarrow's, and the job reads a batch twice
(once for the narrow columns the watermark stage needs, once to aggregate the labelled rows). On this path
the batch's files are cut into byte-range *splits* (:func:`plan_splits`) and two Spark jobs run Python over
them in the executors (``mapPartitions`` over an RDD with one split per partition, so the work scales out
with the cluster; an RDD job costs about half the fixed overhead of a DataFrame's ``mapInArrow``, 0.12 s
against 0.24 s locally). This module is the driver's side; the passes themselves run in the workers
(:mod:`jobs.stream.workers.arrow_path`):

1. :func:`~jobs.stream.workers.arrow_path.collect_pass` parses each split, checks that every record is
   valid exactly as the Spark path would judge it (:func:`~jobs.stream.workers.arrow_path.parse_clean`),
   and returns the narrow columns (partition, event time, arrival time) as one Arrow IPC blob per split;
   the driver rebuilds file and record ids from the split and its row count (:func:`narrow_of`). The
   parsed split stays in the worker's memory.
2. The driver runs the watermark stage on the narrow columns, as on the Spark path, and compresses its
   labels into lateness thresholds over the arrival key (:func:`late_thresholds`).
3. :func:`~jobs.stream.workers.arrow_path.aggregate_pass` labels each split's rows with the thresholds
   (vectorised, no row-id join), and returns the partial aggregates of its on-time rows per (key, window)
   and its late rows in full. The driver merges the partials into the open windows, as it merges Spark's.

A batch whose records are not all plainly valid (a quarantine reason, a blank line, a string where a number
belongs, ISO-8601 times, anything pyarrow will not parse with the typed schema) is reported unclean by the
first pass, and the job reads that batch with Spark's reader instead: quarantine reasons, tolerant typing
and every other rule live in one place, the Spark path, and the Arrow path only ever takes batches whose
result it reproduces exactly (``test_arrow_path.py`` holds it to that). :class:`ArrowReader` decides, per
batch, whether the path applies and runs its first pass; :class:`ArrowRows` is the batch after it.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import tempfile
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from jobs.common.schemas import RECORD_SCHEMA
from jobs.stream.report import BatchReport
from jobs.stream.sources.readers import listed_location
from jobs.stream.sources.source_options import SourceOptions
from jobs.stream.stage.driver import label_thresholds
from jobs.stream.workers.arrow_path import (
    LateThresholds,
    RecordChecks,
    Split,
    SplitAggregated,
    SplitCollected,
    aggregate_pass,
    collect_pass,
    from_blobs,
    private_folder,
    record_ids,
)
from watermark import storage
from watermark.windowspec import WindowSpec

log = logging.getLogger("jobs.stream")

#: Late rows as the second pass returns them: the record plus its file index and record id.
LATE_ROWS_SCHEMA = pa.schema([*RECORD_SCHEMA, ("file", pa.int32()), ("line", pa.int64())])
#: The narrow columns the first pass returns (plus ``valid``, all true, as the driver path reads them).
NARROW_SCHEMA = pa.schema(
    [
        ("file", pa.int32()),
        ("line", pa.int64()),
        ("valid", pa.bool_()),
        ("partition", pa.string()),
        ("event_time_ms", pa.int64()),
        ("arrival_time_ms", pa.int64()),
    ]
)

MIN_SPLIT_BYTES = 4 << 20
MAX_SPLIT_BYTES = 128 << 20


def local_path(uri: str) -> str | None:
    """The local path of a landing file as Spark's source log spells it, or None for a remote URI.

    >>> local_path("file:///data/in/a.json"), local_path("file:/data/in/a.json"), local_path("s3a://b/a.json")
    ('/data/in/a.json', '/data/in/a.json', None)
    """
    if uri.startswith("file://"):
        return uri[len("file://") :]
    if uri.startswith("file:/"):
        return uri[len("file:") :]
    if "://" in uri or uri.startswith(("s3a:", "s3:", "hdfs:", "gs:", "abfs:")):
        return None
    return uri


def plan_splits(
    paths: list[str],
    sizes: list[int],
    parallelism: int,
    *,
    min_bytes: int = MIN_SPLIT_BYTES,
    max_bytes: int = MAX_SPLIT_BYTES,
) -> list[Split]:
    """Cut files into byte ranges of about ``total / parallelism`` bytes (within the bounds).

    >>> [(s.file, s.start, s.end) for s in plan_splits(["a", "b"], [10, 25], 2, min_bytes=8, max_bytes=20)]
    [(0, 0, 10), (1, 0, 18), (1, 18, 25)]
    """
    total = sum(sizes)
    size = max(min_bytes, min(max_bytes, -(-total // max(parallelism, 1))))
    splits: list[Split] = []
    for index, (path, length) in enumerate(zip(paths, sizes, strict=True)):
        start = 0
        while start < length:
            end = min(length, start + size)
            splits.append(Split(len(splits), index, path, start, end, length))
            start = end
    return splits


def late_thresholds(
    narrow: pa.Table, order: NDArray[np.intp], starts: NDArray[np.intp], values: NDArray[np.int64]
) -> LateThresholds:
    """:class:`LateThresholds` from :func:`jobs.stream.stage.driver.label_thresholds` pieces over the rows."""
    tp = narrow.column("arrival_time_ms").to_numpy()[order]
    file = narrow.column("file").to_numpy().astype(np.int64)[order]
    line = narrow.column("line").to_numpy()[order]
    tie = np.zeros(starts.size, bool)
    inner = starts > 0
    tie[inner] = tp[starts[inner] - 1] == tp[starts[inner]]
    return LateThresholds(tp[starts], file[starts], line[starts], values.astype(np.int64), tie)


def local_dir(spark_local_dir: str | None = None) -> Path:
    """Spark's node-local scratch folder: ``SPARK_LOCAL_DIRS``, else ``spark.local.dir``, else the temp dir.

    Of a comma-separated list, the first.
    """
    for value in (os.environ.get("SPARK_LOCAL_DIRS"), spark_local_dir):
        first = (value or "").split(",")[0].strip()
        if first:
            return Path(first)
    return Path(tempfile.gettempdir())


def spill_dir(spark_local_dir: str | None = None) -> Path:
    """A new node-local folder, private to one run, where the first pass leaves parsed splits for the second.

    It is created under Spark's local folder (:func:`local_dir`) with an unpredictable name
    (``wm-arrow-<128 random bits>``) and mode 0700, and must not exist before: another local user can
    neither read the parsed rows nor plant files the second pass would take for them
    (:func:`jobs.stream.workers.arrow_path.private_folder` checks owner and mode before every write and
    read; the executors of another machine create it there the same way). The run passes it to the
    executors in :attr:`RecordChecks.spill` and removes it at its end.
    """
    base = local_dir(spark_local_dir)
    base.mkdir(parents=True, exist_ok=True)
    folder = base / f"wm-arrow-{secrets.token_hex(16)}"
    folder.mkdir(mode=0o700)  # FileExistsError rather than take a folder someone else made
    return private_folder(folder)


@dataclass
class Collected:
    """What the first pass returned for a batch."""

    clean: bool
    why: str
    narrow: pa.Table | None  # file, line, partition, event_time_ms, arrival_time_ms (all rows; all valid)


def splits_rdd(spark: Any, splits: list[Split]) -> Any:
    """An RDD with one split per partition (both passes run over it)."""
    return spark.sparkContext.parallelize(splits, max(len(splits), 1))


def narrow_of(splits: list[Split], collected: list[SplitCollected]) -> pa.Table | None:
    """The batch's narrow columns (file, line, partition, event and arrival time) in split order."""
    by_sid = {s.sid: s for s in splits}
    tables = []
    for c in sorted(collected, key=lambda c: c.sid):
        (table,) = from_blobs([c.narrow])
        split = by_sid[c.sid]
        tables.append(
            table.add_column(0, "file", pa.array(np.full(c.rows, split.file, np.int32))).add_column(
                1, "line", pa.array(record_ids(split, c.rows))
            )
        )
    return pa.concat_tables(tables) if tables else None


def run_collect(rdd: Any, splits: list[Split], checks: RecordChecks, job: str, batch_id: int) -> Collected:
    """First pass over the splits."""
    result: list[SplitCollected] = rdd.mapPartitions(
        partial(collect_pass, checks=checks, job=job, batch_id=batch_id)
    ).collect()
    unclean = [c.why for c in result if not c.clean]
    if unclean:
        return Collected(False, unclean[0], None)
    return Collected(True, "", narrow_of(splits, result))


def run_aggregate(
    rdd: Any,
    checks: RecordChecks,
    job: str,
    batch_id: int,
    thresholds: LateThresholds,
    window: WindowSpec,
) -> tuple[list[pa.Table], pa.Table, int]:
    """Second pass: the splits' partials (to merge), the batch's late rows, and the splits parsed again.

    A split is parsed again when the worker that runs it in this pass is not the one that kept it.
    """
    fn = partial(
        aggregate_pass,
        checks=checks,
        job=job,
        batch_id=batch_id,
        thresholds=thresholds,
        window=window,
    )
    result: list[SplitAggregated] = sorted(rdd.mapPartitions(fn).collect(), key=lambda a: a.sid)
    partials = from_blobs(a.partials for a in result)
    late = from_blobs(a.late for a in result)
    late_rows = pa.concat_tables(late) if late else LATE_ROWS_SCHEMA.empty_table()
    return partials, late_rows, sum(a.reparsed for a in result)


class ArrowRows:
    """A clean JSON batch on the Arrow path, after its first pass (the driver path's rows)."""

    path = "arrow"

    def __init__(
        self, rdd: Any, checks: RecordChecks, job: str, batch_id: int, narrow: pa.Table | None
    ) -> None:
        self.rdd, self.checks, self.job, self.batch_id = rdd, checks, job, batch_id
        self._narrow = narrow
        self.collect_seconds = 0.0  # the first pass, before the driver path's phases start

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
        thresholds = late_thresholds(narrow, result.order, th.starts, th.values)
        tick = report.mark("label", tick)
        partials, late, report.reparsed = run_aggregate(
            self.rdd, self.checks, self.job, self.batch_id, thresholds, window
        )
        tick = report.mark("partials", tick)
        return partials, late, tick


class ArrowReader:
    """The Arrow path for one run: which batches take it, their first pass, and the run's spill folder.

    After the executors fail to run it once (say, no pyarrow there), the run reads JSON with Spark's reader.
    """

    def __init__(self, spark: Any, options: SourceOptions) -> None:
        self.spark, self.options = spark, options
        self._off = ""  # why the Arrow path is off for the rest of the run (empty: it is on)
        self._spill: Path | None = None  # the run's private folder for parsed splits (spill_folder)

    def spill_folder(self) -> Path:
        """The run's private folder for the Arrow path's parsed splits (made at first use; see spill_dir)."""
        if self._spill is None:
            conf = (
                self.spark.sparkContext.getConf().get("spark.local.dir") if self.spark is not None else None
            )
            self._spill = spill_dir(conf)
        return self._spill

    def close(self) -> None:
        """Remove the run's spill folder (here; elsewhere the second pass deletes what it takes)."""
        if self._spill is not None:
            shutil.rmtree(self._spill, ignore_errors=True)

    def first_pass(self, files: list[str] | None, batch_id: int, ingest_ms: int) -> ArrowRows | None:
        """The batch on the Arrow path after its first pass, or None when Spark's reader must read it."""
        opts = self.options
        if opts.reader != "arrow" or opts.format != "json" or not files or self._off:
            return None
        names = list(vars(opts.fields).values())
        if len(set(names)) != len(names):
            return None  # a field name shared by two slots: the Spark path's typing rules apply
        # The log's URIs are URL-encoded. A local file is read by its path; a file on an object store by
        # its URI, with ranged reads through pyarrow's file system in the workers (watermark.storage).
        places = [listed_location(f) for f in files]
        paths = [place.spark for place in places]
        try:
            found = [storage.info(place) for place in places]
        except OSError:
            return None
        if any(f is None or f.size is None for f in found):
            return None  # gone since it was listed: Spark's reader quarantines it
        sizes = [f.size for f in found if f is not None and f.size is not None]
        checks = self._checks(ingest_ms)
        splits = plan_splits(paths, sizes, self.spark.sparkContext.defaultParallelism)
        rdd = splits_rdd(self.spark, splits)
        tick = time.perf_counter()
        try:
            collected = run_collect(rdd, splits, checks, opts.checkpoint, batch_id)
        except Exception as exc:  # the executors cannot run the Arrow path (say, no pyarrow there)
            self._off = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:300]}"
            log.warning(
                "the Arrow path failed (%s); this run reads JSON with Spark's reader from now on", self._off
            )
            return None
        if not collected.clean:
            log.info("batch %d: %s; read with Spark's JSON reader", batch_id, collected.why)
            shutil.rmtree(self.spill_folder(), ignore_errors=True)  # this machine's kept splits
            return None
        rows = ArrowRows(rdd, checks, opts.checkpoint, batch_id, collected.narrow)
        rows.collect_seconds = time.perf_counter() - tick
        return rows

    def _checks(self, ingest_ms: int) -> RecordChecks:
        rules = self.options.record_rules
        f = rules.fields
        return RecordChecks(
            f.event_id,
            f.key,
            f.partition,
            f.event_time,
            f.arrival_time,
            f.value,
            ingest_ms=ingest_ms,
            future_bound_ms=rules.future_bound_ms,
            max_field_bytes=rules.max_field_bytes,
            max_event_ahead_ms=rules.max_event_ahead_ms,
            max_record_bytes=rules.max_record_bytes,
            max_arrival_ahead_ms=rules.max_arrival_ahead_ms,
            spill=str(self.spill_folder()),
        )
