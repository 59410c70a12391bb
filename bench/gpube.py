"""gpusolve next to the published GpuBE binary (cudaBE) on the journal's networks, same machine, same run.

Per instance (GpuBE section 8.1 generators and 404.wcsp), medians of --repeat fresh processes:
- GpuBE: `cudaBE --format=wcsp F --agt=gpuBE`, its own solve time ("wc Time") and process wall;
- gpusolve `solve F --device gpu`: process wall with an empty CuPy kernel cache (a new one per
  run, as on a new machine) and with a warm one, as users meet it (a small plan stays on the
  host, see --host-max), and with an empty cache forced onto the device (--host-max 0);
- gpusolve's elimination on the device in one warm process: the `eliminate` phase of the
  second and later solves (host_max=0);
- the same `solve F --device gpu` processes handed to a `gpusolve serve --device gpu` started
  once with an empty kernel cache (its warm-up, paid once, is reported apart): process wall.
Optima are compared: GpuBE's Util against ours. The binary is GitHub nandofioretto/GpuBE's
prebuilt `cudaBE` (--gpube PATH or $GPUBE); without it only gpusolve's side is measured.
Writes bench/results/gpube-<device>-<date>.json.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, SHARED, cache_bytecode, cpu_name, server, served_count, warm_bytecode, write_result

# (topology, variables, domain): the families of issue 11's table
FAMILIES = [("random", 10, 5), ("random", 10, 50), ("random", 12, 10), ("random", 14, 10), ("random", 16, 10),
            ("random", 18, 10), ("random", 20, 10), ("scalefree", 12, 10), ("scalefree", 20, 10),
            ("grid", 25, 10), ("grid", 49, 10)]
QUICK = [("random", 10, 5), ("grid", 25, 5)]


def timed(cmd, env=None, timeout=300):
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout)
    return time.perf_counter() - t, p


def gpube(binary: str, path: Path) -> dict:
    """cudaBE's last line: init ms, solve wall ms, simulated ms, GPU transfer ms, the optimum."""
    wall, p = timed([binary, "--format=wcsp", str(path), "--agt=gpuBE"])
    last = (p.stdout.strip().splitlines() or [""])[-1].split("\t")
    try:
        init_ms, solve_ms, _, _, util = (float(x) for x in last)
    except ValueError:
        return {"wall_s": wall, "error": (p.stdout + p.stderr).strip()[-200:] or f"exit {p.returncode}"}
    return {"wall_s": wall, "init_s": init_ms / 1e3, "solve_s": solve_ms / 1e3, "util": util}


def ours(path: Path, cache: Path | None, *extra, env=None) -> dict:
    """One fresh `gpusolve solve --device gpu` process: alone with kernel cache `cache`, or with
    `env` (a server's: it hands its work over)."""
    cmd = [sys.executable, "-m", "gpusolve", "solve", str(path), "--device", "gpu", "--json", *extra]
    wall, p = timed(cmd, env or dict(os.environ, CUPY_CACHE_DIR=str(cache), GPUSOLVE_NO_SERVE="1"))
    if p.returncode != 0:
        return {"wall_s": wall, "error": p.stderr.strip()[-200:]}
    r = json.loads(p.stdout)
    return {"wall_s": wall, "engine": r["engine"], "status": r["status"], "upper": r["upper_bound"],
            "eliminate_s": r["phases"].get("eliminate")}


def warm_eliminate(path: Path, repeat: int) -> dict:
    """The eliminate phase of solves 2..repeat+1 in this process, on the device."""
    from gpusolve import parsers
    from gpusolve.schedule.solve import Options, solve
    problem = parsers.read(path)
    runs = [solve(problem, Options(device="gpu", host_max=0)) for _ in range(repeat + 1)]
    times = [r.phases["eliminate"] for r in runs[1:]]
    return {"eliminate_s": statistics.median(times), "runs": times, "upper": runs[-1].upper_bound,
            "status": runs[-1].status, "engine": runs[-1].engine}


def median(rows, key):
    vals = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--gpube", default=os.environ.get("GPUBE"), help="path of GpuBE's cudaBE binary")
    ap.add_argument("--quick", action="store_true", help="two small networks, one run each")
    ap.add_argument("--only", nargs="+", default=None, metavar="TEXT",
                    help="only the instances whose file name contains one of these (e.g. grid 404)")
    args = ap.parse_args()
    repeat = 1 if args.quick else args.repeat
    work = Path(tempfile.mkdtemp(prefix="gpusolve-gpube-"))
    bytecode = cache_bytecode(work / "pycache")
    warm_bytecode("gpusolve.cli.commands", "gpusolve.schedule.solve", "cupy")
    files = []
    for topo, n, d in QUICK if args.quick else FAMILIES:
        path = work / f"{topo}-n{n}-d{d}-s{args.seed}.wcsp"
        subprocess.run([sys.executable, "-m", "gpusolve", "generate", topo, "-n", str(n), "-d", str(d),
                        "--seed", str(args.seed), "-o", str(path)], check=True, capture_output=True, cwd=ROOT)
        files.append(path)
    if not args.quick and (SHARED / "404.wcsp").exists():
        files.append(SHARED / "404.wcsp")
    if args.only:
        files = [f for f in files if any(t in f.name for t in args.only)]
    from common import gpu_name
    device = gpu_name()
    rows = []
    serve_env = {k: v for k, v in os.environ.items() if k != "GPUSOLVE_NO_SERVE"}
    serve_env.update(CUPY_CACHE_DIR=str(work / "serve-cache"), GPUSOLVE_SERVE_SOCKET=str(work / "serve.sock"),
                     PYTHONPATH=str(ROOT))
    log = work / "serve.log"
    with server("gpu", serve_env, log) as serve_warm_s:  # empty cache: a new machine
        print(f"gpusolve serve --device gpu: warm in {serve_warm_s:.2f} s with an empty kernel cache", flush=True)
        for path in files:
            rows.append(measure(path, args, repeat, work, serve_env, log))
            # written after every instance, so a run cut by its time limit keeps what it measured
            write_result("gpube", device, host=cpu_name(), repeat=repeat, seed=args.seed, gpube=bool(args.gpube),
                         serve_warm_s=serve_warm_s, bytecode=bytecode, complete=len(rows) == len(files), rows=rows)


def measure(path: Path, args, repeat: int, work: Path, serve_env: dict, log: Path) -> dict:
    """One instance's row: GpuBE, our fresh processes (empty, warm, forced onto the device, served), our warm process."""
    warm_cache = work / "warm-cache"
    row = {"instance": path.name}
    if args.gpube:
        runs = [gpube(args.gpube, path) for _ in range(repeat)]
        row["gpube"] = {"wall_s": median(runs, "wall_s"), "solve_s": median(runs, "solve_s"),
                        "util": runs[-1].get("util"), "error": runs[-1].get("error")}
    ours(path, warm_cache)  # fills the warm cache
    for name, cache, extra in (("empty", None, ()), ("warm", warm_cache, ()),
                               ("empty_on_device", None, ("--host-max", "0"))):
        if name == "empty_on_device" and row["empty"]["engine"] == "cupy":
            row[name] = row["empty"]  # the plan is on the device already
            continue
        runs = [ours(path, cache or work / f"empty-{path.stem}-{name}-{i}", *extra) for i in range(repeat)]
        row[name] = {"wall_s": median(runs, "wall_s"), "eliminate_s": median(runs, "eliminate_s"),
                     "engine": runs[-1].get("engine"), "upper": runs[-1].get("upper"),
                     "error": runs[-1].get("error")}
    before = served_count(log)
    runs = [ours(path, None, env=serve_env) for _ in range(repeat)]
    row["served"] = {"wall_s": median(runs, "wall_s"), "engine": runs[-1].get("engine"),
                     "upper": runs[-1].get("upper"), "error": runs[-1].get("error"),
                     "served": served_count(log) - before}
    row["warm_process"] = warm_eliminate(path, max(repeat, 2))
    g = row.get("gpube", {})
    agree = g.get("util") is not None and g["util"] == row["warm_process"]["upper"]
    row["same_optimum"] = agree if g else None
    gs = f"{g['solve_s'] * 1e3:7.1f} ms / {g['wall_s']:.2f} s" if g.get("solve_s") is not None else \
        f"{'-' if not g else 'error':>17}"
    print(f"{path.name:28} GpuBE {gs} | ours warm elim {row['warm_process']['eliminate_s'] * 1e3:7.1f} ms, "
          f"fresh empty {row['empty']['wall_s']:.2f} s ({row['empty']['engine']}), warm cache "
          f"{row['warm']['wall_s']:.2f} s, empty on device {row['empty_on_device']['wall_s']:.2f} s, "
          f"served {row['served']['wall_s']:.3f} s ({row['served']['engine']}, {row['served']['served']}/{repeat})"
          f" | optimum {row['warm_process']['upper']} vs {g.get('util')}", flush=True)
    return row


if __name__ == "__main__":
    main()
