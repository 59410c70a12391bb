"""A sliced bucket over Dask workers: one large bucket's message unsliced on one worker vs sliced over k.

The bucket: x0 (domain --var-domain) eliminated from binary functions
f(x0, xi) and ternary ones f(x0, xi, xi+1) over a separator of --sep
variables of domain -d; random costs 0..99, a share --p-hard forbidden, int64
saturating at top. Figures, each the fastest of --repeat runs after a warm-up
run (engine start-up, kernel compilation): this process's engine alone (no
Dask); one worker computing the whole message (inputs sent to it, message
back); the message in slices (gpusolve/distributed/slicing.py, --slices-per-worker per
worker) over the first k workers for each k of --workers. Every message must
equal this process's, else the script exits 1. Writes
bench/results/slicing-<device>-<date>.json.

Workers: an embedded cluster of max(--workers) single-threaded processes,
one GPU each when CuPy sees GPUs (scaleout.executor(gpus=True) sets
CUDA_VISIBLE_DEVICES per worker, as dask-cuda's LocalCUDACluster does); or a
running cluster (--scheduler), e.g. one worker per GPU started by hand:

    dask scheduler --port 8786 &
    CUDA_VISIBLE_DEVICES=0 dask worker tcp://127.0.0.1:8786 --nthreads 1 --no-nanny &
    CUDA_VISIBLE_DEVICES=1 dask worker tcp://127.0.0.1:8786 --nthreads 1 --no-nanny &
    python bench/slicing.py --scheduler tcp://127.0.0.1:8786 --device gpu
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from common import cpu_name, gpu_name, write_result  # noqa: E402
from gpusolve.engines.select import select_engine
from gpusolve.cuda.runtime import gpu_unavailable_reason  # noqa: E402
from gpusolve.model.problem import FORBIDDEN, CostFunction, Problem, Variable, finalize_integer  # noqa: E402
from gpusolve.plan.buckets import build_plan
from gpusolve.host import fmt_bytes  # noqa: E402

# (separator variables, their domain, domain of the eliminated variable): joint 1e11 entries, an 80 MB
# message, on a GPU (about 2 s at the fused kernel's 5e10 entries/s); 1e8 on the CPU (about a second).
SIZES = {"gpu": (7, 10, 10_000), "cpu": (6, 10, 100), "quick": (4, 6, 8)}


def bucket(sep: int, d: int, dv: int, p_hard: float, seed: int = 0):
    """(problem, its plan, the bucket of x0, that bucket's inputs)."""
    rng = np.random.default_rng(seed)
    variables = [Variable("x0", dv)] + [Variable(f"x{i}", d) for i in range(1, sep + 1)]
    scopes = [(0, i) for i in range(1, sep + 1)] + [(0, i, i + 1) for i in range(1, sep)]
    functions = []
    for scope in scopes:
        shape = tuple(variables[u].domain for u in scope)
        table = rng.integers(0, 100, size=shape).astype(np.int64)
        table[rng.random(shape) < p_hard] = FORBIDDEN
        functions.append(CostFunction(scope, table))
    problem = finalize_integer(Problem("bucket", variables, functions), None)
    plan = build_plan(problem, list(range(sep + 1)), None)
    mb = plan.minibuckets[0]
    return problem, plan, mb, plan.inputs(problem, mb, [f.table for f in problem.functions], {})


def timed(fn, repeat: int):
    """(cold seconds, fastest of `repeat` warm runs, that run's result)."""
    t = time.perf_counter()
    fn()
    cold = time.perf_counter() - t
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        runs.append((time.perf_counter() - t, out))
    best, out = min(runs, key=lambda r: r[0])
    return cold, best, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a tiny bucket, 1 and 2 CPU workers, one run each")
    ap.add_argument("--workers", type=int, nargs="+", default=[2], help="sliced over the first k workers, each k")
    ap.add_argument("--scheduler", default=None, help="a running Dask cluster (tcp://host:8786) instead of one here")
    ap.add_argument("--device", default="auto", choices=("auto", "cpu", "gpu"))
    ap.add_argument("--sep", type=int, default=None, help="separator variables (default: by device)")
    ap.add_argument("-d", type=int, default=None, help="their domain")
    ap.add_argument("--var-domain", type=int, default=None, help="domain of the eliminated variable")
    ap.add_argument("--p-hard", type=float, default=0.1)
    ap.add_argument("--slices-per-worker", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    try:
        from dask.distributed import Client  # noqa: F401
    except ImportError:
        sys.exit("bench/slicing.py needs dask.distributed (pip install -e '.[dask]')")
    from gpusolve.distributed.cluster import bucket_message, executor, worker_addresses
    from gpusolve.distributed.slicing import eliminate_sliced, plan_slicing

    gpu = args.device == "gpu" or (args.device == "auto" and not args.quick and gpu_unavailable_reason() is None)
    device = "gpu" if gpu else "cpu"
    if args.quick:
        args.workers, args.repeat = [1, 2], 1
    sep, d, dv = SIZES["quick" if args.quick else device]
    sep, d, dv = args.sep or sep, args.d or d, args.var_domain or dv
    problem, plan, mb, inputs = bucket(sep, d, dv, args.p_hard)
    scopes = tuple(s for _, s in inputs)
    dom = tuple(problem.domains)
    what = (f"bucket of x0 (domain {dv}): {len(inputs)} inputs, separator {sep} x {d}, {mb.out_entries:,} rows "
            f"({fmt_bytes(mb.out_entries * 8)}), joint {mb.joint_entries:,} entries")
    print(what, flush=True)

    engine, note = select_engine(device)
    cold, local_s, want = timed(lambda: engine.get(engine.eliminate(mb, [(engine.put(t), s) for t, s in inputs],
                                                                    dom, problem.top, True)), args.repeat)
    want = np.array(want)  # a host copy: the engine's buffers are reused
    print(f"this process ({engine.name}): {local_s:.3f} s (first run {cold:.3f} s)", flush=True)
    rows, same = [], True
    with executor(args.scheduler, None if args.scheduler else max(args.workers), gpus=gpu) as (client, where, start_s):
        workers = worker_addresses(client)
        print(f"cluster: {where}, started in {start_s:.2f} s", flush=True)

        def whole():
            tables = [client.scatter(t, workers=workers[:1], hash=False) for t, _ in inputs]
            return client.submit(bucket_message, mb, scopes, dom, problem.top, True, device, "min", *tables,
                                 workers=workers[:1], pure=False).result()

        cold, best, (message, compute_s, eng) = timed(whole, args.repeat)
        same &= bool(np.array_equal(message, want))
        rows.append({"config": "unsliced", "workers": 1, "slices": 1, "cold_s": cold, "best_s": best,
                     "compute_s": compute_s, "engines": [eng], "same": same})
        print(f"unsliced, 1 worker ({eng}): {best:.3f} s (compute {compute_s:.3f} s; first run {cold:.3f} s)",
              flush=True)
        for k in args.workers:
            if k > len(workers):
                print(f"sliced over {k} workers: the cluster has {len(workers)}, skipped", flush=True)
                continue
            s = plan_slicing(plan, dom, k * args.slices_per_worker, mb.joint_entries * plan.itemsize - 1).of(mb.index)
            cold, best, (message, record) = timed(
                lambda: eliminate_sliced(client, s, mb, inputs, dom, problem.top, True, device, workers=workers[:k]),
                args.repeat)
            ok = bool(np.array_equal(message, want))
            same &= ok
            rows.append({"config": "sliced", "workers": k, "slices": len(s.ranges), "cold_s": cold, "best_s": best,
                         "compute_s": record["compute_s"], "slowest_s": record["slowest_s"],
                         "sent_bytes": record["sent_bytes"], "engines": record["engines"], "same": ok,
                         "speedup": rows[0]["best_s"] / best})
            print(f"sliced over {k} worker(s), {len(s.ranges)} slices ({'/'.join(record['engines'])}): {best:.3f} s "
                  f"(slowest slice {record['slowest_s']:.3f} s; first run {cold:.3f} s) = "
                  f"{rows[-1]['speedup']:.2f}x the unsliced worker" + ("" if ok else "  MESSAGE DIFFERS"), flush=True)
    name = gpu_name() if any("cupy" in r["engines"] for r in rows) else cpu_name()
    write_result("slicing", name, args=vars(args), bucket=what, out_entries=mb.out_entries,
                 joint_entries=mb.joint_entries, local={"engine": engine.name, "best_s": local_s, "note": note},
                 cluster={"where": where, "start_s": start_s, "workers": len(workers)}, runs=rows)
    if not same:
        print(json.dumps(rows))
        sys.exit(1)


if __name__ == "__main__":
    main()
