"""The local Kafka broker process: one KRaft JVM (broker and controller) in a directory of its own.

From Python (tests)::

    with LocalKafka(port=19092, dir=tmp_path / "kafka") as kafka:
        kafka.create_topic("events", 4)
        ... kafka.bootstrap_servers ...

    with LocalKafka(port=19092, dir=tmp_path / "kafka", scram_users={"alice": "alice-secret"}) as kafka:
        ... kafka.sasl_bootstrap_servers ...    # SASL_PLAINTEXT, SCRAM-SHA-256 or SCRAM-SHA-512

The broker is ``java -cp '.jvm/kafka/*' kafka.Kafka server.properties`` with
``process.roles=broker,controller`` and a static one-voter quorum (``controller.quorum.voters``) on a second,
free port, so that the controller port may change from one start to the next. Its storage is formatted once,
the first time a directory is used, with ``kafka.tools.StorageTool format`` (in the ``kafka_2.13`` jar) and a
cluster id made here. Settings are those of a single node: replication factor 1 for the internal topics,
``num.partitions=1``, ``auto.create.topics.enable=false``, ``message.max.bytes`` 8 MiB (so that tests can
produce a 2 MB record that the job must quarantine), a 512 MiB heap, and a log4j2 configuration that logs
warnings (and the "started" line) to ``logs/server.log``.

A start is complete when the listener accepts TCP connections and a metadata request through confluent-kafka's
``AdminClient`` lists the broker; it fails after 30 s (by default) with the tail of the broker's log.

SCRAM users (:mod:`tools.local.kafka_scram`) add a second client listener, ``SASL_PLAINTEXT``.

The directory holds::

    server.properties, log4j2.properties   written at each start
    data/                                   the broker's log.dirs (formatted once)
    logs/server.log, logs/broker.out        the broker's log and its standard output and error
    broker.json                             pid, ports and start time of the running broker
"""

from __future__ import annotations

import base64
import contextlib
import os
import socket
import subprocess
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tools.local import processes
from tools.local.kafka_scram import (
    add_scram_users,
    check_scram_users,
    sasl_listener_settings,
    scram_client_config,
)
from tools.local.kafka_topics import QUIET, KafkaLocalError, ensure_topic
from tools.local.processes import free_port

__all__ = ["DEFAULT_PORT", "LocalKafka"]

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PORT = 9092
DEFAULT_HOST = "127.0.0.1"
DEFAULT_DIR = ROOT / "out" / "kafka"
DEFAULT_JARS = ROOT / ".jvm" / "kafka"
PORT_ENV, DIR_ENV, JARS_ENV = "AWM_KAFKA_PORT", "AWM_KAFKA_DIR", "AWM_KAFKA_JARS"

_NODE_ID = 1
_STATE = "broker.json"
_MAIN_CLASS = "kafka.Kafka"
_STORAGE_TOOL = "kafka.tools.StorageTool"
_BROKER_JAR = "kafka_2.13-*.jar"


def _accepts(host: str, port: int) -> bool:
    """Whether a TCP connection to ``host:port`` succeeds."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _cluster_id() -> str:
    """A random Kafka cluster id: 16 bytes in URL-safe base64 without padding (as ``random-uuid`` prints)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
        if not text.startswith("-"):  # Kafka avoids ids that look like command-line flags
            return text


def _main_thread(pid: int, frames: int = 12) -> str:
    """Where a JVM's main thread is (``jstack``), for the message of a start that hangs; '' when unknown."""
    try:
        proc = subprocess.run(["jstack", str(pid)], capture_output=True, text=True, timeout=15, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    blocks = proc.stdout.split("\n\n")
    main = next((b for b in blocks if b.startswith('"main"')), "")
    if not main:
        return ""
    return "\n--- its main thread (jstack) ---\n" + "\n".join(main.splitlines()[: frames + 2])


class LocalKafka:
    """One local KRaft broker (controller and broker in one JVM) in a directory of its own.

    Parameters
    ----------
    port : int, optional
        The client listener's port; default ``$AWM_KAFKA_PORT``, else 9092.
    dir : str or os.PathLike, optional
        Directory for the configuration, data and logs; default ``$AWM_KAFKA_DIR``, else ``out/kafka``.
    controller_port : int, optional
        The controller listener's port; default a free port chosen at each start.
    host : str, default "127.0.0.1"
        The address both listeners bind and the broker advertises.
    jars : str or os.PathLike, optional
        The broker's jars; default ``$AWM_KAFKA_JARS``, else ``.jvm/kafka`` (filled by ``bin/bootstrap.sh``).
    heap : str, default "512m"
        The JVM's maximum heap (``-Xmx``).
    start_timeout : float, default 30.0
        Seconds :meth:`start` waits for the broker to answer.
    scram_users : mapping of str to str, optional
        ``{user: password}``: a second client listener, ``SASL_PLAINTEXT`` with SCRAM-SHA-256 and
        SCRAM-SHA-512, and these users (created, or their passwords replaced, at each start).
    sasl_port : int, optional
        The SASL listener's port; default a free port chosen at each start. Only with ``scram_users``.

    Examples
    --------
    Not run here (it needs the jars and takes seconds)::

        with LocalKafka(port=free_port(), dir=tmp) as kafka:
            kafka.create_topic("events", 4)
            producer = Producer({"bootstrap.servers": kafka.bootstrap_servers})

    """

    def __init__(
        self,
        port: int | None = None,
        dir: str | os.PathLike[str] | None = None,
        *,
        controller_port: int | None = None,
        host: str = DEFAULT_HOST,
        jars: str | os.PathLike[str] | None = None,
        heap: str = "512m",
        start_timeout: float = 30.0,
        scram_users: Mapping[str, str] | None = None,
        sasl_port: int | None = None,
    ) -> None:
        self.port = processes.check_port(processes.port_setting(port, PORT_ENV, DEFAULT_PORT))
        self.controller_port = None if controller_port is None else processes.check_port(controller_port)
        if self.controller_port == self.port:
            msg = f"the controller port must differ from the broker port {self.port}"
            raise ValueError(msg)
        self.host = host
        self.dir = processes.path_setting(dir, DIR_ENV, DEFAULT_DIR)
        self.jars = processes.path_setting(jars, JARS_ENV, DEFAULT_JARS)
        self.heap = heap
        self.start_timeout = processes.check_timeout(start_timeout)
        self._scram_users = check_scram_users(scram_users)  # never printed (see __repr__)
        if sasl_port is not None and not self._scram_users:
            msg = "a SASL port needs SCRAM users (scram_users, --sasl-scram USER:PASSWORD)"
            raise ValueError(msg)
        self.sasl_port = None if sasl_port is None else processes.check_port(sasl_port, "the SASL port")
        if self.sasl_port is not None and self.sasl_port in (self.port, self.controller_port):
            msg = f"the SASL port {self.sasl_port} must differ from the broker and controller ports"
            raise ValueError(msg)
        self.start_seconds: float | None = None
        self._process: subprocess.Popen[bytes] | None = None

    # ----------------------------------------------------------------------------------------------
    # Paths and state.

    @property
    def bootstrap_servers(self) -> str:
        """``HOST:PORT`` of the client listener (of the running broker, if the state file names one)."""
        state = self._state()
        port = state["port"] if state and state.get("host") else self.port
        host = state["host"] if state and state.get("host") else self.host
        return f"{host}:{port}"

    @property
    def scram_users(self) -> list[str]:
        """The names of the SCRAM users given (their passwords are kept, never shown)."""
        return sorted(self._scram_users)

    @property
    def sasl_bootstrap_servers(self) -> str | None:
        """``HOST:PORT`` of the SASL_PLAINTEXT listener of the running broker (None: it has none)."""
        state = self._state()
        if state is not None:
            return f"{state['host']}:{state['sasl_port']}" if state.get("sasl_port") else None
        return f"{self.host}:{self.sasl_port}" if self._scram_users and self.sasl_port else None

    def scram_client_config(self, user: str, mechanism: str = "SCRAM-SHA-512") -> dict[str, str]:
        """confluent-kafka settings: log in as ``user`` (of :attr:`scram_users`) on the SASL listener."""
        if user not in self._scram_users:
            msg = f"no SCRAM user {user!r} on this broker (users: {', '.join(self.scram_users) or 'none'})"
            raise ValueError(msg)
        servers = self.sasl_bootstrap_servers
        if servers is None:
            msg = "the broker runs without a SASL listener"
            raise KafkaLocalError(msg)
        return scram_client_config(servers, user, self._scram_users[user], mechanism)

    @property
    def data_dir(self) -> Path:
        """The broker's ``log.dirs``."""
        return self.dir / "data"

    @property
    def log_file(self) -> Path:
        """The broker's log (warnings and the start line)."""
        return self.dir / "logs" / "server.log"

    @property
    def out_file(self) -> Path:
        """The JVM's standard output and error."""
        return self.dir / "logs" / "broker.out"

    def _state(self) -> dict[str, Any] | None:
        """The state file of a broker that still runs (None otherwise; a stale file is removed)."""
        return processes.read_state(self.dir / _STATE, self._serves)

    def _serves(self, pid: int) -> bool:
        """Whether ``pid`` is the broker of this directory."""
        return (
            processes.alive(pid)
            and _MAIN_CLASS in processes.cmdline(pid)
            and str(self.dir) in " ".join(processes.cmdline(pid))
        )

    def status(self) -> dict[str, Any]:
        """Whether a broker runs in this directory.

        Returns
        -------
        dict
            ``{"running": bool, "pid": int or None, "bootstrap_servers": str or None,
            "sasl_bootstrap_servers": str or None, "scram_users": list of str, "dir": str}``, and
            ``"started_at"`` (epoch seconds) when running. ``sasl_bootstrap_servers`` is the SASL_PLAINTEXT
            listener (None without SCRAM users); ``scram_users`` are the names given at its start.

        """
        state = self._state()
        if state is None:
            return {
                "running": False,
                "pid": None,
                "bootstrap_servers": None,
                "sasl_bootstrap_servers": None,
                "scram_users": [],
                "dir": str(self.dir),
            }
        sasl = f"{state['host']}:{state['sasl_port']}" if state.get("sasl_port") else None
        return {
            "running": True,
            "pid": state["pid"],
            "bootstrap_servers": f"{state['host']}:{state['port']}",
            "sasl_bootstrap_servers": sasl,
            "scram_users": list(state.get("scram_users", [])),
            "dir": str(self.dir),
            "started_at": state.get("started_at"),
        }

    # ----------------------------------------------------------------------------------------------
    # Start.

    def _classpath(self) -> str:
        """The jars' class path, or a KafkaLocalError telling the user to run the set-up."""
        if not self.jars.is_dir() or not any(self.jars.glob(_BROKER_JAR)):
            msg = (
                f"the Kafka broker jars are missing ({self.jars / _BROKER_JAR} not found); "
                "run bin/bootstrap.sh (source it, or run bin/test or bin/run) to fetch them with Maven"
            )
            raise KafkaLocalError(msg)
        return str(self.jars / "*")

    def _write_config(self, controller_port: int, sasl_port: int | None = None) -> Path:
        """Write ``server.properties`` and ``log4j2.properties``; return the former.

        With ``sasl_port``, a ``SASL_PLAINTEXT`` listener there with the SCRAM mechanisms
        (:func:`tools.local.kafka_scram.sasl_listener_settings`).
        """
        client = [f"PLAINTEXT://{self.host}:{self.port}"]
        protocols = ["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT"]
        sasl: dict[str, object] = {}
        if sasl_port is not None:
            client.append(f"SASL_PLAINTEXT://{self.host}:{sasl_port}")
            protocols.append("SASL_PLAINTEXT:SASL_PLAINTEXT")
            sasl = sasl_listener_settings()
        settings = {
            "process.roles": "broker,controller",
            "node.id": _NODE_ID,
            "controller.quorum.voters": f"{_NODE_ID}@{self.host}:{controller_port}",
            "listeners": ",".join([*client, f"CONTROLLER://{self.host}:{controller_port}"]),
            "advertised.listeners": ",".join(client),
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": ",".join(protocols),
            **sasl,
            "log.dirs": self.data_dir,
            "num.partitions": 1,
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": 1,
            "offsets.topic.num.partitions": 1,
            "transaction.state.log.replication.factor": 1,
            "transaction.state.log.min.isr": 1,
            "transaction.state.log.num.partitions": 1,
            "share.coordinator.state.topic.replication.factor": 1,
            "share.coordinator.state.topic.min.isr": 1,
            "group.initial.rebalance.delay.ms": 0,
            "message.max.bytes": 8 * 1024 * 1024,
            # Replays carry the recorded arrival times (years old) as record timestamps: with the default
            # 7-day time retention the broker deletes their segments at its first retention check (5 min
            # after start), and a query then fails with "data may have been lost". Keep everything.
            "log.retention.ms": -1,
            "num.network.threads": 2,
            "num.io.threads": 4,
        }
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "logs").mkdir(exist_ok=True)
        server = self.dir / "server.properties"
        lines = ["# Written by tools/local/kafka_broker.py at each start; edits are overwritten."]
        server.write_text("\n".join(lines + [f"{k}={v}" for k, v in settings.items()]) + "\n")
        log_file = str(self.log_file).replace("\\", "/")
        (self.dir / "log4j2.properties").write_text(
            "\n".join(
                [
                    "# Warnings and errors, and the broker's start and stop lines, to logs/server.log.",
                    "status = error",
                    "appender.file.type = RollingFile",
                    "appender.file.name = file",
                    f"appender.file.fileName = {log_file}",
                    f"appender.file.filePattern = {log_file}.%i",
                    "appender.file.layout.type = PatternLayout",
                    "appender.file.layout.pattern = [%d] %p %m (%c)%n",
                    "appender.file.policies.type = Policies",
                    "appender.file.policies.size.type = SizeBasedTriggeringPolicy",
                    "appender.file.policies.size.size = 10MB",
                    "appender.file.strategy.type = DefaultRolloverStrategy",
                    "appender.file.strategy.max = 2",
                    "rootLogger.level = WARN",
                    "rootLogger.appenderRef.file.ref = file",
                    "logger.server.name = kafka.server.KafkaRaftServer",
                    "logger.server.level = INFO",
                ]
            )
            + "\n"
        )
        return server

    def _java(self, classpath: str, *args: str) -> list[str]:
        """A ``java`` command line with the broker's JVM options."""
        return [
            "java",
            f"-Xmx{self.heap}",
            "-Xms64m",
            "-XX:+UseSerialGC",
            # C1 only: a third less CPU to start (6.6 s instead of 9 s on two busy cores, 2.8 s instead of
            # 3.4 s idle); a local test and demo broker never runs long enough to profit from C2.
            "-XX:TieredStopAtLevel=1",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.dir / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self.dir / 'logs'}",
            "-cp",
            classpath,
            *args,
        ]

    def _format(self, classpath: str, server: Path) -> None:
        """Format the storage once (when ``data/meta.properties`` is missing)."""
        if (self.data_dir / "meta.properties").exists():
            return
        command = self._java(classpath, _STORAGE_TOOL, "format", "-t", _cluster_id(), "-c", str(server))
        try:
            proc = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
        except FileNotFoundError:
            msg = "java not found on PATH: the broker needs Java 17 (bin/bootstrap.sh installs it)"
            raise KafkaLocalError(msg) from None
        if proc.returncode != 0:
            output = (proc.stdout + proc.stderr).strip().splitlines()[-15:]
            msg = f"formatting {self.data_dir} failed (exit {proc.returncode}):\n" + "\n".join(output)
            raise KafkaLocalError(msg)

    def start(self) -> LocalKafka:
        """Start the broker and wait until it answers a metadata request.

        Returns
        -------
        LocalKafka
            This object; :attr:`start_seconds` holds the time the start took.

        Raises
        ------
        KafkaLocalError
            If a broker already runs in the directory, a port is busy, the jars or Java are missing, the
            broker exits, or it does not answer within ``start_timeout`` (the message ends with the tail
            of its log).

        """
        begin = time.monotonic()
        state = self._state()
        if state is not None:
            msg = (
                f"a broker already runs in {self.dir} (pid {state['pid']}, {state['host']}:{state['port']}); "
                "stop it first (bin/kafka-local stop)"
            )
            raise KafkaLocalError(msg)
        classpath = self._classpath()
        if processes.port_busy(self.host, self.port):
            msg = (
                f"port {self.port} on {self.host} is already in use (another broker? see bin/kafka-local "
                f"status); choose another with --port or ${PORT_ENV}"
            )
            raise KafkaLocalError(msg)
        controller_port = self.controller_port or free_port(self.host)
        if processes.port_busy(self.host, controller_port):
            msg = f"the controller port {controller_port} on {self.host} is already in use"
            raise KafkaLocalError(msg)
        sasl_port = None
        if self._scram_users:
            sasl_port = self.sasl_port
            while sasl_port is None or sasl_port in (self.port, controller_port):
                sasl_port = free_port(self.host)
            if processes.port_busy(self.host, sasl_port):
                msg = f"the SASL port {sasl_port} on {self.host} is already in use (choose one: --sasl-port)"
                raise KafkaLocalError(msg)
        server = self._write_config(controller_port, sasl_port)
        self._format(classpath, server)
        self.log_file.unlink(missing_ok=True)
        self._process = processes.spawn(
            self._java(classpath, _MAIN_CLASS, str(server)), self.out_file, cwd=self.dir
        )
        state = {
            "pid": self._process.pid,
            "host": self.host,
            "port": self.port,
            "controller_port": controller_port,
            "sasl_port": sasl_port,
            "scram_users": self.scram_users,  # names only
            "started_at": time.time(),
        }

        def ready() -> None:
            self._wait_ready(begin)
            if sasl_port is not None:
                add_scram_users(f"{self.host}:{self.port}", self._scram_users, begin + self.start_timeout)
                self._wait_sasl_ready(begin, sasl_port)

        processes.record_start(self._process, state, self.dir / _STATE, ready)
        self.start_seconds = time.monotonic() - begin
        return self

    def _wait_ready(self, begin: float) -> None:
        """Wait until the port accepts connections and the AdminClient lists this broker."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        assert self._process is not None
        deadline = begin + self.start_timeout
        admin = None
        while True:
            code = self._process.poll()
            if code is not None:
                msg = f"the broker exited with status {code} while starting; {self._log_tail()}"
                raise KafkaLocalError(msg)
            if _accepts(self.host, self.port):
                if admin is None:
                    admin = AdminClient({"bootstrap.servers": f"{self.host}:{self.port}", **QUIET})
                with contextlib.suppress(KafkaException):
                    metadata = admin.list_topics(timeout=max(0.1, min(2.0, deadline - time.monotonic())))
                    if _NODE_ID in metadata.brokers:
                        return
            if time.monotonic() >= deadline:
                msg = (
                    f"the broker did not answer within {self.start_timeout:g} s; {self._log_tail()}"
                    f"{_main_thread(self._process.pid)}"
                )
                raise KafkaLocalError(msg)
            time.sleep(0.1)

    def _wait_sasl_ready(self, begin: float, sasl_port: int) -> None:
        """Wait until the first SCRAM user logs in on the SASL listener.

        Credentials reach the broker's metadata a moment after the controller accepts them.
        """
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        deadline = begin + self.start_timeout
        user = self.scram_users[0]
        config = scram_client_config(f"{self.host}:{sasl_port}", user, self._scram_users[user])
        last = "no answer"
        while True:
            admin = AdminClient({**config, **QUIET})
            try:
                metadata = admin.list_topics(timeout=max(0.1, min(2.0, deadline - time.monotonic())))
                if _NODE_ID in metadata.brokers:
                    return
            except KafkaException as exc:
                last = exc.args[0].str()
            if time.monotonic() >= deadline:
                msg = (
                    f"user {user!r} could not log in on the SASL listener {self.host}:{sasl_port} within "
                    f"{self.start_timeout:g} s ({last}); {self._log_tail()}"
                )
                raise KafkaLocalError(msg)
            time.sleep(0.2)

    def _log_tail(self) -> str:
        """The tails of the broker's log and output, for an error message."""
        return processes.log_tails(
            [self.log_file, self.out_file], f"its log ({self.log_file}) is still empty"
        )

    # ----------------------------------------------------------------------------------------------
    # Stop.

    def stop(self, timeout: float = 30.0) -> dict[str, Any]:
        """Stop the broker that runs in the directory: SIGTERM, wait, SIGKILL after ``timeout`` s.

        Parameters
        ----------
        timeout : float, default 30.0
            Seconds to wait for a clean shutdown.

        Returns
        -------
        dict
            ``{"stopped": bool, "pid": int or None, "clean": bool, "seconds": float}``; ``stopped`` is False
            when no broker ran, ``clean`` False when it had to be killed.

        """
        result = processes.stop_server(self._state, self._process, self.dir / _STATE, timeout)
        if result["stopped"]:
            self._process = None
        return result

    # ----------------------------------------------------------------------------------------------
    # Topics and context management.

    def create_topic(self, name: str, partitions: int = 1, *, config: Mapping[str, str] | None = None) -> int:
        """Create a topic with ``partitions`` partitions (an existing topic must have that many).

        Parameters
        ----------
        name : str
            The topic.
        partitions : int, default 1
            Its partition count, >= 1.
        config : mapping of str to str, optional
            Topic configuration, e.g. ``{"message.timestamp.type": "LogAppendTime"}``.

        Returns
        -------
        int
            The partition count.

        Raises
        ------
        ValueError
            If the topic exists with another partition count, or an argument is invalid.

        """
        count, _ = ensure_topic(self.bootstrap_servers, name, partitions, config=config)
        return count

    def __enter__(self) -> LocalKafka:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:  # the SCRAM users' names only, never their passwords
        users = f", scram_users={self.scram_users}" if self._scram_users else ""
        return f"LocalKafka(port={self.port}, dir={str(self.dir)!r}{users})"
