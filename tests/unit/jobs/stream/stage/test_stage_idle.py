"""The job's driver stage in partition-scoped mode with an idle timeout: a silent partition's windows fire.

Its watermark follows the fleet's once it is idle
(:class:`watermark.partitions.combine.PartitionedWatermark`), and its windows reach the aggregates at the
instant the replay gives, within a batch or across batches (with the watermark state through its JSON snapshot
between them, as the checkpoint keeps it).
"""

import json

import numpy as np
import pytest

from jobs.stream.stage.states import StageStart
from tests.unit.jobs.stream.stage.test_eviction import DriverRun, config
from watermark.evaluation.replay import WindowSpec, replay
from watermark.partitions.combine import PartitionedWatermark

# Device b sends once and stops; device a goes on (key = partition, as the IoT streams).
ROWS = [("b", "kb", 100, 100), ("a", "ka", 500, 500), ("a", "ka", 1_500, 1_500), ("a", "ka", 2_500, 2_500)]


def replayed(rows, cfg):
    part, key, te, tp = zip(*rows, strict=True)
    r = replay(te, tp, strategy=cfg.strategy, params=cfg.params, window=WindowSpec(1_000), key=key,
               partition=part, partition_mode="scoped", idle_timeout_ms=cfg.idle_timeout_ms)  # fmt: skip
    w = r.windows
    keys = np.asarray(r.keys)[w.key]
    return {
        (str(k), int(s)): (int(t), int(m))
        for k, s, f, t, m in zip(keys, w.start_ms, w.fired, w.fire_tp_ms, w.fire_wm_ms, strict=True)
        if f
    }


def run_batches(cfg, batches, restart=False):
    run = DriverRun(cfg)
    fired = {}
    for b, rows in enumerate(batches):
        stage = run.batch(b, rows, 3_000 * (b + 1))
        for row in stage.fired.to_pylist():
            fired[row["key"], row["window_start_ms"]] = (row["fire_arrival_ms"], row["trigger_watermark_ms"])
        if restart:  # the watermark through its checkpoint form
            snap = json.loads(json.dumps(run.watermark.snapshot()))
            s, restored = run.start, PartitionedWatermark.from_snapshot(snap)
            run.start = StageStart(
                s.ingest_ms, s.config, restored, s.open_windows, s.closed_until_ms, s.owners
            )
    return fired


@pytest.mark.parametrize("cut", [4, 2, 1])
def test_a_stopped_partitions_window_reaches_the_aggregates_at_the_replays_instant(cut):
    cfg = config("scoped", retention=600_000, idle=2_000)
    fired = run_batches(cfg, [ROWS[:cut], ROWS[cut:]], restart=True)
    expected = replayed(ROWS, cfg)
    # b idle from 2100: a's watermark (1500 - 1 - 300) is then past b's [0, 1000); b is raised to that
    # window's end (no further: its own windows, not the fleet's) and it closes, with no arrival of b.
    assert expected[("kb", 0)] == (2_100, 1_000)
    assert fired == expected


def test_without_an_idle_timeout_the_stopped_partitions_window_stays_open():
    fired = run_batches(config("scoped", retention=600_000, idle=None), [ROWS])
    assert ("kb", 0) not in fired and ("ka", 0) in fired


def test_on_the_executor_path_an_idle_partition_is_raised_at_the_batchs_clock():
    """The partitions ran apart (no raise within the batch): the idle ones follow the fleet at its end."""
    from jobs.stream.stage.executors import _advance_to_boundary
    from watermark.strategies.registry import make

    lag = {"max_event_time_lag_ms": 300, "max_watermark_lag_ms": 10**9}
    pw = PartitionedWatermark("ingestion", lag, idle_timeout_ms=2_000, mode="scoped")
    runs = {"b": ([100], [100]), "a": ([500, 1_500, 2_500], [500, 1_500, 2_500])}
    summaries = []
    for p, (te, tp) in runs.items():
        gen = make("ingestion", lag)
        gen.process(te, tp)
        summaries.append((p, gen.snapshot(), gen.clock_ms, len(te), 0))
    pw.absorb_partitions(summaries, wm_at_last_arrival=2_199, clock_ms=2_500)
    rows = _advance_to_boundary(pw, None).to_pylist()
    # b (idle since 2100) rises from 100 - 1 - 300 to a's 2199 at the batch's last arrival: its windows
    # ending in (-201, 2199] fire there.
    assert [(r["owner"], r["lo"], r["hi"], r["fire_arrival_ms"]) for r in rows] == [("b", -201, 2_199, 2_500)]
    assert _advance_to_boundary(PartitionedWatermark("ingestion", lag, mode="scoped"), None).num_rows == 0


def test_a_learned_idle_timeout_is_a_configuration_value_of_the_scoped_job():
    from watermark.config import ConfigError, PipelineConfig

    doc = {"version": 1, "strategy": "ingestion", "params": {}, "window_ms": 1_000, "idle_timeout_ms": "auto"}
    with pytest.raises(ConfigError, match="needs partition_mode scoped"):
        PipelineConfig.from_dict(doc)
    cfg = PipelineConfig.from_dict(doc | {"partition_mode": "scoped"})
    assert cfg.idle_timeout_ms == "auto" and cfg.idle_bound_ms == 600_000
    assert PipelineConfig.from_dict(cfg.to_dict()) == cfg
    # Both devices report every 100 ms: after 8 gaps a device's timeout is learned (4 x 128 ms, floored
    # at 1 s). b stops at 800, falls idle at 1800 and follows a: its window [0, 1000) fires once a's
    # watermark (arrival - 1 - 1000) passes 1000, at a's arrival at 2050 (b raised to 1000, its window's end).
    b = [("b", "kb", t, t) for t in range(0, 900, 100)]
    rows = sorted(b + [("a", "ka", t, t) for t in range(50, 2_600, 100)], key=lambda r: r[3])
    fired = run_batches(cfg, [rows[:15], rows[15:]], restart=True)
    assert fired == replayed(rows, cfg)
    assert fired[("kb", 0)] == (2_050, 1_000)
