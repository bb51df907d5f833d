"""The re-tuning DAG over a day of arrivals under dag.test() (the other DAG runs: ``test_dags.py``; apart
from them so that the suite's workers run this, the longest DAG run, beside them)."""

import json
from datetime import timedelta
from pathlib import Path

import pytest

from tests.integration.airflow.test_dags import ending_tomorrow, pushed
from watermark.config import load_config, write_config

pytestmark = pytest.mark.slow


def day_of_arrivals(tables: Path, end_ms: int, rows: int = 200_000, devices: int = 16, seed: int = 0) -> None:
    """A day (86,400 s of arrival time, ending at ``end_ms``) of out-of-order arrivals as ``arrivals``.

    ``devices`` devices, log-normal delays whose median doubles in the afternoon, 0.2 % stragglers a minute
    behind, a batch every 10 s: the job's Delta table."""
    import numpy as np
    import pyarrow as pa
    from deltalake import write_deltalake

    from jobs.common.schemas import ARRIVALS_SCHEMA

    rng = np.random.default_rng(seed)
    start = end_ms - 86_400_000
    tp = np.sort(rng.integers(start, end_ms - 10_000, rows))
    afternoon = tp - start > 43_200_000
    delay = rng.lognormal(np.log(np.where(afternoon, 400.0, 200.0)), 0.8).astype(np.int64)
    delay += np.where(rng.random(rows) < 0.002, 60_000, 0)
    device = rng.integers(0, devices, rows)
    table = pa.table(
        {
            "partition": pa.array([f"device-{d:02d}" for d in range(devices)]).take(pa.array(device)),
            "event_time_ms": tp - delay,
            "arrival_time_ms": tp,
            "batch_id": (tp - start) // 10_000,
            "ingested_at_ms": (tp // 10_000 + 1) * 10_000,
        }
    )
    write_deltalake(str(tables / "arrivals"), table.cast(ARRIVALS_SCHEMA))


def test_the_retuning_dag_retunes_a_day_of_arrivals_within_its_task_timeout(dagbag, pushgateway, tmp_path):
    # A day of history (4,000 arrivals from 16 devices over 86,400 s, in a real Delta table), the whole
    # search space in three partition modes: the run succeeds, so the retune task (execution_timeout 1 h)
    # did not time out, and its report carries the choice's figures on the tuning period and the held-out
    # slice. No assertion on time: the timeout is the DAG's own. What the test proves is the DAG's path over
    # a day of arrival time as it re-tunes it daily (read, tune, hold out, report, publish, push); how long
    # a day of 100k to 10M arrivals takes is benchmarks/tuner_scale.py's figure, not a test's.
    from watermark.config import PipelineConfig

    end = ending_tomorrow()
    rows = 4_000
    day_of_arrivals(tmp_path / "tables", int(end.timestamp() * 1000), rows=rows)
    doc = {"version": 1, "strategy": "periodic", "params": {"delay_ms": 5_000, "period_ms": 200},
           "window_ms": 10_000, "late_slo_pct": 0.5, "partition_mode": "min"}  # fmt: skip
    write_config(tmp_path / "watermark.json", PipelineConfig.from_dict(doc))
    dag = dagbag.get_dag("awm_watermark_retuning")
    assert dag.get_task("retune").execution_timeout == timedelta(hours=1)
    conf = {"tables": str(tmp_path / "tables"), "config": str(tmp_path / "watermark.json"),
            "reports": str(tmp_path / "reports"), "min_events": 1_000}  # fmt: skip
    # (min_events given: a run conf of an earlier test of this DAG in the same process may linger)
    run = dag.test(logical_date=end, run_conf=conf)
    assert run.state == "success"
    report = json.loads(next((tmp_path / "reports").glob("retune-*.json")).read_text())
    assert report["history_events"] == rows
    assert report["decision"] == "published"  # the running 5 s delay is far slower than needed
    assert report["chosen"]["dropped_pct"] <= 0.5
    tuning, held = report["tuning"], report["evaluation"]
    # the latest half, a fifth of it held out
    assert tuning["events"] == rows * 2 // 5 and held["events"] == rows // 10
    assert len(tuning["late_pct_by_period"]) == 4 and held["dropped_pct"] is not None
    assert report["running_evaluation"]["events"] == rows // 10
    assert load_config(tmp_path / "watermark.json").version == 2
    lines = pushed(pushgateway)
    assert any(x.startswith("awm_tuning_published{") and x.endswith(" 1") for x in lines), lines
