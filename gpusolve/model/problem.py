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


class Infeasible(Exception):
    """No assignment satisfies the hard constraints (a domain wiped out, an AllDifferent no matching covers)."""


@dataclass(frozen=True)
class Variable:
    name: str
    domain: int
    labels: tuple[str, ...] | None = None  # value names, when the file gives them
    agent: str | None = None  # DCOP files: the agent holding the variable (None: an agent of its own)
    auxiliary: bool = False  # a state variable of a global's decomposition (parsers/decompose.py): never reported

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

    @property
    def entries(self) -> int:
        """Entries of the dense table."""
        return self.table.size

    def cost(self, values) -> int | float:
        """The cost of one tuple (a value index per scope variable)."""
        return self.table[tuple(int(a) for a in values)]

    def used_costs(self) -> np.ndarray:
        """The costs the function takes (with repeats)."""
        return self.table.reshape(-1)

    def least(self) -> int | float:
        """The least cost of a (non-empty) table."""
        return self.used_costs().min()

    def map_costs(self, fn) -> None:
        """Replace every cost c by fn(c), fn taking and giving arrays."""
        self.table = fn(self.table)

    def restrict(self, kept: list[np.ndarray]) -> "CostFunction":
        """The function over the domain indices `kept[k]` of each scope variable (renumbered)."""
        return CostFunction(self.scope, np.ascontiguousarray(self.table[np.ix_(*kept)])) if self.scope else self


class TupleFunction(CostFunction):
    """A cost function kept as the tuples it lists and one default cost for the rest, as wcsp and
    XCSP files state them (CUBE's incomplete tables): Langford's gap constraint over 2n positions
    allows 2n - d - 1 of its (2n)^2 pairs, and at n = 3000 the dense tables would take 864 GB.
    Arc consistency, MAC and evaluation read the tuples; elimination and AND/OR search read
    `table`, the dense table made on demand (for the problems whose buckets fit anyway).
    `tuples` holds distinct rows."""

    def __init__(self, scope, dims, tuples, costs, default):
        self.scope, self.dims = tuple(scope), tuple(int(d) for d in dims)
        self.tuples = np.asarray(tuples, dtype=np.int64).reshape(-1, len(self.scope))
        self.costs = np.asarray(costs).reshape(-1)
        self.default = default
        self._sorted = None  # (flat index of each tuple, sorted; the tuples' order), made on first lookup

    def __repr__(self) -> str:
        return f"TupleFunction(scope={self.scope}, dims={self.dims}, {len(self.costs)} tuples, default={self.default})"

    @property
    def table(self) -> np.ndarray:
        table = np.full(self.dims, self.default, dtype=np.result_type(self.costs.dtype, np.int64))
        table[tuple(self.tuples.T)] = self.costs
        return table

    @property
    def entries(self) -> int:
        return int(np.prod(self.dims, dtype=object))

    def cost(self, values) -> int | float:
        """A binary search over the tuples' flat indices (local search evaluates many assignments)."""
        if self.entries >= 1 << 63:  # no flat index: a scan
            hit = np.flatnonzero((self.tuples == np.asarray(values, dtype=np.int64)).all(axis=1))
            return self.costs[hit[0]] if hit.size else self.default
        if self._sorted is None:
            flat = np.ravel_multi_index(tuple(self.tuples.T), self.dims)
            order = np.argsort(flat)
            self._sorted = flat[order], order
        flat, order = self._sorted
        key = np.ravel_multi_index(tuple(int(a) for a in values), self.dims)
        at = int(np.searchsorted(flat, key))
        return self.costs[order[at]] if at < len(flat) and flat[at] == key else self.default

    def used_costs(self) -> np.ndarray:
        """The listed costs, and the default unless every tuple is listed."""
        return self.costs if len(self.costs) >= self.entries else np.append(self.costs, self.default)

    def map_costs(self, fn) -> None:
        self.costs, self.default = fn(self.costs), fn(np.asarray(self.default)).item()

    def restrict(self, kept: list[np.ndarray]) -> "TupleFunction":
        keep = np.ones(len(self.tuples), dtype=bool)
        new = []
        for k, values in enumerate(kept):
            index = np.full(self.dims[k], -1, dtype=np.int64)
            index[values] = np.arange(len(values))
            new.append(index[self.tuples[:, k]])
            keep &= new[-1] >= 0
        tuples = np.stack(new, axis=1)[keep] if new else self.tuples
        return TupleFunction(self.scope, [len(v) for v in kept], tuples, self.costs[keep], self.default)


@dataclass(eq=False)  # arrays inside: compared by identity
class AllDifferent:
    """A global AllDifferent over `scope`, kept whole: its binary decomposition is made only where it fits.

    `values[k]` maps the domain indices of scope variable k to the values compared (N-queens'
    diagonals are AllDifferents over x_i + i); `exempt` values may be shared (XCSP3 `except`).
    `cost` per unit of violation, >= top (the model's) for a hard constraint. Violation, as toulbar2
    defines it: `var` counts the variables to change (variables on a non-exempt value minus the
    distinct such values), `dec` the pairs of variables that share a non-exempt value.
    """

    scope: tuple[int, ...]
    values: tuple[np.ndarray, ...]
    cost: int
    semantics: str = "var"  # var | dec
    exempt: frozenset = frozenset()
    tabled: bool = False  # its decomposition is among the problem's tables (globals.decompose)

    def violation(self, taken) -> int:
        """Violation of the values `taken` (one per scope variable, domain indices)."""
        seen = [int(self.values[k][int(a)]) for k, a in enumerate(taken)]
        seen = [x for x in seen if x not in self.exempt]
        counts = np.unique(np.array(seen, dtype=np.int64), return_counts=True)[1]
        if self.semantics == "dec":
            return int((counts * (counts - 1) // 2).sum())
        return int((counts - 1).sum())

    def worst(self) -> int:
        """The largest violation (all variables on one value)."""
        n = len(self.scope)
        return n * (n - 1) // 2 if self.semantics == "dec" else max(n - 1, 0)


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
    precision: int = 0  # decimals of the file's integer-scaled costs (CFN): file value = cost / 10^precision
    # Global constraints (integer problems only). One not `tabled` makes the tables a relaxation,
    # which elimination bounds and search completes (gpusolve/consistency/globals.py).
    globals: list[AllDifferent] = field(default_factory=list)

    @property
    def dtype(self):
        return np.int64 if self.integer else np.float64

    @property
    def domains(self) -> list[int]:
        return [v.domain for v in self.variables]

    @property
    def relaxed(self) -> bool:
        """Some global constraint is missing from the tables: elimination alone proves nothing."""
        return any(not g.tabled for g in self.globals)

    @property
    def max_arity(self) -> int:
        """The largest scope of a cost function (1 for a problem of constants): no z below it plans."""
        return max(max((f.arity for f in self.functions), default=1), 1)

    @property
    def least(self):
        """No assignment costs less: each function's minimum, summed (the bound before any phase)."""
        return self.total(f.least() if f.entries else self.top for f in self.functions)

    @property
    def hard_globals(self) -> list[AllDifferent]:
        """The global constraints whose violation is forbidden: those GAC filters."""
        return [g for g in self.globals if g.cost >= self.top]

    @property
    def is_satisfaction(self) -> bool:
        """Every cost 0 or forbidden (constants aside), every global constraint hard: the first
        solution found is optimal."""
        return self.integer and all(g.cost >= self.top for g in self.globals) and all(
            not f.scope or bool(((f.used_costs() == 0) | (f.used_costs() >= self.top)).all()) for f in self.functions)

    def is_forbidden(self, cost) -> bool:
        return cost >= self.top

    def add(self, a, b):
        """Sum of two costs: saturating at top for integer costs (inf absorbs for floats)."""
        return min(a + b, self.top) if self.integer else a + b

    @property
    def constant(self):
        """The saturating sum of the functions of no variable: a lower bound of every assignment's cost."""
        return self.total(f.table[()] for f in self.functions if not f.scope)

    def total(self, costs):
        """Saturating sum of costs."""
        acc = self.dtype(0)
        for c in costs:
            acc = self.add(acc, c)
        return acc

    def bounds_meet(self, lower, upper) -> bool:
        """Whether internal bounds prove optimality: equal, or within float rounding on real costs."""
        if self.integer:
            return lower == upper
        return abs(float(upper) - float(lower)) <= 1e-9 * max(1.0, abs(float(upper)))

    def file_bounds(self, lower, upper):
        """Internal (min) bounds -> the file's own objective, keeping lower <= upper (None stays None)."""
        lo = self.to_file_value(lower)
        hi = None if upper is None else self.to_file_value(upper)
        if self.sense < 0:
            lo, hi = hi, lo
        return lo, hi

    def visible(self, assignment: list[int]) -> list[int]:
        """The assignment of the file's own variables: a decomposition's auxiliary ones are left out."""
        return [a for v, a in zip(self.variables, assignment) if not v.auxiliary]

    def value_labels(self, assignment: list[int] | None) -> list[str] | None:
        """The assignment (of the visible variables) as domain values when the file names them (XCSP
        values, CFN value names)."""
        shown = [v for v in self.variables if not v.auxiliary]
        if assignment is None or not any(v.labels for v in shown):
            return None
        return [v.label(a) for v, a in zip(shown, assignment)]

    def to_file_value(self, cost):
        """Internal cost (sum of tables) -> objective as the file states it, None if forbidden."""
        if cost is None or self.is_forbidden(cost):
            return None
        if self.integer:
            value = self.sense * (int(cost) + int(self.offset))
            return round(value / 10 ** self.precision, self.precision) if self.precision else value
        return self.sense * (float(cost) + float(self.offset))

    def evaluate(self, assignment) -> int | float:
        """Internal cost (offset excluded) of a complete assignment, saturating at top."""
        total = 0
        for var, value in self.evidence.items():
            if int(assignment[var]) != value:
                return self.top
        for f in self.functions:
            total = total + f.cost([assignment[v] for v in f.scope])
            if total >= self.top:
                return self.top
        for g in self.globals:
            if g.tabled:
                continue
            total = total + min(g.cost * g.violation([assignment[v] for v in g.scope]), self.top)
            if total >= self.top:
                return self.top
        return total

    def restricted(self, kept: list, tables: list[CostFunction], globals: list[AllDifferent]) -> "Problem":
        """The problem as preprocessing leaves it: over the domain indices `kept[v]` of each variable
        (renumbered; tables and value labels follow), with its global constraints' `tables` added
        and `globals` in place of its own (both already over the kept indices).

        Tables over one scope become one, their sum (saturating at top): files often split one
        relation into several functions (CELAR6-SUB0: 207 functions over 57 scopes), and every
        bucket, mini-bucket and search node then reads fewer, equivalent tables."""
        whole = [len(k) == var.domain for var, k in zip(self.variables, kept)]
        variables = [var if w else Variable(var.name, len(k), tuple(var.labels[j] for j in k) if var.labels else None)
                     for var, k, w in zip(self.variables, kept, whole)]
        first: dict[frozenset, int] = {}
        functions: list[CostFunction] = []
        for f in [f if all(whole[u] for u in f.scope) else f.restrict([kept[u] for u in f.scope])
                  for f in self.functions] + tables:
            key = frozenset(f.scope)
            if key not in first or not f.scope:
                first[key] = len(functions)
                functions.append(f)
                continue
            g = functions[first[key]]
            table = g.table + np.transpose(f.table, [f.scope.index(u) for u in g.scope])
            functions[first[key]] = CostFunction(g.scope, np.minimum(table, self.top) if self.integer else table)
        return self.like(functions, variables, globals=globals)

    def like(self, functions: list[CostFunction], variables: list[Variable] | None = None,
             top=None, globals: list[AllDifferent] | None = None) -> "Problem":
        """A problem with this one's objective, new tables (and optionally variables, top, globals)."""
        return Problem(self.name, self.variables if variables is None else variables, functions, self.integer,
                       self.top if top is None else top, self.offset, self.sense, self.task, dict(self.evidence),
                       self.precision, list(self.globals if globals is None else globals))


@dataclass
class Reduced:
    """A problem after preprocessing removed values and functional variables, and the way back to
    the file's value indices: beside `visible` and `value_labels`, the last step of reporting an
    assignment in the file's terms."""

    problem: Problem  # the reduced problem (the original one when nothing was removed)
    values: list[np.ndarray]  # per variable: the original index of each kept value
    infeasible: bool = False
    removed: int = 0  # values removed in all
    # (y, x, g) per variable y eliminated as a function of x (consistency/functional.py), in the order
    # eliminated: y's original value index is g[x's original value index]. y is in no scope.
    functional: list[tuple[int, int, np.ndarray]] = field(default_factory=list)

    def expand(self, assignment) -> list[int]:
        """An assignment of the reduced problem in the original problem's value indices: an
        eliminated y after the variables eliminated later, of which its x may be one."""
        out = [int(self.values[v][a]) for v, a in enumerate(assignment)]
        for y, x, g in reversed(self.functional):
            out[y] = int(g[out[x]])
        return out


# Readers mark forbidden integer entries with this before `finalize_integer`.
FORBIDDEN = np.iinfo(np.int64).max


def finalize_integer(problem: Problem, file_top: int | None) -> Problem:
    """Shift negative costs into the offset and choose an exact int64 `top`.

    Tables hold finite costs and FORBIDDEN. The internal top bounds the *sum of
    tables* (the offset stays outside): the file's top minus the offset, or,
    when smaller, one more than the largest finite sum any assignment can
    reach. Sums of two costs <= MAX_TOP never overflow int64.
    """
    worst, least = 0, []
    for f in problem.functions:
        costs = f.used_costs()
        finite = costs != FORBIDDEN  # a mask, not a copy of the costs: readers budget two copies of a table
        if not finite.any():
            continue
        low = int(costs.min(where=finite, initial=FORBIDDEN))
        high = int(costs.max(where=finite, initial=low))
        if high - low > MAX_TOP:  # the shift below would wrap in int64
            raise ModelError(f"costs too large: one table's costs span {high - low}, more than 2^62")
        if low < 0:
            _shift(problem, f, low)
        elif low > 0:
            least.append((f, low))
        worst += high - min(low, 0)
    if worst + 1 > MAX_TOP:  # positive least costs go to the offset too (an objective's term x, x near 2^62)
        for f, low in least:
            _shift(problem, f, low)
            worst -= low
    for g in problem.globals:  # soft ones add to the worst sum; hard ones (FORBIDDEN) are clipped below
        worst += g.cost * g.worst() if g.cost != FORBIDDEN else 0
    top = worst + 1
    if file_top is not None:
        top = min(top, max(int(file_top) - int(problem.offset), 0))
    if top > MAX_TOP:
        raise ModelError(f"costs too large: the sum of finite costs ({worst}) exceeds 2^62")
    for f in problem.functions:
        f.map_costs(lambda t: np.minimum(t, top).astype(np.int64, copy=False))
    for g in problem.globals:
        g.cost = min(g.cost, top)
    problem.top = top
    return problem


def _shift(problem: Problem, f: CostFunction, low: int) -> None:
    """Take `low` off f's finite costs into the problem's offset."""
    f.map_costs(lambda t: np.where(t == FORBIDDEN, FORBIDDEN, t - low))
    problem.offset += low


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
    if problem.globals:
        raise ModelError("evidence with global constraints is not supported")
    return Problem(problem.name, problem.variables, functions, problem.integer, problem.top,
                   problem.offset, problem.sense, problem.task, merged, problem.precision)
