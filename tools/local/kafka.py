r"""A local Kafka broker for tests and the demo: one KRaft process (broker and controller), from Maven jars.

Usage::

    bin/kafka-local start                 # 127.0.0.1:9092, data and logs under out/kafka/
    bin/kafka-local status                # running (pid, address) or not running
    bin/kafka-local stop                  # SIGTERM, wait, report
    bin/kafka-local start --port 19092 --dir /tmp/kafka   # or AWM_KAFKA_PORT=19092 / AWM_KAFKA_DIR=...
    bin/kafka-local start --sasl-scram alice:alice-secret # and a SASL_PLAINTEXT listener on 9093 (SCRAM)

    python -m tools.feed --synthetic 10000 --kafka-bootstrap-servers 127.0.0.1:9092 --topic events \
        --partitions 4

``bin/kafka-local`` sources ``bin/bootstrap.sh`` (the virtualenv and the jars in ``.jvm/kafka``) and runs
``python -m tools.local.kafka``.

The broker, its settings and its directory: :mod:`tools.local.kafka_broker`; its SCRAM users and SASL
listener: :mod:`tools.local.kafka_scram`; topics: :mod:`tools.local.kafka_topics`.

Exit status of ``python -m tools.local.kafka``: 0 on success (``status``: running), 1 when the broker cannot
be started or stopped (port busy, jars missing, timeout), 2 for bad arguments, 3 for ``status`` when no broker
runs.

"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from tools.local import processes
from tools.local.kafka_broker import DEFAULT_PORT, DIR_ENV, PORT_ENV, LocalKafka
from tools.local.kafka_scram import SCRAM_MECHANISMS, check_scram_users
from tools.local.kafka_topics import KafkaLocalError
from watermark.cli.log import entry_prog, plain_text, run_main
from watermark.cli.main import EXIT_BAD_INPUT, OneLineParser

__all__ = ["build_parser", "main"]

EXIT_FAILED = processes.EXIT_FAILED
EXIT_NOT_RUNNING = processes.EXIT_NOT_RUNNING


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m tools.local.kafka`` (``bin/kafka-local``) argument parser.

    Returns
    -------
    argparse.ArgumentParser
        The parser; its errors print one line and exit with status 2.

    """
    parser = OneLineParser(
        prog=entry_prog("bin/kafka-local"), description=plain_text(__doc__.splitlines()[0])
    )
    parser.add_argument(
        "command",
        choices=("start", "stop", "status"),
        help="start the broker (in the background), stop it, or report whether it runs",
    )
    parser.add_argument(
        "--port", metavar="N", help=f"client port for start (default ${PORT_ENV}, else {DEFAULT_PORT})"
    )
    parser.add_argument("--dir", metavar="DIR", help=f"data and logs (default ${DIR_ENV}, else out/kafka)")
    parser.add_argument("--timeout", type=float, default=30.0, metavar="S", help="start/stop wait (30)")
    parser.add_argument(
        "--sasl-scram",
        action="append",
        default=[],
        metavar="USER:PASSWORD",
        help="start: a SCRAM user (repeatable) and a second listener, SASL_PLAINTEXT with SCRAM-SHA-256 and "
        "SCRAM-SHA-512; the user is created, or its password replaced (the password is never printed)",
    )
    parser.add_argument(
        "--sasl-port", metavar="N", help="start: the SASL_PLAINTEXT listener's port (default: --port + 1)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m tools.local.kafka`` / ``bin/kafka-local``.

    Parameters
    ----------
    argv : sequence of str, optional
        The arguments (default: ``sys.argv[1:]``).

    Returns
    -------
    int
        0 on success (``status``: running), 1 when the broker fails, 2 for bad arguments, 3 when
        ``status`` finds no broker.

    """
    return run_main(
        build_parser(), _run, argv, errors={ValueError: EXIT_BAD_INPUT, KafkaLocalError: EXIT_FAILED}
    )


def _scram_users(entries: Sequence[str]) -> dict[str, str]:
    """``--sasl-scram USER:PASSWORD`` entries as ``{user: password}`` (errors never show a password)."""
    users: dict[str, str] = {}
    for entry in entries:
        user, colon, password = entry.partition(":")
        if not colon or not user or not password:
            msg = "--sasl-scram takes USER:PASSWORD (a user name, a colon, a password)"
            raise ValueError(msg)
        if user in users:
            msg = f"--sasl-scram: user {user!r} is given twice"
            raise ValueError(msg)
        users[user] = password
    return check_scram_users(users)


def _listeners(status: Mapping[str, Any]) -> str:
    """The running broker's listeners as ``status`` and ``start`` print them (user names, no password)."""
    text = f"{status['bootstrap_servers']}"
    if status.get("sasl_bootstrap_servers"):
        users = ", ".join(status.get("scram_users") or []) or "none given"
        text += (
            f" and SASL_PLAINTEXT {status['sasl_bootstrap_servers']} "
            f"({'/'.join(SCRAM_MECHANISMS)}, users: {users})"
        )
    return text


def _run(args: argparse.Namespace) -> int:
    port = None if args.port is None else processes.check_port(args.port, "--port")
    processes.check_timeout_option(args.timeout)
    users = _scram_users(args.sasl_scram)
    if (users or args.sasl_port is not None) and args.command != "start":
        msg = f"--sasl-scram and --sasl-port are for start, not {args.command}"
        raise ValueError(msg)
    if args.sasl_port is not None and not users:
        msg = "--sasl-port needs at least one --sasl-scram USER:PASSWORD"
        raise ValueError(msg)
    sasl_port = None
    if users:
        if args.sasl_port is not None:
            sasl_port = processes.check_port(args.sasl_port, "--sasl-port")
        else:
            base = port if port is not None else LocalKafka(dir=args.dir).port
            sasl_port = processes.check_port(base + 1, "--port + 1 (the default --sasl-port)")
    kafka = LocalKafka(
        port=port, dir=args.dir, start_timeout=args.timeout, scram_users=users, sasl_port=sasl_port
    )

    if args.command == "status":
        status = kafka.status()
        if status["running"]:
            print(f"kafka: running, pid {status['pid']}, {_listeners(status)} (dir {kafka.dir})")
            return 0
        print(f"kafka: not running (dir {kafka.dir})")
        return EXIT_NOT_RUNNING
    if args.command == "stop":
        return processes.print_stop("kafka", kafka.stop(timeout=args.timeout), kafka.dir, args.timeout)
    kafka.start()
    status = kafka.status()
    print(
        f"kafka: started in {kafka.start_seconds:.1f} s, pid {status['pid']}, "
        f"listening on {_listeners(status)} (dir {kafka.dir}, log {kafka.log_file})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
