"""Writing problems (.wcsp, .uai, .cfn, compressed by suffix) and UAI result files."""
from __future__ import annotations

import itertools
import json
from decimal import Decimal
from pathlib import Path

import numpy as np

from gpusolve.model.problem import Problem

from .source import open_text, split_compression


def write(problem: Problem, path: str | Path) -> None:
    """Write `problem` in the format its suffix names (.wcsp, .uai, .cfn; .gz/.xz/.bz2 compress)."""
    fmt = Path(split_compression(path)[0]).suffix.lower()
    writers = {".wcsp": write_wcsp, ".uai": write_uai, ".cfn": write_cfn}
    if fmt not in writers:
        raise ValueError(f"cannot write {fmt or 'a file without extension'}: choose .wcsp, .uai or .cfn")
    writers[fmt](problem, path)


def _integer_minimisation(problem: Problem, fmt: str) -> None:
    if not problem.integer or problem.sense != 1 or problem.precision:
        raise ValueError(f"{fmt} holds integer costs to minimise: write this problem as .cfn or .uai")


def write_wcsp(problem: Problem, path: str | Path) -> None:
    """toulbar2 .wcsp: every tuple listed (default cost 0), forbidden entries as top.

    Written for integer problems whose top is the file's upper bound; a negative
    offset (from negative costs) is spread as a constant the format allows: none
    below zero, so it raises. AllDifferents left out of the tables become
    toulbar2 global cost functions (`salldiff`, cost top when hard; `alldiff`
    for a hard one with exempt values); ValueError for one toulbar2 cannot
    express (values other than the domain indices).
    """
    _integer_minimisation(problem, ".wcsp")
    if problem.offset < 0:
        raise ValueError(".wcsp has no negative costs: write this problem as .cfn")
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
    with open_text(path) as out:
        out.write("\n".join(lines) + "\n")


def write_uai(problem: Problem, path: str | Path) -> None:
    """UAI MARKOV network with p = 10^-cost per entry (0 where forbidden): its MPE is the problem's
    optimum, reported as a log10 probability (for an integer problem, minus the cost)."""
    lines = ["MARKOV", str(len(problem.variables)), " ".join(map(str, problem.domains)),
             str(len(problem.functions) + 1)]
    lines += [f"{f.arity} {' '.join(map(str, f.scope))}".strip() for f in problem.functions]
    lines.append("0")  # the constant offset as a 0-ary function
    for f in problem.functions:
        table = np.asarray(f.table, dtype=np.float64)
        p = np.where(table >= float(problem.top), 0.0, 10.0 ** -table)
        lines.append(f"{table.size}\n" + " ".join(repr(float(x)) for x in p.reshape(-1)))
    lines.append(f"1\n{10.0 ** -float(problem.offset)!r}")
    with open_text(path) as out:
        out.write("\n".join(lines) + "\n")


def write_cfn(problem: Problem, path: str | Path) -> None:
    """toulbar2's CFN: named variables and values (when the model has them), dense cost lists,
    `mustbe` "<top" (or ">bound" when maximising), the offset as a 0-ary function."""
    if not problem.integer:
        raise ValueError(".cfn is written for integer costs: write this problem as .uai")
    scale = Decimal(10) ** -problem.precision

    def cost(internal: int) -> str:
        """An internal cost as the file states it: utility when maximising, with the file's decimals."""
        return str((problem.sense * Decimal(int(internal)) * scale).quantize(scale))

    bound = cost(int(problem.top) + int(problem.offset))
    names: list[str] = []
    for i, v in enumerate(problem.variables):  # CFN names scopes by variable name: unique and plain
        names.append(v.name if _plain(v.name) and v.name not in names else f"x{i}_")
    variables = {n: list(v.labels) if v.labels and all(_plain(x) for x in v.labels) else v.domain
                 for n, v in zip(names, problem.variables)}
    functions = {}
    for k, f in enumerate(problem.functions):
        top = int(problem.top)
        functions[f"f{k}"] = {"scope": [names[v] for v in f.scope],
                              "costs": [_number(cost(min(int(c), top))) for c in f.table.reshape(-1)]}
    if problem.offset:
        functions["offset"] = {"scope": [], "costs": [_number(cost(int(problem.offset)))]}
    doc = {"problem": {"name": problem.name if _plain(problem.name) else "problem",
                       "mustbe": ("<" if problem.sense > 0 else ">") + bound},
           "variables": variables, "functions": functions}
    with open_text(path) as out:
        json.dump(doc, out, separators=(",", ":"))
        out.write("\n")


def _plain(name: str) -> bool:
    """Whether CFN can carry `name` as a string: not number-like, no delimiters or blanks."""
    return bool(name) and name[0] not in "0123456789-.+" and not any(c in name for c in '/#[]{}" \t\n,:')


def _number(text: str):
    """A CFN cost as a JSON number (int when it has no decimals)."""
    return int(text) if "." not in text else float(text)


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
    """UAI competition result file (MPE: values, PR: log10 Z, MAR: one distribution per variable).

    PR with no value writes -inf, log10 of Z = 0 (as C's printf and Python's float() spell it),
    also a true lower bound when none is known. MPE with no assignment and MAR with no marginals
    (every assignment of probability 0) write the task line alone: the format has no solution
    line for them, and its evaluation takes a missing solution as none."""
    if task == "MPE":
        body = None if assignment is None else f"{len(assignment)} " + " ".join(map(str, assignment))
    elif task == "PR":
        body = "-inf" if log10_value is None else repr(float(log10_value))
    elif task == "MAR":
        body = None if marginals is None else f"{len(marginals)} " + " ".join(
            f"{len(m)} " + " ".join(repr(float(p)) for p in m) for m in marginals)
    else:
        raise ValueError(f"no UAI result format for task {task}")
    Path(path).write_text(f"{task}\n" + ("" if body is None else f"{body}\n"))
