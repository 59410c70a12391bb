"""A first solution of a satisfaction problem: depth-first search maintaining arc consistency (MAC).

For problems whose costs are all 0 or forbidden (N-queens, Langford, Sudoku as AllDifferents),
the first assignment found is optimal and exhausting the search proves infeasibility. Unlike
AND/OR search (a static pseudo tree, and a propagator that sees one variable at a time), every
node here propagates the whole problem to a fixpoint: AC-3 on the tables and Régin's GAC on
each hard AllDifferent (on the GPU when `xp` is CuPy), then branches on a variable with the
fewest values left (first fail). Domains are one boolean matrix; each level records the
values it removed, so backtracking restores them without copying the domains.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from gpusolve.consistency import alldiff_kernel
from gpusolve.consistency.alldiff import (
    KeptGac, count, gac, scope_rows, takers, value_column, value_ids, variable_value_graph
)
from gpusolve.limits import DEFAULT, Limits
from gpusolve.model.problem import AllDifferent, Problem
from gpusolve.consistency.preprocess import PairSupports, revise
from gpusolve.stop import Stop, Stopped



def luby(i: int) -> int:
    """The i-th term (from 1) of the Luby sequence 1 1 2 1 1 2 4 1 1 2 ..."""
    k = 1
    while (1 << k) - 1 < i:
        k += 1
    while i != (1 << k) - 1:
        i -= (1 << (k - 1)) - 1
        k = 1
        while (1 << k) - 1 < i:
            k += 1
    return 1 << (k - 1)


def gac_on_device(problem: Problem, limits: Limits = DEFAULT) -> bool:
    """Whether MAC with a GPU array module would filter some AllDifferent there."""
    return any(_on_device(g, limits) for g in problem.hard_globals)


def _on_device(g: AllDifferent, limits: Limits) -> bool:
    return len(g.scope) >= limits.gpu_min_scope and alldiff_kernel.fits(len(g.scope), value_ids(g)[1], limits)


@dataclass
class MacStats:
    nodes: int = 0
    failures: int = 0
    restarts: int = 0
    complete: bool = False

    def to_json(self) -> dict:
        return {"nodes": self.nodes, "failures": self.failures, "restarts": self.restarts, "complete": self.complete}


class Trail:
    """The (variable, value) pairs removed from the domain matrix, in order: backtracking to a mark
    restores exactly those after it, and the domain sizes follow, so that a node costs what it
    removes, not a copy of the whole matrix."""

    def __init__(self, domains: np.ndarray):
        self.domains = domains
        self.sizes = count(domains, 1).astype(np.int64)
        self.rows: list[np.ndarray] = []
        self.cols: list[np.ndarray] = []
        self.tallies: list[Takers] = []  # kept by each removal and its undo

    def __len__(self) -> int:
        return len(self.rows)

    def record(self, rows, cols) -> None:
        """Removals already made: a variable or one per value index."""
        cols = np.asarray(cols, dtype=np.int64)
        if np.ndim(rows) == 0:
            self.sizes[rows] -= cols.size
            rows = np.full(cols.size, rows, dtype=np.int64)
        else:
            np.subtract.at(self.sizes, rows, 1)
        rows = np.asarray(rows, dtype=np.int64)
        for t in self.tallies:
            t.update(rows, cols, -1)
        self.rows.append(rows)
        self.cols.append(cols)

    def since(self, mark: int) -> tuple[np.ndarray, np.ndarray]:
        """(variables, value indices) removed after `mark`."""
        if mark == len(self.rows):
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        return np.concatenate(self.rows[mark:]), np.concatenate(self.cols[mark:])

    def undo(self, mark: int) -> None:
        rows, cols = self.since(mark)
        self.domains[rows, cols] = True
        np.add.at(self.sizes, rows, 1)
        for t in self.tallies:
            t.update(rows, cols, 1)
        del self.rows[mark:], self.cols[mark:]


class Takers:
    """How many variables of an AllDifferent can take each of its values, kept up to date by the
    trail's removals and undos: dual first fail then reads the value with fewest in one pass over
    the values, not from the whole variable-value graph at every node."""

    def __init__(self, g: AllDifferent, domains: np.ndarray):
        self.g = g
        self.row = scope_rows(g, len(domains))
        self.counts = count(variable_value_graph(g, domains)[1], 0).astype(np.int64)

    def update(self, variables: np.ndarray, values: np.ndarray, sign: int) -> None:
        rows = self.row[variables]
        keep = rows >= 0
        if keep.any():
            np.add.at(self.counts, value_column(self.g, rows[keep], values[keep]), sign)

    def of(self, c: int, domains: np.ndarray) -> np.ndarray:
        """(variable, value index) rows: the variables that can take column c."""
        rows, j = takers(self.g, domains, c)
        return np.stack([np.asarray(self.g.scope)[rows], j], axis=1)


class Mac:
    def __init__(self, problem: Problem, stop: Stop | None = None, xp=None, max_nodes: int | None = None,
                 limits: Limits = DEFAULT):
        self.problem, self.xp, self.limits = problem, xp, limits
        self.stop, self.max_nodes = stop or Stop(), max_nodes
        dom = problem.domains
        self.domains = np.zeros((len(dom), max(dom, default=0)), dtype=bool)
        for v, d in enumerate(dom):
            self.domains[v, :d] = True
        self.live = [self.domains[v, :d] for v, d in enumerate(dom)]  # views: updates land in `domains`
        self.trail = Trail(self.domains)
        self.allowed: dict = {}  # revise's allowed tuples per table, made once
        self.pairs = PairSupports(problem, self.domains, self.allowed)  # propagated by removals
        self.watching: dict[int, list[int]] = {}  # the other tables, revised by AC-3
        members = set(self.pairs.members)
        for i, f in enumerate(problem.functions):
            if i not in members:
                for v in f.scope:
                    self.watching.setdefault(v, []).append(i)
        self.alldiffs = problem.hard_globals
        self.watched = np.zeros(len(dom), dtype=bool)
        self.watched[list(self.watching)] = True
        self.in_scope = [np.zeros(len(dom), dtype=bool) for _ in self.alldiffs]  # per AllDifferent
        for within, g in zip(self.in_scope, self.alldiffs):
            within[list(g.scope)] = True
        self.matches: list = [None] * len(self.alldiffs)
        # AllDifferents filtered on the device: their trail mark at the last call (None: stale)
        self.kept = {j: KeptGac(g, xp, len(dom), limits) for j, g in enumerate(self.alldiffs)
                     if xp is not None and _on_device(g, limits)}
        self.synced: dict[int, int | None] = dict.fromkeys(self.kept)
        # AllDifferents that give each of their values to one variable (as many of both, none shared)
        self.permutations = [Takers(g, self.domains) for g in self.alldiffs
                             if not g.exempt and len(g.scope) == value_ids(g)[1]]
        self.trail.tallies = self.permutations
        self.pair_mark = 0  # the trail's removals before it are followed through self.pairs
        self.stats = MacStats()

    def propagate(self, changed) -> bool:
        """Fixpoint of arc consistency on the tables and GAC from the variables `changed`; False
        when a domain empties. GAC is idempotent: an AllDifferent runs again only after another
        constraint changed one of its variables."""
        queue: list[int] = []
        queued: set[int] = set()
        pending: set[int] = set()
        self._wake(np.asarray(list(changed), dtype=np.int64), queue, queued, pending)
        queue.sort()
        record = self.trail.record
        while True:
            mark = len(self.trail)
            if not revise(self.problem, self.live, self.watching, queue, queued, self.allowed, record):
                return False
            done = len(self.trail)
            if not self.pairs.follow(*self.trail.since(self.pair_mark), record):
                return False
            self.pair_mark = len(self.trail)
            self._wake(self._changed(mark), None, None, pending)  # revise queued its own tables
            self._wake(self._changed(done), queue, queued, None)  # the tables over what the pairs removed
            if queue:
                continue
            if not pending:
                return True
            j = min(pending)
            pending.discard(j)
            mark = len(self.trail)
            if not self._gac(j):
                return False
            self._wake(self._changed(mark), queue, queued, pending, j)

    def _changed(self, mark: int) -> np.ndarray:
        """The variables that lost values after trail `mark`."""
        rows = self.trail.since(mark)[0]
        return np.flatnonzero(np.bincount(rows, minlength=len(self.live))) if rows.size else rows

    def _wake(self, variables: np.ndarray, queue, queued, pending, but: int | None = None) -> None:
        """Queue the tables (AC-3) and mark pending the AllDifferents (other than `but`) over
        these variables."""
        if pending is not None:
            pending.update(j for j, within in enumerate(self.in_scope) if j != but and within[variables].any())
        if queue is not None and self.watching:
            for v in variables[self.watched[variables]].tolist():
                for i in self.watching[v]:
                    if i not in queued:
                        queue.append(i)
                        queued.add(i)

    def _gac(self, j: int) -> bool:
        """GAC on AllDifferent j: kept on the device, or on the host from the last matching."""
        if j in self.kept:
            mark = self.synced[j]
            ok = self.kept[j](self.domains, None if mark is None else self.trail.since(mark), self.trail.record)
            self.synced[j] = len(self.trail)
            return ok
        self.matches[j] = gac(self.alldiffs[j], self.domains, self.matches[j], removed=self.trail.record,
                               limits=self.limits)
        return self.matches[j] is not None

    def run(self) -> list[int] | None:
        """A solution (value index per variable), or None when there is none. Raises Stopped once `stop`
        says so or after `max_nodes` nodes.

        Depth-first search restarted after limits.restart_base times the Luby sequence's failures (the
        learned weights stay), so that one bad early choice does not trap it. It branches on a
        variable with the fewest values left (ties to the one that failed most, then at random),
        its values in random order; or, where fewer variables can take some value that a
        permutation AllDifferent must give one of them (as many values as variables, none
        exempt: Langford's positions, N-queens' rows), on which of them takes it (dual first
        fail, as exact cover's column choice). Each restart is a complete search from the root,
        so running out of choices at the root proves that there is no solution."""
        if not (self.pairs.start(self.trail.record) and self.propagate(range(len(self.live)))):
            self.stats.complete = True
            return None
        root = len(self.trail)
        sizes = self.trail.sizes
        rng = np.random.default_rng(0)
        weight = np.zeros(len(self.live))  # failures of each branching variable
        for run in itertools.count(1):
            stack = []  # per level: [variable or None (a value's level), (variable, value) choices left, trail mark]
            budget = self.limits.restart_base * luby(run)
            while True:
                self.stats.nodes += 1
                self.stop.check()
                if self.max_nodes is not None and self.stats.nodes > self.max_nodes:
                    raise Stopped()
                open_ = np.flatnonzero(sizes > 1)
                if not open_.size:
                    self.stats.complete = True
                    return [int(np.flatnonzero(m)[0]) for m in self.live]
                least = int(sizes[open_].min())
                dual = self._fewest_takers(least)
                if dual is not None:
                    stack.append([None, [(int(y), int(a)) for y, a in rng.permutation(dual)], None])
                else:
                    fewest = open_[sizes[open_] == least]
                    tied = fewest[weight[fewest] == weight[fewest].max()]
                    x = int(rng.choice(tied))
                    stack.append([x, [(x, int(a)) for a in rng.permutation(np.flatnonzero(self.live[x]))], None])
                before = self.stats.failures
                while stack:
                    failures = self.stats.failures
                    if self._next_choice(stack[-1]):
                        break
                    if stack[-1][0] is not None:
                        weight[stack[-1][0]] += self.stats.failures - failures
                    stack.pop()  # every choice of this level failed: back to the one above
                    if stack:
                        self._undo(stack[-1])
                else:
                    self.stats.complete = True
                    return None
                budget -= self.stats.failures - before
                if budget < 0:  # restart
                    self._back(root)
                    self.stats.restarts += 1
                    break

    def _fewest_takers(self, least: int) -> np.ndarray | None:
        """(variable, value index) rows: the variables that can take a value of a permutation
        AllDifferent which fewer than `least` (and more than one) of them can, else None."""
        best = None
        for t in self.permutations:
            counts = np.where(t.counts < 2, least, t.counts)
            c = int(counts.argmin())
            if counts[c] < least:
                least = int(counts[c])
                best = t.of(c, self.domains)
        return best

    def _next_choice(self, level) -> bool:
        """Try the level's next (variable, value) until one propagates; False when none is left."""
        choices = level[1]
        while choices:
            x, a = choices.pop(0)
            level[2] = len(self.trail)
            others = np.flatnonzero(self.live[x])
            others = others[others != a]
            self.live[x][others] = False
            self.trail.record(x, others)
            if self.propagate([x]):
                return True
            self.stats.failures += 1
            self._undo(level)
        return False

    def _undo(self, level) -> None:
        if level[2] is not None:
            self._back(level[2])
            level[2] = None

    def _back(self, mark: int) -> None:
        """Restore the domains as they were at trail `mark`; device copies made after it go stale."""
        self.trail.undo(mark)
        self.pair_mark = min(self.pair_mark, mark)
        for j, synced in self.synced.items():
            if synced is not None and synced > mark:
                self.synced[j] = None
