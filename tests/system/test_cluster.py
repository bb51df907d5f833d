"""The job on a Spark standalone cluster with its code shipped by spark-submit only.

The cluster (fixture ``spark_cluster``: ``tools.local.spark_cluster.LocalSparkCluster``, what
``bin/spark-local start`` runs) is a master and two workers, each its own JVM, whose Python is a virtualenv of
the project's dependencies without the project, in an environment with no ``PYTHONPATH`` and a working
directory outside the checkout. The job goes to it as docs/deployment.md ("Running on a cluster") says:
``python -m tools.package`` builds the code's archive, ``spark-submit --py-files`` ships it,
``spark.pyspark.python`` names the workers' Python. On landing files (the Arrow reader's passes run in the
executors) and on a 4-partition Kafka topic (the watermark stage in the executors), the cluster's run writes
the tables the same job writes in local mode (its command line's options run in the test's local Spark
session), row for row but for the columns of the wall clock. Before the landing files' job, its submission
runs a probe's tasks in the same application (:data:`PROBE`): they find the project's modules in the shipped
archive under Spark's work directory, not in the checkout (a submission of its own cost a driver and an
executor more: about 35 CPU s). The runs go one after the other (at once they were no faster on two cores,
and slowed the suite's other workers); nothing is timed. The landing files' run takes one executor
(``spark.cores.max``: what it checks is the driver apart from an executor and the code shipped to it), the
Kafka run both workers' executors (a partition's stage may run on either from one batch to the next).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from jobs.common.reads import TableReader
from jobs.common.session import project_jars
from tests.integration.spark.test_stream import iot_records
from tools.feed.kafka import feed_kafka
from tools.feed.landing import feed

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SPARK_SUBMIT = Path(sys.executable).parent / "spark-submit"
RECORDS, PER_BATCH = 1_000, 500
#: Columns of the wall clock (when a row was written or ingested): they differ from run to run.
WALL_CLOCK = {"emitted_at_ms", "ingested_at_ms", "processed_at_ms"}
#: What each compared table is sorted by (a total order of its rows).
ORDER = {
    "aggregates": ["key", "window_start_ms", "flushed"],
    "late_events": ["event_id"],
    "quarantine": ["file", "line", "reason"],
}

#: The landing files' submission: where the executors' tasks import the project's code from, printed as
#: one ``probe {...}`` line, then the job itself in the same application (spark-submit runs this file
#: with the job's flags; the job's session is the one built here, as ``python -m jobs.stream`` builds it).
PROBE = """
import json, os, sys

def where(_):
    import jobs, watermark
    from jobs.stream.workers import arrow_path, executor_stage
    from watermark.strategies import slo_kernel  # numba's cached functions, from a module in a zip
    modules = {m.__name__: os.path.abspath(m.__file__) for m in (jobs, watermark, arrow_path, executor_stage,
        slo_kernel)}
    finders = [type(f).__module__ + "." + type(f).__qualname__ for f in sys.meta_path]
    yield json.dumps({"cwd": os.getcwd(), "executable": sys.executable, "path": [os.path.abspath(p) for p in
        sys.path], "modules": modules, "finders": finders, "PYTHONPATH": os.environ.get("PYTHONPATH", "")})

from jobs.common.session import build_session, ship_code
spark = build_session("jobs.stream")
print("probe " + json.dumps({"shipped": ship_code(spark), "tasks": spark.sparkContext.parallelize(range(4), 4)
    .mapPartitions(where).collect()}), flush=True)
from jobs.stream.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.fixture(scope="module")
def code_zip(tmp_path_factory) -> Path:
    """``python -m tools.package``'s archive (into the test's folder, not the checkout's dist/)."""
    out = tmp_path_factory.mktemp("package") / "awm-code.zip"
    proc = subprocess.run(
        [sys.executable, "-m", "tools.package", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def submit_command(cluster, code: Path, script: Path | str, *args: str, executors: int = 2) -> list[str]:
    """spark-submit of ``script`` to the cluster, the code shipped by --py-files only (docs/deployment.md),
    on ``executors`` executors (one core each, one per worker)."""
    return [
        str(SPARK_SUBMIT),
        "--master",
        cluster.master_url,
        "--conf",
        f"spark.cores.max={executors}",
        "--py-files",
        str(code),
        "--jars",
        ",".join(project_jars()),
        "--conf",
        f"spark.pyspark.python={cluster.python}",
        "--conf",
        f"spark.pyspark.driver.python={sys.executable}",
        "--conf",
        "spark.sql.shuffle.partitions=2",
        "--conf",
        "spark.databricks.delta.snapshotPartitions=1",
        "--driver-java-options",
        "-Xss16m",
        str(script),
        *args,
    ]


def submit_environment(env: dict[str, str]) -> dict[str, str]:
    """The submitting shell's environment: the project's virtualenv, no PYTHONPATH, no PYSPARK_PYTHON."""
    return {
        k: v for k, v in env.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")
    }


def job_flags(tmp: Path, source: list[str]) -> list[str]:
    return [
        *source,
        "--output",
        str(tmp / "out"),
        "--checkpoint",
        str(tmp / "ck"),
        "--window-ms",
        "1000",
        "--flush-at-end",
        "--no-arrival-history",
        "--metrics-port",
        "0",
    ]


def run_both(
    spark,
    tmp: Path,
    source: list[str],
    cluster,
    code: Path,
    env: dict[str, str],
    executors: int,
    script: Path = ROOT / "jobs" / "stream" / "__main__.py",
) -> list[str]:
    """The job in local mode, then on the cluster; the cluster run's progress lines (``batch N: ...``),
    the line that says where its executors import the job's code from, and :data:`PROBE`'s line if
    ``script`` is the probe.

    The local run is the reference: the job's flags, options and code (``jobs.stream.cli``) run in the
    test's local Spark session (``spark``), whose tables are ``python -m jobs.stream``'s without a JVM of
    its own to start. The cluster run is ``spark-submit`` as docs/deployment.md runs it."""
    from jobs.stream.cli import build_parser, options_from_args, summarize
    from jobs.stream.run import run_job

    local = options_from_args(build_parser().parse_args(job_flags(tmp / "local", source)))
    run_job(spark, local)
    summary = summarize(local.output)
    assert summary["events"] == RECORDS + 1, summary  # and the late record
    submit = submit_command(
        cluster,
        code,
        script,
        *job_flags(tmp / "cluster", source),
        executors=executors,
    )
    proc = subprocess.run(
        submit,
        cwd=ROOT,
        env=submit_environment(env),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    out, err = proc.stdout, proc.stderr
    errors = [line for line in err.splitlines() if "Error" in line or "Exception" in line]
    assert proc.returncode == 0, "cluster run:\n" + ("\n".join(errors[:30]) or err[-4000:])
    # Under spark-submit the driver's standard error reaches standard output (Spark's PythonRunner).
    logged = (out + err).splitlines()
    summary = json.loads([line for line in out.splitlines() if line.startswith("{")][-1])
    assert summary["events"] == RECORDS + 1, summary  # and the late record
    return [line for line in logged if line.startswith(("batch ", "probe ")) or "job's code" in line]


def rows(root: Path, table: str) -> list[dict]:
    data = TableReader(root / "out", "test-cluster").read(table)
    keep = [c for c in data.schema.names if c not in WALL_CLOCK]
    return data.select(keep).sort_by([(c, "ascending") for c in ORDER[table]]).to_pylist()


def assert_same_tables(tmp: Path) -> dict[str, list[dict]]:
    """The cluster's tables equal the local run's, row for row but for the wall clock; the local rows."""
    got = {}
    for table in ORDER:
        want = rows(tmp / "local", table)
        assert want, f"no {table} rows: the comparison would be vacuous"
        assert rows(tmp / "cluster", table) == want, table
        got[table] = want
    return got


def bad_lines(records: pa.Table) -> list[str]:
    """Two invalid records and one valid record far behind the watermark (late), after ``records``."""
    arrival = int(pa.compute.max(records["arrival_time_ms"]).as_py()) + 1
    oldest = int(pa.compute.min(records["event_time_ms"]).as_py())
    late = {
        "event_id": "late-1",
        "key": "k1",
        "event_time_ms": oldest,
        "arrival_time_ms": arrival,
        "value": 2.5,
    }
    return [
        "{not json",
        json.dumps(
            {"event_id": "bad-1", "key": "k1", "event_time_ms": -5, "arrival_time_ms": arrival, "value": 1}
        ),
        json.dumps(late),
    ]


def test_landing_files_on_the_cluster_give_the_tables_of_local_mode_from_the_shipped_archive_only(
    spark, tmp_path, spark_cluster, code_zip, jvm_process
):
    records = iot_records(RECORDS)
    inp = tmp_path / "in"
    feed(records, inp, rows_per_file=PER_BATCH)  # 2 clean files: the Arrow reader's passes in the executors
    bad = inp / "feed-000099.json"  # and one with invalid lines, landed last: Spark's reader
    bad.write_text("".join(line + "\n" for line in bad_lines(records)))
    newest = max(p.stat().st_mtime for p in inp.iterdir())
    os.utime(bad, (newest + 5, newest + 5))

    source = ["--input", str(inp), "--max-files-per-trigger", "1"]
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    # One executor: what this run checks is the split between the driver and an executor of its own.
    lines = run_both(
        spark, tmp_path, source, spark_cluster, code_zip, jvm_process.env, executors=1, script=probe
    )

    tables = assert_same_tables(tmp_path)
    assert [q["reason"] for q in tables["quarantine"]] == ["malformed_json", "event_time_before_1970"]
    assert "late-1" in {r["event_id"] for r in tables["late_events"]}
    # The cluster's executors ran the Arrow reader's passes, with the code spark-submit shipped.
    assert f"the executors import the job's code from --py-files {code_zip.name}" in "\n".join(lines)
    cluster_batches = [line for line in lines if line.startswith("batch ")]
    assert len(cluster_batches) == 3 and sum("(arrow reader" in line for line in cluster_batches) == 2
    # and its executor's tasks imported the project from the shipped archive only
    assert_tasks_import_from_the_archive(lines, spark_cluster, code_zip)


def test_a_kafka_topic_with_the_stage_in_the_executors_gives_the_tables_of_local_mode(
    spark, tmp_path, spark_cluster, code_zip, kafka_broker, jvm_process
):
    from confluent_kafka import Producer

    records = iot_records(RECORDS)
    servers = kafka_broker.bootstrap_servers
    kafka_broker.create_topic("cluster", 4)
    feed_kafka(records, servers, "cluster", partitions=4)
    arrival = int(pa.compute.max(records["arrival_time_ms"]).as_py()) + 1
    producer = Producer({"bootstrap.servers": servers})
    for line in bad_lines(records):
        producer.produce("cluster", value=line.encode(), partition=0, timestamp=arrival)
    assert producer.flush(30) == 0

    source = ["--format", "kafka", "--kafka-bootstrap-servers", servers, "--topic", "cluster"]
    # Two batches (600 offsets, then 403), the stage in the executors; the periodic watermark, not slo's,
    # whose rule numba would compile in each executor of each application (numba keys its cache by the
    # source's path, and the shipped archive's differs from one application to the next): 30 s or more.
    source += ["--stage-in", "executors", "--max-offsets-per-trigger", "600"]
    source += ["--strategy", "periodic", "--set", "delay_ms=100", "--set", "period_ms=50"]
    # Both workers' executors: a partition's stage may run on either from one batch to the next.
    lines = run_both(spark, tmp_path, source, spark_cluster, code_zip, jvm_process.env, executors=2)

    tables = assert_same_tables(tmp_path)
    assert sorted(q["reason"] for q in tables["quarantine"]) == ["event_time_before_1970", "malformed_json"]
    assert "late-1" in {r["event_id"] for r in tables["late_events"]}
    assert f"the executors import the job's code from --py-files {code_zip.name}" in "\n".join(lines)
    cluster_batches = [line for line in lines if line.startswith("batch ")]
    assert len(cluster_batches) == 2 and all("stage in executors" in line for line in cluster_batches)


def assert_tasks_import_from_the_archive(lines: list[str], cluster, code_zip: Path) -> None:
    """:data:`PROBE`'s line: every task ran in an executor's folder of a worker, with the cluster's Python,
    and imported the project from the archive spark-submit copied there, nothing of the checkout's."""
    [line] = [line for line in lines if line.startswith("probe ")]
    report = json.loads(line.removeprefix("probe "))
    assert report["shipped"] == f"--py-files {code_zip.name}"  # the job would ship nothing itself
    tasks = [json.loads(task) for task in report["tasks"]]
    work_dirs = [cluster.work_dir(i) for i in (1, 2)]
    for task in tasks:
        cwd = Path(task["cwd"])
        assert any(cwd.is_relative_to(w) for w in work_dirs), cwd  # an executor's folder of a worker
        assert task["executable"] == str(cluster.python)
        # spark-submit's --jars, served by the driver, fetched into the executor's folder
        jars = ("delta-spark_*.jar", "spark-sql-kafka-0-10_*.jar")
        assert all(any(cwd.glob(jar)) for jar in jars), sorted(p.name for p in cwd.iterdir())
        for name, path in task["modules"].items():
            # the archive spark-submit copied into the executor's folder, nothing of the checkout's
            assert Path(path).is_relative_to(cwd / code_zip.name), (name, path)
        checkout = [ROOT / name for name in (".venv", "jobs", "watermark", "monitoring")]
        for entry in [*task["path"], *task["PYTHONPATH"].split(os.pathsep)]:
            assert Path(entry) != ROOT and not any(Path(entry).is_relative_to(c) for c in checkout), entry
        assert not any("editable" in finder for finder in task["finders"]), task["finders"]
