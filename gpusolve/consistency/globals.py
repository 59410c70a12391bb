"""Global constraints in the pipeline: tables for elimination, propagators for search.

An `AllDifferent` (model.py) stays whole in `Problem.globals`. Before planning, alldiff.gac filters
the domains of the hard ones (Régin's GAC) alongside arc consistency on the tables. Then
`decompose` turns each one into tables where they fit in limits.decompose_entries: a hard one or a `dec`
one into binary tables (cost c on each pair sharing a value: exact), a soft `var` one (cost c per
variable to change, which no set of binary tables expresses) into its one n-ary table. One whose
tables do not fit stays in `globals`: the tables then describe a relaxation, elimination on them
gives lower bounds only, and search adds the constraint's cost exactly through its propagator.
In search every hard AllDifferent propagates (GAC) and every soft one left global adds, at each
of its variables, what that variable's value adds to its cost.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np

from gpusolve.limits import DEFAULT, Limits
from gpusolve.consistency.alldiff import filter_domains, value_ids
from gpusolve.model.problem import AllDifferent, CostFunction, Infeasible, Problem

CLIQUE_BITS = 40  # log2 of the entries of the largest bucket of an AllDifferent's clique worth tabling


def decompose(problem: Problem, kept: list, limits: Limits = DEFAULT) -> tuple[list[CostFunction], list[AllDifferent]]:
    """(tables, globals): the problem's globals over the domain indices `kept[v]` that preprocessing
    kept of each variable, and the tables of those whose decomposition fits
    limits.decompose_entries entries in all, which are marked `tabled`. In a satisfaction problem
    (solved by MAC search unless elimination is exact and instant; told by the file's costs, before
    the values go that preprocessing removed), a hard AllDifferent whose
    clique elimination could never hold (a bucket of over 2^CLIQUE_BITS entries) stays untabled:
    its tables would only slow planning and arc consistency (Langford L(2,51): 5151 tables, 55 s
    instead of 0.4 s)."""
    tables, globals_, used = [], [], 0
    csp = None
    for g in problem.globals:
        g = replace(g, values=tuple(vals[kept[v]] for v, vals in zip(g.scope, g.values)))
        doms = [len(v) for v in g.values]
        if g.semantics == "var" and g.cost < problem.top:
            size = math.prod(doms)
        else:
            size = sum(a * b for a, b in itertools.combinations(doms, 2))
        wide = sum(math.log2(d) for d in doms) - math.log2(max(doms)) > CLIQUE_BITS
        if wide and g.cost >= problem.top and csp is None:
            csp = problem.is_satisfaction
        if g.tabled or used + size > limits.decompose_entries or (wide and g.cost >= problem.top and csp):
            globals_.append(g)
            continue
        used += size
        tables += _tables(g, problem.top)
        globals_.append(replace(g, tabled=True))
    return tables, globals_


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

    def __init__(self, g: AllDifferent, top, xp=None, limits: Limits = DEFAULT):
        self.g, self.scope, self.top, self.xp, self.limits = g, g.scope, top, xp, limits
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
            kept, match = filter_domains(dom, self.last[rows], self.xp, limits=self.limits)
        except Infeasible:
            return out
        self.last[rows] = match
        out[kept[0, self.ids[k]]] = 0
        return out


def propagators(problem: Problem, xp=None, limits: Limits = DEFAULT) -> list[AllDifferentPropagator]:
    """Search's propagators: GAC for every hard AllDifferent (tabled or not), costs for the soft
    ones left out of the tables (a tabled one's tables already count its cost)."""
    return [AllDifferentPropagator(g, problem.top, xp, limits) for g in problem.globals
            if g.cost >= problem.top or not g.tabled]
