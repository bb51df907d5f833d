r"""A local Spark standalone cluster: one master and two workers, each its own JVM, on 127.0.0.1.

Usage::

    bin/spark-local start                 # master spark://127.0.0.1:7077 (UI 8090), two workers of 1 core
    bin/spark-local status                # running (pids, master URL, alive workers, workers' Python) or not
    bin/spark-local python                # the workers' Python (made if missing), for spark.pyspark.python
    bin/spark-local stop                  # SIGTERM the workers (and their executors), then the master
    bin/spark-local start --port 17077 --ui-port 18080 --dir /tmp/spark --cores 2 --memory 1g

``bin/spark-local`` sources ``bin/bootstrap.sh`` (the virtualenv, Java, the jars) and runs
``python -m tools.local.spark_cluster``. From Python (tests)::

    with LocalSparkCluster(port=free_port(), ui_port=free_port(), dir=tmp_path / "spark") as cluster:
        ... spark-submit --master cluster.master_url --conf spark.pyspark.python=cluster.python ...

The JVMs are the pinned pip PySpark's own ``bin/spark-class org.apache.spark.deploy.master.Master`` and
``... deploy.worker.Worker spark://HOST:PORT`` (the pip package has no ``sbin/start-master.sh``), started in
the background, each in a process group of its own, on 127.0.0.1: small daemons (256 MiB heap), and every
JVM, the executors included, compiling with C1 only (``JAVA_TOOL_OPTIONS``). A start is complete when the
master's JSON page (``http://HOST:UI_PORT/json/``) lists every worker ALIVE;
it fails after 90 s (by default) with the tails of the JVMs' logs.

**The workers do not see the checkout.** Their Spark (``SPARK_HOME``) and their Python are a virtualenv of
their own, :func:`tools.local.spark_worker_env.worker_python`: the project's runtime dependencies
(``pyproject.toml``'s dependencies and its ``spark`` extra, at the versions of ``requirements.lock``) without
the project, made with ``uv`` once per lock and cached under ``out/spark-worker-env/<hash>/`` (about 6 s from
uv's warm cache; ``.venv`` cannot serve: its editable install puts the checkout on every ``sys.path``). The
workers' environment has no ``PYTHONPATH``, no virtualenv and no entry of the checkout on ``PATH``; their
working directory and Spark's work directory (where executors run and ``--py-files`` land) are under the
cluster's directory, and ``PYSPARK_PYTHON`` names the workers' Python. Executors run the Python the
application names (PySpark sends the driver's ``spark.pyspark.python``), so a submit gives ``--conf
spark.pyspark.python=$(bin/spark-local python)``; the project's code then reaches them only through
``spark-submit --py-files`` (``python -m tools.package``: ``dist/awm-code.zip``), see docs/deployment.md,
"Running on a cluster".

The directory (``out/spark-cluster/``, ``--dir`` or ``$AWM_SPARK_DIR``) holds::

    master/, worker-N/                  each JVM's working directory; worker-N/work/ is its Spark work dir
                                        (one folder per application and executor: stdout, stderr, py-files)
    worker-N/local/                     the executors' scratch space (SPARK_LOCAL_DIRS)
    logs/master.out, logs/worker-N.out  each JVM's standard output and error (Spark's log)
    cluster.json                        pids, ports, the workers' Python and the start time

Exit status of ``python -m tools.local.spark_cluster``: 0 on success (``status``: running), 1 when the
cluster cannot be started or stopped (port busy, Java or uv missing, timeout), 2 for bad arguments, 3 for
``status`` when no cluster runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tools.local import processes
from tools.local.spark_worker_env import SparkClusterError, pyspark_home, worker_python
from watermark.cli.log import entry_prog, plain_text, run_main
from watermark.cli.main import EXIT_BAD_INPUT, OneLineParser

__all__ = [
    "DEFAULT_PORT",
    "DEFAULT_UI_PORT",
    "LocalSparkCluster",
    "main",
]

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 7077
#: Not Spark's 8080: bin/airflow-local's UI is there, and the DAGs may submit to this cluster.
DEFAULT_UI_PORT = 8090
DEFAULT_DIR = ROOT / "out" / "spark-cluster"
PORT_ENV, UI_PORT_ENV, DIR_ENV = "AWM_SPARK_PORT", "AWM_SPARK_UI_PORT", "AWM_SPARK_DIR"
EXIT_FAILED = processes.EXIT_FAILED
EXIT_NOT_RUNNING = processes.EXIT_NOT_RUNNING

_STATE = "cluster.json"
_MASTER_CLASS = "org.apache.spark.deploy.master.Master"
_WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
#: Variables of the caller's environment the cluster's JVMs (and so the executors and their Python workers)
#: must not inherit: each could put the checkout, the project's virtualenv or another Spark in their way.
_NOT_INHERITED = (
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONSTARTUP",
    "VIRTUAL_ENV",
    "VIRTUAL_ENV_PROMPT",
    "PYSPARK_PYTHON",
    "PYSPARK_DRIVER_PYTHON",
    "PYSPARK_GATEWAY_PORT",
    "PYSPARK_GATEWAY_SECRET",
    "SPARK_HOME",
    "SPARK_CONF_DIR",
    "SPARK_MASTER",
    "SPARK_SUBMIT_OPTS",
    "SPARK_DIST_CLASSPATH",
)


# --------------------------------------------------------------------------------------------------
# Small helpers


def _runs(pid: int, main_class: str) -> bool:
    """Whether ``pid`` is alive and still the JVM of ``main_class`` (not a reused pid)."""
    return main_class in processes.cmdline(pid) and processes.alive(pid)


def _check_memory(memory: str) -> str:
    text = str(memory).strip().lower()
    if not (text[:-1].isdigit() and text[-1] in "mg" and int(text[:-1]) > 0):
        msg = f"memory must look like 512m or 1g, got {memory!r}"
        raise ValueError(msg)
    return text


# --------------------------------------------------------------------------------------------------
# The cluster


class LocalSparkCluster:
    """A Spark standalone master and ``workers`` workers, each its own JVM, in a directory of their own.

    Parameters
    ----------
    port : int, optional
        The master's port; default ``$AWM_SPARK_PORT``, else 7077.
    ui_port : int, optional
        The master's web UI port (its JSON page too); default ``$AWM_SPARK_UI_PORT``, else 8090.
    dir : str or os.PathLike, optional
        Working directories and logs; default ``$AWM_SPARK_DIR``, else ``out/spark-cluster``.
    workers : int, default 2
        Workers, each its own JVM.
    cores : int, default 1
        Cores each worker offers (tasks of one application share them).
    memory : str, default "1g"
        Memory each worker offers its executors (an executor takes ``spark.executor.memory``, 1g by
        default).
    host : str, default "127.0.0.1"
        The address every JVM binds.
    python : str or os.PathLike, optional
        The workers' Python; default :func:`tools.local.spark_worker_env.worker_python` (made when
        :meth:`start` first needs it).
    start_timeout : float, default 90.0
        Seconds :meth:`start` waits for the master to list every worker ALIVE.

    Examples
    --------
    Not run here (it starts three JVMs and takes seconds)::

        with LocalSparkCluster(port=free_port(), ui_port=free_port(), dir=tmp) as cluster:
            subprocess.run(["spark-submit", "--master", cluster.master_url, ...])

    """

    def __init__(
        self,
        port: int | None = None,
        ui_port: int | None = None,
        dir: str | os.PathLike[str] | None = None,
        *,
        workers: int = 2,
        cores: int = 1,
        memory: str = "1g",
        host: str = DEFAULT_HOST,
        python: str | os.PathLike[str] | None = None,
        start_timeout: float = 90.0,
    ) -> None:
        port = processes.port_setting(port, PORT_ENV, DEFAULT_PORT)
        ui_port = processes.port_setting(ui_port, UI_PORT_ENV, DEFAULT_UI_PORT)
        self.port = processes.check_port(port)
        self.ui_port = processes.check_port(ui_port, "ui_port")
        if self.port == self.ui_port:
            msg = f"the master's port and its UI port must differ, both are {self.port}"
            raise ValueError(msg)
        for name, value in (("workers", workers), ("cores", cores)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                msg = f"{name} must be an integer >= 1, got {value!r}"
                raise ValueError(msg)
        self.start_timeout = processes.check_timeout(start_timeout)
        self.workers = workers
        self.cores = cores
        self.memory = _check_memory(memory)
        self.host = host
        self.dir = processes.path_setting(dir, DIR_ENV, DEFAULT_DIR)
        self._python = None if python is None else Path(python).absolute()
        self.start_seconds: float | None = None
        self._processes: dict[int, subprocess.Popen[bytes]] = {}

    # ----------------------------------------------------------------------------------------------
    # Addresses, paths and state.

    @property
    def master_url(self) -> str:
        """``spark://HOST:PORT`` of the master (of the running cluster, if the state file names one)."""
        state = self._state()
        port = state["port"] if state else self.port
        return f"spark://{self.host}:{port}"

    @property
    def ui_url(self) -> str:
        """``http://HOST:UI_PORT`` of the master's web UI."""
        state = self._state()
        port = state["ui_port"] if state else self.ui_port
        return f"http://{self.host}:{port}"

    @property
    def python(self) -> Path:
        """The workers' Python (for ``spark.pyspark.python``); made by :func:`worker_python` if needed."""
        if self._python is None:
            state = self._state()
            self._python = Path(state["python"]) if state else worker_python()
        return self._python

    def work_dir(self, worker: int) -> Path:
        """Spark's work directory of worker ``worker`` (1-based): executors run in folders under it."""
        return self.dir / f"worker-{worker}" / "work"

    def log_file(self, name: str) -> Path:
        """The standard output and error of the JVM ``name`` (``master``, ``worker-1``, ...)."""
        return self.dir / "logs" / f"{name}.out"

    def _state(self) -> dict[str, Any] | None:
        """The state file's content when its master still runs, else None (a stale file is removed)."""
        path = self.dir / _STATE
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        if not _runs(int(state["master"]["pid"]), _MASTER_CLASS):
            path.unlink(missing_ok=True)
            return None
        return dict(state)

    def master_json(self, timeout: float = 2.0) -> dict[str, Any]:
        """The master's JSON page (``/json/``): its status and workers.

        Raises
        ------
        OSError
            If the master's UI does not answer (``urllib.error.URLError`` is one).

        """
        with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=timeout) as answer:
            return dict(json.loads(answer.read().decode()))

    def alive_workers(self) -> list[dict[str, Any]]:
        """The workers the master lists ALIVE (each a dict: id, host, port, cores, memory, ...)."""
        return [w for w in self.master_json().get("workers", []) if w.get("state") == "ALIVE"]

    def status(self) -> dict[str, Any]:
        """Whether the cluster runs: pids, master URL, the workers alive, the workers' Python."""
        state = self._state()
        if state is None:
            return {"running": False}
        pids = [state["master"]["pid"], *(w["pid"] for w in state["workers"])]
        workers_alive = None
        with contextlib.suppress(OSError, ValueError):
            workers_alive = len(self.alive_workers())
        return {
            "running": True,
            "pids": pids,
            "workers_running": sum(_runs(w["pid"], _WORKER_CLASS) for w in state["workers"]),
            "workers_alive": workers_alive,
            "master_url": f"spark://{state['host']}:{state['port']}",
            "ui_url": f"http://{state['host']}:{state['ui_port']}",
            "python": state["python"],
        }

    # ----------------------------------------------------------------------------------------------
    # Start.

    def _environment(self, python: Path, spark_home: Path, worker: int | None) -> dict[str, str]:
        """A JVM's environment: no checkout, no project virtualenv; the workers' Spark and Python."""
        env = {k: v for k, v in os.environ.items() if k not in _NOT_INHERITED}
        path = [p for p in env.get("PATH", "").split(os.pathsep) if p and not Path(p).is_relative_to(ROOT)]
        env |= {
            "PATH": os.pathsep.join([str(python.parent), *path]),
            "SPARK_HOME": str(spark_home),
            "SPARK_LOCAL_IP": self.host,
            "PYSPARK_PYTHON": str(python),
            # The daemons are small: the master and a worker keep a few objects; executors are their own JVMs.
            "SPARK_DAEMON_MEMORY": "256m",
            "SPARK_DAEMON_JAVA_OPTS": "-XX:+UseSerialGC",
            # Every JVM of the cluster, the executors included (they inherit the worker's environment),
            # compiles with C1 only, as the test suite's and the local Kafka broker's: a local cluster's
            # applications are short, and C2's compiler threads would take a third of two cores' CPU.
            "JAVA_TOOL_OPTIONS": " ".join(
                [*env.get("JAVA_TOOL_OPTIONS", "").split(), "-XX:TieredStopAtLevel=1"]
            ),
        }
        if worker is not None:
            env["SPARK_LOCAL_DIRS"] = str(self.dir / f"worker-{worker}" / "local")
            env["SPARK_WORKER_DIR"] = str(self.work_dir(worker))
        return env

    def _launch(self, name: str, command: list[str], env: dict[str, str], cwd: Path) -> int:
        cwd.mkdir(parents=True, exist_ok=True)
        # Its own process group: stop reaches the executors it started.
        process = processes.spawn(command, self.log_file(name), cwd=cwd, env=env)
        self._processes[process.pid] = process
        return process.pid

    def start(self) -> LocalSparkCluster:
        """Start the master, then the workers, and wait until the master lists every worker ALIVE.

        Returns
        -------
        LocalSparkCluster
            This object; :attr:`start_seconds` holds the time the start took (the workers' Python
            included, when it had to be made).

        Raises
        ------
        SparkClusterError
            If a cluster already runs in the directory, a port is busy, Java or uv is missing, a JVM exits,
            or the workers are not ALIVE within ``start_timeout`` (the message ends with the logs' tails).

        """
        begin = time.monotonic()
        state = self._state()
        if state is not None:
            msg = (
                f"a cluster already runs in {self.dir} (master pid {state['master']['pid']}, "
                f"spark://{state['host']}:{state['port']}); stop it first (bin/spark-local stop)"
            )
            raise SparkClusterError(msg)
        if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
            msg = "java not found on PATH: Spark needs Java 17 (bin/bootstrap.sh installs it)"
            raise SparkClusterError(msg)
        for port, what in ((self.port, "--port"), (self.ui_port, "--ui-port")):
            if processes.port_busy(self.host, port):
                msg = (
                    f"port {port} on {self.host} is already in use (another cluster? see bin/spark-local "
                    f"status); choose another with {what}"
                )
                raise SparkClusterError(msg)
        python = self.python
        spark_home = pyspark_home(python)
        spark_class = str(spark_home / "bin" / "spark-class")
        (self.dir / "logs").mkdir(parents=True, exist_ok=True)
        for name in ["master", *(f"worker-{i}" for i in range(1, self.workers + 1))]:
            self.log_file(name).unlink(missing_ok=True)

        master = self._launch(
            "master",
            [spark_class, _MASTER_CLASS, "--host", self.host, "--port", str(self.port)]
            + ["--webui-port", str(self.ui_port)],
            self._environment(python, spark_home, None),
            self.dir / "master",
        )
        state = {
            "master": {"pid": master},
            "workers": [],
            "host": self.host,
            "port": self.port,
            "ui_port": self.ui_port,
            "python": str(python),
            "spark_home": str(spark_home),
            "started_at": time.time(),
        }
        self._write_state(state)
        try:
            self._wait(begin, lambda js: js.get("status") == "ALIVE", "the master to answer")
            for i in range(1, self.workers + 1):
                pid = self._launch(
                    f"worker-{i}",
                    [spark_class, _WORKER_CLASS, "--host", self.host, "--cores", str(self.cores)]
                    + ["--memory", self.memory, "--work-dir", str(self.work_dir(i)), "--webui-port", "0"]
                    + [f"spark://{self.host}:{self.port}"],
                    self._environment(python, spark_home, i),
                    self.dir / f"worker-{i}",
                )
                state["workers"].append({"pid": pid, "name": f"worker-{i}"})
                self._write_state(state)
            self._wait(
                begin,
                lambda js: sum(w.get("state") == "ALIVE" for w in js.get("workers", [])) >= self.workers,
                f"{self.workers} workers ALIVE",
            )
        except BaseException:
            self._stop_all(state, timeout=10)
            (self.dir / _STATE).unlink(missing_ok=True)
            raise
        self.start_seconds = time.monotonic() - begin
        return self

    def _write_state(self, state: dict[str, Any]) -> None:
        path = self.dir / _STATE
        path.with_suffix(".tmp").write_text(json.dumps(state) + "\n")
        path.with_suffix(".tmp").replace(path)

    def _wait(self, begin: float, ready: Any, what: str) -> None:
        """Poll the master's JSON page until ``ready(page)``; fail when a JVM exits or time runs out."""
        deadline = begin + self.start_timeout
        while True:
            for pid, process in self._processes.items():
                code = process.poll()
                if code is not None:
                    msg = f"a JVM of the cluster (pid {pid}) exited with status {code} while starting; "
                    raise SparkClusterError(msg + self._log_tails())
            with contextlib.suppress(OSError, ValueError):
                if ready(self.master_json(timeout=max(0.2, min(2.0, deadline - time.monotonic())))):
                    return
            if time.monotonic() >= deadline:
                msg = f"waited {self.start_timeout:g} s for {what} ({self.ui_url}/json/); "
                raise SparkClusterError(msg + self._log_tails())
            time.sleep(0.2)

    def _log_tails(self) -> str:
        """The tails of the JVMs' logs, for an error message."""
        paths = sorted((self.dir / "logs").glob("*.out"))
        return processes.log_tails(paths, f"the logs under {self.dir / 'logs'} are still empty", lines=20)

    # ----------------------------------------------------------------------------------------------
    # Stop.

    def _terminate(self, pid: int, timeout: float) -> bool:
        """SIGTERM the process group of ``pid``, wait up to ``timeout`` s, then SIGKILL it.

        The group is a JVM and the executors (and their Python workers) it started. True when it stopped
        on SIGTERM.
        """
        return processes.terminate(pid, timeout, child=self._processes.get(pid), group=True)

    def _stop_all(self, state: dict[str, Any], timeout: float) -> bool:
        """Workers first (and their executors), then the master; True when all stopped on SIGTERM."""
        clean = True
        for worker in state["workers"]:
            clean &= self._terminate(int(worker["pid"]), timeout)
        clean &= self._terminate(int(state["master"]["pid"]), timeout)
        self._processes.clear()
        return clean

    def stop(self, timeout: float = 30.0) -> dict[str, Any]:
        """Stop the cluster that runs in the directory: SIGTERM, wait, SIGKILL after ``timeout`` s.

        Returns
        -------
        dict
            ``{"stopped": bool, "pids": list, "clean": bool, "seconds": float}``; ``stopped`` is False
            when no cluster ran, ``clean`` False when a JVM had to be killed.

        """
        begin = time.monotonic()
        state = self._state()
        if state is None:
            return {"stopped": False, "pids": [], "clean": True, "seconds": 0.0}
        clean = self._stop_all(state, timeout)
        (self.dir / _STATE).unlink(missing_ok=True)
        pids = [state["master"]["pid"], *(w["pid"] for w in state["workers"])]
        return {"stopped": True, "pids": pids, "clean": clean, "seconds": round(time.monotonic() - begin, 2)}

    def __enter__(self) -> LocalSparkCluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"LocalSparkCluster(port={self.port}, ui_port={self.ui_port}, dir={str(self.dir)!r})"


# --------------------------------------------------------------------------------------------------
# Command line.


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m tools.local.spark_cluster`` (``bin/spark-local``) argument parser."""
    parser = OneLineParser(
        prog=entry_prog("bin/spark-local"), description=plain_text(__doc__.splitlines()[0])
    )
    parser.add_argument(
        "command",
        choices=("start", "stop", "status", "python"),
        help="start the cluster (in the background), stop it, report whether it runs, or print the "
        "workers' Python (made first when missing)",
    )
    parser.add_argument(
        "--port", metavar="N", help=f"the master's port (default ${PORT_ENV}, else {DEFAULT_PORT})"
    )
    parser.add_argument(
        "--ui-port",
        metavar="N",
        help=f"the master's UI port (default ${UI_PORT_ENV}, else {DEFAULT_UI_PORT})",
    )
    parser.add_argument(
        "--dir", metavar="DIR", help=f"work dirs and logs (default ${DIR_ENV}, else out/spark-cluster)"
    )
    parser.add_argument("--workers", type=int, default=2, metavar="N", help="workers, each a JVM (2)")
    parser.add_argument("--cores", type=int, default=1, metavar="N", help="cores each worker offers (1)")
    parser.add_argument("--memory", default="1g", metavar="MEM", help="memory each worker offers (1g)")
    parser.add_argument("--timeout", type=float, default=90.0, metavar="S", help="start/stop wait (90)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m tools.local.spark_cluster`` / ``bin/spark-local``.

    Returns
    -------
    int
        0 on success (``status``: running), 1 when the cluster fails, 2 for bad arguments, 3 when
        ``status`` finds no cluster.

    """
    return run_main(
        build_parser(), _run, argv, errors={ValueError: EXIT_BAD_INPUT, SparkClusterError: EXIT_FAILED}
    )


def _run(args: argparse.Namespace) -> int:
    port = None if args.port is None else processes.check_port(args.port, "--port")
    ui_port = None if args.ui_port is None else processes.check_port(args.ui_port, "--ui-port")
    processes.check_timeout_option(args.timeout)
    cluster = LocalSparkCluster(
        port=port,
        ui_port=ui_port,
        dir=args.dir,
        workers=args.workers,
        cores=args.cores,
        memory=args.memory,
        start_timeout=args.timeout,
    )
    if args.command == "python":
        print(cluster.python)
        return 0
    if args.command == "status":
        status = cluster.status()
        if not status["running"]:
            print(f"spark: not running (dir {cluster.dir})")
            return EXIT_NOT_RUNNING
        alive = "?" if status["workers_alive"] is None else status["workers_alive"]
        print(
            f"spark: running, master {status['master_url']} (UI {status['ui_url']}), {alive} worker(s) "
            f"alive, pids {' '.join(map(str, status['pids']))}, workers' Python {status['python']} "
            f"(dir {cluster.dir})"
        )
        return 0
    if args.command == "stop":
        result = cluster.stop(timeout=args.timeout)
        pids = f"pids {' '.join(map(str, result['pids']))}"
        return processes.print_stop("spark", result, cluster.dir, args.timeout, stopped=pids, killed="a JVM")
    cluster.start()
    print(
        f"spark: started in {cluster.start_seconds:.1f} s, master {cluster.master_url} "
        f"(UI {cluster.ui_url}), {cluster.workers} worker(s) of {cluster.cores} core(s) and "
        f"{cluster.memory}, workers' Python {cluster.python} (dir {cluster.dir}, logs {cluster.dir / 'logs'})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
