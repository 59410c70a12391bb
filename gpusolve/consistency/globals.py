"""Global constraints in the pipeline: filtering before planning, tables for elimination, propagators
for search.

An `AllDifferent` (model.py) stays whole in `Problem.globals`. Before planning, `gac` filters the
domains of the hard ones (Régin's GAC, alldiff.py) alongside arc consistency on the tables. Then
`decompose` turns each one into tables where they fit in DECOMPOSE_ENTRIES: a hard one or a `dec`
one into binary tables (cost c on each pair sharing a value: exact), a soft `var` one (cost c per
variable to change, which no set of binary tables expresses) into its one n-ary table. One whose
tables do not fit stays in `globals`: the tables then describe a relaxation, elimination on them
gives lower bounds only, and search adds the constraint's cost exactly through its propagator.
In search every hard AllDifferent propagates (GAC) and every soft one left global adds, at each
of its variables, what that variable's value adds to its cost.
"""
from __future__ import annotations

import functools
import itertools
import math
from dataclasses import replace

import numpy as np

from gpusolve.model.problem import Infeasible
from gpusolve.consistency.alldiff import count, filter_domains, max_matching, pack, removals
from gpusolve.consistency.alldiff_kernel import DeviceDomains
from gpusolve.model.problem import AllDifferent, CostFunction, Problem

# Entries of the tables a decomposition may add, over all globals: 256 MiB of int64.
DECOMPOSE_ENTRIES = 1 << 25
CLIQUE_BITS = 40  # log2 of the entries of the largest bucket of an AllDifferent's clique worth tabling


@functools.lru_cache(maxsize=256)  # AllDifferents hash by identity; search asks for the same ones often
def value_ids(g: AllDifferent) -> tuple[list[np.ndarray], int]:
    """(per scope variable: the column of each domain index in the variable-value graph, columns).

    Equal values share a column; an exempt value gets a column of its own per variable, so any
    number of variables can take it."""
    flat = np.concatenate([np.asarray(v, dtype=np.int64) for v in g.values]) if g.values else np.zeros(0, np.int64)
    low = int(flat.min()) if flat.size else 0
    if flat.size and int(flat.max()) - low < 2 * flat.size:  # a value range: ranks by a prefix sum, no sort
        present = np.zeros(int(flat.max()) - low + 1, dtype=bool)
        present[flat - low] = True
        rank = np.cumsum(present) - 1
        shared, cols = np.flatnonzero(present), rank[flat - low]
    else:
        shared, cols = np.unique(flat, return_inverse=True)
        cols = cols.astype(np.int64).reshape(-1)
    if g.exempt:
        private = np.isin(flat, list(g.exempt))
        cols[private] = len(shared) + np.arange(int(private.sum()))
        count = len(shared) + int(private.sum())
    else:
        count = len(shared)
    bounds = np.cumsum([0] + [len(v) for v in g.values])
    return [cols[a:b] for a, b in zip(bounds[:-1], bounds[1:])], count


@functools.lru_cache(maxsize=256)
def id_table(g: AllDifferent) -> tuple[np.ndarray, np.ndarray, tuple[int, int] | None]:
    """(value_ids as one (scope, widest domain) matrix, shorter rows padded with a spare column m;
    each entry's flat index in a (scope, m + 1) matrix; (a, b) when row r is the run of columns
    from a r + b: the rows of N-queens, its diagonals, Langford, Sudoku). The graph is then built
    by one strided copy, else by one scatter."""
    ids, m = value_ids(g)
    k = len(ids)
    table = np.full((k, max((len(c) for c in ids), default=0)), m, dtype=np.int64)
    for r, c in enumerate(ids):
        table[r, :len(c)] = c
    flat = (table + (m + 1) * np.arange(k)[:, None]).reshape(-1)
    a = int(table[1, 0] - table[0, 0]) if k > 1 else 0
    run = (table == table[:1, :1] + a * np.arange(k)[:, None] + np.arange(table.shape[1])[None, :]).all()
    return table, flat, (a, int(table[0, 0])) if k and run and m + 1 + a >= table.shape[1] else None


def gac(g: AllDifferent, live, match: np.ndarray | None = None, xp=None,
        method: str = "peel", removed=None) -> np.ndarray | None:
    """Filter the live values of g's scope in place (GAC); the matching (a column per scope
    variable), or None when infeasible. `live`: a boolean array per variable, or one matrix with
    a row per variable (search's domains, read and updated in one step each). `removed(variables,
    value indices)` hears of the removals (MAC's trail).

    A variable left with one value that no other variable can take is a component of the graph of
    its own: nothing to remove there, and it changes nothing elsewhere. Such variables (those
    assigned, once propagation removed their value elsewhere) are left out of the graph given to
    GAC: deep in search most of it."""
    _, m = value_ids(g)
    table = id_table(g)[0]
    k = len(table)
    scope = np.asarray(g.scope)
    stack, dom = variable_value_graph(g, live)
    first = table[np.arange(k), stack.argmax(axis=1)]
    alone = (count(stack, 1) == 1) & (count(dom, 0)[np.minimum(first, m - 1)] == 1)
    rows = np.flatnonzero(~alone)
    try:
        (r, c), sub = removals(dom[rows] if alone.any() else dom, None if match is None else match[rows], xp, method)
    except Infeasible:
        return None
    match = first  # the value of each variable left out
    match[rows] = sub
    r = rows[r]
    j = domain_index(g, r, c)
    if isinstance(live, np.ndarray):
        live[scope[r], j] = False
    else:
        for v, a in zip(scope[r].tolist(), j.tolist()):
            live[v][a] = False
    if removed is not None and r.size:
        removed(scope[r], j)
    return match


def variable_value_graph(g: AllDifferent, live) -> tuple[np.ndarray, np.ndarray]:
    """(the live domain indices of g's scope, a row per variable; the variable-value graph, a
    column per value). `live` as in `gac`."""
    _, m = value_ids(g)
    table, flat, run = id_table(g)
    k, width = table.shape
    if isinstance(live, np.ndarray):
        stack = live[np.asarray(g.scope), :width]
    else:
        stack = np.zeros((k, width), dtype=bool)
        for r, v in enumerate(g.scope):
            stack[r, :len(live[v])] = live[v]
    graph = np.zeros((k, m + 1), dtype=bool)
    if run is None:
        graph.reshape(-1)[flat] = stack.reshape(-1)
    else:
        a, b = run
        np.lib.stride_tricks.as_strided(graph.reshape(-1)[b:], (k, width), (m + 1 + a, 1))[:] = stack
    return stack, graph[:, :m]


class KeptGac:
    """GAC of one hard AllDifferent on the device for a whole search (alldiff_kernel.DeviceDomains):
    the bit-packed graph and the matching stay there, and a call sends only the values the search
    removed from g's variables since the last one. After a backtrack restored values the device's
    copy is stale: the next call uploads the graph again, with the device's matching where it
    still holds."""

    def __init__(self, g: AllDifferent, cp, variables: int):
        self.g, self.cp, self.device = g, cp, None
        self.row = scope_rows(g, variables)

    def __call__(self, live: np.ndarray, since, removed) -> bool:
        """Filter the domain matrix `live` in place; False when infeasible. `since`: (variables,
        value indices) removed since the last call, or None after a backtrack (upload again).
        `removed(variables, value indices)` hears of the removals."""
        edges = None
        if since is None or self.device is None:
            _, dom = variable_value_graph(self.g, live)
            try:
                match = max_matching(dom, None if self.device is None else self.device.matching())
            except Infeasible:
                return False
            if self.device is None:
                self.device = DeviceDomains(self.cp, pack(np, dom), dom.shape[1], match)
            else:
                self.device.reset(pack(np, dom), match)
        else:
            rows = self.row[since[0]]
            mine = rows >= 0
            edges = rows[mine], value_column(self.g, rows[mine], since[1][mine])
        try:
            r, c = self.device.removals(edges)
        except Infeasible:
            return False
        if r.size:
            j = domain_index(self.g, r, c)
            scope = np.asarray(self.g.scope)
            live[scope[r], j] = False
            removed(scope[r], j)
        return True


def domain_index(g: AllDifferent, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """The domain index of each edge (row of g's scope, column of the variable-value graph)."""
    table, _, run = id_table(g)
    if run is not None:  # row r's columns run from a r + b
        return cols - (run[0] * rows + run[1])
    return _locate(g, rows, cols)[0]


@functools.lru_cache(maxsize=256)
def _edge_keys(g: AllDifferent) -> tuple[np.ndarray, np.ndarray | None]:
    """(id_table's flat indices ascending, their places in it, or None where already ascending: a
    domain's values listed in order): each edge is then found by binary search, not by comparing
    its row of the table."""
    flat = id_table(g)[1]
    if flat.size < 2 or bool((flat[1:] >= flat[:-1]).all()):
        return flat, None
    order = np.argsort(flat, kind="stable")
    return flat[order], order


def _locate(g: AllDifferent, rows: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the domain index of each (row, column), whether the row has that column at all)."""
    table = id_table(g)[0]
    keys, order = _edge_keys(g)
    want = rows * (value_ids(g)[1] + 1) + cols
    at = np.minimum(np.searchsorted(keys, want), max(keys.size - 1, 0))
    found = keys[at] == want if keys.size else np.zeros(want.shape, dtype=bool)
    place = at if order is None else order[at]
    return place - rows * table.shape[1], found


def value_column(g: AllDifferent, rows: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """The column of the variable-value graph of each (row of g's scope, domain index)."""
    table, _, run = id_table(g)
    if run is not None:
        return indices + run[0] * rows + run[1]
    return table[rows, indices]


def takers(g: AllDifferent, domains: np.ndarray, c: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows of g's scope, their domain indices): the variables whose live values include column c
    of the variable-value graph. `domains`: search's matrix, a row per variable."""
    table, _, run = id_table(g)
    rows = np.arange(len(table))
    if run is not None:  # row r holds column c at index c - a r - b, if that is one of its indices
        j = c - run[0] * rows - run[1]
        fits = (j >= 0) & (j < table.shape[1])
    else:
        j, fits = _locate(g, rows, np.full(len(table), c))
    rows, j = rows[fits], j[fits]
    live = domains[np.asarray(g.scope)[rows], j]
    return rows[live], j[live]


def scope_rows(g: AllDifferent, variables: int) -> np.ndarray:
    """Each of the problem's variables' row in g's scope, -1 outside it."""
    row = np.full(variables, -1, dtype=np.int64)
    row[list(g.scope)] = np.arange(len(g.scope))
    return row


def hard(problem: Problem) -> list[AllDifferent]:
    return [g for g in problem.globals if g.cost >= problem.top]


def decompose(problem: Problem, limit: int | None = None) -> Problem:
    """Tables for the globals whose decomposition fits `limit` entries in all (default
    DECOMPOSE_ENTRIES), marked `tabled`. In a satisfaction problem (solved by MAC search unless
    elimination is exact and instant), a hard AllDifferent whose clique elimination could never
    hold (a bucket of over 2^CLIQUE_BITS entries) stays untabled: its tables would only slow
    planning and arc consistency (Langford L(2,51): 5151 tables, 55 s instead of 0.4 s)."""
    limit = DECOMPOSE_ENTRIES if limit is None else limit
    functions, globals_, used = list(problem.functions), [], 0
    csp = None
    for g in problem.globals:
        doms = [problem.variables[v].domain for v in g.scope]
        if g.semantics == "var" and g.cost < problem.top:
            size = math.prod(doms)
        else:
            size = sum(a * b for a, b in itertools.combinations(doms, 2))
        wide = sum(math.log2(d) for d in doms) - math.log2(max(doms)) > CLIQUE_BITS
        if wide and g.cost >= problem.top and csp is None:
            csp = problem.is_satisfaction
        if g.tabled or used + size > limit or (wide and g.cost >= problem.top and csp):
            globals_.append(g)
            continue
        used += size
        functions += _tables(g, problem.top)
        globals_.append(replace(g, tabled=True))
    return problem.like(functions, globals=globals_)


def _tables(g: AllDifferent, top) -> list[CostFunction]:
    if g.semantics == "var" and g.cost < top:
        grids = np.meshgrid(*(np.asarray(v) for v in g.values), indexing="ij")
        stacked = np.stack([x.reshape(-1) for x in grids], axis=1)
        exempt = np.isin(stacked, list(g.exempt)) if g.exempt else np.zeros(stacked.shape, dtype=bool)
        counted = np.where(exempt, np.iinfo(np.int64).min, stacked)
        ordered = np.sort(counted, axis=1)
        repeats = ((ordered[:, 1:] == ordered[:, :-1]) & (ordered[:, 1:] != np.iinfo(np.int64).min)).sum(axis=1)
        table = np.minimum(repeats.astype(np.int64) * g.cost, top).reshape(grids[0].shape)
        return [CostFunction(g.scope, table)]
    out = []
    cost = min(g.cost, top)
    for i, j in itertools.combinations(range(len(g.scope)), 2):
        a, b = np.asarray(g.values[i])[:, None], np.asarray(g.values[j])[None, :]
        clash = a == b
        if g.exempt:
            clash &= ~np.isin(a, list(g.exempt))
        if clash.any():
            out.append(CostFunction((g.scope[i], g.scope[j]), np.where(clash, cost, 0).astype(np.int64)))
    return out


class AllDifferentPropagator:
    """The search's view of one AllDifferent (search.Propagator).

    Hard: GAC given the values above, so a value survives only if the scope's unassigned
    variables can still all be matched; the matching carries over from call to call. Soft: the
    violation var's value adds to the scope variables above it, times the cost; along a path
    these add up to the constraint's cost (violation only grows as variables are assigned).
    """

    def __init__(self, g: AllDifferent, top, xp=None):
        self.g, self.scope, self.top, self.xp = g, g.scope, top, xp
        self.hard = g.cost >= top
        self.ids, self.m = value_ids(g)
        self.pos = {v: k for k, v in enumerate(g.scope)}
        self.last = np.full(len(g.scope), -1, dtype=np.int64)  # column matched to each variable last time

    def lower(self, var: int, above: tuple[int, ...], value: np.ndarray) -> np.ndarray:
        k = self.pos[var]
        taken = np.array([self.ids[self.pos[u]][value[u]] for u in above], dtype=np.int64)
        counts = np.bincount(taken, minlength=self.m)
        mine = counts[self.ids[k]]  # for each value of var: how many above already use its column
        if not self.hard:  # what var's value adds: one more clash (var) or one per equal value above (dec)
            extra = mine if self.g.semantics == "dec" else (mine > 0).astype(np.int64)
            return np.minimum(extra * self.g.cost, self.top).astype(np.int64)
        out = np.full(len(self.ids[k]), self.top, dtype=np.int64)
        if (counts > 1).any():
            return out
        free = counts == 0
        rest = [j for j, u in enumerate(self.scope) if u != var and u not in above]
        if not rest:
            out[free[self.ids[k]]] = 0
            return out
        rows = [k] + rest
        dom = np.zeros((len(rows), self.m), dtype=bool)
        for r, j in enumerate(rows):
            dom[r, self.ids[j]] = True
        dom &= free[None, :]
        try:
            kept, match = filter_domains(dom, self.last[rows], self.xp)
        except Infeasible:
            return out
        self.last[rows] = match
        out[kept[0, self.ids[k]]] = 0
        return out


def propagators(problem: Problem, xp=None) -> list[AllDifferentPropagator]:
    """Search's propagators: GAC for every hard AllDifferent (tabled or not), costs for the soft
    ones left out of the tables (a tabled one's tables already count its cost)."""
    return [AllDifferentPropagator(g, problem.top, xp) for g in problem.globals
            if g.cost >= problem.top or not g.tabled]
