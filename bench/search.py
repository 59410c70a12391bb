"""Search speed: the compiled depth-first core, the whole solve, and toulbar2, side by side in one run.

For each instance (CELAR6-SUB0 from ../shared/instances when present; CELAR6-SUB1 and
CELAR7-SUB0, toulbar2's cover/ files, from a copy of its repository ($GPUSOLVE_TOULBAR2,
as bench/toulbar2_files.py finds it) when present; generated RLFAP-like networks, generated grids, a generated permutation problem whose hard
AllDifferent stays whole; --only picks by name), fresh processes under the same time
limit, each run --repeat times (the medians printed, every run recorded):
- `core`: the compiled search with EDAC* alone (gpusolve.search.dfbb) in its
  default order, HBFS, no upper bound given, on the preprocessed problem as
  solve's schedule gives it (arc consistency, functional variables eliminated): nodes, nodes per CPU-second (the
  first slice, which loads or compiles the core, left out), nodes and seconds
  to the proof, the global lower bound reached;
- `dfbb`: the same core in depth-first order;
- `solve`: `gpusolve solve FILE --json --time-limit T --device cpu`, as a user
  runs it: status, bounds, seconds;
- `toulbar2`: pytoulbar2 with default options: optimum, nodes, seconds (CPU and wall).
CPU seconds are those of the thread that searches (time.thread_time), for the core and for toulbar2
alike: the process's would also count OpenBLAS's worker threads, which numpy's import starts and which
spin for a while before they sleep (CELAR7-SUB0's 223 nodes: 0.0074 s of the search's thread against
0.0103-0.0154 s of the process).
Writes bench/results/<--name, default search>-<cpu>-<date>.json.

RLFAP-like networks imitate the CELAR radio link problems: links in duplex
pairs whose frequencies must differ by a fixed gap (hard), interference between
nearby links penalised when frequencies are closer than a separation (costs 1
to 1000 or hard), and a mobility cost for leaving a preferred frequency.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from common import SHARED, cpu_name, write_result  # noqa: E402
from toulbar2_files import toulbar2_root  # noqa: E402

import numpy as np  # noqa: E402

from gpusolve.build import Model  # noqa: E402
from gpusolve.model.problem import FORBIDDEN, AllDifferent, CostFunction, Problem, Variable, finalize_integer  # noqa: E402
from gpusolve.generate import generate  # noqa: E402
from gpusolve.parsers.wcsp import write_wcsp  # noqa: E402


def rlfap(links: int, frequencies: int, seed: int, density: int = 4) -> Model:
    """An RLFAP-like network of `links` links (even), frequencies spaced by 14 as CELAR's are, about
    `density` interference constraints per link."""
    rng = np.random.default_rng(seed)
    values = 14 * np.arange(frequencies)
    m = Model(f"rlfap-{links}-{frequencies}-s{seed}")
    for i in range(links):
        m.add_variable(f"f{i}", [str(v) for v in values])
    gap = 14 * (frequencies // 2)
    duplex = np.where(np.abs(values[:, None] - values[None, :]) == gap, 0, np.inf)
    for i in range(0, links, 2):
        m.add_function([f"f{i}", f"f{i + 1}"], duplex)
    for _ in range(density * links):
        i, j = (int(x) for x in rng.choice(links, 2, replace=False))
        if i // 2 == j // 2:
            continue
        separation = 14 * int(rng.integers(1, 4))
        cost = float(rng.choice([1, 10, 100, 1000, np.inf], p=[0.3, 0.3, 0.2, 0.1, 0.1]))
        m.add_function([f"f{i}", f"f{j}"], np.where(np.abs(values[:, None] - values[None, :]) < separation,
                                                    cost, 0.0))
    for i in rng.choice(links, links // 3, replace=False):
        preferred = int(rng.integers(frequencies))
        m.add_function([f"f{int(i)}"], np.where(np.arange(frequencies) == preferred, 0, int(rng.integers(1, 50))))
    return m


def permutation(n: int, seed: int, pairs: int = 150) -> Problem:
    """n variables of domain n under one hard AllDifferent (a permutation: at n = 100 its 4,950 tables of
    n x n exceed the 32M entries decomposed, so it stays whole), a random cost per value, and `pairs`
    penalties for two variables within 5 of each other."""
    rng = np.random.default_rng(seed)
    functions = [CostFunction((i,), rng.integers(0, 100, n).astype(np.int64)) for i in range(n)]
    near = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :]) < 5
    for _ in range(pairs):
        i, j = (int(x) for x in rng.choice(n, 2, replace=False))
        functions.append(CostFunction((i, j), np.where(near, int(rng.integers(50, 200)), 0).astype(np.int64)))
    alldiff = AllDifferent(tuple(range(n)), tuple(np.arange(n, dtype=np.int64) for _ in range(n)), FORBIDDEN)
    return finalize_integer(Problem(f"permutation-{n}-s{seed}", [Variable(f"x{i}", n) for i in range(n)],
                                    functions, globals=[alldiff]), None)


RLFAP_FILES = ("CELAR6-SUB1.wcsp", "CELAR7-SUB0.wcsp")  # optima 2669 and 10310 (toulbar2's .ub, our proofs)


def instances(folder: Path, quick: bool) -> list[Path]:
    out = []
    celar = SHARED / "CELAR6-SUB0.wcsp"
    if celar.is_file() and not quick:
        out.append(celar)
    if not quick:
        out += [p for p in (toulbar2_root() / "cover" / f for f in RLFAP_FILES) if p.is_file()]
    for links, freq, seed, density in ([(8, 8, 1, 2)] if quick else
                                       [(30, 16, 1, 4), (40, 20, 3, 6), (60, 24, 4, 5), (80, 24, 5, 6)]):
        path = folder / f"rlfap-{links}-{freq}-s{seed}-x{density}.wcsp"
        rlfap(links, freq, seed, density).write(path)
        out.append(path)
    for n, d, seed in ([(16, 4, 1)] if quick else [(49, 5, 1), (64, 5, 2)]):
        path = folder / f"grid-n{n}-d{d}-s{seed}.wcsp"
        write_wcsp(generate("grid", n, d, 0.3, 0.3, seed), path)
        out.append(path)
    if not quick:
        path = folder / "permutation-100-s7.wcsp"
        write_wcsp(permutation(100, 7), path)
        out.append(path)
    return out


def core(path: str, limit: float, best_first: bool = True) -> dict:
    """The compiled core alone on `path`, in this process, after preprocessing (as in solve)."""
    from gpusolve import parsers
    from gpusolve.consistency.preprocess import preprocess
    from gpusolve.search.dfbb import COMPLETE, DepthFirst
    problem = preprocess(parsers.read(path)).problem
    search = DepthFirst(problem, best_first=best_first)
    t0 = time.perf_counter()
    search.run(0)  # loads (or compiles) the core, propagates the root
    load = time.perf_counter() - t0
    t1, c1 = time.perf_counter(), time.thread_time()
    while time.perf_counter() - t1 < limit and search.run(1 << 13) != COMPLETE:
        pass
    took, cpu = time.perf_counter() - t1, time.thread_time() - c1
    upper = problem.to_file_value(search.ub) if search.ub < problem.top else None
    return {"complete": search.complete, "upper": upper, "lower": problem.to_file_value(search.lower_bound),
            "nodes": search.nodes, "search_s": took, "search_cpu_s": cpu,
            "nodes_per_cpu_s": search.nodes / cpu if cpu else None, "load_s": load}


def toulbar2(path: str, limit: float) -> dict:
    import pytoulbar2
    cfn = pytoulbar2.CFN(verbose=-1)
    t, c = time.perf_counter(), time.thread_time()
    try:
        cfn.Read(path)
        cfn.CFN.timer(max(int(limit), 1))  # whole seconds, as bench/anytime.py gives it
        res = cfn.Solve()
    except pytoulbar2.pytb2.Contradiction:
        res = None
    took, cpu = time.perf_counter() - t, time.thread_time() - c
    return {"optimum": None if res is None else res[1], "nodes": cfn.GetNbNodes(), "search_s": took,
            "search_cpu_s": cpu, "nodes_per_cpu_s": cfn.GetNbNodes() / cpu if cpu else None}


def child(kind: str, path: Path, limit: float) -> dict:
    """One measurement in a fresh process: its JSON line, or the failure."""
    t = time.perf_counter()
    if kind == "solve":
        cmd = [sys.executable, "-m", "gpusolve", "solve", str(path), "--json", "--device", "cpu",
               "--time-limit", str(limit)]
    else:
        cmd = [sys.executable, __file__, "--child", kind, str(path), str(limit)]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=limit * 3 + 120)
    wall = time.perf_counter() - t
    if p.returncode != 0:
        return {"error": p.stderr.strip().splitlines()[-1:] or [f"exit {p.returncode}"], "wall_s": wall}
    rec = json.loads(p.stdout.strip().splitlines()[-1])
    if kind == "solve":
        rec = {"status": rec["status"], "lower": rec["lower_bound"], "upper": rec["upper_bound"],
               "time_s": rec["time_s"], "search": rec["search"]}
    return {**rec, "wall_s": wall}


def summary(kind: str, runs: list[dict]) -> str:
    """One measurement's medians over its runs: the proof (or the bounds reached), nodes, CPU time, rate."""
    def median(key):
        values = [r[key] for r in runs if r.get(key) is not None]
        return statistics.median(values) if values else 0

    last = runs[-1]
    if "error" in last:
        return f"{kind}: {last['error']}"
    found = (f"{last['optimum']}" if kind == "toulbar2" else
             f"{'proof' if last['complete'] else 'open'} [{last['lower']}, {last['upper']}]")
    return (f"{kind}: {found} {last['nodes']} nodes {median('search_cpu_s'):.3f} CPU-s "
            f"({median('nodes_per_cpu_s'):,.0f}/CPU-s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--quick", action="store_true", help="one small RLFAP-like network and one grid, 5 s")
    ap.add_argument("--no-toulbar2", action="store_true")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each measurement, medians printed")
    ap.add_argument("--only", default=None, help="substring: run only matching instances")
    ap.add_argument("--name", default="search", help="result file prefix (several runs on one day)")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        kind, path, limit = args.child
        measure = {"core": core, "dfbb": lambda p, t: core(p, t, best_first=False), "toulbar2": toulbar2}[kind]
        print(json.dumps(measure(path, float(limit))))
        return
    limit = 5.0 if args.quick else args.time_limit
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for path in instances(Path(tmp), args.quick):
            if args.only and args.only not in path.name:
                continue
            kinds = ["core", "dfbb"] + ([] if args.no_toulbar2 else ["toulbar2"])
            row = {"instance": path.name, **{k: [child(k, path, limit) for _ in range(args.repeat)] for k in kinds},
                   "solve": child("solve", path, limit)}
            rows.append(row)
            s = row["solve"]
            print(f"{path.name:28} " + " | ".join(summary(k, row[k]) for k in kinds)
                  + f" | solve: {s.get('status')} [{s.get('lower')}, {s.get('upper')}] {s.get('time_s', 0):.2f} s",
                  flush=True)
    write_result(args.name, cpu_name(), time_limit=limit, rows=rows)


if __name__ == "__main__":
    main()
