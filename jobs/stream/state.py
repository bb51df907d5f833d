"""The watermark stage's state per micro-batch under ``CHECKPOINT/stage`` (generators, open windows)."""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from jobs.scoped import OWNERS_SCHEMA
from jobs.windows import PARTIAL_SCHEMA
from watermark.combine import PartitionedWatermark
from watermark.config import PipelineConfig
from watermark.timeutil import NO_WATERMARK


@dataclass
class SavedStage:
    """The stage's state after a batch."""

    watermark: PartitionedWatermark
    open_windows: pa.Table
    config_version: int
    closed_until_ms: int = NO_WATERMARK  # end of the last window --flush-at-end closed (a watermark floor)
    owners: pa.Table | None = None  # partition-scoped mode: the partition owning each key (jobs.scoped)
    #: When the batch ran its stage in the executors: the Parquet folder of its open windows
    #: (``open_windows`` is then empty; :mod:`jobs.stream.executors`).
    open_dir: str | None = None


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
        owners_file = path / "owners.parquet"
        owners = pq.read_table(owners_file).cast(OWNERS_SCHEMA) if owners_file.exists() else None
        return SavedStage(
            PartitionedWatermark.from_snapshot(snap["watermark"]),
            open_windows,
            int(snap["config_version"]),
            int(snap.get("closed_until_ms", NO_WATERMARK)),
            owners,
            None if snap.get("open_dir") is None else str(self.root / snap["open_dir"]),
        )

    def oldest_batch(self) -> int | None:
        """Batch id of the oldest state kept."""
        states = self._states()
        return states[0][0] if states else None

    def save(
        self,
        batch_id: int,
        watermark: PartitionedWatermark,
        open_windows: pa.Table,
        version: int,
        closed_until_ms: int = NO_WATERMARK,
        owners: pa.Table | None = None,
        open_dir: str | None = None,
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
                    # relative to the stage folder, so that a checkpoint can move
                    "open_dir": None if open_dir is None else os.path.relpath(open_dir, self.root),
                }
            )
        )
        pq.write_table(open_windows, tmp / "open.parquet")
        if owners is not None:
            pq.write_table(owners, tmp / "owners.parquet")
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        states = self._states()
        for _, old in states[: -self.keep]:
            shutil.rmtree(old, ignore_errors=True)
        # A restart replays batches after the newest state; a meta file older than the oldest kept state is
        # never read again (one file per batch would otherwise grow without bound).
        oldest = states[-self.keep :][0][0]
        for meta in self.root.glob("batch-*.json"):
            number = meta.stem.split("-", 1)[1]
            if number.isdigit() and int(number) < oldest:
                meta.unlink(missing_ok=True)


APP_ID_FILE = "app-id"


def checkpoint_app_id(checkpoint: str, output: str) -> str:
    """The Delta application id (``txnAppId``) of the job writing ``output`` from ``checkpoint``.

    Delta skips a batch whose ``txnVersion`` its application already committed, so the id must belong to
    the checkpoint: after a checkpoint reset Spark numbers batches from 0 again, and under the old id every
    batch up to the old highest would be skipped as written. The id is created with the checkpoint and
    stored in it (``CHECKPOINT/app-id``). A checkpoint from before the file existed, which already has
    query offsets, keeps the id it wrote with (``jobs.stream``).

    Raises
    ------
    ValueError
        For a new checkpoint whose ``output`` already holds the pipeline's tables: they were written from
        another checkpoint, and starting over would write its input a second time.

    """
    root = Path(checkpoint)
    path = root / APP_ID_FILE
    if path.exists():
        text = path.read_text(encoding="utf-8").strip()
        if not text or len(text) > 200 or not text.isprintable():
            msg = f"{path}: not an application id; restore it from a backup, or start a new checkpoint"
            raise ValueError(msg)
        return text
    offsets = root / "query" / "offsets"
    if offsets.is_dir() and any(p.name.isdigit() for p in offsets.iterdir()):
        app_id = "jobs.stream"
    else:
        written = sorted(p.parent.name for p in Path(output).glob("*/_delta_log") if any(p.iterdir()))
        if written:
            msg = (
                f"{checkpoint} is a new checkpoint, but {output} already holds tables written from another "
                f"one ({', '.join(written)}): restart with the checkpoint that wrote them, or write to a new "
                "--output (a new checkpoint reads its input from the start)"
            )
            raise ValueError(msg)
        app_id = f"jobs.stream-{uuid.uuid4().hex}"
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".{APP_ID_FILE}.tmp"
    tmp.write_text(app_id + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return app_id
