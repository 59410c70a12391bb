"""Generalised arc consistency for AllDifferent (Régin 1994), on the CPU or the GPU.

The constraint is the bipartite graph of variables and values (`dom`, an (n, m) boolean
matrix). A value stays in a domain iff its edge lies in some maximum matching, which by
Berge's theorem is: the edge is in one maximum matching M, or both ends lie in one strongly
connected component of the residual graph, or the edge lies on an alternating path from a
free value. Three steps:

1. `max_matching`: augmenting paths from the previous call's matching (incremental: a search
   node changes few domains), breadth first over all variables at once in array code.
2. The residual graph contracted: a variable and its matched value are one node, plus a sink t
   (edges: x -> y when x can take y's value, x -> t when x can take a free value, t -> every
   variable); the free-value paths then become cycles through t, as in the seed paper.
3. An edge (x, value of y) survives iff y reaches x. Our propagator ("peel") finds the SCCs by
   forward-backward reachability on the bit-packed domains: on the CPU in array code (`peel`),
   on the GPU in one kernel launch (alldiff_kernel.py). Also here for comparison: Tarjan's
   algorithm (linear, Python lists) and the seed paper's transitive closures in array code on
   any device (`closure`: boolean matrix squaring on the tensor cores, or bit-packed Warshall),
   cubic work.

An `AllDifferent` of a problem enters as its variable-value graph (`value_ids`, `id_table`):
`gac` filters the live domains of its scope through it, before planning (preprocess.py) and in
MAC search (`KeptGac` keeps it on the device), and maps the removed edges back to domain indices.
"""
from __future__ import annotations

import functools

import numpy as np

from gpusolve.consistency import alldiff_kernel
from gpusolve.consistency.alldiff_kernel import DeviceDomains
from gpusolve.limits import DEFAULT, Limits
from gpusolve.model.problem import AllDifferent, Infeasible

CLOSURES = ("squaring", "warshall")
METHODS = ("peel", "tarjan", *CLOSURES)


def max_matching(dom: np.ndarray, match: np.ndarray | None = None) -> np.ndarray:
    """A maximum matching covering every variable (value per variable), grown from `match`.

    Raises Infeasible when none covers all variables. Entries of `match` no longer in the
    domains are dropped first, so the previous call's matching can always be passed.
    """
    n, m = dom.shape
    match = np.full(n, -1, dtype=np.int64) if match is None else np.array(match, dtype=np.int64)
    keep = match >= 0
    keep[keep] = dom[np.flatnonzero(keep), match[keep]]
    match[~keep] = -1
    owner = np.full(m, -1, dtype=np.int64)
    owner[match[keep]] = np.flatnonzero(keep)
    free = np.flatnonzero(match < 0)
    if free.size > 1:  # greedy, fewest values first, each on its free value fewest variables can take
        degree = count(dom, 0)
        free = free[np.argsort(count(dom[free], 1), kind="stable")]
    for x in free:
        values = np.flatnonzero(dom[x] & (owner < 0))
        if values.size:
            v = values[degree[values].argmin()] if free.size > 1 else values[0]
            match[x], owner[v] = v, x
    for x in np.flatnonzero(match < 0):
        _augment(dom, match, owner, int(x))
    return match


def _augment(dom, match, owner, x: int) -> None:
    """Breadth-first search for an augmenting path from the free variable x; flip it."""
    n, m = dom.shape
    seen = np.zeros(m, dtype=bool)
    via = np.full(m, -1, dtype=np.int64)  # the variable that reached each value
    frontier = np.array([x])
    while frontier.size:
        reach = dom[frontier] & ~seen  # (|frontier|, m)
        new = np.flatnonzero(reach.any(axis=0))
        if not new.size:
            break
        seen[new] = True
        via[new] = frontier[reach[:, new].argmax(axis=0)]
        free = new[owner[new] < 0]
        if free.size:
            v = int(free[0])
            while v >= 0:  # flip the path back to x
                y = int(via[v])
                prev = int(match[y])
                match[y], owner[v] = v, y
                v = prev
            return
        frontier = owner[new]
    raise Infeasible


def residual(xp, dom, match):
    """Contracted residual adjacency (n+1, n+1) on `xp`, the sink last: x -> y when x can take y's
    value, x -> t when x can take a free value, t -> every variable."""
    n, m = dom.shape
    free = xp.ones(m, dtype=bool)
    free[match] = False
    adj = xp.zeros((n + 1, n + 1), dtype=bool)
    adj[:n, :n] = xp.take(dom, match, axis=1)  # take: 5x faster than dom[:, match] on the host
    adj[:n, n] = (dom & free).any(axis=1)
    adj[n, :n] = True
    return adj


def filter_domains(dom: np.ndarray, match: np.ndarray | None = None, xp=None,
                   method: str = "peel", limits: Limits = DEFAULT) -> tuple[np.ndarray, np.ndarray]:
    """(the GAC-filtered domains, the matching); see `removals`. Raises Infeasible."""
    dom = np.asarray(dom, dtype=bool)
    (rows, cols), match = removals(dom, match, xp, method, limits)
    out = dom.copy()
    out[rows, cols] = False
    return out, match


def removals(dom: np.ndarray, match: np.ndarray | None = None, xp=None, method: str = "peel",
             limits: Limits = DEFAULT) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray]:
    """((rows, columns) of the edges GAC removes, the matching), on the host. The matching stays
    on the host; the SCCs are found by `method` on the array module `xp` (numpy without it):
    "peel" (`peel` below on the host; on a device, alldiff_kernel's one launch where `limits` let it
    fit), "tarjan" (host only), or the closures "squaring" / "warshall" (array code, as in the seed).
    Raises Infeasible."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r} (choose {', '.join(METHODS)})")
    xp = np if xp is None else xp
    if method == "tarjan" and xp is not np:
        raise ValueError("tarjan runs on the host only")
    n, m = dom.shape
    if n == 0:
        return (np.zeros(0, np.int64), np.zeros(0, np.int64)), np.zeros(0, dtype=np.int64)
    match = max_matching(dom, match)
    if method == "peel":
        words = pack(np, dom)
        if xp is not np and alldiff_kernel.fits(n, m, limits):  # one launch on the device
            return alldiff_kernel.removals_gpu(xp, words, match, m, limits), match
        return crossing(dom, words, match, peel(dom, match, words, limits)[:n]), match  # wider: the host
    if xp is np:
        d, mt = dom, match
    else:  # bit-packed upload (8x fewer bytes), unpacked on the device
        words = xp.asarray(pack(np, dom))
        d, mt = unpack(xp, words, m), xp.asarray(match)
    adj = residual(xp, d, mt)
    if method == "tarjan":
        comp = scc(adj)
        kept = comp[:n, None] == comp[None, :n]  # kept[x, y]: x and y in one SCC (x -> y is an edge)
    else:
        kept = closure(xp, adj, method)[:n, :n].T  # kept[x, y]: y reaches x
    removed = xp.zeros((n, m), dtype=bool)
    removed[:, mt] = adj[:n, :n] & ~kept
    gone = removed.nonzero()
    return (gone if xp is np else (xp.asnumpy(gone[0]), xp.asnumpy(gone[1]))), match


def crossing(dom, words, match, label):
    """(rows, columns) of the edges from a variable to a value matched in another SCC: the removed
    ones. A variable of the largest SCC is looked at only on the values matched outside it, and
    only if it has one (one AND of the packed domains); the others value by value."""
    lab_val = np.full(dom.shape[1], -1, dtype=np.int64)  # free values: -1, never removed
    lab_val[match] = label
    big = np.bincount(label).argmax()
    in_big = label == big
    bad = (lab_val >= 0) & (lab_val != big)
    cols = np.flatnonzero(bad)
    rows = np.flatnonzero(in_big & (words & pack(np, bad[None, :])).any(axis=1))
    r, c = np.take(dom[rows], cols, axis=1).nonzero()
    out = np.flatnonzero(~in_big)
    r2, c2 = (dom[out] & (lab_val[None, :] >= 0) & (lab_val[None, :] != label[out, None])).nonzero()
    return np.concatenate([rows[r], out[r2]]), np.concatenate([cols[c], c2])


def peel(dom, match, words, limits: Limits = DEFAULT):
    """SCC label of each node of the contracted residual graph (variables 0..n-1, the sink n),
    without building it: forward-backward reachability (Fleischer, Hendrickson, Pinar 2000).

    The sink reaches every variable, so its SCC is the set of variables that reach a free value
    (one backward search). A variable with no edge to another variable left is an SCC of its own
    (trimmed, repeatedly: an assigned variable first). Then up to limits.peel_pivots times: from the
    variable with the largest domain left, its SCC is what it reaches forwards and backwards within
    the nodes left, until one is smaller than limits.peel_small. A level of a
    forward search ORs the domain rows of the frontier; a backward one ANDs the bit-packed domains
    (`words`) with the frontier's matched values. Dense work per level, few levels when most
    nodes share a giant SCC (a node early in search). The rest, once the SCCs found get small, goes
    to Tarjan. Host only: on a device alldiff_kernel runs the same searches in one kernel."""
    n, m = dom.shape
    label = np.full(n + 1, -1, dtype=np.int64)
    vals = np.zeros(m, dtype=bool)

    def back(frontier, within):  # variables in `within` with an edge into `frontier`
        vals[:] = False
        vals[match] = frontier
        return (words & pack(np, vals[None, :])).any(axis=1) & within

    def forth(frontier, within):
        return dom[np.flatnonzero(frontier)].any(axis=0)[match] & within

    def trim(left):  # label and drop the variables of `left` with no edge to another one of `left`
        one = np.uint64(1)
        while True:
            vals[:] = False
            vals[match] = left
            out = words & pack(np, vals[None, :])  # own value always set: alone iff one bit in all
            alone = left & ~(((out & (out - one)) != 0).any(axis=1) | ((out != 0).sum(axis=1) > 1))
            if not bool(alone.any()):
                return left
            label[:n][alone] = n + 1 + np.flatnonzero(alone)
            left = left & ~alone

    def reach(start, step, within):
        seen = frontier = start
        while True:
            frontier = step(frontier, within) & ~seen
            if not bool(frontier.any()):
                return seen
            seen = seen | frontier

    everyone = np.ones(n, dtype=bool)
    free = np.ones(m, dtype=bool)
    free[match] = False
    sink = reach((words & pack(np, free[None, :])).any(axis=1), back, everyone)
    label[:n][sink] = n
    label[n] = n
    left = trim(~sink)
    sizes = count(dom, 1).astype(np.int64)
    for _ in range(limits.peel_pivots):
        if not bool(left.any()):
            return label
        pivot = int(np.argmax(np.where(left, sizes, -1)))
        start = np.zeros(n, dtype=bool)
        start[pivot] = True
        comp = reach(start, forth, left) & reach(start, back, left)
        label[:n][comp] = pivot
        left = trim(left & ~comp)
        if int(comp.sum()) < limits.peel_small:
            break
    rest = np.flatnonzero(left)
    if rest.size:
        label[rest] = 2 * n + 1 + scc(np.take(dom[rest], match[rest], axis=1))
    return label


def closure(xp, adj, kind: str = "squaring"):
    """Reflexive transitive closure of a boolean adjacency matrix, in array code on `xp`."""
    if kind not in CLOSURES:
        raise ValueError(f"unknown closure {kind!r} (choose {', '.join(CLOSURES)})")
    size = adj.shape[0]
    eye = xp.eye(size, dtype=bool)
    if kind == "warshall":
        return unpack(xp, warshall_packed(xp, pack(xp, adj | eye)), size)
    # Path lengths double per product. Entries are 0/1 again after each product, so a product entry
    # counts at most `size` paths: float16 (tensor cores) holds that exactly below 2048 and at worst
    # rounds it (or overflows to inf) above, never to zero; the host has no fast float16 product.
    dtype = xp.float16 if xp is not np else xp.float32
    reach = (adj | eye).astype(dtype)
    for _ in range(max(int(size).bit_length(), 1)):
        nxt = (reach @ reach) > 0
        if bool((nxt == (reach > 0)).all()):
            break
        reach = nxt.astype(dtype)
    return reach > 0


def count(mat, axis: int):
    """True entries of a boolean matrix along `axis` (a uint8 sum: 4x faster than count_nonzero
    along columns on the host)."""
    return mat.view(np.uint8).sum(axis=axis, dtype=np.uint16 if mat.shape[axis] < 1 << 16 else np.int64)


def pack(xp, mat):
    """Rows of a boolean matrix as uint64 words (bit j of word w = column 64 w + j)."""
    rows, cols = mat.shape
    words = (cols + 63) // 64
    if xp is np:  # packbits: little bit order, little-endian words: the same layout
        out = np.zeros((rows, words * 8), dtype=np.uint8)
        out[:, :(cols + 7) // 8] = np.packbits(mat, axis=1, bitorder="little")
        return out.view("<u8")
    padded = xp.zeros((rows, words * 64), dtype=xp.uint64)
    padded[:, :cols] = mat
    shifts = xp.arange(64, dtype=xp.uint64)
    return (padded.reshape(rows, words, 64) << shifts).sum(axis=2, dtype=xp.uint64)


def unpack(xp, packed, cols: int):
    """`pack`'s inverse, byte by byte (little-endian words): a temporary of one byte per bit."""
    octets = xp.ascontiguousarray(packed).view(xp.uint8)
    bits = (octets[:, :, None] >> xp.arange(8, dtype=xp.uint8)) & xp.uint8(1)
    return bits.reshape(packed.shape[0], -1)[:, :cols].astype(bool)


def warshall_packed(xp, rows):
    """Warshall on bit-packed rows: for each pivot k, every row reaching k takes k's row."""
    rows = rows.copy()
    one = xp.uint64(1)
    for k in range(rows.shape[0]):
        has_k = (rows[:, k // 64] >> xp.uint64(k % 64)) & one  # 0 or 1 per row
        rows |= has_k[:, None] * rows[k][None, :]
    return rows


def scc(adj: np.ndarray) -> np.ndarray:
    """Strongly connected component id of every node (iterative Tarjan over adjacency lists)."""
    size = adj.shape[0]
    succ = [np.flatnonzero(row).tolist() for row in adj]
    index = [-1] * size
    low = [0] * size
    comp = np.full(size, -1, dtype=np.int64)
    on_stack = [False] * size
    stack: list[int] = []
    counter = ncomp = 0
    for root in range(size):
        if index[root] >= 0:
            continue
        work = [(root, 0)]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack[root] = True
        while work:
            v, i = work[-1]
            edges = succ[v]
            while i < len(edges):
                w = edges[i]
                i += 1
                if index[w] < 0:
                    work[-1] = (v, i)
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack[w] = True
                    work.append((w, 0))
                    break
                if on_stack[w] and index[w] < low[v]:
                    low[v] = index[w]
            else:
                work.pop()
                if work and low[v] < low[work[-1][0]]:
                    low[work[-1][0]] = low[v]
                if low[v] == index[v]:
                    while True:
                        w = stack.pop()
                        on_stack[w] = False
                        comp[w] = ncomp
                        if w == v:
                            break
                    ncomp += 1
    return comp


def brute_force_gac(dom: np.ndarray) -> np.ndarray:
    """GAC by enumerating every injective assignment: the reference for tests (tiny inputs)."""
    n, m = dom.shape
    out = np.zeros_like(dom)

    def extend(x: int, used: list[int]) -> bool:
        if x == n:
            for y, v in enumerate(used):
                out[y, v] = True
            return True
        found = False
        for v in np.flatnonzero(dom[x]):
            if v not in used:
                found |= extend(x + 1, used + [int(v)])
        return found

    extend(0, [])
    return out


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
        method: str = "peel", removed=None, limits: Limits = DEFAULT) -> np.ndarray | None:
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
        (r, c), sub = removals(dom[rows] if alone.any() else dom, None if match is None else match[rows], xp,
                               method, limits)
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

    def __init__(self, g: AllDifferent, cp, variables: int, limits: Limits = DEFAULT):
        self.g, self.cp, self.device, self.limits = g, cp, None, limits
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
                self.device = DeviceDomains(self.cp, pack(np, dom), dom.shape[1], match, limits=self.limits)
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

