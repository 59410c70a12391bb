"""Writing problems (.wcsp, what `gpusolve generate` produces) and UAI result files."""
from __future__ import annotations

import itertools
from pathlib import Path

from gpusolve.model import Problem


def write_wcsp(problem: Problem, path: str | Path) -> None:
    """toulbar2 .wcsp: every tuple listed (default cost 0), forbidden entries as top.

    Written for integer problems whose top is the file's upper bound.
    """
    top = int(problem.top) + int(problem.offset)
    lines = [f"{problem.name} {len(problem.variables)} {max(problem.domains, default=0)} "
             f"{len(problem.functions) + (1 if problem.offset else 0)} {top}",
             " ".join(str(d) for d in problem.domains)]
    for f in problem.functions:
        lines.append(f"{f.arity} {' '.join(map(str, f.scope))} 0 {f.table.size}")
        for values in itertools.product(*(range(s) for s in f.table.shape)):
            cost = int(f.table[values])
            lines.append(" ".join(map(str, values)) + f" {top if cost >= problem.top else cost}")
    if problem.offset:
        lines.append(f"0 {int(problem.offset)} 0")
    Path(path).write_text("\n".join(lines) + "\n")


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
