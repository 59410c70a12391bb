"""Scale-out over Dask workers: batch throughput and AND/OR search time with 1, 2, ... workers.

Batch: --instances networks from `gpusolve generate` solved by `gpusolve
batch --workers K` (one worker per GPU with --device gpu), instances per
second for each K, cluster start-up included and also given apart. Search:
one network solved with `--z` (so the schedule ends in AND/OR search), the
serial search and the search with its subproblems on K workers; seconds of
the search phase (cluster start-up apart) and OR nodes. Every K must give the
same bounds as the serial run. Writes bench/results/scaleout-<device>-<date>.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from common import cpu_name, gpu_name, write_result  # noqa: E402
from gpusolve.cli.batch import batch_record  # noqa: E402
from gpusolve.generate import generate  # noqa: E402
from gpusolve.cli.batch import batch_on_dask  # noqa: E402
from gpusolve.schedule.solve import Options, solve  # noqa: E402
from gpusolve.parsers.wcsp import write_wcsp  # noqa: E402


def bench_batch(args, folder: Path) -> list[dict]:
    files = []
    for seed in range(args.instances):
        path = folder / f"{args.topology}-{seed}.wcsp"
        write_wcsp(generate(args.topology, args.n, args.d, args.p1, args.p2, seed), path)
        files.append(str(path))
    options = Options(device=args.device, time_limit=args.time_limit)
    rows, reference = [], None
    for k in args.workers:
        out = folder / f"out-{k}.jsonl"
        t = time.perf_counter()
        with open(out, "a", encoding="utf-8") as sink:
            records = batch_on_dask(files, options, {}, sink, None, k, batch_record)
        wall = time.perf_counter() - t
        bounds = sorted((r["file"], r["status"], r.get("lower_bound"), r.get("upper_bound")) for r in records)
        reference = reference or bounds
        rows.append({"workers": k, "instances": len(files), "wall_s": wall, "per_s": len(files) / wall,
                     "solve_s": sum(r.get("time_s") or 0.0 for r in records), "same_bounds": bounds == reference,
                     "engines": sorted({r.get("engine", "?") for r in records})})
        print(f"batch  workers {k}: {len(files)} instances in {wall:.2f} s ({len(files) / wall:.2f}/s; "
              f"solve time {rows[-1]['solve_s']:.2f} s in all; engines {', '.join(rows[-1]['engines'])})"
              + ("" if rows[-1]["same_bounds"] else "  BOUNDS DIFFER"), flush=True)
    return rows


def bench_search(args) -> list[dict]:
    problem = generate("grid", args.search_n, args.search_d, 0.3, args.search_p2, 1)
    rows = []
    for k in [None, *args.workers]:
        r = solve(problem, Options(z=args.search_z, device="cpu", workers=k))
        s = r.search or {}
        rows.append({"workers": k, "status": r.status, "lower_bound": r.lower_bound, "upper_bound": r.upper_bound,
                     "search_s": s.get("time_s"), "cluster_s": s.get("cluster_s", 0.0), "nodes": s.get("nodes"),
                     "time_s": r.time_s})
        print(f"search workers {k or 'serial'}: {r.status} [{r.lower_bound}, {r.upper_bound}], search "
              f"{s.get('time_s', 0):.2f} s (cluster start {s.get('cluster_s', 0.0):.2f} s), "
              f"{s.get('nodes', 0):,} OR nodes", flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="four tiny instances, a tiny search, 1 and 2 workers")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--device", default="auto", choices=("auto", "cpu", "gpu"))
    ap.add_argument("--instances", type=int, default=40)
    ap.add_argument("--topology", default="random", choices=("random", "scalefree", "grid"))
    ap.add_argument("-n", type=int, default=20)
    ap.add_argument("-d", type=int, default=10)
    ap.add_argument("--p1", type=float, default=0.3)
    ap.add_argument("--p2", type=float, default=0.5)
    ap.add_argument("--time-limit", type=float, default=None)
    ap.add_argument("--search-n", type=int, default=81,
                    help="grid of this many variables for the search (81: about 20 s serial on one core)")
    ap.add_argument("--search-d", type=int, default=5)
    ap.add_argument("--search-p2", type=float, default=0.0)
    ap.add_argument("--search-z", type=int, default=4)
    args = ap.parse_args()
    if args.quick:
        args.instances, args.n, args.d, args.topology = 4, 8, 3, "random"
        args.search_n, args.search_d, args.search_z = 16, 4, 2
    with tempfile.TemporaryDirectory() as tmp:
        batch = bench_batch(args, Path(tmp))
    search = bench_search(args)
    device = gpu_name() if any("cupy" in r["engines"] for r in batch) else cpu_name()
    write_result("scaleout", device, args=vars(args), batch=batch, search=search)
    if not all(r["same_bounds"] for r in batch) or len({(r["lower_bound"], r["upper_bound"]) for r in search}) > 1:
        print(json.dumps({"batch": batch, "search": search}))
        sys.exit(1)


if __name__ == "__main__":
    main()
