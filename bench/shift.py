"""Mini-bucket lower bounds with and without cost shifting (FGLP, MBE moment matching), CPU.

For each shared instance (../shared/instances, skipped when absent) and a few
generated networks, at several z: plain MBE(z), the FGLP constant, MBE(z) on
the FGLP problem, MBE-MM, MBE-MM on the FGLP problem, and JGLP (cost
shifting on the join graph) started from the plain MBE run; bound (internal
cost: minimised, offset excluded; for .uai MPE, -log10 p) and seconds each
(JGLP's: its own, after the run it starts from).
Plans whose joint tables exceed --max-joint entries are skipped. Then PR on
the shared .uai files: lower bounds on -log10 Z by one sum and K-1 maxima
per bucket against weighted mini-buckets (WMB). Writes
bench/results/shift-<device>-<date>.json. Column `schedule`: the bound the anytime
schedule holds at that z (plain MBE; where FGLP raised the bound, also FGLP+MM and JGLP from
the tighter of the two runs; the largest).
"""
from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from gpusolve import parsers  # noqa: E402
from common import SHARED, cpu_name, write_result  # noqa: E402
from gpusolve.order import graph  # noqa: E402
from gpusolve.inference.eliminate import run_plan  # noqa: E402
from gpusolve.engines.numpy_engine import NumpyEngine  # noqa: E402
from gpusolve.generate import generate  # noqa: E402
from gpusolve.plan.buckets import build_plan  # noqa: E402
from gpusolve.consistency.preprocess import preprocess  # noqa: E402
from gpusolve.inference.probabilistic import partition_bounds, weighted_bound  # noqa: E402
from gpusolve.inference.shift import fglp, jglp  # noqa: E402

VARIANTS = ("plain", "fglp", "mm", "fglp+mm")
COLUMNS = VARIANTS + ("jglp", "schedule")


def instances(quick: bool, only: str | None = None):
    """(name, problem, file optimum or None) of every shared instance with an optimum and a few generated
    networks; `only`: those whose name contains it."""
    for name, problem, optimum in _all_instances(quick):
        if only is None or only in name:
            yield name, problem, optimum


def _all_instances(quick: bool):
    known = {}
    if SHARED.is_dir() and not quick:
        with open(SHARED / "optima.csv") as f:
            known = {r["file"]: float(r["optimum"]) for r in csv.DictReader(f)}
        for name in sorted(known):
            if name.endswith((".wcsp", ".uai", ".xml")):
                yield name, parsers.read(SHARED / name), known[name]
    nets = [("grid", 16, 5, 0.3, 0.5)] if quick else [
        ("grid", 100, 10, 0.3, 0.5), ("random", 40, 10, 0.1, 0.5), ("random", 60, 5, 0.08, 0.2)]
    for topology, n, d, p1, p2 in nets:
        yield f"{topology}-n{n}-d{d}-p{p1}-{p2}-s1", generate(topology, n, d, p1, p2, seed=1), None


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def run(problem, order, z, match):
    """An MBE(z) run: (bound or None where forbidden, what JGLP needs to start from it)."""
    plan, matched = build_plan(problem, order, z), {}
    value, tables, messages = run_plan(problem, plan, NumpyEngine(), match=match, matched=matched)
    return as_bound(problem, value), (problem, plan, NumpyEngine(), tables, messages, matched)


def as_bound(problem, value):
    return float(value) if not problem.is_forbidden(value) else None


def internal(problem, file_value):
    return None if file_value is None else problem.sense * file_value - float(problem.offset)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one tiny grid, a few seconds")
    ap.add_argument("--zs", type=int, default=7, help="z values per instance, from the largest arity up")
    ap.add_argument("--max-joint", type=float, default=1.5e9, help="skip plans with more joint entries")
    ap.add_argument("--iterations", type=int, default=100, help="FGLP sweeps at most")
    ap.add_argument("--only", default=None, help="substring: only the instances whose name contains it")
    ap.add_argument("--name", default="shift", help="result file prefix (several runs on one day)")
    args = ap.parse_args()
    rows = []
    print(f"{'instance':34} {'z':>3} {'optimum':>12} " + " ".join(f"{v:>18}" for v in COLUMNS))
    for name, problem, optimum in instances(args.quick, args.only):
        reduced = preprocess(problem)
        if reduced.infeasible:
            print(f"{name:34} infeasible (preprocessing)")
            continue
        p = reduced.problem
        order = graph.elimination_order(p, "minfill")
        shifted, t_fglp = timed(lambda: fglp(p, args.iterations))
        const = shifted.functions[0].table[()]
        opt = internal(p, optimum)
        arity = max(f.arity for f in p.functions)
        fglp_row = {"instance": name, "z": None, "optimum": opt, "fglp_constant": float(const), "fglp_s": t_fglp}
        rows.append(fglp_row)
        print(f"{name:34} {'-':>3} {fmt_bound(opt):>12} {'FGLP constant':>18} {fmt_bound(float(const)):>10} {t_fglp:6.2f}s")
        for z in range(max(arity, 2), max(arity, 2) + args.zs):
            if sum(mb.joint_entries for mb in build_plan(p, order, z).minibuckets) > args.max_joint:
                break
            row, runs = {"instance": name, "z": z, "optimum": opt}, {}
            for variant in VARIANTS:
                source = shifted if variant.startswith("fglp") else p
                (row[variant], runs[variant]), row[variant + "_s"] = timed(
                    lambda: run(source, order, z, variant.endswith("mm")))
            row["jglp"], row["jglp_s"] = timed(lambda: as_bound(p, jglp(*runs["plain"])))
            # What the anytime schedule holds at this z: plain MBE; where FGLP raised the bound above
            # each function's minimum (the schedule skips shifting otherwise), also FGLP+MM and JGLP
            # from the tighter of the two runs; the largest.
            raised = float(const) > trivial(p)
            row["schedule"], row["schedule_s"] = row["plain"], row["plain_s"]
            if raised:
                start = "plain" if not _gt(row["fglp+mm"], row["plain"]) else "fglp+mm"
                lifted, t_lift = timed(lambda: as_bound(p, jglp(*runs[start])))
                row["schedule"] = max(row["plain"], row["fglp+mm"], lifted, key=_key)
                row["schedule_s"] += t_fglp + row["fglp+mm_s"] + t_lift
            rows.append(row)
            print(f"{name:34} {z:>3} {fmt_bound(opt):>12} " + " ".join(
                f"{fmt_bound(row[v]):>10} {row[v + '_s']:6.2f}s" for v in COLUMNS))
    wins = {v: sum(1 for r in rows if r["z"] is not None and _gt(r[v], r["plain"])) for v in COLUMNS[1:]}
    losses = {v: sum(1 for r in rows if r["z"] is not None and _gt(r["plain"], r[v])) for v in COLUMNS[1:]}
    pairs = sum(1 for r in rows if r["z"] is not None)
    print(f"(instance, z) pairs: {pairs}; above plain MBE: {wins}; below: {losses}")
    pr = partition_rows(args)
    write_result(args.name, cpu_name(),
                 engine="numpy, one thread", fglp_iterations=args.iterations, max_joint=args.max_joint,
                 units="internal cost (minimised, offset excluded; .uai MPE: -log10 p)",
                 summary={"pairs": pairs, "above_plain": wins, "below_plain": losses}, rows=rows,
                 partition=pr)


def trivial(problem) -> float:
    """The bound before any phase: the sum of each function's minimum."""
    return float(sum(f.table.min() for f in problem.functions if f.table.size))


def partition_rows(args):
    """PR on the shared .uai files: lower bounds on -log10 Z, one sum and K-1 maxima against WMB."""
    rows = []
    names = [] if args.quick or not SHARED.is_dir() else sorted(f.name for f in SHARED.glob("*.uai")
                                                                if args.only is None or args.only in f.name)
    if names:
        print(f"\n{'PR instance':34} {'z':>3} {'-log10 Z':>12} {'one sum':>18} {'WMB':>18}")
    for name in names:
        p = parsers.read(SHARED / name)
        order = graph.elimination_order(p, "minfill")
        engine = NumpyEngine()
        exact = build_plan(p, order, None)
        log_z = weighted_bound(p, exact, engine)
        arity = max(f.arity for f in p.functions)
        for z in range(max(arity, 2), exact.induced_width + 1):
            plan = build_plan(p, order, z)
            (low, _), t_low = timed(lambda: partition_bounds(
                p, plan, lambda op: run_plan(p, plan, engine, op=op)[0]))
            wmb, t_wmb = timed(lambda: weighted_bound(p, plan, engine))
            rows.append({"instance": name, "z": z, "minus_log10_z": log_z, "one_sum": low, "one_sum_s": t_low,
                         "wmb": wmb, "wmb_s": t_wmb})
            print(f"{name:34} {z:>3} {log_z:12.4f} {low:10.4f} {t_low:6.2f}s {wmb:10.4f} {t_wmb:6.2f}s")
    return rows


def _key(bound):
    """Order of bounds where None means forbidden (infinite)."""
    return float("inf") if bound is None else bound


def _gt(a, b) -> bool:
    """a > b for bounds where None means forbidden (infinite), with float slack."""
    if a is None or b is None:
        return a is None and b is not None
    return a > b + 1e-9 * max(1.0, abs(b))


def fmt_bound(x) -> str:
    if x is None:
        return "-"
    return f"{x:.0f}" if float(x).is_integer() else f"{x:.4f}"


if __name__ == "__main__":
    main()
