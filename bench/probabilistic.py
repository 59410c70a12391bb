"""PR and MAR time per pass on the shared .uai instances and generated Markov grids, CPU vs GPU.

Writes bench/results/probabilistic-<device>-<date>.json. The GPU columns are
filled when CuPy and a device are present; the GPU is timed on a second run
(the first compiles kernels and warms the memory pool). Speedups are per pass
(eliminate: the forward lse pass; distribute: MAR's backward pass) and in total.
"""
from __future__ import annotations

import argparse
import os
import platform
from pathlib import Path

from common import SHARED, cpu_name, gpu_name, write_result

from gpusolve import parsers
from gpusolve.cuda.runtime import gpu_unavailable_reason
from gpusolve.generate import markov_grid
from gpusolve.order.graph import elimination_order
from gpusolve.plan.buckets import build_plan
from gpusolve.schedule.solve import Options, solve

PASSES = ("eliminate", "distribute")


def instances(grids, folder: Path | None):
    for name in ("network.uai", "water.uai") if folder is not None else ():
        if (folder / name).exists():
            yield name, parsers.read(folder / name)
    for side, d in grids:
        p = markov_grid(side, d, seed=1)
        yield p.name, p


def run(problem, device, task):
    r = solve(problem, Options(device=device, task=task))
    passes = {k: v for k, v in r.phases.items() if k in PASSES}
    return {"log10_z": r.lower_bound, "total_s": sum(passes.values()), **passes, "engine": r.engine}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grids", default="10x3,14x3,16x3", help="SIDExDOMAIN,... Markov grids")
    ap.add_argument("--cpu-max-clique", type=float, default=2e8,
                    help="skip the CPU run above this clique size (entries)")
    ap.add_argument("--instances", type=Path, default=SHARED,
                    help="folder with network.uai and water.uai (default: $GPUSOLVE_INSTANCES or ../shared/instances)")
    ap.add_argument("--quick", action="store_true", help="one tiny grid, no shared instances (checks the script runs)")
    args = ap.parse_args()
    if args.quick:
        args.grids, args.instances = "4x2", None
    grids = [tuple(int(x) for x in g.split("x")) for g in args.grids.split(",") if g]
    gpu = gpu_unavailable_reason() is None
    device = gpu_name() if gpu else "cpu"
    rows = []
    for name, problem in instances(grids, args.instances):
        plan = build_plan(problem, elimination_order(problem, "minfill"))
        clique = max(mb.joint_entries for mb in plan.minibuckets)
        for task in ("PR", "MAR"):
            row = {"instance": name, "task": task, "largest_clique": clique,
                   "induced_width": plan.induced_width}
            if clique <= args.cpu_max_clique:
                row["cpu"] = run(problem, "cpu", task)
            if gpu:
                run(problem, "gpu", task)  # first call compiles and warms up
                row["gpu"] = run(problem, "gpu", task)
            if "cpu" in row and "gpu" in row:
                row["speedup"] = row["cpu"]["total_s"] / max(row["gpu"]["total_s"], 1e-9)
                row["speedup_per_pass"] = {k: row["cpu"][k] / max(row["gpu"][k], 1e-9)
                                           for k in PASSES if k in row["gpu"]}
                row["agree"] = abs(row["cpu"]["log10_z"] - row["gpu"]["log10_z"]) < 1e-6
            rows.append(row)
            cpu_s = f"{row['cpu']['total_s']:.3f}" if "cpu" in row else "-"
            gpu_s = f"{row['gpu']['total_s']:.3f}" if "gpu" in row else "-"
            per_pass = "  ".join(f"{k} {row['cpu'].get(k, 0):.3f}/{row['gpu'][k]:.4f} s {x:.1f}x"
                                 for k, x in row.get("speedup_per_pass", {}).items())
            print(f"{name:24} {task:3} clique {clique:>12,}  cpu {cpu_s:>8} s  gpu {gpu_s:>8} s  "
                  f"speedup {row.get('speedup', float('nan')):7.1f}x  log10Z "
                  f"{(row.get('gpu') or row.get('cpu'))['log10_z']:.7f}  {per_pass}", flush=True)
    write_result("probabilistic", device, host=platform.node(), cpu=cpu_name(), cpu_count=os.cpu_count(), rows=rows)


if __name__ == "__main__":
    main()
