"""DPOP: gpusolve's agents on Dask against pyDCOP's DPOP (0.1.1), on the journal's generators.

Instances: `gpusolve generate` random (p1 0.3), scale-free and grid networks,
p2 0.5 (forbidden entries cost `top` for pyDCOP, which has no hard
constraints), domains 5 to 10, 10 to 40 agents, one variable per agent.
Both sides must reach the same optimum (infeasible on our side: pyDCOP's
assignment costs at least top). Figures: wall time of each DPOP run (agents
deployed; cluster start-up and reading excluded), simulated runtime (critical
path of measured computation times plus --latency per message, as the
GPU-DBE papers define it) and their ratios.

pyDCOP 0.1.1 does not import on Python >= 3.11 nor run on NumPy 2 as
published; it runs in its own virtual environment (--pydcop-python, or
$PYDCOP_PYTHON: `python -m venv V && V/bin/pip install pydcop==0.1.1 'numpy<2'`)
through the driver below, whose shim restores `collections.Iterable`,
`pulp.solvers`, `numpy.asscalar` and `yaml.load`'s default loader. The driver
stamps every DPOP message with its sender's simulated clock (wrapping
DpopAlgo's handlers and post_msg) to measure pyDCOP's simulated runtime the
same way. Without a pyDCOP interpreter the reference is gpusolve's own DPOP
on the CPU engine, run inline (one process, no Dask).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from common import cpu_name, gpu_name, write_result  # noqa: E402
from gpusolve.dcop.dpop import solve_dcop  # noqa: E402
from gpusolve.generate import generate  # noqa: E402
from gpusolve.host import BudgetError  # noqa: E402

DRIVER = r'''
import collections, collections.abc, json, sys, threading, time, types
for name in ("Iterable", "Mapping", "MutableMapping", "Sequence", "Callable", "Hashable"):
    setattr(collections, name, getattr(collections.abc, name))
import numpy
if not hasattr(numpy, "asscalar"):
    numpy.asscalar = lambda a: a.item()
import pulp
if "pulp.solvers" not in sys.modules:
    solvers = types.ModuleType("pulp.solvers")
    solvers.GLPK_CMD = pulp.GLPK_CMD
    pulp.solvers = solvers
    sys.modules["pulp.solvers"] = solvers
import yaml
_load = yaml.load
yaml.load = lambda s, Loader=yaml.FullLoader: _load(s, Loader=Loader)
import logging
logging.disable(logging.CRITICAL)
from pydcop.algorithms import dpop
from pydcop.algorithms.objects import AlgoDef
from pydcop.computations_graph import pseudotree
from pydcop.dcop.yamldcop import load_dcop_from_file
from pydcop.distribution import oneagent
from pydcop.infrastructure.run import run_local_thread_dcop
path, latency, timeout = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
dcop = load_dcop_from_file([path])
clock, local, chosen, sent = {}, threading.local(), {}, [0, 0]
done = threading.Event()  # 0.1.1's orchestrator never notices the end of DPOP: the driver does

def timed(fn):
    def wrapper(self, *args):
        msg = args[1] if len(args) > 1 else None
        start = clock.get(self.name, 0.0)
        if msg is not None and hasattr(msg, "_sent"):
            start = max(start, msg._sent + latency)
        local.start, local.t0 = start, time.perf_counter()
        try:
            return fn(self, *args)
        finally:
            clock[self.name] = start + time.perf_counter() - local.t0
            if self.current_value is not None:
                chosen[self.name] = self.current_value
                if len(chosen) == len(dcop.variables):
                    done.set()
    return wrapper

dpop.DpopAlgo.on_start = timed(dpop.DpopAlgo.on_start)
dpop.DpopAlgo.on_message = timed(dpop.DpopAlgo.on_message)
_post = dpop.DpopAlgo.post_msg

def post_msg(self, target, msg, *args, **kw):
    msg._sent = local.start + time.perf_counter() - local.t0
    sent[0] += 1
    sent[1] += msg.size
    return _post(self, target, msg, *args, **kw)

dpop.DpopAlgo.post_msg = post_msg
graph = pseudotree.build_computation_graph(dcop)
distribution = oneagent.distribute(graph, dcop.agents.values(), computation_memory=dpop.computation_memory,
                                   communication_load=dpop.communication_load)
orchestrator = run_local_thread_dcop(AlgoDef("dpop"), graph, distribution, dcop, 10000)
try:
    orchestrator.deploy_computations()
    t0 = time.perf_counter()
    orchestrator.run()
    finished = done.wait(timeout)
    wall = time.perf_counter() - t0
finally:
    orchestrator.stop_agents(5)
    orchestrator.stop()
if not finished:
    sys.exit(f"timeout {timeout:g} s")
print(json.dumps({"assignment": {k: int(v) for k, v in chosen.items()}, "wall_s": wall,
                  "simulated_s": max(clock.values()), "msg_count": sent[0], "msg_size": sent[1]}))
'''


def pydcop_yaml(problem) -> str:
    """The problem in pyDCOP 0.1.1's YAML (agents a mapping, domains typed), forbidden entries costing top."""
    d = problem.domains
    lines = [f"name: {problem.name}", "objective: min", "domains:"]
    for size in sorted(set(d)):
        lines += [f"  d{size}:", f"    values: [{', '.join(map(str, range(size)))}]", "    type: int"]
    lines.append("variables:")
    for v, var in enumerate(problem.variables):
        lines += [f"  {var.name}:", f"    domain: d{d[v]}"]
    lines.append("constraints:")
    for i, f in enumerate(problem.functions):
        names = [problem.variables[v].name for v in f.scope]
        by_cost: dict[int, list[str]] = {}
        for idx in np.ndindex(f.table.shape):
            by_cost.setdefault(int(f.table[idx]), []).append(" ".join(map(str, idx)))
        lines += [f"  c{i}:", "    type: extensional", f"    variables: [{', '.join(names)}]", "    values:"]
        lines += [f"      {cost}: {' | '.join(tuples)}" for cost, tuples in sorted(by_cost.items())]
    lines.append("agents:")
    for v in range(len(d)):
        lines += [f"  a{v}:", "    capacity: 1000"]
    return "\n".join(lines) + "\n"


def run_pydcop(python: str, problem, latency: float, timeout: float) -> dict:
    """pyDCOP's DPOP in a fresh process: its figures, or {'failed': why}."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(pydcop_yaml(problem))
    try:
        p = subprocess.run([python, "-c", DRIVER, f.name, str(latency), str(timeout)], capture_output=True,
                           text=True, timeout=timeout + 30)
    except subprocess.TimeoutExpired:
        return {"failed": f"timeout {timeout:g} s"}
    finally:
        os.unlink(f.name)
    if p.returncode != 0:
        return {"failed": (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]}
    out = json.loads(p.stdout.strip().splitlines()[-1])
    index = {v.name: i for i, v in enumerate(problem.variables)}
    values = [0] * len(index)
    for name, val in out.pop("assignment").items():
        values[index[name]] = val
    out["cost"] = int(problem.evaluate(values))
    return out


def instances(quick: bool):
    if quick:
        return [("random", 8, 5, 1), ("grid", 9, 5, 1)]
    out = [("random", n, d, s) for n, d in ((10, 5), (12, 5), (14, 5), (10, 10), (12, 10)) for s in (1, 2, 3)]
    out += [("scalefree", n, d, s) for n, d in ((10, 5), (20, 5), (30, 5), (40, 5), (20, 10)) for s in (1, 2, 3)]
    out += [("grid", n, d, s) for n, d in ((9, 5), (16, 5), (25, 5), (36, 5), (16, 10)) for s in (1, 2, 3)]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="two tiny networks, inline executor")
    ap.add_argument("--device", default="auto", choices=("auto", "cpu", "gpu"))
    ap.add_argument("--scheduler", default=None,
                    help="as for gpusolve dcop; default: one LocalCluster of processes for the whole run")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--latency", type=float, default=0.0, help="seconds per message in the simulated runtime")
    ap.add_argument("--pydcop-python", default=os.environ.get("PYDCOP_PYTHON"),
                    help="interpreter of a venv holding pydcop==0.1.1 and numpy<2")
    ap.add_argument("--pydcop-timeout", type=float, default=300.0)
    ap.add_argument("--only", default=None, help="run only this topology")
    args = ap.parse_args()
    scheduler = "inline" if args.quick and args.scheduler is None else args.scheduler
    cluster = None
    if scheduler is None:
        from dask.distributed import LocalCluster
        cluster = LocalCluster(n_workers=args.workers or os.cpu_count(), threads_per_worker=1, processes=True,
                               dashboard_address=":0")
        scheduler = cluster.scheduler_address
    reference = "pyDCOP 0.1.1 DPOP" if args.pydcop_python else "gpusolve DPOP, CPU engine, inline"
    solve_dcop(generate("random", 6, 3, seed=0), device=args.device, scheduler=scheduler)  # warm the workers up
    rows, gave_up = [], {}  # (topology, domain) -> agents at which the reference failed
    print(f"{'instance':<22} {'w*':>3} {'optimum':>8} {'ours wall':>10} {'ours sim':>10} {'ref wall':>10} "
          f"{'ref sim':>10} {'wall x':>8} {'sim x':>8}")
    try:
        for topology, n, d, seed in instances(args.quick):
            if args.only and topology != args.only:
                continue
            problem = generate(topology, n, d, 0.3, 0.5, seed)
            try:
                ours = solve_dcop(problem, device=args.device, scheduler=scheduler, latency=args.latency)
            except BudgetError as e:  # the reference is not run: it would need the same tables
                rows.append({"instance": problem.name, "topology": topology, "agents": n, "domain": d,
                             "status": "memory", "message": str(e), "reference": {"failed": "not run"},
                             "same_optimum": False})
                print(f"{problem.name:<22} ours: {e}", flush=True)
                continue
            if args.pydcop_python and n >= gave_up.get((topology, d), n + 1):
                ref = {"failed": f"skipped: failed at {gave_up[(topology, d)]} agents"}
            elif args.pydcop_python:
                ref = run_pydcop(args.pydcop_python, problem, args.latency, args.pydcop_timeout)
                if "failed" in ref:
                    gave_up[(topology, d)] = min(n, gave_up.get((topology, d), n))
            else:
                r = solve_dcop(problem, device="cpu", scheduler="inline", latency=args.latency)
                ref = {"cost": int(problem.evaluate(r.assignment)), "wall_s": r.wall_s, "simulated_s": r.simulated_s}
            internal = problem.evaluate(ours.assignment) if ours.assignment is not None else problem.top
            same = "failed" not in ref and bool(ref["cost"] == internal if internal < problem.top
                                            else ref["cost"] >= problem.top)
            row = {"instance": problem.name, "topology": topology, "agents": n, "domain": d,
                   "induced_width": ours.induced_width, "status": ours.status, "optimum": ours.lower_bound,
                   "messages": ours.messages, "ours_wall_s": ours.wall_s, "ours_simulated_s": ours.simulated_s,
                   "engines": ours.engines, "reference": ref, "same_optimum": same}
            if "failed" not in ref:
                row["wall_ratio"] = ref["wall_s"] / ours.wall_s
                row["simulated_ratio"] = ref["simulated_s"] / ours.simulated_s
            rows.append(row)
            print(f"{problem.name:<22} {ours.induced_width:>3} {str(ours.lower_bound):>8} {ours.wall_s:>10.4f} "
                  f"{ours.simulated_s:>10.4f} {_cell(ref.get('wall_s'), 10, 4)} {_cell(ref.get('simulated_s'), 10, 4)} "
                  f"{_cell(row.get('wall_ratio'), 8, 1)} {_cell(row.get('simulated_ratio'), 8, 1)}"
                  + (f"  reference {ref['failed']}" if "failed" in ref else "" if same else f"  MISMATCH {ref}"),
                  flush=True)
    finally:
        if cluster is not None:
            cluster.close()
    summary = summarize(rows)
    for topology, s in summary.items():
        print(f"{topology}: {s['both']} instances both finished, simulated-runtime ratio median {s['median_sim']}, "
              f"min {s['min_sim']}; wall ratio median {s['median_wall']}; reference failed on {s['ref_failed']}")
    device = gpu_name() if any("cupy" in r.get("engines", ()) for r in rows) else cpu_name()
    write_result("dcop", device, reference=reference, latency_s=args.latency, scheduler=args.scheduler or "LocalCluster",
                 quick=args.quick, rows=rows, summary=summary)
    if not all(r["same_optimum"] or "failed" in r["reference"] for r in rows):  # a real mismatch
        sys.exit(1)


def _cell(x, width: int, digits: int) -> str:
    return f"{x:>{width}.{digits}f}" if x is not None else f"{'-':>{width}}"


def summarize(rows) -> dict:
    import statistics
    out = {}
    for topology in sorted({r["topology"] for r in rows}):
        mine = [r for r in rows if r["topology"] == topology]
        both = [r for r in mine if "simulated_ratio" in r]
        sims = [r["simulated_ratio"] for r in both]
        walls = [r["wall_ratio"] for r in both]
        out[topology] = {"both": len(both), "ref_failed": len(mine) - len(both),
                         "median_sim": round(statistics.median(sims), 1) if sims else None,
                         "min_sim": round(min(sims), 1) if sims else None,
                         "median_wall": round(statistics.median(walls), 1) if walls else None}
    return out


if __name__ == "__main__":
    main()
