"""The engine interface and the dense join-sum/minimise step written against an array module.

An engine owns where tables live (host or device) and how one mini-bucket is
computed; planning, ordering and the value-assignment phase are shared.
Every attribute a caller reads is declared on `Engine`, with the value of an
engine that keeps everything in host memory.
"""
from __future__ import annotations

import functools
import itertools
import math
import threading
from abc import ABC, abstractmethod
from typing import Callable, Sequence

from gpusolve.plan import buckets as sizes  # row sizes read at call time (tests change them)
from gpusolve.plan.buckets import CHUNK_ENTRIES, MiniBucket

Scoped = tuple[object, tuple[int, ...]]  # (table on the engine, its scope)


class HostTable:
    """A dense table an engine keeps in host memory because it did not fit its device budget.

    Buckets that read it take the slices they need from `host`; indexing
    returns an array of the engine's module `xp`, which is what the
    value-assignment phase uses.
    """

    def __init__(self, host, xp):
        self.host = host
        self._xp = xp

    def __getitem__(self, idx):
        return self._xp.asarray(self.host[idx])


def host_or_table(table):
    """The host array of a HostTable, any other table itself."""
    return table.host if isinstance(table, HostTable) else table


class Engine(ABC):
    """Where tables live and how a mini-bucket is computed. Callers use what is declared here and
    nothing else: run_plan calls `eliminate_bucket` for every mini-bucket, which picks the dense
    step (`eliminate`, per engine) or the sparse one, placed by `budget` and `device_bytes`."""

    name: str = "?"
    xp = None  # the array module tables live in
    budget: int | None = None  # device bytes the engine may hold; None: tables live in host memory
    compile_s: float = 0.0  # seconds spent compiling kernels so far
    threads: int = 1  # host threads the dense step may use

    @property
    def device_bytes(self) -> int:
        """Device memory held now by tables, messages and temporaries (counted against `budget`)."""
        return 0

    @functools.cached_property
    def stream_log(self) -> list[dict]:
        """One record per step streamed through host memory (streaming.Pipeline.map): what, chunks,
        bytes each way, seconds, GB/s, and copy, work and overlap seconds."""
        return []

    @functools.cached_property
    def pipeline(self):
        """The one streaming.Pipeline of this engine: its streams and kept pinned buffers, logging to stream_log."""
        from .streaming import Pipeline
        return Pipeline(self.xp, self.stream_log)

    @abstractmethod
    def put(self, table):
        """Host numpy table -> engine table."""

    @abstractmethod
    def get(self, table):
        """Engine table -> host numpy array."""

    def put_many(self, tables):
        """All original tables at once, so a device engine can batch them into one transfer."""
        return [self.put(t) for t in tables]

    def assign_values(self, problem, plan, tables, messages) -> list[int] | None:
        """The whole value-assignment phase, or None to let eliminate.assign recompute bucket by bucket."""
        return None

    def block_entries(self) -> int:
        """Joint entries one contraction block (probabilistic.contract) may hold: cache-sized here."""
        return CHUNK_ENTRIES

    @property
    def startup_s(self) -> float:
        """Fixed cost of starting the engine (device context, kernel compilation); 0 on the CPU."""
        return 0.0

    @abstractmethod
    def eliminate(self, mb: MiniBucket, inputs: Sequence[Scoped], domains: Sequence[int], top,
                  integer: bool, check: Callable[[], None] | None = None, op: str = "min", where: str | None = None):
        """Dense step: message of `mb` over mb.scope, mb.var eliminated from the (saturating) sum of `inputs`.

        `op` is the semiring's elimination (see OPS); costs always combine by +. `where` is the
        plan's placement of the bucket (plan.place: host, device or streamed); None: the engine
        judges from the memory it holds now.
        """

    def eliminate_bucket(self, mb: MiniBucket, inputs: Sequence[Scoped], domains: Sequence[int], top,
                         integer: bool, check: Callable[[], None] | None = None, op: str = "min",
                         bound=None, row_limit: int | None = None, where: str | None = None,
                         dense_step: Callable | None = None):
        """One mini-bucket, sparse or dense as the plan says; keeps `bound`'s active tables in step.

        A dense mini-bucket gets its sparse inputs expanded to dense tables
        and runs `eliminate`, or `dense_step` (same arguments) when given: a
        run that slices some buckets over Dask workers (slicing.SlicedStep).
        Sparse tables drop rows at top, which only (min, +) elimination
        allows; `bound` (a sparse.RestBound) prunes their rows, `row_limit`
        caps the rows stored.
        """
        from . import sparse  # NumPy: loaded with the first bucket, not with the engine's import
        if bound is not None:
            bound.consume([("f", i) for i in mb.functions] + [("m", j) for j in mb.messages])
        if mb.sparse:
            if op != "min":
                raise ValueError(f"sparse tables support min elimination only, not {op!r}")
            out = self._eliminate_placed(mb, inputs, domains, top, row_limit, check, bound)
        else:
            dtype = self.xp.int64 if integer else self.xp.float64
            dense = [(sparse.to_dense(sparse.module_of(self.xp, t.keys), t, top, dtype)
                      if isinstance(t, sparse.SparseTable) else t, s) for t, s in inputs]
            out = dense_step(mb, dense, domains, top, integer, check, op) if dense_step else \
                self.eliminate(mb, dense, domains, top, integer, check, op, where)
        if bound is not None:
            bound.add(("m", mb.index), out, mb.scope)
        return out

    def _eliminate_placed(self, mb, inputs, domains, top, row_limit, check, bound):
        """A sparse bucket in device memory while it fits `budget`, else streamed through host
        memory: predicted from the inputs' rows, or found out when the stored rows or the
        device's allocator overflow."""
        from . import sparse

        def run(**placement):
            return sparse.eliminate_sparse(self.xp, mb.var, mb.scope, inputs, domains, top, row_limit, check,
                                           bound, **placement)
        if self.budget is None:
            return run()
        room = self.budget - self.device_bytes
        rows_in = sum(t.rows if isinstance(t, sparse.SparseTable) else host_or_table(t).size for t, _ in inputs)
        work = 4 * rows_in * sizes.ROW_BYTES + min(mb.joint_rows, sizes.CHUNK_ROWS) * sizes.WORK_ROW_BYTES
        if work <= room:
            try:
                return run(device_rows=(room - work) // (4 * sizes.ROW_BYTES))
            except sparse.SparseOverflow:
                raise
            except MemoryError:  # DeviceFull, or the device allocator's out-of-memory error
                pass
        return run(streamer=sparse.Streamer(self.pipeline, room))


# Eliminations over costs c = -log10 p: "min" (WCSP cost, MPE: max probability),
# "max" (min probability, for lower bounds on Z), "lse" (sum of probabilities).
OPS = ("min", "max", "lse")


def reduce_axes(xp, acc, axes: tuple[int, ...], op: str):
    """Eliminate `axes` of a cost table with `op`; lse is shifted by the minimum for stability."""
    if op == "min":
        return acc.min(axis=axes)
    if op == "max":
        return acc.max(axis=axes)
    if op != "lse":
        raise ValueError(f"unknown elimination {op!r}")
    m = acc.min(axis=axes, keepdims=True)
    finite = xp.isfinite(m)
    shift = xp.where(finite, m, 0.0)
    total = xp.sum(xp.power(10.0, shift - acc), axis=axes, keepdims=True)
    out = xp.where(finite, shift - xp.log10(xp.where(finite, total, 1.0)), xp.inf)
    return out.reshape(tuple(n for i, n in enumerate(acc.shape) if i not in axes))


def aligned(xp, table, scope: tuple[int, ...], axes: dict[int, int], ndim: int):
    """View of `table` with one axis per bucket variable (size 1 where absent)."""
    perm = sorted(range(len(scope)), key=lambda i: axes[scope[i]])
    view = xp.transpose(table, perm) if perm != list(range(len(scope))) else table
    shape = [1] * ndim
    for i in perm:
        shape[axes[scope[i]]] = table.shape[i]
    return view.reshape(shape)


def needs_clamp_each_step(n_inputs: int, top, integer: bool) -> bool:
    """Whether a sum of n costs <= top could overflow int64 before the final clamp."""
    return integer and n_inputs * int(top) >= (1 << 63)


def eliminate_dense(xp, var: int, sep: tuple[int, ...], inputs: Sequence[Scoped],
                    domains: Sequence[int], top, integer: bool, check=None, op: str = "min",
                    chunk: int = CHUNK_ENTRIES, threads: int = 1):
    """Dense bucket step: join-sum the inputs and minimise over `var`, chunk by chunk.

    Axis 0 is the eliminated variable, so the minimum is a sequence of
    element-wise minima over contiguous rows. Chunks run over the leading
    separator axes so the working set stays under `chunk` entries (a GPU, with
    launch costs per chunk, wants larger chunks than a CPU cache). With
    `threads` > 1 (NumPy) that many threads compute blocks at once, a working
    set each: NumPy releases the GIL in the sums and minima.
    """
    out_shape = tuple(domains[u] for u in sep)
    out = xp.empty(out_shape, dtype=xp.int64 if integer else xp.float64)

    def step(idx, lead, acc):
        if op != "lse" and xp.__name__ == "numpy":  # straight into the message: no temporaries
            m = (acc.min if op == "min" else acc.max)(axis=0, out=out[idx + (...,)].reshape(acc.shape[1:]))
            if integer:
                xp.minimum(m, top, out=m)
            return
        m = reduce_axes(xp, acc, (0,), op)
        if integer:
            m = xp.minimum(m, top)
        out[idx] = m.reshape(m.shape[lead:]) if lead else m
    _run_blocks(xp, var, sep, inputs, domains, top, integer, check, chunk, threads, step)
    return out
def min_marginal_dense(xp, var: int, sep: tuple[int, ...], inputs: Sequence[Scoped],
                       domains: Sequence[int], top, integer: bool, check=None,
                       chunk: int = CHUNK_ENTRIES):
    """Min-marginal of the join over `var`: minimise the (saturating) sum over every `sep` variable.

    The quantity mini-bucket moment matching equalises across a bucket; the
    same chunked join as eliminate_dense, so working memory stays bounded.
    """
    best = None
    for _, _, acc in _joint_blocks(xp, var, sep, inputs, domains, top, integer, check, chunk):
        m = acc.reshape(acc.shape[0], -1).min(axis=1)
        best = m if best is None else xp.minimum(best, m)
    return xp.minimum(best, top) if integer else best


def join_dense(xp, var: int, sep: tuple[int, ...], inputs: Sequence[Scoped], domains: Sequence[int], top,
               integer: bool):
    """The whole join over (var,) + sep (saturating), for code that keeps it (cost shifting's regions)."""
    shape = (domains[var],) + tuple(domains[u] for u in sep)
    (_, _, acc), = _joint_blocks(xp, var, sep, inputs, domains, top, integer, None, math.prod(shape))
    joint = xp.array(xp.broadcast_to(acc, shape))  # a copy: one input alone is a view of it
    return xp.minimum(joint, top, out=joint) if integer else joint


def _joint_blocks(xp, var, sep, inputs, domains, top, integer, check, chunk):
    """Blocks (index over the leading separator axes, number of those axes, joint costs) of the join.

    Axis 0 of a block is `var`. Inputs are summed smallest first: partial sums
    stay in the union of the scopes seen so far, and only the last addition
    touches the whole joint block.
    """
    block, indices = _blocker(xp, var, sep, inputs, domains, top, integer, chunk)
    for idx in indices:
        if check is not None:
            check()
        yield block(idx)


def _blocker(xp, var, sep, inputs, domains, top, integer, chunk):
    """(the function computing one block of _joint_blocks from its index, every index in order)."""
    axes = {var: 0}
    axes.update({u: i + 1 for i, u in enumerate(sep)})
    ndim = len(sep) + 1
    views = sorted((aligned(xp, t, s, axes, ndim) for t, s in inputs), key=lambda a: a.size)
    out_shape = tuple(domains[u] for u in sep)
    lead = _leading_axes(out_shape, domains[var], chunk)
    clamp_each = needs_clamp_each_step(len(views), top, integer)

    on_host = xp.__name__ == "numpy"

    def block(idx):
        parts = [v[(slice(None),) + tuple(slice(i, i + 1) if v.shape[a + 1] > 1 else slice(None)
                                          for a, i in enumerate(idx))] for v in views]
        acc = parts[0]
        for j, t in enumerate(parts[1:]):
            if on_host:
                shape = xp.broadcast_shapes(acc.shape, t.shape)
                acc = xp.add(acc, t, out=_scratch(xp, j % 2, shape, xp.result_type(acc, t)))
            else:
                acc = acc + t
            if clamp_each:
                xp.minimum(acc, top, out=acc)
        return idx, lead, acc
    return block, list(itertools.product(*(range(s) for s in out_shape[:lead])))


_local = threading.local()


def _scratch(np, k: int, shape, dtype):
    """This thread's k-th (0 or 1) scratch array, as `shape`: the host's partial sums without an
    allocation per block. A large temporary is mmapped and unmapped each time, and with several
    threads the unmapping (TLB shootdowns on every core) costs more than the sums.
    A block's sums live until the next block of the same thread asks for the buffer again."""
    n = math.prod(shape)
    bufs = _local.__dict__.setdefault("bufs", {})
    buf = bufs.get((k, dtype))
    if buf is None or buf.size < n:
        buf = bufs[(k, dtype)] = np.empty(max(n, 1 << 12), dtype)
    return buf[:n].reshape(shape)


def _run_blocks(xp, var, sep, inputs, domains, top, integer, check, chunk, threads, step):
    """step(*block) for every block of the join: in this thread, or over up to `threads` threads
    (NumPy; at most plan.THREADS_MAX, one per `chunk` entries of the join), each thread a block
    of `chunk` entries at a time: blocks of the same size as one thread's, so the same message bit
    for bit (smaller blocks cost more in the Python between NumPy calls than the threads gain)."""
    joint = domains[var] * math.prod(domains[u] for u in sep)
    threads = min(threads, sizes.THREADS_MAX, joint // chunk) if xp.__name__ == "numpy" else 1
    if threads <= 1:
        for b in _joint_blocks(xp, var, sep, inputs, domains, top, integer, check, chunk):
            step(*b)
        return
    block, indices = _blocker(xp, var, sep, inputs, domains, top, integer, chunk)
    failed = []  # set by a stop (check) or an error: the blocks not started then are skipped

    def work(idx):
        if failed:
            return
        try:
            if check is not None:
                check()
            step(*block(idx))
        except BaseException:
            failed.append(True)
            raise
    for f in [_pool(threads).submit(work, idx) for idx in indices]:
        f.result()


@functools.lru_cache(maxsize=None)
def _pool(threads: int):
    from concurrent.futures import ThreadPoolExecutor
    return ThreadPoolExecutor(threads, thread_name_prefix="gpusolve-dense")


def _leading_axes(shape: tuple[int, ...], d: int, chunk: int) -> int:
    """Fewest leading axes to iterate over so that a block holds <= `chunk` joint entries."""
    for lead in range(len(shape) + 1):
        if math.prod(shape[lead:]) * d <= chunk:
            return lead
    return len(shape)

