"""The SparkSession of the jobs: building it, shipping the code to the executors, running a batch command."""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: The project's root: ``jobs/`` and ``watermark/`` run in Spark's Python workers too (the Arrow path).
ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("jobs", "watermark")
#: Where ``bin/bootstrap.sh`` puts the jars of ``infra/jvm/spark/pom.xml`` (delta-spark, the Kafka source).
JARS_DIR = ROOT / ".jvm" / "spark"
#: Spark SQL and Delta settings a local master (``local[N]``, also under ``spark-submit``) sets to N, one task
#: per core, unless ``--conf`` sets them: their defaults are for clusters and cost seconds on one machine.
ONE_MACHINE_CONF = (
    # Spark's default of 200 makes small stateful or grouped batches several times slower.
    "spark.sql.shuffle.partitions",
    # VACUUM lists a table's folders with 10,000 tasks: 30-40 s per table however small (under 6 s so).
    "spark.sql.sources.parallelPartitionDiscovery.parallelism",
)
#: Settings a local master gets whatever its cores, unless ``--conf`` sets them. Delta rebuilds a table's
#: state (the application ids an idempotent append checks, ``txnVersion``) in Spark jobs over this many
#: partitions, by default 50; on one machine the log of a streaming table is small: an idempotent append
#: took 0.68 s with 1 partition, 0.69 s with one per core and 3.25 s with 50 (``benchmarks/delta_append.py``).
ONE_MACHINE_FIXED = {"spark.databricks.delta.snapshotPartitions": "1"}
#: Delta Lake's SQL extension and catalog (``configure_spark_with_delta_pip`` would set them, through Ivy).
DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}


def project_jars(jars_dir: str | os.PathLike[str] | None = None) -> list[str]:
    """The jar files the session loads with ``spark.jars``: ``$AWM_JARS_DIR``, else ``.jvm/spark``.

    Raises
    ------
    FileNotFoundError
        If the folder holds no delta-spark jar: the set-up (``bin/bootstrap.sh``) has not fetched them.

    """
    folder = Path(jars_dir or os.environ.get("AWM_JARS_DIR") or JARS_DIR)
    jars = sorted(str(p) for p in folder.glob("*.jar"))
    if not any(Path(j).name.startswith("delta-spark_") for j in jars):
        msg = (
            f"no delta-spark jar in {folder}: run bin/bootstrap.sh (it fetches infra/jvm/pom.xml's jars with "
            "Maven), or set AWM_JARS_DIR to a folder holding them"
        )
        raise FileNotFoundError(msg)
    return jars


def arrow_frame(spark: Any, table: Any) -> Any:
    """A Spark DataFrame of every row of the Arrow table ``table``.

    PySpark (4.1, 4.2) ``createDataFrame(pa.Table)`` silently stops at an empty record batch after a
    non-empty one: chunks ``[3, 0, 3]`` give 3 rows, not 6. Tables concatenated or filtered by pyarrow
    often hold empty chunks, so every Arrow table goes to Spark through here, without them.

    >>> import pyarrow as pa
    >>> t = pa.concat_tables([pa.table({"a": [1, 2, 3]}), pa.table({"a": pa.array([], pa.int64())}),
    ...                       pa.table({"a": [4, 5, 6]})])
    >>> [b.num_rows for b in t.to_batches()], [b.num_rows for b in _non_empty(t).to_batches()]
    ([3, 0, 3], [3, 3])
    """
    return spark.createDataFrame(_non_empty(table))


def _non_empty(table: Any) -> Any:
    import pyarrow as pa

    return pa.Table.from_batches([b for b in table.to_batches() if b.num_rows], schema=table.schema)


def build_session(app_name: str, *, master: str | None = None, shuffle_partitions: int | None = None) -> Any:
    """A SparkSession for ``app_name``: local by default, shuffle partitions = cores, no UI, quiet logs.

    Under ``spark-submit`` the UI and the log level are left to its ``--conf`` and log4j settings.

    The session loads delta-spark and the Kafka source from :func:`project_jars` (``spark.jars``: no Ivy
    resolution at run time) with Delta's SQL extension and catalog. Under ``spark-submit`` the jars are
    given by its ``--jars`` (docs/deployment.md) and only the Delta settings are added.

    With a local master (``local[N]``, the default outside ``spark-submit``, or ``spark-submit --master
    local[N]``) the settings of :data:`ONE_MACHINE_CONF` (shuffle partitions, VACUUM's listing tasks)
    default to N, the master's cores, and Delta's snapshot partitions to 1 (:data:`ONE_MACHINE_FIXED`):
    Spark's and Delta's defaults (200, 10,000, 50) cost seconds per micro-batch and half a minute per
    VACUUM on one machine. A ``--conf`` that sets one
    keeps its value; ``shuffle_partitions`` sets the first two. Under ``spark-submit`` (``SPARK_HOME`` or
    ``SPARK_MASTER`` set) the master is left to its ``--master``; on a cluster set
    ``spark.sql.shuffle.partitions`` to the executor cores.

    Object storage: the standard AWS variables (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``,
    ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``...) become s3a settings on the session's Hadoop configuration,
    and ``s3://`` is served by s3a (:func:`jobs.common.object_store.apply_s3a_settings`); a ``--conf
    spark.hadoop.fs.s3a.*`` keeps its value.
    """
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    cores = os.cpu_count() or 2
    # spark-submit starts the JVM first and hands this process its gateway (PYSPARK_GATEWAY_PORT)
    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    submitted = under_submit or "SPARK_MASTER" in os.environ or bool(os.environ.get("SPARK_HOME"))
    local = master.startswith("local") if master is not None else not submitted
    if local:
        # Local Python workers run this interpreter (with pyarrow) and import the project from its root.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        if str(ROOT) not in paths:
            os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *paths])
    builder = SparkSession.builder.appName(app_name)
    if not under_submit:  # under spark-submit its --conf decides the UI (and the log level, below)
        builder = builder.config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
    builder = (
        builder.config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        # The job caches each micro-batch's typed columns for a few actions only: building the cache
        # uncompressed is cheaper than compressing it.
        .config("spark.sql.inMemoryColumnarStorage.compressed", "false")
    )
    for key, value in DELTA_CONF.items():
        builder = builder.config(key, value)
    if not submitted:
        builder = builder.config("spark.jars", ",".join(project_jars()))
        # Stopping a query while a micro-batch runs makes Spark match a regex against the batch's error
        # text (a Python traceback of several thousand lines): with the default 1 MB thread stack that
        # match overflows and the stream thread dies of a StackOverflowError (at stop, but loud). Local
        # runs only; under spark-submit the driver's Java options are its --driver-java-options.
        builder = builder.config("spark.driver.extraJavaOptions", "-Xss16m")
    if master is not None:
        builder = builder.master(master)
    elif local:
        builder = builder.master(f"local[{cores}]")
    spark = builder.getOrCreate()
    if not under_submit:
        spark.sparkContext.setLogLevel("ERROR")
    context = spark.sparkContext
    if shuffle_partitions is not None or str(context.master).startswith("local"):
        given = context.getConf()
        for key in ONE_MACHINE_CONF:
            if shuffle_partitions is not None or not given.contains(key):
                spark.conf.set(key, str(shuffle_partitions or context.defaultParallelism))
        for key, value in ONE_MACHINE_FIXED.items():
            if not given.contains(key):
                spark.conf.set(key, value)
    from jobs.common.object_store import apply_s3a_settings

    apply_s3a_settings(spark, os.environ)
    return spark


_shipped: dict[str, str] = {}
#: The packages ``python -m tools.package`` puts in the archive that ``spark-submit --py-files`` ships: the
#: job, its library and its metrics (the executors import the first two; a driver without the project, all).
SUBMIT_PACKAGES = ("jobs", "watermark", "monitoring")
#: The name of that archive (``dist/awm-code.zip``): a zip, because PySpark puts a ``--py-files`` entry on the
#: workers' ``sys.path`` only if it ends in .zip, .egg or .jar (a wheel's .whl is shipped but never imported),
#: and numba caches the compiled functions of a module inside a zip only when the path says ``.zip``.
CODE_ZIP = "awm-code.zip"


def ship_code(spark: Any) -> str | None:
    """Make ``jobs/`` and ``watermark/`` importable in the executors' Python workers; says from where.

    - A local master: nothing to ship, the Python workers run on this machine and import the project
      from the checkout (:func:`build_session` puts it on their ``PYTHONPATH``). Returns None.
    - The code shipped by ``spark-submit --py-files`` (an archive holding :data:`PACKAGES`, such as
      ``dist/awm-code.zip`` from ``python -m tools.package``): nothing more to ship. Returns
      ``"--py-files <name>"``.
    - Otherwise (a cluster, no such archive): a zip of both packages made now from this checkout
      (:func:`code_archive`) goes to the executors with ``SparkContext.addPyFile``, once per application,
      and a warning says to ship the code with ``--py-files`` instead. Returns ``"run-time zip <path>"``.

    numpy, pyarrow and river must be installed in the executors' Python (docs/deployment.md).
    """
    sc = spark.sparkContext
    if sc.master.startswith("local"):
        return None
    app = sc.applicationId
    if app not in _shipped:
        submitted = submitted_code(sc)
        if submitted is not None:
            _shipped[app] = f"--py-files {submitted}"
        else:
            archive = code_archive(Path(tempfile.mkdtemp(prefix="wm-code-")))
            sc.addPyFile(str(archive))
            _shipped[app] = f"run-time zip {archive}"
            logging.getLogger(__name__).warning(
                "the executors get %s made from %s at run time: build the code's archive (python -m "
                "tools.package) and give it to spark-submit with --py-files dist/%s (docs/deployment.md)",
                archive.name,
                ROOT,
                CODE_ZIP,
            )
    return _shipped[app]


def submitted_code(sc: Any) -> str | None:
    """The name of the ``--py-files`` archive (``spark.submit.pyFiles``) holding :data:`PACKAGES`, or None.

    PySpark copies each of those archives into the application's ``SparkFiles`` folder and sends the
    executors its name; an archive is the project's code when it holds every package's ``__init__.py``.
    """
    from pyspark import SparkFiles

    listed = sc.getConf().get("spark.submit.pyFiles", "") or ""
    for entry in (e for e in listed.split(",") if e):
        name = entry.rstrip("/").rsplit("/", 1)[-1]
        try:
            with zipfile.ZipFile(Path(SparkFiles.getRootDirectory()) / name) as archive:
                names = set(archive.namelist())
        except (OSError, zipfile.BadZipFile):
            continue
        if all(f"{package}/__init__.py" in names for package in PACKAGES):
            return name
    return None


#: Every member of an archive gets this time stamp, so that the same sources give the same bytes.
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)


def code_archive(
    folder: Path, packages: tuple[str, ...] = PACKAGES, name: str = "watermark_pipeline.zip"
) -> Path:
    """A zip ``folder/name`` of every ``.py`` file of ``packages``, sub-packages (``jobs/stream/``) included.

    Members are sorted and time-stamped 1980-01-01, so the same sources give the same archive.
    """
    archive = folder / name
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for package in packages:
            for path in sorted((ROOT / package).rglob("*.py")):
                member = zipfile.ZipInfo(path.relative_to(ROOT).as_posix(), _ZIP_TIME)
                member.compress_type = zipfile.ZIP_DEFLATED
                member.external_attr = 0o644 << 16
                zf.writestr(member, path.read_bytes())
    return archive


def run_reporting(app_name: str, work: Callable[[Any], Any], report_path: str | None = None) -> int:
    """Run a batch command's ``work(spark)`` on its own session and hand over its report; exit status 0.

    The report (anything with ``as_dict()``) is printed as one JSON line on standard output and, with
    ``report_path``, written there (indented, atomically) for the DAG task that reads it. The session
    stops whether or not the work succeeds.
    """
    import json

    from watermark.config import write_text_atomically

    spark = build_session(app_name)
    try:
        report = work(spark)
    finally:
        spark.stop()
    if report_path:
        write_text_atomically(report_path, json.dumps(report.as_dict(), indent=2) + "\n")
    print(json.dumps(report.as_dict()))
    return 0
