"""``bin/s3-local`` and :class:`tools.local.s3.LocalS3`: a real moto server in its own process (no mocks).

Besides the command's round trip, the S3 operations the pipeline's readers and writers rely on are checked
on the server itself (the Spark and Delta side is ``test_spark_s3.py``).
"""

from __future__ import annotations

import re
import socket
import subprocess
from pathlib import Path

import pytest

from tools.local.s3 import LocalS3, S3LocalError

ROOT = Path(__file__).resolve().parents[3]
#: bin/s3-local's wait for a start or stop: long enough for any machine (a busy one is no test's subject).
WAIT = ["--timeout", "600"]


def s3_local(server, *args: str) -> subprocess.CompletedProcess:
    """Run ``bin/s3-local`` (the real script: it sources bin/bootstrap.sh) in a subprocess."""
    return subprocess.run(
        [str(ROOT / "bin" / "s3-local"), *args],
        cwd=ROOT,
        env=server.env,
        capture_output=True,
        text=True,
        check=False,
    )


def running(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie left for a non-reaping init does not count)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def exports(output: str) -> dict[str, str]:
    """The ``export NAME=VALUE`` lines of the command's output."""
    return dict(re.findall(r"^export (\w+)=(.*)$", output, flags=re.MULTILINE))


def test_cli_start_status_stop_on_a_free_port(tmp_path, local_server):
    port, home = local_server.free_port(), tmp_path / "s3"
    started = s3_local(
        local_server, "start", "--port", str(port), "--dir", str(home), "--bucket", "tables", *WAIT
    )
    try:
        assert started.returncode == 0, started.stderr
        lines = started.stdout.splitlines()
        match = re.fullmatch(
            rf"# s3: started in [0-9.]+ s, pid (\d+), endpoint http://127\.0\.0\.1:{port} \(dir {home}, log "
            r".*\); objects live in memory until it stops",
            lines[0],
        )
        assert match, started.stdout
        pid = int(match.group(1))
        assert lines[1] == "# buckets: tables (s3a://tables/...)"
        env = exports(started.stdout)
        assert env == LocalS3(port=port, dir=home).env()
        assert env["AWS_ENDPOINT_URL"] == f"http://127.0.0.1:{port}"
        assert set(env) == {"AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"}
        # Every line is shell: '#' comments and exports, so `eval "$(bin/s3-local start)"` works.
        shell = subprocess.run(
            ["bash", "-c", 'eval "$1" && echo "$AWS_ENDPOINT_URL"', "-", started.stdout],
            capture_output=True,
            text=True,
            check=True,
        )
        assert shell.stdout == f"http://127.0.0.1:{port}\n"

        status = s3_local(local_server, "status", "--dir", str(home))
        assert status.returncode == 0, status.stderr
        assert status.stdout.startswith(f"# s3: running, pid {pid}, endpoint http://127.0.0.1:{port} ")
        assert exports(status.stdout) == env
        client = LocalS3(port=port, dir=home).client()
        assert [b["Name"] for b in client.list_buckets()["Buckets"]] == ["tables"]

        again = s3_local(local_server, "start", "--port", str(port), "--dir", str(home), *WAIT)
        assert again.returncode == 1
        assert f"error: a server already runs in {home} (pid {pid}" in again.stderr
        other = s3_local(local_server, "start", "--port", str(port), "--dir", str(tmp_path / "other"), *WAIT)
        assert other.returncode == 1
        assert f"port {port} on 127.0.0.1 is already in use" in other.stderr
    finally:
        stopped = s3_local(local_server, "stop", "--dir", str(home), *WAIT)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert re.fullmatch(rf"s3: stopped pid {pid} in [0-9.]+ s\n", stopped.stdout), stopped.stdout
    assert not running(pid)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()

    status = s3_local(local_server, "status", "--dir", str(home))
    assert (status.returncode, status.stdout) == (3, f"s3: not running (dir {home})\n")
    again = s3_local(local_server, "stop", "--dir", str(home), *WAIT)
    assert (again.returncode, again.stdout) == (0, f"s3: not running (dir {home})\n")
    assert not (home / "server.json").exists()
    assert (home / "logs" / "server.log").read_text() == "", "the request log is off; no warning expected"


def test_bad_arguments_exit_2_and_a_refused_bucket_stops_the_server(tmp_path, local_server):
    home = tmp_path / "s3"
    for args, message in (
        (["start", "--port", "0"], "--port must be an integer in 1..65535, got 0"),
        (["status", "--bucket", "x"], "--bucket goes with start"),
        (["restart"], "invalid choice: 'restart'"),
    ):
        result = s3_local(local_server, *args, "--dir", str(home))
        assert result.returncode == 2, result.stderr
        assert message in result.stderr
    port = local_server.free_port()
    refused = s3_local(
        local_server, "start", "--port", str(port), "--dir", str(home), "--bucket", "ab", *WAIT
    )
    assert refused.returncode == 2
    assert "invalid bucket name 'ab': 3 to 63 lower-case letters" in refused.stderr
    assert s3_local(local_server, "status", "--dir", str(home)).returncode == 3


def processes_in(folder: Path) -> list[int]:
    """The processes whose working directory is ``folder`` (the server runs in its directory)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if (
                proc.name.isdigit()
                and Path(proc / "cwd").resolve() == folder.resolve()
                and running(int(proc.name))
            ):
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def test_a_start_timeout_stops_the_server(tmp_path, local_server):
    s3 = LocalS3(port=local_server.free_port(), dir=tmp_path, start_timeout=0.01)  # Python starts slower
    with pytest.raises(S3LocalError, match=r"^the server did not answer within 0.01 s; ") as error:
        s3.start()
    assert str(s3.log_file) in str(error.value)
    assert s3.status()["running"] is False
    assert not (tmp_path / "server.json").exists()
    assert processes_in(tmp_path) == []


def test_local_s3_serves_what_s3a_and_delta_rs_use(tmp_path, local_server):
    from botocore.exceptions import ClientError

    with LocalS3(port=local_server.free_port(), dir=tmp_path, start_timeout=600) as s3:
        status = s3.status()
        assert status["running"], status
        assert s3.endpoint == f"http://127.0.0.1:{s3.port}"
        bucket = s3.new_bucket("ops")
        assert re.fullmatch(r"ops-[0-9a-f]{12}", bucket)
        assert s3.create_bucket(bucket) == bucket  # an existing bucket is kept
        client = s3.client()
        for key in ("t/_delta_log/00000000000000000000.json", "t/part-0.parquet", "t/date=1/part-1.parquet"):
            client.put_object(Bucket=bucket, Key=key, Body=key.encode())
        # Listing with a delimiter: s3a's directory listing; start-after: the Delta log's listFrom.
        listing = client.list_objects_v2(Bucket=bucket, Prefix="t/", Delimiter="/")
        assert [c["Key"] for c in listing["Contents"]] == ["t/part-0.parquet"]
        assert [p["Prefix"] for p in listing["CommonPrefixes"]] == ["t/_delta_log/", "t/date=1/"]
        after = client.list_objects_v2(
            Bucket=bucket, Prefix="t/", StartAfter="t/_delta_log/00000000000000000000.json"
        )
        assert [c["Key"] for c in after["Contents"]] == ["t/date=1/part-1.parquet", "t/part-0.parquet"]
        # A conditional PUT of an existing key fails (delta-rs commits so), the object is unchanged.
        with pytest.raises(ClientError) as refused:
            client.put_object(Bucket=bucket, Key="t/part-0.parquet", Body=b"other", IfNoneMatch="*")
        assert refused.value.response["Error"]["Code"] == "PreconditionFailed"
        assert client.get_object(Bucket=bucket, Key="t/part-0.parquet")["Body"].read() == b"t/part-0.parquet"
        # Ranged GET (Parquet footers), multipart upload (s3a's block output), copy (s3a's rename).
        assert (
            client.get_object(Bucket=bucket, Key="t/part-0.parquet", Range="bytes=2-5")["Body"].read()
            == b"part"
        )
        part = bytes(range(256)) * 20_480  # 5 MiB: S3's smallest part but the last
        upload = client.create_multipart_upload(Bucket=bucket, Key="big")
        etags = [
            client.upload_part(Bucket=bucket, Key="big", UploadId=upload["UploadId"], PartNumber=n, Body=body)
            for n, body in ((1, part), (2, b"tail"))
        ]
        client.complete_multipart_upload(
            Bucket=bucket,
            Key="big",
            UploadId=upload["UploadId"],
            MultipartUpload={"Parts": [{"PartNumber": n, "ETag": e["ETag"]} for n, e in enumerate(etags, 1)]},
        )
        client.copy_object(Bucket=bucket, Key="big-copy", CopySource={"Bucket": bucket, "Key": "big"})
        assert client.get_object(Bucket=bucket, Key="big-copy")["Body"].read() == part + b"tail"
        deleted = client.delete_objects(
            Bucket=bucket, Delete={"Objects": [{"Key": "big"}, {"Key": "big-copy"}]}
        )
        assert sorted(d["Key"] for d in deleted["Deleted"]) == ["big", "big-copy"]
        pid = s3.status()["pid"]
    assert not running(pid)
    assert s3.status()["running"] is False
