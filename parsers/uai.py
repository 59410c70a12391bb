"""UAI (MARKOV / BAYES) reader and evidence files, for the MPE task; the MARKOV writer (`write_uai`)
and the competition's result files (`write_uai_result`).

Format as in the UAI 2014/2016 inference competitions: the network type, n,
n domain sizes, the number of functions, one scope per function, then per
function its entry count and entries (which may span lines), the last scope
variable changing fastest (C order, like our tables). Lines starting with
`c` are comments (UAI 2016). MPE becomes minimisation of -log10 p, so
`sense=-1` reports log10 probabilities; p = 0 is forbidden (+inf). A model
whose every assignment has probability 0 (Z = 0) is therefore infeasible.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from gpusolve.model.problem import CostFunction, Problem, Variable, condition

from .errors import quote
from .source import open_text, read_lines, split_compression
from .tables import too_large
from .tokens import Tokens, parse_ints

NETWORK_TYPES = ("MARKOV", "BAYES")


def read(path: str | Path, evidence: str | Path | None = None) -> Problem:
    """The network in `path`, conditioned on the evidence file if one is given."""
    t = Tokens(path, read_lines(path), comment="c")
    kind = t.word("network type")
    if kind.upper() not in NETWORK_TYPES:
        raise t.error(f"unknown network type {quote(kind)} (expected MARKOV or BAYES)")
    n = t.int("number of variables", low=0)
    domains = [t.int(f"domain size of variable {i}", low=1) for i in range(n)]
    m = t.int("number of functions", low=0)
    scopes = [t.scope(t.int("scope size", low=0), n) for _ in range(m)]

    functions = []
    offset = 0.0
    for scope in scopes:
        shape = tuple(domains[v] for v in scope)
        size = math.prod(shape)
        count = t.int("number of table entries")
        if count != size:
            raise t.error(f"table has {count} entries, expected {size} for scope {list(scope)}")
        message = too_large(shape)
        if message:
            raise t.error(message)
        p, lines = t.floats(count, "probability")
        bad = np.flatnonzero(~(p >= 0) | ~np.isfinite(p))
        if bad.size:
            raise t.error(f"probability must be finite and non-negative, found {p[bad[0]]}", lines[bad[0]])
        with np.errstate(divide="ignore"):
            cost = -np.log10(p) + 0.0  # + 0.0 turns -0.0 into 0.0
        if not scope and cost[0] < math.inf:
            offset += float(cost[0])
        else:  # a constant of probability 0 too: as a 0-d table it forbids every assignment, where
            functions.append(CostFunction(scope, cost.reshape(shape)))  # the offset (outside top) cannot
    t.expect_end(f"unexpected data after the last table (the preamble announces {m} functions)")

    name = split_compression(path)[0].removesuffix(".uai")
    variables = [Variable(f"x{i}", d) for i, d in enumerate(domains)]
    problem = Problem(name, variables, functions, integer=False, top=math.inf, offset=offset,
                      sense=-1, task="MPE")
    if evidence is not None:
        problem = condition(problem, read_evidence(evidence, problem))
    return problem


def read_evidence(path: str | Path, problem: Problem) -> dict[int, int]:
    """The first evidence sample of an evidence file, as {variable: value}.

    Two layouts exist: one sample `n v1 x1 ... vn xn` (UAI 2008/2014) and
    several samples `s  n1 v x ...  n2 v x ...` (UAI 2010, PIC 2011). The
    token count tells them apart; when both fit, the single-sample reading
    is taken, as it is the current competition format.
    """
    t = Tokens(path, read_lines(path))
    words, lines = t.take(None, "evidence")
    if not words:  # an empty file observes nothing, like "0"
        return {}
    values = [int(v) for v in parse_ints(path, words, lines, "evidence entry")]
    if values[0] < 0:
        raise t.error(f"negative count {values[0]}", lines[0])
    if len(values) == 1 + 2 * values[0]:
        start, count = 1, values[0]
    elif _is_multi_sample(values):
        start, count = 2, values[1]
    else:
        raise t.error(f"malformed or truncated evidence: {len(values)} entries fit neither one sample of "
                      f"{values[0]} observations nor {values[0]} samples", lines[-1])
    evidence: dict[int, int] = {}
    for k in range(start, start + 2 * count, 2):
        var, value = values[k], values[k + 1]
        if not 0 <= var < len(problem.variables):
            raise t.error(f"evidence variable {var} out of range (n={len(problem.variables)})", lines[k])
        size = problem.variables[var].domain
        if not 0 <= value < size:
            raise t.error(f"evidence value {value} out of domain of variable {var} (size {size})",
                          lines[k + 1])
        if evidence.get(var, value) != value:
            raise t.error(f"variable {var} observed twice with different values", lines[k])
        evidence[var] = value
    return evidence


def _is_multi_sample(values: list[int]) -> bool:
    """Whether `values` is a sample count followed by exactly that many `n v x ...` samples."""
    pos = 1
    for _ in range(values[0]):
        if pos >= len(values) or values[pos] < 0:
            return False
        pos += 1 + 2 * values[pos]
    return pos == len(values)


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
