"""The one error every reader raises: it prints as `FILE:LINE: what is wrong`."""
from __future__ import annotations

QUOTE_CHARS = 80  # input echoed in a message is cut to this many characters
MESSAGE_CHARS = 400  # ... and a whole message to this many (a name echoed without `quote`)


def quote(value) -> str:
    """repr(value) for a message, cut to QUOTE_CHARS characters: a token may be megabytes long."""
    if isinstance(value, str) and len(value) > QUOTE_CHARS:  # cut before repr copies it whole
        return f"{value[:QUOTE_CHARS]!r}... ({len(value):,} characters)"
    text = repr(value)
    return text if len(text) <= QUOTE_CHARS else f"{text[:QUOTE_CHARS]}... ({len(text):,} characters)"


class ParseError(Exception):
    def __init__(self, path, line: int | None, message: str):
        if len(message) > MESSAGE_CHARS:
            message = f"{message[:MESSAGE_CHARS]}... ({len(message):,} characters)"
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

