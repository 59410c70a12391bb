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
    """A table the file declares would not fit the memory budget (exit 3, not bad input)."""
