"""Upper bounds by MBE-guided rollouts + parallel local search, against toulbar2's best upper bound.

Per instance: preprocess, MBE(z) (run_plan), rollouts from its messages,
then local_search for --seconds, once per --seeds, recording each better
cost with its time (from the start of local search; the MBE and rollout
times are reported apart). toulbar2 (pytoulbar2) then runs with a --toulbar2-seconds limit on
the same machine and its best upper bound and dual bound are recorded.
Instances: 404, CELAR6-SUB0, pedigree1, warehouse (shared instances, known
optima) and generated 10x10 grids with domain 10, seeds 1-5. --quick runs
one small grid for a second each. Writes JSON to bench/results/.

--sweeps N times N sweeps of the chains instead, on the CPU (NumPy) and, where there is one, the GPU
(CuPy), after one warm-up run of each (kernels compiled): seconds per sweep by instance size, the
figures local_search.DEVICE_MIN_ENTRIES is set from (it counts the tables' entries).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from common import cpu_name, write_result  # noqa: E402

from gpusolve import parsers  # noqa: E402
from gpusolve.parsers.wcsp import write_wcsp  # noqa: E402
from gpusolve.order import graph  # noqa: E402
from gpusolve.inference.eliminate import run_plan  # noqa: E402
from gpusolve.stop import Stop  # noqa: E402
from gpusolve.engines.numpy_engine import NumpyEngine  # noqa: E402
from gpusolve.generate import generate  # noqa: E402
from gpusolve.search.local import local_search, rollouts  # noqa: E402
from gpusolve.plan.buckets import build_plan  # noqa: E402
from gpusolve.consistency.preprocess import preprocess  # noqa: E402

KNOWN = {"404.wcsp": (114, 8), "CELAR6-SUB0.wcsp": (159, 4), "pedigree1.wcsp": (76911689, 14),
          "warehouse.wcsp": (328, 5)}  # known optimum, z of the guiding MBE run
GRID_Z = 7  # MBE(z=7) on a 10x10 grid with domain 10 runs in about a second on one core


def toulbar2(path: Path, seconds: int) -> dict:
    import pytoulbar2
    cfn = pytoulbar2.CFN(verbose=-1)
    cfn.Read(str(path))
    cfn.CFN.timer(seconds)
    t = time.perf_counter()
    cfn.Solve()
    return {"toulbar2_s": time.perf_counter() - t, "toulbar2_limit_s": seconds, "toulbar2_ub": cfn.GetUB(),
            "toulbar2_dual_bound": cfn.GetDDualBound()}


def run(name: str, problem, path: Path | None, z: int, seconds: float, tb2_seconds: int | None,
        n: int, seeds: list[int]) -> dict:
    t0 = time.perf_counter()
    reduced = preprocess(problem)
    p = reduced.problem
    plan = build_plan(p, graph.elimination_order(p), z)
    engine = NumpyEngine()
    lower, tables, messages = run_plan(p, plan, engine)
    rec = {"instance": name, "z": z, "mbe_lower_bound": p.to_file_value(lower),
           "mbe_s": time.perf_counter() - t0, "rollouts": 4 * n, "local_search_s": seconds, "chains": n, "runs": []}
    for seed in seeds:
        t1 = time.perf_counter()
        starts = rollouts(p, plan, engine, tables, messages, 4 * n, np.random.default_rng(seed))
        t2 = time.perf_counter()
        trace = []

        def improved(cost, assignment):
            trace.append([round(time.perf_counter() - t2, 3), p.to_file_value(cost)])

        best, cost = local_search(p, starts, Stop(t2 + seconds), np.random.default_rng(seed), n=n, on_improve=improved)
        assert best is None or problem.evaluate(reduced.expand(best)) == cost
        rec["runs"].append({"seed": seed, "rollouts_s": t2 - t1, "rollout_best": trace[0][1] if trace else None,
                            "upper_bound": p.to_file_value(cost), "trace": trace})
        print(f"{name} seed {seed}: MBE(z={z}) lb {rec['mbe_lower_bound']} in {rec['mbe_s']:.2f} s, {4 * n} "
              f"rollouts in {t2 - t1:.2f} s (best {rec['runs'][-1]['rollout_best']}); local search {seconds:g} s "
              f"-> {p.to_file_value(cost)} (last improvement at {trace[-1][0] if trace else '-'} s)", flush=True)
    if tb2_seconds:
        with tempfile.TemporaryDirectory() as tmp:
            if path is None:
                path = Path(tmp) / f"{name}.wcsp"
                write_wcsp(problem, path)
            rec.update(toulbar2(path, tb2_seconds))
        print(f"{name}: toulbar2 {tb2_seconds} s -> ub {rec['toulbar2_ub']}, dual bound "
              f"{rec['toulbar2_dual_bound']}", flush=True)
    return rec


def sweep_times(jobs, sweeps: int, n: int, devices: list[str]) -> list[dict]:
    """Seconds per sweep of `n` chains from random starts on each array module."""
    modules = {"cpu": np}
    if "gpu" in devices:  # CuPy as the GPU engine sets it up (its reductions, its compiler options)
        from gpusolve.engines.cupy_engine import CupyEngine
        modules["gpu"] = CupyEngine().xp
    out = []
    for name, problem, _, _, _ in jobs:
        p = preprocess(problem).problem
        rec = {"instance": name, "variables": len(p.domains), "domain_sum": int(sum(p.domains)),
               "table_entries": int(sum(f.entries for f in p.functions)), "chains": n, "sweeps": sweeps}
        for device in devices:
            xp = modules[device]
            for key in ("first_s", "sweep_s"):
                t = time.perf_counter()
                local_search(p, None, None, np.random.default_rng(0), xp=xp, n=n, max_sweeps=sweeps)
                if xp is not np:
                    xp.cuda.Device().synchronize()
                rec[f"{device}_{key}"] = (time.perf_counter() - t) / (1 if key == "first_s" else sweeps)
        print(name, {k: round(v, 5) if isinstance(v, float) else v for k, v in rec.items()}, flush=True)
        out.append(rec)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instances", type=Path, default=ROOT.parent / "shared" / "instances")
    ap.add_argument("--seconds", type=float, default=10.0, help="local search time per instance")
    ap.add_argument("--toulbar2-seconds", type=int, default=60, help="0: no toulbar2 run")
    ap.add_argument("--chains", type=int, default=256)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="one local search run each")
    ap.add_argument("--quick", action="store_true", help="one 5x5 grid, a second each")
    ap.add_argument("--sweeps", type=int, help="time this many sweeps per array module instead (no toulbar2)")
    args = ap.parse_args()
    jobs = []
    if args.sweeps and not args.quick:
        for name in ("CELAR6-SUB0.wcsp", "GEOM40_6.wcsp", "404.wcsp", "pedigree1.wcsp"):
            if (args.instances / name).is_file():
                jobs.append((name, parsers.read(args.instances / name), None, None, None))
        jobs += [(f"grid-n{n}-d10-s1", generate("grid", n, 10, 0.3, 0.5, 1), None, None, None)
                 for n in (64, 100, 400, 1600, 6400)]
    elif args.quick:
        args.seconds, args.toulbar2_seconds = 1.0, min(args.toulbar2_seconds, 1)
        jobs.append(("grid-n25-d10-s1", generate("grid", 25, 10, 0.3, 0.5, 1), None, 4, None))
    else:
        for name, (optimum, z) in KNOWN.items():
            if (args.instances / name).is_file():
                jobs.append((name, parsers.read(args.instances / name), args.instances / name, z, optimum))
        for s in range(1, 6):
            jobs.append((f"grid-n100-d10-s{s}", generate("grid", 100, 10, 0.3, 0.5, s), None, GRID_Z, None))
    if args.sweeps:
        from common import gpu_name, gpu_present
        devices = ["cpu"] + (["gpu"] if gpu_present() else [])
        records = sweep_times(jobs, args.sweeps, args.chains, devices)
        write_result("local_search-sweeps", gpu_name() if "gpu" in devices else cpu_name(), quick=args.quick,
                     numpy=np.__version__, instances=records)
        return
    records = []
    for name, problem, path, z, optimum in jobs:
        rec = run(name, problem, path, z, args.seconds, args.toulbar2_seconds, args.chains, args.seeds)
        rec["known_optimum"] = optimum
        records.append(rec)
    write_result("local_search", cpu_name(), quick=args.quick,
                 cpus=os.cpu_count(), numpy=np.__version__, seconds=args.seconds, instances=records)


if __name__ == "__main__":
    main()
