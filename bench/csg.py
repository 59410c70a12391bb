"""Coalition structure generation: DP/IDP time per number of agents, GPU and CPU in the same run.

For n = --min-n .. --max-n: values drawn from --distribution (the DP's work does not depend on
them), solved on the GPU (when CuPy and a device are present) and, for n <= --cpu-max-n, on the
CPU engine (--threads, default one per core), whose answers must agree. Each solve gets --budget
seconds (its --time-limit); the sweep ends at the first n that does not finish, or whose
predicted time (3x the last, the DP being O(3^n)) exceeds the budget. Reports split evaluations
per second and, on the GPU, the device's copy bandwidth with the rate it would allow if each
split read its two f values from DRAM once (2 x 4 bytes in single precision), and if each read
cost a 32-byte sector.

--workers N times the DP over Dask workers instead (csg.solve_on_workers): for each n, on the
first worker alone and on the first N, both through the same code, answers compared. Without
--scheduler it starts an embedded cluster: one process per GPU (worker i sees GPU i only, as
dask-cuda's LocalCUDACluster would) when the GPU is used, else N CPU processes. On a 2-GPU host,
either `python bench/csg.py --workers 2`, or a cluster started by hand:
    dask scheduler --port 8786 &
    CUDA_VISIBLE_DEVICES=0 dask worker tcp://127.0.0.1:8786 --nthreads 1 &
    CUDA_VISIBLE_DEVICES=1 dask worker tcp://127.0.0.1:8786 --nthreads 1 &
    python bench/csg.py --workers 2 --scheduler tcp://127.0.0.1:8786
(or `dask cuda worker tcp://127.0.0.1:8786`, one worker per GPU, where dask-cuda is installed).
The record (bench "csg-workers") gives per run the DP phase, each worker's seconds in level
steps, and the rest (the exchange of shares, scheduling).
"""
from __future__ import annotations

import argparse
import math
import time

from common import cpu_name, gpu_name, write_result

from gpusolve.csg import dp as csg
from gpusolve.cuda.runtime import gpu_unavailable_reason
from gpusolve.host import cores


def copy_bandwidth(cp, nbytes: int = 1 << 30) -> float:
    """Device-to-device copy bytes (read + write) per second, best of 5."""
    a = cp.ones(nbytes // 4, dtype=cp.float32)
    b = cp.empty_like(a)
    best = math.inf
    for _ in range(5):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        cp.copyto(b, a)
        end.record()
        end.synchronize()
        best = min(best, cp.cuda.get_elapsed_time(start, end) / 1e3)
    return 2 * nbytes / best


def options(device: str, args) -> csg.Options:
    return csg.Options(algorithm=args.algorithm, device=device, precision=args.precision, time_limit=args.budget,
                       threads=args.threads)


def row_of(r, device: str, args) -> dict:
    return {"n": r.n, "device": device, "status": r.status, "value": r.value, "upper_bound": r.upper_bound,
            "levels_done": r.levels_done, "dp_s": r.phases["dp"], "total_s": r.time_s, "phases": r.phases,
            "splits": r.splits, "splits_per_s": r.splits_per_s, "engine": r.engine, "device_note": r.device_note,
            "distribution": args.distribution, "algorithm": args.algorithm, "precision": args.precision,
            "total_splits": csg.total_splits(r.n, args.algorithm)}


def agree(a: dict, b: dict, what: str) -> None:
    if a["status"] == b["status"] == "optimal":
        assert abs(a["value"] - b["value"]) <= 1e-6 * max(1.0, abs(b["value"])), f"n = {a['n']}: {what}"


def sweep(args, gpu: bool, save) -> list[dict]:
    """The GPU and the CPU engine per n, in this process; save(rows) after each n (a run cut short by
    a time limit keeps what it measured)."""
    rows, last = [], {}
    for n in range(args.min_n, args.max_n + 1):
        devices = (["gpu"] if gpu else []) + (["cpu"] if n <= args.cpu_max_n else [])
        devices = [d for d in devices if last.get(d, 0) * 3 <= args.budget]
        if not devices:
            print(f"n = {n}: stopping, the predicted time exceeds the {args.budget:.0f} s budget")
            break
        t = time.perf_counter()
        values = csg.generate_values(args.distribution, n, 1)
        gen_s = time.perf_counter() - t
        answers = {}
        for device in devices:
            row = row_of(csg.solve(values, options(device, args)), device, args)
            row["generate_s"] = gen_s
            rows.append(row)
            answers[device] = row
            last[device] = row["dp_s"] if row["status"] == "optimal" else math.inf
            print(f"n = {n:2d} {device}: {row['status']}, value {row['value']:.6f}, dp {row['dp_s']:.3f} s, "
                  f"{row['splits']:.3g} splits, {row['splits_per_s']:.3g} splits/s (generate {gen_s:.1f} s; "
                  f"{row['device_note']})", flush=True)
        if len(answers) == 2:
            agree(answers["gpu"], answers["cpu"], "GPU != CPU")
            if answers["gpu"]["dp_s"] > 0:
                print(f"n = {n:2d}: GPU {answers['cpu']['dp_s'] / answers['gpu']['dp_s']:.1f}x the CPU engine")
        save(rows)
    return rows


def workers_sweep(args, gpu: bool) -> tuple[list[dict], str]:
    """Per n, the DP on the first worker alone, then on the first --workers, over one cluster."""
    from gpusolve.distributed.cluster import executor
    device = "gpu" if gpu else "cpu"
    rows, last = [], 0.0
    with executor(args.scheduler, None if args.scheduler else args.workers, gpus=gpu) as (client, what, cluster_s):
        count = min(args.workers, len(client.scheduler_info()["workers"]))
        print(f"{what}, started in {cluster_s:.1f} s; 1 against {count} workers, engine {device}", flush=True)
        for n in range(args.min_n, args.max_n + 1):
            if last * 3 > args.budget:
                print(f"n = {n}: stopping, the predicted time exceeds the {args.budget:.0f} s budget")
                break
            answers = []
            for w in sorted({1, count}):  # each worker draws the values itself
                r = csg.solve_on_workers(None, options(device, args), client,
                                         ("generate", args.distribution, n, 1), workers=w, executor=what)
                row = row_of(r, device, args)
                row.update(workers=w, worker_compute_s=r.worker_compute_s,
                           other_s=r.phases["dp"] - max(r.worker_compute_s, default=0.0))
                rows.append(row)
                answers.append(row)
                last = row["dp_s"] if row["status"] == "optimal" else math.inf
                print(f"n = {n:2d}, {w} worker{'s' if w > 1 else ''}: {row['status']}, value {row['value']:.6f}, "
                      f"dp {row['dp_s']:.3f} s (level steps {', '.join(f'{s:.3f}' for s in r.worker_compute_s)} s; "
                      f"exchange and scheduling {row['other_s']:.3f} s), setup {r.phases['setup']:.2f} s", flush=True)
            agree(answers[0], answers[-1], "1 worker != several")
            if len(answers) == 2 and answers[-1]["dp_s"] > 0:
                print(f"n = {n:2d}: {count} workers {answers[0]['dp_s'] / answers[-1]['dp_s']:.2f}x one")
    return rows, what


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min-n", type=int, default=20)
    ap.add_argument("--max-n", type=int, default=30)
    ap.add_argument("--cpu-max-n", type=int, default=24, help="largest n also solved on the CPU engine")
    ap.add_argument("--threads", type=int, default=None, help="CPU engine threads (default: one per core)")
    ap.add_argument("--budget", type=float, default=300.0, help="seconds per solve (its time limit)")
    ap.add_argument("--algorithm", choices=csg.ALGORITHMS, default="idp")
    ap.add_argument("--precision", choices=tuple(csg.PRECISIONS), default="single")
    ap.add_argument("--distribution", choices=csg.DISTRIBUTIONS, default="uniform")
    ap.add_argument("--no-gpu", action="store_true", help="CPU engine only")
    ap.add_argument("--workers", type=int, default=None,
                    help="time the DP on 1 against this many Dask workers (see above)")
    ap.add_argument("--scheduler", default=None, help="with --workers: a running Dask cluster (tcp://host:8786)")
    ap.add_argument("--quick", action="store_true", help="n = 8..12, both engines (checks the script runs)")
    args = ap.parse_args()
    if args.quick:
        args.min_n, args.max_n, args.cpu_max_n, args.budget = 8, 12, 12, 60.0
    gpu = not args.no_gpu and gpu_unavailable_reason() is None
    device = gpu_name() if gpu else cpu_name()
    if args.workers:
        rows, what = workers_sweep(args, gpu)
        write_result("csg-workers", device, cpu=cpu_name(), budget_s=args.budget, executor=what, rows=rows)
        return
    extra = {}
    if gpu:
        import cupy as cp
        bw = copy_bandwidth(cp)
        item = 4 if args.precision == "single" else 8
        extra = {"copy_bandwidth_Bps": bw, "dram_once_bound_splits_per_s": bw / (2 * item),
                 "sector_bound_splits_per_s": bw / 64}
        print(f"copy bandwidth {bw / 1e9:.0f} GB/s: {bw / (2 * item):.3g} splits/s if each split read its two "
              f"values from DRAM once, {bw / 64:.3g} if each read cost a 32-byte sector")
    sweep(args, gpu, lambda rows: write_result("csg", device, cpu=cpu_name(), budget_s=args.budget, rows=rows,
                                               cpu_threads=args.threads or cores(), **extra))


if __name__ == "__main__":
    main()
