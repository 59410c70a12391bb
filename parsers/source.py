"""Opening instance files, transparently decompressed, with I/O failures turned into ParseError.

Readers iterate lines lazily so large files never have to sit in memory as
one string; a corrupt or truncated archive is only noticed while reading,
so the error conversion wraps the iteration, not just the open.

`reading_limits` (set by `parsers.read`) bounds what reading may take. Files
are read CHUNK bytes at a time and cut into lines here, not by io's line
iterators, which hold a line whole however long: a line running past the
budget's share (a decompression bomb of one endless line) is refused after
that many bytes. Before each chunk the solver's stop (deadline, Ctrl-C,
SIGTERM) is checked; readers that loop over something else than lines call
`check_stop` themselves.
"""
from __future__ import annotations

import bz2
import functools
import gzip
import lzma
import sys
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

from gpusolve import limits as tunables
from gpusolve.stop import Stop

from .errors import OverBudget, ParseError

COMPRESSIONS = {".gz": gzip.open, ".xz": lzma.open, ".bz2": bz2.open}
STDIN = "-"  # the path that reads standard input


def split_compression(path: str | Path) -> tuple[str, str]:
    """`net.uai.gz` -> (`net.uai`, `.gz`); the suffix is "" for a plain file."""
    name = Path(path).name
    for suffix in COMPRESSIONS:
        if name.lower().endswith(suffix):
            return name[: -len(suffix)], suffix
    return name, ""


# The words of a line, as Python strings in a list, take up to this many times the line's length
# (a one-character word and its blank: 2 bytes of text, a 50-byte str and an 8-byte pointer).
LINE_SHARE = 32
MIN_LINE_CAP = 1 << 20  # however small the budget, lines of this length are read
CHUNK = 1 << 16  # bytes taken from the (decompressed) file at a time


@dataclass(frozen=True)
class Limits:
    line_cap: int | None = None  # longest line read, in bytes
    stop: Stop | None = None  # the solver's: reading ends once it says so
    sizes: tunables.Limits = tunables.DEFAULT  # the readers' chunks and thresholds (chunk, listed_min)


_limits: ContextVar[Limits] = ContextVar("reading_limits", default=Limits())


@contextmanager
def reading_limits(budget: int | None = None, stop: Stop | None = None,
                   sizes: tunables.Limits = tunables.DEFAULT):
    """Within this block lines longer than `budget` / LINE_SHARE are refused (OverBudget),
    `check_stop` raises gpusolve.stop.Stopped once `stop` says so, and readers size their work by `sizes`."""
    cap = None if budget is None else max(int(budget) // LINE_SHARE, MIN_LINE_CAP)
    token = _limits.set(Limits(cap, stop, sizes))
    try:
        yield
    finally:
        _limits.reset(token)


def line_cap() -> int | None:
    """The longest line the reader in progress may hold (None: no budget)."""
    return _limits.get().line_cap


def reading_sizes() -> tunables.Limits:
    """The limits the reader in progress was given (parsers.read's `limits`)."""
    return _limits.get().sizes


def check_stop() -> None:
    """Raise Stopped if the solver asked reading to stop; cheap enough to call every few thousand steps."""
    stop = _limits.get().stop
    if stop is not None:
        stop.check()


def read_lines(path: str | Path, binary: bool = False) -> Iterator:
    """Yield the file's lines (str, or bytes when `binary`), decompressing by suffix, within the
    reading limits. As with open(), a text line ends in LF whatever the file's line ends (CR LF, CR)."""
    for lines in read_chunks(path, binary):
        yield from lines


def read_chunks(path: str | Path, binary: bool = False) -> Iterator[list]:
    """read_lines' lines as lists, those of each CHUNK bytes read: for a reader that holds them all, one
    Python step a list rather than a line (bench/search.py's rlfap-80-24-s5-x6, 295,000 lines: its whole
    read, the least of 7, 0.066 -> 0.058 s on the dev box)."""
    _, suffix = split_compression(path)
    opener = COMPRESSIONS.get(suffix, open)
    try:
        with _stdin() if str(path) == STDIN else opener(path, "rb") as raw:
            yield from _chunks(path, raw, binary)
    except FileNotFoundError:
        raise ParseError(path, None, "file not found") from None
    except IsADirectoryError:
        raise ParseError(path, None, "is a directory, not a file") from None
    except PermissionError:
        raise ParseError(path, None, "permission denied") from None
    except (OSError, EOFError, zlib.error, lzma.LZMAError) as e:
        what = f"corrupt or truncated {suffix[1:]} archive" if suffix else "cannot read file"
        raise ParseError(path, None, f"{what}: {e}") from None


def _chunks(path, raw, binary: bool) -> Iterator[list]:
    """The lines of `raw`, as lists of those complete in each CHUNK bytes read. The stop is checked
    before each chunk but the first (a small file is read whole whatever the limits); a line is
    refused once it runs past the cap, before it is held whole."""
    cap = _limits.get().line_cap
    pending: list[bytes] = []  # the pieces of the line not ended yet
    run, number = 0, 1  # their length, and the number of their line
    for i, chunk in enumerate(iter(functools.partial(raw.read1, CHUNK), b"")):
        if i:
            check_stop()
        # the last line end in the chunk; a CR at its very end may be half of a CR LF
        end = max(chunk.rfind(b"\n"), chunk.rfind(b"\r", 0, len(chunk) - 1)) + 1
        if end:
            pending.append(chunk[:end])
            lines = _split(b"".join(pending), binary)
            pending, run, number = [chunk[end:]], len(chunk) - end, number + len(lines)
            yield lines
        else:
            pending.append(chunk)
            run += len(chunk)
        if cap is not None and run > cap:
            raise OverBudget(path, number, f"line longer than {cap:,} bytes, the memory budget's share for one "
                                           f"line (1/{LINE_SHARE}; see --mem-limit)")
    if run:
        yield _split(b"".join(pending), binary)


# Where str.splitlines breaks a line and a file does not (bytes.splitlines breaks at LF, CR LF, CR only).
_NOT_LINE_ENDS = ("\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")


def _split(block: bytes, binary: bool) -> list:
    """The lines of `block`, each with its end; text decoded as UTF-8 (invalid bytes replaced), its
    line ends read as LF."""
    if binary:
        return block.splitlines(keepends=True)
    text = block.decode("utf-8", errors="replace")
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if any(c in text for c in _NOT_LINE_ENDS):  # rare: split at LF only
        *lines, last = text.split("\n")
        return [line + "\n" for line in lines] + ([last] if last else [])
    return text.splitlines(keepends=True)


def _stdin():
    """Standard input's bytes, left open when the reader is done (the caller owns the stream)."""
    return open(sys.stdin.fileno(), "rb", closefd=False)


def open_text(path: str | Path, mode: str = "wt"):
    """A text file for writing, compressed as its suffix (.gz, .xz, .bz2) says."""
    _, suffix = split_compression(path)
    if suffix:
        return COMPRESSIONS[suffix](path, mode, encoding="utf-8")
    return open(path, mode.replace("t", ""), encoding="utf-8")
