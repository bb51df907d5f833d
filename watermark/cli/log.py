"""What every command line of the project shares: logging flags and set-up, error mapping, plain help text.

Each command (the subcommands of the root command ``awm``, :mod:`awm.cli`, each also ``python -m MODULE``;
``bin/kafka-local``) has the shape ``main(argv) -> exit status`` and delegates it to :func:`run_main`:

- the parser gets ``--version`` (``awm <version>``, :func:`version_text`), ``--log-level`` and
  ``--log-format text|json`` (:func:`add_logging_flags`); its program name is the one the root command
  runs it under (:func:`command_prog`), else its own ``python -m MODULE``;
- logging goes through the standard library to standard error (:func:`setup_logging`): ``text`` writes
  ``LEVEL logger: message`` lines, ``json`` one JSON object a line with ``time`` (UTC, ISO-8601), ``level``,
  ``logger``, ``message`` and, for a record with an exception, ``exception`` (the traceback text), for log
  shippers;
- the errors a command names are caught and printed as one line ``error: ...`` on standard error (in the
  JSON format: a JSON object whose message is that line) with the exit status the command gives them;
  any other exception is logged with its traceback and gives exit status 1.

Results (summaries, tables, JSON reports) stay on standard output.
"""

from __future__ import annotations

import argparse
import contextlib
import contextvars
import importlib.metadata
import json
import logging
import re
import sys
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from watermark.progress import PROGRESS_LOGGER

__all__ = [
    "LOG_FORMATS",
    "LOG_LEVELS",
    "CliError",
    "JsonFormatter",
    "TextFormatter",
    "add_logging_flags",
    "command_prog",
    "entry_prog",
    "logging_argv",
    "package_version",
    "plain_text",
    "run_main",
    "setup_logging",
    "usage_errors",
    "version_text",
]

LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
EXIT_UNEXPECTED = 1
EXIT_INTERRUPTED = 130
#: The distribution whose version ``--version`` prints.
DIST_NAME = "adaptive-watermarks"

#: The program name the root command runs a subcommand under (:func:`command_prog`).
_PROG: contextvars.ContextVar[str | None] = contextvars.ContextVar("awm_prog", default=None)

#: Loggers of libraries that chatter, and the least severe of their records shown (unless --log-level DEBUG).
_NOISY = {"py4j": logging.WARNING, "great_expectations": logging.ERROR}

ErrorMap = Mapping[type[BaseException] | tuple[type[BaseException], ...], int]

log = logging.getLogger("awm.cli")


class CliError(Exception):
    """An error a command reports as one line ``error: ...`` with exit status ``code``."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


class TextFormatter(logging.Formatter):
    """``LEVEL logger: message`` (with the traceback after it); progress lines bare."""

    def __init__(self) -> None:
        super().__init__("%(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        """The record as text."""
        if record.name == PROGRESS_LOGGER or getattr(record, "bare", False):
            return record.getMessage()
        return super().format(record)


class JsonFormatter(logging.Formatter):
    """One JSON object a record: time, level, logger, message, and exception when there is one.

    >>> record = logging.LogRecord("tools.feed", logging.INFO, __file__, 1, "rows %d", (5,), None)
    >>> record.created = 0.0
    >>> JsonFormatter().format(record)
    '{"time": "1970-01-01T00:00:00.000Z", "level": "INFO", "logger": "tools.feed", "message": "rows 5"}'
    """

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON."""
        stamp = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
        doc: dict[str, Any] = {
            "time": stamp.replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            doc["exception"] = record.exc_text
        if record.stack_info:
            doc["stack"] = self.formatStack(record.stack_info)
        return json.dumps(doc, ensure_ascii=False, default=str)


class _StderrHandler(logging.Handler):
    """Writes to whatever ``sys.stderr`` is when a record comes (so a replaced stderr is followed)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            stream = sys.stderr
            stream.write(self.format(record) + "\n")
            stream.flush()
        except Exception:  # noqa: BLE001 - logging must never raise
            self.handleError(record)


def setup_logging(level: str = "INFO", fmt: str = "text") -> logging.Handler:
    """Send the root logger's records at ``level`` and above to standard error in format ``fmt``.

    Replaces the handler an earlier call installed (and only that one), so ``main()`` can run many times
    in one process.
    """
    if fmt not in LOG_FORMATS:
        msg = f"the log format must be one of {', '.join(LOG_FORMATS)}, got {fmt!r}"
        raise ValueError(msg)
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _StderrHandler)]:
        root.removeHandler(old)
    handler = _StderrHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name, least in _NOISY.items():
        logging.getLogger(name).setLevel(logging.DEBUG if level.upper() == "DEBUG" else least)
    return handler


def add_logging_flags(
    parser: argparse.ArgumentParser, default_level: str = "INFO", *, passthrough: bool = False
) -> None:
    """Add ``--version``, ``--log-level`` and ``--log-format`` to ``parser`` and its subcommands (idempotent).

    With ``passthrough`` the logging flags have no default: only those given are in the parsed namespace,
    for a command that hands them on to another (:func:`logging_argv`).
    """
    if "--log-format" in parser._option_string_actions:
        return
    if "--version" not in parser._option_string_actions:
        parser.add_argument("--version", action=_VersionAction)
    sub = _is_sub(parser)
    _logging_group(parser, default_level, argparse.SUPPRESS if sub or passthrough else None)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                child._awm_sub = True
                add_logging_flags(child, default_level)


def logging_argv(args: argparse.Namespace) -> list[str]:
    """The logging flags ``args`` holds, as arguments to hand on (see ``passthrough`` above).

    >>> logging_argv(argparse.Namespace(log_format="json"))
    ['--log-format', 'json']
    """
    pairs = (("--log-level", "log_level"), ("--log-format", "log_format"))
    return [item for flag, dest in pairs if hasattr(args, dest) for item in (flag, getattr(args, dest))]


class _VersionAction(argparse.Action):
    """``--version``: print :func:`version_text` on standard output and exit 0.

    Like argparse's own ``version`` action, but the version is looked up only when asked for.
    """

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        kwargs.setdefault("help", "print the version (awm VERSION) and exit")
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        print(version_text(), flush=True)
        parser.exit()


def version_text() -> str:
    """``awm <version>``: what every command's ``--version`` prints."""
    return f"awm {package_version()}"


def package_version() -> str:
    """The version: the installed metadata, else this source tree's ``pyproject.toml``, else ``unknown``.

    A source tree that is not installed (``PYTHONPATH=.``, ``spark-submit`` of a shipped file) has no
    metadata; its ``pyproject.toml``, when it is there, still names the version.
    """
    try:
        return importlib.metadata.version(DIST_NAME)
    except importlib.metadata.PackageNotFoundError:
        pass
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    try:
        project = tomllib.loads(pyproject.read_text())["project"]
        if project["name"] == DIST_NAME:
            return str(project["version"])
    except (OSError, KeyError, TypeError, tomllib.TOMLDecodeError):
        pass
    return "unknown"


def _is_sub(parser: argparse.ArgumentParser) -> bool:
    return bool(getattr(parser, "_awm_sub", False))


def _logging_group(parser: argparse.ArgumentParser, default_level: str, suppress: str | None) -> None:
    group = parser.add_argument_group("logging")
    group.add_argument(
        "--log-level",
        type=str.upper,
        choices=LOG_LEVELS,
        default=suppress or default_level,
        help=f"least severe log records written to standard error (default {default_level})",
    )
    group.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default=suppress or "text",
        help="text: LEVEL logger: message lines (progress lines bare); json: one JSON object a line "
        "(time, level, logger, message, exception) for log shippers (default text)",
    )


def run_main(
    parser: argparse.ArgumentParser,
    handler: Callable[[argparse.Namespace], int],
    argv: Sequence[str] | None = None,
    *,
    errors: ErrorMap | None = None,
    default_level: str = "INFO",
) -> int:
    """Parse ``argv``, set up logging, run ``handler(args)`` and return its exit status.

    Parameters
    ----------
    parser : argparse.ArgumentParser
        The command's parser; :func:`add_logging_flags` is applied to it, and its description made plain
        text (:func:`plain_text`).
    handler : callable
        Does the work; returns the exit status.
    argv : sequence of str, optional
        The arguments (default ``sys.argv[1:]``).
    errors : mapping, optional
        Exception class (or tuple of classes) to exit status, first match wins; each caught error prints
        ``error: <its message>`` (``interrupted`` for an empty one such as KeyboardInterrupt). Default:
        ``ValueError`` gives 2. :class:`CliError` always gives its own code.
    default_level : str
        The default of ``--log-level``.

    """
    prog = _PROG.get()
    if prog is not None:  # run by the root command: its name, also for a parser that set its own
        parser.prog = prog
    if parser.description:  # often a docstring's first line
        parser.description = plain_text(parser.description)
    add_logging_flags(parser, default_level)
    args = parser.parse_args(argv)
    fmt = getattr(args, "log_format", "text")
    setup_logging(getattr(args, "log_level", default_level), fmt)
    mapping: ErrorMap = {ValueError: 2} if errors is None else errors
    token = _PROG.set(None)  # a command the handler runs in turn has its own name
    try:
        return handler(args)
    except CliError as exc:
        report_error(str(exc), fmt)
        return exc.code
    except BaseException as exc:
        for kinds, code in mapping.items():
            if isinstance(exc, kinds):
                report_error(str(exc) or "interrupted", fmt)
                return code
        if not isinstance(exc, Exception):  # SystemExit, KeyboardInterrupt not mapped: as Python does
            raise
        log.critical("error: %s: %s", type(exc).__name__, exc, exc_info=exc)
        return EXIT_UNEXPECTED
    finally:
        _PROG.reset(token)


@contextlib.contextmanager
def usage_errors(*kinds: type[BaseException], code: int = 2) -> Iterator[None]:
    """Turn the exceptions ``kinds`` raised in the block into :class:`CliError` (``error: ...``, ``code``).

    For the part of a command that validates its input, when the same exception types raised later (by
    the work itself) should not pass for bad input.
    """
    try:
        yield
    except kinds as exc:
        raise CliError(str(exc), code) from exc


def report_error(message: str, fmt: str = "text") -> None:
    """Print ``error: message`` on standard error (in the JSON format, as a JSON log record)."""
    if fmt == "json":
        record = logging.LogRecord("awm.cli", logging.ERROR, __file__, 0, f"error: {message}", None, None)
        print(JsonFormatter().format(record), file=sys.stderr, flush=True)
    else:
        print(f"error: {message}", file=sys.stderr, flush=True)


_ROLE = re.compile(r":[a-z]+(?::[a-z]+)?:`~?([^`]+)`")
_LITERAL = re.compile(r"``([^`]+)``")


def plain_text(text: str) -> str:
    """The text without its reStructuredText markup (``literals``, :func:`roles`), for help text.

    >>> plain_text("Command line: ``python -m watermark``, see :func:`~watermark.cli.main.main`.")
    'Command line: python -m watermark, see watermark.cli.main.main.'
    """
    return _LITERAL.sub(r"\1", _ROLE.sub(r"\1", text))


@contextlib.contextmanager
def command_prog(prog: str) -> Iterator[None]:
    """Run a command's ``main`` in the block under the program name ``prog`` (``awm stream``).

    Its help, usage line and usage errors show ``prog`` (:func:`entry_prog`, :func:`run_main`); the root
    command :mod:`awm.cli` runs each subcommand so.
    """
    token = _PROG.set(prog)
    try:
        yield
    finally:
        _PROG.reset(token)


def entry_prog(default: str) -> str:
    """The program name for a parser: the one :func:`command_prog` set, else ``default`` (``python -m X``).

    >>> entry_prog("python -m tools.feed")
    'python -m tools.feed'
    >>> with command_prog("awm feed"):
    ...     entry_prog("python -m tools.feed")
    'awm feed'
    """
    return _PROG.get() or default
