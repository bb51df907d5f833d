"""The re-tuning job publishes the SLO strategy's settings through the configuration the job hot-reloads."""

import dataclasses

import numpy as np
import pyarrow as pa
import pytest
from deltalake import write_deltalake

from jobs.batch.retune import retune
from jobs.common.schemas import ARRIVALS_SCHEMA
from tests.unit.jobs.batch.test_retune import END_MS, history, options, running
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


def test_a_choice_in_another_partition_mode_is_published_within_the_running_mode_and_reported(tmp_path):
    """The job refuses a new partition mode (its open windows are owned under the running one): the re-tune
    publishes the best setting of the running mode and names the better mode in its reason."""
    n = 4_000
    rng = np.random.default_rng(1)
    tp = np.arange(n, dtype=np.int64) * 10 + 1_000_000
    part = np.where(np.arange(n) % 2 == 0, "fast", "slow")
    # the slow partition's clock runs 3 s behind: in the min mode it holds every window back
    te = tp - rng.integers(0, 200, n) - np.where(part == "slow", 3_000, 0)
    table = pa.table(
        {
            "partition": part.tolist(),
            "event_time_ms": te,
            "arrival_time_ms": tp,
            "batch_id": np.zeros(n, np.int64),
            "ingested_at_ms": np.full(n, END_MS - 3_600_000, np.int64),
        }
    )
    write_deltalake(str(tmp_path / "tables" / "arrivals"), table.cast(ARRIVALS_SCHEMA))
    running(tmp_path, delay_ms=5_000)
    outcome = retune(dataclasses.replace(options(tmp_path), strategies=("periodic",)))
    after = load_config(tmp_path / "watermark.json")
    assert outcome.other_mode is not None and outcome.other_mode["partition_mode"] == "scoped"
    assert outcome.decision == "published" and after.partition_mode == "min"
    assert outcome.chosen["partition_mode"] == "min" and after.params["delay_ms"] < 5_000
    assert "partition mode scoped would give" in outcome.reason
    assert outcome.other_mode["emit_latency_ms"]["mean"] < outcome.chosen["emit_latency_ms"]["mean"]
