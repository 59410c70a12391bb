"""The engine interface: what every engine implements (engines/numpy_engine.py, engines/cupy_engine.py).

An engine owns where tables live (host or device) and how one mini-bucket is
computed; planning, ordering and the value-assignment phase are shared.
Every attribute a caller reads is declared on `Engine`, with the value of an
engine that keeps everything in host memory.
"""
from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from typing import Callable, Sequence

from gpusolve.limits import DEFAULT, Limits
from gpusolve.plan import buckets as sizes
from gpusolve.engines import registry
from gpusolve.engines.dense import Scoped, host_or_table
from gpusolve.plan.buckets import CHUNK_ENTRIES, MiniBucket


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
    def spec(self) -> registry.EngineSpec:
        """This engine's registry entry: its rates and capabilities."""
        return registry.get(self.name)

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
                         dense_step: Callable | None = None, limits: Limits = DEFAULT):
        """One mini-bucket, sparse or dense as the plan says; keeps `bound`'s active tables in step.

        A dense mini-bucket gets its sparse inputs expanded to dense tables
        and runs `eliminate`, or `dense_step` (same arguments) when given: a
        run that slices some buckets over Dask workers (slicing.SlicedStep).
        Sparse tables drop rows at top, which only (min, +) elimination
        allows; `bound` (a rest_bound.RestBound) prunes their rows, `row_limit`
        caps the rows stored, `limits` (the plan's) size its chunks and streamed jobs.
        """
        from . import sparse  # NumPy: loaded with the first bucket, not with the engine's import
        if bound is not None:
            bound.consume([("f", i) for i in mb.functions] + [("m", j) for j in mb.messages])
        if mb.sparse:
            if op != "min":
                raise ValueError(f"sparse tables support min elimination only, not {op!r}")
            out = self._eliminate_placed(mb, inputs, domains, top, row_limit, check, bound, limits)
        else:
            dtype = self.xp.int64 if integer else self.xp.float64
            dense = [(sparse.to_dense(sparse.module_of(self.xp, t.keys), t, top, dtype)
                      if isinstance(t, sparse.SparseTable) else t, s) for t, s in inputs]
            out = dense_step(mb, dense, domains, top, integer, check, op) if dense_step else \
                self.eliminate(mb, dense, domains, top, integer, check, op, where)
        if bound is not None:
            bound.add(("m", mb.index), out, mb.scope)
        return out

    def _eliminate_placed(self, mb, inputs, domains, top, row_limit, check, bound, limits):
        """A sparse bucket in device memory while it fits `budget`, else streamed through host
        memory: predicted from the inputs' rows, or found out when the stored rows or the
        device's allocator overflow."""
        from . import sparse
        from .sparse_streamed import Streamer

        def run(**placement):
            return sparse.eliminate_sparse(self.xp, mb.var, mb.scope, inputs, domains, top, row_limit, check,
                                           bound, limits=limits, **placement)
        if self.budget is None:
            return run()
        room = self.budget - self.device_bytes
        rows_in = sum(t.rows if isinstance(t, sparse.SparseTable) else host_or_table(t).size for t, _ in inputs)
        work = 4 * rows_in * sizes.ROW_BYTES + min(mb.joint_rows, limits.chunk_rows) * limits.work_row_bytes
        if work <= room:
            try:
                return run(device_rows=(room - work) // (4 * sizes.ROW_BYTES))
            except sparse.SparseOverflow:
                raise
            except MemoryError:  # DeviceFull, or the device allocator's out-of-memory error
                pass
        return run(streamer=Streamer(self.pipeline, room, limits=limits))
