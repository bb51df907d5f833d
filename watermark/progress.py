"""Progress of long work (feed, compare, tune): a bar on a terminal, a few plain lines elsewhere.

Long-running functions take a ``progress`` callback that receives one line of text per step (the
``Progress`` type). A line made by :func:`progress_line` is a :class:`ProgressLine`, a ``str`` that also
carries how much of the work is done, so that a callback that prints or collects the lines keeps working
while :class:`ProgressReporter` (the command lines' callback) can draw a bar from it.

On a terminal the reporter draws a tqdm bar on standard error. Elsewhere (a pipe, a file, a CI log) it logs
plain lines through the ``awm.progress`` logger: the first step, then one line each time another
``every_pct`` percent of the work is done, and the last step. The command lines' text log format writes
those lines bare; the JSON format writes them as JSON objects like any log record.

>>> seen = []
>>> line = progress_line("file 2/4: 10 rows", done=2, total=4)
>>> seen.append(line)
>>> seen == ["file 2/4: 10 rows"], line.done, line.total
(True, 2, 4)
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from types import TracebackType
from typing import Any, TextIO

__all__ = [
    "PROGRESS_LOGGER",
    "Progress",
    "ProgressLine",
    "ProgressReporter",
    "offset_progress",
    "progress_line",
]

#: The logger of the plain progress lines (written bare by the text log format).
PROGRESS_LOGGER = "awm.progress"

Progress = Callable[[str], None]


class ProgressLine(str):
    """A line of progress text that also says how many of how many steps are done."""

    done: int | None
    total: int | None


def progress_line(text: str, done: int | None = None, total: int | None = None) -> ProgressLine:
    """The line ``text`` carrying ``done`` of ``total`` steps (both None: a line without a count)."""
    line = ProgressLine(text)
    line.done, line.total = done, total
    return line


def offset_progress(progress: Progress | None, offset: int, total: int) -> Progress | None:
    """A callback that passes ``progress`` its lines with their counts shifted into a larger whole.

    >>> seen = []
    >>> inner = offset_progress(seen.append, 10, 30)
    >>> inner(progress_line("[2/10] periodic", 1, 10))
    >>> seen[0], seen[0].done, seen[0].total
    ('[2/10] periodic', 11, 30)
    """
    if progress is None:
        return None
    outer = progress

    def shifted(line: str) -> None:
        done = getattr(line, "done", None)
        outer(progress_line(str(line), None if done is None else offset + done, total))

    return shifted


class ProgressReporter:
    """The command lines' progress callback (a context manager: the bar closes at the end).

    Parameters
    ----------
    desc : str
        A short label of the work (the bar's prefix).
    unit : str
        What a step is (``"file"``, ``"run"``, ``"record"``).
    enabled : bool
        False: report nothing (``--quiet``).
    bar : bool, optional
        Draw a bar; default: when ``stream`` is a terminal and tqdm can be imported.
    every_pct : float
        Without a bar: log a line each time another this many percent are done.
    stream : file, optional
        The bar's stream (default: standard error).

    """

    def __init__(
        self,
        desc: str,
        *,
        unit: str = "step",
        enabled: bool = True,
        bar: bool | None = None,
        every_pct: float = 10.0,
        stream: TextIO | None = None,
    ) -> None:
        self.desc, self.unit, self.enabled = desc, unit, enabled
        self.every_pct = every_pct
        self._stream = stream
        self._bar_wanted = bar
        self._bar: Any = None
        self._last_bucket: int | None = None
        self._last_line: str | None = None
        self._log = logging.getLogger(PROGRESS_LOGGER)

    @property
    def stream(self) -> TextIO:
        """The stream the bar is drawn on."""
        return self._stream if self._stream is not None else sys.stderr

    def _use_bar(self) -> bool:
        if self._bar_wanted is None:
            try:
                isatty = self.stream.isatty()
            except (AttributeError, ValueError):
                isatty = False
            self._bar_wanted = isatty and _tqdm_available()
        return self._bar_wanted

    def __call__(self, line: str) -> None:
        """Report one line (a :class:`ProgressLine` moves the bar)."""
        if not self.enabled:
            return
        done, total = getattr(line, "done", None), getattr(line, "total", None)
        if self._use_bar():
            self._draw(str(line), done, total)
        else:
            self._plain(str(line), done, total)

    def _draw(self, text: str, done: int | None, total: int | None) -> None:
        if done is None or not total:
            if self._bar is None:
                print(text, file=self.stream, flush=True)
            else:
                self._bar.write(text, file=self.stream)
            return
        if self._bar is None:
            from tqdm import tqdm

            self._bar = tqdm(
                total=total, desc=self.desc, unit=self.unit, file=self.stream, dynamic_ncols=True, leave=True
            )
        bar = self._bar
        bar.total = total
        bar.set_postfix_str(text, refresh=False)
        bar.update(done - bar.n)

    def _plain(self, text: str, done: int | None, total: int | None) -> None:
        if done is None or not total:
            self._log.info(text)
            return
        bucket = int(100.0 * done / total // self.every_pct) if self.every_pct > 0 else done
        last = self._last_bucket
        if last is None or bucket > last or (done >= total and text != self._last_line):
            self._last_bucket = bucket
            self._last_line = text
            self._log.info(text)

    def close(self) -> None:
        """Close the bar (it stays on screen)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> ProgressReporter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _tqdm_available() -> bool:
    try:
        import tqdm  # noqa: F401
    except ImportError:
        return False
    return True
