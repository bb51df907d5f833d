"""One place that builds the SparkSession for the project's jobs."""

from __future__ import annotations

import os
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

#: The project's root: ``jobs/`` and ``watermark/`` run in Spark's Python workers too (the Arrow path).
ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("jobs", "watermark")


def build_session(app_name: str, *, master: str | None = None, shuffle_partitions: int | None = None) -> Any:
    """A SparkSession for ``app_name``: local by default, shuffle partitions = cores, no UI, quiet logs.

    Locally, ``spark.sql.shuffle.partitions`` defaults to the core count: Spark's default of 200 makes small
    stateful or grouped batches several times slower on one machine. Under ``spark-submit`` (``SPARK_HOME``
    or ``SPARK_MASTER`` set) the master and the shuffle partitions are left to its ``--master`` and
    ``--conf`` (set ``spark.sql.shuffle.partitions`` to the cluster's executor cores).
    """
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    cores = os.cpu_count() or 2
    submitted = "SPARK_MASTER" in os.environ or bool(os.environ.get("SPARK_HOME"))
    local = master.startswith("local") if master is not None else not submitted
    if local:
        # Local Python workers run this interpreter (with pyarrow) and import the project from its root.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        if str(ROOT) not in paths:
            os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *paths])
    builder = (
        SparkSession.builder.appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        # The job caches each micro-batch's typed columns for a few actions only: building the cache
        # uncompressed is cheaper than compressing it.
        .config("spark.sql.inMemoryColumnarStorage.compressed", "false")
    )
    if shuffle_partitions is not None or local:
        builder = builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions or cores))
    if master is not None:
        builder = builder.master(master)
    elif local:
        builder = builder.master(f"local[{cores}]")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


_shipped: set[str] = set()


def ship_code(spark: Any) -> None:
    """Send ``jobs/`` and ``watermark/`` to the executors' Python workers (once per application).

    Local sessions built by :func:`build_session` find them on ``PYTHONPATH``; on a cluster the executors
    get a zip of both packages (``SparkContext.addPyFile``). numpy, pyarrow and river must be installed on
    the executors (README: deploying on a cluster).
    """
    sc = spark.sparkContext
    app = sc.applicationId
    if app in _shipped or sc.master.startswith("local"):
        return
    folder = Path(tempfile.mkdtemp(prefix="wm-code-"))
    archive = folder / "watermark_pipeline.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for package in PACKAGES:
            for path in sorted((ROOT / package).rglob("*.py")):
                zf.write(path, path.relative_to(ROOT).as_posix())
    sc.addPyFile(str(archive))
    _shipped.add(app)
