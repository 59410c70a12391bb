"""A sparse bucket streamed through host memory (Cuda-BE section V-B): tables stay on the host,
sorted runs are merged on the device range by range, a join's chunks upload only their groups' rows."""
from __future__ import annotations

import functools
from typing import Callable, Sequence

import numpy as np

from gpusolve.limits import DEFAULT, Limits
from gpusolve.plan import buckets as sizes
from . import streaming
from .sparse import JoinIndex, Keep, SparseTable, _by_first, _gather, _limit, _match, gather_axes


class Streamer:
    """A sparse bucket streamed through host memory (Cuda-BE section V-B), on the engine's
    streaming.Pipeline.

    Tables stay in host memory. Sorting runs the device over runs of rows and merges the sorted
    runs on the device too, range by range (streaming.merge); a join's chunks each upload only the
    input rows of their groups, and come back sorted, as runs to merge (reducing equal keys, for a
    message). With NumPy as the device module (the CPU engine given a budget: tests) the same code
    runs without copies. `streams`: the pipeline's streams, else one below limits.one_stream_room;
    `limits` also size its sort runs (sort_row_bytes) and join chunks (join_row_bytes, chunk_rows).
    """

    def __init__(self, pipe: streaming.Pipeline, room: int, streams: int | None = None, limits: Limits = DEFAULT):
        self.pipe, self.xp, self.room, self.limits = pipe, pipe.xp, max(int(room), 0), limits
        self.streams = streams or (1 if self.room < limits.one_stream_room else streaming.N_STREAMS)
        # Device memory of `streams` jobs at once, each `job_room`; on one stream also the previous
        # job's results, `wait` bytes per row until they go down.
        self.job_room = self.room // self.streams
        self.wait = sizes.ROW_BYTES if self.streams == 1 else 0
        self.run_rows = max(1, self.job_room // (limits.sort_row_bytes + self.wait))

    def merge(self, runs: list[tuple], combine: Callable, split_equal: bool, what: str, check=None) -> tuple:
        """Sorted host runs merged on the device (streaming.merge), in ranges of a sort run's rows."""
        return streaming.merge(self.pipe, runs, self.run_rows, combine, split_equal, what, check, self.streams)

    def sort_by_code(self, t: SparseTable, sub: Sequence[int], check=None):
        """(codes over `sub`, keys, costs) of host table t, stably sorted by code: device-sized runs
        are sorted on the device, land side by side in the runs arenas where affordable, then are
        merged on the device; one run lands in page-locked memory where affordable."""
        xp, run = self.xp, self.run_rows
        if not t.rows:
            return np.zeros(0, dtype=np.int64), t.keys, t.costs
        by_code = functools.partial(_by_first, xp)
        jobs = [(t.keys[lo:lo + run], t.costs[lo:lo + run]) for lo in range(0, t.rows, run)]
        dtypes = (np.int64, np.int64, t.costs.dtype)
        if len(jobs) > 1:
            into = self.pipe.arena_into(t.rows, dtypes)
        else:
            into = streaming.side_by_side([self.pipe.kept(t.rows, d) for d in dtypes])
        runs = self.pipe.map(jobs, lambda i, keys, costs: by_code(t.code(xp, sub, keys), keys, costs),
                             f"sort {t.rows:,} rows", check, into, self.streams)
        return self.merge(runs, by_code, True,
                          f"merge {len(runs)} sorted runs of {t.rows:,} rows", check)

    def join(self, a: SparseTable, b: SparseTable, scope, dims, top, keep: Keep | None,
             reduce: Callable, check=None) -> list[tuple]:
        """The join-sum of host tables a and b as host (keys, costs) runs, each chunk's rows passed
        through `reduce` on the device (which sorts them by key): both inputs sorted by their
        shared code, then every chunk of output rows uploads only the contiguous input rows of
        its groups (whole groups of a)."""
        if a.rows > b.rows:
            a, b = b, a  # a chunk needs whole groups of a: let a be the smaller input
        shared = [u for u in a.scope if u in b.scope]
        ca, ka, wa = self.sort_by_code(a, shared, check)
        cb, kb, wb = self.sort_by_code(b, shared, check)
        ix = _match(np, ca, cb)
        starts, total = ix.out_start, ix.total
        # a chunk's output rows, sized for the join's input rows per output row (at most one), so that
        # its work and input rows fit the job's room beside the previous chunk's waiting results
        inputs = min((a.rows + b.rows) / max(total, 1), 1.0)
        per_row = self.limits.join_row_bytes
        cap = max(1, min(self.limits.chunk_rows,
                         int(self.job_room // (per_row + self.wait + inputs * sizes.ROW_BYTES))))
        room = self.job_room - self.wait * cap
        jobs, spans = [], []
        lo = 0
        while lo < total:
            hi = min(lo + cap, total)
            while True:
                g0, g1 = np.searchsorted(starts, [lo, hi - 1], side="right") - 1
                a_lo, a_hi = ix.a_start[g0], ix.a_start[g1] + ix.a_size[g1]
                b_lo = ix.b_start[g0] + (lo - starts[g0]) // ix.a_size[g0]
                b_hi = ix.b_start[g1] + (hi - 1 - starts[g1]) // ix.a_size[g1] + 1
                if (hi - lo) * per_row + (a_hi - a_lo + b_hi - b_lo) * sizes.ROW_BYTES <= room or hi == lo + 1:
                    break  # (one output row whose group of a exceeds the room still goes: the budget is an estimate)
                hi = lo + (hi - lo) // 2
            g = slice(g0, g1 + 1)
            groups = np.concatenate([ix.a_start[g] - a_lo, ix.a_size[g], ix.b_start[g] - b_lo, starts[g]])
            jobs.append((ka[a_lo:a_hi], wa[a_lo:a_hi], kb[b_lo:b_hi], wb[b_lo:b_hi], groups))
            spans.append((int(lo), int(hi)))
            lo = hi
        axes = self.xp.asarray(gather_axes(a, b, scope, dims))

        def work(i, ak, ac, bk, bc, groups):  # groups: starts in a, sizes in a, starts in b, output starts
            a_start, a_size, b_start, out_start = groups.reshape(4, -1)
            local = JoinIndex(None, None, a_start, a_size, b_start, None, out_start)  # starts only, no total
            k, c, count = _gather(self.xp, local, SparseTable(a.scope, a.dims, ak, ac),
                                  SparseTable(b.scope, b.dims, bk, bc), *spans[i], scope, dims, top, keep, True, axes)
            return reduce(k, c, count=count)
        # the chunks' runs side by side in the runs arenas (as many rows as the join's output before
        # reduction), no host copy on their way down nor up to the merge: else at about half the rate
        into = self.pipe.arena_into(total, (np.int64, wa.dtype)) if len(jobs) > 1 else None
        return self.pipe.map(jobs, work, f"join {a.rows:,} x {b.rows:,} rows into {total:,}", check, into, self.streams)

    def table(self, a: SparseTable, b: SparseTable, scope, dims, top, keep: Keep | None, reduce: Callable,
              combine: Callable, split_equal: bool, row_limit: int | None, what: str, check=None):
        """Host (keys, costs) of the join of a and b, sorted: its chunks (each passed through
        `reduce`) are merged on the device by `combine` (split_equal: no key occurs twice to
        reduce); SparseOverflow when the table holds more than `row_limit` rows (known before
        the merge when it reduces nothing)."""
        runs = self.join(a, b, scope, dims, top, keep, reduce, check)
        if split_equal:
            _limit(sum(r[0].shape[0] for r in runs), row_limit, what)
        if not runs:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=a.costs.dtype)
        keys, costs = self.merge(runs, combine, split_equal, f"merge {len(runs)} chunks of {what}", check)
        _limit(keys.shape[0], row_limit, what)
        return keys, costs
