"""Writing problems (.wcsp, what `gpusolve generate` produces) and UAI result files."""
from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np

from gpusolve.model import Problem


def write_wcsp(problem: Problem, path: str | Path) -> None:
    """toulbar2 .wcsp: every tuple listed (default cost 0), forbidden entries as top.

    Written for integer problems whose top is the file's upper bound. AllDifferents left out of the
    tables become toulbar2 global cost functions (`salldiff`, cost top when hard;
    `alldiff` for a hard one with exempt values);
    ValueError for one toulbar2 cannot express (values other than the domain indices).
    """
    top = int(problem.top) + int(problem.offset)
    globals_ = [_global(g, problem.top, top) for g in problem.globals if not g.tabled]
    lines = [f"{problem.name} {len(problem.variables)} {max(problem.domains, default=0)} "
             f"{len(problem.functions) + len(globals_) + (1 if problem.offset else 0)} {top}",
             " ".join(str(d) for d in problem.domains)] + globals_
    for f in problem.functions:
        lines.append(f"{f.arity} {' '.join(map(str, f.scope))} 0 {f.table.size}")
        for values in itertools.product(*(range(s) for s in f.table.shape)):
            cost = int(f.table[values])
            lines.append(" ".join(map(str, values)) + f" {top if cost >= problem.top else cost}")
    if problem.offset:
        lines.append(f"0 {int(problem.offset)} 0")
    Path(path).write_text("\n".join(lines) + "\n")


def _global(g, internal_top, top: int) -> str:
    if any(not np.array_equal(vals, np.arange(len(vals))) for vals in g.values):
        raise ValueError("an AllDifferent over values other than the domain indices has no .wcsp form")
    head = f"{len(g.scope)} {' '.join(map(str, g.scope))} -1"
    if g.exempt:
        if g.cost < internal_top:
            raise ValueError("a soft AllDifferent with exempt values has no .wcsp form")
        return f"{head} alldiff {len(g.exempt)}" + "".join(f" {v}" for v in sorted(g.exempt))
    return f"{head} salldiff {g.semantics} {top if g.cost >= internal_top else g.cost}"


def write_uai_result(path: str | Path, task: str, log10_value, assignment=None, marginals=None) -> None:
    """UAI competition result file (MPE: values, PR: log10 Z, MAR: one distribution per variable)."""
    if task == "MPE":
        body = "" if assignment is None else f"{len(assignment)} " + " ".join(map(str, assignment))
    elif task == "PR":
        body = "-inf" if log10_value is None else repr(float(log10_value))
    elif task == "MAR":
        body = f"{len(marginals)} " + " ".join(
            f"{len(m)} " + " ".join(repr(float(p)) for p in m) for m in marginals)
    else:
        raise ValueError(f"no UAI result format for task {task}")
    Path(path).write_text(f"{task}\n{body}\n")
