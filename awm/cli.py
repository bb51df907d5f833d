"""``awm COMMAND ...``: the root command, which hands each subcommand to the module that implements it.

:data:`COMMANDS` names, for each subcommand, the module whose ``main(argv)`` runs it; the module is imported
(:func:`importlib.import_module`) only when its subcommand runs, so ``awm --help`` imports none of them and
``awm stream --help`` imports the streaming job's command line, not Spark. The subcommand's parser takes
every argument after its name and shows ``awm COMMAND`` as its program name
(:func:`watermark.cli.log.command_prog`). ``--log-level`` and ``--log-format`` given before the subcommand are
handed on to it; ``--version`` prints ``awm <version>``, as it does after every subcommand.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from watermark.cli import main as watermark_cli
from watermark.cli.log import add_logging_flags, command_prog, logging_argv

__all__ = ["COMMANDS", "Command", "build_parser", "main"]


@dataclass(frozen=True)
class Command:
    """A subcommand: the module whose ``main(argv)`` runs it, and its line in ``awm --help``."""

    module: str
    help: str
    #: The module's parser takes the subcommand's name as its first argument (the watermark library's
    #: ``python -m watermark replay ...``): the name is handed on, and the module runs as ``awm``.
    named: bool = False


#: Subcommand -> what runs it, in the order ``awm --help`` lists them.
COMMANDS: dict[str, Command] = {
    **{
        name: Command("watermark.cli.main", text, named=True) for name, text in watermark_cli.COMMANDS.items()
    },
    "stream": Command(
        "jobs.stream.cli", "the streaming job: windowed aggregates through the adaptive watermark into Delta"
    ),
    "feed": Command(
        "tools.feed.cli", "feed a recorded or synthetic stream into landing files or a Kafka topic"
    ),
    "backfill": Command("jobs.batch.backfill", "fold late events into the aggregates, exactly once (Spark)"),
    "retune": Command("jobs.batch.retune", "re-tune the watermark on the recent arrival history, publish it"),
    "quality": Command("jobs.batch.quality", "run the data-quality suites on the pipeline's Delta tables"),
    "maintain": Command(
        "jobs.batch.maintenance", "compact (Z-order), apply the arrivals retention, VACUUM the Delta tables"
    ),
}


class _Rest(argparse.ArgumentParser):
    """A subcommand's parser here: it keeps every argument for the subcommand's own parser."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        """All of ``args`` as ``rest``, nothing unrecognised."""
        namespace = argparse.Namespace() if namespace is None else namespace
        namespace.rest = list(args or ())
        return namespace, []


def build_parser() -> argparse.ArgumentParser:
    """The ``awm`` argument parser (each subcommand's own flags are in ``awm COMMAND --help``)."""
    parser = watermark_cli.OneLineParser(
        prog="awm",
        description="Adaptive event-time watermarks: replay, compare and tune watermark strategies on "
        "recorded streams (replay ... strategies); run the streaming job, the feeder and the batch jobs "
        "(stream ... maintain).",
        epilog="A command's flags: awm COMMAND --help. Logging flags go before or after COMMAND.",
    )
    add_logging_flags(parser, passthrough=True)
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", title="commands", parser_class=_Rest
    )
    for name, command in COMMANDS.items():
        sub.add_parser(name, help=command.help, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point ``awm``; returns the subcommand's exit status."""
    args = build_parser().parse_args(argv)
    command = COMMANDS[args.command]
    module: Any = importlib.import_module(command.module)
    forwarded = [*logging_argv(args), *([args.command] if command.named else []), *args.rest]
    with command_prog("awm" if command.named else f"awm {args.command}"):
        return int(module.main(forwarded))
