"""Tunable sizes and thresholds, passed in as one `Limits` (as opt_einsum passes `memory_limit`).

Each default is what the measurements cited beside it chose; a caller or a test that needs
another (a tiny chunk, a forced restart) passes `Limits(field=...)` to the entry point: solve's
Options, parsers.read, Mac, plan building, local search, DCOP. Nothing from gpusolve is imported
here, so every layer may import this module.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

# Fields that size a step, divide a room or count failures: 0 would stall a loop or divide by zero.
POSITIVE = ("chunk_rows", "sort_row_bytes", "join_row_bytes", "pinned_share", "restart_base", "chunk")


@dataclass(frozen=True)
class Limits:
    # Plan (plan/buckets.py), sparse tables: join output rows gathered at once, and bytes per gathered
    # workspace row (key, cost, input indices, group index, bound and digit temporaries).
    chunk_rows: int = 1 << 21
    work_row_bytes: int = 80
    # Device bytes per row of an external sort run or merge range: key and cost, the sort's order and
    # Thrust's buffers, the sorted copies, a reduction's run heads, ranks and results (the live peak of
    # a one-stream step on the H100 was 29.5 MiB at 32 MiB, merge ranges of 381,300 rows: bench/sparse.py).
    sort_row_bytes: int = 72
    # Device bytes per output row of a streamed join's chunk, sorted but not reduced: key and cost
    # gathered, the sort's order and Thrust's buffers, the sorted copies (its input rows count apart).
    join_row_bytes: int = 64
    # A streamed sparse step with less device room than this runs on one CUDA stream, else on two. Its
    # jobs are then few enough rows that the host's time per job (some twenty CuPy calls, 0.3-0.5 ms)
    # exceeds their copies' time, so overlapping copies gains less than jobs twice as large on one
    # stream: bench/sparse.py on the H100, 40M joint rows, one stream vs two: 0.215 vs 0.348 s at
    # 32 MiB, 0.144 vs 0.223 s at 64 MiB, 0.118 vs 0.135 s at 128 MiB, 0.095 vs 0.089 s at 256 MiB.
    one_stream_room: int = 256 << 20
    copy_split_bytes: int = 1 << 23  # host copies from this size on are split over threads (engines/streaming.py)
    # Pinned host memory (cuda/pinned.py): smaller pinned arrays come from CuPy's pool, larger ones are
    # registered pages.
    pooled_pinned_max: int = 1 << 25
    # Results a later step uploads again (sorted runs in the kept arenas, merged tables) are page-locked
    # while they fit in this share of the host memory available, and free page blocks are kept up to it;
    # past it results go through the staging buffers into plain memory.
    pinned_share: int = 8
    # AllDifferent's peel method (consistency/alldiff.py): the giant SCCs by breadth-first reachability,
    # the small rest exactly.
    peel_pivots: int = 8  # forward-backward searches at most, before the rest goes to Tarjan
    peel_small: int = 16  # a pivot's SCC smaller than this: the rest is made of small ones, stop peeling
    # AllDifferent's GPU kernel (consistency/alldiff_kernel.py).
    list_cap: int = 1 << 16  # removed edges returned as a list up to this many (512 KiB), else as bit-packed rows
    shared_max: int = 48 << 10  # static shared memory per block
    # Entries of the tables a decomposition of the globals may add (consistency/globals.py): 256 MiB of int64.
    decompose_entries: int = 1 << 25
    # Entries (or listed tuples) of a table functional elimination rewrites over another variable
    # (consistency/functional.py) where it grows: 256 MiB of int64.
    functional_entries: int = 1 << 25
    # MAC search (search/mac.py): AllDifferents over fewer variables stay on the host even with a GPU
    # array module. Kept on the device (KeptGac), GAC made MAC's Langford search 1.7x as many nodes per
    # second as the CPU's at 200 variables, 2.0x at 600 and 5.8x at 2000 (H100 against its host's CPU,
    # bench/alldiff.py --solve, 2026-11-25).
    gpu_min_scope: int = 200
    restart_base: int = 64  # failures before MAC's first restart
    # DCOP (dcop/dpop.py): a problem whose UTIL computations add up to fewer joint entries runs on a
    # LocalCluster of threads: process workers take seconds to start and pickle every message, for
    # microseconds of work.
    threads_below: int = 10_000_000
    # Repairing ADPOP's values when they break a hard constraint: local search from them, stopping at the
    # first feasible assignment (120 generated grids, random and scale-free networks of 9-25 variables,
    # domain 3: of 50 repairs 45 took at most 14 sweeps, 48 at most 28, the others 53 and 412), then MAC's
    # first solution within a node budget.
    repair_sweeps: int = 50
    repair_nodes: int = 100_000
    # Readers (parsers/): the .wcsp reader converts this many tokens (or table entries) at a time,
    # bounding the temporaries.
    chunk: int = 1 << 18
    # Entries above which a table a reader builds is kept as its tuples: an XCSP3 functional intension
    # constraint, a step of a decomposed linear sum.
    listed_min: int = 1 << 16

    def __post_init__(self):
        """A bad value fails here, named, not as a hang or a ZeroDivisionError deep in a run."""
        for f in fields(self):
            value, least = getattr(self, f.name), 1 if f.name in POSITIVE else 0
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"Limits.{f.name} must be an integer of at least {least}, not {value!r}")


DEFAULT = Limits()
