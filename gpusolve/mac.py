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

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .globals import gac, hard
from .model import Problem
from .preprocess import revise

# AllDifferents over fewer variables stay on the host even with a GPU array module: below 300-400
# variables the seed paper's GPU propagator lost to the CPU's linear-time SCCs.
GPU_MIN_SCOPE = 300


def satisfaction(problem: Problem) -> bool:
    """Every cost 0 or forbidden (constants aside), every global constraint hard."""
    return problem.integer and all(g.cost >= problem.top for g in problem.globals) and all(
        not f.scope or bool(((f.table == 0) | (f.table >= problem.top)).all()) for f in problem.functions)


@dataclass
class MacStats:
    nodes: int = 0
    failures: int = 0
    complete: bool = False

    def to_json(self) -> dict:
        return {"nodes": self.nodes, "failures": self.failures, "complete": self.complete}


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
        self.stats = MacStats()

    def propagate(self, changed) -> bool:
        """Fixpoint of AC-3 and GAC from the variables `changed`; False when a domain empties."""
        queue = sorted({i for v in changed for i in self.watching.get(v, ())})
        queued = set(queue)
        while True:
            if not revise(self.problem, self.live, self.watching, queue, queued):
                return False
            sizes = self.domains.sum(axis=1)
            for j in sorted({j for v in changed for j in self.touching.get(v, ())}):
                g = self.alldiffs[j]
                self.matches[j] = gac(g, self.live, self.matches[j], self.xp if len(g.scope) >= GPU_MIN_SCOPE else None)
                if self.matches[j] is None:
                    return False
            changed = np.flatnonzero(self.domains.sum(axis=1) < sizes).tolist()
            if not changed:
                return True
            queue.extend({i for v in changed for i in self.watching.get(v, ())})
            queued.update(queue)

    def run(self) -> list[int] | None:
        """A solution (value index per variable), or None when there is none. Raises Stopped."""
        from .search import Stopped
        if not self.propagate(range(len(self.live))):
            self.stats.complete = True
            return None
        stack = []  # per level: (variable, values still to try, removals made by the current value)
        while True:
            self.stats.nodes += 1
            if self.should_stop():
                raise Stopped
            sizes = self.domains.sum(axis=1)
            open_ = np.flatnonzero(sizes > 1)
            if not open_.size:
                self.stats.complete = True
                return [int(np.flatnonzero(m)[0]) for m in self.live]
            x = int(open_[np.argmin(sizes[open_])])
            stack.append([x, np.flatnonzero(self.live[x]).tolist(), None])
            while stack:
                if self._next_value(stack[-1]):
                    break
                stack.pop()  # every value of this variable failed: back to the one above
                if stack:
                    self._undo(stack[-1])
            else:
                self.stats.complete = True
                return None

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
