"""CUDA sources of the kernels over rows, for sparse tables (sparse.py: the join's gather, the minimum
per code) and streamed runs (streaming.py: pieces read in place, bisection of sorted runs). Pure
Python, as kernels.py; `kernels.load` hands them to the one kernel loader."""
from __future__ import annotations

import functools

from .kernels import FusedKernel


@functools.lru_cache(maxsize=2)
def segment_min_source(cost_type: str) -> FusedKernel:
    """The minimum cost of each run of equal codes in code-sorted rows (sparse.segment_min on the
    GPU): a thread per row, the run's rank being `pos[i] - 1` (an inclusive prefix sum of the run
    heads); the head writes the code and every row takes the minimum atomically into `out_costs`
    (filled with the largest value first), so a long run costs no thread more than one row.
    Replaces a second full sort (by cost) and the gathers that made each run's first row its minimum."""
    name = f"gpusolve_segment_min_{cost_type}"
    ctype = {"i64": "long long", "f64": "double"}[cost_type]
    take = {"i64": "atomicMin(out_costs + r, costs[i]);",
            "f64": """unsigned long long* p = (unsigned long long*)(out_costs + r);
    unsigned long long seen = *p;
    while (costs[i] < __longlong_as_double(seen)) {  // compare-and-swap: no atomicMin on doubles
      unsigned long long was = atomicCAS(p, seen, __double_as_longlong(costs[i]));
      if (was == seen) break;
      seen = was;
    }"""}[cost_type]
    source = r"""
typedef long long i64;
typedef COST T;
extern "C" __global__ void NAME(const i64* codes, const T* costs, const i64* pos, i64 n,
    i64* out_codes, T* out_costs) {
  for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
    i64 r = pos[i] - 1;
    if (i == 0 || codes[i - 1] != codes[i]) out_codes[r] = codes[i];
    TAKE
  }
}
""".replace("COST", ctype).replace("NAME", name).replace("TAKE", take)
    return FusedKernel(name, source, 0, ("segment_min", cost_type))


GRID_MAX = 8192  # blocks of a grid-stride kernel launch


def grid(n: int) -> tuple[int]:
    """Blocks of 256 threads for a grid-stride loop over n items."""
    return (min((n + 255) // 256, GRID_MAX),)


# The last of `count` ascending starts at or before i (starts[0] <= i): the search every kernel that
# lays out variable-length groups, pieces or runs one after another does per item.
LAST_START = r"""
__device__ int last_start(const long long* starts, int count, long long i) {
  int l = 0, r = count;
  while (r - l > 1) {
    int m = (l + r) >> 1;
    if (starts[m] <= i) l = m; else r = m;
  }
  return l;
}
"""


@functools.lru_cache(maxsize=2)
def join_gather_source(cost_type: str) -> FusedKernel:
    """The sparse join-sum's gather (sparse._gather, Cuda-BE's Algorithm 4) in one launch: a
    thread per output row finds its group by binary search, sums the two input rows' costs and,
    below top, writes its key composed from both inputs' digits at the next free place (rows in
    no fixed order: the caller sorts them). `axes`: per output variable (source input, divisor,
    modulus, place value). Replaces some 40 array calls and a host sync per chunk."""
    name = f"gpusolve_join_gather_{cost_type}"
    ctype = {"i64": "long long", "f64": "double"}[cost_type]
    source = LAST_START + r"""
typedef long long i64;
typedef COST T;
extern "C" __global__ void NAME(const i64* ak, const T* ac, const i64* bk, const T* bc,
    const i64* a_rows, const i64* b_rows, int indirect,
    const i64* a_start, const i64* a_size, const i64* b_start, const i64* out_start, int groups,
    i64 lo, i64 hi, T top, const i64* axes, int n_axes, i64* keys, T* costs, unsigned long long* count) {
  for (i64 i = lo + blockIdx.x * (i64)blockDim.x + threadIdx.x; i < hi; i += (i64)gridDim.x * blockDim.x) {
    const int l = last_start(out_start, groups, i);
    i64 t = i - out_start[l], size = a_size[l];
    i64 ra = a_start[l] + t % size, rb = b_start[l] + t / size;
    if (indirect) { ra = a_rows[ra]; rb = b_rows[rb]; }
    T c = ac[ra] + bc[rb];
    if (!(c < top)) continue;
    i64 key = 0, ka = ak[ra], kb = bk[rb];
    for (int p = 0; p < n_axes; ++p) {
      const i64* x = axes + 4 * p;
      key += ((x[0] ? kb : ka) / x[1]) % x[2] * x[3];
    }
    unsigned long long at = atomicAdd(count, 1ULL);
    keys[at] = key;
    costs[at] = c;
  }
}
""".replace("COST", ctype).replace("NAME", name)
    return FusedKernel(name, source, 0, ("join_gather", cost_type))


@functools.lru_cache(maxsize=4)
def pieces_gather_source(itemsize: int) -> FusedKernel:
    """Concatenate pieces of page-locked host arrays into one device array, reading them in place
    over the bus (unified addressing: a registered page's host address is its device address). A
    thread per output item finds its piece by binary search in the pieces' output offsets (`outs`,
    exclusive prefix sums; empty pieces share the next one's offset and are never the last at or
    before an item). Items are copied as words of `itemsize` bytes, whatever their type. A range of
    a streamed merge has a piece of every sorted run, hundreds of a few KB each: one copy call
    each, or a host copy through staging, cost more than moving them."""
    word = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}[itemsize]
    name = f"gpusolve_gather_pieces_{8 * itemsize}"
    source = LAST_START + r"""
typedef long long i64;
typedef WORD W;
extern "C" __global__ void NAME(const i64* addresses, const i64* outs, int pieces, i64 n, W* out) {
  for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
    const int l = last_start(outs, pieces, i);
    out[i] = ((const W*)addresses[l])[i - outs[l]];
  }
}
""".replace("WORD", word).replace("NAME", name)
    return FusedKernel(name, source, 0, ("gather_pieces", itemsize))


BISECT_BLOCK = 256  # threads of a bisect_source block


@functools.lru_cache(maxsize=1)
def sample_source() -> FusedKernel:
    """Every `stride`-th key (positions 0, stride, ...) of sorted int64 runs read in place from
    page-locked host memory, run after run (run r's from starts[r]): what bisect_source searches
    first, on the device."""
    name = "gpusolve_sample_runs"
    source = LAST_START + r"""
typedef long long i64;
extern "C" __global__ void NAME(const i64* addresses, const i64* sizes, const i64* starts, int runs, i64 stride,
    i64 n, i64* sample) {
  for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
    const int l = last_start(starts, runs, i);
    sample[i] = ((const i64*)addresses[l])[(i - starts[l]) * stride];
  }
}
""".replace("NAME", name)
    return FusedKernel(name, source, 0, ("sample_runs",))


@functools.lru_cache(maxsize=1)
def bisect_source() -> FusedKernel:
    """streaming.bisect on the device, a block per target rank p: bisect key values in [lo, hi] for
    the smallest k with more than p keys <= k over sorted int64 runs read in place from page-locked
    host memory (each thread searches its runs, the block sums), then write every run's first
    position with key >= k (`left`) and > k (`right`), (targets, runs) row-major. A search looks
    first in the run's sample (sample_source: every stride-th key, on the device), then among the
    stride keys that remain, over the bus."""
    name = "gpusolve_bisect"
    source = r"""
typedef long long i64;
// First position in a sorted run whose key is > k (>= k with equal_too): the sample (keys at
// positions 0, stride, ...) bounds it to one stride of the run, searched in place.
__device__ i64 first_above(const i64* keys, i64 n, const i64* sample, i64 m, i64 stride, i64 k, bool equal_too) {
  i64 lo = 0, hi = m;
  while (lo < hi) {
    i64 mid = lo + (hi - lo) / 2;
    if (sample[mid] < k || (!equal_too && sample[mid] == k)) lo = mid + 1; else hi = mid;
  }
  if (lo == 0) return 0;  // the first key is above already
  hi = lo * stride < n ? lo * stride : n;  // keys[lo * stride] is above, keys[(lo - 1) * stride] is not
  lo = (lo - 1) * stride + 1;
  while (lo < hi) {
    i64 mid = lo + (hi - lo) / 2;
    if (keys[mid] < k || (!equal_too && keys[mid] == k)) lo = mid + 1; else hi = mid;
  }
  return lo;
}
extern "C" __global__ void NAME(const i64* addresses, const i64* sizes, const i64* sample, const i64* starts,
    i64 stride, int runs, const i64* targets, const i64* lo0, const i64* hi0, i64* left, i64* right) {
  __shared__ i64 counts[BLOCK];
  __shared__ i64 bounds[2];
  const i64 target = targets[blockIdx.x];
  if (threadIdx.x == 0) { bounds[0] = lo0[blockIdx.x]; bounds[1] = hi0[blockIdx.x]; }
  __syncthreads();
  while (bounds[0] < bounds[1]) {
    const i64 lo = bounds[0], mid = lo + (i64)(((unsigned long long)bounds[1] - (unsigned long long)lo) >> 1);
    i64 c = 0;
    for (int r = threadIdx.x; r < runs; r += BLOCK)
      c += first_above((const i64*)addresses[r], sizes[r], sample + starts[r], starts[r + 1] - starts[r], stride, mid, false);
    counts[threadIdx.x] = c;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
      if (threadIdx.x < s) counts[threadIdx.x] += counts[threadIdx.x + s];
      __syncthreads();
    }
    if (threadIdx.x == 0) { if (counts[0] > target) bounds[1] = mid; else bounds[0] = mid + 1; }
    __syncthreads();
  }
  const i64 k = bounds[0];
  for (int r = threadIdx.x; r < runs; r += BLOCK) {
    const i64* keys = (const i64*)addresses[r];
    const i64* own = sample + starts[r];
    const i64 m = starts[r + 1] - starts[r];
    left[(i64)blockIdx.x * runs + r] = first_above(keys, sizes[r], own, m, stride, k, true);
    right[(i64)blockIdx.x * runs + r] = first_above(keys, sizes[r], own, m, stride, k, false);
  }
}
""".replace("NAME", name).replace("BLOCK", str(BISECT_BLOCK))
    return FusedKernel(name, source, 0, ("bisect",))
