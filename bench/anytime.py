"""Anytime bounds and proofs: gpusolve against toulbar2 (pytoulbar2), side by side, in one run.

For every instance in ../shared/instances (or --instances) plus generated
wide networks (random n=40-100, 10x10 grids with domains 5 and 10, with and
without hard tuples), each solver runs in a fresh process under the same time
limit: `gpusolve solve FILE --json --time-limit T` (its trace of bound
improvements) and toulbar2 through pytoulbar2 with `timer(T)`, its verbose
lines parsed for the same trace ("New solution", "Optimality gap", "Optimum").
Recorded per instance and solver: time to the first lower and upper bound,
time to the best incumbent, the final bounds, whether and when the optimum was
proven, and for gpusolve the search statistics (OR nodes, nodes per second)
and the share of its time spent on the GPU engine. `--plot` draws lower and
upper bound against time for each instance with a gap, both solvers on one
picture (needs the `plot` extra: matplotlib), from the JSON this script
wrote. `--files` adds instance files (.xz read through), `--repeat N` runs
each instance N times (the anytime path varies from run to run: scen07's final
upper bound); pin cores from outside (`taskset -c 0-4 python bench/anytime.py`).
Writes bench/results/anytime-<device>-<date>.json.
"""
from __future__ import annotations

import argparse
import json
import lzma
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from common import SHARED, cpu_name, gpu_name, write_result  # noqa: E402

from gpusolve.generate import generate  # noqa: E402
from gpusolve.parsers.wcsp import write_wcsp  # noqa: E402

# The wide networks: (topology, n, d, p1, p2, seed); p2 = 0: no hard tuples.
GENERATED = [("random", 40, 5, 0.15, 0.3, 1), ("random", 60, 4, 0.1, 0.3, 1), ("random", 100, 3, 0.05, 0.3, 1),
             ("grid", 100, 5, 0.3, 0.0, 1), ("grid", 100, 5, 0.3, 0.5, 1),
             ("grid", 100, 10, 0.3, 0.0, 1), ("grid", 100, 10, 0.3, 0.5, 1)]
QUICK = [("grid", 16, 3, 0.3, 0.3, 1), ("random", 12, 3, 0.3, 0.3, 1)]
TB2_SCRIPT = """
import sys, pytoulbar2
cfn = pytoulbar2.CFN(verbose=0)
try:
    cfn.Read(sys.argv[1])
    cfn.CFN.timer(int(sys.argv[2]))
    cfn.Solve()
except Exception as e:  # Contradiction: proven infeasible while reading
    print("EXCEPTION", type(e).__name__, flush=True)
print("DUAL", cfn.GetDDualBound(), flush=True)
"""
_NUM = r"(-?[0-9.]+(?:e[+-]?[0-9]+)?)"


def optima() -> dict[str, float]:
    path = SHARED / "optima.csv"
    if not path.exists():
        return {}
    rows = [line.split(",") for line in path.read_text().splitlines()[1:] if line.strip()]
    return {r[0]: float(r[1]) for r in rows}


def run_gpusolve(path: Path, limit: float, device: str) -> dict:
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "gpusolve", "solve", str(path), "--json", "--time-limit",
                           str(limit), "--device", device], capture_output=True, text=True, timeout=limit + 120)
    wall = time.perf_counter() - t
    try:
        r = json.loads(proc.stdout)
    except json.JSONDecodeError:
        return {"error": proc.stderr.strip()[-300:], "wall_s": wall}
    trace = r.get("trace") or []
    ups = [e for e in trace if e[2] is not None]
    lows = [e for e in trace if e[1] is not None]
    gpu = r.get("engine") == "cupy"
    work = sum(v for k, v in r.get("phases", {}).items() if k in ("eliminate", "gpu_startup"))
    return {"status": r.get("status"), "lower": r.get("lower_bound"), "upper": r.get("upper_bound"),
            "wall_s": wall, "time_s": r.get("time_s"), "engine": r.get("engine"),
            "first_lower_s": lows[0][0] if lows else None, "first_upper_s": ups[0][0] if ups else None,
            "best_upper_s": next((e[0] for e in ups if e[2] == ups[-1][2]), None) if ups else None,
            "proof_s": trace[-1][0] if r.get("status") in ("optimal", "infeasible") and trace else None,
            "search": r.get("search"), "phases": r.get("phases"), "schedule": r.get("schedule"),
            "gpu_share": (work / r["time_s"]) if gpu and r.get("time_s") else 0.0,
            "trace": [[e[0], e[1], e[2]] for e in trace], "message": r.get("message")}


def run_toulbar2(path: Path, limit: float) -> dict:
    """pytoulbar2 in a fresh process; its verbose lines become a trace of (time, lower, upper)."""
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", TB2_SCRIPT, str(path), str(int(max(limit, 1)))],
                          capture_output=True, text=True, timeout=limit + 120)
    wall = time.perf_counter() - t
    trace, lower, upper, proven, proof_s = [], None, None, False, None
    for line in proc.stdout.splitlines():
        if m := re.match(rf"Initial lower and upper bounds: \[{_NUM}, {_NUM}\]", line):
            lower = float(m.group(1))
            trace.append([0.0, lower, None])
        elif m := re.match(rf"New solution: {_NUM} .*?{_NUM} seconds\)", line):
            upper = float(m.group(1))
            trace.append([float(m.group(2)), lower, upper])
        elif m := re.match(rf"Optimality gap: \[{_NUM}, {_NUM}\] .*?{_NUM} seconds\)", line):
            lower = float(m.group(1))
            trace.append([float(m.group(3)), lower, upper])
        elif m := re.match(rf"Optimum: {_NUM} .*?and {_NUM} seconds", line):
            upper = lower = float(m.group(1))
            proven, proof_s = True, float(m.group(2))
            trace.append([proof_s, lower, upper])
        elif line.startswith("No solution") or line.startswith("EXCEPTION"):
            proven, proof_s = True, wall
        elif m := re.match(rf"DUAL {_NUM}", line):
            lower = max(lower or float("-inf"), float(m.group(1))) if not proven else lower
    ups = [e for e in trace if e[2] is not None]
    return {"status": "optimal" if proven and upper is not None else "infeasible" if proven else "bounded",
            "lower": lower, "upper": upper, "wall_s": wall, "proof_s": proof_s,
            "first_upper_s": ups[0][0] if ups else None,
            "best_upper_s": next((e[0] for e in ups if e[2] == ups[-1][2]), None) if ups else None,
            "trace": trace}


def instances(args, tmp: Path) -> list[tuple[str, Path]]:
    out = []
    if not args.quick and not args.files and args.instances.is_dir():
        known = optima()
        out += [(name, args.instances / name) for name in sorted(known) if (args.instances / name).exists()]
    for topology, n, d, p1, p2, seed in ([] if args.files else QUICK if args.quick else GENERATED) + args.extra:
        path = tmp / f"{topology}-n{n}-d{d}-p{p2}-s{seed}.wcsp"
        write_wcsp(generate(topology, n, d, p1, p2, seed), path)
        out.append((path.name, path))
    for given in args.files:
        if given.suffix == ".xz":  # toulbar2 reads .xz; gpusolve does too, pytoulbar2 by its own name only
            path = tmp / given.stem
            path.write_bytes(lzma.decompress(given.read_bytes()))
        else:
            path = given
        out.append((path.name, path))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--device", default="auto", choices=("auto", "cpu", "gpu"))
    ap.add_argument("--instances", type=Path, default=SHARED)
    ap.add_argument("--grids", type=int, default=0, help="also grid -n 100 -d 10, seeds 1..GRIDS")
    ap.add_argument("--only", default=None, help="substring: run only matching instances")
    ap.add_argument("--no-toulbar2", action="store_true")
    ap.add_argument("--quick", action="store_true", help="two tiny generated networks, 2 s limit")
    ap.add_argument("--parallel", action="store_true",
                    help="run the two solvers at the same time (one core each; needs two free cores)")
    ap.add_argument("--plot", type=Path, default=None, help="draw the traces of this result JSON, then stop")
    ap.add_argument("--name", default="anytime", help="result file prefix (several runs on one day)")
    ap.add_argument("--files", type=Path, nargs="*", default=[],
                    help="these instance files only (with --instances' optima where named there)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per instance (rows carry their run)")
    ap.add_argument("--table", type=Path, default=None,
                    help="print the comparison table of this result JSON (bounds at 10 s and 60 s), then stop")
    args = ap.parse_args()
    if args.plot:
        plot(args.plot)
        return
    if args.table:
        table(json.loads(args.table.read_text()))
        return
    if args.quick:
        args.time_limit = 2.0
    args.extra = [("grid", 100, 10, 0.3, 0.5, s) for s in range(1, args.grids + 1) if s != 1 or args.quick]
    known = optima()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in instances(args, Path(tmp)):
            if args.only and args.only not in name:
                continue
            for run in range(1, args.repeat + 1):
                row = {"instance": name, "optimum": known.get(name), "run": run}
                with ThreadPoolExecutor(2 if args.parallel else 1) as pool:  # two processes, one core each
                    ours = pool.submit(run_gpusolve, path, args.time_limit, args.device)
                    if not args.no_toulbar2 and path.suffix == ".wcsp":
                        row["toulbar2"] = pool.submit(run_toulbar2, path, args.time_limit).result()
                    row["gpusolve"] = ours.result()
                rows.append(row)
                print(line(row), flush=True)
    device = gpu_name() if args.device == "gpu" else cpu_name()
    write_result(args.name, device, device_kind=args.device, time_limit_s=args.time_limit,
                 solvers_in_parallel=args.parallel, repeat=args.repeat, instances=rows)


def line(row: dict) -> str:
    def part(r):
        if r is None:
            return "-"
        if "error" in r:
            return "error: " + r["error"]
        s = r.get("search") or {}
        proof = f", proof {r['proof_s']:.2f} s" if r.get("proof_s") is not None else ""
        n, rate = searched(s)
        nodes = f", {n:,} nodes at {rate:,.0f}/s" if n is not None else ""
        return f"{r['status']} [{r['lower']}, {r['upper']}]{proof}{nodes}"
    run = f" run {row['run']}" if row.get("run", 1) > 1 else ""
    return f"{row['instance']:34s}{run} opt {row['optimum']}: gpusolve {part(row['gpusolve'])} | " \
           f"toulbar2 {part(row.get('toulbar2'))}"


def searched(s: dict) -> tuple:
    """(nodes, nodes per second) of a result's search: the AND/OR search's, or the compiled search's
    where it ran alone (its proof came first)."""
    s = s if "nodes" in s else s.get("dfbb") or {}
    return s.get("nodes"), s.get("nodes_per_s")


def held_at(trace: list, t: float, k: int):
    """The bound (k = 1 lower, 2 upper) a trace held at time t."""
    held = None
    for e in trace:
        if e[0] <= t and e[k] is not None:
            held = e[k]
    return held


def table(data: dict) -> None:
    """gpusolve's and toulbar2's time to the first and to the best upper bound, bounds at 10 s and 60 s
    and at the end, and the time of proof."""
    cols = ("instance", "gpusolve first ub s", "best ub s", "[lb, ub] @10s", "@60s", "end", "proof s", "nodes/s",
            "toulbar2 first ub s", "best ub s", "[lb, ub] @10s", "@60s", "end", "proof s")
    print(" | ".join(cols))
    for r in data["instances"]:
        g, t = r["gpusolve"], r.get("toulbar2") or {}
        cells = [r["instance"]]
        for solver in (g, t):
            tr = solver.get("trace") or []
            cells += [_seconds(solver.get("first_upper_s")), _seconds(solver.get("best_upper_s"))]
            cells += [f"[{held_at(tr, 10, 1)}, {held_at(tr, 10, 2)}]", f"[{held_at(tr, 60, 1)}, {held_at(tr, 60, 2)}]",
                      f"[{solver.get('lower')}, {solver.get('upper')}] {solver.get('status', '-')}",
                      _seconds(solver.get("proof_s"))]
            if solver is g:
                rate = searched(g.get("search") or {})[1]
                cells.append(f"{rate:,.0f}" if rate is not None else "-")
        print(" | ".join(cells))


def _seconds(t) -> str:
    return "-" if t is None else f"{t:.2f}"


def plot(path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    data = json.loads(path.read_text())
    rows = [r for r in data["instances"] if r["gpusolve"].get("status") == "bounded"
            or (r.get("toulbar2") or {}).get("status") == "bounded"]
    if not rows:
        print("no instance with a gap: nothing to draw")
        return
    fig, axes = plt.subplots(len(rows), 1, figsize=(8, 3 * len(rows)), squeeze=False)
    for ax, r in zip(axes[:, 0], rows):
        for solver, colour in (("gpusolve", "tab:blue"), ("toulbar2", "tab:orange")):
            trace = (r.get(solver) or {}).get("trace") or []
            end = data["time_limit_s"]
            for k, style in ((1, "--"), (2, "-")):
                pts = [(e[0], e[k]) for e in trace if e[k] is not None]
                if pts:
                    xs, ys = zip(*(pts + [(end, pts[-1][1])]))
                    ax.step([max(x, 1e-3) for x in xs], ys, where="post", linestyle=style, color=colour,
                            label=f"{solver} {'lower' if k == 1 else 'upper'}")
        if r.get("optimum") is not None:
            ax.axhline(r["optimum"], color="grey", linewidth=0.8, label="known optimum")
        ax.set_xscale("log")
        ax.set_title(r["instance"])
        ax.set_xlabel("seconds")
        ax.legend(fontsize=7)
    fig.tight_layout()
    out = path.with_suffix(".png")
    fig.savefig(out, dpi=90)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
