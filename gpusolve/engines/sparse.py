"""Sparse (incomplete) tables: only the feasible rows, as mixed-radix keys plus costs.

Cuda-BE section IV. Hard constraints make most rows of a bucket table
infeasible (cost >= top); a sparse table stores only the others. A row's key
is the mixed-radix code of its values in scope order, last scope variable
least significant, so a C-order dense table's flat index *is* its key.

Join-sum: code both inputs by their shared variables, sort by that code,
group equal codes (histogram), keep groups present in both, and gather every
pair of a group (output group size = product of input group sizes, offsets by
exclusive prefix sums). Elimination: divide keys by the eliminated variable's
domain (it is the last, least significant, axis), sort, segmented minimum.
Every step is whole-array `xp` code, so NumPy and CuPy run the same lines.

`RestBound` adds pruning: a row is also dropped when its cost plus a lower
bound of the rest of the objective reaches top.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from .. import plan as sizes  # CHUNK_ROWS and KEY_LIMIT, read at call time (tests shrink the chunk)

# RestBound keeps a projection as a dense array when it has at most this many entries.
DENSE_TERM = 1 << 20

Keep = Callable[[list, object], object]  # (digits per scope position, costs) -> mask of rows to keep


class KeyOverflow(ValueError):
    """The scope's mixed-radix code needs more than 63 bits: this table must stay dense."""


class SparseOverflow(MemoryError):
    """A sparse table would hold more rows than the plan's row limit."""


def key_fits(dims: Sequence[int]) -> bool:
    return math.prod(dims) <= sizes.KEY_LIMIT


def strides(dims: Sequence[int]) -> tuple[int, ...]:
    """Place values of the mixed-radix digits, last one 1."""
    out, s = [], 1
    for d in reversed(dims):
        out.append(s)
        s *= d
    return tuple(reversed(out))


def recode_keys(xp, keys, scope: Sequence[int], dims: Sequence[int], sub: Sequence[int]):
    """Keys over `scope` -> codes over `sub` (any variables of scope, in the order given)."""
    st = strides(dims)
    code = xp.zeros(keys.shape, dtype=xp.int64)
    place = 1
    for u in reversed(sub):
        i = scope.index(u)
        code += (keys // st[i]) % dims[i] * place
        place *= dims[i]
    return code


def digits(keys, dims: Sequence[int]) -> list:
    """Mixed-radix digits of keys, one array per scope position (the first needs no modulo)."""
    out, rest = [None] * len(dims), keys
    for i in range(len(dims) - 1, 0, -1):
        out[i] = rest % dims[i]
        rest = rest // dims[i]
    if dims:
        out[0] = rest
    return out


def compose(xp, digs: Sequence, dims: Sequence[int], n: int):
    """Mixed-radix code of n rows from their digits (the inverse of `digits`)."""
    code = xp.zeros(n, dtype=xp.int64)
    for d, place in zip(digs, strides(dims)):
        code += d * place
    return code


@dataclass
class SparseTable:
    """Feasible rows over `scope`: unique int64 `keys` (sorted ascending) and their `costs`."""

    scope: tuple[int, ...]
    dims: tuple[int, ...]
    keys: object
    costs: object

    def __post_init__(self):
        if not key_fits(self.dims):
            raise KeyOverflow(f"a sparse table over domains {self.dims} needs keys wider than 63 bits")

    @property
    def rows(self) -> int:
        return int(self.keys.shape[0])

    def code(self, xp, sub: Sequence[int], keys=None):
        """Codes of the rows (or of `keys`) over the sub-scope `sub`."""
        return recode_keys(xp, self.keys if keys is None else keys, self.scope, self.dims, sub)


def from_dense(xp, table, scope: tuple[int, ...], top) -> SparseTable:
    """Rows of a dense table with cost < top; C order makes them sorted by key already."""
    flat = table.reshape(-1)
    keys = xp.flatnonzero(flat < top).astype(xp.int64)
    return SparseTable(tuple(scope), tuple(int(d) for d in table.shape), keys, flat[keys])


def to_dense(xp, t: SparseTable, top, dtype):
    out = xp.full(math.prod(t.dims), top, dtype=dtype)
    out[t.keys] = t.costs
    return out.reshape(t.dims)


def lookup(xp, t: SparseTable, keys, top):
    """Costs of the rows with these keys; a missing row costs top."""
    if t.rows == 0:
        return xp.full(keys.shape, top, dtype=t.costs.dtype)
    pos = xp.minimum(xp.searchsorted(t.keys, keys), t.rows - 1)
    return xp.where(t.keys[pos] == keys, t.costs[pos], top)


def slice_over(xp, table, scope: tuple[int, ...], var: int, value: Sequence[int], top):
    """Costs of `table` (dense array or SparseTable) for each value of `var`, other variables
    fixed by `value`: the one lookup the value-assignment phase needs for both table kinds."""
    if not isinstance(table, SparseTable):
        return table[tuple(slice(None) if u == var else value[u] for u in scope)]
    st = strides(table.dims)
    base = sum(value[u] * s for u, s in zip(scope, st) if u != var)
    i = scope.index(var)
    keys = base + xp.arange(table.dims[i], dtype=xp.int64) * st[i]
    return lookup(xp, table, keys, top)


def scalar(engine, table, top):
    """The cost held by a zero-variable message (dense 0-d array or SparseTable), on the host."""
    if isinstance(table, SparseTable):
        table = table.costs[0] if table.rows else engine.xp.asarray(top, dtype=table.costs.dtype)
    return engine.get(table)[()]


def _groups(xp, sorted_codes):
    """Distinct codes, first index and size of each run of a sorted code array (the histogram)."""
    n = sorted_codes.shape[0]
    if n == 0:
        empty = xp.zeros(0, dtype=xp.int64)
        return empty, empty, empty
    new = xp.ones(n, dtype=bool)
    new[1:] = sorted_codes[1:] != sorted_codes[:-1]
    starts = xp.flatnonzero(new).astype(xp.int64)
    sizes = xp.diff(xp.concatenate([starts, xp.asarray([n], dtype=xp.int64)]))
    return sorted_codes[starts], starts, sizes


def _exclusive_cumsum(xp, a):
    out = xp.zeros(a.shape[0] + 1, dtype=xp.int64)
    xp.cumsum(a, out=out[1:])
    return out


@dataclass
class JoinIndex:
    """Matched groups of two inputs sorted by their shared code: who pairs with whom."""

    a_rows: object  # input rows in shared-code order (indices into the input arrays)
    b_rows: object
    a_start: object  # per matched group: first position in a_rows / b_rows, a's group size
    a_size: object
    b_start: object
    out_start: object  # exclusive prefix sum of the output group sizes (one more entry: the total)

    @property
    def total(self) -> int:
        return int(self.out_start[-1])


def join_index(xp, a: SparseTable, b: SparseTable) -> JoinIndex:
    """Sort both inputs by the shared variables' code, histogram, keep groups found in both."""
    shared = [u for u in a.scope if u in b.scope]
    ca, cb = a.code(xp, shared), b.code(xp, shared)
    oa, ob = xp.argsort(ca), xp.argsort(cb)
    ga, sa, ha = _groups(xp, ca[oa])
    gb, sb, hb = _groups(xp, cb[ob])
    if gb.shape[0] == 0:
        ga, sa, ha = gb, sb, hb
    pos = xp.minimum(xp.searchsorted(gb, ga), max(gb.shape[0] - 1, 0))
    pa = xp.flatnonzero(gb[pos] == ga)
    pb = pos[pa]
    return JoinIndex(oa, ob, sa[pa], ha[pa], sb[pb], _exclusive_cumsum(xp, ha[pa] * hb[pb]))


def join_chunks(xp, a: SparseTable, b: SparseTable, scope: tuple[int, ...], dims: tuple[int, ...],
                top, keep: Keep | None = None, check: Callable[[], None] | None = None):
    """Yield the join-sum of a and b over `scope` as (keys, costs) chunks of rows below top
    (and passing `keep`).

    Output row i of group g pairs a's row g_a + t % |g_a| with b's row g_b +
    t // |g_a| (t = i - offset of g), the gather of Cuda-BE's Algorithm 4; a
    chunk is a range of CHUNK_ROWS output rows, so a group may span chunks.
    Keys within a chunk are not sorted.
    """
    ix = join_index(xp, a, b)
    step = sizes.CHUNK_ROWS
    for lo in range(0, ix.total, step):
        if check is not None:
            check()
        i = xp.arange(lo, min(lo + step, ix.total), dtype=xp.int64)
        g = xp.searchsorted(ix.out_start, i, side="right") - 1
        t = i - ix.out_start[g]
        ra = ix.a_rows[ix.a_start[g] + t % ix.a_size[g]]
        rb = ix.b_rows[ix.b_start[g] + t // ix.a_size[g]]
        costs = a.costs[ra] + b.costs[rb]  # both < top <= MAX_TOP: no overflow
        rows = xp.flatnonzero(costs < top)
        da = dict(zip(a.scope, digits(a.keys[ra[rows]], a.dims)))
        db = dict(zip(b.scope, digits(b.keys[rb[rows]], b.dims)))
        digs = [da[u] if u in da else db[u] for u in scope]
        costs = costs[rows]
        if keep is not None:
            mask = keep(digs, costs)
            digs, costs = [d[mask] for d in digs], costs[mask]
        yield compose(xp, digs, dims, costs.shape[0]), costs


def segment_min(xp, codes, costs):
    """Sorted distinct codes and the minimum cost of each.

    NumPy: sort by code, histogram, minimum.reduceat. CuPy's reduceat only
    adds, so there: sort by cost, then by code (CuPy's sorts are stable), and
    each group's first row holds its minimum.
    """
    if xp is np:
        order = xp.argsort(codes)
        distinct, starts, _ = _groups(xp, codes[order])
        costs = costs[order]
        return distinct, xp.minimum.reduceat(costs, starts) if distinct.shape[0] else costs[:0]
    order = xp.argsort(costs)
    order = order[xp.argsort(codes[order])]
    distinct, starts, _ = _groups(xp, codes[order])
    return distinct, costs[order[starts]]


def _collect(xp, chunks, dtype, row_limit: int | None, what: str, reduce: Callable | None = None):
    """Concatenate (keys, costs) chunks, each reduced by `reduce` first; SparseOverflow past row_limit."""
    keys, costs, rows = [], [], 0
    for k, c in chunks:
        if reduce is not None:
            k, c = reduce(k, c)
        rows += int(k.shape[0])
        if row_limit is not None and rows > row_limit:
            raise SparseOverflow(f"{what} exceeds the row limit of {row_limit:,} rows")
        keys.append(k)
        costs.append(c)
    if not keys:
        return xp.zeros(0, dtype=xp.int64), xp.zeros(0, dtype=dtype)
    return xp.concatenate(keys), xp.concatenate(costs)


def join(xp, a: SparseTable, b: SparseTable, scope: tuple[int, ...], dims: tuple[int, ...], top,
         keep: Keep | None = None, row_limit: int | None = None, check=None) -> SparseTable:
    """The join-sum of a and b over `scope` as one sorted table."""
    keys, costs = _collect(xp, join_chunks(xp, a, b, scope, dims, top, keep, check), a.costs.dtype,
                           row_limit, f"a join over {len(scope)} variables")
    order = xp.argsort(keys)
    return SparseTable(tuple(scope), tuple(dims), keys[order], costs[order])


def recode(xp, t: SparseTable, scope: tuple[int, ...], dims: tuple[int, ...]) -> SparseTable:
    """The same rows keyed over a permutation of the scope (sorted again)."""
    if tuple(scope) == t.scope:
        return t
    keys = t.code(xp, scope)
    order = xp.argsort(keys)
    return SparseTable(tuple(scope), tuple(dims), keys[order], t.costs[order])


def join_order(tables: list[SparseTable], dom: Sequence[int]) -> list[SparseTable]:
    """Fewest rows first, then greedily the table whose join is predicted smallest
    (rows_cur * rows_t / dense size of the shared scope: tables adding no variable filter)."""
    rest = sorted(tables, key=lambda t: t.rows)
    order = [rest.pop(0)]
    scope, rows = set(order[0].scope), order[0].rows

    def est(t):
        return rows * t.rows / math.prod(dom[u] for u in t.scope if u in scope)
    while rest:
        best = min(rest, key=est)
        rest.remove(best)
        order.append(best)
        rows = max(est(best), 1)
        scope |= set(best.scope)
    return order


def eliminate_sparse(xp, var: int, sep: tuple[int, ...], inputs: Sequence[tuple[object, tuple[int, ...]]],
                     domains: Sequence[int], top, row_limit: int | None = None,
                     check: Callable[[], None] | None = None, bound: RestBound | None = None) -> SparseTable:
    """Sparse bucket step: join the inputs pairwise, then minimise over `var`.

    The last join is never stored: each chunk of it is reduced at once
    (codes = keys // d_var, since `var` is the last joint axis) and partial
    messages are reduced again when chunks overlap. Dense inputs are
    converted first. Materialised tables (intermediate joins, the message)
    may hold at most `row_limit` rows each; `bound` prunes rows whose cost
    plus the rest of the objective (the bucket's inputs still to join and
    the tables outside the bucket) reaches top.
    """
    joint = tuple(sep) + (var,)
    jdims = tuple(domains[u] for u in joint)
    tables = [t if isinstance(t, SparseTable) else from_dense(xp, t, s, top) for t, s in inputs]
    tables = join_order(tables, domains)
    cur = tables[0]
    for k, t in enumerate(tables[1:-1], 2):
        sub = tuple(u for u in joint if u in cur.scope or u in t.scope)
        dims = tuple(domains[u] for u in sub)
        keep = bound.keep(sub, [(r, r.scope) for r in tables[k:]]) if bound is not None else None
        cur = join(xp, cur, t, sub, dims, top, keep, row_limit, check)
    keep = bound.keep(joint) if bound is not None else None
    if len(tables) == 1:
        cur = recode(xp, cur, joint, jdims)
        mask = keep(digits(cur.keys, jdims), cur.costs) if keep is not None else slice(None)
        chunks = [(cur.keys[mask], cur.costs[mask])]
    else:
        chunks = join_chunks(xp, cur, tables[-1], joint, jdims, top, keep, check)
    keys, costs = _collect(xp, chunks, cur.costs.dtype, row_limit, f"the message of variable {var}",
                           reduce=lambda k, c: segment_min(xp, k // domains[var], c))
    if len(keys) and not bool(xp.all(keys[1:] > keys[:-1])):
        keys, costs = segment_min(xp, keys, costs)  # chunks overlapped
    return SparseTable(tuple(sep), tuple(domains[u] for u in sep), keys, costs)


class RestBound:
    """Lower bounds on what the tables outside a computation add to a row.

    The objective is the sum of the active tables (original functions not yet
    in a bucket, messages not yet consumed, the zero-arity constants); they
    sum disjoint sets of cost functions. So a row over X extends to no
    assignment cheaper than its cost plus, for every active table, that
    table's minimum given the row's values (its min-projection onto the
    shared variables; its global minimum when they share none). A row whose
    bound reaches top is dropped. With top lowered to an incumbent's cost
    this is branch-and-bound pruning inside bucket elimination.
    """

    def __init__(self, xp, domains: Sequence[int], top):
        self.xp, self.dom, self.top = xp, list(domains), top
        self.active: dict[object, tuple[object, tuple[int, ...]]] = {}
        self._proj: dict[tuple[int, tuple[int, ...]], tuple[object, object]] = {}

    def add(self, key, table, scope) -> None:
        self.active[key] = (table, tuple(scope))

    def consume(self, keys) -> None:
        """Tables entering a bucket leave the rest; cached projections of gone tables are dropped."""
        for k in keys:
            self.active.pop(k, None)
        alive = {id(t) for t, _ in self.active.values()}
        self._proj = {k: v for k, v in self._proj.items() if k[0] in alive}

    def _project(self, table, scope, sub):
        """min-projection of a table onto `sub` (variables of its scope, in sub's order):
        a dense array when small, else a SparseTable; cached per (table, sub)."""
        hit = self._proj.get((id(table), sub))
        if hit is not None:
            return hit[1]
        xp, dims = self.xp, tuple(self.dom[u] for u in sub)
        if isinstance(table, SparseTable):
            if sub == table.scope:
                p = table
            else:
                k, c = segment_min(xp, table.code(xp, sub), table.costs)
                p = SparseTable(sub, dims, k, c)
            if math.prod(dims) <= DENSE_TERM:
                p = to_dense(xp, p, self.top, table.costs.dtype)
        else:
            drop = tuple(i for i, u in enumerate(scope) if u not in sub)
            p = table.min(axis=drop) if drop else table
            kept = [u for u in scope if u in sub]
            p = xp.transpose(p, [kept.index(u) for u in sub]) if kept != list(sub) else p
            p = xp.ascontiguousarray(p)
        self._proj[(id(table), sub)] = (table, p)
        return p

    def keep(self, scope: tuple[int, ...], extra: Sequence[tuple[object, tuple[int, ...]]] = ()) -> Keep:
        """Row filter for rows keyed over `scope`, bounding the active tables plus `extra`."""
        xp, top = self.xp, self.top
        const = 0
        dense: dict[tuple[int, ...], object] = {}
        sparse = []
        for table, s in list(self.active.values()) + list(extra):
            sub = tuple(u for u in scope if u in s)
            p = self._project(table, s, sub)
            if not sub:  # a 0-d array: the table's minimum
                const = min(const + p.item(), top)
            elif isinstance(p, SparseTable):
                sparse.append((sub, p))
            else:
                dense[sub] = p if sub not in dense else xp.minimum(dense[sub] + p, top)
        for sub in sorted(dense, key=len):  # fold a term into a dense term over more variables
            big = next((b for b in dense if b != sub and set(sub) <= set(b)), None)
            if big is not None:
                shape = [self.dom[u] if u in sub else 1 for u in big]
                dense[big] = xp.minimum(dense[big] + dense.pop(sub).reshape(shape), top)
        terms = [(sub, p.reshape(-1)) for sub, p in dense.items()] + sparse
        terms = [([scope.index(u) for u in sub], [self.dom[u] for u in sub], p) for sub, p in terms]

        def keep(digs, costs):
            lb = costs + const
            for pos, dims, p in terms:
                code = compose(xp, [digs[i] for i in pos], dims, costs.shape[0])
                lb += p[code] if not isinstance(p, SparseTable) else lookup(xp, p, code, top)
                xp.minimum(lb, top, out=lb)
            return lb < top
        return keep


def eliminate(engine, mb, inputs, domains, top, integer: bool, check=None, op: str = "min",
              bound: RestBound | None = None, row_limit: int | None = None):
    """One mini-bucket, sparse or dense as the plan says; keeps `bound`'s active tables in step.

    A dense mini-bucket gets its sparse inputs expanded to dense tables.
    Sparse tables drop rows at top, which only (min, +) elimination allows.
    """
    if bound is not None:
        bound.consume([("f", i) for i in mb.functions] + [("m", j) for j in mb.messages])
    if mb.sparse:
        if op != "min":
            raise ValueError(f"sparse tables support min elimination only, not {op!r}")
        out = eliminate_sparse(engine.xp, mb.var, mb.scope, inputs, domains, top, row_limit, check, bound)
    else:
        dtype = engine.xp.int64 if integer else engine.xp.float64
        dense = [(to_dense(engine.xp, t, top, dtype) if isinstance(t, SparseTable) else t, s) for t, s in inputs]
        out = engine.eliminate(mb, dense, domains, top, integer, check, op)
    if bound is not None:
        bound.add(("m", mb.index), out, mb.scope)
    return out
