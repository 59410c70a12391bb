"""Root lower bounds: gpusolve's VAC (gpusolve.inference.vac) beside toulbar2's EDAC and VAC root bounds.

For each instance: the bound before VAC (the sum of each function's minimum),
the bound after it, its steps (raises of c0) and seconds
(wall and CPU) on NumPy, compiled (the search core's passes, vac_kernels: tables
compared with NumPy's) and with --cupy on the GPU too (tables compared with
NumPy's); then toulbar2's root bounds in fresh processes, pytoulbar2 with its
default EDAC and with VAC in preprocessing (`CFN(vac=1)`, toulbar2's -A):
the "Initial lower and upper bounds" line it prints after preprocessing, and
its preprocessing time. Instances: toulbar2's public RLFAP, SPOT5 and
facility-location files (web/EXAMPLES and validation/default of a toulbar2
checkout, --toulbar2 DIR), the shared instances, generated grids.

--search: the compiled depth-first core (gpusolve.search.dfbb) with and without VAC
before it, in fresh processes, on CELAR6-SUB0, cap131 and the RLFAP-like
networks of bench/search.py: the constant it starts from, its root bound
(after EDAC* at the root), nodes and seconds to the proof.
Writes bench/results/vac-<device>-<date>.json (vac-search-... with --search).
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from common import SHARED, cpu_name, gpu_name, write_result  # noqa: E402

import numpy as np  # noqa: E402

from gpusolve import parsers  # noqa: E402
from gpusolve.generate import generate  # noqa: E402
from gpusolve.parsers.wcsp import write_wcsp  # noqa: E402
from gpusolve.inference.vac import vac  # noqa: E402

TOULBAR2 = Path("/work/cache/toulbar2")
EXAMPLES = ("scen06.wcsp.xz", "scen07.wcsp.xz", "505.wcsp.xz", "404.wcsp.xz")  # web/EXAMPLES
VALIDATION = ("celar6sub0.wcsp", "cap131.wcsp")  # validation/default
GRIDS = [(100, 10, 0.3, 0.0, 1), (100, 10, 0.3, 0.5, 1)]  # generate("grid", n, d, p1, p2, seed)


def instances(folder: Path, toulbar2: Path, quick: bool) -> list[Path]:
    out = []
    if not quick:
        for name in VALIDATION:
            if (toulbar2 / "validation" / "default" / name).is_file():
                out.append(toulbar2 / "validation" / "default" / name)
        for name in EXAMPLES:
            source = toulbar2 / "web" / "EXAMPLES" / name
            if source.is_file():
                path = folder / name[:-3]
                path.write_bytes(lzma.decompress(source.read_bytes()))
                out.append(path)
        out += [SHARED / name for name in ("CELAR6-SUB0.wcsp", "404.wcsp", "warehouse.wcsp")
                if (SHARED / name).is_file()]
    for n, d, p1, p2, seed in ([(16, 4, 0.3, 0.3, 1)] if quick else GRIDS):
        path = folder / f"grid-n{n}-d{d}-p{p2}-s{seed}.wcsp"
        write_wcsp(generate("grid", n, d, p1, p2, seed), path)
        out.append(path)
    return out


def ours(path: Path, xp=np, limit: float | None = None, kernels=None) -> dict:
    """VAC on `path` with array module xp (or the compiled kernels): bounds as the file states them, steps,
    seconds."""
    problem = parsers.read(str(path))
    trivial = problem.total(f.least() for f in problem.functions)
    steps = []
    t, c = time.perf_counter(), time.process_time()
    stop = None if limit is None else (lambda: time.perf_counter() - t > limit)
    out = vac(problem, stop=stop, xp=xp, on_step=lambda theta, c0: steps.append(c0), kernels=kernels)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    c0 = int(out.functions[0].table[()])
    return {"before": problem.to_file_value(trivial), "c0": problem.to_file_value(c0), "steps": len(steps),
            "wall_s": wall, "cpu_s": cpu, "stopped": stop is not None and stop(), "tables": out}


def toulbar2_root(path: Path, use_vac: bool, limit: float) -> dict:
    """toulbar2's root bound, printed once its preprocessing ends, in a fresh process ended there (its
    output line-buffered by stdbuf); None where the preprocessing outlasts `limit` CPU seconds."""
    code = ("import sys, pytoulbar2\n"
            "cfn = pytoulbar2.CFN(vac=int(sys.argv[2]), verbose=0)\n"
            "cfn.Read(sys.argv[1])\n"
            "cfn.CFN.timer(int(sys.argv[3]))\n"
            "try:\n    cfn.Solve()\nexcept Exception:\n    pass\n")
    out = {"lower": None, "preprocessing_s": None}
    with subprocess.Popen(["stdbuf", "-oL", sys.executable, "-c", code, str(path), str(int(use_vac)),
                           str(max(int(limit), 1))], stdout=subprocess.PIPE, text=True) as p:
        for line in p.stdout:
            pre = re.search(r"Preprocessing time: (\S+) seconds", line)
            bounds = re.search(r"Initial lower and upper bounds: \[(\S+), (\S+)\]", line)
            if pre:
                out["preprocessing_s"] = float(pre.group(1))
            if bounds:
                out["lower"] = float(bounds.group(1))
                p.kill()
                break
    return out


def core(path: str, with_vac: bool, limit: float) -> dict:
    """The depth-first core on `path` in this process; without VAC, as it ran before VAC was put in front."""
    from gpusolve.search import dfbb
    from gpusolve.search.dfbb_state import COMPLETE
    problem = parsers.read(path)
    if not with_vac:
        dfbb.before_search = lambda p, seconds, kernels=None: (p, True)
    t = time.process_time()
    start, _ = dfbb.before_search(problem, kernels=dfbb.entry_points())
    vac_s = time.process_time() - t
    search = dfbb.DepthFirst(start, vac_after=None)  # VAC again at once: on a VAC problem it finds nothing more
    search.run(0)  # compiles or loads the core, propagates the root
    root = search.lower_bound
    t1 = time.process_time()
    while time.process_time() - t1 < limit and search.run(1 << 13) != COMPLETE:
        pass
    constant = start.total(f.table[()] for f in start.functions if not f.scope)
    return {"c0": problem.to_file_value(constant), "root": problem.to_file_value(root), "vac_cpu_s": vac_s,
            "complete": search.complete, "upper": problem.to_file_value(search.ub), "nodes": search.nodes,
            "search_cpu_s": time.process_time() - t1}


def search_rows(folder: Path, toulbar2: Path, quick: bool, limit: float) -> list[dict]:
    from search import rlfap
    paths = [] if quick else [p for p in (toulbar2 / "validation" / "default" / "celar6sub0.wcsp",
                                          toulbar2 / "validation" / "default" / "cap131.wcsp") if p.is_file()]
    for links, freq, seed, density in ([(8, 8, 1, 2)] if quick else
                                       [(30, 16, 1, 4), (40, 20, 3, 6), (60, 24, 4, 5), (80, 24, 5, 6)]):
        path = folder / f"rlfap-{links}-{freq}-s{seed}-x{density}.wcsp"
        rlfap(links, freq, seed, density).write(path)
        paths.append(path)
    rows = []
    for path in paths:
        row = {"instance": path.name}
        for key, flag in (("edac", "0"), ("vac", "1")):
            p = subprocess.run([sys.executable, __file__, "--child", str(path), flag, str(limit)], capture_output=True,
                               text=True, timeout=limit * 3 + 120)
            row[key] = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else \
                {"error": p.stderr.strip().splitlines()[-1:]}
        rows.append(row)
        print(f"{path.name:28} " + " | ".join(
            f"{key}: c0 {r.get('c0')} root {r.get('root')} {'proof' if r.get('complete') else 'open'} "
            f"{r.get('upper')} {r.get('nodes')} nodes {r.get('search_cpu_s', 0):.2f} s "
            f"(VAC {r.get('vac_cpu_s', 0):.2f} s)" for key, r in (("EDAC*", row["edac"]), ("VAC+EDAC*", row["vac"]))),
            flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one small generated grid")
    ap.add_argument("--toulbar2", type=Path, default=TOULBAR2, help="a toulbar2 checkout (its example files)")
    ap.add_argument("--time-limit", type=float, default=120.0, help="toulbar2's timer, and a stop for ours")
    ap.add_argument("--no-toulbar2", action="store_true")
    ap.add_argument("--cupy", action="store_true", help="also on the GPU")
    ap.add_argument("--search", action="store_true", help="the depth-first core with and without VAC")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        path, with_vac, limit = args.child
        print(json.dumps(core(path, with_vac == "1", float(limit))))
        return
    if args.search:
        with tempfile.TemporaryDirectory() as tmp:
            rows = search_rows(Path(tmp), args.toulbar2, args.quick, args.time_limit)
        write_result("vac-search", cpu_name(), time_limit=args.time_limit, rows=rows)
        return
    if args.cupy:
        from gpusolve.cuda.runtime import import_cupy
        cp = import_cupy()
    from gpusolve.search.dfbb_build import entry_points
    kernels = entry_points()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for path in instances(Path(tmp), args.toulbar2, args.quick):
            cpu = ours(path, limit=args.time_limit)
            row = {"instance": path.name, "numpy": {k: v for k, v in cpu.items() if k != "tables"}}
            line = (f"{path.name:26} before {cpu['before']} VAC {cpu['c0']} ({cpu['steps']} steps, "
                    f"{cpu['wall_s']:.2f} s, CPU {cpu['cpu_s']:.2f} s{', stopped' if cpu['stopped'] else ''})")
            compiled = ours(path, limit=args.time_limit, kernels=kernels)
            same = all(np.array_equal(f.table, g.table)
                       for f, g in zip(cpu["tables"].functions, compiled["tables"].functions))
            row["compiled"] = {**{k: v for k, v in compiled.items() if k != "tables"}, "same_tables": same,
                               "core": kernels.how}
            line += (f" | compiled {compiled['c0']} CPU {compiled['cpu_s']:.2f} s"
                     f"{'' if same or cpu['stopped'] or compiled['stopped'] else ' DIFFERENT TABLES'}")
            if args.cupy:
                ours(path, xp=cp)  # loads and compiles the kernels
                gpu = ours(path, xp=cp, limit=args.time_limit)
                same = all(np.array_equal(f.table, g.table)
                           for f, g in zip(cpu["tables"].functions, gpu["tables"].functions))
                row["cupy"] = {**{k: v for k, v in gpu.items() if k != "tables"}, "same_tables": same}
                line += f" | GPU {gpu['c0']} {gpu['wall_s']:.2f} s{'' if same else ' DIFFERENT TABLES'}"
            if not args.no_toulbar2:
                row["toulbar2_edac"] = toulbar2_root(path, False, args.time_limit)
                row["toulbar2_vac"] = toulbar2_root(path, True, args.time_limit)
                line += (f" | toulbar2 EDAC {row['toulbar2_edac']['lower']} VAC {row['toulbar2_vac']['lower']} "
                         f"({row['toulbar2_vac']['preprocessing_s']} s)")
            rows.append(row)
            print(line, flush=True)
    write_result("vac", gpu_name() if args.cupy else cpu_name(), time_limit=args.time_limit, rows=rows)


if __name__ == "__main__":
    main()
