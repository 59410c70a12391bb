"""The answer of a DP run: the structure recovered from f, its value from the input, and the bounds
that make a float32 run `optimal` or `bounded`.

Storage is f alone (2^n values: float32 on the GPU by default, 4 GiB at
n = 30; float64 on the CPU engine, as fast there); the argmax split is not
stored but found again for the few coalitions of the answer, as GPU-CSG's
Algorithm 2 does: f(C) is an exactly rounded sum of two stored values, so the
split that produced it satisfies f(A) + f(B) == f(C) bit for bit. The answer
is the recovered structure's value summed again from the input in float64.
float32 sums are rounded: the DP's value plus a rigorous allowance
((n + 1) * 2^-24 * n * max |v|) bounds the optimum, and a structure within it
could be better than the one found, so a float32 run is `optimal` (both
bounds the structure's value) only where the values lie on a grid of powers
of two too coarse for that (integers, halves, ...), else `bounded`. float64
is the arithmetic of real costs throughout gpusolve: a finished double run is
`optimal`.
"""
from __future__ import annotations

import math
import time
from typing import Callable

from gpusolve.csg.dp import member_bits, subset_sums
from gpusolve.csg.values import GEN_CHUNK, popcount


def structure_and_bounds(xp, f, n: int, values: np.ndarray, dtype: str, done: int) -> dict:
    """The best structure found, its value from the input, status and upper bound, once the DP
    has finished the sizes up to `done`."""
    import numpy as np
    t = time.perf_counter()
    v_stored = lambda c: float(np.dtype(dtype).type(values[c]))  # noqa: E731  (v as f holds it)
    full = (1 << n) - 1
    candidates = [[full], [1 << i for i in range(n)]]
    if done < n:
        _, c = best_pair(xp, f, n)
        if c:
            candidates.append(structure_of(xp, f, v_stored, c) + structure_of(xp, f, v_stored, full ^ c))
    else:
        candidates.append(structure_of(xp, f, v_stored, full))
    worth = [math.fsum(float(values[c]) for c in cs) for cs in candidates]
    best = int(np.argmax(worth))
    masks_best, value = sorted(candidates[best]), worth[best]
    unit = float(np.finfo(dtype).eps) / 2
    # a structure has at most n coalitions: its DP sum, n - 1 roundings of stored (rounded) values
    rounding = (n + 1) * unit * n * float(np.abs(values).max()) * 1.01
    f_full = float(f[full])
    if done == n:
        if abs(f_full - value) > rounding:
            raise RuntimeError(f"the structure's value {value!r} differs from the DP's {f_full!r} "
                               f"by more than the rounding allowance {rounding:.3g}")
        proven = dtype == "float64" or grid_proves(values, masks_best, f_full + rounding)
        status, upper = ("optimal", value) if proven else ("bounded", max(value, f_full + rounding))
    else:
        status = "bounded"
        # IP's bound over f's per-size maxima: each coalition of the optimum is worth at most f of it
        # (f >= v), and a group of them whose union's size the DP finished is worth at most f of the union
        upper = max(value, partition_bound(size_maxima(xp, f, n), n) + rounding)
    return {"masks": masks_best, "value": value, "status": status, "upper": upper,
            "recover_s": time.perf_counter() - t}


def find_split(xp, f, c: int, target, chunk: int = 1 << 22) -> int | None:
    """A nonempty A inside c minus its highest agent with f[A] + f[c ^ A] == target, bit for bit."""
    k = bin(c).count("1")
    m = (k - 1) // 2
    bits = member_bits(xp, xp.asarray([c], dtype=xp.int64), k)
    low, high = subset_sums(xp, bits[:, :m])[0], subset_sums(xp, bits[:, m:k - 1])[0]
    step = max(1, chunk >> m)
    for h in range(0, high.size, step):
        a = (high[h:h + step, None] + low[None, :]).ravel()
        hit = xp.flatnonzero((f[a] + f[c - a] == target) & (a > 0))
        if hit.size:
            return int(a[int(hit[0])])
    return None


def structure_of(xp, f, v_stored: Callable[[int], float], c: int) -> list[int]:
    """The partition of coalition c whose DP value is f[c]: c itself when f[c] is its own value."""
    out, todo = [], [c]
    while todo:
        c = todo.pop()
        fc = f[c]
        if float(fc) == v_stored(c):
            out.append(c)
            continue
        a = find_split(xp, f, c, fc)
        if a is None:
            raise RuntimeError(f"no split of coalition {c} reproduces its DP value {float(fc)!r}")
        todo += [a, c ^ a]
    return sorted(out)


def best_pair(xp, f, n: int, chunk: int = 1 << 24) -> tuple[float, int]:
    """max over nonempty C not holding agent n-1 of f[C] + f[N \\ C], and that C (0: none better than f[N])."""
    full = (1 << n) - 1
    best, best_c = float(f[full]), 0
    for lo in range(1, 1 << (n - 1), chunk):
        c = xp.arange(lo, min(lo + chunk, 1 << (n - 1)), dtype=xp.int64)
        s = f[c] + f[full ^ c]
        i = int(s.argmax())
        if float(s[i]) > best:
            best, best_c = float(s[i]), lo + i
    return best, best_c


def size_maxima(xp, x, n: int, chunk: int = 1 << 24) -> list[float]:
    """max of x over the coalitions of each size 0..n."""
    out = [-math.inf] * (n + 1)
    for lo in range(0, x.size, chunk):
        part = x[lo:lo + chunk]
        sizes = popcount(xp, xp.arange(lo, lo + part.size, dtype=xp.int64))
        for s in range(n + 1):
            out[s] = max(out[s], float(xp.where(sizes == s, part, -math.inf).max()))
    return out


def partition_bound(best_of_size: list[float], n: int) -> float:
    """max over integer partitions of n of the sum of best_of_size[part]: an unbounded knapsack."""
    g = [0.0] + [-math.inf] * n
    for t in range(1, n + 1):
        g[t] = max(best_of_size[s] + g[t - s] for s in range(1, t + 1))
    return g[n]


def grid_proves(values: np.ndarray, masks: list[int], upper: float) -> bool:
    """Whether the structure of `masks` is optimal though the optimum may reach `upper`. When every value
    (the empty coalition's aside) is a multiple of q, so is every structure's: with q a power of two above
    upper minus the structure's exact value, no structure's value lies strictly between them."""
    import numpy as np
    from fractions import Fraction
    gap = Fraction(upper) - sum(Fraction(float(values[c])) for c in masks)
    if gap <= 0:
        return True
    q = math.ldexp(1.0, math.frexp(float(gap))[1])  # the power of two above float(gap)
    if q <= gap:
        q *= 2
    rest = values[1:]
    return all(not np.fmod(rest[lo:lo + GEN_CHUNK], q).any() for lo in range(0, rest.size, GEN_CHUNK))
