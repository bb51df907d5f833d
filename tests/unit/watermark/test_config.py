"""The versioned watermark configuration: validation, atomic writes, hot reload rules."""

import json

import numpy as np
import pytest

from watermark.config import ConfigError, ConfigWatcher, PipelineConfig, load_config, write_config
from watermark.partitions.combine import PartitionedWatermark

BASE = {"version": 1, "strategy": "periodic", "params": {"delay_ms": 100}, "window_ms": 1000}


def write(path, doc):
    path.write_text(json.dumps(doc))
    return path


def test_a_valid_document_is_normalised_with_defaults_and_typed_params():
    cfg = PipelineConfig.from_dict(BASE | {"params": {"delay_ms": "250"}, "late_slo_pct": 0.5})
    assert cfg.params == {"delay_ms": 250, "period_ms": 200}
    assert cfg.window.window_ms == 1000 and cfg.window.slide_ms is None
    assert cfg.late_slo_pct == 0.5 and cfg.straggler_ms == 500
    assert cfg.idle_timeout_ms == 60_000  # max(10 windows, 60 s)
    assert PipelineConfig.from_dict(cfg.to_dict()) == cfg


def test_the_idle_timeout_defaults_to_ten_windows_and_at_least_a_minute_and_null_turns_it_off():
    from watermark.config import default_idle_timeout_ms
    from watermark.evaluation.replay import WindowSpec

    assert PipelineConfig.from_dict(BASE | {"window_ms": 30_000}).idle_timeout_ms == 300_000
    assert default_idle_timeout_ms(WindowSpec(100)) == 60_000
    off = PipelineConfig.from_dict(BASE | {"idle_timeout_ms": None})
    assert off.idle_timeout_ms is None and PipelineConfig.from_dict(off.to_dict()) == off
    assert PipelineConfig.from_dict(BASE | {"idle_timeout_ms": 5_000}).idle_timeout_ms == 5_000


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"colour": "red"}, "unknown field(s) colour"),
        ({"version": None}, "missing required field(s) version"),
        ({"version": 0}, "version must be >= 1"),
        ({"strategy": "fastest"}, "unknown strategy 'fastest'"),
        ({"params": {"delay_ms": -1}}, "delay_ms must be >= 0"),
        ({"params": {"wait": 1}}, "unknown parameter(s) wait"),
        ({"params": [1, 2]}, "params must be an object"),
        ({"window_ms": 0}, "window_ms must be >= 1"),
        ({"slide_ms": 5000}, "must not exceed window_ms"),
        ({"late_slo_pct": 150}, "late_slo_pct must be in [0.0, 100.0]"),
        ({"idle_timeout_ms": 0}, "idle_timeout_ms must be >= 1"),
        ({"note": 5}, "note must be text"),
    ],
)
def test_invalid_documents_are_refused_with_a_one_line_reason(change, needle):
    with pytest.raises(ConfigError) as err:
        PipelineConfig.from_dict(BASE | change, source="cfg.json")
    assert needle in str(err.value)
    assert str(err.value).startswith("cfg.json: ")
    assert "\n" not in str(err.value)


def test_load_config_reports_unreadable_files_and_bad_json_with_position(tmp_path):
    with pytest.raises(ConfigError, match="cannot read the configuration"):
        load_config(tmp_path / "absent.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"version": 1,\n "strategy": }')
    with pytest.raises(ConfigError, match="not valid JSON at line 2"):
        load_config(bad)


def test_write_config_is_atomic_and_round_trips(tmp_path):
    cfg = PipelineConfig.from_dict(BASE | {"note": "first"})
    path = tmp_path / "conf" / "watermark.json"
    write_config(path, cfg)
    assert load_config(path) == cfg
    assert [p.name for p in path.parent.iterdir()] == ["watermark.json"]  # no temporary file left


def test_watcher_applies_a_newer_valid_version(tmp_path):
    path = write(tmp_path / "w.json", BASE)
    watcher = ConfigWatcher(path)
    assert watcher.poll() is None  # unchanged
    write(path, BASE | {"version": 2, "strategy": "adaptive", "params": {"late_threshold": 0.1}})
    change = watcher.poll()
    assert change is not None and change.applied is not None
    assert watcher.current.version == 2 and watcher.current.strategy == "adaptive"


def test_watcher_keeps_the_running_version_when_the_new_one_is_invalid_old_or_changes_the_window(tmp_path):
    path = write(tmp_path / "w.json", BASE | {"version": 5})
    watcher = ConfigWatcher(path)
    path.write_text("{ not json")
    change = watcher.poll()
    assert change.applied is None and "invalid configuration, keeping version 5" in change.refused_reason
    write(path, BASE | {"version": 4, "params": {"delay_ms": 7}})
    assert "not newer than the running version 5" in watcher.poll().refused_reason
    write(path, BASE | {"version": 6, "window_ms": 500})
    assert "changes the window" in watcher.poll().refused_reason
    assert watcher.current.version == 5
    write(path, BASE | {"version": 5})  # the running version written again: nothing to do
    assert watcher.poll() is None


def test_reconfiguring_the_combination_never_regresses_the_watermark():
    rng = np.random.default_rng(0)
    tp = np.arange(0, 5_000, 5, dtype=np.int64)
    te = tp - rng.integers(0, 50, tp.size)
    part = np.array(["a", "b"] * (tp.size // 2), dtype=object)
    pw = PartitionedWatermark("periodic", {"delay_ms": 100, "period_ms": 50})
    pw.process(part[:500], te[:500], tp[:500])
    before = pw.watermark_ms
    same = pw.reconfigured("periodic", {"delay_ms": 100, "period_ms": 50}, idle_timeout_ms=1_000)
    assert same.generators["a"] is pw.generators["a"]
    switched = pw.reconfigured("sliding", {})
    assert switched.watermark_ms == before
    wm = switched.process(part[500:], te[500:], tp[500:])
    assert wm[0] >= before and np.all(wm[1:] >= wm[:-1])
    assert switched.watermark_ms > before
    assert switched.n_seen == tp.size


@pytest.mark.parametrize("huge", [2**70, 1e308, float("inf"), float("nan"), -(2**70)])
def test_every_numeric_setting_out_of_its_real_range_is_refused(huge):
    # 2**70 ms passed validation once and overflowed int64 in the next batch, for good.
    from watermark.strategies.registry import STRATEGIES, make

    for name in STRATEGIES:
        required = {"late_slo_pct": 1.0} if name in ("slo", "fleet") else {}
        for param, default in make(name, required).params.items():
            finite = isinstance(huge, int) or huge == 1e308
            if isinstance(default, bool) or (isinstance(default, float) and finite and huge > 0):
                continue  # flags; a float setting may be large but finite (a rate threshold of 1e308)
            doc = {"version": 1, "strategy": name, "params": {**required, param: huge}, "window_ms": 1_000}
            with pytest.raises(ConfigError):
                PipelineConfig.from_dict(doc)
    for field in ("window_ms", "slide_ms", "idle_timeout_ms", "straggler_ms", "late_slo_pct", "version"):
        with pytest.raises(ConfigError, match=field):
            PipelineConfig.from_dict({"version": 1, "strategy": "periodic", "window_ms": 1_000, field: huge})


def test_a_rewrite_with_the_same_size_and_modification_time_is_noticed(tmp_path):
    import os

    path = tmp_path / "watermark.json"
    doc = {"version": 1, "strategy": "periodic", "params": {"delay_ms": 100}, "window_ms": 1_000}
    path.write_text(json.dumps(doc))
    stamp = path.stat()
    watcher = ConfigWatcher(path)
    path.write_text(json.dumps({**doc, "version": 2, "params": {"delay_ms": 200}}))  # same length
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    assert path.stat().st_size == stamp.st_size and path.stat().st_mtime_ns == stamp.st_mtime_ns
    change = watcher.poll()
    assert change is not None and change.applied is not None and change.applied.params["delay_ms"] == 200
    assert watcher.poll() is None  # unchanged content: nothing to do


def test_an_oversized_or_non_utf8_configuration_is_refused_with_its_reason(tmp_path):
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (2 << 20))
    with pytest.raises(ConfigError, match="larger than"):
        load_config(big)
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"version": 1, "note": "\xff"}')
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(bad)


def test_by_default_a_silent_partition_stops_stalling_the_watermark_after_the_idle_timeout():
    from watermark.partitions.combine import PartitionedWatermark

    cfg = PipelineConfig.from_dict({"version": 1, "strategy": "ingestion", "window_ms": 1_000})
    pw = PartitionedWatermark(
        cfg.strategy, cfg.params, idle_timeout_ms=cfg.idle_timeout_ms, mode=cfg.partition_mode
    )
    pw.process(["a", "b"], [0, 0], [0, 0])
    stalled = pw.watermark_ms
    for t in range(1_000, 120_001, 1_000):  # only partition a speaks, for two minutes
        pw.process(["a"], [t], [t])
    assert pw.watermark_ms > stalled + 100_000 and pw.active_partitions() == ["a"]


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"straggler_ms": 0}, "the straggler band (500 ms -> 0 ms)"),
        ({"partition_mode": "scoped"}, "the partition mode (min -> scoped)"),
        ({"partition_mode": "keyed"}, "the partition mode (min -> keyed)"),
        ({"slide_ms": 500}, "the window (1000 ms, slide None -> 1000 ms, slide 500)"),
    ],
)
def test_a_running_job_refuses_a_version_that_changes_the_shape_of_its_open_windows(tmp_path, change, needle):
    path = write(tmp_path / "w.json", BASE | {"version": 5})
    watcher = ConfigWatcher(path)
    write(path, BASE | {"version": 6} | change)
    reason = watcher.poll().refused_reason
    assert needle in reason and "start a new output and checkpoint" in reason
    assert watcher.current.version == 5
    write(path, BASE | {"version": 7, "params": {"delay_ms": 7}})  # parameters may change
    assert watcher.poll().applied.version == 7


def test_the_keyed_mode_is_a_configuration_of_its_own_and_may_learn_its_idle_timeout():
    cfg = PipelineConfig.from_dict(
        BASE | {"version": 1, "partition_mode": "keyed", "idle_timeout_ms": "auto"}
    )
    assert cfg.partition_mode == "keyed" and cfg.to_dict()["partition_mode"] == "keyed"
    pw = PartitionedWatermark(cfg.strategy, cfg.params, idle_timeout_ms=cfg.idle_timeout_ms, mode="scoped")
    assert "mode" in pw.mismatch(cfg.strategy, cfg.params, idle_timeout_ms=cfg.idle_timeout_ms, mode="keyed")
