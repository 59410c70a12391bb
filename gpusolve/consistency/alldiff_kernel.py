"""AllDifferent GAC on the GPU in one launch of one thread block: `alldiff.removals` there.

The array-code peel (alldiff.peel) on CuPy makes dozens of small launches and a host sync per
level of every search, which cost more than the CPU's whole call below ~2000 variables. Here the
bit-packed domains (as alldiff.pack lays them out) and a matching stay on the device
(`DeviceDomains`); a call hands over the values removed since the last one and gets the removed
edges back, both through page-locked host memory the kernel reads and writes in place. The kernel
first repairs the matching: entries whose value left are dropped, then one warp finds an
augmenting path per free variable, breadth first, while the rest of the block waits. It then
finds the sink's SCC (variables reaching a free value), trims variables with no edge into or out
of the rest, peels the other SCCs by forward-backward reachability from the first variable left,
and writes the removed edges (x, v): v matched to a variable of another SCC than x's. Its
reachability loops are Gauss-Seidel sweeps to a fixpoint (a variable found early in a sweep
extends the same sweep), a thread per variable over word-major domains. The removed edges come
back as a list; when there are more than LIST_CAP of them, as bit-packed rows.

The source is plain Python text (tested on any machine); the kernel loader (cuda/loader.py) compiles
it once per process, and CuPy keeps the binary in its kernel cache. Correctness is checked against the CPU propagators in
tests/test_alldiff.py.
"""
from __future__ import annotations

import numpy as np

from gpusolve.model.problem import Infeasible
from gpusolve.cuda import loader
from gpusolve.cuda.pinned import pinned_array

THREADS = 1024  # one block: a thread per variable
LIST_CAP = 1 << 16  # removed edges returned as a list up to this many (512 KiB), else as bit-packed rows
SHARED_MAX = 48 << 10  # static shared memory per block
NAME = "alldiff_gac"

SOURCE = r"""
typedef unsigned long long u64;
#define FULL 0xffffffffu
#define BIT(v) (1ull << ((v) & 63))
#define HAS(set, v) (((set)[(v) >> 6] >> ((v) & 63)) & 1ull)
#define U 4  // words a thread loads at once

// Gauss-Seidel sweeps to a fixpoint: every thread runs the body over the rows, then all agree on
// whether anything changed (read after the barrier, cleared before the next sweep).
#define FIXPOINT(...) do {                                    \
    __syncthreads(); if (threadIdx.x == 0) changed = 0;       \
    __syncthreads(); __VA_ARGS__; __syncthreads();            \
  } while (changed)

// Bitsets are arrays of 64-bit words, updated through their 32-bit halves: shared-memory atomics
// on those are single instructions, on 64-bit words compare-and-swap loops.
__device__ __forceinline__ unsigned* halves(u64* set) { return reinterpret_cast<unsigned*>(set); }
__device__ __forceinline__ void set_bit(u64* set, int v) { atomicOr(halves(set) + (v >> 5), 1u << (v & 31)); }
__device__ __forceinline__ void clear_bit(u64* set, int v) { atomicAnd(halves(set) + (v >> 5), ~(1u << (v & 31))); }
__device__ __forceinline__ void or_word(u64* set, int w, u64 bits) {
  if ((unsigned)bits) atomicOr(halves(set) + 2 * w, (unsigned)bits);
  if (bits >> 32) atomicOr(halves(set) + 2 * w + 1, (unsigned)(bits >> 32));
}

// Bits y of `set` set (or cleared) where `cond`, for the 32 consecutive y of a warp at once (a
// 32-bit half of a word): every lane calls it. Returns the warp's bits.
__device__ __forceinline__ unsigned warp_bits(u64* set, int y, bool cond, bool clear = false) {
  const unsigned bits = __ballot_sync(FULL, cond);
  if ((threadIdx.x & 31) == 0 && bits) {
    if (clear) atomicAnd(halves(set) + (y >> 5), ~bits);
    else atomicOr(halves(set) + (y >> 5), bits);
  }
  return bits;
}

// Loops over 0..n-1 a thread per index, the 32 consecutive indices of a warp together (a warp
// leaves together: the body guards x < n itself).
#define WARP_LOOP(I, N) for (int I = threadIdx.x; I - (int)(threadIdx.x & 31) < (N); I += blockDim.x)

// Rows are read a thread per row, the 32 rows of a warp side by side: the domains are kept
// word-major (D[w * n + y], word w of y's domain), so a warp's loads of a word are contiguous.
// word(y, w, d) for each word d of the rows y with row(y), U words loaded at once, then done(y, on,
// any) by every lane of the warp together (`on`: row(y) held; `any`: some word(y, ...) was true).
// With FIRST, a warp stops once each of its rows has had a true word.
template <bool FIRST = false, class Row, class Word, class Done>
__device__ __forceinline__ void rows(const u64* D, int n, int W, Row row, Word word, Done done) {
  WARP_LOOP(y, n) {
    const bool on = y < n && row(y);
    bool any = false;
    for (int w0 = 0; w0 < W && __any_sync(FULL, on && !(FIRST && any)); w0 += U) {
      u64 d[U];
#pragma unroll
      for (int u = 0; u < U; ++u) d[u] = on && w0 + u < W ? D[(size_t)(w0 + u) * n + y] : 0ull;
#pragma unroll
      for (int u = 0; u < U; ++u) if (on && w0 + u < W) any |= word(y, w0 + u, d[u]);
    }
    done(y, on, any);
  }
}

// Variables y of `within` outside `set` with an edge into a value of `vals` join `set` (their
// values join `vals`), to a fixpoint: backward reachability.
__device__ void backward(const u64* D, const int* match, int n, int W, u64* set, u64* vals,
                         const u64* within, volatile int& changed) {
  FIXPOINT(rows<true>(D, n, W,
    [&](int y) { return HAS(within, y) && !HAS(set, y); },
    [&](int y, int w, u64 d) { return (d & vals[w]) != 0; },
    [&](int y, bool on, bool hit) {
      warp_bits(set, y, on && hit);
      if (on && hit) { set_bit(vals, match[y]); changed = 1; }
    }));
}

// An augmenting path from the free variable x, breadth first over the alternating graph, by one warp
// (a lane per 64-bit word of a domain). front and next: variables of this level and the next;
// seen: values reached, via[v]: the variable that reached v. The path is flipped once a free
// value is found; false when there is none.
__device__ bool augment(const u64* D, int* match, int* owner, int* via, int n, int W, int NW, int x,
                        u64* front, u64* next, u64* seen) {
  const int lane = threadIdx.x & 31;
  for (int i = lane; i < 2 * NW; i += 32) front[i] = 0;  // front and next
  for (int w = lane; w < W; w += 32) seen[w] = 0;
  __syncwarp();
  if (lane == 0) front[x >> 6] = BIT(x);
  __syncwarp();
  int found = -1;
  while (found < 0) {
    bool grew = false;
    for (int i = 0; i < NW && found < 0; ++i)
      for (u64 f = front[i]; f && found < 0; f &= f - 1) {
        const int y = i * 64 + __ffsll(f) - 1;
        for (int w0 = 0; w0 < W && found < 0; w0 += 32) {  // lanes take distinct words: one claim per value
          const int w = w0 + lane;
          u64 e = w < W ? D[(size_t)w * n + y] & ~seen[w] : 0ull;
          if (e) seen[w] |= e;
          int mine = -1;
          for (; e; e &= e - 1) {
            const int v = w * 64 + __ffsll(e) - 1, z = owner[v];
            via[v] = y;
            if (z < 0) mine = v;
            else { set_bit(next, z); grew = true; }
          }
          const unsigned hit = __ballot_sync(0xffffffffu, mine >= 0);
          if (hit) found = __shfl_sync(0xffffffffu, mine, __ffs(hit) - 1);
          __syncwarp();
        }
      }
    if (found >= 0) break;
    if (!__any_sync(0xffffffffu, grew)) return false;
    for (int i = lane; i < NW; i += 32) { front[i] = next[i]; next[i] = 0; }
    __syncwarp();
  }
  if (lane == 0)
    for (int v = found; v >= 0;) {  // x's own entry is -1: the walk ends there
      const int y = via[v], prev = match[y];
      match[y] = v;
      owner[v] = y;
      v = prev;
    }
  __syncwarp();
  return true;
}

// One launch: the matching, then its SCCs and the removals. The values removed since the last call
// leave the domains kept on the device, entries whose value left are dropped (their variables
// listed in `unmatched`), then one warp finds an augmenting path for each free
// variable while the others wait. None: out[0] = -1. delta and out may be host memory (mapped).
extern "C" __global__ void __launch_bounds__(BLOCK)
NAME(u64* D, int* match, const int* delta, int n, int m, int cap, int* owner, int* via, int* label,
     int* unmatched, u64* R, int* out) {
  __shared__ u64 pool[SHARED_WORDS];  // bitsets: the path search's, then the SCCs' (variables NW words, values W)
  __shared__ volatile int changed;
  __shared__ int pivot, pivot_size, big, big_size, count, failed;
  const int W = (m + 63) >> 6, NW = (n + 63) >> 6;
  u64 *rem = pool, *B = rem + NW;                                   // variables
  u64 *free_vals = B + NW, *rem_vals = free_vals + W, *F_vals = rem_vals + W, *B_vals = F_vals + W;  // values
  const int tid = threadIdx.x;
  auto nothing = [](int, bool, bool) {};
  auto all = [](int) { return true; };
  for (int k = tid; k < delta[0]; k += blockDim.x) {  // delta: count, padding, (variable, value) pairs
    int x = delta[2 + 2 * k], v = delta[3 + 2 * k];
    atomicAnd(&D[(size_t)(v >> 6) * n + x], ~BIT(v));
  }
  for (int v = tid; v < m; v += blockDim.x) owner[v] = -1;
  if (tid == 0) { count = 0; failed = 0; }
  __syncthreads();
  for (int x = tid; x < n; x += blockDim.x) {
    int v = match[x];
    if (v >= 0 && ((D[(size_t)(v >> 6) * n + x] >> (v & 63)) & 1)) owner[v] = x;
    else { match[x] = -1; unmatched[atomicAdd(&count, 1)] = x; }
  }
  __syncthreads();
  if (tid < 32)
    for (int k = 0; k < count; ++k)
      if (!augment(D, match, owner, via, n, W, NW, unmatched[k], pool, pool + NW, pool + 2 * NW)) { failed = 1; break; }
  __syncthreads();
  if (failed) { if (tid == 0) out[0] = -1; return; }  // no matching covers every variable
  for (int i = tid; i < 2 * NW + 4 * W; i += blockDim.x) pool[i] = 0;
  if (tid == 0) { count = 0; big = -1; big_size = 0; }
  for (int x = tid; x < n; x += blockDim.x) label[x] = -1;
  __syncthreads();
  WARP_LOOP(v, m) {
    const bool free = v < m && owner[v] < 0;
    if (free) count = 1;
    warp_bits(free_vals, v, free);
  }
  for (int i = tid; i < NW; i += blockDim.x) rem[i] = i < n >> 6 ? ~0ull : BIT(n) - 1;  // every variable
  __syncthreads();

  // The sink's SCC: the variables with an edge to a free value, then all that reach them (none
  // without free values: as many values as variables).
  if (count) {
    rows<true>(D, n, W, all, [&](int y, int w, u64 d) { return (d & free_vals[w]) != 0; }, [&](int y, bool on, bool hit) {
      warp_bits(B, y, on && hit);
      if (on && hit) set_bit(B_vals, match[y]);
    });
    backward(D, match, n, W, B, B_vals, rem, changed);
  }
  __syncthreads();
  if (tid == 0) count = 0;
  __syncthreads();
  WARP_LOOP(x, n) {
    const bool sink = x < n && HAS(B, x);
    if (sink) label[x] = n;
    else if (x < n) set_bit(rem_vals, match[x]);
    const unsigned bits = warp_bits(rem, x, sink, true);
    if ((tid & 31) == 0 && bits) atomicAdd(&count, __popc(bits));
  }
  __syncthreads();
  if (tid == 0) { big = n; big_size = count; }

  // An edge of x to another remaining variable's value (not x's own).
  auto other = [&](int y, int w, u64 d) {
    u64 e = d & rem_vals[w];
    if (w == (match[y] >> 6)) e &= ~BIT(match[y]);
    return e;
  };
  auto remaining = [&](int y) { return HAS(rem, y) != 0; };
  while (true) {
    // Trim: a variable with no edge to another remaining one, or none from another, is its own SCC.
    FIXPOINT(
      for (int w = tid; w < W; w += blockDim.x) F_vals[w] = 0;  // values some other variable can take
      __syncthreads();
      rows(D, n, W, remaining, [&](int y, int w, u64 d) {
        const u64 e = other(y, w, d);
        if (e & ~F_vals[w]) or_word(F_vals, w, e);
        return false;
      }, nothing);
      __syncthreads();
      rows<true>(D, n, W, remaining, [&](int y, int w, u64 d) { return other(y, w, d) != 0; },
                 [&](int y, bool on, bool out_edge) {
        const bool alone = on && (!out_edge || !HAS(F_vals, match[y]));
        warp_bits(rem, y, alone, true);
        if (alone) { label[y] = n + 1 + y; clear_bit(rem_vals, match[y]); changed = 1; }
      }));
    // Pivot: the first remaining variable (trimming has taken the ones alone in their SCC, the
    // assigned ones among them).
    if (tid == 0) pivot = n;
    __syncthreads();
    for (int i = tid; i < NW; i += blockDim.x)
      if (rem[i]) atomicMin(&pivot, i * 64 + __ffsll(rem[i]) - 1);
    for (int w = tid; w < 2 * W; w += blockDim.x) F_vals[w] = 0;  // F_vals and B_vals
    for (int i = tid; i < NW; i += blockDim.x) B[i] = 0;
    __syncthreads();
    if (pivot == n) break;  // every variable labelled (read by all threads after the barrier)
    if (tid == 0) {
      pivot_size = 0;
      B[pivot >> 6] = BIT(pivot);
      F_vals[match[pivot] >> 6] = B_vals[match[pivot] >> 6] = BIT(match[pivot]);
    }
    // Forward, over values: a remaining variable whose value is reached brings in the remaining
    // values of its domain. The variables reached are those whose value ends in F_vals.
    FIXPOINT(rows(D, n, W, [&](int y) { return HAS(rem, y) && HAS(F_vals, match[y]); }, [&](int y, int w, u64 d) {
      const u64 e = d & rem_vals[w] & ~F_vals[w];
      if (e) { or_word(F_vals, w, e); changed = 1; }
      return false;
    }, nothing));
    backward(D, match, n, W, B, B_vals, rem, changed);
    WARP_LOOP(x, n) {
      const bool scc = x < n && HAS(rem, x) && HAS(F_vals, match[x]) && HAS(B, x);
      if (scc) { label[x] = pivot; clear_bit(rem_vals, match[x]); }
      const unsigned bits = warp_bits(rem, x, scc, true);
      if ((tid & 31) == 0 && bits) atomicAdd(&pivot_size, __popc(bits));
    }
    __syncthreads();
    if (tid == 0 && pivot_size > big_size) { big = pivot; big_size = pivot_size; }
  }

  // Removals: x keeps v iff v is free or matched within x's SCC. The largest SCC's rows are
  // checked a word at a time against its values (F_vals); the others value by value. They also
  // leave the domains kept on the device.
  for (int w = tid; w < W; w += blockDim.x) F_vals[w] = 0;
  if (tid == 0) count = 0;
  __syncthreads();
  for (int x = tid; x < n; x += blockDim.x)
    if (label[x] == big) set_bit(F_vals, match[x]);
  __syncthreads();
  rows(D, n, W, all, [&](int x, int w, u64 d) {
    const int lx = label[x];
    u64 e = d & ~free_vals[w], r = 0;
    if (lx == big) r = e & ~F_vals[w];
    else
      while (e) {
        int b = __ffsll(e) - 1;
        e &= e - 1;
        if (label[owner[w * 64 + b]] != lx) r |= 1ull << b;
      }
    if (r) { R[(size_t)x * W + w] = r; D[(size_t)w * n + x] = d & ~r; }  // R (rows) is cleared before each call
    while (r) {
      int b = __ffsll(r) - 1;
      r &= r - 1;
      int k = atomicAdd(&count, 1);
      if (k < cap) reinterpret_cast<int2*>(out + 2)[k] = make_int2(x, w * 64 + b);
    }
    return false;
  }, nothing);
  __syncthreads();
  if (tid == 0) out[0] = count;
}
"""


def shared_words(n: int, m: int) -> int:
    """64-bit words of shared bitsets the kernel needs: two over variables, four over values."""
    return 2 * ((n + 63) // 64) + 4 * ((m + 63) // 64)


def fits(n: int, m: int) -> bool:
    """Whether one block's shared memory holds the bitsets (about 90,000 variables and values)."""
    return 8 * shared_words(n, m) + 64 <= SHARED_MAX


def kernel_source(n: int, m: int) -> str:
    """The CUDA source for a constraint of n variables and m values: the shared pool is sized for
    the largest of a few classes, so a search compiles a handful of kernels, not one per size."""
    words = 1 << max(shared_words(n, m) - 1, 63).bit_length()  # a power of two, at least 64
    words = min(words, (SHARED_MAX - 64) // 8)
    return SOURCE.replace("SHARED_WORDS", str(words)).replace("BLOCK", str(THREADS)).replace("NAME", NAME)


def _kernel(n: int, m: int):
    """The kernel for this size class (cuda/loader.py: compiled once per process, kept by CuPy's disk cache)."""
    if not fits(n, m):
        raise ValueError(f"AllDifferent of {n} variables and {m} values: bitsets beyond one block's shared memory")
    return loader.load(kernel_source(n, m), NAME)


class _HostBuffer:
    """int32 host memory the kernel reads or writes in place: page-locked memory is addressed from
    the device by its host pointer (unified addressing), so a call makes no copies and no copy
    calls. Where memory cannot be pinned, through a device array and copies."""

    def __init__(self, cp, size: int):
        self.cp, self.host = cp, pinned_array(cp, (size,), np.int32)
        self.dev = None if self.host.base is not None else cp.empty(size, dtype=cp.int32)

    def arg(self):
        """The kernel argument (the same across calls)."""
        return np.uint64(self.host.ctypes.data) if self.dev is None else self.dev

    def upload(self, size: int) -> None:
        """The first `size` entries written on the host, where the kernel will read them."""
        if self.dev is not None:
            self.dev[:size].set(self.host[:size])

    def written(self) -> np.ndarray:
        """The host array, once the kernel's writes have landed (waits for the stream)."""
        if self.dev is None:
            self.cp.cuda.get_current_stream().synchronize()
        else:
            self.dev.get(out=self.host)
        return self.host


class DeviceDomains:
    """One AllDifferent's bit-packed domains and matching kept on the device between the
    propagation calls of a search, with the kernel's scratch arrays: a call sends only the edges
    removed since the last call (a few, not the n x m domains); the kernel repairs the matching
    there and leaves the domains filtered as they are on the host. The removed
    edges go in, and GAC's removals come out, through page-locked host memory the kernel reads
    and writes: one launch and one synchronisation per call. With `replay` (a search's constraint,
    called many times) the launch is captured once in a CUDA graph and replayed (its arguments
    do not change), which costs the host about half of a launch from Python."""

    def __init__(self, cp, words: np.ndarray, m: int, match: np.ndarray | None = None, replay: bool = True):
        n, width = words.shape
        self.cp, self.n, self.m = cp, n, m
        self.kernel = _kernel(n, m)
        self.words = cp.asarray(np.ascontiguousarray(words.T))  # word-major: the kernel's layout
        self.match = cp.asarray(np.full(n, -1, np.int32) if match is None else np.asarray(match, np.int32))
        self.owner, self.via, self.label, self.unmatched = (cp.empty(k, dtype=cp.int32) for k in (m, m, n, n))
        self.removed = cp.zeros((n, width), dtype=cp.uint64)  # the kernel writes its non-zero words
        self.out = _HostBuffer(cp, 2 + 2 * LIST_CAP)  # count, padding, then (variable, value) pairs
        self.replay = replay
        self._sending(n)

    def _sending(self, edges: int) -> None:
        """Room to send this many removed edges (count, padding, pairs); the launch's arguments."""
        self.up = _HostBuffer(self.cp, 2 + 2 * edges)
        self.args = (self.words, self.match, self.up.arg(), np.int32(self.n), np.int32(self.m), np.int32(LIST_CAP),
                     self.owner, self.via, self.label, self.unmatched, self.removed, self.out.arg())
        self.graph = None
        if self.replay:  # captured, not run
            capture = self.cp.cuda.Stream(non_blocking=True)
            with capture:
                capture.begin_capture()
                self._run()
                self.graph = capture.end_capture()

    def _launch(self) -> None:
        if self.graph is None:
            self._run()
        else:
            self.graph.launch(self.cp.cuda.get_current_stream())

    def _run(self) -> None:
        """The kernel writes every removal to the bit-packed rows as well as to the list, which is
        read instead when it holds them all: the rows are cleared before each call, so that a
        call that overflows the list reads only its own."""
        self.removed.fill(0)
        self.kernel((1,), (THREADS,), self.args)

    def reset(self, words: np.ndarray, match: np.ndarray) -> None:
        """Start again from these domains (alldiff.pack's rows) and matching (-1: free), in the
        arrays the kernel and its graph read: a search that backtracked restored values."""
        self.words.set(np.ascontiguousarray(words.T))
        self.match.set(np.asarray(match, dtype=np.int32))

    def domains(self) -> np.ndarray:
        """The domains on the device, bit-packed as alldiff.pack lays them out, on the host."""
        return self.words.get().T

    def matching(self) -> np.ndarray:
        """The matching on the device (value per variable), on the host."""
        return self.match.get().astype(np.int64)

    def removals(self, removed=None) -> tuple[np.ndarray, np.ndarray]:
        """(rows, columns) GAC removes once the edges `removed` (rows, columns) are gone; raises
        alldiff.Infeasible when no matching covers every variable then."""
        rows, cols = removed if removed is not None else ((), ())
        k = len(rows)
        if 2 + 2 * k > self.up.host.size:
            self._sending(2 * k)
        self.up.host[0] = k
        self.up.host[2:2 + 2 * k:2], self.up.host[3:2 + 2 * k:2] = rows, cols
        self.up.upload(2 + 2 * k)
        self._launch()
        head = self.out.written()
        count = int(head[0])
        if count < 0:
            raise Infeasible
        if count <= LIST_CAP:
            pairs = head[2:2 + 2 * count].reshape(count, 2).astype(np.int64)
            return pairs[:, 0], pairs[:, 1]
        words = self.removed.get()
        r, w = np.nonzero(words)  # the words holding removals, then their bits
        bits = np.unpackbits(words[r, w].view(np.uint8).reshape(-1, 8), axis=1, bitorder="little")
        k, b = np.nonzero(bits)
        return r[k].astype(np.int64), (64 * w[k] + b).astype(np.int64)


def removals_gpu(cp, words: np.ndarray, match: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, columns) of the edges GAC removes, on the host, from host `words` (alldiff.pack of the
    domains, n rows) and a matching covering every variable: two uploads and one launch (a
    download more when more than LIST_CAP edges go)."""
    return DeviceDomains(cp, words, m, match, replay=False).removals()
