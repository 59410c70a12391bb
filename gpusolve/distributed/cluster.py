"""Work spread over Dask workers: the cluster to run on, and a bucket's message computed on a worker.

A unit of work is a plain function of plain data (an instance path and the
solve options; a DCOP agent's tables, see dcop.py), so the same function
runs on an embedded LocalCluster, on a cluster started with `dask scheduler`
and `dask worker` (or `dask cuda worker`, one worker per GPU), or in this
process. Dask is imported only when a cluster is asked for.

`batch` over a cluster is gpusolve/cli/batch.py; AND/OR search over one, gpusolve/search/on_dask.py.
"""
from __future__ import annotations

import functools
import logging
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass

from gpusolve.host import cores


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
            n = workers or cores()
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

    from gpusolve.cuda.runtime import gpu_unavailable_reason
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


def _threads() -> int | None:
    """On a Dask worker, the worker's threads, not one per core: workers share the host."""
    if "distributed" in sys.modules:  # not imported: not a worker, and not worth its import
        try:
            return sys.modules["distributed"].get_worker().state.nthreads
        except ValueError:  # not on a worker
            pass
    return None


@functools.cache
def _engine(name: str):
    """One engine of each kind per process."""
    from gpusolve.engines import registry
    from gpusolve.engines.select import make_engine
    return make_engine(registry.get(name), _threads())


def engine_for(device: str, joint_entries: int):
    """The engine of this process for one computation of `joint_entries` in one step, placed by the
    device policy as solve places a plan (engines/select.py); --device gpu takes the GPU whatever the size."""
    from gpusolve.engines.select import choose
    spec, _ = choose(device, joint_entries, 1, 0 if device == "gpu" else None, _threads())
    return _engine(spec.name)


def bucket_message(mb, scopes: tuple, domains: tuple, top, integer: bool, device: str, op: str, *tables):
    """Unit of work of a DCOP agent (dcop.util) and of a bucket slice (slicing.py): the dense message of
    `mb` from host `tables` over `scopes`, on this worker's engine for `device`.
    Returns (message on the host, seconds, engine name)."""
    t0 = time.perf_counter()
    engine = engine_for(device, mb.joint_entries)
    inputs = list(zip(engine.put_many(list(tables)), scopes))
    message = engine.get(engine.eliminate(mb, inputs, domains, top, integer, None, op))
    return message, time.perf_counter() - t0, engine.name
