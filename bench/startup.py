"""Start-up as a user meets it: fresh processes on a tiny instance, CPU and GPU, kernel cache empty and warm.

Medians (with min and max) of --repeat fresh processes each:
- `python -c "import gpusolve.cli.commands"`;
- `gpusolve solve tiny.wcsp --device cpu` (10 variables, domain 10, generated);
- `--device gpu` with CuPy's kernel cache warm (a primed CUPY_CACHE_DIR) and
  empty (a new one per run, as on a new machine): as users meet it (a plan this small
  stays on the host, see --host-max) and forced onto the device (--host-max 0);
- the GPU's fixed costs alone: `import cupy`, then device count, then a
  CUDA context (memGetInfo), each in a fresh process.
Also the ten slowest imports of `import gpusolve.cli.commands` (python -X importtime,
cumulative microseconds). Writes bench/results/startup-<device>-<date>.json.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from common import (ROOT, cache_bytecode, cpu_name, gpu_present, process_wall as wall, summary, tiny_instance,
                    warm_bytecode, write_result)

STAGES = {
    "import_cupy": "import cupy",
    "device_count": "import cupy; cupy.cuda.runtime.getDeviceCount()",
    "context": "import cupy; cupy.cuda.runtime.memGetInfo()",
}


def repeated(cmd, repeat, env_for=lambda i: None) -> dict:
    return summary([wall(cmd, env_for(i)) for i in range(repeat)])


def import_profile() -> list[tuple[str, int]]:
    """The ten largest cumulative import times (microseconds) of `import gpusolve.cli.commands`."""
    p = subprocess.run([sys.executable, "-X", "importtime", "-c", "import gpusolve.cli.commands"], capture_output=True,
                       text=True, cwd=ROOT)
    rows = []
    for line in p.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            rows.append((parts[2].strip(), int(parts[1])))
    return sorted(rows, key=lambda r: -r[1])[:10]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="one run of each (checks the script runs)")
    args = ap.parse_args()
    repeat = 1 if args.quick else args.repeat
    work = Path(tempfile.mkdtemp(prefix="gpusolve-startup-"))
    bytecode = cache_bytecode(work / "pycache")
    has_gpu = gpu_present()
    warm_bytecode("gpusolve.cli.commands", "gpusolve.schedule.solve", *(("cupy",) if has_gpu else ()))
    tiny = tiny_instance(work)
    solve = [sys.executable, "-m", "gpusolve"]
    rows = {"import_cli": repeated([sys.executable, "-c", "import gpusolve.cli.commands"], repeat),
            "solve_cpu": repeated(solve + ["solve", str(tiny), "--device", "cpu", "--json"], repeat)}
    device = cpu_name()
    if has_gpu:
        from common import gpu_name
        device = gpu_name()
        gpu = solve + ["solve", str(tiny), "--device", "gpu", "--json"]
        warm_cache = work / "warm-cache"

        def env(cache: Path):
            return dict(os.environ, CUPY_CACHE_DIR=str(cache))

        on_device = gpu + ["--host-max", "0"]
        wall(on_device, env(warm_cache))  # primes the warm cache
        rows["solve_gpu_warm_cache"] = repeated(gpu, repeat, lambda i: env(warm_cache))
        rows["solve_gpu_empty_cache"] = repeated(gpu, repeat, lambda i: env(work / f"empty-{i}"))
        rows["solve_gpu_on_device_warm_cache"] = repeated(on_device, repeat, lambda i: env(warm_cache))
        rows["solve_gpu_on_device_empty_cache"] = repeated(on_device, repeat, lambda i: env(work / f"dev-empty-{i}"))
        for name, code in STAGES.items():
            rows[name] = repeated([sys.executable, "-c", code], repeat)
    width = max(len(k) for k in rows)
    for name, r in rows.items():
        print(f"{name:{width}}  median {r['median_s']:.3f} s  (min {r['min_s']:.3f}, max {r['max_s']:.3f})")
    profile = import_profile()
    print("slowest imports of gpusolve.cli.commands (cumulative us):", ", ".join(f"{m} {us}" for m, us in profile[:5]))
    write_result("startup", device, python=sys.version.split()[0], repeat=repeat, instance="random n=10 d=10 seed 1",
                 rows=rows, import_profile=profile, bytecode=bytecode)


if __name__ == "__main__":
    main()
