"""Locations the job cannot use are refused in one error line, exit 2, before anything is written: an
unknown scheme, a missing bucket, storage that does not answer (a real S3 server, fixture s3_server)."""

import os
import subprocess
import sys

import pytest

from tests.plugins.services import free_port
from watermark import storage


def run_job(env, *flags):
    command = [sys.executable, "-m", "jobs.stream", "--format", "json", "--max-batches", "1", *flags]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize(
    ("output", "says"),
    [
        ("ftp://host/tables", "unsupported scheme 'ftp'"),
        ("s3a://no-such-bucket/tables", "bucket or container 'no-such-bucket' does not exist"),
        ("s3a:///tables", "no bucket"),
    ],
)
def test_an_output_the_job_cannot_use_is_one_error_line_and_nothing_is_written(s3_server, output, says):
    bucket = s3_server.new_bucket()
    proc = run_job(
        os.environ | s3_server.env(),
        "--input",
        f"s3a://{bucket}/in",
        "--output",
        output,
        "--checkpoint",
        f"s3a://{bucket}/ck",
        "--config",
        f"s3a://{bucket}/watermark.json",
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and says in errors[0], proc.stderr[-2000:]
    assert storage.walk_files(f"s3a://{bucket}") == []  # no checkpoint, no configuration, no table


def test_storage_that_does_not_answer_is_one_error_line(s3_server, tmp_path):
    env = os.environ | s3_server.env() | {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}"}
    proc = run_job(
        env,
        "--input",
        str(tmp_path / "in"),
        "--output",
        "s3a://any/tables",
        "--checkpoint",
        str(tmp_path / "ck"),
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "--output s3a://any/tables: the storage cannot be reached" in errors[0]
    assert not (tmp_path / "ck").exists()
