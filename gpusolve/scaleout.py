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

import json
import logging
import os
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from .solve import Options


class ClusterError(ValueError):
    """No Dask, or a scheduler that cannot be reached (exit code 2)."""


def default_workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@contextmanager
def executor(scheduler: str | None, workers: int | None, threads: bool = False):
    """A Dask client on a running cluster (`scheduler`, its address) or on an embedded LocalCluster
    of `workers` single-threaded workers (processes unless `threads`). Yields (client, what it is,
    seconds it took to start or join)."""
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
    n = workers or default_workers()
    with LocalCluster(n_workers=n, threads_per_worker=1, processes=not threads, dashboard_address=":0",
                      silence_logs=logging.ERROR) as cluster, Client(cluster) as client:
        yield client, f"LocalCluster, {n} {'threads' if threads else 'processes'}", time.perf_counter() - t0


def batch_on_dask(files: list[str], options: Options, evidence: str | None, out_path: str,
                  scheduler: str | None, workers: int | None,
                  record: Callable[[str, Options, str | None], dict],
                  progress: Callable[[], None] | None = None) -> list[dict]:
    """Solve `files` on Dask workers (`record(file, options, evidence)` on each), appending each
    result to `out_path` as it arrives. Returns the records in the order they finished."""
    from dask.distributed import as_completed

    from .cli import _ends_with_newline
    out: list[dict] = []
    with executor(scheduler, workers) as (client, _, _), open(out_path, "a") as sink:
        if sink.tell() and not _ends_with_newline(out_path):
            sink.write("\n")  # a line cut short by a killed run stays alone on its line
        futures = {client.submit(record, f, options, evidence, key=f"solve-{f}-{time.time_ns()}",
                                 pure=False, retries=0): f for f in files}
        for future in as_completed(futures):
            f = futures[future]
            try:
                rec = future.result()
            except Exception as e:  # KilledWorker (its workers kept dying), or a bug in a worker
                rec = {"file": f, "status": "error", "message": f"{type(e).__name__}: {e}"}
            sink.write(json.dumps(rec) + "\n")
            sink.flush()
            out.append(rec)
            if progress:
                progress()
    return out
