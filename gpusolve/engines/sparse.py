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

`RestBound` (rest_bound.py) adds pruning: a row is also dropped when its cost
plus a lower bound of the rest of the objective reaches top.

Tables larger than the engine's device budget (Cuda-BE section V-B) are
kept in host memory and a bucket that does not fit runs streamed
(`Streamer` in sparse_streamed.py, on the engine's streaming.Pipeline): inputs are sorted by their
shared code in device-sized runs, the runs merged on the device range by
range, then every output chunk uploads only the contiguous input rows of its
groups and comes back sorted, a run of the result merged the same way.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from gpusolve.limits import DEFAULT, Limits
from gpusolve.plan import buckets as sizes
from . import kernels, row_kernels, streaming
from .dense import host_or_table

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
    """Mixed-radix code of n rows from their digits (the inverse of `digits`): a new array. On the
    GPU each operation is a launch, and a row filter composes a code per table per chunk (SPOT5 505:
    58,858 calls), so the first term starts the sum and the last, whose place is 1, adds as it is."""
    if not digs:
        return xp.zeros(n, dtype=xp.int64)
    places = strides(dims)
    code = digs[0] * places[0] if places[0] != 1 else digs[0].astype(xp.int64, copy=True)
    for d, place in zip(digs[1:], places[1:]):
        code += d * place if place != 1 else d
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
    """Costs of the rows with these keys; a missing row costs top (a host table is searched on the host)."""
    m = module_of(xp, t.keys)
    if m is not xp:
        return to_module(xp, lookup(m, t, to_module(m, keys), top))
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


def slice_rows(xp, table, scope: tuple[int, ...], var: int, values, top):
    """slice_over for many assignments at once: `values` (n, variables) -> costs (n, domain of var),
    one flat gather (dense) or one batched key look-up (sparse)."""
    dims = table.dims if isinstance(table, SparseTable) else table.shape
    st = strides(dims)
    i = scope.index(var)
    base = sum((values[:, u] * s for u, s in zip(scope, st) if u != var), xp.zeros(values.shape[0], xp.int64))
    keys = base[:, None] + xp.arange(dims[i], dtype=xp.int64) * st[i]
    if isinstance(table, SparseTable):
        return lookup(xp, table, keys, top)
    return to_module(xp, table).reshape(-1)[keys]


def scalar(engine, table, top):
    """The cost held by a zero-variable message (dense 0-d array or SparseTable), on the host."""
    if isinstance(table, SparseTable):
        return to_module(np, table.costs[:1])[0] if table.rows else table.costs.dtype.type(top)
    return engine.get(table)[()]


def module_of(xp, a):
    """The array module holding `a`, given the engine's module `xp`: NumPy for host arrays, else xp."""
    return np if isinstance(a, np.ndarray) else xp


def to_module(m, a):
    """`a` as an array of module m (copied between host and device when it lives in the other)."""
    if isinstance(a, np.ndarray) == (m is np):
        return a
    return a.get() if m is np else m.asarray(a)


def moved(m, t: SparseTable) -> SparseTable:
    """The table with its rows in module m."""
    keys = to_module(m, t.keys)
    return t if keys is t.keys else SparseTable(t.scope, t.dims, keys, to_module(m, t.costs))


def as_sparse(m, table, scope: tuple[int, ...], top) -> SparseTable:
    """An input (SparseTable, dense array, or an engine's host-kept dense table) as a SparseTable in m."""
    if isinstance(table, SparseTable):
        return moved(m, table)
    return from_dense(m, to_module(m, host_or_table(table)), scope, top)


def groups(xp, sorted_codes):
    """Distinct codes, first index and size of each run of a sorted code array (the histogram).

    What xp.unique(..., return_index=True, return_counts=True) returns, in one pass over the sorted
    codes: unique sorts again, 2.1-9.3x slower with NumPy (bench/unique.py, 1e5-1e7 rows)."""
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

    a_rows: object  # input rows in shared-code order (indices into the input arrays); None: already in that order
    b_rows: object
    a_start: object  # per matched group: first position in a_rows / b_rows, group sizes
    a_size: object
    b_start: object
    b_size: object
    out_start: object  # exclusive prefix sum of the output group sizes (one more entry: the total)

    @property
    def total(self) -> int:
        return int(self.out_start[-1])


def match(xp, ca, cb, oa=None, ob=None) -> JoinIndex:
    """Histogram two sorted code arrays and keep the groups found in both."""
    ga, sa, ha = groups(xp, ca)
    gb, sb, hb = groups(xp, cb)
    if gb.shape[0] == 0:
        ga, sa, ha = gb, sb, hb
    pos = xp.minimum(xp.searchsorted(gb, ga), max(gb.shape[0] - 1, 0))
    pa = xp.flatnonzero(gb[pos] == ga)
    pb = pos[pa]
    return JoinIndex(oa, ob, sa[pa], ha[pa], sb[pb], hb[pb], _exclusive_cumsum(xp, ha[pa] * hb[pb]))


def join_index(xp, a: SparseTable, b: SparseTable) -> JoinIndex:
    """Sort both inputs by the shared variables' code, histogram, keep groups found in both."""
    shared = [u for u in a.scope if u in b.scope]
    ca, cb = a.code(xp, shared), b.code(xp, shared)
    oa, ob = xp.argsort(ca), xp.argsort(cb)
    return match(xp, ca[oa], cb[ob], oa, ob)


def gather(xp, ix: JoinIndex, a: SparseTable, b: SparseTable, lo: int, hi: int, scope, dims, top,
            keep: Keep | None, counted: bool = False, axes=None):
    """Output rows lo..hi-1 of the join as (keys, costs, count), rows at top or failing `keep`
    dropped. `counted`: the one-launch gather may leave the number of rows kept on the device
    (count, a device int64 scalar; the rows past it have the largest key, so they sort last);
    else count is None and the arrays hold the rows kept. `axes`: gather_axes on the device, when
    the caller gathers many chunks of one join.

    Output row i of group g pairs a's row g_a + t % |g_a| with b's row g_b +
    t // |g_a| (t = i - offset of g): the gather of Cuda-BE's Algorithm 4.
    """
    if keep is None and xp is not np and a.costs.dtype.name in GATHER_TYPES:
        return _gather_on_device(xp, ix, a, b, lo, hi, scope, dims, top, counted, axes)
    i = xp.arange(lo, hi, dtype=xp.int64)
    g = xp.searchsorted(ix.out_start, i, side="right") - 1
    t = i - ix.out_start[g]
    ra = ix.a_start[g] + t % ix.a_size[g]
    rb = ix.b_start[g] + t // ix.a_size[g]
    if ix.a_rows is not None:
        ra, rb = ix.a_rows[ra], ix.b_rows[rb]
    costs = a.costs[ra] + b.costs[rb]  # both < top <= MAX_TOP: no overflow
    rows = xp.flatnonzero(costs < top)
    da = dict(zip(a.scope, digits(a.keys[ra[rows]], a.dims)))
    db = dict(zip(b.scope, digits(b.keys[rb[rows]], b.dims)))
    digs = [da[u] if u in da else db[u] for u in scope]
    costs = costs[rows]
    if keep is not None:
        mask = keep(digs, costs)
        digs, costs = [d[mask] for d in digs], costs[mask]
    return compose(xp, digs, dims, costs.shape[0]), costs, None


GATHER_TYPES = {"int64": "i64", "float64": "f64"}  # cost types with one-launch kernels on the GPU


def gather_axes(a: SparseTable, b: SparseTable, scope: tuple[int, ...], dims: tuple[int, ...]) -> np.ndarray:
    """Per output variable, where the one-launch gather reads its digit: (input 0 = a or 1 = b,
    place value in that input's key, its domain, place value in the output key), flat."""
    rows = []
    for u, place in zip(scope, strides(dims)):
        t, src = (a, 0) if u in a.scope else (b, 1)
        i = t.scope.index(u)
        rows.append((src, strides(t.dims)[i], t.dims[i], place))
    return np.asarray(rows, dtype=np.int64).reshape(-1)


def _gather_on_device(xp, ix: JoinIndex, a: SparseTable, b: SparseTable, lo: int, hi: int, scope, dims, top,
                      counted: bool, axes=None):
    """gather in one kernel launch (row_kernels.join_gather_source), then one read of the row count
    unless `counted` (then the keys past it are the largest key, filled first)."""
    mode = GATHER_TYPES[a.costs.dtype.name]
    n = hi - lo
    keys = xp.full(n, np.iinfo(np.int64).max, dtype=xp.int64) if counted else xp.empty(n, dtype=xp.int64)
    costs = xp.empty(n, dtype=a.costs.dtype)
    count = xp.zeros(1, dtype=xp.uint64)
    if n == 0:
        return keys, costs, (count.view(xp.int64) if counted else None)
    indirect = ix.a_rows is not None
    rows_a, rows_b = (ix.a_rows, ix.b_rows) if indirect else (count, count)  # unread without `indirect`
    as64 = [xp.asarray(x, dtype=xp.int64) for x in (ix.a_start, ix.a_size, ix.b_start, ix.out_start)]
    scalar = np.int64 if mode == "i64" else np.float64
    kernels.load(row_kernels.join_gather_source(mode))(row_kernels.grid(n), (256,), (
        a.keys, a.costs, b.keys, b.costs, rows_a, rows_b, np.int32(indirect), *as64, np.int32(as64[0].shape[0]),
        np.int64(lo), np.int64(hi), scalar(top), xp.asarray(gather_axes(a, b, scope, dims)) if axes is None else axes,
        np.int32(len(scope)),
        keys, costs, count))
    if counted:
        return keys, costs, count.view(xp.int64)
    m = int(count.get()[0])
    return keys[:m], costs[:m], None


def join_chunks(xp, a: SparseTable, b: SparseTable, scope: tuple[int, ...], dims: tuple[int, ...],
                top, keep: Keep | None = None, check: Callable[[], None] | None = None, limits: Limits = DEFAULT):
    """Yield the join-sum of a and b over `scope` as (keys, costs) chunks of rows below top
    (and passing `keep`); a chunk is a range of limits.chunk_rows output rows, so a group may
    span chunks. Keys within a chunk are not sorted."""
    ix = join_index(xp, a, b)
    step = limits.chunk_rows
    for lo in range(0, ix.total, step):
        if check is not None:
            check()
        yield gather(xp, ix, a, b, lo, min(lo + step, ix.total), scope, dims, top, keep)[:2]


def segment_min(xp, codes, costs, runs: bool = False, counted: bool = False, limit: int | None = None):
    """Sorted distinct codes and the minimum cost of each (`counted`: on the GPU, as a
    streaming.Counted, their number left on the device: no wait for it; `limit`: the codes are
    below it, and below 2^31 the GPU sorts them as int32, a third faster).

    NumPy: sort by code, histogram, minimum.reduceat; `runs` says the codes
    are concatenated sorted runs, which a stable sort (timsort) merges. CuPy's
    reduceat only adds, so there: sort by code, then one kernel takes each
    run's minimum atomically (int64 and float64 costs; other types sort by
    cost, then by code, CuPy's sorts being stable, and read each group's
    first row).
    """
    if xp is np:
        order = xp.argsort(codes, kind="stable" if runs else None)
        distinct, starts, _ = groups(xp, codes[order])
        costs = costs[order]
        return distinct, xp.minimum.reduceat(costs, starts) if distinct.shape[0] else costs[:0]
    if costs.dtype.name not in GATHER_TYPES or not codes.shape[0]:
        order = xp.argsort(costs)
        order = order[xp.argsort(codes[order])]
        distinct, starts, _ = groups(xp, codes[order])
        return distinct, costs[order[starts]]
    # One sort by code; each run's minimum by row_kernels.segment_min_source.
    order = xp.argsort(codes.astype(xp.int32) if limit is not None and limit <= np.iinfo(np.int32).max else codes)
    codes, costs = codes[order], costs[order]
    del order
    n = codes.shape[0]
    heads = xp.empty(n, dtype=bool)
    heads[:1] = True
    xp.not_equal(codes[1:], codes[:-1], out=heads[1:])
    pos = xp.cumsum(heads, dtype=xp.int64)
    m = n if counted else int(pos[-1])
    largest = np.inf if costs.dtype.kind == "f" else np.iinfo(costs.dtype).max
    distinct, least = xp.empty(m, dtype=xp.int64), xp.full(m, largest, dtype=costs.dtype)
    kernels.load(row_kernels.segment_min_source(GATHER_TYPES[costs.dtype.name]))(
        row_kernels.grid(n), (256,), (codes, costs, pos, np.int64(n), distinct, least))
    return streaming.Counted((distinct, least), pos[-1:]) if counted else (distinct, least)


def by_first(xp, first, *rest, count=None):
    """The arrays stably sorted by the first; with `count` (a device scalar: the rows past it hold
    the largest key, so they stay last) as a streaming.Counted."""
    order = xp.argsort(first, kind="stable")
    arrays = (first[order], *(a[order] for a in rest))
    return arrays if count is None else streaming.Counted(arrays, count)


class DeviceFull(MemoryError):
    """A sparse bucket outgrew the device memory it was given: it runs streamed instead."""


def check_rows(rows: int, row_limit: int | None, what: str) -> None:
    if row_limit is not None and rows > row_limit:
        raise SparseOverflow(f"{what} exceeds the row limit of {row_limit:,} rows")


def _collect(xp, chunks, dtype, row_limit: int | None, what: str, reduce: Callable | None = None,
             device_rows: int | None = None):
    """Concatenate (keys, costs) chunks, each reduced by `reduce` first; SparseOverflow past
    row_limit, DeviceFull past device_rows."""
    keys, costs, rows = [], [], 0
    for k, c in chunks:
        if reduce is not None:
            k, c = reduce(k, c)
        rows += int(k.shape[0])
        check_rows(rows, row_limit, what)
        if device_rows is not None and rows > device_rows:
            raise DeviceFull(what)
        keys.append(k)
        costs.append(c)
    if not keys:
        return xp.zeros(0, dtype=xp.int64), xp.zeros(0, dtype=dtype)
    return xp.concatenate(keys), xp.concatenate(costs)


def join(xp, a: SparseTable, b: SparseTable, scope: tuple[int, ...], dims: tuple[int, ...], top,
         keep: Keep | None = None, row_limit: int | None = None, check=None,
         device_rows: int | None = None, limits: Limits = DEFAULT) -> SparseTable:
    """The join-sum of a and b over `scope` as one sorted table."""
    keys, costs = _collect(xp, join_chunks(xp, a, b, scope, dims, top, keep, check, limits), a.costs.dtype,
                           row_limit, f"a join over {len(scope)} variables", device_rows=device_rows)
    order = xp.argsort(keys)
    return SparseTable(tuple(scope), tuple(dims), keys[order], costs[order])


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
                     check: Callable[[], None] | None = None, bound=None, streamer=None,
                     device_rows: int | None = None,
                     limits: Limits = DEFAULT) -> SparseTable:
    """Sparse bucket step: join the inputs pairwise, then minimise over `var`.

    The last join is never stored: each chunk of it is reduced at once
    (codes = keys // d_var, since `var` is the last joint axis) and partial
    messages are reduced again when chunks overlap. A single input is joined
    with the unit table (no variables, cost 0), which recodes it. Dense
    inputs are converted first. Materialised tables (intermediate joins, the
    message) may hold at most `row_limit` rows each; `bound` prunes rows
    whose cost plus the rest of the objective (the bucket's inputs still to
    join and the tables outside the bucket) reaches top. With a `streamer`
    every table of the bucket stays in host memory, the message too; else
    DeviceFull is raised once more than `device_rows` rows are stored. In memory, joins gather
    limits.chunk_rows rows at a time (a streamer has its own limits).
    """
    joint = tuple(sep) + (var,)
    jdims = tuple(domains[u] for u in joint)
    sep_dims = jdims[:-1]
    m = np if streamer is not None else xp
    tables = join_order([as_sparse(m, t, s, top) for t, s in inputs], domains)
    if len(tables) == 1:
        dtype = tables[0].costs.dtype
        tables.insert(0, SparseTable((), (), m.zeros(1, dtype=m.int64), m.zeros(1, dtype=dtype)))
    cur = tables[0]
    for k, t in enumerate(tables[1:-1], 2):
        sub = tuple(u for u in joint if u in cur.scope or u in t.scope)
        dims = tuple(domains[u] for u in sub)
        keep = bound.keep(sub, [(r, r.scope) for r in tables[k:]]) if bound is not None else None
        if streamer is None:
            cur = join(xp, cur, t, sub, dims, top, keep, row_limit, check, device_rows, limits)
        else:
            by_key = functools.partial(by_first, xp)
            keys, costs = streamer.table(cur, t, sub, dims, top, keep, by_key, by_key, True, row_limit,
                                         f"a join over {len(sub)} variables", check)
            cur = SparseTable(sub, dims, keys, costs)
    keep = bound.keep(joint) if bound is not None else None
    what = f"the message of variable {var}"

    if streamer is None:
        def reduce(k, c):
            return segment_min(xp, k // domains[var], c)
        keys, costs = _collect(xp, join_chunks(xp, cur, tables[-1], joint, jdims, top, keep, check, limits),
                               cur.costs.dtype, row_limit, what, reduce, device_rows)
        if len(keys) and not bool(xp.all(keys[1:] > keys[:-1])):
            keys, costs = segment_min(xp, keys, costs)  # chunks overlapped
    else:  # each chunk sorted by message key, then merged with equal keys reduced, on the device: a
        # chunk's own reduction (a dozen more launches) saved no copy, its rows coming down unreduced (Counted)
        if keep is None:  # the gather composes message keys (the joint key less var's digit)
            scope, dims, by_message = tuple(sep), sep_dims, functools.partial(by_first, xp)
        else:  # the bound reads every joint variable's digit: joint keys, divided by var's domain
            scope, dims = joint, jdims

            def by_message(k, c, count=None):
                return by_first(xp, k // domains[var], c, count=count)
        keys, costs = streamer.table(cur, tables[-1], scope, dims, top, keep, by_message,
                                     functools.partial(segment_min, xp, counted=True, limit=math.prod(sep_dims)),
                                     False, row_limit, what, check)
    return SparseTable(tuple(sep), sep_dims, keys, costs)
