"""What the local servers share: their ports and settings, processes, logs, state files and ``stop`` report.

The local servers (:mod:`tools.local.kafka_broker`, :mod:`tools.local.s3`, :mod:`tools.local.spark_cluster`)
run as processes started by :func:`spawn`, each in a session of its own with its output in a log file. A JSON
state file in the server's directory records the pid (:func:`record_start` writes it, :func:`read_state` reads
it); it counts only while that pid is still the server's: alive and not a zombie (:func:`alive`), with the
server's command line (:func:`cmdline`) and, where it matters, working directory (:func:`working_dir`), so
that a reused pid is never taken for it. :func:`terminate` stops a process or a process group: SIGTERM, a
wait, then SIGKILL; :func:`stop_server` stops the one process a state file records, and :func:`print_stop`
prints the outcome as ``bin/kafka-local stop``, ``bin/s3-local stop`` and ``bin/spark-local stop`` do.
:mod:`tools.local.prometheus` takes :func:`free_port` and :func:`terminate`.

Linux only: liveness, command lines, working directories and process groups are read from ``/proc``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "EXIT_FAILED",
    "EXIT_NOT_RUNNING",
    "alive",
    "check_port",
    "check_timeout",
    "check_timeout_option",
    "cmdline",
    "free_port",
    "group_alive",
    "log_tails",
    "path_setting",
    "port_busy",
    "port_setting",
    "print_stop",
    "read_state",
    "record_start",
    "running",
    "spawn",
    "stop_server",
    "tail",
    "terminate",
    "working_dir",
]

_Port = TypeVar("_Port")

#: Exit status of a server's command when it cannot be started or stopped (a kill counts as not stopped).
EXIT_FAILED = 1
#: Exit status of a server's ``status`` command when no server runs.
EXIT_NOT_RUNNING = 3


# --------------------------------------------------------------------------------------------------
# Ports and settings.


def check_port(port: object, what: str = "port") -> int:
    """``port`` as an int in 1..65535.

    Parameters
    ----------
    port : object
        An int, or a string of one (white space around it is ignored).
    what : str, default "port"
        What the error message calls it: ``--port``, ``$AWM_S3_PORT``, ...

    Returns
    -------
    int
        The port.

    Raises
    ------
    ValueError
        If ``port`` is not an integer in 1..65535 (a bool is none).

    Examples
    --------
    >>> check_port(" 9000 ")
    9000
    >>> check_port(0, "--port")
    Traceback (most recent call last):
    ...
    ValueError: --port must be an integer in 1..65535, got 0

    """
    if isinstance(port, str):
        try:
            port = int(port.strip())
        except ValueError:
            msg = f"{what} must be an integer in 1..65535, got {port!r}"
            raise ValueError(msg) from None
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        msg = f"{what} must be an integer in 1..65535, got {port!r}"
        raise ValueError(msg)
    return port


def port_setting(port: _Port | None, env: str, default: int) -> _Port | int:
    """The port given, else the one the environment variable ``env`` names, else ``default``.

    The variable's value is checked here (:func:`check_port`, under the variable's name); a port given is
    returned as it is, for the caller to check under its own name. An empty variable is not set.

    >>> port_setting(None, "AWM_NO_SUCH_VARIABLE", 9000)
    9000
    """
    if port is not None:
        return port
    return check_port(os.environ[env], env) if os.environ.get(env) else default


def path_setting(path: str | os.PathLike[str] | None, env: str, default: Path) -> Path:
    """The path given, else the one the environment variable ``env`` names, else ``default``; absolute.

    An empty variable is not set. The path is made absolute, not resolved: symbolic links stay.
    """
    return Path(path if path is not None else os.environ.get(env) or default).absolute()


def check_timeout(seconds: object, what: str = "start_timeout") -> float:
    """``seconds`` as a float, else a ValueError naming ``what``: a number > 0.

    >>> check_timeout(30)
    30.0
    >>> check_timeout(0)
    Traceback (most recent call last):
    ...
    ValueError: start_timeout must be a number > 0, got 0
    """
    if not (isinstance(seconds, int | float) and seconds > 0):
        msg = f"{what} must be a number > 0, got {seconds!r}"
        raise ValueError(msg)
    return float(seconds)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that is free now (the operating system's choice).

    Parameters
    ----------
    host : str, default "127.0.0.1"
        The address to bind.

    Returns
    -------
    int
        The port number.

    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_busy(host: str, port: int) -> bool:
    """Whether ``host:port`` cannot be bound (something listens on it, or it is otherwise taken)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


# --------------------------------------------------------------------------------------------------
# Processes: /proc, start, stop.


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def cmdline(pid: int) -> list[str]:
    """The command line of process ``pid`` (empty when it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def working_dir(pid: int) -> str:
    """The working directory of process ``pid``, without symbolic links ('' when unknown)."""
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""


def spawn(
    command: Sequence[str],
    log: Path,
    *,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    append: bool = False,
) -> subprocess.Popen[bytes]:
    """Start ``command`` in the background, in a session of its own, its output and errors to ``log``.

    Its own session (and so its own process group): it outlives the command that started it, a Ctrl-C in
    the shell that started it does not reach it, and :func:`terminate` can signal it with every process it
    starts (``group=True``). Its standard input is ``/dev/null``.

    Parameters
    ----------
    command : sequence of str
        The program and its arguments.
    log : Path
        The file that takes its standard output and error (created; emptied first unless ``append``).
    cwd : Path
        Its working directory (which must exist).
    env : mapping of str to str, optional
        Its environment; default this process's.
    append : bool, default False
        Add to ``log`` rather than empty it.

    Returns
    -------
    subprocess.Popen
        The process, a child of this one.

    """
    with open(log, "ab" if append else "wb") as out:
        return subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )


def running(pid: int, child: subprocess.Popen[bytes] | None = None) -> bool:
    """Whether process ``pid`` runs; when it is ``child`` (this process's child), it is reaped if it ended."""
    if child is not None and child.pid == pid:
        return child.poll() is None
    return alive(pid)


def group_alive(pgid: int, child: subprocess.Popen[bytes] | None = None) -> bool:
    """Whether a process of the process group ``pgid`` still runs (a zombie does not count).

    ``child``, the group's leader when it is this process's child, is reaped first if it ended.
    """
    if child is not None and child.pid == pgid:
        child.poll()
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[-1].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                return True
    return False


def terminate(
    pid: int, timeout: float, *, child: subprocess.Popen[bytes] | None = None, group: bool = False
) -> bool:
    """SIGTERM process ``pid``, wait up to ``timeout`` s for it to end, then SIGKILL it (and wait again).

    Parameters
    ----------
    pid : int
        The process; with ``group``, the leader of the process group to stop.
    timeout : float
        Seconds to wait for a clean end after SIGTERM.
    child : subprocess.Popen, optional
        The process, when it is this process's child: it is reaped while waiting (a child that ended stays
        a zombie until reaped).
    group : bool, default False
        Signal the whole process group ``pid`` (a server started by :func:`spawn` and every process it
        started) and wait until none of its processes runs (:func:`group_alive`); a group that cannot be
        signalled counts as gone. A group is polled every 0.1 s (each look reads every process's
        ``/proc`` entry), one process every 0.05 s.

    Returns
    -------
    bool
        True when it ended on SIGTERM, False when it had to be killed.

    """
    send = os.killpg if group else os.kill
    gone: tuple[type[OSError], ...] = (ProcessLookupError,)
    if group:
        gone += (PermissionError,)
    interval = 0.1 if group else 0.05

    def runs() -> bool:
        return group_alive(pid, child) if group else running(pid, child)

    with contextlib.suppress(*gone):
        send(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while runs():
        if time.monotonic() >= deadline:
            with contextlib.suppress(*gone):
                send(pid, signal.SIGKILL)
            while runs():
                time.sleep(interval)
            return False
        time.sleep(interval)
    return True


# --------------------------------------------------------------------------------------------------
# State files and logs.


def record_start(
    process: subprocess.Popen[bytes],
    state: Mapping[str, Any],
    state_file: Path,
    ready: Callable[[], None],
) -> None:
    """Record a server just started (:func:`spawn`) in its state file, then wait until it is ready.

    Parameters
    ----------
    process : subprocess.Popen
        The server.
    state : mapping
        What the state file records, ``"pid"`` among it (as :func:`read_state` reads it), written as JSON.
    state_file : Path
        The state file.
    ready : callable
        Returns once the server answers; raises when it cannot start (its exit, a timeout).

    Notes
    -----
    Whatever ``ready`` raises (a KeyboardInterrupt too) goes on after the server is stopped (SIGTERM, then
    SIGKILL after 10 s) and the state file removed, so that no half-started server is left behind.

    """
    state_file.write_text(json.dumps(state) + "\n")
    try:
        ready()
    except BaseException:
        terminate(process.pid, 10, child=process)
        state_file.unlink(missing_ok=True)
        raise


def read_state(path: Path, runs: Callable[[int], bool]) -> dict[str, Any] | None:
    """The JSON state file ``path`` of a server that still runs, else None.

    Parameters
    ----------
    path : Path
        A JSON object whose ``"pid"`` is the server's process.
    runs : callable
        ``runs(pid)``: whether that pid still is the server (alive, with the server's command line...).

    Returns
    -------
    dict or None
        The file's content; None when it is missing or unreadable (it is left), or when ``runs(pid)`` is
        False (the stale file is removed).

    """
    try:
        state = json.loads(path.read_text())
        pid = int(state["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if runs(pid):
        return dict(state)
    path.unlink(missing_ok=True)
    return None


def stop_server(
    state: Callable[[], Mapping[str, Any] | None],
    child: subprocess.Popen[bytes] | None,
    state_file: Path,
    timeout: float,
) -> dict[str, Any]:
    """Stop the server process a state file records (:func:`terminate`), and remove the file.

    Parameters
    ----------
    state : callable
        Reads the state file of the running server (None: none runs), as :func:`read_state` does.
    child : subprocess.Popen or None
        The server when this process started it: reaped while waiting, and stopped even when the state
        file names no server, if it still runs.
    state_file : Path
        The state file, removed once the server has stopped.
    timeout : float
        Seconds to wait after SIGTERM before SIGKILL.

    Returns
    -------
    dict
        ``stopped``: whether a server ran; ``pid``: its pid (None if none ran); ``clean``: whether it ended
        on SIGTERM (False: killed); ``seconds``: the time the stop took, to 0.01 s.

    """
    begin = time.monotonic()
    recorded = state()
    pid = recorded["pid"] if recorded is not None else None
    if pid is None and child is not None and child.poll() is None:
        pid = child.pid
    if pid is None:
        return {"stopped": False, "pid": None, "clean": True, "seconds": 0.0}
    clean = terminate(pid, timeout, child=child)
    state_file.unlink(missing_ok=True)
    return {"stopped": True, "pid": pid, "clean": clean, "seconds": round(time.monotonic() - begin, 2)}


def tail(path: Path, lines: int = 25) -> str:
    """The last ``lines`` lines of a text file ('' when it is missing)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def log_tails(paths: Iterable[Path], empty: str, lines: int = 25) -> str:
    """The tails of the logs ``paths``, each under a ``--- PATH (tail) ---`` line, for an error message.

    Parameters
    ----------
    paths : iterable of Path
        The logs, in the order to show them; a missing or empty one is left out.
    empty : str
        The text when every log is missing or empty.
    lines : int, default 25
        Lines of each log's tail.

    Returns
    -------
    str
        The tails, one after the other, or ``empty``.

    """
    parts = [f"--- {path} (tail) ---\n{text}" for path in paths if (text := tail(path, lines))]
    return "\n".join(parts) if parts else empty


# --------------------------------------------------------------------------------------------------
# Command line.


def check_timeout_option(seconds: float) -> float:
    """``--timeout``'s value, else a ValueError: a number > 0.

    >>> check_timeout_option(-1.0)
    Traceback (most recent call last):
    ...
    ValueError: --timeout must be > 0, got -1
    """
    if not seconds > 0:
        msg = f"--timeout must be > 0, got {seconds:g}"
        raise ValueError(msg)
    return seconds


def print_stop(
    name: str,
    result: Mapping[str, Any],
    dir: Path,
    timeout: float,
    *,
    stopped: str | None = None,
    killed: str | None = None,
) -> int:
    """Print the outcome of a server's ``stop`` as ``bin/NAME-local stop`` does; return the exit status.

    Parameters
    ----------
    name : str
        The server's name, which starts the line (``kafka``, ``s3``, ``spark``).
    result : mapping
        What the stop returned (:func:`stop_server`): ``stopped`` (False: none ran), ``clean`` (False: it
        had to be killed), ``seconds``, and ``pid`` unless ``stopped`` and ``killed`` are given.
    dir : Path
        The server's directory (named when no server ran).
    timeout : float
        The seconds it was given after SIGTERM (named when it had to be killed).
    stopped : str, optional
        What the line of a clean stop names; default ``pid PID``.
    killed : str, optional
        What the line of a kill names; default ``pid PID``.

    Returns
    -------
    int
        0 when it stopped on SIGTERM or none ran, :data:`EXIT_FAILED` when it had to be killed.

    Examples
    --------
    >>> print_stop("s3", {"stopped": True, "pid": 42, "clean": True, "seconds": 0.31}, Path("/tmp/s3"), 30)
    s3: stopped pid 42 in 0.3 s
    0

    """
    if not result["stopped"]:
        print(f"{name}: not running (dir {dir})")
    elif result["clean"]:
        what = stopped if stopped is not None else f"pid {result['pid']}"
        print(f"{name}: stopped {what} in {result['seconds']:.1f} s")
    else:
        what = killed if killed is not None else f"pid {result['pid']}"
        print(f"{name}: {what} did not stop within {timeout:g} s of SIGTERM: killed")
        return EXIT_FAILED
    return 0
