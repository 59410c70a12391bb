"""Work spread over Dask workers: the cluster to run on, and `batch` over it.

A unit of work is a plain function of plain data (an instance path and the
solve options; a DCOP agent's tables, see dcop.py), so the same function
runs on an embedded LocalCluster, on a cluster started with `dask scheduler`
and `dask worker` (or `dask cuda worker`, one worker per GPU), or in this
process. Dask is imported only when a cluster is asked for.

Batch results are written by this process, one JSON line as each instance
finishes, so a worker that dies mid-instance loses nothing: the scheduler
runs the instance again on another worker (an instance whose workers die
`distributed.scheduler.allowed-failures` + 1 times is recorded as an error),
and a killed batch resumes from the lines written, as the serial batch does.
"""
from __future__ import annotations

import functools
import logging
import os
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from gpusolve.schedule.solve import Options


class ClusterError(ValueError):
    """No Dask, or a scheduler that cannot be reached (exit code 2)."""


@dataclass(frozen=True)
class Cluster:
    """Where `solve` sends Dask work: a running scheduler, or an embedded cluster of `workers`; exact BE
    slices over it the buckets whose joint table exceeds `slice_min` bytes (None: one worker's budget,
    slicing.threshold_for), each slice on the engine `device` picks on its worker."""

    scheduler: str | None = None
    workers: int | None = None
    slice_min: int | None = None
    device: str = "auto"


def default_workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@contextmanager
def executor(scheduler: str | None, workers: int | None, threads: bool = False, gpus: bool = False):
    """A Dask client on a running cluster (`scheduler`, its address) or on an embedded cluster of
    `workers` single-threaded workers: processes unless `threads`; with `gpus`, one process per GPU
    (worker i sees only GPU i, as dask-cuda's LocalCUDACluster arranges; default: every GPU).
    Each embedded worker may use 1/workers of the host's memory: Dask's default, memory x threads /
    cores, gives a single-threaded worker 8 GB of a 256 GB, 32-core host, and a worker past 80% of
    its limit stops taking tasks (a CSG run of 29 agents hung so on two H200s).
    Yields (client, what it is, seconds it took to start or join)."""
    t0 = time.perf_counter()
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise ClusterError("Dask is not installed: pip install 'gpusolve[dask]'") from None
    if scheduler:
        try:
            client = Client(scheduler, timeout=10)
        except (OSError, TimeoutError) as e:
            raise ClusterError(f"cannot reach the Dask scheduler at {scheduler}: {e}") from None
        what = f"scheduler {scheduler} ({len(client.scheduler_info()['workers'])} workers)"
        try:
            yield client, what, time.perf_counter() - t0
        finally:
            client.close()
        return
    import dask
    with dask.config.set({"distributed.nanny.pre-spawn-environ": _spawn_environ()}):
        if gpus:
            n, cluster = _gpu_cluster(workers)
            what = f"local cluster, {n} processes, one GPU each"
        else:
            n = workers or default_workers()
            cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=not threads, dashboard_address=":0",
                                   memory_limit=1 / n, silence_logs=logging.ERROR)
            what = f"LocalCluster, {n} {'threads' if threads else 'processes'}"
        with cluster, Client(cluster) as client:
            yield client, what, time.perf_counter() - t0


def _spawn_environ() -> dict:
    """Dask's environment for worker processes without MALLOC_TRIM_THRESHOLD_: setting it turns off glibc's
    adaptive mmap threshold, so every chunk of a dense bucket step is a fresh mmap and page faults
    (4x slower NumPy elimination measured). Hand-started workers: `dask worker --no-nanny`."""
    import dask
    return {k: v for k, v in dask.config.get("distributed.nanny.pre-spawn-environ", {}).items()
            if k != "MALLOC_TRIM_THRESHOLD_"}


def worker_addresses(client) -> list[str]:
    """The addresses of the cluster's workers now (asked of the scheduler, not its cached identity),
    waiting up to a minute for a first one to join."""
    try:
        client.wait_for_workers(1, timeout=60)
    except TimeoutError:
        raise ClusterError("no Dask worker joined the scheduler within 60 s") from None
    return sorted(client.ncores())


def _gpu_cluster(workers: int | None):
    """(workers, cluster) with worker i restricted to GPU i by CUDA_VISIBLE_DEVICES."""
    from dask.distributed import Nanny, Scheduler, SpecCluster

    from gpusolve.engines.select import gpu_unavailable_reason
    reason = gpu_unavailable_reason()
    if reason:
        raise ClusterError(f"one worker per GPU: {reason}")
    import cupy
    count = cupy.cuda.runtime.getDeviceCount()
    n = min(workers or count, count)
    specs = {i: {"cls": Nanny, "options": {"nthreads": 1, "env": {"CUDA_VISIBLE_DEVICES": str(i)},
                                           "memory_limit": 1 / n, "silence_logs": logging.ERROR}} for i in range(n)}
    return n, SpecCluster(workers=specs, scheduler={"cls": Scheduler, "options": {"dashboard_address": ":0"}},
                          silence_logs=logging.ERROR)


@functools.cache
def _engine(kind: str):
    """On a Dask worker, the CPU engine takes the worker's threads, not one per core: workers
    share the host."""
    from gpusolve.engines.select import select_engine
    threads = None
    if "distributed" in sys.modules:  # not imported: not a worker, and not worth its import
        try:
            threads = sys.modules["distributed"].get_worker().state.nthreads
        except ValueError:  # not on a worker
            pass
    return select_engine(kind, threads=threads)[0]


@functools.cache
def _gpu_usable() -> bool:
    from gpusolve.engines.select import gpu_unavailable_reason
    return gpu_unavailable_reason() is None


def engine_for(device: str, joint_entries: int):
    """The engine of this process for one computation; auto takes the GPU for large ones, as solve does."""
    from gpusolve.engines.select import AUTO_MIN_JOINT
    if device == "auto":
        device = "gpu" if joint_entries >= AUTO_MIN_JOINT and _gpu_usable() else "cpu"
    return _engine(device)


def bucket_message(mb, scopes: tuple, domains: tuple, top, integer: bool, device: str, op: str, *tables):
    """Unit of work of a DCOP agent (dcop.util) and of a bucket slice (slicing.py): the dense message of
    `mb` from host `tables` over `scopes`, on this worker's engine for `device`.
    Returns (message on the host, seconds, engine name)."""
    t0 = time.perf_counter()
    engine = engine_for(device, mb.joint_entries)
    inputs = list(zip(engine.put_many(list(tables)), scopes))
    message = engine.get(engine.eliminate(mb, inputs, domains, top, integer, None, op))
    return message, time.perf_counter() - t0, engine.name


def batch_on_dask(files: list[str], options: Options, settings: dict, sink, scheduler: str | None,
                  workers: int | None, record: Callable[[str, Options, dict], dict],
                  progress: Callable[[], None] | None = None) -> list[dict]:
    """Solve `files` on Dask workers (`record(file, options, settings)` on each), writing each
    result to the open `sink` as it arrives. Returns the records in the order they finished.
    Each solve's CPU engine runs one thread unless --threads says otherwise: the workers are the
    parallelism."""
    from dataclasses import replace

    from dask.distributed import as_completed

    from gpusolve.report import dumps, record as failed
    out: list[dict] = []
    options = replace(options, threads=options.threads or 1)
    with executor(scheduler, workers, gpus=options.device == "gpu") as (client, _, _):
        futures = {client.submit(record, f, options, settings, key=f"solve-{f}-{time.time_ns()}",
                                 pure=False, retries=0): f for f in files}
        for future in as_completed(futures):
            f = futures[future]
            try:
                rec = future.result()
            except Exception as e:  # KilledWorker (its workers kept dying), or a bug in a worker
                rec = {**failed(f, "error", message=f"{type(e).__name__}: {e}"), "options": settings}
            sink.write(dumps(rec) + "\n")
            sink.flush()
            out.append(rec)
            if progress:
                progress()
    return out


_SEARCHES: dict[str, object] = {}  # per worker process: the AndOrSearch of the run under way, by token


def _child_search(token: str, state, sub_var: int, root: int, x: int, rest, shared: str):
    """Unit of work of the distributed search: the subtree below `sub_var` given root = x, against the
    best total any worker has reported for that root (`shared`, a dask Variable) minus `rest` (the
    root's own cost at x and its other children's heuristics). Returns (cost or lower bound, values, nodes)."""
    from dask.distributed import Variable

    from gpusolve.search.andor import AndOrSearch, Subproblem
    search = _SEARCHES.get(token)
    if search is None:
        _SEARCHES.clear()
        search = _SEARCHES[token] = AndOrSearch(*state)
    budget = Variable(shared).get() - rest
    if budget <= 0:
        return budget, None, 0
    before = search.stats.nodes
    cost, values = search.solve(Subproblem(sub_var, ((root, x),), budget))
    return cost, values, search.stats.nodes - before


def search_on_dask(client, problem, order, heuristic, incumbent: list[int] | None,
                   should_stop: Callable[[], bool] = lambda: False):
    """AND/OR branch and bound with each (root value, child subtree) pair solved on a Dask worker
    (daoopt's conditioning, at depth one). Each root keeps its best total in a dask Variable that
    workers read before they start, so every subproblem is pruned with the best bound found anywhere.

    Returns (optimal internal cost, an optimal assignment or None when infeasible, OR nodes
    expanded by the workers); the incumbent's values stand where nothing beats them. Raises
    search.Stopped when `should_stop()` says so (subproblems already running finish unheard).
    """
    import numpy as np
    from dask.distributed import Variable, as_completed

    from gpusolve.search.andor import AndOrSearch, Stopped
    local = AndOrSearch(problem, order, heuristic)
    tree = local.tree
    token = f"search-{time.time_ns()}"
    state = client.scatter((problem, order, heuristic), broadcast=True)
    values = list(incumbent) if incumbent is not None else [0] * len(problem.variables)
    for var, val in problem.evidence.items():
        values[var] = val
    futures, pending, best, shared = {}, {}, {}, {}
    for r in (r for r in tree.roots if r not in problem.evidence):
        part = set(local.subtree[r])
        best[r] = problem.top if incumbent is None else problem.total(
            f.table[tuple(values[u] for u in f.scope)] for f in problem.functions if f.scope and f.scope[0] in part)
        costs = local.root_costs(r)
        heur = costs[1:].sum(axis=0)
        first = costs[0] + heur
        kids = tree.children[r]
        if not kids:  # a root alone: its cheapest value
            x = int(first.argmin())
            if first[x] < best[r]:
                best[r], values[r] = first[x].item(), x
            continue
        shared[r] = Variable(f"{token}-{r}", client=client)
        shared[r].set(best[r].item() if hasattr(best[r], "item") else best[r])
        for x in np.argsort(first, kind="stable").tolist():
            if first[x] >= best[r]:
                break
            pending[r, x] = [costs[0, x].item(), len(kids), {r: x}]
            for k, c in enumerate(kids):
                rest = first[x].item() - costs[1 + k, x].item()
                futures[client.submit(_child_search, token, state, c, r, x, rest, shared[r].name,
                                      key=f"{token}-{r}-{x}-{c}", pure=False)] = (r, x)
    nodes = 0
    for future, (cost, found, n) in as_completed(futures, with_results=True):
        if should_stop():
            client.cancel(list(futures))
            raise Stopped
        nodes += n
        r, x = futures[future]
        entry = pending.get((r, x))
        if entry is None:
            continue  # a sibling already proved that x cannot win
        if found is None:
            del pending[r, x]
            continue
        entry[0] = problem.add(entry[0], cost)
        entry[1] -= 1
        entry[2].update(found)
        if entry[1] == 0:
            del pending[r, x]
            if entry[0] < best[r]:
                best[r] = entry[0]
                shared[r].set(best[r])
                for u, val in entry[2].items():
                    values[u] = val
    for v in shared.values():
        v.delete()
    total = problem.total([local.constant, *best.values()])
    return total, None if problem.is_forbidden(total) else values, nodes
