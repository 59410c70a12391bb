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
from typing import Callable

import numpy as np

from .alldiff import count
from .globals import gac, hard
from .model import Problem
from .preprocess import revise

# AllDifferents over fewer variables stay on the host even with a GPU array module: one propagation
# call per node (the host's matching and bit-packing, then alldiff_kernel's launch) was 0.99-1.58x
# as fast as the CPU peel at 300 variables and 1.35-3.04x at 1000 (H100 against its host's CPU,
# bench/alldiff.py, 2026-11-25).
GPU_MIN_SCOPE = 1000
RESTART_BASE = 64  # failures before the first restart


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


def satisfaction(problem: Problem) -> bool:
    """Every cost 0 or forbidden (constants aside), every global constraint hard."""
    return problem.integer and all(g.cost >= problem.top for g in problem.globals) and all(
        not f.scope or bool(((f.table == 0) | (f.table >= problem.top)).all()) for f in problem.functions)


@dataclass
class MacStats:
    nodes: int = 0
    failures: int = 0
    restarts: int = 0
    complete: bool = False

    def to_json(self) -> dict:
        return {"nodes": self.nodes, "failures": self.failures, "restarts": self.restarts, "complete": self.complete}


class Mac:
    def __init__(self, problem: Problem, should_stop: Callable[[], bool] | None = None, xp=None):
        self.problem, self.xp = problem, xp
        self.should_stop = should_stop or (lambda: False)
        dom = problem.domains
        self.domains = np.zeros((len(dom), max(dom, default=0)), dtype=bool)
        for v, d in enumerate(dom):
            self.domains[v, :d] = True
        self.live = [self.domains[v, :d] for v, d in enumerate(dom)]  # views: updates land in `domains`
        self.watching: dict[int, list[int]] = {}
        for i, f in enumerate(problem.functions):
            for v in f.scope:
                self.watching.setdefault(v, []).append(i)
        self.alldiffs = hard(problem)
        self.touching: dict[int, list[int]] = {}
        for j, g in enumerate(self.alldiffs):
            for v in g.scope:
                self.touching.setdefault(v, []).append(j)
        self.matches: list = [None] * len(self.alldiffs)
        self.allowed: dict = {}  # revise's allowed tuples per table, made once
        self.stats = MacStats()

    def propagate(self, changed) -> bool:
        """Fixpoint of AC-3 and GAC from the variables `changed`; False when a domain empties.
        GAC is idempotent: an AllDifferent runs again only after another constraint changed one of
        its variables."""
        queue = sorted({i for v in changed for i in self.watching.get(v, ())})
        queued = set(queue)
        pending = {j for v in changed for j in self.touching.get(v, ())}
        while True:
            sizes = count(self.domains, 1)
            if not revise(self.problem, self.live, self.watching, queue, queued, self.allowed):
                return False
            pending.update(j for v in np.flatnonzero(count(self.domains, 1) < sizes).tolist()
                           for j in self.touching.get(v, ()))
            if not pending:
                return True
            j = min(pending)
            pending.discard(j)
            g = self.alldiffs[j]
            sizes = count(self.domains, 1)
            self.matches[j] = gac(g, self.domains, self.matches[j], self.xp if len(g.scope) >= GPU_MIN_SCOPE else None)
            if self.matches[j] is None:
                return False
            for v in np.flatnonzero(count(self.domains, 1) < sizes).tolist():
                pending.update(k for k in self.touching.get(v, ()) if k != j)
                for i in self.watching.get(v, ()):
                    if i not in queued:
                        queue.append(i)
                        queued.add(i)

    def run(self) -> list[int] | None:
        """A solution (value index per variable), or None when there is none. Raises Stopped.

        Depth-first search restarted after RESTART_BASE times the Luby sequence's failures (the
        learned weights stay), so that one bad early choice does not trap it: branching on a
        variable with the fewest values left, ties to the one that failed most, then at random;
        its values in random order. Each restart is a complete search from the root, so running
        out of values at the root proves that there is no solution."""
        from .search import Stopped
        if not self.propagate(range(len(self.live))):
            self.stats.complete = True
            return None
        root = self.domains.copy()
        rng = np.random.default_rng(0)
        weight = np.zeros(len(self.live))  # failures of each branching variable
        for run in itertools.count(1):
            stack = []  # per level: (variable, values still to try, removals made by the current value)
            budget = RESTART_BASE * luby(run)
            while True:
                self.stats.nodes += 1
                if self.should_stop():
                    raise Stopped
                sizes = count(self.domains, 1)
                open_ = np.flatnonzero(sizes > 1)
                if not open_.size:
                    self.stats.complete = True
                    return [int(np.flatnonzero(m)[0]) for m in self.live]
                fewest = open_[sizes[open_] == sizes[open_].min()]
                tied = fewest[weight[fewest] == weight[fewest].max()]
                x = int(rng.choice(tied))
                stack.append([x, rng.permutation(np.flatnonzero(self.live[x])).tolist(), None])
                before = self.stats.failures
                while stack:
                    failures = self.stats.failures
                    if self._next_value(stack[-1]):
                        break
                    weight[stack[-1][0]] += self.stats.failures - failures
                    stack.pop()  # every value of this variable failed: back to the one above
                    if stack:
                        self._undo(stack[-1])
                else:
                    self.stats.complete = True
                    return None
                budget -= self.stats.failures - before
                if budget < 0:  # restart
                    self.domains[:] = root
                    self.stats.restarts += 1
                    break

    def _next_value(self, level) -> bool:
        """Try the level's next value until one propagates; False when none is left."""
        x, values, _ = level
        while values:
            a = values.pop(0)
            before = self.domains.copy()
            self.live[x][:] = False
            self.live[x][a] = True
            ok = self.propagate([x])
            level[2] = np.nonzero(before & ~self.domains)
            if ok:
                return True
            self.stats.failures += 1
            self._undo(level)
        return False

    def _undo(self, level) -> None:
        if level[2] is not None:
            self.domains[level[2]] = True
            level[2] = None
