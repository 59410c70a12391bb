"""Coalition structure generation (CSG): the best partition of n agents, by dynamic programming over subsets.

A game gives a value v(C) to every coalition C (a bitmask: agent i is bit i); a
coalition structure is a partition of all agents, worth the sum of its
coalitions' values; we maximise. The DP (Yeh 1986; Rothkopf et al. 1998), as
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

The level step is written once against an array module (`level_step`, NumPy
or CuPy); on the GPU a raw CUDA kernel does the same work (`LEVEL_SOURCE`):
one thread per (coalition of size k, range of split indices), coalitions in
colex order so that a warp's 32 coalitions share their high agents and its
reads of f fall close together; splits enumerated by the submask increment
A <- (A - C') & C'. Both give bit-identical f.

The CPU engine runs the same level step in L2-sized blocks on a thread pool. `solve_on_workers`
cuts each level's coalitions across Dask workers (GPUs or CPU processes), each holding f whole
and receiving only the others' shares of the last level.

Value distributions (seeded, `generate_values`), as used throughout the CSG
literature (Rahwan et al., JAIR 34, 2009; Michalak et al., AIJ 230, 2016):
uniform v = |C| U(0,1); normal v = |C| N(1, 0.1); NDCS v = N(|C|, sqrt|C|);
modified-uniform (Service & Adams 2010) v = U(0, 10|C|), plus U(0, 50) with
probability 0.2; agent-based: agent i has power p_i ~ U(0, 10) and in C a
performance U(0, 2 p_i), v(C) the sum over its members.
"""
from __future__ import annotations

import functools
import itertools
import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable

from gpusolve.host import BudgetError

# NumPy and the readers' ParseError load in the functions that use them: the command line reads
# the names below without them.

DISTRIBUTIONS = ("uniform", "normal", "ndcs", "modified-uniform", "agent-based")
ALGORITHMS = ("idp", "dp")
PRECISIONS = {"single": "float32", "double": "float64"}  # f's dtype; "auto": single on the GPU, else double
MAX_AGENTS = 32  # masks are 32-bit in the kernel
GEN_CHUNK = 1 << 22  # values generated (and scanned) per step: the stream of draws depends on it
# (coalition, split index) pairs per level-step block: its ~4 int64 temporaries stay in a core's L2
# (1 << 18: 2.0e8 splits/s on one EPYC core at n = 20; 1 << 16 and 1 << 20 were slower)
BLOCK = 1 << 18
# GPU launches: split-index iterations per launch (a stop request is heard between launches) and the
# threads a level wants before its coalitions' splits are cut into ranges.
LAUNCH_ITERATIONS = 1 << 33
TARGET_THREADS = 1 << 21
MIN_RANGE = 32
THREADS_PER_BLOCK = 256


class CSGError(ValueError):
    """A request that cannot run (bad n, distribution); the CLI prints it as one line, exit 2."""


# -- values ------------------------------------------------------------------

def popcount(xp, m):
    """Set bits of each element of an integer array of values below 2^32 (NumPy or CuPy)."""
    m = m - ((m >> 1) & 0x55555555)
    m = (m & 0x33333333) + ((m >> 2) & 0x33333333)
    m = (m + (m >> 4)) & 0x0F0F0F0F
    return ((m * 0x01010101) & 0xFFFFFFFF) >> 24


def generate_values(distribution: str, n: int, seed: int) -> np.ndarray:
    """v for all 2^n coalitions (float64, v[0] = 0) drawn from a standard CSG distribution, seeded."""
    import numpy as np
    if distribution not in DISTRIBUTIONS:
        raise CSGError(f"unknown distribution {distribution!r} (choose from {', '.join(DISTRIBUTIONS)})")
    check_agents(n)
    rng = np.random.default_rng(seed)
    power = rng.uniform(0, 10, n) if distribution == "agent-based" else None
    step = min(GEN_CHUNK, 1 << n)
    offsets = np.arange(step, dtype=np.int64)
    low_sizes = popcount(np, offsets).astype(np.float64)
    v = np.empty(1 << n)
    for lo in range(0, 1 << n, step):  # chunks aligned to their size: mask = lo | offset
        size = low_sizes + bin(lo).count("1")
        if distribution == "uniform":
            chunk = size * rng.uniform(0, 1, step)
        elif distribution == "normal":
            chunk = size * rng.normal(1, 0.1, step)
        elif distribution == "ndcs":
            chunk = rng.normal(size, np.sqrt(size))
        elif distribution == "modified-uniform":
            chunk = rng.uniform(0, 10 * size)
            chunk += np.where(rng.random(step) < 0.2, rng.uniform(0, 50, step), 0.0)
        else:
            chunk = np.zeros(step)
            for i in range(n):
                if lo >> i & 1:
                    chunk += rng.uniform(0, 2 * power[i], step)
                elif 1 << i < step:
                    member = ((offsets >> i) & 1).astype(bool)
                    chunk[member] += rng.uniform(0, 2 * power[i], step // 2)
        v[lo:lo + step] = chunk
    v[0] = 0.0
    return v


def check_agents(n: int) -> None:
    if not 1 <= n <= MAX_AGENTS:
        raise CSGError(f"n = {n}: CSG takes 1 to {MAX_AGENTS} agents")


def read_values(path: str | Path) -> np.ndarray:
    """The values of a CSG file: text (n, then 2^n numbers in mask order) or .npy (2^n numbers).

    v[0], the empty coalition's value, is read but never used. Errors raise ParseError (FILE:LINE).
    """
    import numpy as np

    from gpusolve.parsers.errors import ParseError
    path = str(path)
    if path.endswith(".npy"):
        try:
            v = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise ParseError(path, None, f"cannot read as .npy: {e}") from None
        if v.ndim != 1 or v.dtype.kind not in "iuf":
            raise ParseError(path, None, f"expected a 1-D numeric array, found shape {v.shape} of {v.dtype}")
        n = v.size.bit_length() - 1
        if v.size < 2 or v.size != 1 << n:
            raise ParseError(path, None, f"{v.size} values: expected 2^n for some n >= 1")
        check_file_agents(path, None, n)
        v = v.astype(np.float64, copy=False)
        bad = np.flatnonzero(~np.isfinite(v))
        if bad.size:
            raise ParseError(path, None, f"value of coalition {int(bad[0])} is {v[bad[0]]}: values must be finite")
        return v
    try:
        with open(path) as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ParseError(path, None, f"cannot read: {e}") from None
    tokens = text.split()
    if not tokens:
        raise ParseError(path, 1, "empty file: expected n, then 2^n coalition values")
    try:
        n = int(tokens[0])
    except ValueError:
        raise ParseError(path, _line_of(text, 0), f"expected the number of agents, found {tokens[0]!r}") from None
    check_file_agents(path, _line_of(text, 0), n)
    body = tokens[1:]
    if len(body) != 1 << n:
        at = len(tokens) - 1 if len(body) < 1 << n else (1 << n) + 1
        raise ParseError(path, _line_of(text, at),
                         f"n = {n} needs {1 << n} values (one per coalition, mask order), found {len(body)}")
    try:
        v = np.array(body, dtype=np.float64)
    except ValueError:
        i = next(i for i, tok in enumerate(body) if not _is_number(tok))
        raise ParseError(path, _line_of(text, i + 1), f"coalition {i}: {body[i]!r} is not a number") from None
    bad = np.flatnonzero(~np.isfinite(v))
    if bad.size:
        i = int(bad[0])
        raise ParseError(path, _line_of(text, i + 1), f"coalition {i}: value {body[i]} is not finite")
    return v


def check_file_agents(path: str, line: int | None, n: int) -> None:
    from gpusolve.parsers.errors import ParseError
    try:
        check_agents(n)
    except CSGError as e:
        raise ParseError(path, line, str(e)) from None


def _is_number(token: str) -> bool:
    try:
        float(token)
        return True
    except ValueError:
        return False


def _line_of(text: str, token_index: int) -> int:
    """1-based line of the token_index-th whitespace-separated token (only on the error path)."""
    for line_no, line in enumerate(text.splitlines(), 1):
        count = len(line.split())
        if token_index < count:
            return line_no
        token_index -= count
    return max(1, text.count("\n"))


def write_values(path: str | Path, v: np.ndarray) -> None:
    """Write values as a CSG file: .npy, or text (n, then one value per line, round-trip exact)."""
    import numpy as np
    path = str(path)
    if path.endswith(".npy"):
        np.save(path, v)
        return
    n = v.size.bit_length() - 1
    with open(path, "w") as fh:
        fh.write(f"{n}\n")
        np.savetxt(fh, v, fmt="%.17g")


# -- the DP's rules and counts -----------------------------------------------

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


def partition_bound(best_of_size: list[float], n: int) -> float:
    """max over integer partitions of n of the sum of best_of_size[part]: an unbounded knapsack."""
    g = [0.0] + [-math.inf] * n
    for t in range(1, n + 1):
        g[t] = max(best_of_size[s] + g[t - s] for s in range(1, t + 1))
    return g[n]


# -- memory -------------------------------------------------------------------

def predict_memory(n: int, precision: str, on_gpu: bool, threads: int = 1, shares: bool = False) -> dict[str, int]:
    """Bytes the run holds at its peak: host (the float64 input, and f for the CPU engine) and device.

    With `shares` (a Dask worker's table) the GPU also holds every mask's size and a level's masks."""
    item = {"single": 4, "double": 8}[precision]
    size = 1 << n
    work = BLOCK * 8 * 8 * (1 if on_gpu else threads)  # a block's temporaries, per thread
    level = math.comb(n, n // 2) * 8 * 2  # the largest level's masks, and its row maxima (or shares)
    if on_gpu:
        return {"host": size * 8 + work + (level if shares else 0),
                "device": size * item + work + (size + level if shares else 0)}
    return {"host": size * 8 + size * item + size + level + work, "device": 0}


def check_memory(n: int, precision: str, on_gpu: bool, host_budget: int, device_budget: int | None,
                 threads: int = 1, shares: bool = False) -> dict:
    """The prediction, or BudgetError naming what would fit."""
    need = predict_memory(n, precision, on_gpu, threads, shares)
    from gpusolve.host import fmt_bytes
    if need["host"] > host_budget:
        raise BudgetError(f"n = {n} needs {fmt_bytes(need['host'])} of host memory (the 2^{n} input values "
                          f"in float64{'' if on_gpu else ' and f'}), more than the {fmt_bytes(host_budget)} "
                          f"budget; raise --mem-limit on a larger machine"
                          + ("" if on_gpu else ", or run on a GPU (f then lives on the device)")
                          + (", or use --precision single (f in 4 bytes a coalition)" if precision == "double" and
                             not on_gpu else ""))
    if on_gpu and device_budget is not None and need["device"] > device_budget:
        other = "single" if precision == "double" else None
        hint = f"use --precision {other} (half the memory), " if other else ""
        raise BudgetError(f"n = {n} needs {fmt_bytes(need['device'])} of device memory (f: 2^{n} {precision}-"
                          f"precision values), more than the {fmt_bytes(device_budget)} budget; {hint}"
                          f"a device with more memory, or --device cpu")
    return need


# -- the level step: reference (any array module) -------------------------------

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


# -- the level step: CUDA ------------------------------------------------------

LEVEL_SOURCE = r"""
typedef unsigned int u32;
typedef unsigned long long u64;

__device__ __forceinline__ void max_into(float* at, float x) {
    u32* p = (u32*)at;
    u32 old = *p;
    while (__uint_as_float(old) < x) {
        u32 seen = atomicCAS(p, old, __float_as_uint(x));
        if (seen == old) break;
        old = seen;
    }
}

__device__ __forceinline__ void max_into(double* at, double x) {
    u64* p = (u64*)at;
    u64 old = *p;
    while (__longlong_as_double((long long)old) < x) {
        u64 seen = atomicCAS(p, old, (u64)__double_as_longlong(x));
        if (seen == old) break;
        old = seen;
    }
}

// One thread: coalition number c0 + c (colex rank) of size k, split indices [j*range, (j+1)*range),
// for the ncoal coalitions from rank c0 (all of them, or a Dask worker's share).
// g = j * ncoal + c: a warp holds consecutive coalitions, which share their high agents.
extern "C" __global__ void csg_level(T* f, const long long* binom, int n, int k, long long c0, long long ncoal,
                                     long long first, long long count, u64 range, int amin, int amax) {
    long long g = first + (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= first + count) return;
    long long r = c0 + g % ncoal;
    u64 j = (u64)(g / ncoal);
    u32 C = 0;
    int x = n - 1;
    for (int i = k; i >= 1; --i) {  // colex unranking: largest x with binom(x, i) <= r
        while (binom[x * (n + 1) + i] > r) --x;
        r -= binom[x * (n + 1) + i];
        C |= 1u << x;
        --x;
    }
    u32 high = 1u << (31 - __clz(C));
    u32 low = C ^ high;
    u64 t = j * range;
    u64 end = t + range;
    if (t == 0) t = 1;
    u32 A = 0;
    {   // A = deposit of t's bits into low's members
        u32 m = low;
        u64 bits = t;
        while (m) {
            u32 b = m & (0u - m);
            if (bits & 1) A |= b;
            bits >>= 1;
            m ^= b;
        }
    }
    // |A| = popcount(t): the same in every lane of a warp, so the size test does not diverge. (Jumping
    // over runs of sizes outside [amin, amax] instead made the loop 2x slower on an H100: it is
    // instruction-bound, and this plain counted loop unrolls.)
    T best = (T)(-__longlong_as_double(0x7ff0000000000000LL));
    #pragma unroll 4
    for (; t < end; ++t) {
        int size = __popc(A);
        if (size >= amin && size <= amax) {
            T s = __ldg(f + A) + __ldg(f + (C ^ A));
            best = s > best ? s : best;
        }
        A = (A - low) & low;  // next submask of low, increasing
    }
    if (range == (1ull << (k - 1))) {
        if (best > f[C]) f[C] = best;
    } else if (best > (T)(-__longlong_as_double(0x7ff0000000000000LL))) {
        max_into(f + C, best);
    }
}
"""


def _kernel(dtype_name: str):
    from gpusolve.cuda import loader
    ctype = {"float32": "float", "float64": "double"}[dtype_name]
    return loader.load("#define T " + ctype + "\n" + LEVEL_SOURCE, "csg_level", options=("-std=c++17",))


@functools.cache
def _binomials(n: int) -> np.ndarray:
    import numpy as np
    return np.array([[math.comb(x, i) for i in range(n + 1)] for x in range(n + 1)], dtype=np.int64)


def level_ranges(ncoal: int, k: int) -> int:
    """How many ranges each of ncoal k-coalitions' 2^(k-1) split indices are cut into (a power of two)."""
    parts = 1
    while ncoal * parts < TARGET_THREADS and (1 << (k - 1)) // (parts * 2) >= MIN_RANGE:
        parts *= 2
    return parts


def cuda_level(f, n: int, k: int, algorithm: str, stop: Callable[[], bool] = lambda: False,
               advance: Callable[[int], None] | None = None, lo: int = 0, hi: int | None = None) -> bool:
    """The kernel's version of level_step over the k-coalitions of colex ranks lo..hi-1 (default: all);
    False when stopped part way."""
    import numpy as np
    import cupy
    amin, amax = split_range(n, k, algorithm)
    hi = math.comb(n, k) if hi is None else hi
    if amin > amax or hi <= lo:
        return True
    ncoal = hi - lo
    parts = level_ranges(ncoal, k)
    span = (1 << (k - 1)) // parts
    threads = ncoal * parts
    per_launch = max(THREADS_PER_BLOCK, LAUNCH_ITERATIONS // span // THREADS_PER_BLOCK * THREADS_PER_BLOCK)
    kernel = _kernel(f.dtype.name)
    binom = cupy.asarray(_binomials(n))
    per_thread = level_splits(n, k, algorithm) / parts
    for first in range(0, threads, per_launch):
        count = min(per_launch, threads - first)
        kernel(((count + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK,), (THREADS_PER_BLOCK,),
               (f, binom, np.int32(n), np.int32(k), np.int64(lo), np.int64(ncoal), np.int64(first), np.int64(count),
                np.uint64(span), np.int32(amin), np.int32(amax)))
        cupy.cuda.get_current_stream().synchronize()
        if advance:
            advance(int(count * per_thread))
        if stop() and first + count < threads:
            return False
    return True


# -- recovering the structure ----------------------------------------------------

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


# -- solving -------------------------------------------------------------------

@dataclass
class Options:
    algorithm: str = "idp"
    device: str = "auto"
    precision: str = "auto"
    time_limit: float | None = None
    mem_limit: int | None = None  # host bytes; None: available RAM
    gpu_mem_limit: int | None = None  # device bytes; None: free device memory
    threads: int | None = None  # the CPU engine's threads; None: one per core this process may use


@dataclass
class Result:
    file: str
    task: str
    status: str  # optimal | bounded
    lower_bound: float
    upper_bound: float
    structure: list[list[int]]  # coalitions as sorted agent indices (agent i = bit i of a mask)
    value: float  # the structure's value, summed from the input in float64
    n: int
    algorithm: str
    precision: str  # single or double: what ran
    time_s: float
    method: str = ""  # as the literature names it, with the precision
    phases: dict[str, float] = field(default_factory=dict)
    engine: str = ""
    device_note: str = ""
    levels_done: int = 0  # sizes whose every coalition has been evaluated
    splits: int = 0  # split evaluations done
    splits_per_s: float = 0.0
    peak_bytes: dict[str, int] = field(default_factory=dict)
    trace: list[list] = field(default_factory=list)  # [time_s, lower, upper, phase]
    workers: int = 1  # Dask workers that shared the levels (solve_on_workers)
    worker_compute_s: list[float] = field(default_factory=list)  # each worker's seconds in level steps

    def to_json(self) -> dict:
        return asdict(self)


def pick_device(device: str, n: int, algorithm: str, threads: int | None, here: bool = True):
    """(engine spec, note) for --device: the solver's device policy (engines/select.py) on the DP's
    split evaluations, a step per level; --device gpu takes the GPU whatever n. `here`: the DP runs
    in this process (else on Dask workers)."""
    from gpusolve.cuda import runtime
    from gpusolve.engines.select import choose
    spec, note = choose(device, total_splits(n, algorithm), n, 0 if device == "gpu" else None, threads, "split", here)
    if spec.on_device and here:
        runtime.mark_started()
        note += "; " + runtime.device_info(runtime.import_cupy().cuda.runtime.getDevice())[0]
    return spec, note


class Table:
    """The DP's state on one engine: f (2^n values) and what a level step and the answer need.

    `solve` holds one; under `solve_on_workers` each Dask worker holds one, f whole, and computes a
    share of each level. Raises BudgetError (memory), DeviceError (--device gpu without one),
    CSGError.
    """

    def __init__(self, values: np.ndarray, options: Options, threads: int | None = None, shares: bool = False):
        from gpusolve.host import cores
        from gpusolve.host import available_memory
        n = values.size.bit_length() - 1
        check_agents(n)
        if options.algorithm not in ALGORITHMS:
            raise CSGError(f"unknown algorithm {options.algorithm!r}")
        self.values, self.options, self.n = values, options, n
        if options.precision not in ("auto", *PRECISIONS):
            raise CSGError(f"unknown precision {options.precision!r}")
        self.threads = options.threads or threads or cores()
        spec, self.note = pick_device(options.device, n, options.algorithm, self.threads)
        self.xp, self.engine, self.on_gpu = spec.array_module(), spec.name, spec.on_device
        xp = self.xp
        self.precision = precision_on(options.precision, self.on_gpu)
        if not self.on_gpu:
            self.note += f"; {self.threads} thread{'s' if self.threads > 1 else ''}"
        device_budget = None
        if self.on_gpu:
            from gpusolve.cuda.runtime import device_budget as room
            device_budget = room(options.gpu_mem_limit)
        host_budget = options.mem_limit if options.mem_limit is not None else available_memory() + values.nbytes
        self.need = check_memory(n, self.precision, self.on_gpu, host_budget, device_budget, self.threads, shares)
        self.dtype = PRECISIONS[self.precision]
        self.f = xp.empty(1 << n, dtype=self.dtype)
        for lo in range(0, 1 << n, 1 << 26):  # converted and uploaded in slices: no full-size host copy
            self.f[lo:lo + (1 << 26)] = xp.asarray(values[lo:lo + (1 << 26)].astype(self.dtype))
        self.sizes = None
        self.level_at = (0, None)  # (k, the k-coalitions)
        self.last_share = None  # (k, ranks lo, hi) of the share this worker computed last
        self.sync()

    def sync(self) -> None:
        if self.on_gpu:
            self.xp.cuda.get_current_stream().synchronize()

    def masks(self, k: int):
        """The k-coalitions in colex (increasing) order: the CPU engine's rows, a worker's shares."""
        xp, n = self.xp, self.n
        if self.sizes is None:
            self.sizes = xp.empty(1 << n, dtype=xp.uint8)
            for lo in range(0, 1 << n, GEN_CHUNK):
                self.sizes[lo:lo + GEN_CHUNK] = popcount(xp, xp.arange(lo, min(lo + GEN_CHUNK, 1 << n), dtype=xp.int64))
        if self.level_at[0] != k:
            self.level_at = (k, None)  # the last level's masks go before the next's are made
            self.level_at = (k, level_masks(xp, self.sizes, k))
        return self.level_at[1]

    def level(self, k: int, lo: int = 0, hi: int | None = None, stop: Callable[[], bool] = lambda: False,
              advance: Callable[[int], None] | None = None) -> bool:
        """Level k for the k-coalitions of colex ranks lo..hi-1 (default: all); False when stopped."""
        if self.on_gpu:
            return cuda_level(self.f, self.n, k, self.options.algorithm, stop, advance, lo, hi)
        import numpy as np
        return level_step(np, self.f, self.masks(k)[lo:hi], self.n, k, self.options.algorithm, stop=stop,
                          advance=advance, threads=self.threads)

    def share(self, k: int, lo: int, hi: int) -> np.ndarray:
        """f of the k-coalitions of ranks lo..hi-1, on the host: what a worker sends the others."""
        self.last_share = (k, lo, hi)
        part = self.f[self.masks(k)[lo:hi]]
        return part.get() if self.on_gpu else part

    def receive(self, shares) -> None:
        """Write the other workers' shares (tuples from `share` via _level_on_worker) into f."""
        for k, lo, part, *_ in shares:
            if part is not None and (k, lo, lo + part.size) != self.last_share:
                self.f[self.masks(k)[lo:lo + part.size]] = self.xp.asarray(part)

    def answer(self, done: int) -> dict:
        """The best structure found, its value from the input, status and upper bound, once the DP
        has finished the sizes up to `done`."""
        import numpy as np
        xp, f, n, values = self.xp, self.f, self.n, self.values
        t = time.perf_counter()
        self.sizes, self.level_at = None, (0, None)  # room for the recovery's temporaries
        v_stored = lambda c: float(np.dtype(self.dtype).type(values[c]))  # noqa: E731  (v as f holds it)
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
        unit = float(np.finfo(self.dtype).eps) / 2
        # a structure has at most n coalitions: its DP sum, n - 1 roundings of stored (rounded) values
        rounding = (n + 1) * unit * n * float(np.abs(values).max()) * 1.01
        f_full = float(f[full])
        if done == n:
            if abs(f_full - value) > rounding:
                raise RuntimeError(f"the structure's value {value!r} differs from the DP's {f_full!r} "
                                   f"by more than the rounding allowance {rounding:.3g}")
            proven = self.dtype == "float64" or grid_proves(values, masks_best, f_full + rounding)
            status, upper = ("optimal", value) if proven else ("bounded", max(value, f_full + rounding))
        else:
            status = "bounded"
            # IP's bound over f's per-size maxima: each coalition of the optimum is worth at most f of it
            # (f >= v), and a group of them whose union's size the DP finished is worth at most f of the union
            upper = max(value, partition_bound(size_maxima(xp, f, n), n) + rounding)
        return {"masks": masks_best, "value": value, "status": status, "upper": upper, "precision": self.precision,
                "recover_s": time.perf_counter() - t}


def precision_on(precision: str, on_gpu: bool) -> str:
    """--precision resolved: auto is single on the GPU (half the memory and traffic), double on the CPU
    engine (as fast there, and a finished run is optimal)."""
    return precision if precision != "auto" else "single" if on_gpu else "double"


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


def _result(file: str, options: Options, n: int, answer: dict, t0: float, phases: dict, done: int, splits: int,
            **fields) -> Result:
    phases["recover"] = answer["recover_s"]
    value, upper, status = answer["value"], answer["upper"], answer["status"]
    elapsed = time.perf_counter() - t0 + sum(v for k, v in phases.items() if k in ("read", "generate", "cluster"))
    precision = answer["precision"]
    return Result(file=file, task="CSG", status=status, lower_bound=value, upper_bound=upper,
                  structure=[[i for i in range(n) if c >> i & 1] for c in answer["masks"]], value=value, n=n,
                  algorithm=options.algorithm, precision=precision, time_s=elapsed, phases=phases,
                  method=f"{options.algorithm.upper()} over subsets, {precision} precision",
                  levels_done=done, splits=splits, splits_per_s=splits / phases["dp"] if phases["dp"] > 0 else 0.0,
                  trace=[[elapsed, value, upper, "dp" if status == "optimal" else f"dp to size {done}"]], **fields)


def _stopper(t0: float, options: Options, stop: Callable[[], bool] | None) -> Callable[[], bool]:
    deadline = None if options.time_limit is None else t0 + options.time_limit
    return lambda: (stop is not None and stop()) or (deadline is not None and time.perf_counter() >= deadline)


def solve(values: np.ndarray, options: Options, file: str = "", phases: dict | None = None,
          progress: Callable[[int], Callable[[int], None]] | None = None,
          stop: Callable[[], bool] | None = None) -> Result:
    """The best coalition structure for `values` (2^n floats, mask order), with bounds on the optimum.

    Raises as Table does. With a time limit or a stop request the DP ends after the launch (GPU) or
    the blocks (CPU) in progress and the answer is `bounded`.
    """
    t0 = time.perf_counter()
    phases = dict(phases or {})
    stopped = _stopper(t0, options, stop)
    t = time.perf_counter()
    table = Table(values, options)
    n = table.n
    phases["setup"] = time.perf_counter() - t

    advance = progress(total_splits(n, options.algorithm)) if progress else None
    t = time.perf_counter()
    done, splits = 1, 0
    for k in range(2, n + 1):
        if stopped() or not table.level(k, stop=stopped, advance=advance):
            break
        done = k
        splits += math.comb(n, k) * level_splits(n, k, options.algorithm)
    table.sync()
    phases["dp"] = time.perf_counter() - t
    return _result(file, options, n, table.answer(done), t0, phases, done, splits, engine=table.engine,
                   device_note=table.note, peak_bytes=table.need)


# -- over Dask workers ----------------------------------------------------------

_TABLES: dict[str, Table] = {}  # per worker process: the Table of the run under way, by token


def load_values(source: tuple) -> np.ndarray:
    """Values from a source a worker can rebuild them from: ("generate", distribution, n, seed),
    ("file", path) (a path every worker can read) or ("values", array)."""
    kind, *args = source
    if kind == "generate":
        return generate_values(*args)
    if kind == "file":
        return read_values(*args)
    return args[0]


def source_agents(source: tuple | None, values: np.ndarray | None) -> int:
    """n, from the values when given, else from a ("generate", distribution, n, seed) source."""
    return values.size.bit_length() - 1 if values is not None else source[2]


def _setup_on_worker(token: str, source: tuple, options: Options, keep_values: bool) -> dict:
    from dask.distributed import get_worker
    t = time.perf_counter()
    options = replace(options, mem_limit=worker_budget(get_worker(), options.mem_limit))
    if options.mem_limit is not None and source[0] == "generate":  # the values alone, before drawing them
        check_memory(source[2], precision_on(options.precision, True), True, options.mem_limit, None)
    table = Table(load_values(source), options, threads=get_worker().state.nthreads, shares=True)
    if not keep_values:  # only the worker that answers reads v again
        table.values = None
    _TABLES.clear()
    _TABLES[token] = table
    return {"engine": table.engine, "note": table.note, "need": table.need, "precision": table.precision,
            "seconds": time.perf_counter() - t}


def worker_budget(worker, mem_limit: int | None) -> int | None:
    """Host bytes a Dask worker's table may hold: below the fraction of the worker's memory limit at
    which Dask pauses it (a paused worker runs no further level), and within --mem-limit."""
    import dask
    limit = worker.memory_manager.memory_limit
    pause = dask.config.get("distributed.worker.memory.pause")
    if not limit or not pause:
        return mem_limit
    room = int(limit * pause * 0.95)
    return room if mem_limit is None else min(room, mem_limit)


def _level_on_worker(token: str, k: int, lo: int, hi: int, deadline: float | None, send: bool, *shares) -> tuple:
    """Level k for ranks lo..hi-1, after writing the last level's `shares` into f: (k, lo, f of the
    share (None unless `send`: a worker alone keeps it), complete, seconds receiving, seconds
    computing). `deadline` is time.time()'s."""
    table = _TABLES[token]
    t = time.perf_counter()
    table.receive(shares)
    t1 = time.perf_counter()
    complete = table.level(k, lo, hi, stop=lambda: deadline is not None and time.time() >= deadline)
    table.sync()
    t2 = time.perf_counter()
    return k, lo, table.share(k, lo, hi) if send else None, complete, t1 - t, t2 - t1


def _level_summary(share: tuple) -> tuple:
    """(complete, seconds receiving, seconds computing) of a worker's level: all the client fetches."""
    return share[3:]


def _answer_on_worker(token: str, done: int, *shares) -> dict:
    table = _TABLES[token]
    table.receive(shares)
    return table.answer(done)


def _release_on_worker(token: str) -> None:
    table = _TABLES.pop(token, None)
    if table is not None and table.on_gpu:
        del table
        import cupy
        cupy.get_default_memory_pool().free_all_blocks()


def solve_on_workers(values: np.ndarray, options: Options, client, source: tuple | None = None,
                     workers: int | None = None, file: str = "", phases: dict | None = None,
                     progress: Callable[[int], Callable[[int], None]] | None = None,
                     stop: Callable[[], bool] | None = None, executor: str = "") -> Result:
    """`solve` with each level's coalitions cut into one contiguous range of colex ranks per Dask
    worker (the first `workers` of `client`'s, default all), each worker on its own engine (a GPU
    where it has one, as `solve` picks). `values` may be None with a "generate" source.

    Every worker holds f whole: it builds f from `source` (see load_values; default: `values`
    scattered), computes its share of level k and sends f of that share, C(n, k) / W values, to
    the others, which write them into their f before level k + 1 (Dask moves them worker to
    worker; the client fetches only each level's (complete, seconds)). So a level's exchange is
    C(n, k) values, 2^n in all over the run, where broadcasting f would be 2^n a level. Levels
    with no splits (IDP above 2n/3) exchange nothing. The first worker recovers the structure.
    """
    from gpusolve.distributed.cluster import ClusterError
    t0 = time.perf_counter()
    phases = dict(phases or {})
    n = source_agents(source, values)
    check_agents(n)
    if options.algorithm not in ALGORITHMS:
        raise CSGError(f"unknown algorithm {options.algorithm!r}")
    stopped = _stopper(t0, options, stop)
    deadline = None if options.time_limit is None else time.time() + options.time_limit
    addresses = sorted(client.scheduler_info()["workers"])[:workers]
    if not addresses:
        raise ClusterError("the Dask cluster has no workers")
    token = f"csg-{time.time_ns()}"
    if source is None:
        source = ("values", client.scatter(values, broadcast=True, hash=False))
    t = time.perf_counter()
    try:
        setups = client.gather([client.submit(_setup_on_worker, token, source, options, i == 0,
                                              key=f"{token}-setup-{i}", workers=[a], pure=False)
                                for i, a in enumerate(addresses)])
        phases["setup"] = time.perf_counter() - t
        if len({s["precision"] for s in setups}) > 1:  # shares of float32 f would void float64's answer
            raise CSGError("--precision auto: GPU and CPU workers would run single and double precision; "
                           "give --precision single or double")
        advance = progress(total_splits(n, options.algorithm)) if progress else None
        t = time.perf_counter()
        compute_s = [0.0] * len(addresses)
        done, splits = 1, 0

        def settle(k: int, summaries: list) -> bool:
            """Account for level k once its workers report; False when one stopped part way."""
            nonlocal done, splits
            reports = client.gather(summaries)
            for w, (_, _, seconds) in enumerate(reports):
                compute_s[w] += seconds
            count = math.comb(n, k) * level_splits(n, k, options.algorithm)
            if advance:
                advance(count)
            if not all(complete for complete, _, _ in reports):
                return False
            done, splits = k, splits + count
            return True

        # Level k + 1 is submitted before level k's reports are read: its tasks wait for k's shares
        # on the workers anyway, and the client's round trip is hidden. Stopped, the levels already
        # submitted run to their end (with the time limit, the workers stop them at the deadline).
        previous, queue, going = [], [], True
        send = len(addresses) > 1
        for k in range(2, n + 1):
            if not going or stopped():
                break
            a_lo, a_hi = split_range(n, k, options.algorithm)
            summaries = []
            if a_lo <= a_hi:  # else no splits: f of this size is v, which every worker holds
                cut = [math.comb(n, k) * w // len(addresses) for w in range(len(addresses) + 1)]
                previous = [client.submit(_level_on_worker, token, k, cut[w], cut[w + 1], deadline, send, *previous,
                                          key=f"{token}-level-{k}-{w}", workers=[a], pure=False)
                            for w, a in enumerate(addresses)]
                summaries = [client.submit(_level_summary, fut, key=f"{token}-summary-{k}-{w}", workers=[a],
                                           pure=False) for w, (fut, a) in enumerate(zip(previous, addresses))]
            queue.append((k, summaries))
            while going and len(queue) > 1:
                going = settle(*queue.pop(0))
        while going and queue:
            going = settle(*queue.pop(0))
        phases["dp"] = time.perf_counter() - t
        answer = client.submit(_answer_on_worker, token, done, *previous, key=f"{token}-answer",
                               workers=addresses[:1], pure=False).result()
    finally:
        client.run(_release_on_worker, token, workers=addresses)
    engines = sorted({s["engine"] for s in setups})
    note = (f"{len(addresses)} Dask worker{'s' if len(addresses) > 1 else ''}{f' ({executor})' if executor else ''}"
            f", levels cut in equal shares; first worker: {setups[0]['note']}")
    need = {side: max(s["need"][side] for s in setups) for side in setups[0]["need"]}
    return _result(file, options, n, answer, t0, phases, done, splits, engine="+".join(engines), device_note=note,
                   peak_bytes=need, workers=len(addresses), worker_compute_s=compute_s)
