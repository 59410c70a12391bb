"""Coalition structure generation: DP/IDP time per number of agents, GPU and CPU in the same run.

For n = --min-n .. --max-n: values drawn from --distribution (the DP's work does not depend on
them), solved on the GPU (when CuPy and a device are present) and, for n <= --cpu-max-n, on the
CPU engine, whose answers must agree. Each solve gets --budget seconds (its --time-limit); the
sweep ends at the first n that does not finish, or whose predicted time (3x the last, the DP being
O(3^n)) exceeds the budget. Reports split evaluations per second and, on the GPU, the device's
copy bandwidth with the rate it would allow if each split read its two f values from DRAM once
(2 x 4 bytes in single precision), and if each read cost a 32-byte sector.
"""
from __future__ import annotations

import argparse
import math
import time

from common import cpu_name, gpu_name, write_result

from gpusolve import csg
from gpusolve.engines import gpu_unavailable_reason


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


def run_one(values, device: str, args) -> dict:
    r = csg.solve(values, csg.Options(algorithm=args.algorithm, device=device, precision=args.precision,
                                      time_limit=args.budget))
    n = r.n
    return {"n": n, "device": device, "status": r.status, "value": r.value, "upper_bound": r.upper_bound,
            "levels_done": r.levels_done, "dp_s": r.phases["dp"], "total_s": r.time_s, "phases": r.phases,
            "splits": r.splits, "splits_per_s": r.splits_per_s, "engine": r.engine}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min-n", type=int, default=20)
    ap.add_argument("--max-n", type=int, default=30)
    ap.add_argument("--cpu-max-n", type=int, default=20, help="largest n also solved on the CPU engine")
    ap.add_argument("--budget", type=float, default=300.0, help="seconds per solve (its time limit)")
    ap.add_argument("--algorithm", choices=csg.ALGORITHMS, default="idp")
    ap.add_argument("--precision", choices=tuple(csg.PRECISIONS), default="single")
    ap.add_argument("--distribution", choices=csg.DISTRIBUTIONS, default="uniform")
    ap.add_argument("--no-gpu", action="store_true", help="CPU engine only")
    ap.add_argument("--quick", action="store_true", help="n = 8..12, both engines (checks the script runs)")
    args = ap.parse_args()
    if args.quick:
        args.min_n, args.max_n, args.cpu_max_n, args.budget = 8, 12, 12, 60.0
    gpu = not args.no_gpu and gpu_unavailable_reason() is None
    extra = {}
    if gpu:
        import cupy as cp
        bw = copy_bandwidth(cp)
        item = 4 if args.precision == "single" else 8
        extra = {"copy_bandwidth_Bps": bw, "dram_once_bound_splits_per_s": bw / (2 * item),
                 "sector_bound_splits_per_s": bw / 64}
        print(f"copy bandwidth {bw / 1e9:.0f} GB/s: {bw / (2 * item):.3g} splits/s if each split read its two "
              f"values from DRAM once, {bw / 64:.3g} if each read cost a 32-byte sector")
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
            row = run_one(values, device, args)
            row.update(generate_s=gen_s, distribution=args.distribution, algorithm=args.algorithm,
                       precision=args.precision, total_splits=csg.total_splits(n, args.algorithm))
            rows.append(row)
            answers[device] = row
            last[device] = row["dp_s"] if row["status"] == "optimal" else math.inf
            print(f"n = {n:2d} {device}: {row['status']}, value {row['value']:.6f}, dp {row['dp_s']:.3f} s, "
                  f"{row['splits']:.3g} splits, {row['splits_per_s']:.3g} splits/s (generate {gen_s:.1f} s)")
        if len(answers) == 2 and all(a["status"] == "optimal" for a in answers.values()):
            g, c = answers["gpu"]["value"], answers["cpu"]["value"]
            assert abs(g - c) <= 1e-6 * max(1.0, abs(c)), f"n = {n}: GPU {g} != CPU {c}"
            print(f"n = {n:2d}: GPU {answers['cpu']['dp_s'] / answers['gpu']['dp_s']:.1f}x the CPU engine")
    device = gpu_name() if gpu else cpu_name()
    write_result("csg", device, cpu=cpu_name(), budget_s=args.budget, rows=rows, **extra)


if __name__ == "__main__":
    main()
