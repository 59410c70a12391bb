"""AllDifferent GAC's SCC and filtering step in one CUDA launch: `alldiff.removals` on the GPU.

The array-code peel (alldiff.peel) on CuPy makes dozens of small launches and a host sync per
level of every search, which cost more than the CPU's whole call below ~2000 variables. Here one
thread block does it all between one upload and one download: the bit-packed domains (as
alldiff.pack lays them out) and the matching go up in one copy; the kernel finds the sink's SCC
(variables reaching a free value), trims variables with no edge into or out of the rest, peels the
other SCCs by forward-backward reachability from the variable with the largest domain, and writes
the removed edges (x, v): v matched to a variable of another SCC than x's. The reachability loops
are Gauss-Seidel sweeps to a fixpoint (a variable found early in a sweep extends the same sweep),
a warp per variable and a lane per 64-bit word of its domain. The removed edges come back as a
list; when there are more than LIST_CAP of them, as bit-packed rows.

The source is plain Python text (tested on any machine); cupy compiles it once per process and
keeps the binary in its kernel cache. Correctness is checked against the CPU propagators in
tests/test_alldiff.py.
"""
from __future__ import annotations

import numpy as np

THREADS = 1024  # one block: 32 warps, a warp per variable
LIST_CAP = 4096  # removed edges returned as a list up to this many, else as bit-packed rows
SHARED_MAX = 48 << 10  # static shared memory per block
NAME = "alldiff_gac"

SOURCE = r"""
typedef unsigned long long u64;
#define FULL 0xffffffffu
#define BIT(v) (1ull << ((v) & 63))
#define HAS(set, v) (((set)[(v) >> 6] >> ((v) & 63)) & 1ull)

// Gauss-Seidel sweeps to a fixpoint: every thread runs the body over the rows, then all agree on
// whether anything changed (read after the barrier, cleared before the next sweep).
#define FIXPOINT(...) do {                                    \
    __syncthreads(); if (threadIdx.x == 0) changed = 0;       \
    __syncthreads(); __VA_ARGS__; __syncthreads();            \
  } while (changed)

// Variables y of `within` outside `set` with an edge into a value of `vals` join `set` (their
// values join `vals`), to a fixpoint: backward reachability.
__device__ void backward(const u64* D, const int* match, int n, int W, u64* set, u64* vals,
                         const u64* within, volatile int& changed) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  FIXPOINT(
    for (int y = warp; y < n; y += 32) {
      if (!HAS(within, y) || HAS(set, y)) continue;
      bool hit = false;
      for (int w = lane; w < W; w += 32) hit |= (D[(size_t)y * W + w] & vals[w]) != 0;
      if (__any_sync(FULL, hit) && lane == 0) {
        atomicOr(&set[y >> 6], BIT(y));
        atomicOr(&vals[match[y] >> 6], BIT(match[y]));
        changed = 1;
      }
    });
}

extern "C" __global__ void NAME(const u64* D, const int* match, int n, int m, int cap,
                                int* owner, int* label, u64* R, int* out) {
  // shared bitsets: variables (NW words) and values (W words)
  __shared__ u64 pool[SHARED_WORDS];
  __shared__ volatile int changed;
  __shared__ int pivot, pivot_size, big, big_size, count;
  __shared__ unsigned long long best;
  const int W = (m + 63) >> 6, NW = (n + 63) >> 6;
  u64 *rem = pool, *F = rem + NW, *B = F + NW;                     // variables
  u64 *free_vals = B + NW, *rem_vals = free_vals + W, *F_vals = rem_vals + W, *B_vals = F_vals + W;  // values
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  for (int i = tid; i < 3 * NW + 4 * W; i += blockDim.x) pool[i] = 0;
  for (int v = tid; v < m; v += blockDim.x) owner[v] = -1;
  if (tid == 0) { count = 0; big = -1; big_size = 0; }
  __syncthreads();
  for (int x = tid; x < n; x += blockDim.x) { owner[match[x]] = x; label[x] = -1; }
  __syncthreads();
  for (int v = tid; v < m; v += blockDim.x)
    if (owner[v] < 0) atomicOr(&free_vals[v >> 6], BIT(v));
  for (int x = tid; x < n; x += blockDim.x) atomicOr(&rem[x >> 6], BIT(x));
  __syncthreads();

  // The sink's SCC: the variables with an edge to a free value, then all that reach them.
  for (int x = warp; x < n; x += 32) {
    bool hit = false;
    for (int w = lane; w < W; w += 32) hit |= (D[(size_t)x * W + w] & free_vals[w]) != 0;
    if (__any_sync(FULL, hit) && lane == 0) { atomicOr(&B[x >> 6], BIT(x)); atomicOr(&B_vals[match[x] >> 6], BIT(match[x])); }
  }
  backward(D, match, n, W, B, B_vals, rem, changed);
  for (int x = tid; x < n; x += blockDim.x) {
    if (HAS(B, x)) { label[x] = n; atomicAnd(&rem[x >> 6], ~BIT(x)); atomicAdd(&count, 1); }
    else atomicOr(&rem_vals[match[x] >> 6], BIT(match[x]));
  }
  __syncthreads();
  if (tid == 0) { big = n; big_size = count; }

  while (true) {
    // Trim: a variable with no edge to another remaining one, or none from another, is its own SCC.
    FIXPOINT(
      for (int w = tid; w < W; w += blockDim.x) F_vals[w] = 0;  // values some other variable can take
      __syncthreads();
      for (int x = warp; x < n; x += 32) {
        if (!HAS(rem, x)) continue;
        for (int w = lane; w < W; w += 32) {
          u64 e = D[(size_t)x * W + w] & rem_vals[w];
          if (w == (match[x] >> 6)) e &= ~BIT(match[x]);
          if (e) atomicOr(&F_vals[w], e);
        }
      }
      __syncthreads();
      for (int x = warp; x < n; x += 32) {
        if (!HAS(rem, x)) continue;
        bool out_edge = false;
        for (int w = lane; w < W; w += 32) {
          u64 e = D[(size_t)x * W + w] & rem_vals[w];
          if (w == (match[x] >> 6)) e &= ~BIT(match[x]);
          out_edge |= e != 0;
        }
        out_edge = __any_sync(FULL, out_edge);
        if (lane == 0 && (!out_edge || !HAS(F_vals, match[x]))) {
          label[x] = n + 1 + x;
          atomicAnd(&rem[x >> 6], ~BIT(x));
          atomicAnd(&rem_vals[match[x] >> 6], ~BIT(match[x]));
          changed = 1;
        }
      });
    // Pivot: the remaining variable with the largest domain.
    if (tid == 0) best = 0;
    __syncthreads();
    for (int x = warp; x < n; x += 32) {
      if (!HAS(rem, x)) continue;
      int size = 0;
      for (int w = lane; w < W; w += 32) size += __popcll(D[(size_t)x * W + w]);
      for (int o = 16; o; o >>= 1) size += __shfl_down_sync(FULL, size, o);
      if (lane == 0) atomicMax(&best, ((unsigned long long)(size + 1) << 32) | (unsigned)x);
    }
    __syncthreads();
    if (best == 0) break;  // every variable labelled (read by all threads after the barrier)
    if (tid == 0) { pivot = (int)(best & 0xffffffffu); pivot_size = 0; }
    for (int i = tid; i < 2 * NW; i += blockDim.x) F[i] = 0;  // F and B
    for (int w = tid; w < 2 * W; w += blockDim.x) F_vals[w] = 0;  // F_vals and B_vals
    __syncthreads();
    if (tid == 0) {
      F[pivot >> 6] = B[pivot >> 6] = BIT(pivot);
      F_vals[match[pivot] >> 6] = B_vals[match[pivot] >> 6] = BIT(match[pivot]);
    }
    // Forward: the values of F's variables' domains among the remaining ones bring their owners in.
    FIXPOINT(
      for (int x = warp; x < n; x += 32) {
        if (!HAS(F, x)) continue;
        for (int w = lane; w < W; w += 32) {
          u64 e = D[(size_t)x * W + w] & rem_vals[w] & ~F_vals[w];
          while (e) {
            int b = __ffsll(e) - 1;
            e &= e - 1;
            int y = owner[w * 64 + b];
            if (!(atomicOr(&F[y >> 6], BIT(y)) & BIT(y))) { atomicOr(&F_vals[w], 1ull << b); changed = 1; }
          }
        }
      });
    backward(D, match, n, W, B, B_vals, rem, changed);
    for (int x = tid; x < n; x += blockDim.x)
      if (HAS(F, x) && HAS(B, x)) {
        label[x] = pivot;
        atomicAnd(&rem[x >> 6], ~BIT(x));
        atomicAnd(&rem_vals[match[x] >> 6], ~BIT(match[x]));
        atomicAdd(&pivot_size, 1);
      }
    __syncthreads();
    if (tid == 0 && pivot_size > big_size) { big = pivot; big_size = pivot_size; }
  }

  // Removals: x keeps v iff v is free or matched within x's SCC. The largest SCC's rows are
  // checked a word at a time against its values (F_vals); the others value by value.
  for (int w = tid; w < W; w += blockDim.x) F_vals[w] = 0;
  if (tid == 0) count = 0;
  __syncthreads();
  for (int x = tid; x < n; x += blockDim.x)
    if (label[x] == big) atomicOr(&F_vals[match[x] >> 6], BIT(match[x]));
  __syncthreads();
  for (int x = warp; x < n; x += 32) {
    int lx = label[x];
    for (int w = lane; w < W; w += 32) {
      u64 e = D[(size_t)x * W + w] & ~free_vals[w], r = 0;
      if (lx == big) r = e & ~F_vals[w];
      else
        while (e) {
          int b = __ffsll(e) - 1;
          e &= e - 1;
          if (label[owner[w * 64 + b]] != lx) r |= 1ull << b;
        }
      R[(size_t)x * W + w] = r;
      while (r) {
        int b = __ffsll(r) - 1;
        r &= r - 1;
        int k = atomicAdd(&count, 1);
        if (k < cap) { out[1 + 2 * k] = x; out[2 + 2 * k] = w * 64 + b; }
      }
    }
  }
  __syncthreads();
  if (tid == 0) out[0] = count;
}
"""


def shared_words(n: int, m: int) -> int:
    """64-bit words of shared bitsets the kernel needs: three over variables, four over values."""
    return 3 * ((n + 63) // 64) + 4 * ((m + 63) // 64)


def fits(n: int, m: int) -> bool:
    """Whether one block's shared memory holds the bitsets (about 90,000 variables and values)."""
    return 8 * shared_words(n, m) + 64 <= SHARED_MAX


def kernel_source(n: int, m: int) -> str:
    """The CUDA source for a constraint of n variables and m values: the shared pool is sized for
    the largest of a few classes, so a search compiles a handful of kernels, not one per size."""
    words = 1 << max(shared_words(n, m) - 1, 63).bit_length()  # a power of two, at least 64
    words = min(words, (SHARED_MAX - 64) // 8)
    return SOURCE.replace("SHARED_WORDS", str(words)).replace("NAME", NAME)


_kernels: dict = {}


def removals_gpu(cp, words: np.ndarray, match: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, columns) of the edges GAC removes, on the host, from host `words` (alldiff.pack of the
    domains, n rows) and a matching covering every variable: one upload, one launch, one download
    (two when more than LIST_CAP edges go)."""
    n, width = words.shape
    if not fits(n, m):
        raise ValueError(f"AllDifferent of {n} variables and {m} values: bitsets beyond one block's shared memory")
    source = kernel_source(n, m)
    kernel = _kernels.get(source)
    if kernel is None:
        kernel = _kernels[source] = cp.RawKernel(source, NAME)
    up = np.empty(n * width * 2 + n, dtype=np.int32)  # the words, then the matching: one copy
    up[:n * width * 2] = np.ascontiguousarray(words).view(np.int32).ravel()
    up[n * width * 2:] = match
    dev = cp.asarray(up)
    d_words, d_match = dev[:n * width * 2].view(cp.uint64), dev[n * width * 2:]
    owner = cp.empty(m, dtype=cp.int32)
    label = cp.empty(n, dtype=cp.int32)
    removed = cp.empty((n, width), dtype=cp.uint64)
    out = cp.empty(1 + 2 * LIST_CAP, dtype=cp.int32)
    kernel((1,), (THREADS,), (d_words, d_match, np.int32(n), np.int32(m), np.int32(LIST_CAP),
                              owner, label, removed, out))
    head = out.get()
    k = int(head[0])
    if k <= LIST_CAP:
        pairs = head[1:1 + 2 * k].reshape(k, 2).astype(np.int64)
        return pairs[:, 0], pairs[:, 1]
    bits = np.unpackbits(removed.get().view(np.uint8), axis=1, bitorder="little")[:, :m]
    rows, cols = np.nonzero(bits)
    return rows.astype(np.int64), cols.astype(np.int64)
