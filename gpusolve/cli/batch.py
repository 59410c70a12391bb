"""`batch` over Dask workers: every instance a task, each result written by this process as it arrives.

Results are written one JSON line as each instance finishes, so a worker that dies mid-instance
loses nothing: the scheduler runs the instance again on another worker (an instance whose workers
die `distributed.scheduler.allowed-failures` + 1 times is recorded as an error), and a killed batch
resumes from the lines written, as the serial batch does.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable

from gpusolve.distributed.cluster import executor

if TYPE_CHECKING:
    from gpusolve.schedule.solve import Options


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
