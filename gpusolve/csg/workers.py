"""The DP over Dask workers (GPUs or CPU processes): each level's coalitions cut across them, each
worker holding f whole and receiving only the others' shares of the last level."""
from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Callable

from gpusolve.csg.dp import ALGORITHMS, level_splits, split_range, total_splits
from gpusolve.csg.solve import Options, Result, Table, check_memory, precision_on, result_of, stopper
from gpusolve.csg.values import CSGError, check_agents, generate_values, read_values


_TABLES: dict[str, Table] = {}  # per worker process: the Table of the run under way, by token


def load_values(source: tuple) -> np.ndarray:
    """Values from a source a worker can rebuild them from: ("generate", distribution, n, seed),
    ("file", path) (a path every worker can read) or ("values", array)."""
    kind, *args = source
    if kind == "generate":
        return generate_values(*args)
    if kind == "file":
        return read_values(*args)
    return args[0]


def source_agents(source: tuple | None, values: np.ndarray | None) -> int:
    """n, from the values when given, else from a ("generate", distribution, n, seed) source."""
    return values.size.bit_length() - 1 if values is not None else source[2]


def _setup_on_worker(token: str, source: tuple, options: Options, keep_values: bool) -> dict:
    from dask.distributed import get_worker
    t = time.perf_counter()
    options = replace(options, mem_limit=worker_budget(get_worker(), options.mem_limit))
    if options.mem_limit is not None and source[0] == "generate":  # the values alone, before drawing them
        check_memory(source[2], precision_on(options.precision, True), True, options.mem_limit, None)
    table = Table(load_values(source), options, threads=get_worker().state.nthreads, shares=True)
    if not keep_values:  # only the worker that answers reads v again
        table.values = None
    _TABLES.clear()
    _TABLES[token] = table
    return {"engine": table.engine, "note": table.note, "need": table.need, "precision": table.precision,
            "seconds": time.perf_counter() - t}


def worker_budget(worker, mem_limit: int | None) -> int | None:
    """Host bytes a Dask worker's table may hold: below the fraction of the worker's memory limit at
    which Dask pauses it (a paused worker runs no further level), and within --mem-limit."""
    import dask
    limit = worker.memory_manager.memory_limit
    pause = dask.config.get("distributed.worker.memory.pause")
    if not limit or not pause:
        return mem_limit
    room = int(limit * pause * 0.95)
    return room if mem_limit is None else min(room, mem_limit)


def _level_on_worker(token: str, k: int, lo: int, hi: int, deadline: float | None, send: bool, *shares) -> tuple:
    """Level k for ranks lo..hi-1, after writing the last level's `shares` into f: (k, lo, f of the
    share (None unless `send`: a worker alone keeps it), complete, seconds receiving, seconds
    computing). `deadline` is time.time()'s."""
    table = _TABLES[token]
    t = time.perf_counter()
    table.receive(shares)
    t1 = time.perf_counter()
    complete = table.level(k, lo, hi, stop=lambda: deadline is not None and time.time() >= deadline)
    table.sync()
    t2 = time.perf_counter()
    return k, lo, table.share(k, lo, hi) if send else None, complete, t1 - t, t2 - t1


def _level_summary(share: tuple) -> tuple:
    """(complete, seconds receiving, seconds computing) of a worker's level: all the client fetches."""
    return share[3:]


def _answer_on_worker(token: str, done: int, *shares) -> dict:
    table = _TABLES[token]
    table.receive(shares)
    return table.answer(done)


def _release_on_worker(token: str) -> None:
    table = _TABLES.pop(token, None)
    if table is not None and table.on_gpu:
        del table
        import cupy
        cupy.get_default_memory_pool().free_all_blocks()


def solve_on_workers(values: np.ndarray, options: Options, client, source: tuple | None = None,
                     workers: int | None = None, file: str = "", phases: dict | None = None,
                     progress: Callable[[int], Callable[[int], None]] | None = None,
                     stop: Callable[[], bool] | None = None, executor: str = "") -> Result:
    """`solve` with each level's coalitions cut into one contiguous range of colex ranks per Dask
    worker (the first `workers` of `client`'s, default all), each worker on its own engine (a GPU
    where it has one, as `solve` picks). `values` may be None with a "generate" source.

    Every worker holds f whole: it builds f from `source` (see load_values; default: `values`
    scattered), computes its share of level k and sends f of that share, C(n, k) / W values, to
    the others, which write them into their f before level k + 1 (Dask moves them worker to
    worker; the client fetches only each level's (complete, seconds)). So a level's exchange is
    C(n, k) values, 2^n in all over the run, where broadcasting f would be 2^n a level. Levels
    with no splits (IDP above 2n/3) exchange nothing. The first worker recovers the structure.
    """
    from gpusolve.distributed.cluster import ClusterError
    t0 = time.perf_counter()
    phases = dict(phases or {})
    n = source_agents(source, values)
    check_agents(n)
    if options.algorithm not in ALGORITHMS:
        raise CSGError(f"unknown algorithm {options.algorithm!r}")
    stopped = stopper(t0, options, stop)
    deadline = None if options.time_limit is None else time.time() + options.time_limit
    addresses = sorted(client.scheduler_info()["workers"])[:workers]
    if not addresses:
        raise ClusterError("the Dask cluster has no workers")
    token = f"csg-{time.time_ns()}"
    if source is None:
        source = ("values", client.scatter(values, broadcast=True, hash=False))
    t = time.perf_counter()
    try:
        setups = client.gather([client.submit(_setup_on_worker, token, source, options, i == 0,
                                              key=f"{token}-setup-{i}", workers=[a], pure=False)
                                for i, a in enumerate(addresses)])
        phases["setup"] = time.perf_counter() - t
        if len({s["precision"] for s in setups}) > 1:  # shares of float32 f would void float64's answer
            raise CSGError("--precision auto: GPU and CPU workers would run single and double precision; "
                           "give --precision single or double")
        advance = progress(total_splits(n, options.algorithm)) if progress else None
        t = time.perf_counter()
        compute_s = [0.0] * len(addresses)
        done, splits = 1, 0

        def settle(k: int, summaries: list) -> bool:
            """Account for level k once its workers report; False when one stopped part way."""
            nonlocal done, splits
            reports = client.gather(summaries)
            for w, (_, _, seconds) in enumerate(reports):
                compute_s[w] += seconds
            count = math.comb(n, k) * level_splits(n, k, options.algorithm)
            if advance:
                advance(count)
            if not all(complete for complete, _, _ in reports):
                return False
            done, splits = k, splits + count
            return True

        # Level k + 1 is submitted before level k's reports are read: its tasks wait for k's shares
        # on the workers anyway, and the client's round trip is hidden. Stopped, the levels already
        # submitted run to their end (with the time limit, the workers stop them at the deadline).
        previous, queue, going = [], [], True
        send = len(addresses) > 1
        for k in range(2, n + 1):
            if not going or stopped():
                break
            a_lo, a_hi = split_range(n, k, options.algorithm)
            summaries = []
            if a_lo <= a_hi:  # else no splits: f of this size is v, which every worker holds
                cut = [math.comb(n, k) * w // len(addresses) for w in range(len(addresses) + 1)]
                previous = [client.submit(_level_on_worker, token, k, cut[w], cut[w + 1], deadline, send, *previous,
                                          key=f"{token}-level-{k}-{w}", workers=[a], pure=False)
                            for w, a in enumerate(addresses)]
                summaries = [client.submit(_level_summary, fut, key=f"{token}-summary-{k}-{w}", workers=[a],
                                           pure=False) for w, (fut, a) in enumerate(zip(previous, addresses))]
            queue.append((k, summaries))
            while going and len(queue) > 1:
                going = settle(*queue.pop(0))
        while going and queue:
            going = settle(*queue.pop(0))
        phases["dp"] = time.perf_counter() - t
        answer = client.submit(_answer_on_worker, token, done, *previous, key=f"{token}-answer",
                               workers=addresses[:1], pure=False).result()
    finally:
        client.run(_release_on_worker, token, workers=addresses)
    engines = sorted({s["engine"] for s in setups})
    note = (f"{len(addresses)} Dask worker{'s' if len(addresses) > 1 else ''}{f' ({executor})' if executor else ''}"
            f", levels cut in equal shares; first worker: {setups[0]['note']}")
    need = {side: max(s["need"][side] for s in setups) for side in setups[0]["need"]}
    return result_of(file, options, n, answer, t0, phases, done, splits, engine="+".join(engines), device_note=note,
                   peak_bytes=need, workers=len(addresses), worker_compute_s=compute_s)
