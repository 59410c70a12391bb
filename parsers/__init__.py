"""Input readers: `read(path)` picks the format from the file name.

.wcsp (toulbar2), .uai (UAI MARKOV/BAYES, MPE), .xml (XCSP 2.1) and .yaml
(pyDCOP), each optionally compressed as .gz, .xz or .bz2. Every problem with
the input surfaces as a ParseError naming the file and, when known, the
line. A reader's module is imported when a file of its format is read.
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import ParseError
from .source import COMPRESSIONS, split_compression

if TYPE_CHECKING:
    from gpusolve.model import Problem

READERS = {".wcsp": "wcsp", ".uai": "uai", ".xml": "xcsp", ".yaml": "yamldcop", ".yml": "yamldcop"}  # format -> module of its reader
SUPPORTED_SUFFIXES = tuple(fmt + comp for fmt in READERS for comp in ("", *COMPRESSIONS))

__all__ = ["ParseError", "SUPPORTED_SUFFIXES", "read"]


def read(path: str | Path, evidence: str | Path | None = None) -> Problem:
    """Read an instance; for .uai, `evidence` defaults to FILE.evid beside it, if present."""
    path = Path(path)
    base, _ = split_compression(path)
    fmt = Path(base).suffix.lower()
    if fmt not in READERS:
        raise ParseError(path, None, f"unsupported file type {fmt or '(no extension)'}: "
                                     f"expected one of {', '.join(SUPPORTED_SUFFIXES)}")
    if fmt != ".uai":
        if evidence is not None:
            raise ParseError(evidence, None, f"evidence applies to .uai files only, not {path.name}")
        return _reader(fmt)(path)
    if evidence is None:
        beside = path.with_name(base + ".evid")
        evidence = beside if beside.is_file() else None
    return _reader(".uai")(path, evidence)


def _reader(fmt: str):
    return importlib.import_module(f".{READERS[fmt]}", __name__).read
