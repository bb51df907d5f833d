"""The error of a bad recorded stream, :class:`InputError`, and the quoting of values in its messages."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["InputError", "arrow_error_text", "list_columns", "show"]

_VALUE_WIDTH = 40  # offending values are shown truncated to about this many characters
_MAX_LISTED_COLUMNS = 15


class InputError(ValueError):
    """Bad input: the message is ONE line naming the file, and the row or column at fault.

    Parameters
    ----------
    message : str
        The description; any line breaks in it are replaced by spaces.

    """

    def __init__(self, message: str) -> None:
        super().__init__(message.replace("\r\n", " ").replace("\n", " ").replace("\r", " "))


def show(value: object) -> str:
    """Quote a value for a message, truncated to about ``_VALUE_WIDTH`` characters."""
    text = value if isinstance(value, str) else str(value)
    if len(text) > _VALUE_WIDTH:
        text = text[: _VALUE_WIDTH - 3] + "..."
    return repr(text)


def list_columns(names: Sequence[str]) -> str:
    """List column names for a message, truncated when there are many."""
    shown = ", ".join(show(name) for name in names[:_MAX_LISTED_COLUMNS])
    if len(names) > _MAX_LISTED_COLUMNS:
        shown += f", ... ({len(names)} columns)"
    return shown or "(none)"


def arrow_error_text(exc: BaseException) -> str:
    """Return the first line of an error message, shortened."""
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."
