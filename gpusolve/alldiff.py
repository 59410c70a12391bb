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
3. An edge (x, value of y) survives iff y reaches x. The CPU finds the SCCs by Tarjan's
   algorithm (linear); the GPU computes the transitive closure in array code (`closure`):
   boolean matrix squaring (one matmul per doubling of path length, on the tensor cores) or
   bit-packed Warshall as in the seed. Cubic work, so the CPU wins on small or sparse graphs.
"""
from __future__ import annotations

import numpy as np

CLOSURES = ("squaring", "warshall")


class Infeasible(Exception):
    """No matching covers every variable: the AllDifferent cannot be satisfied."""


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
    for x in np.flatnonzero(match < 0):  # greedy: a free value when there is one
        free = np.flatnonzero(dom[x] & (owner < 0))
        if free.size:
            match[x], owner[free[0]] = free[0], x
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


def residual(dom: np.ndarray, match: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(contracted residual adjacency (n+1, n+1) with the sink last, the free values' mask)."""
    n, m = dom.shape
    free = np.ones(m, dtype=bool)
    free[match] = False
    adj = np.zeros((n + 1, n + 1), dtype=bool)
    adj[:n, :n] = dom[:, match]
    adj[:n, n] = (dom & free).any(axis=1)
    adj[n, :n] = True
    return adj, free


def filter_domains(dom: np.ndarray, match: np.ndarray | None = None, xp=None,
                   closure_kind: str = "squaring") -> tuple[np.ndarray, np.ndarray]:
    """(the GAC-filtered domains, the matching): Tarjan's SCCs on the host without `xp`, else the
    transitive closure on the array module `xp` (numpy or cupy). Raises Infeasible."""
    dom = np.asarray(dom, dtype=bool)
    n, m = dom.shape
    if n == 0:
        return dom.copy(), np.zeros(0, dtype=np.int64)
    match = max_matching(dom, match)
    adj, free = residual(dom, match)
    if xp is None:
        comp = scc(adj)
        kept = comp[:n, None] == comp[None, :n]  # kept[x, y]: x and y in one SCC (x -> y is an edge)
    else:
        kept = xp.asnumpy(reach_back(xp, xp.asarray(adj), closure_kind)) if xp is not np else \
            reach_back(np, adj, closure_kind)
    out = dom & free[None, :]
    out[:, match] |= dom[:, match] & kept
    return out, match


def reach_back(xp, adj, kind: str):
    """(n, n) kept[x, y] = y reaches x, from the closure of the (n+1)-node contracted graph."""
    n = adj.shape[0] - 1
    reach = closure(xp, adj, kind)
    return reach[:n, :n].T


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


def pack(xp, mat):
    """Rows of a boolean matrix as uint64 words (bit j of word w = column 64 w + j)."""
    rows, cols = mat.shape
    words = (cols + 63) // 64
    padded = xp.zeros((rows, words * 64), dtype=xp.uint64)
    padded[:, :cols] = mat
    shifts = xp.arange(64, dtype=xp.uint64)
    return (padded.reshape(rows, words, 64) << shifts).sum(axis=2, dtype=xp.uint64)


def unpack(xp, packed, cols: int):
    shifts = xp.arange(64, dtype=xp.uint64)
    bits = (packed[:, :, None] >> shifts) & xp.uint64(1)
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
