"""Exact BE with a bucket too large for one worker: its message computed in slices on Dask workers.

A mini-bucket's message holds its rows (separator assignments) in
lexicographic order, the leading (latest-eliminated) separator variables
varying slowest. Slicing splits those rows into K contiguous ranges, as
cotengra slices a contraction: ranges of the assignments of the fewest
leading variables that have at least K of them. Each slice is one Dask task
(scaleout.bucket_message) that receives the inputs cut to the values of the
leading variables its range covers, runs the engines' dense step on its
worker (the worker's GPU when it has one, as `--device` decides there) and
returns its block; this process writes each block into place.

Integer costs come out identical to the unsliced message: a saturating sum
of costs >= 0 does not depend on the order of its terms. Float costs agree to
rounding, as the CPU and GPU engines do (the engines add inputs smallest
first, and a slice's inputs are smaller, so the order may change).

`plan_slicing` decides from the plan alone which mini-buckets are sliced
(dense ones whose joint table exceeds a threshold: one worker's device
budget, else the host memory budget, or `--slice-min`), into how many slices
and over which variables; the result is a plain object that `gpusolve info
--workers N` prints.
"""
from __future__ import annotations

import dataclasses
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np

from gpusolve.plan.buckets import MiniBucket, Plan
from gpusolve.host import fmt_bytes

if TYPE_CHECKING:
    from gpusolve.distributed.cluster import Cluster

# Beyond this many slices per worker a slice costs more in task overhead and repeated inputs than it
# saves: the engines chunk (CPU) or stream (GPU) a slice too large for the worker themselves.
SLICES_PER_WORKER = 16


@dataclass(frozen=True)
class Slice:
    """How one mini-bucket's message is cut into contiguous ranges of rows."""

    bucket: int  # the mini-bucket's index
    var: int  # its eliminated variable
    lead: tuple[int, ...]  # the leading separator variables the ranges run over
    dims: tuple[int, ...]  # their domains
    rows: int  # message rows per assignment of `lead` (product of the other separator domains)
    ranges: tuple[tuple[int, int], ...]  # [start, stop) over the assignments of `lead`, in order
    joint_bytes: int

    def box(self, start: int, stop: int) -> tuple[tuple[int, int], ...]:
        """Value ranges [lo, hi) of the `lead` variables holding assignments start..stop-1: the values both
        ends share, the first that differs spanning, the later ones whole. A box is itself a contiguous run
        of assignments, beginning at `first(box)`; it holds only the range when the range starts and ends
        on whole blocks of the later variables (always when `lead` is one variable)."""
        a, b = _digits(start, self.dims), _digits(stop - 1, self.dims)
        out, spanning = [], False
        for x, y, d in zip(a, b, self.dims):
            out.append((0, d) if spanning else (x, y + 1))
            spanning = spanning or x != y
        return tuple(out)

    def first(self, box) -> int:
        """The assignment of `lead` a box begins with (its lows, in lexicographic order)."""
        return sum(lo * math.prod(self.dims[i + 1:]) for i, (lo, _) in enumerate(box))

    def describe(self) -> str:
        over = ", ".join(f"x{u}" for u in self.lead)
        return (f"bucket {self.bucket} (var {self.var}): joint {fmt_bytes(self.joint_bytes)}, {len(self.ranges)} "
                f"slices of at most {self.rows * max(b - a for a, b in self.ranges):,} rows over ({over})")


def _digits(i: int, dims: Sequence[int]) -> list[int]:
    """Mixed-radix digits of i, most significant first (np.unravel_index without NumPy arrays)."""
    out = []
    for d in reversed(dims):
        i, r = divmod(i, d)
        out.append(r)
    return out[::-1]


@dataclass(frozen=True)
class Slicing:
    """Which mini-buckets of a plan are sliced over how many workers (built once, never changed)."""

    workers: int
    threshold: int  # joint-table bytes above which a mini-bucket is sliced
    slices: tuple[Slice, ...]

    def of(self, bucket: int) -> Slice | None:
        return next((s for s in self.slices if s.bucket == bucket), None)

    def describe(self) -> str:
        head = f"slicing over {self.workers} worker(s), buckets whose joint table exceeds {fmt_bytes(self.threshold)}"
        if not self.slices:
            return head + ": none"
        return "\n".join([head + ":"] + ["  " + s.describe() for s in self.slices])


def plan_slicing(plan: Plan, domains: Sequence[int], workers: int, threshold: int) -> Slicing:
    """Slice every dense mini-bucket with a separator whose joint table exceeds `threshold` bytes: at least
    one slice per worker and enough that each slice's joint table fits `threshold`, but at most
    SLICES_PER_WORKER per worker (a worker's engine streams a slice that does not fit) and one row each."""
    slices = []
    for mb in plan.minibuckets:
        joint = mb.joint_entries * plan.itemsize
        if mb.sparse or not mb.scope or joint <= threshold:
            continue
        k = min(max(workers, -(-joint // max(threshold, 1))), SLICES_PER_WORKER * workers, mb.out_entries)
        dims = [domains[u] for u in mb.scope]
        lead = next(n for n in range(1, len(dims) + 1) if math.prod(dims[:n]) >= k)
        p = math.prod(dims[:lead])
        slices.append(Slice(mb.index, mb.var, tuple(mb.scope[:lead]), tuple(dims[:lead]), math.prod(dims[lead:]),
                            tuple((p * i // k, p * (i + 1) // k) for i in range(k)), joint))
    return Slicing(workers, threshold, tuple(slices))


def cut(table, scope: Sequence[int], box: dict[int, tuple[int, int]]) -> np.ndarray:
    """The part of a host table within `box` (value ranges of some variables), contiguous."""
    return np.ascontiguousarray(table[tuple(slice(*box[u]) if u in box else slice(None) for u in scope)])


def eliminate_sliced(client, s: Slice, mb: MiniBucket, inputs, domains: Sequence[int], top, integer: bool,
                     device: str, op: str = "min", check=None, workers: list[str] | None = None
                     ) -> tuple[np.ndarray, dict]:
    """The message of `mb` from host `inputs` ((table, scope) pairs), slice by slice on the workers of
    `client`, or on those `workers` only; slice i goes to worker i mod n with its cut inputs (another
    worker may take it, when `workers` is not given: one that dies loses nothing), inputs without a
    leading variable go once to each worker. Returns (the message on the host, a record of the run)."""
    from dask.distributed import as_completed

    from gpusolve.distributed.cluster import bucket_message, worker_addresses
    t0 = time.perf_counter()
    loose = workers is None
    workers = workers or worker_addresses(client)
    scopes = tuple(sc for _, sc in inputs)
    out = np.empty(mb.out_entries, dtype=np.int64 if integer else np.float64)
    shared: dict[int, object] = {}
    futures: dict[object, tuple[int, int, int]] = {}
    sent = 0
    run = time.time_ns()
    try:
        for i, (start, stop) in enumerate(s.ranges):
            box = s.box(start, stop)
            within = dict(zip(s.lead, box))
            worker = workers[i % len(workers)]
            tables = []
            for j, (t, sc) in enumerate(inputs):
                if within.keys().isdisjoint(sc):
                    if j not in shared:
                        shared[j] = client.scatter(t, workers=workers, broadcast=True, hash=False)
                        sent += t.nbytes * len(workers)
                    tables.append(shared[j])
                else:
                    part = cut(t, sc, within)
                    tables.append(client.scatter(part, workers=[worker], hash=False))
                    sent += part.nbytes
            dom = list(domains)
            for u, (lo, hi) in within.items():
                dom[u] = hi - lo
            entries = math.prod(dom[u] for u in mb.scope)
            part_mb = dataclasses.replace(mb, out_entries=entries, joint_entries=entries * dom[mb.var])
            future = client.submit(bucket_message, part_mb, scopes, tuple(dom), top, integer, device, op, *tables,
                                   workers=[worker], allow_other_workers=loose, pure=False,
                                   key=f"slice-{mb.index}-{i}-{run}")
            futures[future] = (start, stop, s.first(box))
        compute, engines = [], set()
        for future, (block, seconds, engine) in as_completed(futures, with_results=True):
            if check is not None:
                check()
            start, stop, first = futures[future]
            out[start * s.rows:stop * s.rows] = block.reshape(-1)[(start - first) * s.rows:(stop - first) * s.rows]
            compute.append(seconds)
            engines.add(engine)
    except BaseException:
        client.cancel(list(futures) + list(shared.values()))
        raise
    record = {"bucket": mb.index, "slices": len(s.ranges), "workers": len(workers), "over": list(s.lead),
              "wall_s": time.perf_counter() - t0, "compute_s": sum(compute), "slowest_s": max(compute),
              "sent_bytes": sent, "engines": sorted(engines)}
    return out.reshape(tuple(domains[u] for u in mb.scope)), record


class SlicedStep:
    """The dense step of Engine.eliminate_bucket for one run: sliced mini-buckets on the workers, every
    other on `engine`. `log` gets eliminate_sliced's record of each sliced bucket."""

    def __init__(self, client, slicing: Slicing, engine, device: str, executor: str = ""):
        self.client, self.slicing, self.engine, self.device, self.executor = client, slicing, engine, device, executor
        self.log: list[dict] = []

    def __call__(self, mb, inputs, domains, top, integer, check=None, op="min"):
        s = self.slicing.of(mb.index)
        if s is None:
            return self.engine.eliminate(mb, inputs, domains, top, integer, check, op)
        host = [(self.engine.get(t), sc) for t, sc in inputs]
        message, record = eliminate_sliced(self.client, s, mb, host, domains, top, integer, self.device, op, check)
        self.log.append(record)
        return self.engine.put(message)

    def summary(self) -> str:
        if not self.log:
            return "no bucket sliced"
        engines = sorted({e for r in self.log for e in r["engines"]})
        return (f"{len(self.log)} bucket(s) sliced into {sum(r['slices'] for r in self.log)} slices on "
                f"{self.executor}, {sum(r['wall_s'] for r in self.log):.2f} s ({'/'.join(engines)})")


def threshold_for(cluster: Cluster, engine, budget: int) -> int:
    """--slice-min, else one worker's budget: the device budget of this process's GPU engine (workers are
    alike), else the host memory budget."""
    return cluster.slice_min if cluster.slice_min is not None else engine.budget or budget


@contextmanager
def sliced_step(cluster: Cluster | None, plan: Plan, domains: Sequence[int], engine, budget: int):
    """Exact BE with `cluster`: a SlicedStep on its workers when some mini-bucket's joint table exceeds the
    threshold; None otherwise (no cluster is started)."""
    if cluster is None or plan.z is not None:
        yield None
        return
    threshold = threshold_for(cluster, engine, budget)
    if not plan_slicing(plan, domains, 1, threshold).slices:
        yield None
        return
    from gpusolve.distributed.cluster import executor, worker_addresses
    with executor(cluster.scheduler, cluster.workers, gpus=engine.spec.on_device) as (client, what, started):
        slicing = plan_slicing(plan, domains, len(worker_addresses(client)), threshold)
        yield SlicedStep(client, slicing, engine, cluster.device, f"{what}, started in {started:.2f} s")
