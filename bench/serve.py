"""A shell loop of fresh `gpusolve solve` processes on a tiny instance, with and without `gpusolve serve`.

For each device (cpu; gpu when CuPy sees one, forced onto the device with --host-max 0) it
times --repeat fresh processes solving alone (GPUSOLVE_NO_SERVE=1), then starts a server warmed
for that device and times the same processes handed to it. Prints median, min and max seconds
per process and the server's warm-up; writes bench/results/serve-<device>-<date>.json.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from common import (ROOT, cpu_name, gpu_present, process_wall as wall, server, served_count, summary, tiny_instance,
                    write_result)

SOLVE = [sys.executable, "-m", "gpusolve"]


def served(device: str, cmd, repeat: int, env, folder: Path) -> tuple[dict, float]:
    """Per-process times of `cmd` handed to a server warmed for `device`, and the server's warm-up seconds."""
    log = folder / f"serve-{device}.log"
    with server(device, env, log) as warm_s:
        times = [wall(cmd, env) for _ in range(repeat)]
        if served_count(log) != repeat:
            raise RuntimeError(f"not every solve was served:\n{log.read_text()}")
    return summary(times), warm_s


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="two runs of each (checks the script runs)")
    args = ap.parse_args()
    repeat = 2 if args.quick else args.repeat
    folder = Path(tempfile.mkdtemp(prefix="gpusolve-serve-bench-"))
    env = {k: v for k, v in os.environ.items() if k != "GPUSOLVE_NO_SERVE"}
    env.update(GPUSOLVE_SERVE_SOCKET=str(folder / "s.sock"), PYTHONPATH=str(ROOT))
    tiny = tiny_instance(folder, env)
    commands = {"cpu": SOLVE + ["solve", str(tiny), "--device", "cpu", "--json"]}
    device = cpu_name()
    if gpu_present():
        from common import gpu_name
        device = gpu_name()
        commands["gpu"] = SOLVE + ["solve", str(tiny), "--device", "gpu", "--host-max", "0", "--json"]
    rows = {}
    for name, cmd in commands.items():
        local = summary([wall(cmd, dict(env, GPUSOLVE_NO_SERVE="1")) for _ in range(repeat)])
        handed, warm_s = served(name, cmd, repeat, env, folder)
        rows[name] = {"local": local, "served": handed, "server_warm_s": warm_s}
        for how, r in (("local", local), ("served", handed)):
            print(f"{name} {how:6}  median {r['median_s']:.3f} s per process  (min {r['min_s']:.3f}, "
                  f"max {r['max_s']:.3f})")
        print(f"{name} server warm-up {warm_s:.2f} s, paid once")
    write_result("serve", device, python=sys.version.split()[0], repeat=repeat, instance="random n=10 d=10 seed 1",
                 rows=rows)


if __name__ == "__main__":
    main()
