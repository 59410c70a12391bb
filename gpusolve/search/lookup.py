"""The problem's functions and a mini-bucket heuristic over a pseudo tree, compiled into flat lookups.

The heuristic comes from one MBE(z) run on the same order (any engine; the
messages are read on the host). A message made in the bucket of Y and placed
in the bucket of P crosses every pseudo-tree edge on the path from Y up to P:
it belongs to the heuristic h(C) of every C on that path. At an OR node X
all of X's bucket functions and the heuristics of X's children are looked
up for every value of X at once: one gather from a pool holding every table
flat, so a node costs a few array operations whatever its number of tables.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpusolve.model.problem import Problem
from gpusolve.order.pseudo_tree import PseudoTree
from gpusolve.plan.buckets import Plan


@dataclass
class Heuristic:
    """Mini-bucket messages of one MBE run on the host, with the plan that made them."""

    plan: Plan
    messages: dict[int, np.ndarray]  # mini-bucket index -> dense message (scope: plan's mb.scope)

    @classmethod
    def from_run(cls, plan: Plan, engine, messages: dict) -> "Heuristic":
        if plan.sparse:
            raise ValueError("the search heuristic needs a plan of dense tables")
        return cls(plan, {i: np.asarray(engine.get(m)) for i, m in messages.items()})


@dataclass
class Lookup:
    """Everything an OR node of one variable gathers, as flat index arithmetic into the pool."""

    anc: np.ndarray  # ancestor variables read
    strides: np.ndarray  # (len(anc), rows): stride of each ancestor in each row's table
    offset: np.ndarray  # (rows,) start of each row's table in the pool
    xstride: np.ndarray  # (rows,) stride of the variable itself (0: not in the table)
    starts: np.ndarray  # first row of each group: group 0 the bucket's functions, then one per child
    groups: list[int]  # which of (w, child 0, child 1, ...) each start is
    zeros: np.ndarray  # (1 + children, d) zeros: the costs of an empty group

    def __post_init__(self):
        # (rows, d): where each row's table starts plus the offset of each of v's values
        self.xoff = self.offset[:, None] + self.xstride[:, None] * np.arange(self.zeros.shape[1])
        self.empty = not len(self.offset)
        self.complete = len(self.groups) == self.zeros.shape[0]


class FlatHeuristic:
    """At an OR node of v: v's bucket functions and each child's heuristic, for every value of v."""

    def __init__(self, problem: Problem, tree: PseudoTree, heuristic: Heuristic):
        plan, self.dom, self.top = heuristic.plan, problem.domains, problem.top
        tables: list[tuple[np.ndarray, tuple[int, ...]]] = []
        rows: list[list[list[int]]] = [[[] for _ in range(1 + len(tree.children[v]))] for v in range(len(self.dom))]
        child_slot = {c: (v, 1 + k) for v, cs in enumerate(tree.children) for k, c in enumerate(cs)}
        self.constant = 0 if problem.integer else 0.0
        for f in problem.functions:
            if not f.scope:
                self.constant = problem.add(self.constant, f.table[()])
                continue
            first = min(f.scope, key=plan.position.__getitem__)  # the bucket holding f
            tables.append((f.table, f.scope))
            rows[first][0].append(len(tables) - 1)
        self.root_h = {r: (0 if problem.integer else 0.0) for r in tree.roots}
        for mb in plan.minibuckets:
            msg = heuristic.messages[mb.index]
            place = mb.scope[-1] if mb.scope else -1
            if place < 0:  # a constant: part of the heuristic of the root above mb.var
                root = list(tree.path_up(mb.var, -1))[-1]
                self.root_h[root] = problem.add(self.root_h[root], msg[()])
                continue
            tables.append((msg, mb.scope))
            t = len(tables) - 1
            for c in tree.path_up(mb.var, place):
                v, slot = child_slot[c]
                rows[v][slot].append(t)
        dtype = problem.dtype
        # Entries at or above the cap never beat an incumbent: clipping them keeps sums in int64.
        self.pool = np.concatenate([np.asarray(t, dtype=dtype).reshape(-1) for t, _ in tables]) \
            if tables else np.zeros(0, dtype=dtype)
        offsets = np.cumsum([0] + [t.size for t, _ in tables])
        self.lookups = [self._lookup(v, rows[v], tables, offsets) for v in range(len(self.dom))]
        most = max((len(lk.offset) for lk in self.lookups), default=0) + 2
        self.saturating = problem.integer and int(self.top) * most >= (1 << 62)

    def _lookup(self, v: int, groups: list[list[int]], tables, offsets) -> Lookup:
        order = [(g, t) for g, ts in enumerate(groups) for t in ts]
        anc = sorted({u for _, t in order for u in tables[t][1] if u != v})
        pos = {u: i for i, u in enumerate(anc)}
        strides = np.zeros((len(anc), len(order)), dtype=np.int64)
        xstride = np.zeros(len(order), dtype=np.int64)
        for r, (_, t) in enumerate(order):
            scope = tables[t][1]
            dims = [self.dom[u] for u in scope]
            s = 1
            for u, d in zip(reversed(scope), reversed(dims)):
                if u == v:
                    xstride[r] = s
                else:
                    strides[pos[u], r] = s
                s *= d
        offset = np.array([offsets[t] for _, t in order], dtype=np.int64)
        present = [g for g in range(len(groups)) if groups[g]]
        starts = np.array([sum(len(groups[h]) for h in range(g)) for g in present], dtype=np.int64)
        return Lookup(np.array(anc, dtype=np.int64), strides, offset, xstride, starts, present,
                      np.zeros((len(groups), self.dom[v]), dtype=self.pool.dtype))

    def evaluate(self, v: int, value: np.ndarray) -> np.ndarray:
        """(1 + children, d) costs: row 0 the bucket functions of v, row 1+k child k's heuristic.

        Sums are not clipped at top: they stay below 2^62 (else `saturating`) and are only
        compared with budgets <= top.
        """
        lk = self.lookups[v]
        if lk.empty:
            return lk.zeros
        vals = self.pool[(value[lk.anc] @ lk.strides)[:, None] + lk.xoff] if len(lk.anc) else self.pool[lk.xoff]
        if self.saturating:
            out = lk.zeros.copy()
            bounds = list(lk.starts) + [len(vals)]
            for g, lo, hi in zip(lk.groups, bounds[:-1], bounds[1:]):
                out[g] = self.sum_rows(vals[lo:hi])
            return out
        grouped = np.add.reduceat(vals, lk.starts, axis=0)
        if lk.complete:
            return grouped
        out = lk.zeros.copy()
        out[lk.groups] = grouped
        return out

    def sum_rows(self, rows):
        """The rows' sum, saturating at top where int64 could overflow."""
        if not self.saturating:
            return rows.sum(axis=0)
        acc = rows[0]
        for row in rows[1:]:
            acc = np.minimum(acc + row, self.top)
        return acc
