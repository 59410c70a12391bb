"""CUDA source generation for the GPU engine: pure Python, so its decisions are tested on any machine.

`fused_source` writes the join-sum/eliminate kernel of one bucket signature
(tiling, index width, arithmetic mode, clamping), `assign_source` the
value-assignment kernel, `kernel_mode` picks the arithmetic; `load` hands a
kernel to the one kernel loader, cuda/loader.py. Nothing here imports CuPy.
"""
from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass

import numpy as np

from gpusolve.cuda import cubins, loader
from .dense import needs_clamp_each_step

TILE_MAX = 16  # output rows one thread keeps in registers
BLOCK = 256  # threads per block of the fused kernel


@dataclass
class FusedKernel:
    """A generated kernel: its name, CUDA source, grid size, and the arguments that made it."""

    name: str
    source: str
    n_blocks: int
    key: tuple  # the generator's arguments: whether a kernel is compiled is known without generating it


def load(spec: FusedKernel):
    """The kernel on the current device, once per process (cuda/loader.py), keyed by the generator's arguments."""
    return loader.load(spec.source, spec.name, key=spec.key)


def _split_last_axis(dims, strides):
    """Split a last axis longer than TILE_MAX into (d/T, T) so a thread can own T rows of it."""
    if not dims or dims[-1] <= TILE_MAX:
        return dims, strides
    t = next((t for t in range(TILE_MAX, 1, -1) if dims[-1] % t == 0), 1)
    if t == 1:
        return dims, strides
    dims = dims[:-1] + (dims[-1] // t, t)
    strides = [s[:-1] + (s[-1] * t, s[-1]) for s in strides]
    return dims, strides


@functools.lru_cache(maxsize=4096)
def fused_source(mode: str, clamp_each: bool, d: int, dims: tuple[int, ...],
                 strides: tuple[tuple[int, ...], ...], vstrides: tuple[int, ...], stage: bool = True,
                 op: str = "min") -> FusedKernel:
    """CUDA source of the join-sum/minimise kernel for one bucket signature.

    `dims` are the output axes (last fastest), `strides[j]` input j's element
    stride along each of them (0 where absent), `vstrides[j]` its stride along
    the eliminated variable of domain `d`; inputs are listed in summation order.
    Cached: a signature seen before costs a dictionary look-up, not code generation.
    Every size is a compile-time constant, so digits decode through constant
    divisors and per-row offsets fold into immediates. A thread owns a tile of
    T consecutive rows (the trailing axes): inputs that do not vary inside the
    tile are summed once per value of the eliminated variable and reused for
    the T rows. Integer sums saturate at `top` and are order-free, so every
    such input is hoisted; float sums keep eliminate_dense's order (bit-equal
    results), so only a leading run of them is. `stage` writes the block's rows
    through shared memory so global stores are coalesced.
    mode: "i64" (int64 arithmetic), "i32" (int32 arithmetic on int64 tables,
    when the plan proves no sum reaches 2^31) or "f64"; op: "min", "max" or
    "lse" (f64 only: -log10 of the sum of 10^-s, kept stable as a running
    minimum m and a sum e of 10^(m - s) rescaled when m drops).
    """
    key = (mode, clamp_each, d, dims, strides, vstrides, stage, op)
    dims, strides = _split_last_axis(tuple(dims), [tuple(s) for s in strides])
    m = len(dims)
    q, tile = 0, 1
    while q < m and tile * dims[m - 1 - q] <= TILE_MAX:
        tile *= dims[m - 1 - q]
        q += 1
    outer = m - q
    n = len(strides)
    varies = [any(s[a] for a in range(outer, m)) for s in strides]
    order = list(range(n))
    if mode != "f64":
        order.sort(key=lambda j: varies[j])
    hoisted = 0
    while hoisted < n and not varies[order[hoisted]]:
        hoisted += 1
    n_tiles = math.prod(dims[:outer])
    rows = n_tiles * tile
    sizes = [1 + sum((dims[a] - 1) * s[a] for a in range(m)) + (d - 1) * vs
             for s, vs in zip(strides, vstrides)]
    big = max([rows] + sizes) >= (1 << 31)
    acc = {"i64": "long long", "i32": "int", "f64": "double"}[mode]
    val = "double" if mode == "f64" else "long long"
    idx = "long long" if big else "int"
    tix = "unsigned long long" if big else "unsigned int"
    if op == "lse" and mode != "f64":
        raise ValueError("lse elimination needs float costs")
    if op in ("min", "lse"):
        init = {"i64": "0x7fffffffffffffffLL", "i32": "0x7fffffff",
                "f64": "__longlong_as_double(0x7ff0000000000000LL)"}[mode]
    else:
        init = {"i64": "(-0x7fffffffffffffffLL - 1)", "i32": "(-0x7fffffff - 1)",
                "f64": "__longlong_as_double(0xfff0000000000000LL)"}[mode]
    better = ">" if op == "max" else "<"
    pitch = tile + 1 if tile % 2 == 0 else tile  # odd pitch: no shared-memory bank conflicts

    def tile_offset(j, i):
        digits, off = i, 0
        for a in range(m - 1, outer - 1, -1):
            off += (digits % dims[a]) * strides[j][a]
            digits //= dims[a]
        return off

    def load(j, i=None):
        terms = [f"o{j}"] if any(strides[j][a] for a in range(outer)) else []
        if vstrides[j]:
            terms.append(f"v * {vstrides[j]}")
        c = tile_offset(j, i) if i is not None else 0
        if c:
            terms.append(str(c))
        return f"({acc})in{j}[{' + '.join(terms) or '0'}]"

    clamp = "s = s < top ? s : top;" if clamp_each else ""
    lines = []
    for a in range(outer - 1, 0, -1):
        lines.append(f"const {idx} d{a} = ({idx})(r % {dims[a]}u); r /= {dims[a]}u;")
    if outer:
        lines.append(f"const {idx} d0 = ({idx})r;")
    for j in range(n):
        terms = [f"d{a} * {strides[j][a]}" for a in range(outer) if strides[j][a]]
        if terms:
            lines.append(f"const {idx} o{j} = {' + '.join(terms)};")
    lines += [f"{acc} b{i} = {init};" for i in range(tile)]
    if op == "lse":
        lines += [f"double e{i} = 0.0;" for i in range(tile)]
    # full unrolling only for small loop bodies: NVRTC 13.0 crashed on a 32 x 5-row x 4-input one
    body = d * (hoisted + tile * max(1, n - hoisted))
    lines.append(f"#pragma unroll {'' if body <= 320 else 4}")
    lines.append(f"for ({idx} v = 0; v < {d}; ++v) {{")
    if hoisted:
        lines.append(f"  {acc} h = {load(order[0])};")
        for j in order[1:hoisted]:
            lines.append(f"  {{ {acc} s = h + {load(j)}; {clamp} h = s; }}")
    for i in range(tile):
        rest = order[hoisted:]
        first = "h" if hoisted else load(rest[0], i)
        adds = "".join(f" s = s + {load(j, i)}; {clamp}" for j in (rest if hoisted else rest[1:]))
        if op == "lse":  # e{i} = sum of 10^(b{i} - s); nothing to add while every s is +inf
            keep = (f"if (s < b{i}) {{ e{i} = e{i} * exp10(s - b{i}) + 1.0; b{i} = s; }} "
                    f"else if (b{i} < {init}) e{i} += exp10(b{i} - s);")
        else:
            keep = f"b{i} = s {better} b{i} ? s : b{i};"
        lines.append(f"  {{ {acc} s = {first};{adds} {keep} }}")
    lines.append("}")
    if mode != "f64":
        lines += [f"b{i} = b{i} < top ? b{i} : top;" for i in range(tile)]
    if op == "lse":
        lines += [f"b{i} = b{i} < {init} ? b{i} - log10(e{i}) : b{i};" for i in range(tile)]
    if stage:
        lines += [f"stage[threadIdx.x * {pitch} + {i}] = ({val})b{i};" for i in range(tile)]
    else:
        lines += [f"out[t * {tile}LL + {i}] = ({val})b{i};" for i in range(tile)]
    body = "\n      ".join(lines)
    args = ", ".join([f"{val}* __restrict__ out"]
                     + [f"const {val}* __restrict__ in{j}" for j in range(n)]
                     + ["const long long top_"])
    n_blocks = -(-n_tiles // BLOCK)
    staged_copy = f"""
    __syncthreads();
    const long long row0 = b * {BLOCK * tile}LL;
    const int count = (int)min({BLOCK * tile}LL, {rows}LL - row0);
    for (int k = threadIdx.x; k < count; k += {BLOCK}) {{
      const int tl = k / {tile};
      out[row0 + k] = stage[tl * {pitch} + (k - tl * {tile})];
    }}
    __syncthreads();""" if stage else ""
    source = f"""extern "C" __global__ void __launch_bounds__({BLOCK}) NAME({args}) {{
  {f"__shared__ {val} stage[{BLOCK * pitch}];" if stage else ""}
  const {acc} top = ({acc})top_;
  for (long long b = blockIdx.x; b < {n_blocks}LL; b += gridDim.x) {{
    const long long t = b * {BLOCK} + threadIdx.x;
    if (t < {n_tiles}LL) {{
      {tix} r = ({tix})t;
      {body}
    }}{staged_copy}
  }}
}}
"""
    name = "be_" + hashlib.sha1(source.encode()).hexdigest()[:20]
    return FusedKernel(name, source.replace("NAME", name), n_blocks, key)


# The shape-generic kernel reads a bucket's shape from a descriptor at run time, so one
# compiled kernel per arithmetic class serves every bucket up to these sizes.
GENERIC_MAX_OPS = 32
GENERIC_MAX_FREE = 32
GENERIC_UNROLLED_OPS = 8  # buckets of up to this many inputs (most) get a kernel path unrolled for their count
GENERIC_HEADER = 5  # descriptor length, inputs, output axes, domain of the eliminated variable, rows


def generic_descriptor(addresses, strides, vstrides, dims, d: int) -> np.ndarray:
    """The int64 descriptor of one bucket for `generic_source`'s kernel.

    [length, n inputs, m axes, d, rows, dims[m], then per input: address, stride along the
    eliminated variable, strides along the m output axes]. Inputs in summation order.
    """
    n, m = len(addresses), len(dims)
    if n > GENERIC_MAX_OPS or m > GENERIC_MAX_FREE:
        raise ValueError(f"{n} inputs over {m} axes exceed the generic kernel's "
                         f"{GENERIC_MAX_OPS} inputs and {GENERIC_MAX_FREE} axes")
    head = [GENERIC_HEADER + m + n * (m + 2), n, m, d, math.prod(dims), *dims]
    body = [x for a, vs, st in zip(addresses, vstrides, strides) for x in (a, vs, *st)]
    return np.array(head + body, dtype=np.int64)


@functools.lru_cache(maxsize=16)
def generic_source(mode: str, clamp_each: bool, op: str = "min") -> FusedKernel:
    """CUDA source of the shape-generic join-sum/eliminate kernel: one per arithmetic class.

    Where `fused_source` bakes a bucket's sizes into its code (fast, but a new
    compilation per bucket shape, 0.1-0.5 s), this kernel reads them from a
    `generic_descriptor` copied to shared memory, so buckets of every shape
    share one compiled kernel, cached on disk by CuPy across processes. One
    thread per output row decodes its digits with run-time divisors and sums
    the inputs in the descriptor's order, so results equal `fused_source`'s
    and eliminate_dense's bit for bit. A bucket of up to GENERIC_UNROLLED_OPS inputs
    takes a path compiled for its count, with offsets and input pointers in registers
    rather than local memory (H100, bench/gpu_kernel.py: 2.2e11 joint entries/s
    instead of 7.6e10 on six inputs; grid n=49 d=10 eliminated in 10.4 ms, not
    21.4). mode: "i64" or "f64"; op as for fused_source.
    """
    if op == "lse" and mode != "f64":
        raise ValueError("lse elimination needs float costs")
    val = "double" if mode == "f64" else "long long"
    if op in ("min", "lse"):
        init = {"i64": "0x7fffffffffffffffLL", "f64": "__longlong_as_double(0x7ff0000000000000LL)"}[mode]
    else:
        init = {"i64": "(-0x7fffffffffffffffLL - 1)", "f64": "__longlong_as_double(0xfff0000000000000LL)"}[mode]
    clamp = "s = s < top ? s : top;" if clamp_each else ""
    if op == "lse":
        keep = "if (s < b) { e = e * exp10(s - b) + 1.0; b = s; } else if (b < INIT) e += exp10(b - s);"
        final = "b = b < INIT ? b - log10(e) : b;"
    else:
        keep = f"b = s {'>' if op == 'max' else '<'} b ? s : b;"
        final = "b = b < top ? b : top;" if mode == "i64" else ""
    cases = "".join(f"    case {n}: rows_fixed<{n}>(out, desc, top); break;\n"
                    for n in range(1, GENERIC_UNROLLED_OPS + 1))
    lse_init = "double e = 0.0;" if op == "lse" else ""
    source = f"""// Inputs 1..{GENERIC_UNROLLED_OPS}: a template instance each, offsets and pointers in registers; more: a loop
// over the descriptor's inputs (in shared memory), offsets in local memory.
template <int N, typename T>  // T: 32-bit division while the rows' index fits (64-bit division is emulated)
__device__ __forceinline__ void decode(long long r, int n, int m, const long long* dims, const long long* in,
                                       long long* off) {{
  T rest = (T)r;
  for (int a = m - 1; a >= 0; --a) {{
    const T dim = (T)dims[a], q = rest / dim;
    const long long digit = (long long)(rest - q * dim);
    rest = q;
    if (digit) {{
#pragma unroll
      for (int j = 0; j < (N ? N : n); ++j) off[j] += digit * in[j * (m + 2) + 2 + a];
    }}
  }}
}}
template <int N>
__device__ __forceinline__ void rows_fixed({val}* __restrict__ out, const long long* desc, const {val} top) {{
  const int m = (int)desc[2];
  const long long d = desc[3], rows = desc[4];
  const long long* dims = desc + {GENERIC_HEADER};
  const long long* in = dims + m;  // input j: in[j * (m + 2)] address, +1 its stride along v, +2.. its strides
  const {val}* base[N];
  long long vs[N], off[N];
#pragma unroll
  for (int j = 0; j < N; ++j) {{
    base[j] = (const {val}*)in[j * (m + 2)];
    vs[j] = in[j * (m + 2) + 1];
  }}
  for (long long r = blockIdx.x * (long long){BLOCK} + threadIdx.x; r < rows; r += (long long)gridDim.x * {BLOCK}) {{
#pragma unroll
    for (int j = 0; j < N; ++j) off[j] = 0;
    if (rows <= 0xffffffffLL)
      decode<N, unsigned int>(r, N, m, dims, in, off);
    else
      decode<N, unsigned long long>(r, N, m, dims, in, off);
    {val} b = INIT;
    {lse_init}
    for (long long v = 0; v < d; ++v) {{
      {val} s = base[0][off[0]];
      off[0] += vs[0];
#pragma unroll
      for (int j = 1; j < N; ++j) {{
        s = s + base[j][off[j]];
        off[j] += vs[j];
        {clamp}
      }}
      {keep}
    }}
    {final}
    out[r] = b;
  }}
}}
__device__ __forceinline__ void rows_any({val}* __restrict__ out, const long long* desc, const {val} top) {{
  const int n = (int)desc[1], m = (int)desc[2];
  const long long d = desc[3], rows = desc[4];
  const long long* dims = desc + {GENERIC_HEADER};
  const long long* in = dims + m;
  long long off[{GENERIC_MAX_OPS}];
  for (long long r = blockIdx.x * (long long){BLOCK} + threadIdx.x; r < rows; r += (long long)gridDim.x * {BLOCK}) {{
    for (int j = 0; j < n; ++j) off[j] = 0;
    if (rows <= 0xffffffffLL)
      decode<0, unsigned int>(r, n, m, dims, in, off);
    else
      decode<0, unsigned long long>(r, n, m, dims, in, off);
    {val} b = INIT;
    {lse_init}
    for (long long v = 0; v < d; ++v) {{
      {val} s = ((const {val}*)in[0])[off[0] + v * in[1]];
      for (int j = 1; j < n; ++j) {{
        s = s + ((const {val}*)in[j * (m + 2)])[off[j] + v * in[j * (m + 2) + 1]];
        {clamp}
      }}
      {keep}
    }}
    {final}
    out[r] = b;
  }}
}}
extern "C" __global__ void __launch_bounds__({BLOCK}) NAME(
    {val}* __restrict__ out, const long long* __restrict__ desc_g, const long long top_) {{
  extern __shared__ long long desc[];
  const int n_desc = (int)desc_g[0];
  for (int i = threadIdx.x; i < n_desc; i += blockDim.x) desc[i] = desc_g[i];
  __syncthreads();
  const {val} top = ({val})top_;
  switch ((int)desc[1]) {{
{cases}    default: rows_any(out, desc, top);
  }}
}}
""".replace("INIT", init)
    name = "be_generic_" + hashlib.sha1(source.encode()).hexdigest()[:20]
    return FusedKernel(name, source.replace("NAME", name), 0, ("generic", mode, clamp_each, op))


ASSIGN_BLOCK_MAX = 256  # threads of the value-assignment block (values of one variable per thread)
ASSIGN_SHARED_MAX = 40 << 10  # descriptors and values up to this size are read from shared memory


@functools.lru_cache(maxsize=2)
def assign_source(mode: str) -> FusedKernel:
    """CUDA source of the value-assignment kernel: one block walks the whole plan.

    Step s (reverse elimination order) picks the value of variable
    steps[4s] (domain steps[4s+1]) from parts [steps[4s+2], steps[4s+3]):
    part p is a table at address parts[4p], read at x * parts[4p+1] plus
    value[u] * stride for each (u, stride) pair in terms[parts[4p+2]:
    parts[4p+3]]. Threads take values x of the domain, sum the parts in
    eliminate.assign's order (int64 saturating at top after every addition,
    float64 left to right from 0), and the block keeps the smallest sum with
    the lowest x, NaN first, as np.argmin does. Thread 0 stores the choice in
    `values`, which the next steps read after the barrier. steps, parts and
    terms lie back to back in `desc`, then the values; when `cached`, all of
    it is first copied to shared memory, so a step waits on one global load
    per table instead of a chain of five.
    mode: "i64" or "f64".
    """
    if mode == "i64":
        typ, worst = "long long", "0x7fffffffffffffffLL"
        add = "c = (long long)((unsigned long long)c + (unsigned long long)t); c = c < top ? c : top;"
        better = "return a < b || (a == b && i < j);"
    else:
        typ, worst = "double", "__longlong_as_double(0x7ff0000000000000LL)"
        add = "c = c + t;"
        better = ("const bool na = isnan(a), nb = isnan(b);\n"
                  "  return (na && !nb) || a < b || ((a == b || (na && nb)) && i < j);")
    source = f"""__device__ __forceinline__ bool better({typ} a, int i, {typ} b, int j) {{
  {better}
}}
extern "C" __global__ void __launch_bounds__({ASSIGN_BLOCK_MAX}) NAME(
    const long long* __restrict__ desc, long long* __restrict__ values_out, const int n_steps,
    const int parts_at, const int terms_at, const int n_desc, const int n_vars, const int cached,
    const long long top_) {{
  extern __shared__ long long cache[];
  __shared__ {typ} warp_best[{ASSIGN_BLOCK_MAX // 32}];
  __shared__ int warp_arg[{ASSIGN_BLOCK_MAX // 32}];
  const long long* steps = desc;
  volatile long long* values = values_out;
  if (cached) {{
    for (int i = threadIdx.x; i < n_desc; i += blockDim.x) cache[i] = desc[i];
    for (int i = threadIdx.x; i < n_vars; i += blockDim.x) cache[n_desc + i] = values_out[i];
    __syncthreads();
    steps = cache;
    values = cache + n_desc;
  }}
  const long long* parts = steps + parts_at;
  const long long* terms = steps + terms_at;
  const {typ} top = ({typ})top_;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  for (int s = 0; s < n_steps; ++s) {{
    const long long var = steps[4 * s], d = steps[4 * s + 1];
    const long long p0 = steps[4 * s + 2], p1 = steps[4 * s + 3];
    {typ} best = {worst};
    int arg = 0x7fffffff;
    for (long long x = threadIdx.x; x < d; x += blockDim.x) {{
      {typ} c = 0;
      for (long long p = p0; p < p1; ++p) {{
        long long off = x * parts[4 * p + 1];
        for (long long k = parts[4 * p + 2]; k < parts[4 * p + 3]; ++k)
          off += values[terms[2 * k]] * terms[2 * k + 1];
        const {typ} t = ((const {typ}*)parts[4 * p])[off];
        {add}
      }}
      if (better(c, (int)x, best, arg)) {{ best = c; arg = (int)x; }}
    }}
    for (int o = 16; o > 0; o >>= 1) {{
      const {typ} ob = __shfl_down_sync(0xffffffffu, best, o);
      const int oa = __shfl_down_sync(0xffffffffu, arg, o);
      if (better(ob, oa, best, arg)) {{ best = ob; arg = oa; }}
    }}
    if (lane == 0) {{ warp_best[warp] = best; warp_arg[warp] = arg; }}
    __syncthreads();
    if (threadIdx.x == 0) {{
      for (int w = 1; w < n_warps; ++w)
        if (better(warp_best[w], warp_arg[w], best, arg)) {{ best = warp_best[w]; arg = warp_arg[w]; }}
      values[var] = arg;
    }}
    __syncthreads();
  }}
  if (cached)
    for (int i = threadIdx.x; i < n_vars; i += blockDim.x) values_out[i] = values[i];
}}
"""
    name = "assign_" + hashlib.sha1(source.encode()).hexdigest()[:20]
    return FusedKernel(name, source.replace("NAME", name), 1, ("assign", mode))


def kernel_mode(n_inputs: int, top, integer: bool) -> tuple[str, bool]:
    """(arithmetic mode, clamp after every addition) for a sum of n inputs each <= top."""
    if not integer:
        return "f64", False
    if n_inputs * int(top) < (1 << 31):
        return "i32", False
    return "i64", needs_clamp_each_step(n_inputs, top, integer)


def shape_generic_specs() -> list[FusedKernel]:
    """The kernels that serve every plan shape: the shape-generic elimination kernel of each
    arithmetic class and elimination, and the value-assignment kernel of each mode (what a
    server compiles at start and cuda/cubins.py ships prebuilt)."""
    specs = [generic_source(mode, clamp, op) for mode, clamp in (("i64", False), ("i64", True), ("f64", False))
             for op in ("min", "max", "lse") if op != "lse" or mode == "f64"]
    return specs + [assign_source(mode) for mode in ("i64", "f64")]


if __name__ == "__main__":  # python -m gpusolve.engines.kernels: the cubins cuda/cubins.py ships (make cubins)
    print(*cubins.build(shape_generic_specs()), sep="\n")
