"""The dense join-sum/minimise step, written against an array module: every engine's step for a
mini-bucket whose tables fit, and the host tables engines hand over.
"""
from __future__ import annotations

import functools
import itertools
import math
import threading
from typing import Sequence

from gpusolve.plan import buckets as sizes  # row sizes read at call time (tests change them)
from gpusolve.plan.buckets import CHUNK_ENTRIES

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

