"""Coalition structure generation (CSG): the best partition of n agents, by dynamic programming over subsets.

A coalition structure is a partition of all agents, worth the sum of its
coalitions' values (gpusolve.csg.values); we maximise. The DP (Yeh 1986; Rothkopf et al. 1998), as
GPU-CSG parallelises it: for coalitions by increasing size k,

    f(C) = max(v(C), max over splits C = A + B of f(A) + f(B)),

each unordered split once (A is a nonempty subset of C without its highest
agent, B the rest). Every f(C) is the value of some partition of C at all
times, so a stopped DP still yields structures and bounds (`--time-limit`).

IDP (Rahwan & Jennings 2008) evaluates a split of C != N into parts of sizes
a <= b only when a + 2b <= n (hence no coalition of more than 2n/3 agents
below the grand coalition is split at all), and every split of N: the
optimal structure still has a binary merge tree using only such splits.
`idp_shapes_reachable` checks that claim by enumerating integer partitions;
the tests run it and compare IDP with the full DP and brute force.

The level step is written once against an array module (`level_step`, NumPy
or CuPy); on the GPU a raw CUDA kernel does the same work (gpusolve.csg.gpu).
Both give bit-identical f. The CPU engine runs the level step in L2-sized
blocks on a thread pool.
"""
from __future__ import annotations

import functools
import itertools
import math
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from gpusolve.csg.values import popcount

ALGORITHMS = ("idp", "dp")
# (coalition, split index) pairs per level-step block: its ~4 int64 temporaries stay in a core's L2
# (1 << 18: 2.0e8 splits/s on one EPYC core at n = 20; 1 << 16 and 1 << 20 were slower)
BLOCK = 1 << 18


def split_allowed(n: int, k: int, a: int, algorithm: str) -> bool:
    """Whether the DP evaluates splits of a k-coalition into parts of a and k - a agents."""
    if not 1 <= a < k:
        return False
    if algorithm == "dp" or k == n:
        return True
    small, big = min(a, k - a), max(a, k - a)
    return small + 2 * big <= n


def split_range(n: int, k: int, algorithm: str) -> tuple[int, int]:
    """The sizes a of A (inside C minus its highest agent) whose splits are evaluated: lo..hi, maybe empty.

    An interval: for IDP below N, max(a, k - a) <= n - k.
    """
    if algorithm == "dp" or k == n:
        return 1, k - 1
    return max(1, 2 * k - n), min(k - 1, n - k)


def level_splits(n: int, k: int, algorithm: str) -> int:
    """Splits evaluated per coalition of size k: nonempty A inside C minus its highest agent."""
    lo, hi = split_range(n, k, algorithm)
    return sum(math.comb(k - 1, a) for a in range(lo, hi + 1))


def total_splits(n: int, algorithm: str) -> int:
    return sum(math.comb(n, k) * level_splits(n, k, algorithm) for k in range(2, n + 1))


def idp_shapes_reachable(n: int) -> bool:
    """Every integer partition of n (a structure's sizes) has a merge tree of IDP-allowed splits.

    A proof by enumeration, for small n, that IDP loses no structure: the DP value of N is at least
    the value of every structure whose tree exists, and the rule depends on sizes only.
    """
    @functools.cache
    def mergeable(parts: tuple[int, ...], top: bool) -> bool:
        if len(parts) == 1:
            return True
        total = sum(parts)
        for r in range(1, len(parts) // 2 + 1):
            for pick in set(itertools.combinations(parts, r)):
                rest = list(parts)
                for x in pick:
                    rest.remove(x)
                a, b = sorted((sum(pick), total - sum(pick)))
                if (top or split_allowed(n, total, a, "idp")) and mergeable(pick, False) \
                        and mergeable(tuple(rest), False):
                    return True
        return False
    return all(mergeable(tuple(sorted(p)), True) for p in integer_partitions(n))


def integer_partitions(n: int, largest: int | None = None):
    """The integer partitions of n, parts in decreasing order."""
    largest = n if largest is None else largest
    if n == 0:
        yield ()
        return
    for k in range(min(n, largest), 0, -1):
        for rest in integer_partitions(n - k, k):
            yield (k,) + rest


def member_bits(xp, masks, k: int):
    """(rows, k) array: the single-bit values of each mask's k members, lowest first."""
    bits = xp.empty((masks.size, k), dtype=xp.int64)
    rest = masks.copy()
    for j in range(k):
        low = rest & -rest
        bits[:, j] = low
        rest ^= low
    return bits


def subset_sums(xp, bits):
    """(rows, 2^w): column t holds the sum of the bits[r, j] whose j is set in t (every submask of
    the row's members, in the order of a bit deposit), by doubling: w passes, each half the last."""
    rows, w = bits.shape
    out = xp.empty((rows, 1 << w), dtype=xp.int64)
    out[:, 0] = 0
    for j in range(w):
        xp.add(out[:, :1 << j], bits[:, j:j + 1], out=out[:, 1 << j:2 << j])
    return out


@functools.cache
def split_indices(n: int, k: int, algorithm: str) -> np.ndarray:
    """The split indices t evaluated for a k-coalition: A = deposit(t) into C minus its highest agent."""
    import numpy as np
    t = np.arange(1, 1 << (k - 1), dtype=np.int64)
    lo, hi = split_range(n, k, algorithm)
    size = popcount(np, t)
    return t[(size >= lo) & (size <= hi)]


@functools.cache
def split_mask(n: int, k: int, algorithm: str, dtype_name: str) -> np.ndarray:
    """0 where split index t (0 .. 2^(k-1) - 1) is evaluated, -inf where not (t = 0 is A empty)."""
    import numpy as np
    t = np.arange(1 << (k - 1), dtype=np.int64)
    lo, hi = split_range(n, k, algorithm)
    size = popcount(np, t)
    return np.where((size >= lo) & (size <= hi) & (t > 0), 0, -np.inf).astype(dtype_name)


def level_step(xp, f, masks, n: int, k: int, algorithm: str, block: int = BLOCK,
               stop: Callable[[], bool] = lambda: False, advance: Callable[[int], None] | None = None,
               threads: int = 1) -> bool:
    """f[C] = max(f[C], best evaluated split of C) for the coalitions `masks`, all of size k.

    The reference for the CUDA kernel, and the CPU engine: blocks of `block` (coalition, split
    index) pairs, A for a block as one broadcast sum of two small per-row submask tables (the low
    and the high half of C's members but its highest), then two gathers of f and a row maximum.
    Where at least half the split indices are evaluated (every IDP level but the one at 2n/3) all
    are, the others masked to -inf (A empty, t = 0, too), which keeps the block's arrays contiguous; elsewhere the
    evaluated indices are gathered from the tables. Blocks read only f of smaller coalitions and
    write their own rows, so any order is the same computation: tasks of up to 8 blocks (the
    tables made once for all, which keeps the per-call work that holds the GIL small) run on
    `threads` threads; NumPy releases the GIL in the passes over a block. False when `stop` ended
    it part way (f stays a table of partition values).
    """
    lo, hi = split_range(n, k, algorithm)
    if lo > hi or not masks.size:
        return True
    half = 1 << (k - 1)
    m = (k - 1) // 2  # members in the low table
    count = level_splits(n, k, algorithm)
    dense = 2 * count >= half
    if dense:  # column chunks: runs of high-table indices
        # no mask where every size is evaluated (all of DP; IDP's grand coalition): t = 0 is set apart
        mask = None if (lo, hi) == (1, k - 1) else xp.asarray(split_mask(n, k, algorithm, f.dtype.name))
        step = max(1, block >> m)
        chunks = [(h, min(h + step, half >> m)) for h in range(0, half >> m, step)]
        width = min(half, step << m)
    else:
        mask, ts = None, split_indices(n, k, algorithm)
        t_hi, t_lo = xp.asarray(ts >> m), xp.asarray(ts & ((1 << m) - 1))
        chunks = [(i, min(i + block, ts.size)) for i in range(0, ts.size, block)]
        width = min(ts.size, block)
    rows = max(1, block // width)  # per block
    group = max(rows, min(8 * rows, block // 8))  # per task: the member tables made once for its blocks

    def run(r0: int) -> None:
        c_all = masks[r0:r0 + group]
        bits = member_bits(xp, c_all, k)
        low_all, high_all = subset_sums(xp, bits[:, :m]), subset_sums(xp, bits[:, m:k - 1])
        best_all = xp.empty(c_all.size, dtype=f.dtype)
        for b0 in range(0, c_all.size, rows):
            c, low, high = c_all[b0:b0 + rows], low_all[b0:b0 + rows], high_all[b0:b0 + rows]
            best = None
            for i, j in chunks:
                if dense:
                    a = (high[:, i:j, None] + low[:, None, :]).reshape(c.size, -1)
                else:
                    a = high[:, t_hi[i:j]] + low[:, t_lo[i:j]]
                s = xp.take(f, a)
                xp.subtract(c[:, None], a, out=a)  # B = C minus A
                s += xp.take(f, a)
                if mask is not None:
                    s += mask[i << m:j << m]
                elif dense and i == 0:
                    s[:, 0] = -math.inf  # A empty
                row_best = s.max(axis=1)
                best = row_best if best is None else xp.maximum(best, row_best)
            best_all[b0:b0 + rows] = best
        f[c_all] = xp.maximum(f[c_all], best_all)

    starts = range(0, masks.size, group)
    wave = 2 * threads  # tasks between stop checks
    with ThreadPoolExecutor(threads) as pool:
        for w0 in range(0, len(starts), wave):
            part = starts[w0:w0 + wave]
            if threads > 1:
                list(pool.map(run, part))
            else:
                for r0 in part:
                    run(r0)
            if advance:
                advance((min(masks.size, part[-1] + group) - part[0]) * count)
            if stop() and part[-1] + group < masks.size:
                return False
    return True


def level_masks(xp, sizes, k: int):
    """The coalitions of size k in increasing (colex) order, from the popcount of every mask."""
    return xp.flatnonzero(sizes == k).astype(xp.int64)
