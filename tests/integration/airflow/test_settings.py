"""Who may set what: a run's conf gives only declared Params; the interpreter, the PATH and the retentions
come from Variables; VACUUM retention has a floor (``dags/pipeline_settings.py``, issue 29 item 8)."""

import logging
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
#: The Params every DAG declares (``location_params``).
DECLARED = ("tables", "config")


@pytest.fixture
def variables(airflow_home, monkeypatch):
    """Sets Airflow Variables the way a deployment may: ``AIRFLOW_VAR_<NAME>`` (no metadata DB needed)."""

    def set_variable(name: str, value: str) -> None:
        monkeypatch.setenv(f"AIRFLOW_VAR_{name.upper()}", value)

    for name in ("awm_python", "awm_vacuum_retain_hours", "awm_vacuum_allow_below_floor"):
        monkeypatch.delenv(f"AIRFLOW_VAR_{name.upper()}", raising=False)
    return set_variable


@pytest.mark.parametrize(
    "conf",
    [
        {"python": "/tmp/evil/python3"},  # spark.pyspark.python, and the first PATH entry of spark-submit
        {"path": "/tmp/evil"},
        {"vacuum_retain_hours": 0},  # VACUUM deleting files an append has not committed yet
        {"arrivals_retain_days": 0},
        {"tables": "/data/tables", "reports": "/tmp/r"},  # reports: a Param of the re-tuning DAG only
    ],
)
def test_a_run_conf_key_no_param_declares_fails_the_run_naming_it(variables, conf):
    from airflow.sdk.exceptions import AirflowFailException

    from dags.pipeline_settings import resolve

    params = {"tables": "", "config": ""} | conf  # what Airflow makes of them: the conf merged in
    undeclared = sorted(set(conf) - set(DECLARED))
    with pytest.raises(AirflowFailException, match="no Param of the DAG declares") as refused:
        resolve(params, declared=DECLARED, conf=conf)
    assert all(repr(key) in str(refused.value) for key in undeclared)
    # The same when core.dag_run_conf_overrides_params is off: the key is only in the run's conf.
    with pytest.raises(AirflowFailException, match="no Param of the DAG declares"):
        resolve({"tables": "", "config": ""}, declared=DECLARED, conf=conf)


def test_the_interpreter_and_path_come_from_the_variable_and_locations_from_declared_params(
    variables, tmp_path
):
    from dags.pipeline_settings import resolve

    python = tmp_path / "venv" / "bin" / "python3"
    variables("awm_python", str(python))
    variables("awm_tables", str(tmp_path / "from-variable"))
    out = resolve({"tables": str(tmp_path / "t"), "config": ""}, declared=DECLARED, conf={})
    assert out["python"] == str(python)
    assert out["path"].split(":")[0] == str(python.parent)
    assert out["tables"] == str(tmp_path / "t")  # a declared Param overrides the Variable
    assert out["config"].endswith("watermark.json")  # empty: the Variable, else the default
    from_variable = resolve({"tables": "", "config": ""}, declared=DECLARED)["tables"]
    assert from_variable == str(tmp_path / "from-variable")
    # Without the Variable: the worker's own interpreter.
    variables("awm_python", "")
    assert resolve({}, declared=DECLARED)["python"] == sys.executable


def test_a_vacuum_retention_below_delta_s_floor_needs_the_explicit_logged_override(variables, caplog):
    from airflow.sdk.exceptions import AirflowFailException

    from dags.pipeline_settings import resolve

    assert resolve({}, declared=DECLARED)["vacuum_retain_hours"] == "168"  # the default: the floor
    variables("awm_vacuum_retain_hours", "0")
    with pytest.raises(AirflowFailException, match="below Delta's 168 h") as refused:
        resolve({}, declared=DECLARED)
    assert "awm_vacuum_allow_below_floor=true" in str(refused.value)
    variables("awm_vacuum_allow_below_floor", "yes")  # only "true" allows it
    with pytest.raises(AirflowFailException, match="below Delta's 168 h"):
        resolve({}, declared=DECLARED)

    variables("awm_vacuum_allow_below_floor", "true")
    with caplog.at_level(logging.WARNING, logger="dags.pipeline_settings"):
        assert resolve({}, declared=DECLARED)["vacuum_retain_hours"] == "0"
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("below Delta's 168 h floor" in m and "awm_vacuum_allow_below_floor" in m for m in warned)

    variables("awm_vacuum_retain_hours", "200")  # above the floor: no override needed, no warning
    variables("awm_vacuum_allow_below_floor", "false")
    assert resolve({}, declared=DECLARED)["vacuum_retain_hours"] == "200"
    for bad in ("-1", "nan", "a week"):
        variables("awm_vacuum_retain_hours", bad)
        with pytest.raises(AirflowFailException, match="must be a number >= 0"):
            resolve({}, declared=DECLARED)


@pytest.mark.slow
def test_a_triggered_run_with_an_undeclared_conf_key_fails_at_its_settings_task(airflow_home, tmp_path):
    """Through Airflow itself (``dag.test()``): the conf key reaches ``params`` and the run stops there."""
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=str(ROOT / "dags")).get_dag("awm_data_quality")
    when = datetime.now(UTC).replace(microsecond=0) - timedelta(days=3)
    conf = {"tables": str(tmp_path / "none"), "whole_tables": True, "python": str(tmp_path / "evil")}
    run = dag.test(logical_date=when, run_conf=conf)
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert run.state == "failed"
    assert states == {"settings": "failed", "check_tables": "upstream_failed"}
