"""`gpusolve batch` over the shared instances plus generated journal networks, CPU against GPU.

One folder: every instance of ../shared/instances with a known optimum (symbolic links) and
--generated networks (GpuBE section 8.1: random, scale-free, grid; 10-81 variables, domains
5-10). Four batch runs, each one process: --device cpu twice, then --device gpu with an empty
CuPy kernel cache (a new machine), then --device gpu again with that cache warm. Reported: total
wall of each run, and per instance the GPU's time minus the CPU's (the first instance that runs
on the GPU engine pays CuPy's import and the CUDA context, so it is listed apart), with every
instance over --slack, apart for those --device gpu ran on the device and those it placed on the
host (the CPU's code: their difference is the noise the second CPU run measures).
Writes bench/results/batch_gpu-<device>-<date>.json.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, SHARED, cpu_name, write_result

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


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--generated", type=int, default=40, help="journal networks to add (at most 40)")
    ap.add_argument("--time-limit", type=float, default=30.0)
    ap.add_argument("--slack", type=float, default=0.020, help="seconds a GPU instance may lose to the CPU")
    ap.add_argument("--quick", action="store_true", help="four generated networks, no shared instances")
    args = ap.parse_args()
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
    cache = work / "kernel-cache"
    walls = {"cpu": batch(folder, work / "cpu.jsonl", "cpu", cache, args.time_limit),
             "cpu_again": batch(folder, work / "cpu2.jsonl", "cpu", cache, args.time_limit),
             "gpu_empty_cache": batch(folder, work / "gpu1.jsonl", "gpu", cache, args.time_limit),
             "gpu_warm_cache": batch(folder, work / "gpu2.jsonl", "gpu", cache, args.time_limit)}
    cpu = {r["file"]: r for r in records(work / "cpu.jsonl")}
    noise = [r["time_s"] - cpu[r["file"]]["time_s"] for r in records(work / "cpu2.jsonl")]
    from common import gpu_name
    out = {"wall_s": walls, "instances": len(cpu), "cpu_again_minus_cpu_s": {"max": max(noise), "min": min(noise)},
           "runs": {}}
    print(f"cpu twice: {walls['cpu']:.1f} s and {walls['cpu_again']:.1f} s; per instance the second minus the first "
          f"from {min(noise) * 1e3:+.0f} to {max(noise) * 1e3:+.0f} ms")
    for run in ("gpu_empty_cache", "gpu_warm_cache"):
        gpu = records(work / ("gpu1.jsonl" if run == "gpu_empty_cache" else "gpu2.jsonl"))
        rows = [{"file": Path(r["file"]).name, "engine": r["engine"], "cpu_s": cpu[r["file"]]["time_s"],
                 "gpu_s": r["time_s"], "delta_s": r["time_s"] - cpu[r["file"]]["time_s"],
                 "same_bounds": (r["lower_bound"], r["upper_bound"]) == (cpu[r["file"]]["lower_bound"],
                                                                         cpu[r["file"]]["upper_bound"]),
                 "status": r["status"]} for r in gpu]
        # the first instance on the GPU engine pays CuPy's import and the CUDA context for the process
        first = next((i for i, r in enumerate(rows) if r["engine"] == "cupy"), 0)
        rest = rows[:first] + rows[first + 1:]
        over = [r for r in rest if r["delta_s"] > args.slack]
        on_device = [r["delta_s"] for r in rest if r["engine"] == "cupy"]
        out["runs"][run] = {"first": rows[first] if rows else None, "rows": rows, "over_slack": over,
                            "max_delta_after_first_s": max((r["delta_s"] for r in rest), default=None),
                            "max_delta_on_device_after_first_s": max(on_device, default=None)}
        print(f"{run}: wall {walls[run]:.1f} s (cpu {walls['cpu']:.1f} s), {len(rows)} instances, first on the "
              f"GPU {rows[first]['file']} {rows[first]['delta_s']:+.3f} s; the others at most "
              f"{out['runs'][run]['max_delta_after_first_s']:+.3f} s, {len(on_device)} on the device at most "
              f"{max(on_device, default=0):+.3f} s; over {args.slack * 1e3:.0f} ms: " + ", ".join(
                  f"{r['file']} ({r['engine']}) +{r['delta_s'] * 1e3:.0f} ms" for r in over[:10]), flush=True)
        for r in rows:
            print(f"  {r['file']:32} {r['engine']:6} cpu {r['cpu_s']:.3f} s  gpu {r['gpu_s']:.3f} s  "
                  f"{'' if r['same_bounds'] else 'BOUNDS DIFFER'}")
    write_result("batch_gpu", gpu_name(), host=cpu_name(), time_limit=args.time_limit, slack_s=args.slack, **out)


if __name__ == "__main__":
    main()
