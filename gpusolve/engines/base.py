"""The engine interface and the dense join-sum/minimise step written against an array module.

An engine owns where tables live (host or device) and how one mini-bucket is
computed; planning, ordering and the value-assignment phase are shared.
"""
from __future__ import annotations

import itertools
import math
from abc import ABC, abstractmethod
from typing import Callable, Sequence

from ..plan import CHUNK_ENTRIES, MiniBucket

Scoped = tuple[object, tuple[int, ...]]  # (table on the engine, its scope)


class Engine(ABC):
    name: str = "?"
    xp = None  # the array module tables live in
    compile_s: float = 0.0  # kernel compilation time so far (the GPU engine's)

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
                  integer: bool, check: Callable[[], None] | None = None, op: str = "min"):
        """Message of `mb` over mb.scope: eliminate mb.var from the (saturating) sum of `inputs`.

        `op` is the semiring's elimination (see OPS); costs always combine by +.
        """


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
                    chunk: int = CHUNK_ENTRIES):
    """Dense bucket step: join-sum the inputs and minimise over `var`, chunk by chunk.

    Axis 0 is the eliminated variable, so the minimum is a sequence of
    element-wise minima over contiguous rows. Chunks run over the leading
    separator axes so the working set stays under `chunk` entries (a GPU, with
    launch costs per chunk, wants larger chunks than a CPU cache).
    """
    out_shape = tuple(domains[u] for u in sep)
    out = xp.empty(out_shape, dtype=xp.int64 if integer else xp.float64)
    for idx, lead, acc in _joint_blocks(xp, var, sep, inputs, domains, top, integer, check, chunk):
        m = reduce_axes(xp, acc, (0,), op)
        if integer:
            m = xp.minimum(m, top)
        out[idx] = m.reshape(m.shape[lead:]) if lead else m
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


def _joint_blocks(xp, var, sep, inputs, domains, top, integer, check, chunk):
    """Blocks (index over the leading separator axes, number of those axes, joint costs) of the join.

    Axis 0 of a block is `var`. Inputs are summed smallest first: partial sums
    stay in the union of the scopes seen so far, and only the last addition
    touches the whole joint block.
    """
    axes = {var: 0}
    axes.update({u: i + 1 for i, u in enumerate(sep)})
    ndim = len(sep) + 1
    views = sorted((aligned(xp, t, s, axes, ndim) for t, s in inputs), key=lambda a: a.size)
    out_shape = tuple(domains[u] for u in sep)
    lead = _leading_axes(out_shape, domains[var], chunk)
    clamp_each = needs_clamp_each_step(len(views), top, integer)
    for idx in itertools.product(*(range(s) for s in out_shape[:lead])):
        if check is not None:
            check()
        block = [v[(slice(None),) + tuple(slice(i, i + 1) if v.shape[a + 1] > 1 else slice(None)
                                          for a, i in enumerate(idx))] for v in views]
        acc = block[0]
        for t in block[1:]:
            acc = acc + t
            if clamp_each:
                xp.minimum(acc, top, out=acc)
        yield idx, lead, acc


def _leading_axes(shape: tuple[int, ...], d: int, chunk: int) -> int:
    """Fewest leading axes to iterate over so that a block holds <= `chunk` joint entries."""
    for lead in range(len(shape) + 1):
        if math.prod(shape[lead:]) * d <= chunk:
            return lead
    return len(shape)

