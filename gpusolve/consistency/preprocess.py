"""Hard-constraint preprocessing before planning: node and generalised arc consistency, and
functional variable elimination (functional.py) in turn with them.

A value is removed when it takes part in no assignment cheaper than top:
its unary costs add up to top, or some cost function forbids every tuple
that gives the variable this value (and only live values to the others).
Removals propagate until nothing changes (AC-3 on the functions, Régin's GAC on every hard
AllDifferent, in turn until neither removes a value); then the global constraints' tables
are made where they fit (globals.decompose) and the problem is restricted to the values kept
(Problem.restricted). This
never changes the optimum, shrinks the domains that size every table, and
detects an emptied domain (the problem is infeasible) before any
elimination. Value indices change and eliminated variables leave every scope: `Reduced.expand`
(model/problem.py) maps an assignment back to the file's value indices.
"""
from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import numpy as np

from gpusolve.consistency import functional
from gpusolve.consistency.alldiff import gac
from gpusolve.consistency.globals import decompose
from gpusolve.limits import DEFAULT, Limits
from gpusolve.model.problem import CostFunction, Problem, Reduced, TupleFunction


def preprocess(problem: Problem, limits: Limits = DEFAULT) -> Reduced:
    """Node and arc consistency (`consistent`), then functional variable elimination
    (functional.py), in turn until no variable is eliminated: the functions rewritten over x and
    merged with x's may remove more values, and make other variables functional."""
    reduced = consistent(problem, limits)
    while not reduced.infeasible:
        smaller, eliminated = functional.eliminate(reduced.problem, limits)
        if not eliminated:
            break
        reduced = _then(problem, reduced, eliminated, consistent(smaller, limits))
    return reduced


def _then(original: Problem, reduced: Reduced, eliminated: list, after: Reduced) -> Reduced:
    """`reduced`, then functional `eliminated` (reduced.problem's value indices) and `after`
    (preprocessing of what is left), as one reduction of the `original` problem."""
    if after.infeasible:
        return _infeasible(original)
    # a variable kept whole (a range: observed, or in no scope) at one step is one at the next
    values = [kept[step.start:step.stop] if isinstance(step, range) else kept[step]
              for kept, step in zip(reduced.values, after.values)]
    maps = list(reduced.functional)
    for y, x, g in eliminated + after.functional:
        in_file = np.full(original.domains[x], -1, dtype=np.int64)
        in_file[reduced.values[x]] = np.where(g >= 0, np.asarray(reduced.values[y])[np.maximum(g, 0)], -1)
        maps.append((y, x, in_file))
    return Reduced(after.problem, values, removed=reduced.removed + after.removed, functional=maps)


def _infeasible(problem: Problem) -> Reduced:
    return Reduced(problem, [range(d) for d in problem.domains], infeasible=True)


def consistent(problem: Problem, limits: Limits = DEFAULT) -> Reduced:
    """Remove values without support; mark the problem infeasible when a domain empties. `limits`:
    GAC's and the decomposition of the globals'.

    A variable in no scope keeps only its first value (any value is optimal), an observed one all
    its values (the evidence picks one): their domains, which may be huge, are never materialised."""
    scoped = {v for f in problem.functions for v in f.scope} | {v for g in problem.globals for v in g.scope}
    live = [np.ones(d, dtype=bool) if v in scoped else None for v, d in enumerate(problem.domains)]
    infeasible = _infeasible(problem)
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
    batched = _binary_batches(problem)
    if not _revise_batches(batched, live):
        return infeasible
    done = {i for batch in batched for i in batch.members}
    queue = [i for i, f in enumerate(problem.functions) if f.scope and i not in done]
    queued = set(queue)
    alldiffs = problem.hard_globals
    matches: list = [None] * len(alldiffs)
    allowed: dict = {}
    while queue or alldiffs:
        if not revise(problem, live, watching, queue, queued, allowed):
            return infeasible
        sizes = [int(m.sum()) if m is not None else 0 for m in live]
        for j, g in enumerate(alldiffs):  # GAC on each hard AllDifferent, then AC again where it removed
            matches[j] = gac(g, live, matches[j], limits=limits)
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
    tables, globals_ = decompose(problem, values, limits)
    reduced = problem.restricted(values, tables, globals_)
    if not removed and len(reduced.functions) == len(problem.functions) and not tables \
            and [g.tabled for g in globals_] == [g.tabled for g in problem.globals]:
        return Reduced(problem, values)
    return Reduced(reduced, values, removed=removed)


def revise(problem: Problem, live, watching, queue: list, queued: set, allowed: dict | None = None,
           removed=None) -> bool:
    """AC-3 on the tables until the queue empties; False when a domain empties. `allowed` keeps each
    table's allowed tuples (cost below top) by function index between calls: MAC revises the same
    tables thousands of times. `removed(variable, value indices)` hears of each removal (MAC's trail)."""
    allowed = {} if allowed is None else allowed
    while queue:
        i = queue.pop()
        queued.discard(i)
        f = problem.functions[i]
        if i not in allowed:
            allowed[i] = _allowed(f, problem.top)
        for u, supported in zip(f.scope, _supported(allowed[i], [live[u] for u in f.scope])):
            gone = live[u] & ~supported
            if gone.any():
                live[u] &= supported
                if removed is not None:
                    removed(u, np.flatnonzero(gone))
                if not live[u].any():
                    return False
                for j in watching[u]:
                    if j not in queued:
                        queue.append(j)
                        queued.add(j)
    return True


# Dense binary tables of at most this many entries are revised together at the root, a shape at a time
# (cap131: 2,599 functions, 0.02 s one at a time).
BATCH_ENTRIES = 1 << 12


class _Batch(NamedTuple):
    """Binary functions of one table shape: their indices, first and second scope variables, allowed pairs."""
    members: np.ndarray
    first: np.ndarray
    second: np.ndarray
    allowed: np.ndarray  # (functions, first's domain, second's domain) bool


def _binary_batches(problem: Problem) -> list[_Batch]:
    by_shape: dict[tuple[int, int], list[int]] = {}
    for i, f in enumerate(problem.functions):
        if type(f) is CostFunction and f.arity == 2 and f.table.size <= BATCH_ENTRIES:
            by_shape.setdefault(f.table.shape, []).append(i)
    batches = []
    for members in by_shape.values():
        scopes = np.array([problem.functions[i].scope for i in members], dtype=np.int64)
        allowed = np.stack([problem.functions[i].table for i in members]) < problem.top
        batches.append(_Batch(np.array(members), scopes[:, 0], scopes[:, 1], allowed))
    return batches


def _revise_batches(batches: list[_Batch], live: list) -> bool:
    """Arc consistency on the batched functions alone, in rounds over those with a variable that lost a
    value in the last round (all, at first), each round a few array operations per batch; False when
    a domain empties. The closure is that of revise: AC's is unique."""
    if not batches:
        return True
    width = max(len(m) for m in live if m is not None)
    domains = np.zeros((len(live), width), dtype=bool)
    for v, m in enumerate(live):
        if m is not None:
            domains[v, : len(m)] = m
    dirty = np.ones(len(live), dtype=bool)
    while dirty.any():
        lost = np.zeros(len(live), dtype=bool)
        for b in batches:
            at = np.flatnonzero(dirty[b.first] | dirty[b.second])
            if not at.size:
                continue
            allowed, x, y = b.allowed[at], b.first[at], b.second[at]
            dx, dy = allowed.shape[1:]
            lx, ly = domains[x, :dx], domains[y, :dy]
            for v, values, supported in ((x, lx, (allowed & ly[:, None, :]).any(axis=2)),
                                         (y, ly, (allowed & lx[:, :, None]).any(axis=1))):
                rows, cols = np.nonzero(values & ~supported)
                domains[v[rows], cols] = False
                lost[v[rows]] = True
        if lost.any() and not domains[lost].any(axis=1).all():
            return False
        dirty = lost
    for v, m in enumerate(live):
        if m is not None:
            m &= domains[v, : len(m)]
    return True


class PairSupports:
    """The binary functions revise would read through their allowed pairs, propagated by MAC from
    the values removed instead: a removed value can only take away the support of its partners in
    these pairs, so only they are checked, each against its own pairs (in time proportional to the
    removals, not to the pairs; a Python step per revision cost Langford L(2,1000) 1374 of them per
    search node, 78% of its time). Nothing is kept between calls: backtracking restores nothing.
    Pairs are indexed (CSR) by the flat position (variable x width + value) of each end."""

    def __init__(self, problem: Problem, domains: np.ndarray, allowed: dict):
        self.domains = domains
        width = domains.shape[1]
        self.members, ends, owner = [], [[], []], []
        for i, f in enumerate(problem.functions):
            if f.arity != 2:
                continue
            if i not in allowed:
                allowed[i] = _allowed(f, problem.top)
            if not isinstance(allowed[i], tuple):
                continue
            for side in (0, 1):
                ends[side].append(f.scope[side] * width + allowed[i][side])
            owner.append(np.full(len(allowed[i][0]), len(self.members), dtype=np.int64))
            self.members.append(i)
        if not self.members:
            return
        self.ends = [np.concatenate(e).astype(np.int64) for e in ends]
        self.owner = np.concatenate(owner)
        self.scopes = np.array([problem.functions[i].scope for i in self.members], dtype=np.int64)
        index = np.int32 if len(self.owner) < 1 << 31 else np.int64
        self.by_end = []  # per side: (pairs ordered by that end, where each end's run starts: CSR)
        for e in self.ends:
            starts = np.zeros(domains.size + 1, dtype=index)
            np.cumsum(np.bincount(e, minlength=domains.size), out=starts[1:])
            self.by_end.append((np.argsort(e, kind="stable").astype(index), starts))

    def _pairs(self, side: int, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the pairs whose end on `side` is in `ends` (flat positions), the position in `ends` of each)."""
        order, starts = self.by_end[side]
        lo = starts[ends].astype(np.int64)
        count = starts[ends + 1] - lo
        at = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count - lo, count)
        return order[at].astype(np.int64), np.repeat(np.arange(len(ends)), count)

    def start(self, removed) -> bool:
        """Make every member arc consistent (the search's root): a live value is kept where each
        member over its variable has a pair of live values with it; then follow the removals."""
        if not self.members:
            return True
        width, flat = self.domains.shape[1], self.domains.reshape(-1)
        alive = flat[self.ends[0]] & flat[self.ends[1]]
        supporting = np.zeros(self.domains.size, dtype=np.int64)  # members with a live pair at each end
        for e, (order, _) in zip(self.ends, self.by_end):
            live = order[alive[order]]  # by end, then by function (members were listed in order)
            e_, owner = e[live], self.owner[live]
            first = np.ones(len(live), dtype=bool)
            first[1:] = (e_[1:] != e_[:-1]) | (owner[1:] != owner[:-1])
            supporting += np.bincount(e_[first], minlength=self.domains.size)
        sides = np.bincount(self.scopes.reshape(-1), minlength=self.domains.shape[0])  # members over each variable
        ok = (supporting == np.repeat(sides, width)).reshape(self.domains.shape)
        variables = np.flatnonzero(sides)
        r, c = np.nonzero(self.domains[variables] & ~ok[variables])
        if not r.size:
            return True
        return self._remove(variables[r], c, removed) and self.follow(variables[r], c, removed)

    def follow(self, rows: np.ndarray, cols: np.ndarray, removed) -> bool:
        """Propagate the removal of the values (rows, cols) of the domain matrix (distinct), and of
        those this removes, to the fixpoint; False when a domain empties. `removed` hears of each
        removal."""
        if not self.members:
            return True
        width, flat = self.domains.shape[1], self.domains.reshape(-1)
        gone = rows * width + cols
        while gone.size:
            lost = []
            for side in (0, 1):  # pairs losing this end: their other end, if live, needs another pair
                pairs = self._pairs(side, gone)[0]
                other = self.ends[1 - side][pairs]
                pairs, other = pairs[flat[other]], other[flat[other]]
                mine, which = self._pairs(1 - side, other)  # the pairs of that end...
                mine_ok = (self.owner[mine] == self.owner[pairs][which]) & flat[self.ends[side][mine]]
                supported = np.zeros(len(other), dtype=bool)
                supported[which[mine_ok]] = True  # ...in the same function, with a live partner
                lost.append(other[~supported])
            gone = np.unique(np.concatenate(lost))
            if gone.size and not self._remove(gone // width, gone % width, removed):
                return False
        return True

    def _remove(self, rows: np.ndarray, cols: np.ndarray, removed) -> bool:
        """Remove these values (distinct) and tell `removed`; False when a domain empties."""
        self.domains[rows, cols] = False
        removed(rows, cols)
        return bool(self.domains[np.unique(rows)].any(axis=1).all())


def _allowed(f: CostFunction, top):
    """A function's allowed tuples (cost below top) as revise reads them: listed, as a tuple of
    index arrays (one per scope variable), when few are allowed (listed tuples with a forbidden
    default; a binary table allowing at most one in 16 of its entries, as a functional
    constraint's), so that a revision costs their number; else the boolean table; None when it allows
    every tuple and so supports every value (cap131's 2,500 facility costs: 0.1 s of revisions saved)."""
    if isinstance(f, TupleFunction) and f.default >= top:
        return tuple(f.tuples[f.costs < top].T)
    table = f.table < top
    if table.all():
        return None
    if table.ndim == 2 and 16 * np.count_nonzero(table) <= table.size:
        return np.nonzero(table)
    return table


def _supported(allowed, live: list[np.ndarray]) -> list[np.ndarray]:
    """For each scope variable, which of its values some allowed tuple over live values supports."""
    if allowed is None:  # every tuple allowed: each live value, unless another domain is empty
        whole = all(m.any() for m in live)
        return [m if whole else np.zeros_like(m) for m in live]
    if isinstance(allowed, tuple):  # listed tuples: those whose values are all live
        alive = np.ones(len(allowed[0]), dtype=bool)
        for t, m in zip(allowed, live):
            alive &= m[t]
        return [np.bincount(t[alive], minlength=m.size) > 0 for t, m in zip(allowed, live)]
    if allowed.ndim == 2:  # read only over the live values
        if live[0].all() and live[1].all():
            return [allowed.any(axis=1), allowed.any(axis=0)]
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


def lower_top(problem: Problem, top: int) -> Problem:
    """The integer problem with every cost >= top forbidden (top <= problem.top): an
    assignment cheaper than top keeps its cost, every other one becomes forbidden."""
    functions = [CostFunction(f.scope, np.minimum(f.table, top)) for f in problem.functions]
    return problem.like(functions, top=top, globals=[replace(g, cost=min(g.cost, top)) for g in problem.globals])
