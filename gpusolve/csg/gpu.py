"""The DP's level step on the GPU: a raw CUDA kernel doing `level_step`'s work (`LEVEL_SOURCE`).

One thread per (coalition of size k, range of split indices), coalitions in
colex order so that a warp's 32 coalitions share their high agents and its
reads of f fall close together; splits enumerated by the submask increment
A <- (A - C') & C'. It gives f bit-identical to gpusolve.csg.dp.level_step.
"""
from __future__ import annotations

import functools
import math
from typing import Callable

from gpusolve.csg.dp import level_splits, split_range

# GPU launches: split-index iterations per launch (a stop request is heard between launches) and the
# threads a level wants before its coalitions' splits are cut into ranges.
LAUNCH_ITERATIONS = 1 << 33
TARGET_THREADS = 1 << 21
MIN_RANGE = 32
THREADS_PER_BLOCK = 256


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
