"""A real Airflow scheduler (``airflow standalone``: scheduler, DAG processor, triggerer, API server) on a
PostgreSQL metadata DB runs the scheduled backfill, then the data-quality DAG its Assets trigger, on tables
kept on an S3 server (the DAGs under ``dag.test()``: tests/integration/airflow/test_dags.py)."""

import json
from pathlib import Path

import pytest

from tests.integration.airflow.test_dags import build_stream_tables, pushed_lines

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def stream_tables(spark_sessions, tmp_path_factory):
    """A finished run of the streaming job with an aggressive watermark (many late rows)."""
    return build_stream_tables(spark_sessions.get(), tmp_path_factory.mktemp("scheduler"))


@pytest.fixture
def postgres(local_server):
    """A throwaway PostgreSQL cluster (the Debian package's initdb / pg_ctl) on 127.0.0.1; yields its URL.

    PostgreSQL refuses to run as root: as root the cluster belongs to the ``postgres`` system user (runuser).
    """
    import glob
    import os
    import pwd
    import shutil
    import subprocess
    import tempfile

    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if not found:
        pytest.fail("PostgreSQL not found: bin/bootstrap.sh installs the Debian package postgresql")
    bindir = Path(found[-1]).parent
    data = Path(tempfile.mkdtemp(prefix="awm-pg-"))
    prefix: list[str] = []
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        os.chown(data, user.pw_uid, user.pw_gid)
        prefix = ["runuser", "-u", "postgres", "--"]
    port = local_server.free_port()

    def run(*args: str) -> None:
        subprocess.run([*prefix, *args], check=True, capture_output=True, text=True)

    run(str(bindir / "initdb"), "-D", str(data / "db"), "-U", "airflow", "--auth=trust", "-E", "UTF8")
    options = f"-p {port} -k {data} -c listen_addresses=127.0.0.1 -c max_connections=200"
    run(str(bindir / "pg_ctl"), "-D", str(data / "db"), "-o", options, "-l", str(data / "log"), "-w", "start")
    try:
        run(str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "airflow", "airflow")
        yield f"postgresql+psycopg2://airflow@127.0.0.1:{port}/airflow"
    finally:
        run(str(bindir / "pg_ctl"), "-D", str(data / "db"), "-m", "fast", "-w", "stop")
        shutil.rmtree(data, ignore_errors=True)


@pytest.mark.timeout(
    2_400
)  # minutes of scheduler heartbeats and two spark-submit jobs; more on a busy machine
def test_a_real_scheduler_on_postgresql_runs_a_scheduled_backfill_then_data_quality_on_its_assets_on_s3(
    stream_tables, tmp_path, postgres, local_server, s3_server
):
    """Production-shaped: scheduler, DAG processor, triggerer and API server (``airflow standalone``) with
    the LocalExecutor and a PostgreSQL metadata DB; settings as Variables and Connections only; the tables
    on an S3 server (``s3a://``), reached with the standard AWS environment."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import psycopg2

    from tests.plugins.services import airflow_environment
    from tools.local.prometheus import start_pushgateway
    from watermark import storage

    tmp, _ = stream_tables
    tables = f"s3a://{s3_server.new_bucket()}/tables"  # the job's tables, copied byte for byte to S3
    local_tables = storage.Location.of(str(tmp / "out"))
    for entry in storage.walk_files(local_tables):
        storage.write_bytes(
            f"{tables}/{entry.location.relative_to(local_tables)}", storage.read_bytes(entry.location)
        )
    folder = tmp_path / "dags"  # the backfill and the DAG its Assets schedule
    folder.mkdir()
    for name in ("late_data_backfill", "data_quality"):
        (folder / f"{name}.py").symlink_to(ROOT / "dags" / f"{name}.py")
    home = tmp_path / "airflow"
    port = local_server.free_port()
    gateway = start_pushgateway(tmp_path / "pushgateway", port=local_server.free_port())
    gateway_host, gateway_port = gateway.url.removeprefix("http://").rsplit(":", 1)
    env = local_server.env | s3_server.env() | airflow_environment(home, ROOT)
    env |= {
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": postgres,
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__DAGS_FOLDER": str(folder),
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        "AIRFLOW_VAR_AWM_TABLES": tables,
        "AIRFLOW_VAR_AWM_CONFIG": str(tmp / "watermark.json"),
        "AIRFLOW_CONN_AWM_PUSHGATEWAY": json.dumps(
            {"conn_type": "http", "host": gateway_host, "port": int(gateway_port)}
        ),
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }
    log = (tmp_path / "standalone.log").open("w")
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "airflow"), "standalone"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    runs: dict[str, tuple] = {}
    checked = None
    try:
        while True:  # until both runs end (no deadline of its own: the test's timeout ends a hang)
            assert proc.poll() is None, (tmp_path / "standalone.log").read_text()[-3000:]
            try:
                with (
                    psycopg2.connect(postgres.replace("+psycopg2", ""), connect_timeout=5) as db,
                    db.cursor() as cur,
                ):
                    cur.execute("select dag_id, run_id, run_type, state from dag_run order by id")
                    runs = {row[0]: row[1:] for row in cur.fetchall()}
                    if runs.get("awm_data_quality", (None, None, None))[2] == "success":
                        cur.execute(
                            "select value from xcom where dag_id = 'awm_data_quality' "
                            "and task_id = 'check_tables' and key = 'return_value'"
                        )
                        checked = cur.fetchone()
            except psycopg2.Error:  # not migrated yet
                runs = {}
            states = [r[2] for r in runs.values()]
            if "failed" in states or (len(runs) == 2 and set(states) == {"success"}):
                break
            time.sleep(2)
        pushed = pushed_lines(gateway)
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
        gateway.stop()
    tail = (tmp_path / "standalone.log").read_text()[-5000:]
    assert "awm_late_data_backfill" in runs, f"the scheduler created no backfill run\n{tail}"
    run_id, run_type, state = runs["awm_late_data_backfill"]
    assert (run_type, state) == ("scheduled", "success"), tail
    reports = [
        json.loads(storage.read_text(e.location)) for e in storage.listdir(f"{tables}/_reports/backfill")
    ]
    report = next(r for r in reports if r["run_id"] == run_id)  # the job's report, on S3
    assert report["interval_end_ms"] - report["interval_start_ms"] == 3_600_000
    # the data-quality run was triggered by the backfill's Assets and checked that interval
    assert runs["awm_data_quality"][1:] == ("asset_triggered", "success"), tail
    value = checked[0] if checked is not None else None
    result = json.loads(value) if isinstance(value, str) else value
    # (a run that crosses the hour sees a second scheduled backfill: the check is of one of them)
    intervals = [[r["interval_start_ms"], r["interval_end_ms"]] for r in reports]
    assert result["interval"] in intervals and result["tables"].startswith(tables), (result, intervals)
    assert any(x.startswith("awm_backfill_last_run_ok{") and x.endswith(" 1") for x in pushed), pushed
    assert any(x.startswith("awm_quality_last_run_ok{") and x.endswith(" 1") for x in pushed), pushed
