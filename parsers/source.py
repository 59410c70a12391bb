"""Opening instance files, transparently decompressed, with I/O failures turned into ParseError.

Readers iterate lines lazily so large files never have to sit in memory as
one string; a corrupt or truncated archive is only noticed while reading,
so the error conversion wraps the iteration, not just the open.
"""
from __future__ import annotations

import bz2
import gzip
import io
import lzma
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path

from .errors import ParseError

COMPRESSIONS = {".gz": gzip.open, ".xz": lzma.open, ".bz2": bz2.open}
STDIN = "-"  # the path that reads standard input


def split_compression(path: str | Path) -> tuple[str, str]:
    """`net.uai.gz` -> (`net.uai`, `.gz`); the suffix is "" for a plain file."""
    name = Path(path).name
    for suffix in COMPRESSIONS:
        if name.lower().endswith(suffix):
            return name[: -len(suffix)], suffix
    return name, ""


def read_lines(path: str | Path, binary: bool = False) -> Iterator:
    """Yield the file's lines (str, or bytes when `binary`), decompressing by suffix."""
    _, suffix = split_compression(path)
    opener = COMPRESSIONS.get(suffix, open)
    try:
        with _stdin() if str(path) == STDIN else opener(path, "rb") as raw:
            stream = raw if binary else io.TextIOWrapper(raw, encoding="utf-8", errors="replace")
            yield from stream
    except FileNotFoundError:
        raise ParseError(path, None, "file not found") from None
    except IsADirectoryError:
        raise ParseError(path, None, "is a directory, not a file") from None
    except PermissionError:
        raise ParseError(path, None, "permission denied") from None
    except (OSError, EOFError, zlib.error, lzma.LZMAError) as e:
        what = f"corrupt or truncated {suffix[1:]} archive" if suffix else "cannot read file"
        raise ParseError(path, None, f"{what}: {e}") from None


def _stdin():
    """Standard input's bytes, left open when the reader is done (the caller owns the stream)."""
    return open(sys.stdin.fileno(), "rb", closefd=False)


def open_text(path: str | Path, mode: str = "wt"):
    """A text file for writing, compressed as its suffix (.gz, .xz, .bz2) says."""
    _, suffix = split_compression(path)
    if suffix:
        return COMPRESSIONS[suffix](path, mode, encoding="utf-8")
    return open(path, mode.replace("t", ""), encoding="utf-8")
