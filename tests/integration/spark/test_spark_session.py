"""build_session under spark-submit: its --conf reaches the session (the UI is not forced off)."""

import subprocess
import sys
from pathlib import Path

import pytest

from jobs.common.session import project_jars

pytestmark = pytest.mark.slow


SCRIPT = """
from jobs.common.session import build_session
spark = build_session("conf-probe")
print("UI", spark.conf.get("spark.ui.enabled", "unset"), spark.conf.get("spark.sql.session.timeZone"))
keys = ["spark.sql.shuffle.partitions", "spark.databricks.delta.snapshotPartitions",
        "spark.sql.sources.parallelPartitionDiscovery.parallelism"]
print("PARTITIONS", *[spark.conf.get(k) for k in keys])
spark.stop()
"""


def test_spark_submit_conf_reaches_the_session_and_a_local_master_gets_a_task_per_core(tmp_path, jvm_process):
    script = tmp_path / "probe.py"
    script.write_text(SCRIPT)
    submit = Path(sys.executable).parent / "spark-submit"
    args = [str(submit), "--master", "local[1]", "--jars", ",".join(project_jars())]
    args += ["--conf", "spark.ui.enabled=true", "--conf", "spark.ui.port=0"]
    args += ["--conf", "spark.sql.shuffle.partitions=3", str(script)]
    out = subprocess.run(args, env=jvm_process.env, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "UI true UTC" in out.stdout, out.stdout + out.stderr[-2000:]
    # a local master gets one task per core (local[1]: 1) for what --conf leaves unset, and keeps the rest
    assert "PARTITIONS 3 1 1" in out.stdout, out.stdout
