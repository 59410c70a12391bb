"""The problem model: variables, cost functions as dense tables, objective.

Every reader produces a `Problem` whose internal objective is *minimisation* of
a sum of cost tables. Integer problems (WCSP, XCSP) keep int64 costs in
``[0, top]`` where ``top`` means forbidden and additions saturate at ``top``;
probabilistic problems (UAI MPE) use float64 costs ``-log10 p`` with ``inf`` for
forbidden. ``sense`` maps an internal cost back to the file's own objective.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# Largest top we accept: the sum of two costs <= MAX_TOP never overflows int64.
MAX_TOP = (1 << 62) - 1


class ModelError(ValueError):
    """A problem that cannot be represented (for instance costs beyond int64)."""


@dataclass(frozen=True)
class Variable:
    name: str
    domain: int
    labels: tuple[str, ...] | None = None  # value names, when the file gives them
    agent: str | None = None  # DCOP files: the agent holding the variable (None: an agent of its own)

    def label(self, index: int) -> str:
        return self.labels[index] if self.labels else str(index)


@dataclass
class CostFunction:
    """A cost table over `scope`, lexicographic order (last scope variable fastest)."""

    scope: tuple[int, ...]
    table: np.ndarray

    @property
    def arity(self) -> int:
        return len(self.scope)


@dataclass
class Problem:
    name: str
    variables: list[Variable]
    functions: list[CostFunction]
    integer: bool = True  # int64 costs saturating at `top`; else float64 with inf
    top: int | float = MAX_TOP  # the internal cost meaning "forbidden"
    offset: int | float = 0  # constant added to every assignment's cost
    sense: int = 1  # file objective = sense * internal cost (-1: maximise / log10 p)
    task: str = "WCSP"  # WCSP | MPE
    evidence: dict[int, int] = field(default_factory=dict)  # variable -> observed value

    @property
    def dtype(self):
        return np.int64 if self.integer else np.float64

    @property
    def domains(self) -> list[int]:
        return [v.domain for v in self.variables]

    def is_forbidden(self, cost) -> bool:
        return cost >= self.top

    def add(self, a, b):
        """Sum of two costs: saturating at top for integer costs (inf absorbs for floats)."""
        return min(a + b, self.top) if self.integer else a + b

    def total(self, costs):
        """Saturating sum of costs."""
        acc = self.dtype(0)
        for c in costs:
            acc = self.add(acc, c)
        return acc

    def to_file_value(self, cost):
        """Internal cost (sum of tables) -> objective as the file states it, None if forbidden."""
        if cost is None or self.is_forbidden(cost):
            return None
        if self.integer:
            return self.sense * (int(cost) + int(self.offset))
        return self.sense * (float(cost) + float(self.offset))

    def evaluate(self, assignment) -> int | float:
        """Internal cost (offset excluded) of a complete assignment, saturating at top."""
        total = 0
        for var, value in self.evidence.items():
            if int(assignment[var]) != value:
                return self.top
        for f in self.functions:
            total = total + f.table[tuple(int(assignment[v]) for v in f.scope)]
            if total >= self.top:
                return self.top
        return total


# Readers mark forbidden integer entries with this before `finalize_integer`.
FORBIDDEN = np.iinfo(np.int64).max


def finalize_integer(problem: Problem, file_top: int | None) -> Problem:
    """Shift negative costs into the offset and choose an exact int64 `top`.

    Tables hold finite costs and FORBIDDEN. The internal top bounds the *sum of
    tables* (the offset stays outside): the file's top minus the offset, or,
    when smaller, one more than the largest finite sum any assignment can
    reach. Sums of two costs <= MAX_TOP never overflow int64.
    """
    worst = 0
    for f in problem.functions:
        t = f.table
        finite = t[t != FORBIDDEN]
        low = int(finite.min()) if finite.size else 0
        if low < 0:
            t = np.where(t == FORBIDDEN, FORBIDDEN, t - low)
            problem.offset += low
            finite = finite - low
        f.table = t
        worst += int(finite.max()) if finite.size else 0
    top = worst + 1
    if file_top is not None:
        top = min(top, max(int(file_top) - int(problem.offset), 0))
    if top > MAX_TOP:
        raise ModelError(f"costs too large: the sum of finite costs ({worst}) exceeds 2^62")
    for f in problem.functions:
        f.table = np.minimum(f.table, top).astype(np.int64, copy=False)
    problem.top = top
    return problem


def condition(problem: Problem, evidence: dict[int, int]) -> Problem:
    """Fix observed variables: slice them out of every table (they leave the graph)."""
    if not evidence:
        return problem
    functions = []
    for f in problem.functions:
        index = tuple(evidence.get(v, slice(None)) for v in f.scope)
        scope = tuple(v for v in f.scope if v not in evidence)
        functions.append(CostFunction(scope, np.array(f.table[index])))  # a copy; 0-d when all observed
    merged = dict(problem.evidence)
    merged.update(evidence)
    return Problem(problem.name, problem.variables, functions, problem.integer, problem.top,
                   problem.offset, problem.sense, problem.task, merged)
