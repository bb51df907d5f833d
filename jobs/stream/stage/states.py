"""The stage from one batch to the next: the configuration in force, the state a batch starts from, its save.

The configuration is hot-reloaded from ``--config`` (:class:`watermark.config.ConfigWatcher`) and fixed
per batch at its first attempt (a replay runs the same version). A batch starts from the state the batch
before saved (:class:`jobs.stream.checkpoint.state.StageStore`), or a fresh one for the first; when its
version differs from that state's, the saved generators are reconfigured, and a version that fails to
apply is refused and rolled back.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pyarrow as pa

from jobs.common.windows import empty_partials
from jobs.stream.checkpoint.state import CheckpointError, SavedStage, StageStore
from jobs.stream.stage.executors import prune_open_dirs
from jobs.stream.stage.scoped import OWNERS_SCHEMA
from jobs.stream.stage.stage_options import StageOptions
from monitoring.metrics import JobMetrics
from watermark.config import ConfigWatcher, PipelineConfig, shape_change
from watermark.partitions.combine import PartitionedWatermark
from watermark.timeutil import NO_WATERMARK

log = logging.getLogger("jobs.stream")


@dataclass
class StageStart:
    """What a batch starts from: its ingestion time and configuration, and the stage's state before it."""

    ingest_ms: int
    config: PipelineConfig
    watermark: PartitionedWatermark
    open_windows: pa.Table
    closed_until_ms: int  # end of the last window --flush-at-end closed (a watermark floor)
    owners: pa.Table  # partition-scoped mode: the partition owning each key
    #: When the batch before ran its stage in the executors: the Parquet folder of its open windows.
    open_dir: str | None = None


class StageStates:
    """The configuration in force and the stage's state, batch after batch, for one run."""

    def __init__(self, options: StageOptions, metrics: JobMetrics | None = None) -> None:
        self.options = options
        self.metrics = metrics
        self.store = StageStore(options.checkpoint)
        self.watcher = ConfigWatcher(options.config_path, options.config) if options.config_path else None
        self._pinned: PipelineConfig | None = None  # without a watcher: the version a refusal rolled back to
        self.check_restart()

    def check_restart(self) -> None:
        """Refuse to go on from a saved state under a configuration of another shape (at start).

        The newest state's open windows were cut, and owned, under its batch's configuration; a restart
        whose configuration changes the window, the straggler band or the partition mode
        (:func:`watermark.config.shape_change`) would merge them with partials of another shape, or fire
        them by another watermark. Flags that do are refused: :class:`CheckpointError` (exit 2). A
        configuration file that does (a version published or edited while the job was down) is refused as
        the running job refuses it: a log line, ``awm_config_refused_total``, and the job goes on under the
        state's version until the file changes again.
        """
        latest = self.store.latest_batch()
        if latest is None:
            return
        saved = self.store.load_before(latest + 1)
        if saved is None or saved.config is None:
            return
        wanted = self.watcher.current if self.watcher is not None else self.options.config
        changed = shape_change(saved.config, wanted)
        if not changed:
            return
        if self.watcher is None:
            msg = (
                f"the command line changes {changed} against the checkpoint's state (batch {latest}, "
                f"configuration version {saved.config.version}); open windows of one shape cannot go on "
                "under another: put the old settings back, or start a new --output and --checkpoint"
            )
            raise CheckpointError(msg)
        reason = (
            f"version {wanted.version} of {self.options.config_path} changes {changed} against the "
            f"checkpoint's state (batch {latest}); its open windows were made by version "
            f"{saved.config.version}, which stays in force: start a new output and checkpoint to use it"
        )
        log.warning("configuration refused: %s", reason)
        if self.metrics is not None:
            self.metrics.config_refused.inc()
        self.watcher.roll_back(saved.config, reason)

    def config(self) -> PipelineConfig:
        """The configuration in force now (a new version of the file applies from the next batch)."""
        if self.watcher is None:
            return self._pinned or self.options.config
        change = self.watcher.poll()
        if change is not None and change.refused_reason:
            log.warning("configuration refused: %s", change.refused_reason)
            if self.metrics is not None:
                self.metrics.config_refused.inc()
        elif change is not None and change.applied is not None:
            log.warning("configuration version %d applies from the next batch", change.applied.version)
        return self.watcher.current

    def start(self, batch_id: int) -> StageStart:
        """Batch ``batch_id``'s ingestion time, configuration and starting state (idempotent per batch)."""
        ingest_ms, config = self.store.batch_meta(batch_id, self.config())
        saved = self.store.load_before(batch_id)
        if saved is None:
            watermark = PartitionedWatermark(
                config.strategy,
                config.params,
                idle_timeout_ms=config.idle_timeout_ms,
                mode=config.partition_mode,
                window=config.window,
            )
            return StageStart(
                ingest_ms, config, watermark, empty_partials(), NO_WATERMARK, OWNERS_SCHEMA.empty_table()
            )
        watermark = saved.watermark
        if watermark.window is None:  # a state saved before idleness was capped at a partition's windows
            watermark.window = config.window
        owners = saved.owners if saved.owners is not None else OWNERS_SCHEMA.empty_table()
        if saved.config_version != config.version or _differs(watermark, config):
            watermark, config = self.reconfigure(batch_id, saved, config)
        return StageStart(
            ingest_ms, config, watermark, saved.open_windows, saved.closed_until_ms, owners, saved.open_dir
        )

    def reconfigure(
        self, batch_id: int, saved: SavedStage, config: PipelineConfig
    ) -> tuple[PartitionedWatermark, PipelineConfig]:
        """The saved generators under the batch's new configuration version (and that version).

        When the new version fails to apply, it is refused and rolled back: the saved generators go on under
        the previous version, with a log line and ``awm_config_refused_total``.
        """
        try:
            watermark = saved.watermark.reconfigured(
                config.strategy,
                config.params,
                idle_timeout_ms=config.idle_timeout_ms,
                mode=config.partition_mode,
                window=config.window,
            )
        except Exception as exc:  # noqa: BLE001 - any failure of a new version refuses it
            previous = saved.config
            if previous is None or previous.version != saved.config_version:
                raise
            reason = (
                f"version {config.version} failed to apply at batch {batch_id} "
                f"({type(exc).__name__}: {str(exc)[:300]}); rolled back to version {previous.version}"
            )
            log.warning("configuration refused: %s", reason)
            if self.metrics is not None:
                self.metrics.config_refused.inc()
            self.store.repin(batch_id, previous)  # a replay of this batch runs the previous version too
            if self.watcher is not None:
                self.watcher.roll_back(previous, reason)
            else:
                self._pinned = previous
            return saved.watermark, previous
        log.warning(
            "batch %d: configuration version %d in force (was %d)",
            batch_id,
            config.version,
            saved.config_version,
        )
        return watermark, config

    def save(
        self,
        batch_id: int,
        start: StageStart,
        open_windows: pa.Table,
        owners: pa.Table | None,
        open_dir: str | None,
    ) -> None:
        """Save the state after batch ``batch_id`` (``start``'s generators, advanced by the batch)."""
        self.store.save(
            batch_id,
            start.watermark,
            open_windows,
            start.config.version,
            start.closed_until_ms,
            owners,
            open_dir=open_dir,
        )
        oldest = self.store.oldest_batch()
        if oldest is not None:
            prune_open_dirs(self.options.checkpoint, oldest)


def _differs(watermark: PartitionedWatermark, config: PipelineConfig) -> bool:
    """Whether the generators are not those of ``config`` (a restart with other flags, same version)."""
    return bool(
        watermark.mismatch(
            config.strategy, config.params, idle_timeout_ms=config.idle_timeout_ms, mode=config.partition_mode
        )
    )
