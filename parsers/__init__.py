"""Readers and writers: `read(path)` and `write(problem, path)` pick the format from the file name.

.wcsp and .cfn (toulbar2), .uai (UAI MARKOV/BAYES, MPE), .xml (XCSP 2.1 or XCSP3),
.fzn (FlatZinc) and .yaml (pyDCOP), each optionally compressed as .gz, .xz or .bz2;
"-" reads standard input in the format named. Every problem with the input
surfaces as a ParseError naming the file and, when known, the line; a stop
asked while reading (time limit, Ctrl-C, SIGTERM) as gpusolve.stop.Stopped. A reader's
module (and NumPy) is imported when a file of its format is read.
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

from gpusolve.stop import Stop

from .errors import OverBudget, ParseError
from .source import COMPRESSIONS, STDIN, check_stop, reading_limits, split_compression
from gpusolve.limits import DEFAULT, Limits

if TYPE_CHECKING:
    from gpusolve.model.problem import Problem

READERS = {".wcsp": "wcsp", ".uai": "uai", ".xml": "xcsp", ".cfn": "cfn", ".fzn": "fzn", ".yaml": "yamldcop",
           ".yml": "yamldcop"}  # format -> reader module
WRITERS = {".wcsp": "wcsp", ".uai": "uai", ".cfn": "cfn"}  # format -> the module that reads and writes it
FORMATS = tuple(fmt[1:] for fmt in READERS)  # names for `format` (standard input)
SUPPORTED_SUFFIXES = tuple(fmt + comp for fmt in READERS for comp in ("", *COMPRESSIONS))

__all__ = ["COMPRESSIONS", "FORMATS", "OverBudget", "ParseError", "READERS", "SUPPORTED_SUFFIXES",
           "WRITERS", "check_stop", "format_of", "read", "write"]


def read(path: str | Path, evidence: str | Path | None = None, format: str | None = None,
         mem_limit: int | None = None, stop: Stop | None = None,
         limits: Limits = DEFAULT) -> Problem:
    """Read an instance; for .uai, `evidence` defaults to FILE.evid beside it, if present.

    `format` (wcsp, uai, xml, cfn) overrides the suffix; standard input (path "-") needs it.
    Every table's declared size, and every line's length, is checked against `mem_limit`
    (default: available memory) before it is allocated; once `stop` says so (a deadline,
    Ctrl-C, SIGTERM) reading raises gpusolve.stop.Stopped. `limits`: the readers' chunk and listed_min."""
    from gpusolve.host import available_memory

    from .tables import reading_budget  # with NumPy: the command line reads the table above without it
    budget = available_memory() if mem_limit is None else mem_limit
    with reading_budget(budget) as allowance, reading_limits(budget, stop, limits):
        try:
            return _read(path, evidence, format)
        except ParseError as e:
            if allowance.refused:
                raise OverBudget(e.path, e.line, e.message) from None
            raise


def _read(path, evidence, format) -> Problem:
    if str(path) == STDIN and format is None:
        raise ParseError(path, None, f"standard input needs a format (--format {'|'.join(FORMATS)})")
    path = Path(path) if str(path) != STDIN else STDIN
    base, _ = split_compression(path)
    fmt = format_of(path, format)
    if fmt not in READERS:
        raise ParseError(path, None, f"unsupported file type {fmt or '(no extension)'}: "
                                     f"expected one of {', '.join(SUPPORTED_SUFFIXES)}")
    if fmt != ".uai":
        if evidence is not None:
            raise ParseError(evidence, None, f"evidence applies to .uai files only, not {path.name}")
        return _reader(fmt)(path)
    if evidence is None and path != STDIN:
        beside = path.with_name(base + ".evid")
        evidence = beside if beside.is_file() else None
    return _reader(".uai")(path, evidence)


def write(problem: Problem, path: str | Path) -> None:
    """Write `problem` in the format its suffix names (.wcsp, .uai, .cfn; .gz/.xz/.bz2 compress)."""
    fmt = format_of(path)
    if fmt not in WRITERS:
        raise ValueError(f"cannot write {fmt or 'a file without extension'}: choose .wcsp, .uai or .cfn")
    module = importlib.import_module(f".{WRITERS[fmt]}", __name__)
    getattr(module, f"write_{WRITERS[fmt]}")(problem, path)


def format_of(path: str | Path, format: str | None = None) -> str:
    """The format a file is read as: `format` (wcsp, uai, xml, cfn) if given, else its suffix
    before any compression suffix (".wcsp", ...)."""
    if format:
        return f".{format.lower().lstrip('.')}"
    return Path(split_compression(path)[0]).suffix.lower()


def _reader(fmt: str):
    return importlib.import_module(f".{READERS[fmt]}", __name__).read
