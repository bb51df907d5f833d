"""Delta tables on S3: Spark through s3a and delta-rs, against a real local S3 server (moto: ``s3_server``).

The tests share the worker's Spark session (``tests/conftest.py``), which may have been built before
``s3_server`` set the AWS environment; a process has one SparkContext, so a session of their own would mean
stopping the shared one and starting a second JVM. :func:`jobs.common.object_store.apply_s3a_settings`, the
helper ``build_session`` itself calls, sets the s3a keys on the running session's Hadoop configuration
instead (``s3_spark``); each test writes to a bucket of its own, for which s3a opens a file system with them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from jobs.common.object_store import apply_s3a_settings

ROOT = Path(__file__).resolve().parents[3]
APP_ID = "s3-test"
#: The rows of the table: the first write, then two idempotent appends (txnVersion 1 and 2).
FIRST = [(i, f"row-{i}") for i in range(5)]
APPENDS = {1: [(101, "batch-1")], 2: [(102, "batch-2"), (103, "batch-2")]}
ALL_ROWS = sorted(FIRST + APPENDS[1] + APPENDS[2])


@pytest.fixture
def s3_spark(spark, s3_server):
    """The worker's Spark session with the s3a settings of the local server's environment."""
    applied = apply_s3a_settings(spark, os.environ)
    assert {"fs.s3a.endpoint", "fs.s3a.access.key", "fs.s3.impl"} <= set(applied)
    return spark


def append(spark, path: str, rows, version: int | None = None) -> None:
    writer = spark.createDataFrame(rows, "id long, name string").write.format("delta").mode("append")
    if version is not None:
        writer = writer.option("txnAppId", APP_ID).option("txnVersion", version)
    writer.save(path)


def rows_of(spark, path: str) -> list[tuple[int, str]]:
    return sorted((r.id, r.name) for r in spark.read.format("delta").load(path).collect())


def test_spark_writes_a_delta_table_to_s3a_once_per_batch(s3_spark, s3_server):
    bucket = s3_server.new_bucket("delta")
    path = f"s3a://{bucket}/t"
    append(s3_spark, path, FIRST)
    for version in (1, 2, 2, 1):  # the second 2 and 1: batches already committed, skipped
        append(s3_spark, path, APPENDS[version], version)
    assert rows_of(s3_spark, path) == ALL_ROWS
    assert rows_of(s3_spark, f"s3://{bucket}/t") == ALL_ROWS  # the same table through s3://
    history = s3_spark.sql(f"DESCRIBE HISTORY delta.`{path}`").select("version").collect()
    assert sorted(r.version for r in history) == [0, 1, 2]
    keys = [o["Key"] for o in s3_server.client().list_objects_v2(Bucket=bucket, Prefix="t/")["Contents"]]
    assert [k for k in keys if k.endswith(".json")] == [f"t/_delta_log/{v:020d}.json" for v in range(3)]
    assert sum(k.endswith(".parquet") for k in keys) >= 3


READER = textwrap.dedent(
    """
    import json, sys
    from jobs.common.reads import TableReader

    reader = TableReader(sys.argv[1], sys.argv[2])
    rows = sorted((r["id"], r["name"]) for r in reader.read("t").to_pylist())
    txn = reader.committed_version("t")
    print(json.dumps({"version": reader.version("t"), "txn": txn, "rows": rows}))
    """
)


def test_deltalake_reads_the_table_spark_wrote_on_s3(s3_spark, s3_server):
    bucket = s3_server.new_bucket("delta-rs")
    append(s3_spark, f"s3a://{bucket}/t", FIRST)
    for version in (1, 2):
        append(s3_spark, f"s3a://{bucket}/t", APPENDS[version], version)
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    # In a fresh process, three times, through the product's light reader: it must exit 0 every time.
    # delta-rs's own file-system handler (DeltaTable.to_pyarrow_table) aborts such a process at exit now
    # and then, on S3 as on local tables, which is why TableReader reads the files with pyarrow's (docs of
    # jobs/common/reads.py).
    for _ in range(3):
        proc = subprocess.run(
            [sys.executable, "-c", READER, f"s3://{bucket}", APP_ID],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        read = json.loads(proc.stdout)
        assert read == {"version": 2, "txn": 2, "rows": [list(r) for r in ALL_ROWS]}


def test_a_missing_bucket_is_named_in_the_error(s3_spark, s3_server):
    from py4j.protocol import Py4JJavaError

    bucket = f"missing-{uuid.uuid4().hex[:12]}"  # new_bucket names start otherwise
    with pytest.raises(Py4JJavaError) as error:
        append(s3_spark, f"s3a://{bucket}/t", FIRST)
    message = str(error.value.java_exception)
    assert "org.apache.hadoop.fs.s3a.UnknownStoreException" in message
    assert f"s3a://{bucket}/t" in message
    assert "The specified bucket does not exist" in message


def test_s3a_file_system_operations_on_the_shipped_jars(s3_spark, s3_server):
    # What s3a does besides Delta's writes, each through a part of the AWS SDK shipped in .jvm/spark:
    # multipart upload (block output stream), copy (rename: transfer manager, Netty async client), listing,
    # bulk delete. A per-bucket setting keeps the 5 MB parts to this test's bucket.
    bucket = s3_server.new_bucket("fs")
    jvm = s3_spark._jvm
    hadoop = s3_spark.sparkContext._jsc.hadoopConfiguration()
    hadoop.set(f"fs.s3a.bucket.{bucket}.multipart.size", "5M")
    hadoop.set(f"fs.s3a.bucket.{bucket}.multipart.threshold", "5M")
    Path_ = jvm.org.apache.hadoop.fs.Path
    fs = Path_(f"s3a://{bucket}/").getFileSystem(hadoop)
    assert fs.getClass().getName() == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    chunk = bytes(range(256)) * 4096  # 1 MiB
    out = fs.create(Path_(f"s3a://{bucket}/in/big.bin"))
    for _ in range(12):
        out.write(chunk)
    out.close()
    head = s3_server.client().head_object(Bucket=bucket, Key="in/big.bin")
    assert head["ContentLength"] == 12 * len(chunk)
    assert head["ETag"].strip('"').endswith("-3")  # three parts: a multipart upload
    assert fs.rename(Path_(f"s3a://{bucket}/in/big.bin"), Path_(f"s3a://{bucket}/out/big.bin"))
    assert not fs.exists(Path_(f"s3a://{bucket}/in/big.bin"))
    assert fs.getFileStatus(Path_(f"s3a://{bucket}/out/big.bin")).getLen() == 12 * len(chunk)
    stream = fs.open(Path_(f"s3a://{bucket}/out/big.bin"))
    stream.seek(7 * len(chunk) + 3)
    assert stream.read() == 3
    stream.close()
    for i in range(3):
        fs.create(Path_(f"s3a://{bucket}/out/sub/f{i}")).close()
    listed = sorted(str(s.getPath().getName()) for s in fs.listStatus(Path_(f"s3a://{bucket}/out")))
    assert listed == ["big.bin", "sub"]
    assert fs.delete(Path_(f"s3a://{bucket}/out"), True)
    assert s3_server.client().list_objects_v2(Bucket=bucket).get("KeyCount", 0) <= 1  # a directory marker


SESSION = textwrap.dedent(
    """
    import json, logging, sys
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="LOG %(name)s: %(message)s")
    from jobs.common.session import build_session

    spark = build_session("s3-conf", master="local[1]")
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    keys = ["fs.s3a.endpoint", "fs.s3a.endpoint.region", "fs.s3a.access.key", "fs.s3a.path.style.access",
            "fs.s3a.connection.ssl.enabled", "fs.s3a.aws.credentials.provider", "fs.s3.impl"]
    print(json.dumps({k: conf.get(k) for k in keys}))
    spark.stop()
    """
)


def test_a_conf_given_to_spark_wins_over_the_environment_and_no_secret_is_logged(jvm_process, s3_server):
    secret = "do-not-log-this-secret"
    env = jvm_process.env | {
        "AWS_SECRET_ACCESS_KEY": secret,
        "PYSPARK_SUBMIT_ARGS": "--conf spark.hadoop.fs.s3a.endpoint=http://127.0.0.1:1 "
        "--conf spark.hadoop.fs.s3a.endpoint.region=eu-west-3 pyspark-shell",
    }
    proc = subprocess.run(
        [sys.executable, "-c", SESSION], env=env, capture_output=True, text=True, check=False, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got == {
        "fs.s3a.endpoint": "http://127.0.0.1:1",  # --conf
        "fs.s3a.endpoint.region": "eu-west-3",  # --conf
        "fs.s3a.access.key": s3_server.env()["AWS_ACCESS_KEY_ID"],
        "fs.s3a.path.style.access": "true",
        "fs.s3a.connection.ssl.enabled": "false",
        "fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        "fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
    }
    logged = [line for line in proc.stderr.splitlines() if line.startswith("LOG jobs.common.object_store")]
    assert len(logged) == 1, proc.stderr[-3000:]
    assert "fs.s3a.secret.key" in logged[0] and "fs.s3a.access.key" in logged[0]
    assert "kept as Spark's configuration gives them: fs.s3a.endpoint, fs.s3a.endpoint.region" in logged[0]
    assert secret not in proc.stderr + proc.stdout
    assert s3_server.env()["AWS_ACCESS_KEY_ID"] not in proc.stderr
