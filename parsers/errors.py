"""The one error every reader raises: it prints as `FILE:LINE: what is wrong`."""
from __future__ import annotations


class ParseError(Exception):
    def __init__(self, path, line: int | None, message: str):
        super().__init__(message)
        self.path = str(path)
        self.line = line
        self.message = message

    def __str__(self) -> str:
        path = "<stdin>" if self.path == "-" else self.path
        where = f"{path}:{self.line}" if self.line is not None else path
        return f"{where}: {self.message}"


class OverBudget(ParseError):
    """What the file declares or holds (a table, a line) would not fit the memory budget (exit 3, not bad input)."""


class Stopped(Exception):
    """Reading was asked to stop (time limit, Ctrl-C, SIGTERM): not a fault of the input.
    `interrupted` is the signal's number, or False for the deadline."""

    def __init__(self, interrupted: int | bool = False):
        super().__init__("stopped while reading")
        self.interrupted = interrupted
