"""Sparse tables: throughput, streaming beyond the device budget, and time to the proven optimum against toulbar2.

Issue 4's benchmarks, one script for CPU and GPU (the same `xp` code runs on
NumPy or CuPy). Throughput: a star bucket, two random tables over (v, a1..ak)
and (v, b1..bk), domain d, each row feasible with probability f; timed are
the materialised join-sum (index, gather, sort: output rows per second) and
the bucket step (join-sum reduced over v chunk by chunk: joint rows per
second), best of --repeat, each checked against the dense step on small
sizes. Streaming: one bucket whose host tables exceed a forced device budget,
run streamed (engines/streaming.py: device-sized sort runs and the join's
chunks merged on the device by range, chunks on two streams through kept
pinned buffers; twice, the second reusing the buffers) and in memory; rows,
chunks, bytes each way, and the sparse streaming throughput: bytes moved
between host and device over the whole step's seconds. Instances: `solve` with default options, cold (a
fresh process, its start-up and CuPy's included; on the GPU once with an
empty CuPy kernel cache, as on a new machine, and once more with the cache
that run filled) and warm (again in the same process), per device; then
toulbar2 (pytoulbar2) on the same machine. Writes
bench/results/sparse-<device>-<date>.json.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from common import ROOT, SHARED, best_time, cpu_name, gpu_name, write_result

from gpusolve import parsers
from gpusolve.engines import sparse
from gpusolve.engines.sparse_streamed import Streamer  # noqa: E402
from gpusolve.cuda import pinned
from gpusolve.engines import streaming as streams
from gpusolve.engines.dense import eliminate_dense
from gpusolve.schedule.solve import Options, solve

INSTANCES = (("404.wcsp", 114), ("CELAR6-SUB0.wcsp", 159))
TOP = 1 << 40


def array_module(device: str):
    """(array module, device synchronisation, device name)."""
    if device == "cpu":
        return np, lambda: None, cpu_name()
    import cupy
    return cupy, cupy.cuda.Device().synchronize, gpu_name()


def random_table(xp, rng, scope, d, f):
    """Rows of a dense d^k table kept with probability f, costs 0..99."""
    dense = d ** len(scope)
    keys = np.flatnonzero(rng.random(dense) < f).astype(np.int64)
    costs = rng.integers(0, 100, size=keys.shape[0]).astype(np.int64)
    return sparse.SparseTable(tuple(scope), (d,) * len(scope), xp.asarray(keys), xp.asarray(costs))


def throughput(xp, sync, d, ks, fractions, max_rows, repeat):
    rows = []
    rng = np.random.default_rng(0)
    for k in ks:
        for f in fractions:
            a = random_table(xp, rng, [0] + list(range(1, k + 1)), d, f)
            b = random_table(xp, rng, [0] + list(range(k + 1, 2 * k + 1)), d, f)
            joint_rows = int(sparse.join_index(xp, a, b).total)
            if joint_rows > max_rows:
                continue
            sep = tuple(range(2 * k, 0, -1))
            scope, dims = sep + (0,), (d,) * (2 * k + 1)
            dom = [d] * (2 * k + 1)
            t_join, joined = best_time(lambda: sparse.join(xp, a, b, scope, dims, TOP), sync, repeat)
            t_elim, msg = best_time(lambda: sparse.eliminate_sparse(xp, 0, sep, [(a, a.scope), (b, b.scope)],
                                                                    dom, TOP), sync, repeat)
            if d ** (2 * k + 1) <= 1 << 22:  # check against the dense step
                dense = [(sparse.to_dense(np, sparse.SparseTable(t.scope, t.dims, _host(t.keys), _host(t.costs)),
                                          TOP, np.int64), t.scope) for t in (a, b)]
                ref = eliminate_dense(np, 0, sep, dense, dom, TOP, True)
                got = sparse.to_dense(np, sparse.SparseTable(msg.scope, msg.dims, _host(msg.keys), _host(msg.costs)),
                                      TOP, np.int64)
                assert np.array_equal(ref, got), (k, f)
            row = {"d": d, "k": k, "feasible_fraction": f, "input_rows": [a.rows, b.rows],
                   "joint_dense_entries": d ** (2 * k + 1), "join_output_rows": joined.rows,
                   "message_rows": msg.rows, "join_s": t_join, "join_rows_per_s": joined.rows / t_join,
                   "eliminate_s": t_elim, "eliminate_joint_rows_per_s": joint_rows / t_elim}
            print(f"k={k} f={f:<5} inputs {a.rows:>10,} x {b.rows:>10,}  join {joined.rows:>12,} rows "
                  f"{row['join_rows_per_s']:.3g}/s   eliminate {row['eliminate_joint_rows_per_s']:.3g} joint rows/s",
                  flush=True)
            rows.append(row)
    return rows


def _host(a):
    return a.get() if hasattr(a, "get") else a


COLD = """import json, sys
sys.path[:0] = sys.argv[3:]
from gpusolve import parsers
from gpusolve.schedule.solve import Options, solve
r = solve(parsers.read(sys.argv[1]), Options(device=sys.argv[2]))
print(json.dumps({"status": r.status, "lower_bound": r.lower_bound, "time_s": r.time_s, "phases": r.phases}))
"""


def solve_cold(path: Path, device: str, cache_dir: str | None = None) -> dict:
    """`solve` in a fresh process: time_s includes the engine's start-up (CuPy import, context, kernel
    loads or compiles; with `cache_dir`, CuPy's kernel cache lives there)."""
    env = dict(os.environ, **({"CUPY_CACHE_DIR": cache_dir} if cache_dir else {}))
    out = subprocess.run([sys.executable, "-c", COLD, str(path), device, str(ROOT), str(ROOT / "bench")],
                         capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def instances(folder: Path, devices: list[str], toulbar2: bool):
    out = []
    for name, optimum in INSTANCES:
        path = folder / name
        problem = parsers.read(path)
        rec = {"file": name, "known_optimum": optimum}
        for device in devices:
            runs = {}
            with tempfile.TemporaryDirectory() as cache:
                if device == "gpu":
                    runs["cold_empty_kernel_cache"] = solve_cold(path, device, cache)
                runs["cold"] = solve_cold(path, device, cache)  # on the GPU: the kernels the run above cached
            if device == "gpu":
                solve(problem, Options(device=device))  # CuPy started and kernels loaded: the next run is warm
            r = solve(problem, Options(device=device))
            runs["warm"] = {"status": r.status, "lower_bound": r.lower_bound, "time_s": r.time_s, "phases": r.phases,
                            "largest_sparse_rows": r.largest_rows, "engine": r.engine, "z": r.z}
            for run in runs.values():
                assert run["status"] == "optimal" and run["lower_bound"] == optimum, (name, device, run)
            if not r.largest_rows:  # auto chose dense tables: time the all-sparse run as well
                s = solve(problem, Options(device=device, tables="sparse"))
                assert s.status == "optimal" and s.lower_bound == optimum, s
                runs["tables_sparse_warm"] = {"time_s": s.time_s, "largest_sparse_rows": s.largest_rows}
            rec[device] = runs
            times = ", ".join(f"{k} {v['time_s']:.2f} s" for k, v in runs.items())
            print(f"{name} on {device}: optimal {optimum}; {times}"
                  + f"; largest sparse message {r.largest_rows:,} rows", flush=True)
        if toulbar2:
            try:
                import pytoulbar2
            except ImportError:
                toulbar2 = False
                print("pytoulbar2 is not installed here: no toulbar2 comparison", flush=True)
        if toulbar2:
            cfn = pytoulbar2.CFN(verbose=-1)
            cfn.Read(str(path))
            t = time.perf_counter()
            res = cfn.Solve()
            rec["toulbar2_s"] = time.perf_counter() - t
            rec["toulbar2_optimum"] = None if not res else res[1]
            print(f"{name}: toulbar2 {rec['toulbar2_optimum']} in {rec['toulbar2_s']:.2f} s", flush=True)
        out.append(rec)
    return out


def device_peak(xp, run) -> int | None:
    """The most device bytes live at once while `run()` runs (CuPy's pool, every allocation
    tracked: a run apart from the timed ones); None on the CPU."""
    if xp is np:
        return None
    pool = xp.get_default_memory_pool()
    xp.cuda.Device().synchronize()
    base = pool.used_bytes()
    peak = [base]

    def malloc(size):
        memory = pool.malloc(size)
        peak[0] = max(peak[0], pool.used_bytes())
        return memory
    xp.cuda.set_allocator(malloc)
    try:
        run()
        xp.cuda.Device().synchronize()
    finally:
        xp.cuda.set_allocator(pool.malloc)
    return peak[0] - base


def streaming(xp, sync, d, shared, private, f, budget, repeat=2, seed=0):
    """One bucket whose tables exceed `budget` device bytes: streamed (`repeat` times on one pipeline:
    the first grows its pinned staging buffers, later ones reuse them) vs in memory, equal messages.
    Throughput is every byte copied between host and device over the whole step's wall time."""
    rng = np.random.default_rng(seed)
    s = list(range(shared))
    a = random_table(np, rng, s + list(range(shared, shared + private)), d, f)
    b = random_table(np, rng, s + list(range(shared + private, shared + 2 * private)), d, f)
    sep = tuple(range(shared + 2 * private - 1, 0, -1))
    dom = [d] * (shared + 2 * private)
    log = []
    pipe = streams.Pipeline(xp, log)
    # The process's first sparse step loads (or, on an empty cache, compiles) its kernels, whatever
    # its size: timed apart on the bucket without its first shared variables (1/d^drop of the rows),
    # streamed through 1/d^drop of the budget.
    drop = min(2, shared - 1)
    small = [random_table(np, rng, list(t.scope[drop:]), d, f) for t in (a, b)]
    sync()
    t = time.perf_counter()
    sparse.eliminate_sparse(xp, drop, sep[:len(sep) - drop], [(x, x.scope) for x in small], dom, TOP,
                            streamer=Streamer(streams.Pipeline(xp, []), budget // d ** drop))
    sync()
    warm_up = time.perf_counter() - t
    runs = []
    for _ in range(max(repeat, 1)):
        first = len(log)
        pool = dict(pinned._PAGES.stats)
        sync()
        t = time.perf_counter()
        got = sparse.eliminate_sparse(xp, 0, sep, [(a, a.scope), (b, b.scope)], dom, TOP,
                                      streamer=Streamer(pipe, budget))
        sync()
        t_stream = time.perf_counter() - t
        pool = {k: v - pool[k] for k, v in pinned._PAGES.stats.items()}  # page blocks: fresh ones cost registering
        steps = log[first:]
        moved = sum(r["bytes"] for r in steps)
        runs.append({"streamed_s": t_stream, "bytes_moved": moved, "GB_per_s": moved / t_stream / 1e9,
                     "tables_GB_per_s": ((a.rows + b.rows) * 16 + got.rows * 16) / t_stream / 1e9,
                     "in_maps_s": sum(r["seconds"] for r in steps), "page_blocks": pool, "steps": steps})
    peak = device_peak(xp, lambda: sparse.eliminate_sparse(xp, 0, sep, [(a, a.scope), (b, b.scope)], dom, TOP,
                                                          streamer=Streamer(pipe, budget)))
    on = [sparse.moved(xp, x) for x in (a, b)]
    t_mem, ref = best_time(lambda: sparse.eliminate_sparse(xp, 0, sep, [(x, x.scope) for x in on], dom, TOP), sync, 1)
    assert np.array_equal(got.keys, _host(ref.keys)) and np.array_equal(got.costs, _host(ref.costs))
    best = min(runs, key=lambda r: r["streamed_s"])
    table_bytes = (a.rows + b.rows) * 16
    rec = {"d": d, "shared": shared, "private": private, "feasible_fraction": f, "budget_bytes": budget,
           "input_rows": [a.rows, b.rows], "input_bytes": table_bytes,
           "joint_rows": int(sparse.join_index(np, a, b).total), "message_rows": got.rows,
           "message_bytes": got.rows * 16, "in_memory_s": t_mem, "first_sparse_step_s": warm_up, "runs": runs,
           "streamed_s": best["streamed_s"], "copy_GB_per_s": best["GB_per_s"],
           "chunks": sum(r["chunks"] for r in best["steps"]), "h2d_bytes": sum(r["h2d_bytes"] for r in best["steps"]),
           "d2h_bytes": sum(r["d2h_bytes"] for r in best["steps"]), "device_peak_bytes": peak}
    later = [r["streamed_s"] for r in runs[1:]]
    if later:  # the process's later streamed buckets: kept buffers and grown pools reused
        rec["later_runs_median_s"] = statistics.median(later)
        rec["later_runs_median_GB_per_s"] = runs[0]["bytes_moved"] / rec["later_runs_median_s"] / 1e9
    print(f"streamed bucket: inputs {a.rows:,} + {b.rows:,} rows ({table_bytes / 2**20:.0f} MiB) through a "
          f"{budget / 2**20:.0f} MiB budget: {rec['joint_rows']:,} joint rows -> {got.rows:,} message rows "
          f"({rec['message_bytes'] / 2**20:.0f} MiB); in memory {t_mem:.3f} s; the process's first sparse step "
          f"(kernels loaded, 1/{d ** drop} of the bucket) {warm_up:.3f} s", flush=True)
    for i, r in enumerate(runs):
        print(f"  run {i + 1}: {r['streamed_s']:.3f} s, {r['bytes_moved'] / 1e9:.2f} GB moved: sparse streaming "
              f"{r['GB_per_s']:.2f} GB/s over the whole step (inputs + message {r['tables_GB_per_s']:.2f} GB/s); "
              f"{r['streamed_s'] - r['in_maps_s']:.3f} s outside the pipeline's maps; page blocks "
              f"{r['page_blocks']['reused']} reused, {r['page_blocks']['registered']} registered in "
              f"{r['page_blocks']['register_s']:.3f} s", flush=True)
    if peak is not None:
        print(f"  device memory: live peak {peak / 2**20:.1f} MiB of the {budget / 2**20:.0f} MiB budget (one more "
              f"run, every allocation tracked)", flush=True)
    if later:
        print(f"  runs 2-{len(runs)}: median {rec['later_runs_median_s']:.3f} s, "
              f"{rec['later_runs_median_GB_per_s']:.2f} GB/s", flush=True)
    for r in best["steps"]:
        print(f"    {r['what']}: {r['chunks']} chunks, {r['h2d_bytes'] / 1e6:.0f} MB in, "
              f"{r['d2h_bytes'] / 1e6:.0f} MB out, {r['seconds']:.3f} s, {r['GB_per_s']:.2f} GB/s "
              f"(copies {r['copy_s']:.3f} s, work {r['work_s']:.3f} s, overlapped {r['overlap_s']:.3f} s)",
              flush=True)
    return rec


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", choices=("cpu", "gpu"), nargs="+", default=["cpu"],
                    help="instances run on each; the first names the results file")
    ap.add_argument("--throughput-devices", choices=("cpu", "gpu"), nargs="*", default=None,
                    help="throughput and streaming tables on these (default: --devices)")
    ap.add_argument("--instances", type=Path, default=SHARED)
    ap.add_argument("--d", type=int, default=10)
    ap.add_argument("--k", type=int, nargs="+", default=[2, 3, 4, 5])
    ap.add_argument("--fractions", type=float, nargs="+", default=[0.01, 0.05, 0.2, 0.5])
    ap.add_argument("--max-rows", type=float, default=None,
                    help="skip buckets with more joint rows (default 3e7 on CPU, 1e9 on GPU)")
    ap.add_argument("--stream", type=float, nargs=5, default=[10, 5, 2, 0.2, 32 << 20],
                    metavar=("D", "SHARED", "PRIVATE", "F", "BUDGET"),
                    help="streaming case: domain, shared and private variables per table, feasible fraction, "
                         "device bytes")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--streaming-only", action="store_true",
                    help="only the streamed bucket (sparse streaming GB/s), on --throughput-devices or --devices")
    ap.add_argument("--no-toulbar2", action="store_true")
    ap.add_argument("--quick", action="store_true",
                    help="one small throughput case and a small streamed bucket, no instances (checks the script runs)")
    args = ap.parse_args()
    if args.quick:
        args.k, args.fractions, args.repeat, args.stream = [2], [0.05], 1, [10, 3, 1, 0.2, 16 << 10]
    skip = args.quick or args.streaming_only
    record = {"host": platform.node(), "host_cpu": cpu_name(), "numpy": np.__version__,
              "instances": [] if skip else instances(args.instances, args.devices, not args.no_toulbar2)}
    d, shared, private, f, budget = args.stream
    for device in args.devices if args.throughput_devices is None else args.throughput_devices:
        xp, sync, name = array_module(device)
        max_rows = args.max_rows or (3e7 if device == "cpu" else 1e9)
        record[device] = {"device": name,
                          "throughput": [] if args.streaming_only else
                          throughput(xp, sync, args.d, args.k, args.fractions, max_rows, args.repeat),
                          "streaming": streaming(xp, sync, int(d), int(shared), int(private), f, int(budget),
                                                 max(args.repeat, 2))}
    write_result("sparse", array_module("gpu" if "gpu" in args.devices else "cpu")[2], **record)  # name the GPU


if __name__ == "__main__":
    main()
