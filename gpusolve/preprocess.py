"""Hard-constraint preprocessing before planning: node and generalised arc consistency.

A value is removed when it takes part in no assignment cheaper than top:
its unary costs add up to top, or some cost function forbids every tuple
that gives the variable this value (and only live values to the others).
Removals propagate until nothing changes (AC-3 on the functions, Régin's GAC on every hard
AllDifferent, in turn until neither removes a value); then the global constraints' tables
are added where they fit (globals.decompose). This
never changes the optimum, shrinks the domains that size every table, and
detects an emptied domain (the problem is infeasible) before any
elimination. Value indices change: `Reduced.expand` maps an assignment back
to the file's value indices.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .globals import decompose, gac, hard
from .model import CostFunction, Problem, Variable


@dataclass
class Reduced:
    problem: Problem  # the reduced problem (the original one when nothing was removed)
    values: list[np.ndarray]  # per variable: the original index of each kept value
    infeasible: bool = False
    removed: int = 0  # values removed in all

    def expand(self, assignment) -> list[int]:
        """An assignment of the reduced problem in the original problem's value indices."""
        return [int(self.values[v][a]) for v, a in enumerate(assignment)]


def preprocess(problem: Problem) -> Reduced:
    """Remove values without support; mark the problem infeasible when a domain empties.

    A variable in no scope keeps only its first value (any value is optimal), an observed one all
    its values (the evidence picks one): their domains, which may be huge, are never materialised."""
    scoped = {v for f in problem.functions for v in f.scope} | {v for g in problem.globals for v in g.scope}
    live = [np.ones(d, dtype=bool) if v in scoped else None for v, d in enumerate(problem.domains)]
    infeasible = Reduced(problem, [range(d) for d in problem.domains], infeasible=True)
    if sum(f.table[()] for f in problem.functions if not f.scope) >= problem.top:
        return infeasible
    unary = {}
    for f in problem.functions:
        if f.arity == 1:
            v = f.scope[0]
            unary[v] = np.minimum(unary.get(v, 0) + f.table, problem.top)
    for v, costs in unary.items():
        live[v] &= costs < problem.top
        if not live[v].any():
            return infeasible
    watching: dict[int, list[int]] = {}
    for i, f in enumerate(problem.functions):
        for v in f.scope:
            watching.setdefault(v, []).append(i)
    queue = [i for i, f in enumerate(problem.functions) if f.scope]
    queued = set(queue)
    alldiffs = hard(problem)
    matches: list = [None] * len(alldiffs)
    allowed: dict = {}
    while queue or alldiffs:
        if not revise(problem, live, watching, queue, queued, allowed):
            return infeasible
        sizes = [int(m.sum()) if m is not None else 0 for m in live]
        for j, g in enumerate(alldiffs):  # GAC on each hard AllDifferent, then AC again where it removed
            matches[j] = gac(g, live, matches[j])
            if matches[j] is None:
                return infeasible
        changed = [v for v, m in enumerate(live) if m is not None and m.sum() < sizes[v]]
        if not changed:
            break
        queued.update(i for v in changed for i in watching.get(v, ()))
        queue.extend(queued)
    values = [np.flatnonzero(m) if m is not None else range(d if v in problem.evidence else 1)
              for v, (m, d) in enumerate(zip(live, problem.domains))]
    removed = sum(d - len(kept) for kept, d in zip(values, problem.domains))
    variables = [Variable(var.name, len(kept), tuple(var.labels[j] for j in kept) if var.labels else None)
                 for var, kept in zip(problem.variables, values)] if removed else problem.variables
    functions = [CostFunction(f.scope, np.ascontiguousarray(f.table[np.ix_(*(values[u] for u in f.scope))])
                              if f.scope else f.table) for f in problem.functions] if removed else problem.functions
    if problem.globals:  # their tables, where they fit (globals.decompose), merge with the file's
        decomposed = decompose(problem.like(functions, variables, globals=[g.restrict(values) for g in problem.globals]))
        functions, globals_ = decomposed.functions, decomposed.globals
    else:
        globals_ = []
    merged = merge_scopes(functions, problem)
    same_globals = all(a is b for a, b in zip(globals_, problem.globals))
    if not removed and len(merged) == len(problem.functions) and same_globals:
        return Reduced(problem, values)
    return Reduced(problem.like(merged, variables, globals=globals_), values, removed=removed)


def revise(problem: Problem, live, watching, queue: list, queued: set, allowed: dict | None = None) -> bool:
    """AC-3 on the tables until the queue empties; False when a domain empties. `allowed` keeps each
    table's allowed tuples (cost below top) by function index between calls: MAC revises the same
    tables thousands of times."""
    allowed = {} if allowed is None else allowed
    while queue:
        i = queue.pop()
        queued.discard(i)
        f = problem.functions[i]
        if i not in allowed:
            allowed[i] = _allowed(f.table < problem.top)
        for u, supported in zip(f.scope, _supported(allowed[i], [live[u] for u in f.scope])):
            if (live[u] & ~supported).any():
                live[u] &= supported
                if not live[u].any():
                    return False
                for j in watching[u]:
                    if j not in queued:
                        queue.append(j)
                        queued.add(j)
    return True


def _allowed(table: np.ndarray):
    """A table's allowed tuples as revise reads them: a binary table with few (at most one in 16
    of its entries, as a functional constraint's) as its pairs, so that a revision costs their
    number; any other as the boolean table."""
    if table.ndim == 2 and 16 * np.count_nonzero(table) <= table.size:
        return np.nonzero(table)
    return table


def _supported(allowed, live: list[np.ndarray]) -> list[np.ndarray]:
    """For each scope variable, which of its values some allowed tuple over live values supports."""
    if isinstance(allowed, tuple):  # pairs (x values, y values)
        x, y = allowed
        return [np.bincount(x[live[1][y]], minlength=live[0].size) > 0,
                np.bincount(y[live[0][x]], minlength=live[1].size) > 0]
    if allowed.ndim == 2:  # read only over the live values
        index = [np.flatnonzero(m) for m in live]
        sub = allowed[np.ix_(*index)]
        out = [np.zeros(m.size, dtype=bool) for m in live]
        out[0][index[0]], out[1][index[1]] = sub.any(axis=1), sub.any(axis=0)
        return out
    sub = allowed
    for k, m in enumerate(live):
        shape = [1] * allowed.ndim
        shape[k] = -1
        sub = sub & m.reshape(shape)
    return [sub.any(axis=tuple(j for j in range(allowed.ndim) if j != k)) for k in range(allowed.ndim)]


def merge_scopes(functions: list[CostFunction], problem: Problem) -> list[CostFunction]:
    """One function per scope: tables over the same variables are added (saturating at top).

    Files often split one relation into several functions (CELAR6-SUB0: 207 functions over 57
    scopes); every bucket, mini-bucket and search node then reads fewer, equivalent tables.
    """
    first: dict[frozenset, int] = {}
    out: list[CostFunction] = []
    for f in functions:
        key = frozenset(f.scope)
        if key not in first or not f.scope:
            first[key] = len(out)
            out.append(CostFunction(f.scope, f.table))
            continue
        g = out[first[key]]
        table = g.table + np.transpose(f.table, [f.scope.index(u) for u in g.scope])
        out[first[key]] = CostFunction(g.scope, np.minimum(table, problem.top) if problem.integer else table)
    return out


def lower_top(problem: Problem, top: int) -> Problem:
    """The integer problem with every cost >= top forbidden (top <= problem.top): an
    assignment cheaper than top keeps its cost, every other one becomes forbidden."""
    functions = [CostFunction(f.scope, np.minimum(f.table, top)) for f in problem.functions]
    return problem.like(functions, top=top, globals=[replace(g, cost=min(g.cost, top)) for g in problem.globals])
