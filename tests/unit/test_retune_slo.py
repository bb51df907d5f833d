"""The re-tuning job publishes the SLO strategy's settings through the configuration the job hot-reloads."""

import dataclasses

import pytest

from jobs.batch.retune import retune
from tests.unit.test_retune import history, options, running
from watermark.config import ConfigError, PipelineConfig, load_config


def test_the_slo_strategy_is_published_with_its_target_when_it_is_the_best_setting(tmp_path):
    history(tmp_path, n=6_000)
    running(tmp_path, delay_ms=5_000)
    outcome = retune(dataclasses.replace(options(tmp_path), strategies=("slo",)))
    after = load_config(tmp_path / "watermark.json")
    assert outcome.decision == "published" and after.version == 4
    assert after.strategy == "slo"
    assert 0 < after.params["late_slo_pct"] <= after.late_slo_pct == 0.5
    assert outcome.chosen["partition_mode"] in ("min", "global")  # a combination the job runs
    assert after.partition_mode == outcome.chosen["partition_mode"]
    assert outcome.chosen["emit_latency_ms"]["mean"] < outcome.running["emit_latency_ms"]["mean"]


def test_a_document_naming_the_slo_strategy_takes_its_target_from_late_slo_pct():
    cfg = PipelineConfig.from_dict({"version": 1, "strategy": "slo", "window_ms": 1_000, "late_slo_pct": 0.3})
    assert cfg.params["late_slo_pct"] == 0.3
    explicit = {"version": 1, "strategy": "slo", "params": {"late_slo_pct": 0.2}, "window_ms": 1_000}
    assert PipelineConfig.from_dict(explicit).params["late_slo_pct"] == 0.2


def test_the_partition_mode_round_trips_through_the_document_and_is_validated():
    doc = {"version": 1, "strategy": "periodic", "window_ms": 1_000, "partition_mode": "global"}
    cfg = PipelineConfig.from_dict(doc)
    assert cfg.partition_mode == "global" and cfg.to_dict()["partition_mode"] == "global"
    assert "partition_mode" not in PipelineConfig.from_dict(doc | {"partition_mode": "min"}).to_dict()
    with pytest.raises(ConfigError, match="partition_mode must be one of"):
        PipelineConfig.from_dict(doc | {"partition_mode": "max"})
