"""Whitespace-separated tokens that remember their line, shared by the text readers.

Every reader error must name `FILE:LINE`, so tokens are pulled line by line
and the line of the last token handed out is always known. Bulk reads
(`ints`, `floats`) convert a whole table at once with numpy and only fall
back to token-by-token parsing to locate the offending entry.
"""
from __future__ import annotations

import itertools
import re
import warnings
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator

import numpy as np

from .errors import ParseError, quote
from .source import line_cap

INT64_MAX = int(np.iinfo(np.int64).max)
BATCH_MIN = 64  # tokens left to read line by line after a batch, so that a batch never passes the need
BATCH_CHARS = 1 << 16  # the text of one batch at most (its tokens, split at once, are held twice briefly)
GLUED = re.compile(r"([-+]?\d+)([-+]\d.*)")  # an integer, then a signed one with no blank between


class Lines:
    """Line numbers of a run of tokens, stored as (first token index, line) breakpoints; a batch of whole
    lines read at once is kept as its text and split into breakpoints only when a line inside it is asked
    for (an error), so that a table's lines are not split twice."""

    def __init__(self):
        self.starts: list[int] = []
        self.numbers: list[int] = []
        self.batches: list[tuple[int, list[tuple[int, str]]]] = []  # (first token index, numbered lines)
        self.last: int | None = None  # the line of the last token

    def add(self, index: int, line: int) -> None:
        self.starts.append(index)
        self.numbers.append(line)
        self.last = line

    def add_batch(self, index: int, numbered: list[tuple[int, str]], last: int) -> None:
        self.batches.append((index, numbered))
        self.last = last

    def __getitem__(self, index: int) -> int:
        if index < 0:  # only -1 is needed: the last token's line
            return self.last
        if self.batches:
            points = list(zip(self.starts, self.numbers))
            for first, numbered in self.batches:
                for line, text in numbered:
                    count = len(text.split())
                    if count:
                        points.append((first, line))
                        first += count
            points.sort()
            self.starts, self.numbers = [a for a, _ in points], [b for _, b in points]
            self.batches = []
        return self.numbers[bisect_right(self.starts, index) - 1]


class Scopes:
    """What both token sources read the same way from their `int`."""

    def scope(self, arity: int, n: int) -> tuple[int, ...]:
        """`arity` distinct variable indices below `n`."""
        scope: list[int] = []
        for _ in range(arity):
            v = self.int("scope variable")
            if not 0 <= v < n:
                raise self.error(f"scope variable {v} out of range (n={n})")
            if v in scope:
                raise self.error(f"variable {v} appears twice in a scope")
            scope.append(v)
        return tuple(scope)


class Tokens(Scopes):
    def __init__(self, path, lines: Iterable[str], comment: str | None = None):
        self.path = str(path)
        self._lines = enumerate(lines, 1)
        self._comment = comment  # lines starting with this prefix are skipped
        self._words: list[str] = []
        self._pos = 0
        self._lineno = 0  # line the buffered words come from
        self.line: int | None = None  # line of the last token handed out

    def _next_line(self) -> list[str] | None:
        """The words of the next line holding any (comments skipped), None at the end."""
        for self._lineno, text in self._lines:
            if self._comment and text.lstrip().startswith(self._comment):
                continue
            words = text.split()
            if words:
                return words
        return None

    def _fill(self) -> bool:
        """Make sure a token is buffered; False at the end of the input."""
        if self._pos < len(self._words):
            return True
        words = self._next_line()
        if words is None:
            return False
        self._words, self._pos = words, 0
        return True

    def error(self, message: str, line: int | None = None) -> ParseError:
        return ParseError(self.path, self.line if line is None else line, message)

    def expect_end(self, message: str) -> None:
        """Raise `message` at the line of the first token left over, if any."""
        if self._fill():
            raise ParseError(self.path, self._lineno, message)

    def word(self, what: str) -> str:
        if not self._fill():
            raise ParseError(self.path, self._lineno or None, f"unexpected end of file: expected {what}")
        self.line = self._lineno
        self._pos += 1
        return self._words[self._pos - 1]

    def int(self, what: str, low: int | None = None) -> int:
        """One integer; `low` gives the smallest value accepted. Signed integers written together
        ("29-1") are read one by one, as C++'s `>>` reads them (toulbar2 writes such files)."""
        text = self.word(what)
        glued = GLUED.fullmatch(text)
        if glued:
            text = glued.group(1)
            self._pos -= 1
            self._words[self._pos] = glued.group(2)
        try:
            value = int(text)
        except ValueError:
            raise self.error(f"expected {what} (an integer), found {quote(text)}") from None
        if low is not None and value < low:
            raise self.error(f"{what} must be at least {low}, found {value}")
        return value

    def take(self, count: int | None, what: str) -> tuple[list[str], Lines]:
        """The next `count` tokens (all remaining ones if None) and their lines. Past the first line, lines
        are read in batches sized by the last line's tokens and split together (a table of thousands of
        lines: one split, not one per line)."""
        need = INT64_MAX if count is None else count
        lines = Lines()
        words = self._words[self._pos: self._pos + need]
        if words:
            lines.add(0, self._lineno)
            self._pos += len(words)
        while len(words) < need:
            if need - len(words) > 2 * BATCH_MIN and self._words:
                if self._batch(words, lines, need):
                    continue
                break
            chunk = self._next_line()
            if chunk is None:
                break
            lines.add(len(words), self._lineno)
            self._words = chunk
            self._pos = min(len(chunk), need - len(words))
            words += chunk[: self._pos]
        if words:
            self.line = lines.last
        if count is not None and len(words) < count:
            raise ParseError(self.path, self._lineno or None,
                             f"unexpected end of file: expected {count} values ({what}), found {len(words)}")
        return words, lines

    def _batch(self, words: list[str], lines: Lines, need: int) -> bool:
        """Read whole lines at once towards `need` tokens, as many as lines like the last one would hold
        (leaving BATCH_MIN to read line by line) and at most BATCH_CHARS of text; lines longer than that
        one, which would pass the need, are taken one at a time and the lines after the need put back.
        False at the end of the input."""
        want = max((need - len(words) - BATCH_MIN) // max(len(self._words), 1), 1)
        numbered, chars = [], 0
        for item in self._lines:  # at most BATCH_CHARS of text: lines longer than estimated stay few
            numbered.append(item)
            chars += len(item[1])
            if len(numbered) >= want or chars >= BATCH_CHARS:
                break
        if not numbered:
            return False
        if self._comment:
            numbered = [(n, t) for n, t in numbered if not t.lstrip().startswith(self._comment)]
        batch = " ".join(text for _, text in numbered).split()
        if len(words) + len(batch) <= need:
            if batch:
                line, text = next((n, t) for n, t in reversed(numbered) if not t.isspace() and t)
                lines.add_batch(len(words), numbered, line)
                words += batch
                self._words, self._lineno = text.split(), line
                self._pos = len(self._words)
            return True
        for i, (line, text) in enumerate(numbered):
            chunk = text.split()
            if not chunk:
                continue
            lines.add(len(words), line)
            taken = min(len(chunk), need - len(words))
            words += chunk[:taken]
            self._words, self._pos, self._lineno = chunk, taken, line
            if len(words) == need:
                self._lines = itertools.chain(numbered[i + 1:], self._lines)
                break
        return True

    def ints(self, count: int, what: str) -> tuple[np.ndarray, Lines]:
        """`count` int64 values (and their lines), rejecting anything else by line."""
        words, lines = self.take(count, what)
        return parse_ints(self.path, words, lines, what), lines

    def floats(self, count: int, what: str) -> tuple[np.ndarray, Lines]:
        """`count` float64 values (and their lines), rejecting non-numbers by line."""
        words, lines = self.take(count, what)
        try:
            return np.array(words, dtype=np.float64), lines
        except ValueError:
            for i, text in enumerate(words):
                try:
                    float(text)
                except ValueError:
                    raise ParseError(self.path, lines[i], f"expected {what} (a number), found {quote(text)}") from None
            raise


def parse_ints(path, words: list[str], lines: Lines, what: str) -> np.ndarray:
    """Convert tokens to int64, naming the line of the first bad or oversized one."""
    try:
        return np.array(words, dtype=np.int64)
    except (ValueError, OverflowError):
        for i, text in enumerate(words):
            try:
                value = int(text)
            except ValueError:
                raise ParseError(path, lines[i], f"expected {what} (an integer), found {quote(text)}") from None
            if abs(value) > INT64_MAX:
                raise ParseError(path, lines[i], f"{what} {quote(text)} does not fit in 64 bits") from None
        raise


# A file of at most this much text (and at most the reading budget's longest line, whose words would take
# more) may be read as one array of integers.
WHOLE_CHARS = 1 << 23


class Integers(Scopes):
    """A file's first word, then its other tokens, all integers, converted at once by numpy's C reader: the
    token source of `read_tokens`'s fast path. It knows no line; every error it raises is raised again,
    with its line, by the line-by-line `Tokens`."""

    def __init__(self, path, first: str, values: np.ndarray):
        self.path, self._first, self._values = str(path), first, values
        self._pos = -1  # -1: the first word is next

    def error(self, message: str, line: int | None = None) -> ParseError:
        return ParseError(self.path, None, message)

    def _next(self, what: str) -> int:
        if self._pos >= len(self._values):
            raise ParseError(self.path, None, f"unexpected end of file: expected {what}")
        self._pos += 1
        return int(self._values[self._pos - 1])

    def word(self, what: str) -> str:
        if self._pos < 0:
            self._pos = 0
            return self._first
        return str(self._next(what))

    def int(self, what: str, low: int | None = None) -> int:
        if self._pos < 0:  # the first word is read as a word
            raise self.error(f"expected {what}")
        value = self._next(what)
        if low is not None and value < low:
            raise self.error(f"{what} must be at least {low}, found {value}")
        return value

    def ints(self, count: int, what: str) -> tuple[np.ndarray, list]:
        """The next `count` values (a view), and no lines."""
        if self._pos + count > len(self._values):
            raise ParseError(self.path, None, f"unexpected end of file: expected {count} values ({what})")
        self._pos += count
        return self._values[self._pos - count: self._pos], NO_LINES

    def expect_end(self, message: str) -> None:
        if self._pos < len(self._values):
            raise ParseError(self.path, None, message)


class _NoLines:
    def __getitem__(self, index: int) -> None:
        return None


NO_LINES = _NoLines()


def read_tokens(path, chunks: Iterator[list[str]], parse: Callable):
    """parse(tokens) over the file's lines, read a list at a time (source.read_chunks): where its text is at
    most WHOLE_CHARS and every token after the first is an integer (a .wcsp in extension: CELAR6-SUB0's
    294,000 tokens convert in 0.01 s, its whole read takes 0.044-0.071 CPU-s instead of 0.087-0.147 on the
    dev box), from an `Integers`, else from `Tokens`, which also reads again a file whose fast reading
    failed, so that its error names the line."""
    held, chars, cap = [], 0, min(WHOLE_CHARS, line_cap() or WHOLE_CHARS)
    for lines in chunks:
        held += lines
        chars += sum(map(len, lines))
        if chars > cap:
            return parse(Tokens(path, itertools.chain(held, itertools.chain.from_iterable(chunks))))
    text = "".join(held)
    parts = text.split(None, 1)
    values = _integers(parts[1] if len(parts) > 1 else "")
    if parts and values is not None:
        try:
            return parse(Integers(path, parts[0], values))
        except ParseError:
            pass
    return parse(Tokens(path, held))


def _integers(text: str) -> np.ndarray | None:
    """The whitespace-separated integers of `text`, or None where a token is something else or may not fit
    in 64 bits (numpy's reader saturates at int64's limits)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        try:
            values = np.fromstring(text, dtype=np.int64, sep=" ")
        except (ValueError, DeprecationWarning):
            return None
    if values.size and (values.max() == INT64_MAX or values.min() == -INT64_MAX - 1):
        return None
    return values
