"""The GPU engine: CuPy tables, one raw CUDA kernel launch per mini-bucket, chunked streaming.

Tables live on the device between buckets. A mini-bucket whose joint table is
large gets a kernel generated for its exact shape (kernels.py; loaded once per process by
cuda/loader.py, and kept in CuPy's disk cache across processes); the others share one shape-generic kernel per
arithmetic class, which reads the bucket's shape from a descriptor, so no bucket waits for a
compilation of its own (the dense step `eliminate_dense` on CuPy arrays is left for buckets
beyond the generic kernel's inputs or axes). A message that does not fit the device budget is computed in chunks of
output rows on the streaming pipeline (streaming.py) into pinned host memory; later buckets
stream the slices they need back in. Values are assigned by one more kernel,
a single block walking the plan backwards, so the phase costs one launch and
one copy back instead of a synchronisation per variable.

CuPy is imported when an engine is made, never at package import.
"""
from __future__ import annotations

import ctypes
import itertools
import os
import time

import numpy as np

from gpusolve.cuda import loader
from gpusolve.cuda.runtime import device_budget, device_info, import_cupy
from .base import Engine
from .dense import HostTable, eliminate_dense
from .kernels import (ASSIGN_BLOCK_MAX, ASSIGN_SHARED_MAX, BLOCK, GENERIC_MAX_FREE, GENERIC_MAX_OPS, FusedKernel,
                      assign_source, fused_source, generic_descriptor, generic_source, kernel_mode, load)
from .streaming import dense_chunks, stream_dense

# A mini-bucket runs a kernel specialised to its shape when one is already
# compiled in this process, or when it has FUSE_MIN joint entries: below that the
# shape-generic kernel (prebuilt, or compiled once per arithmetic class) finishes
# before a specialised one would have compiled (H100, bench/gpu_kernel.py 2026-11-24:
# generic 2.2e11 joint entries/s on six inputs, 3.4e11 on three; specialised
# 1.9e12-3.7e12 after 0.12-0.24 s of compilation: even from about 3e10 entries).
FUSE_MIN = 1 << 35
# int64 slots of the pinned ring that stages generic kernels' descriptors (one is at most
# about 1,100): the stream passes a slot before it is written again, with no host sync per bucket.
DESCRIPTOR_RING = 1 << 17
# Working set of the dense CuPy step: larger than the CPU's CHUNK_ENTRIES, since
# each chunk costs launches (grid12x12 lse: 1M-entry chunks 0.28 s, 16M 0.087 s).
DENSE_CHUNK = 1 << 24


class _Operand:
    """A bucket input: its array (cupy on the device, numpy on the host), scope and element strides."""

    __slots__ = ("array", "scope", "on_device", "strides")

    def __init__(self, array, scope: tuple[int, ...], on_device: bool):
        self.array, self.scope, self.on_device = array, scope, on_device
        # read once: cupy's strides property builds a tuple on every access
        item = array.itemsize
        self.strides = {u: s // item for u, s in zip(scope, array.strides)}

    def stride_of(self, u) -> int:
        """Element stride along variable u, 0 where u is not in the scope."""
        return self.strides.get(u, 0)


class CupyEngine(Engine):
    name = "cupy"

    def __init__(self, gpu_mem_limit: int | None = None, fuse_min: int = FUSE_MIN,
                 stage: bool = True, generic: bool = True):
        t0 = time.perf_counter()
        cupy = import_cupy()  # not cupyx: importing it pulls in scipy.sparse, 0.3 s of a fresh process
        if "CUPY_ACCELERATORS" not in os.environ:
            # CuPy's CUB block reductions compile CUB's headers for each reduction and size class
            # on first use: 1.3-1.5 s each, every new grid in a batch paying again (local search's
            # and JGLP's `any()`, bench/batch_gpu.py); CuPy's own reduction kernels compile in 0.1 s.
            cupy._core.set_reduction_accelerators([])
        self.xp = cupy
        self._pool = cupy.get_default_memory_pool()
        self._base_used = self._pool.used_bytes()
        self.device_name, self.sm_count, _ = device_info(cupy.cuda.runtime.getDevice())
        self.budget = device_budget(gpu_mem_limit)
        self.fuse_min = fuse_min
        self.stage = stage
        self.generic = generic
        self._ring = self._ring_dev = None
        self._ring_at = 0
        self.init_s = time.perf_counter() - t0
        self.kernels = loader.Account()  # what this engine's run loaded, wherever it launches them
        loader.charge_to(self.kernels)
        self.stats = {"fused": 0, "generic": 0, "dense": 0, "streamed": 0}

    @property
    def device_bytes(self) -> int:
        """Device memory in live arrays made since this engine started: tables, messages, temporaries."""
        return max(0, self._pool.used_bytes() - self._base_used)

    def block_entries(self) -> int:
        """What the device budget leaves for four float64 temporaries (at least 2^10)."""
        return max((self.budget - self.device_bytes) // 32, 1 << 10)

    @property
    def compile_s(self) -> float:
        return self.kernels.compile_s

    @property
    def startup_s(self) -> float:
        """CuPy import, device start and kernel compilation: the GPU's fixed cost."""
        return self.init_s + self.compile_s

    # -- tables -----------------------------------------------------------
    def put(self, table):
        return self.put_many([table])[0]

    def put_many(self, tables):
        """Upload tables in one transfer (a flat buffer, then views), while they fit half the budget.

        The tables are packed straight into a pinned buffer and copied synchronously, so the
        buffer is free again on return (cupy.asarray would pack, then copy into its own
        staging buffer). Tables past half the budget stay in host memory and are streamed in
        by the buckets that read them.
        """
        host = [np.ascontiguousarray(t) for t in tables]
        out: list = [None] * len(host)
        room = self.budget // 2 - self.device_bytes
        for dtype in {h.dtype for h in host}:
            chosen = []
            for i, h in enumerate(host):
                if h.dtype == dtype and h.nbytes <= room:
                    chosen.append(i)
                    room -= h.nbytes
            if not chosen:
                continue
            staging = self.pipeline.pinned((sum(host[i].size for i in chosen),), dtype, track=False)
            np.concatenate([host[i].ravel() for i in chosen], out=staging)
            flat = self.xp.cuda.alloc(staging.nbytes)
            flat.copy_from_host(staging.ctypes.data_as(ctypes.c_void_p), staging.nbytes)
            offset = 0
            for i in chosen:
                out[i] = self.xp.ndarray(host[i].shape, dtype, memptr=flat + offset)
                offset += host[i].nbytes
        return [HostTable(h, self.xp) if o is None else o for h, o in zip(host, out)]

    def get(self, table):
        if isinstance(table, HostTable):
            return table.host
        if isinstance(table, np.ndarray):
            return table
        return self.xp.asnumpy(table)

    def _operand(self, table, scope) -> _Operand:
        if isinstance(table, HostTable):
            return _Operand(table.host, tuple(scope), False)
        return _Operand(table, tuple(scope), not isinstance(table, np.ndarray))

    # -- elimination ------------------------------------------------------
    def eliminate(self, mb, inputs, domains, top, integer, check=None, op="min", where=None):
        cp = self.xp
        # eliminate_dense's summation order: smallest table first, stable
        ops = sorted((self._operand(t, s) for t, s in inputs), key=lambda o: o.array.size)
        dtype = np.int64 if integer else np.float64
        out_shape = tuple(domains[u] for u in mb.scope)
        out_bytes = mb.out_entries * 8
        generic = self.generic and len(ops) <= GENERIC_MAX_OPS and len(mb.scope) <= GENERIC_MAX_FREE
        work = 0 if mb.joint_entries >= self.fuse_min or generic else 3 * min(mb.joint_entries, DENSE_CHUNK) * 8
        host_bytes = sum(o.array.nbytes for o in ops if not o.on_device)
        if where is None:
            where = "device" if self.device_bytes + out_bytes + host_bytes + work <= self.budget else "streamed"
        if where != "streamed":
            try:
                dev_ops = [o if o.on_device else _Operand(cp.asarray(o.array), o.scope, True) for o in ops]
                key = self.fused_key(dev_ops, mb.var, mb.scope, domains, top, integer, op)
                if mb.joint_entries >= self.fuse_min or loader.loaded(key):
                    out = cp.empty(out_shape, dtype=dtype)
                    self.launch(out, dev_ops, {}, mb.var, mb.scope, domains, top, integer, op, spec=fused_source(*key))
                    self.stats["fused"] += 1
                elif generic:
                    out = cp.empty(out_shape, dtype=dtype)
                    self.launch_generic(out, dev_ops, mb.var, mb.scope, domains, top, integer, op)
                    self.stats["generic"] += 1
                else:
                    out = eliminate_dense(cp, mb.var, mb.scope, [(o.array, o.scope) for o in dev_ops],
                                          domains, top, integer, check, op, DENSE_CHUNK)
                    self.stats["dense"] += 1
                return out
            except cp.cuda.memory.OutOfMemoryError:
                pass  # the budget was optimistic: stream instead
        return self._streamed(mb, ops, domains, top, integer, check, op)

    def launch_generic(self, out, ops, var, free, domains, top, integer, op="min"):
        """Message rows over `free` into `out` by the shape-generic kernel: no compilation per shape."""
        mode, clamp = kernel_mode(len(ops), top, integer)
        desc = generic_descriptor([o.array.data.ptr for o in ops], [tuple(o.stride_of(u) for u in free) for o in ops],
                                  [o.stride_of(var) for o in ops], tuple(domains[u] for u in free), domains[var])
        k = load(generic_source("f64" if mode == "f64" else "i64", clamp, op))
        blocks = max(1, min(-(-int(desc[4]) // BLOCK), self.sm_count * 16))
        k((blocks,), (BLOCK,), (out, np.uint64(self._descriptor(desc)), np.int64(int(top) if integer else 0)),
          shared_mem=8 * desc.size)

    def _descriptor(self, desc) -> int:
        """Device address of a copy of `desc`, made on the current stream without a host sync:
        staged in a pinned ring whose slots are written again only after the stream has passed them."""
        runtime = self.xp.cuda.runtime
        if self._ring is None:
            self._ring = self.pipeline.pinned((DESCRIPTOR_RING,), np.int64, track=False)
            self._ring_dev = self.xp.empty(DESCRIPTOR_RING, dtype=np.int64)
        stream = self.xp.cuda.get_current_stream()
        if self._ring_at + desc.size > DESCRIPTOR_RING:
            stream.synchronize()
            self._ring_at = 0
        at, self._ring_at = self._ring_at, self._ring_at + desc.size
        self._ring[at:self._ring_at] = desc
        runtime.memcpyAsync(self._ring_dev.data.ptr + 8 * at, self._ring.ctypes.data + 8 * at, 8 * desc.size,
                            runtime.memcpyHostToDevice, stream.ptr)
        return self._ring_dev.data.ptr + 8 * at

    def fused_key(self, ops, var, free, domains, top, integer, op="min") -> tuple:
        """fused_source's arguments for these operands (the kernel's FusedKernel.key)."""
        mode, clamp = kernel_mode(len(ops), top, integer)
        return (mode, clamp, domains[var], tuple(domains[u] for u in free),
                tuple(tuple(o.stride_of(u) for u in free) for o in ops),
                tuple(o.stride_of(var) for o in ops), self.stage, op)

    def fused_spec(self, ops, var, free, domains, top, integer, op="min") -> FusedKernel:
        return fused_source(*self.fused_key(ops, var, free, domains, top, integer, op))

    def launch(self, out, ops, fixed, var, free, domains, top, integer, op="min",
               spec: FusedKernel | None = None):
        """Message rows over `free` into the contiguous device array `out`, variables in `fixed` held,
        on the current stream.

        `ops` are device operands in summation order; `spec` is the fused
        kernel when the caller already made it.
        """
        spec = spec or self.fused_spec(ops, var, free, domains, top, integer, op)
        k = load(spec)
        ptrs = [np.uint64(out.data.ptr)]
        for o in ops:
            base = sum(value * o.stride_of(u) for u, value in fixed.items()) if fixed else 0
            ptrs.append(np.uint64(o.array.data.ptr + base * o.array.itemsize))
        top_arg = np.int64(int(top) if integer else 0)
        k((min(spec.n_blocks, self.sm_count * 16),), (BLOCK,), (*ptrs, top_arg))

    # -- value assignment -------------------------------------------------
    def assign_values(self, problem, plan, tables, messages) -> list[int] | None:
        """eliminate.assign on the device: one upload of descriptors, one kernel, one copy back.

        The generic path costs a synchronisation and several launches per
        variable; here one block walks the plan (assign_source) and the
        result is the same assignment, value for value. None when a table
        the walk reads is sparse or lies in host memory beyond the device
        budget: then eliminate.assign's generic path runs.
        """
        from .sparse import SparseTable
        dtype = np.dtype(problem.dtype)
        domains = problem.domains  # a property that builds the list: read it once
        room = self.budget - self.device_bytes
        device: dict[int, object] = {}  # id(table) -> array the kernel reads (keeps uploads alive)
        steps: list[int] = []
        parts: list[int] = []
        terms: list[int] = []
        widest = 1
        for var in reversed(plan.order):
            if var in problem.evidence or not plan.buckets.get(var):
                continue  # no bucket: every value costs 0, np.argmin picks 0, already there
            first = len(parts) // 4
            for m in plan.buckets[var]:
                mb = plan.minibuckets[m]
                for table, scope in itertools.chain(
                        ((tables[i], problem.functions[i].scope) for i in mb.functions),
                        ((messages[j], plan.minibuckets[j].scope) for j in mb.messages)):
                    arr = device.get(id(table))
                    if arr is None:
                        if isinstance(table, SparseTable):
                            return None
                        arr = table.host if isinstance(table, HostTable) else table
                        if isinstance(arr, np.ndarray):
                            if arr.nbytes > room:
                                return None
                            room -= arr.nbytes
                            arr = self.xp.asarray(arr)
                        if arr.dtype != dtype:
                            arr = arr.astype(dtype)
                        device[id(table)] = arr
                    stride = [s // arr.itemsize for s in arr.strides]
                    along = stride[scope.index(var)] if var in scope else 0
                    parts += [arr.data.ptr, along, len(terms) // 2, 0]
                    for u, st in zip(scope, stride):
                        if u != var:
                            terms += [u, st]
                    parts[-1] = len(terms) // 2
            steps += [var, domains[var], first, len(parts) // 4]
            widest = max(widest, domains[var])
        values = [0] * len(problem.variables)
        for var, val in problem.evidence.items():
            values[var] = val
        if not steps:
            return values
        n_desc = len(steps) + len(parts) + len(terms)
        buf = self.xp.asarray(np.array(steps + parts + terms + values, dtype=np.int64))
        shared = 8 * (n_desc + len(values))
        cached = shared <= ASSIGN_SHARED_MAX
        threads = min(ASSIGN_BLOCK_MAX, -(-widest // 32) * 32)
        top = np.int64(int(problem.top) if problem.integer else 0)
        k = load(assign_source("i64" if problem.integer else "f64"))
        k((1,), (threads,), (np.uint64(buf.data.ptr), np.uint64(buf.data.ptr + 8 * n_desc),
                             *(np.int32(v) for v in (len(steps) // 4, len(steps), len(steps) + len(parts),
                                                     n_desc, len(values), cached)), top),
          shared_mem=shared if cached else 0)
        return [int(v) for v in buf[n_desc:].get()]

    def _streamed(self, mb, ops, domains, top, integer, check, op):
        """The message in chunks of output rows on the engine's pipeline (streaming.stream_dense),
        into pinned host memory; host inputs send only the slice a chunk selects, device inputs
        are sliced in place. The kernel is compiled before the first chunk (for operands strided
        as uploaded slices and views are), so the log times kernels alone."""
        cp = self.xp
        inputs = [(o.array, o.scope) for o in ops]
        plan = dense_chunks(mb.scope, inputs, domains, max(self.budget - self.device_bytes, 0))
        shaped = [o if o.on_device else _Operand(cp.empty(tuple(domains[u] for u in s), dtype=o.array.dtype), s, True)
                  for o, s in zip(ops, plan.scopes)]
        load(self.fused_spec(shaped, mb.var, plan.free, domains, top, integer, op))
        del shaped
        dtype = np.int64 if integer else np.float64

        def compute(chunk):  # the spec is looked up per chunk (fused_source is cached): strides decide it
            out = cp.empty(plan.rows, dtype=dtype)
            self.launch(out, [_Operand(a, s, True) for a, s in chunk], {}, mb.var, plan.free, domains, top,
                        integer, op)
            return out
        out = stream_dense(self.pipeline, plan, inputs, domains, dtype, compute, f"dense bucket {mb.index}",
                           check, bucket=mb.index)
        self.stats["streamed"] += 1
        return HostTable(out, cp)
