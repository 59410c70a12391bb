"""`gpusolve batch` over the shared instances plus generated journal networks, CPU against GPU.

One folder: every instance of ../shared/instances with a known optimum (symbolic links) and
--generated networks (GpuBE section 8.1: random, scale-free, grid; 10-81 variables, domains
5-10). --repeat rounds of batch runs, each one process: --device cpu, then --device gpu with
an empty CuPy kernel cache (a new machine), then --device gpu again with that cache warm.
Reported: the median total wall of each kind of run, and per instance the median of its times
(anytime phases that end when improvements stall vary from run to run) and the GPU's median
minus the CPU's (the first instance that runs on the GPU engine pays CuPy's import and the CUDA
context, so it is listed apart), with every instance over --slack, apart for those --device gpu
ran on the device and those it placed on the host (the CPU's code: their difference is noise,
as is the spread of the CPU's own runs, also reported).
Writes bench/results/batch_gpu-<device>-<date>.json.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, SHARED, cpu_name, gpu_name, write_result

TOPOLOGIES = [("random", n, d) for n in (10, 12, 14, 16, 18, 20, 22) for d in (5, 10)] + \
             [("scalefree", n, d) for n in (12, 16, 20, 24, 30, 40, 50) for d in (5, 10)] + \
             [("grid", n, d) for n in (16, 25, 36, 49, 64, 81) for d in (5, 10)]  # 40 networks


def batch(folder: Path, out: Path, device: str, cache: Path, time_limit: float) -> float:
    cmd = [sys.executable, "-m", "gpusolve", "batch", str(folder), "--out", str(out), "--device", device,
           "--time-limit", str(time_limit)]
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=dict(os.environ, CUPY_CACHE_DIR=str(cache)))
    if p.returncode not in (0, 1):
        raise RuntimeError(p.stderr[-400:])
    return time.perf_counter() - t


def bounds(record: dict) -> tuple:
    return record["lower_bound"], record["upper_bound"]


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--generated", type=int, default=40, help="journal networks to add (at most 40)")
    ap.add_argument("--time-limit", type=float, default=30.0)
    ap.add_argument("--slack", type=float, default=0.020, help="seconds a GPU instance may lose to the CPU")
    ap.add_argument("--repeat", type=int, default=5, help="rounds of the three batch runs (medians reported)")
    ap.add_argument("--quick", action="store_true", help="four generated networks, no shared instances, one round")
    args = ap.parse_args()
    if args.quick:
        args.repeat = 1
    work = Path(tempfile.mkdtemp(prefix="gpusolve-batch-"))
    folder = work / "instances"
    folder.mkdir()
    if not args.quick and (SHARED / "optima.csv").exists():
        with open(SHARED / "optima.csv") as f:
            for row in csv.DictReader(f):
                src = SHARED / row["file"]
                if src.exists():
                    (folder / src.name).symlink_to(src)
                    if (SHARED / f"{row['file']}.evid").exists():
                        (folder / f"{src.name}.evid").symlink_to(SHARED / f"{row['file']}.evid")
    for i, (topo, n, d) in enumerate(TOPOLOGIES[:4 if args.quick else args.generated]):
        subprocess.run([sys.executable, "-m", "gpusolve", "generate", topo, "-n", str(n), "-d", str(d),
                        "--seed", str(i), "-o", str(folder / f"{topo}-n{n}-d{d}-s{i}.wcsp")],
                       check=True, capture_output=True, cwd=ROOT)
    runs = {"cpu": [], "gpu_empty_cache": [], "gpu_warm_cache": []}  # (wall, records) per round
    for i in range(args.repeat):
        cache = work / f"kernel-cache-{i}"  # empty for the first GPU run of the round, warm for the second
        for run, device in (("cpu", "cpu"), ("gpu_empty_cache", "gpu"), ("gpu_warm_cache", "gpu")):
            out_file = work / f"{run}-{i}.jsonl"
            wall = batch(folder, out_file, device, cache, args.time_limit)
            runs[run].append((wall, {r["file"]: r for r in records(out_file)}))
    cpu_runs = [recs for _, recs in runs["cpu"]]
    files = list(cpu_runs[0])
    cpu = {f: statistics.median(recs[f]["time_s"] for recs in cpu_runs) for f in files}
    spread = [max(recs[f]["time_s"] for recs in cpu_runs) - min(recs[f]["time_s"] for recs in cpu_runs)
              for f in files]
    out = {"repeat": args.repeat, "instances": len(files),
           "wall_s": {run: statistics.median(w for w, _ in rs) for run, rs in runs.items()},
           "walls_s": {run: [w for w, _ in rs] for run, rs in runs.items()},
           "cpu_spread_s": {"max": max(spread), "median": statistics.median(spread)}, "runs": {}}
    walls = out["wall_s"]
    print(f"cpu: median wall {walls['cpu']:.1f} s of {args.repeat}; per instance its runs spread up to "
          f"{max(spread) * 1e3:.0f} ms (median {statistics.median(spread) * 1e3:.0f} ms)")
    for run in ("gpu_empty_cache", "gpu_warm_cache"):
        gpu_runs = [recs for _, recs in runs[run]]
        rows = []
        for f in files:
            gpu_s = statistics.median(recs[f]["time_s"] for recs in gpu_runs)
            rows.append({"file": Path(f).name, "engine": gpu_runs[0][f]["engine"], "cpu_s": cpu[f], "gpu_s": gpu_s,
                         "delta_s": gpu_s - cpu[f], "gpu_times_s": [recs[f]["time_s"] for recs in gpu_runs],
                         "same_bounds": all(bounds(recs[f]) == bounds(cpu_runs[0][f]) for recs in gpu_runs + cpu_runs),
                         "status": gpu_runs[0][f]["status"]})
        # the first instance on the GPU engine pays CuPy's import and the CUDA context for the process
        first = next((i for i, r in enumerate(rows) if r["engine"] == "cupy"), 0)
        rest = rows[:first] + rows[first + 1:]
        over = [r for r in rest if r["delta_s"] > args.slack]
        on_device = [r["delta_s"] for r in rest if r["engine"] == "cupy"]
        out["runs"][run] = {"first": rows[first] if rows else None, "rows": rows, "over_slack": over,
                            "max_delta_after_first_s": max((r["delta_s"] for r in rest), default=None),
                            "max_delta_on_device_after_first_s": max(on_device, default=None)}
        print(f"{run}: median wall {walls[run]:.1f} s (cpu {walls['cpu']:.1f} s), {len(rows)} instances, first on "
              f"the GPU {rows[first]['file']} {rows[first]['delta_s']:+.3f} s; the others at most "
              f"{out['runs'][run]['max_delta_after_first_s']:+.3f} s, {len(on_device)} on the device at most "
              f"{max(on_device, default=0):+.3f} s; over {args.slack * 1e3:.0f} ms: " + ", ".join(
                  f"{r['file']} ({r['engine']}) +{r['delta_s'] * 1e3:.0f} ms" for r in over[:10]), flush=True)
        for r in rows:
            print(f"  {r['file']:32} {r['engine']:6} cpu {r['cpu_s']:.3f} s  gpu {r['gpu_s']:.3f} s  "
                  f"{'' if r['same_bounds'] else 'BOUNDS DIFFER'}")
    write_result("batch_gpu", gpu_name(), host=cpu_name(), time_limit=args.time_limit, slack_s=args.slack, **out)


if __name__ == "__main__":
    main()
