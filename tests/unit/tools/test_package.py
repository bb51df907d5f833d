"""The code's archive for spark-submit --py-files (tools/package.py) and bin/spark-local's command line.

The archive is checked by importing the job's executor modules from it in a fresh interpreter; the cluster
itself runs in tests/system/test_cluster.py.
"""

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from jobs.common.session import PACKAGES, SUBMIT_PACKAGES
from tools import package
from tools.local import spark_cluster, spark_worker_env

ROOT = Path(__file__).resolve().parents[3]


def test_the_archive_holds_every_module_of_the_submitted_packages_and_the_same_sources_give_the_same_bytes(
    tmp_path,
):
    one = package.build(tmp_path / "one" / "awm-code.zip")
    two = package.build(tmp_path / "two" / "awm-code.zip")
    assert one.read_bytes() == two.read_bytes()
    names = zipfile.ZipFile(one).namelist()
    expected = [
        p.relative_to(ROOT).as_posix() for pkg in SUBMIT_PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))
    ]
    assert names == expected  # every module, sub-packages included, at the archive's root
    assert set(PACKAGES) <= set(SUBMIT_PACKAGES)  # what the executors import is in it
    assert {
        "jobs/stream/workers/executor_stage.py",
        "watermark/strategies/slo_kernel.py",
        "monitoring/metrics.py",
    } <= set(names)


def test_the_executors_modules_import_from_the_archive_alone(tmp_path):
    archive = package.build(tmp_path / "awm-code.zip")
    # The archive first on sys.path, as PySpark puts a --py-files entry; numba's cached functions
    # (watermark.strategies.slo_kernel) need a path that says .zip.
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1])\n"
        "import jobs.stream.workers.executor_stage as e, jobs.stream.workers.arrow_path as a\n"
        "import watermark.strategies.slo_kernel as k, monitoring.metrics as m\n"
        "print(json.dumps([x.__file__ for x in (e, a, k, m)]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(archive)], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    files = json.loads(proc.stdout)
    assert all(f.startswith(f"{archive}/") for f in files), files


def test_an_archive_whose_name_pyspark_would_not_import_is_refused(tmp_path, capsys):
    with pytest.raises(ValueError, match=r"\.zip"):
        package.build(tmp_path / "awm_code-0.1.0-py3-none-any.whl")
    assert package.main(["--out", str(tmp_path / "code.whl")]) == 2
    assert "error:" in capsys.readouterr().err
    assert package.main(["--out", str(tmp_path / "code.zip")]) == 0
    assert "modules of jobs, watermark, monitoring" in capsys.readouterr().out


def test_spark_local_status_without_a_cluster_exits_3_and_bad_arguments_exit_2(tmp_path, capsys):
    assert spark_cluster.main(["status", "--dir", str(tmp_path)]) == 3
    assert "spark: not running" in capsys.readouterr().out
    assert spark_cluster.main(["stop", "--dir", str(tmp_path)]) == 0
    assert spark_cluster.main(["start", "--dir", str(tmp_path), "--port", "70000"]) == 2
    assert spark_cluster.main(["start", "--dir", str(tmp_path), "--port", "7077", "--ui-port", "7077"]) == 2
    assert spark_cluster.main(["start", "--dir", str(tmp_path), "--memory", "lots"]) == 2
    assert spark_cluster.main(["start", "--dir", str(tmp_path), "--workers", "0"]) == 2


def test_the_workers_environment_is_made_again_when_the_lock_changes_and_only_then(tmp_path):
    for name in ("pyproject.toml", "requirements.lock"):
        shutil.copy(ROOT / name, tmp_path / name)
    key = spark_worker_env.worker_env_key(tmp_path)
    assert key == spark_worker_env.worker_env_key(tmp_path) == spark_worker_env.worker_env_key(ROOT)
    lock = tmp_path / "requirements.lock"
    lock.write_text(lock.read_text().replace("river==", "river>="))
    assert spark_worker_env.worker_env_key(tmp_path) != key
    # The dependencies installed: the library's and the spark extra's, never the project's own.
    required = spark_worker_env._runtime_requirements(ROOT)
    assert any(r.startswith("pyspark") for r in required) and any(r.startswith("river") for r in required)
    assert not any(r.startswith(("adaptive-watermarks", "apache-airflow")) for r in required)
