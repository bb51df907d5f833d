r"""A local S3-compatible server for tests and the demo: moto's server mode on 127.0.0.1, in its own process.

Usage::

    bin/s3-local start                    # 127.0.0.1:9000, state and log under out/s3/
    bin/s3-local start --bucket tables    # and create a bucket
    bin/s3-local status                   # running (pid, endpoint) or not running
    bin/s3-local stop                     # SIGTERM, wait, report
    bin/s3-local start --port 19000 --dir /tmp/s3   # or AWM_S3_PORT=19000 / AWM_S3_DIR=...

    eval "$(bin/s3-local start)"          # its output is shell: '#' comments and the variables to export
    python -m jobs.stream ... --output s3a://tables/run1

``start`` (and ``status``, when the server runs) prints the endpoint and the standard AWS variables that
Spark (:mod:`jobs.common.object_store`), delta-rs, boto3 and the AWS CLI read::

    export AWS_ENDPOINT_URL=http://127.0.0.1:9000
    export AWS_ACCESS_KEY_ID=awm-local
    export AWS_SECRET_ACCESS_KEY=awm-local-secret
    export AWS_REGION=us-east-1

``bin/s3-local`` sources ``bin/bootstrap.sh`` (the virtualenv) and runs ``python -m tools.local.s3``. From
Python (tests)::

    with LocalS3(port=19000, dir=tmp_path / "s3") as s3:
        bucket = s3.new_bucket()            # a fresh bucket with a unique name; or s3.create_bucket("name")
        os.environ.update(s3.env())         # the four variables above
        ... s3.endpoint ...

The server is moto's (``moto[s3]`` with Flask, the ``server`` extra's part that serves HTTP; the ``server``
extra itself brings every service's dependencies, cfn-lint, sympy and docker among them, 31 packages where
these are 13): ``python -m tools.local.s3 serve``, which runs ``moto.server`` bound to the host and port with
the HTTP request log off (warnings and errors go to ``logs/server.log``). It is started in a session of its
own, so it outlives the command that started it and a Ctrl-C in that shell. A start is complete when a
``ListBuckets`` request through boto3 answers; it fails after 30 s (by default) with the tail of the log.
moto checks no signature, so any key pair works; the ones printed are fixed names, not secrets.

**Objects live in the server's memory** and are gone when it stops (moto has no persistence for S3). Object
bodies above moto's in-memory threshold spill to temporary files, which go to ``tmp/`` in the directory.

What Spark's s3a (hadoop-aws 3.5.0, AWS SDK 2.35) and Delta need of the server, all checked against moto
5.2 by ``tests/integration/s3/``: ListObjectsV2 with prefixes and delimiters (s3a's directory listing, the
Delta log's ``listFrom``), HEAD and ranged GET, multipart uploads (s3a's block output stream; delta-spark
writes each part file as one), CopyObject (s3a's rename, through the SDK's transfer manager and its Netty
client), DeleteObjects (bulk delete), and conditional PUTs (``If-None-Match: *``), which delta-rs 1.6 uses
to commit. Nothing had to be worked around. Its limits: in-memory only; a bucket name must be 3 to 63
characters (as on S3); one process, so not for large volumes.

The directory holds::

    logs/server.log    the server's warnings and errors
    tmp/               object bodies too large for memory (moto's spooled files)
    server.json        pid, host, port, region and start time of the running server

Exit status of ``python -m tools.local.s3``: 0 on success (``status``: running), 1 when the server cannot be
started or stopped (port busy, timeout, a bucket refused), 2 for bad arguments, 3 for ``status`` when no
server runs.

"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tools.local import processes
from watermark.cli.log import entry_prog, plain_text, run_main
from watermark.cli.main import EXIT_BAD_INPUT, OneLineParser

__all__ = [
    "ACCESS_KEY_ID",
    "DEFAULT_PORT",
    "DEFAULT_REGION",
    "LocalS3",
    "S3LocalError",
    "SECRET_ACCESS_KEY",
    "main",
]

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PORT = 9000
DEFAULT_HOST = "127.0.0.1"
DEFAULT_DIR = ROOT / "out" / "s3"
DEFAULT_REGION = "us-east-1"
#: The key pair printed for the local server (moto accepts any; these are names, not secrets).
ACCESS_KEY_ID = "awm-local"
SECRET_ACCESS_KEY = "awm-local-secret"
PORT_ENV, DIR_ENV = "AWM_S3_PORT", "AWM_S3_DIR"
EXIT_FAILED = processes.EXIT_FAILED
EXIT_NOT_RUNNING = processes.EXIT_NOT_RUNNING
_STATE = "server.json"
_MODULE = "tools.local.s3"


class S3LocalError(RuntimeError):
    """The local server cannot be started, reached or stopped; the message says why and what to do."""


def _error_code(exc: Exception) -> str:
    """The S3 error code of a botocore ``ClientError`` ('' for other errors)."""
    response = getattr(exc, "response", None)
    return str(response.get("Error", {}).get("Code", "")) if isinstance(response, dict) else ""


class LocalS3:
    """One local S3-compatible server (moto) in a directory of its own.

    Parameters
    ----------
    port : int, optional
        The HTTP port; default ``$AWM_S3_PORT``, else 9000.
    dir : str or os.PathLike, optional
        Directory for the state file, log and spooled objects; default ``$AWM_S3_DIR``, else ``out/s3``.
    host : str, default "127.0.0.1"
        The address the server binds.
    region : str, default "us-east-1"
        The region clients are told to use (``AWS_REGION``); buckets are created in it.
    start_timeout : float, default 30.0
        Seconds :meth:`start` waits for the server to answer.

    Examples
    --------
    Not run here (it starts a process and takes a second)::

        with LocalS3(port=free_port, dir=tmp) as s3:
            bucket = s3.new_bucket()
            spark_env = s3.env()

    """

    def __init__(
        self,
        port: int | None = None,
        dir: str | os.PathLike[str] | None = None,
        *,
        host: str = DEFAULT_HOST,
        region: str = DEFAULT_REGION,
        start_timeout: float = 30.0,
    ) -> None:
        self.port = processes.check_port(processes.port_setting(port, PORT_ENV, DEFAULT_PORT))
        self.host = host
        self.region = region
        self.dir = processes.path_setting(dir, DIR_ENV, DEFAULT_DIR)
        self.start_timeout = processes.check_timeout(start_timeout)
        self.start_seconds: float | None = None
        self._process: subprocess.Popen[bytes] | None = None

    # ----------------------------------------------------------------------------------------------
    # Addresses, environment, state.

    @property
    def endpoint(self) -> str:
        """``http://HOST:PORT`` (of the running server, if the state file names one)."""
        state = self._state()
        host, port = (state["host"], state["port"]) if state else (self.host, self.port)
        return f"http://{host}:{port}"

    def env(self) -> dict[str, str]:
        """The standard AWS variables that point a client at this server.

        Returns
        -------
        dict of str to str
            ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY`` and ``AWS_REGION``.

        """
        state = self._state()
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY_ID,
            "AWS_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY,
            "AWS_REGION": state.get("region", self.region) if state else self.region,
        }

    @property
    def log_file(self) -> Path:
        """The server's log (warnings and errors)."""
        return self.dir / "logs" / "server.log"

    def _state(self) -> dict[str, Any] | None:
        """The state file of a server that still runs (None otherwise; a stale file is removed)."""
        return processes.read_state(self.dir / _STATE, self._serves)

    def _serves(self, pid: int) -> bool:
        """Whether ``pid`` is the server of this directory."""
        if self._process is not None and self._process.pid == pid and self._process.poll() is None:
            return True  # this object's child (right after the fork it still shows our command line)
        command = processes.cmdline(pid)
        here = os.path.realpath(self.dir)  # /proc/PID/cwd names the folder without symbolic links
        return (
            processes.alive(pid)
            and _MODULE in command
            and "serve" in command
            and processes.working_dir(pid) == here
        )

    def status(self) -> dict[str, Any]:
        """Whether a server runs in this directory.

        Returns
        -------
        dict
            ``{"running": bool, "pid": int or None, "endpoint": str or None, "dir": str}``, and
            ``"started_at"`` (epoch seconds) when running.

        """
        state = self._state()
        if state is None:
            return {"running": False, "pid": None, "endpoint": None, "dir": str(self.dir)}
        return {
            "running": True,
            "pid": state["pid"],
            "endpoint": f"http://{state['host']}:{state['port']}",
            "dir": str(self.dir),
            "started_at": state.get("started_at"),
        }

    # ----------------------------------------------------------------------------------------------
    # Start and stop.

    def start(self) -> LocalS3:
        """Start the server in its own session and wait until it answers ``ListBuckets``.

        Returns
        -------
        LocalS3
            This object; :attr:`start_seconds` holds the time the start took.

        Raises
        ------
        S3LocalError
            If a server already runs in the directory, the port is busy, the server exits, or it does not
            answer within ``start_timeout`` (the message ends with the tail of its log).

        """
        begin = time.monotonic()
        state = self._state()
        if state is not None:
            msg = (
                f"a server already runs in {self.dir} (pid {state['pid']}, http://{state['host']}:"
                f"{state['port']}); stop it first (bin/s3-local stop)"
            )
            raise S3LocalError(msg)
        if processes.port_busy(self.host, self.port):
            msg = (
                f"port {self.port} on {self.host} is already in use (another server? see bin/s3-local "
                f"status); choose another with --port or ${PORT_ENV}"
            )
            raise S3LocalError(msg)
        (self.dir / "logs").mkdir(parents=True, exist_ok=True)
        (self.dir / "tmp").mkdir(exist_ok=True)
        paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        env = os.environ | {
            "PYTHONPATH": os.pathsep.join([str(ROOT), *paths]),
            "TMPDIR": str(self.dir / "tmp"),
        }
        command = [sys.executable, "-m", _MODULE, "serve", "--host", self.host, "--port", str(self.port)]
        self._process = processes.spawn(command, self.log_file, cwd=self.dir, env=env, append=True)
        state = {
            "pid": self._process.pid,
            "host": self.host,
            "port": self.port,
            "region": self.region,
            "started_at": time.time(),
        }
        processes.record_start(self._process, state, self.dir / _STATE, lambda: self._wait_ready(begin))
        self.start_seconds = time.monotonic() - begin
        return self

    def _wait_ready(self, begin: float) -> None:
        """Wait until the server answers a ``ListBuckets`` request."""
        from botocore.exceptions import BotoCoreError, ClientError

        assert self._process is not None
        deadline = begin + self.start_timeout
        client = self._client(f"http://{self.host}:{self.port}", self.region, timeout=1.0)
        while True:
            code = self._process.poll()
            if code is not None:
                msg = f"the server exited with status {code} while starting; {self._log_tail()}"
                raise S3LocalError(msg)
            with contextlib.suppress(BotoCoreError, ClientError):
                client.list_buckets()
                return
            if time.monotonic() >= deadline:
                msg = f"the server did not answer within {self.start_timeout:g} s; {self._log_tail()}"
                raise S3LocalError(msg)
            time.sleep(0.1)

    def _log_tail(self) -> str:
        """The tail of the server's log, for an error message."""
        return processes.log_tails([self.log_file], f"its log ({self.log_file}) is empty")

    def stop(self, timeout: float = 30.0) -> dict[str, Any]:
        """Stop the server that runs in the directory: SIGTERM, wait, SIGKILL after ``timeout`` s.

        Returns
        -------
        dict
            ``{"stopped": bool, "pid": int or None, "clean": bool, "seconds": float}``; ``stopped`` is False
            when no server ran, ``clean`` False when it had to be killed.

        """
        result = processes.stop_server(self._state, self._process, self.dir / _STATE, timeout)
        if result["stopped"]:
            self._process = None
        return result

    # ----------------------------------------------------------------------------------------------
    # Buckets and context management.

    def client(self, timeout: float = 30.0) -> Any:
        """A boto3 S3 client for this server: path-style, one attempt per call, ``timeout`` s per step."""
        env = self.env()
        return self._client(env["AWS_ENDPOINT_URL"], env["AWS_REGION"], timeout)

    @staticmethod
    def _client(endpoint: str, region: str, timeout: float) -> Any:
        import boto3
        from botocore.config import Config

        config = Config(
            connect_timeout=timeout,
            read_timeout=timeout,
            retries={"total_max_attempts": 1},
            s3={"addressing_style": "path"},
        )
        return boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id=ACCESS_KEY_ID,
            aws_secret_access_key=SECRET_ACCESS_KEY,
            region_name=region,
            config=config,
        )

    def create_bucket(self, name: str) -> str:
        """Create bucket ``name`` (an existing one of that name is kept as it is).

        Returns
        -------
        str
            The name.

        Raises
        ------
        ValueError
            If S3 refuses the name (3 to 63 lower-case letters, digits, dots and hyphens).
        S3LocalError
            If the server cannot be reached or refuses the bucket otherwise.

        """
        from botocore.exceptions import BotoCoreError, ClientError

        region = self.env()["AWS_REGION"]
        extra = {} if region == "us-east-1" else {"CreateBucketConfiguration": {"LocationConstraint": region}}
        try:
            self.client().create_bucket(Bucket=name, **extra)
        except ClientError as exc:
            code = _error_code(exc)
            if code == "BucketAlreadyOwnedByYou":
                return name
            if code == "InvalidBucketName":
                msg = f"invalid bucket name {name!r}: 3 to 63 lower-case letters, digits, dots and hyphens"
                raise ValueError(msg) from None
            msg = f"cannot create bucket {name!r} on {self.endpoint}: {exc}"
            raise S3LocalError(msg) from None
        except BotoCoreError as exc:
            msg = f"cannot reach the S3 server at {self.endpoint}: {exc}"
            raise S3LocalError(msg) from None
        return name

    def new_bucket(self, prefix: str = "test") -> str:
        """Create a bucket with a fresh unique name, ``PREFIX-`` and 12 hex digits; return its name."""
        return self.create_bucket(f"{prefix}-{uuid.uuid4().hex[:12]}")

    def __enter__(self) -> LocalS3:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"LocalS3(port={self.port}, dir={str(self.dir)!r})"


# --------------------------------------------------------------------------------------------------
# The server process.


def serve(host: str, port: int) -> int:
    """Run moto's server on ``host:port`` in the foreground until SIGTERM or SIGINT (what ``start`` runs).

    The HTTP request log is off (werkzeug's logger at WARNING); warnings and errors go to standard error.
    """
    import logging

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    from moto.server import main as moto_main

    moto_main(["--host", host, "--port", str(port)])
    return 0


# --------------------------------------------------------------------------------------------------
# Command line.


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m tools.local.s3`` (``bin/s3-local``) argument parser.

    Returns
    -------
    argparse.ArgumentParser
        The parser; its errors print one line and exit with status 2.

    """
    parser = OneLineParser(prog=entry_prog("bin/s3-local"), description=plain_text(__doc__.splitlines()[0]))
    parser.add_argument(
        "command",
        choices=("start", "stop", "status", "serve"),
        help="start the server (in the background), stop it, report whether it runs, or serve in the "
        "foreground (what start runs)",
    )
    parser.add_argument(
        "--port", metavar="N", help=f"HTTP port for start (default ${PORT_ENV}, else {DEFAULT_PORT})"
    )
    parser.add_argument("--dir", metavar="DIR", help=f"state and log (default ${DIR_ENV}, else out/s3)")
    parser.add_argument("--host", default=DEFAULT_HOST, help=argparse.SUPPRESS)  # for serve
    parser.add_argument("--timeout", type=float, default=30.0, metavar="S", help="start/stop wait (30)")
    parser.add_argument(
        "--bucket",
        action="append",
        default=[],
        metavar="NAME",
        help="with start: create this bucket (repeatable)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m tools.local.s3`` / ``bin/s3-local``.

    Parameters
    ----------
    argv : sequence of str, optional
        The arguments (default: ``sys.argv[1:]``).

    Returns
    -------
    int
        0 on success (``status``: running), 1 when the server fails, 2 for bad arguments, 3 when
        ``status`` finds no server.

    """
    return run_main(
        build_parser(), _run, argv, errors={ValueError: EXIT_BAD_INPUT, S3LocalError: EXIT_FAILED}
    )


def _exports(s3: LocalS3) -> str:
    return "\n".join(f"export {key}={value}" for key, value in s3.env().items())


def _run(args: argparse.Namespace) -> int:
    port = None if args.port is None else processes.check_port(args.port, "--port")
    processes.check_timeout_option(args.timeout)
    if args.bucket and args.command != "start":
        msg = "--bucket goes with start"
        raise ValueError(msg)
    if args.command == "serve":
        return serve(args.host, port if port is not None else DEFAULT_PORT)
    s3 = LocalS3(port=port, dir=args.dir, start_timeout=args.timeout)

    if args.command == "status":
        status = s3.status()
        if status["running"]:
            print(f"# s3: running, pid {status['pid']}, endpoint {status['endpoint']} (dir {s3.dir})")
            print(_exports(s3))
            return 0
        print(f"s3: not running (dir {s3.dir})")
        return EXIT_NOT_RUNNING
    if args.command == "stop":
        return processes.print_stop("s3", s3.stop(timeout=args.timeout), s3.dir, args.timeout)
    s3.start()
    try:
        buckets = [s3.create_bucket(name) for name in args.bucket]
    except (ValueError, S3LocalError):
        s3.stop()
        raise
    print(
        f"# s3: started in {s3.start_seconds:.1f} s, pid {s3.status()['pid']}, endpoint {s3.endpoint} "
        f"(dir {s3.dir}, log {s3.log_file}); objects live in memory until it stops"
    )
    if buckets:
        print(f"# buckets: {', '.join(buckets)} (s3a://{buckets[0]}/...)")
    print(_exports(s3))
    return 0


if __name__ == "__main__":
    sys.exit(main())
