"""Row pruning inside bucket elimination: a lower bound on what the tables outside a computation add."""
from __future__ import annotations

import math
import numbers
from typing import Sequence

from .dense import host_or_table
from .sparse import Keep, SparseTable, compose, lookup, module_of, segment_min, to_dense, to_module

# RestBound keeps a projection as a dense array when it has at most this many entries.
DENSE_TERM = 1 << 20


class RestBound:
    """Lower bounds on what the tables outside a computation add to a row.

    The objective is the sum of the active tables (original functions not yet
    in a bucket, messages not yet consumed, the zero-arity constants); they
    sum disjoint sets of cost functions. So a row over X extends to no
    assignment cheaper than its cost plus, for every active table, that
    table's minimum given the row's values (its min-projection onto the
    shared variables; its global minimum when they share none). A row whose
    bound reaches top is dropped. With top lowered to an incumbent's cost
    this is branch-and-bound pruning inside bucket elimination. Tables in
    host memory are projected there; a projection too large to keep dense
    is then left out, which only weakens the bound.
    """

    def __init__(self, xp, domains: Sequence[int], top):
        self.xp, self.dom, self.top = xp, list(domains), top
        self.active: dict[object, tuple[object, tuple[int, ...]]] = {}
        # variable -> keys of the active tables over it: a filter projects only the tables over its
        # variables and adds the others' minima (SPOT5 505: ~1000 tables, 2241 filters, 18 s of
        # host time when every filter visited every table).
        self.over: dict[int, set] = {}
        self._proj: dict[tuple[int, tuple[int, ...]], tuple[object, object]] = {}

    def add(self, key, table, scope) -> None:
        self.active[key] = (table, tuple(scope))
        for u in scope:
            self.over.setdefault(u, set()).add(key)

    def consume(self, keys) -> None:
        """Tables entering a bucket leave the rest; cached projections of gone tables are dropped."""
        for k in keys:
            gone = self.active.pop(k, None)
            if gone is not None:
                for u in gone[1]:
                    self.over[u].discard(k)
        alive = {id(t) for t, _ in self.active.values()}
        self._proj = {k: v for k, v in self._proj.items() if k[0] in alive}

    def _project(self, table, scope, sub):
        """min-projection of a table onto `sub` (variables of its scope, in sub's order), cached
        per (table, sub): a host number when sub is empty, a dense array when small, else a
        SparseTable (None for one in host memory)."""
        key = (id(table), sub)
        if key in self._proj:
            return self._proj[key][1]
        xp, dims, original = self.xp, tuple(self.dom[u] for u in sub), table
        table = host_or_table(table)
        m = module_of(xp, table.keys if isinstance(table, SparseTable) else table)
        if isinstance(table, SparseTable):
            if sub == table.scope:
                p = table
            else:
                k, c = segment_min(m, table.code(m, sub), table.costs)
                p = SparseTable(sub, dims, k, c)
            if math.prod(dims) <= DENSE_TERM:
                p = to_dense(m, p, self.top, table.costs.dtype)
        else:
            drop = tuple(i for i, u in enumerate(scope) if u not in sub)
            p = table.min(axis=drop) if drop else table
            kept = [u for u in scope if u in sub]
            p = m.transpose(p, [kept.index(u) for u in sub]) if kept != list(sub) else p
            p = m.ascontiguousarray(p)
        if not sub:
            p = p.item()  # one synchronisation per table, not per row filter
        elif m is not xp:
            p = None if isinstance(p, SparseTable) else to_module(xp, p)
        self._proj[key] = (original, p)
        return p

    def _sum(self, terms: list):
        """Saturating sum of projections onto one sub-scope: added in place and saturated once (a
        launch per table, not two and an allocation: about 100 tables per row filter on SPOT5 505)
        where int64 cannot overflow before the saturation (so for floats, whose inf absorbs); else
        saturated after each addition."""
        xp, top = self.xp, self.top
        if len(terms) == 1:
            return terms[0]
        if not isinstance(top, numbers.Integral) or len(terms) * int(top) < 1 << 63:
            out = terms[0] + terms[1]
            for p in terms[2:]:
                out += p
            return xp.minimum(out, top, out=out)
        out = terms[0]
        for p in terms[1:]:
            out = xp.minimum(out + p, top)
        return out

    def keep(self, scope: tuple[int, ...], extra: Sequence[tuple[object, tuple[int, ...]]] = ()) -> Keep:
        """Row filter for rows keyed over `scope`, bounding the active tables plus `extra`."""
        xp, top = self.xp, self.top
        touching = set().union(*(self.over.get(u, ()) for u in scope))
        const, over = 0, []
        for k, (table, s) in self.active.items():  # the tables over none of scope's variables: their minima
            if k in touching:
                over.append((table, s))
            else:
                const = min(const + self._project(table, s, ()), top)  # cached after the first filter
        dense: dict[tuple[int, ...], object] = {}
        sparse = []
        for table, s in over + list(extra):
            sub = tuple(u for u in scope if u in s)
            p = self._project(table, s, sub)
            if not sub:  # the table's minimum
                const = min(const + p, top)
            elif p is None:
                continue
            elif isinstance(p, SparseTable):
                sparse.append((sub, p))
            else:
                dense.setdefault(sub, []).append(p)
        dense = {sub: self._sum(terms) for sub, terms in dense.items()}
        holding: dict[int, list] = {}  # variable -> dense terms over it, in insertion order
        for b in dense:
            for u in b:
                holding.setdefault(u, []).append(b)
        for sub in sorted(dense, key=len):  # fold a term into a dense term over more variables
            big = next((b for b in holding[sub[0]] if len(b) > len(sub) and set(sub) <= set(b)), None)
            if big is not None:
                shape = [self.dom[u] if u in sub else 1 for u in big]
                dense[big] = xp.minimum(dense[big] + dense.pop(sub).reshape(shape), top)
        terms = [(sub, p.reshape(-1)) for sub, p in dense.items()] + sparse
        terms = [([scope.index(u) for u in sub], [self.dom[u] for u in sub], p) for sub, p in terms]

        def keep(digs, costs):
            lb = xp.minimum(costs + const, top)  # saturated before a term adds (int64: 2 top < 2^63)
            for pos, dims, p in terms:
                code = compose(xp, [digs[i] for i in pos], dims, costs.shape[0])
                lb += p[code] if not isinstance(p, SparseTable) else lookup(xp, p, code, top)
                xp.minimum(lb, top, out=lb)
            return lb < top
        return keep
