"""AllDifferent propagation alone (Régin's GAC), CPU against GPU, as in the seed paper.

For each size (variables in the AllDifferent): N-queens at the root (its three AllDifferents:
rows, x_i + i, x_i - i), Langford L(2, n) at the root (one AllDifferent over the 2n positions),
and a random domain-reduced instance (each value kept with probability --density, a planted
permutation so that a matching exists). One timed call is one propagation as search makes it:
a few values were just removed, the matching of the previous call is passed in (incremental),
then matching, SCCs, filtering. SCC methods (--methods, alldiff.METHODS): "peel" (our propagator:
forward-backward reachability on bit-packed domains; on the CPU in NumPy with the small rest by
Tarjan, on the GPU one kernel launch, alldiff_kernel.py), "tarjan" (adjacency lists in Python,
host only), "squaring" and "warshall" (transitive closures in array code, GPU; float16 matrix
squaring and bit-packed Warshall as in the seed); the matching stays on the host. Prints and
writes seconds per call, the host's share of a GPU call (matching and bit-packing the domains),
and the ratios of CPU peel and CPU Tarjan to the best GPU method to
bench/results/alldiff-<device>-<date>.json. Also, as a search keeping the domains bit-packed
would call it ("kept" columns): the CPU peel given the packed words (its matching grown from the
previous one on the host), and the GPU kernel on domains and matching kept on the device that
receives the values just removed and repairs the matching there (alldiff_kernel.DeviceDomains);
both return the removed edges. A CPU method is skipped (null) above --cpu-max-edges /
--tarjan-max-edges edges.
With --solve: first solutions by MAC search (mac.py) of N-queens and Langford L(2, n), on the
CPU and (with CuPy) with GAC on the GPU, each within --solve-limit seconds.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from common import cpu_name, gpu_name, write_result

from gpusolve.consistency import alldiff_kernel
from gpusolve.limits import DEFAULT, Limits
from gpusolve.consistency.alldiff import METHODS, crossing, filter_domains, max_matching, pack, peel
from gpusolve.generate import langford, queens
from gpusolve.consistency.alldiff import id_table, value_ids
from gpusolve.search.mac import Mac
from gpusolve.stop import Stop, Stopped


def queens_graphs(n: int) -> list[np.ndarray]:
    """The variable-value graphs of N-queens' three AllDifferents (full domains)."""
    graphs = []
    for g in queens(n).globals:
        _, m = value_ids(g)
        graph = np.zeros(len(g.scope) * (m + 1), dtype=bool)
        graph[id_table(g)[1]] = True
        graphs.append(np.ascontiguousarray(graph.reshape(len(g.scope), m + 1)[:, :m]))
    return graphs


def langford_graph(n: int) -> np.ndarray:
    """L(2, n) after arc consistency on p_b = p_a + d + 1: the first copy of d in 0..2n-d-2, the
    second in d+1..2n-1."""
    size = 2 * n
    dom = np.zeros((size, size), dtype=bool)
    for d in range(1, n + 1):
        dom[2 * (d - 1), : size - d - 1] = True
        dom[2 * (d - 1) + 1, d + 1:] = True
    return dom


def random_graph(n: int, density: float, rng) -> np.ndarray:
    dom = rng.random((n, n)) < density
    dom[np.arange(n), rng.permutation(n)] = True
    return dom


def one_call(dom: np.ndarray, rng, removals: int):
    """(domains after `removals` random values were removed, the matching from before): one search step."""
    match = max_matching(dom)
    after = dom.copy()
    rows = rng.choice(dom.shape[0], size=min(removals, dom.shape[0]), replace=False)
    for x in rows:
        vals = np.flatnonzero(after[x])
        if vals.size > 1:
            after[x, rng.choice(vals)] = False
    return after, match


def timed(fn, repeat: int, sync=lambda: None) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        sync()
        t = time.perf_counter()
        out = fn()
        sync()
        best = min(best, time.perf_counter() - t)
    return best, out


def timed_from(setup, fn, repeat: int, sync=lambda: None):
    """timed, with `setup()`'s result (made before the clock starts) given to each run of fn."""
    best, out = float("inf"), None
    for _ in range(repeat):
        state = setup()
        sync()
        t = time.perf_counter()
        out = fn(state)
        sync()
        best = min(best, time.perf_counter() - t)
    return best, out


def kept_calls(dom, after, match, cp, repeat, sync) -> dict:
    """Seconds of one call on kept bit-packed domains: CPU peel given the words, GPU kernel on the
    device's copy given the values just removed; both checked against filter_domains."""
    n, m = after.shape
    ref = filter_domains(after, match)[0]

    def check(removed):
        got = after.copy()
        got[removed] = False
        assert (got == ref).all(), "kept-domain filtering differs"

    def cpu(words):
        mt = max_matching(after, match)
        return crossing(after, words, mt, peel(after, mt, words)[:n])
    row = {}
    row["cpu_peel_kept_s"], got = timed_from(lambda: pack(np, after), cpu, repeat)
    check(got)
    if cp is not None and alldiff_kernel.fits(n, m):
        delta = np.nonzero(dom & ~after)  # what the search removed since the last call

        def gpu(dd):  # the matching is repaired on the device
            return dd.removals(delta)
        before = pack(np, dom)
        row["gpu_kept_s"], got = timed_from(lambda: alldiff_kernel.DeviceDomains(cp, before, m, match), gpu,
                                            repeat, sync)
        check(got)
        row["ratio_kept"] = row["cpu_peel_kept_s"] / row["gpu_kept_s"]
    return row


def solve_first(spec: str, xp, limit: float, limits: Limits) -> dict:
    """MAC's first solution of `queens:N` or `langford:N`: seconds, nodes, whether it was found."""
    kind, n = spec.split(":")
    problem = queens(int(n)) if kind == "queens" else langford(int(n))
    t = time.perf_counter()
    m = Mac(problem, Stop(t + limit), xp=xp, limits=limits)
    try:
        found = m.run()
        status = "infeasible" if found is None else "solved"
        assert found is None or problem.evaluate(found) == 0
    except Stopped:
        status = "time limit"
    seconds = time.perf_counter() - t
    return {"instance": spec, "variables": len(problem.variables), "device": "gpu" if xp is not None else "cpu",
            "gac_on_gpu": bool(m.kept), "status": status, "seconds": seconds, **m.stats.to_json(),
            "nodes_per_s": m.stats.nodes / seconds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[300, 1000, 2000, 4000, 8000])
    ap.add_argument("--density", type=float, default=0.1, help="random instances: share of values kept")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cpu-max-edges", type=float, default=1e8, help="no CPU peel above this many edges")
    ap.add_argument("--tarjan-max-edges", type=float, default=4e6,
                    help="no CPU Tarjan above this many edges (Python lists: about 0.3 s per million edges)")
    ap.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS),
                    help="SCC methods timed: peel and tarjan on the CPU; peel, squaring, warshall on the GPU")
    ap.add_argument("--no-gpu", action="store_true", help="CPU only, even where CuPy imports")
    ap.add_argument("--solve", nargs="*", default=[], metavar="queens:N|langford:N",
                    help="first solutions by MAC search, CPU and GPU")
    ap.add_argument("--solve-limit", type=float, default=60.0, help="seconds per first solution")
    ap.add_argument("--solve-on", nargs="+", choices=("cpu", "gpu"), default=["cpu", "gpu"],
                    help="where first solutions are searched (gpu: where CuPy imports)")
    ap.add_argument("--gpu-min-scope", type=int, default=DEFAULT.gpu_min_scope,
                    help="MAC's smallest AllDifferent filtered on the GPU (Limits.gpu_min_scope)")
    ap.add_argument("--no-propagation", action="store_true", help="only the --solve part")
    ap.add_argument("--quick", action="store_true", help="sizes 40 and 80, one repeat (the tests)")
    args = ap.parse_args()
    sizes, repeat = ([40, 80], 1) if args.quick else (args.sizes, args.repeat)
    limits = Limits(gpu_min_scope=args.gpu_min_scope)
    solves = ["queens:12", "langford:8"] if args.quick else args.solve
    if args.no_propagation:
        sizes = []
    cp = None
    if not args.no_gpu:
        try:
            import cupy as cp
            cp.cuda.runtime.getDeviceCount()
        except Exception:  # no CuPy or no device: CPU only
            cp = None
    sync = cp.cuda.Device().synchronize if cp is not None else (lambda: None)
    rng = np.random.default_rng(1)
    rows = []
    cpu_methods = [m for m in args.methods if m in ("peel", "tarjan")]
    gpu_methods = [m for m in args.methods if m != "tarjan"] if cp is not None else []
    columns = [f"cpu_{m}" for m in cpu_methods] + [f"gpu_{m}" for m in gpu_methods]
    print(f"{'instance':<22}{'vars':>6}{'edges':>11}" + "".join(f"{c + ' s':>16}" for c in columns)
          + f"{'host part s':>13}{'peel/gpu':>9}{'tarjan/gpu':>11}{'cpu kept s':>12}{'gpu kept s':>12}{'kept ratio':>11}")
    for n in sizes:
        cases = [(f"queens-{n} #{k}", g) for k, g in enumerate(queens_graphs(n))]
        cases += [(f"langford-2-{n // 2}", langford_graph(n // 2)),
                  (f"random-{n}-p{args.density}", random_graph(n, args.density, rng))]
        for name, dom in cases:
            after, match = one_call(dom, rng, max(1, n // 100))
            edges = int(after.sum())
            row = {"instance": name, "variables": after.shape[0], "values": after.shape[1], "edges": edges}
            ref = None
            for m in cpu_methods:
                limit = args.tarjan_max_edges if m == "tarjan" else args.cpu_max_edges
                row[f"cpu_{m}_s"], got = timed(lambda: filter_domains(after, match, method=m), repeat) \
                    if edges <= limit else (None, None)
                if got is not None:
                    assert ref is None or (got[0] == ref).all(), f"{name}: CPU {m} filtering differs"
                    ref = got[0]
            for m in gpu_methods:
                filter_domains(after, match, cp, m)  # warm-up: kernels compiled, memory pooled
                row[f"gpu_{m}_s"], got = timed(lambda: filter_domains(after, match, cp, m), repeat, sync)
                assert ref is None or (got[0] == ref).all(), f"{name}: GPU ({m}) and CPU filtering differ"
            row["host_part_s"] = timed(lambda: (max_matching(after, match), pack(np, after)), repeat)[0]
            if "peel" in cpu_methods and row.get("cpu_peel_s") is not None:
                row.update(kept_calls(dom, after, match, cp if "peel" in gpu_methods else None, repeat, sync))
            if gpu_methods:
                best = min(row[f"gpu_{m}_s"] for m in gpu_methods)
                row["best_gpu"] = min(gpu_methods, key=lambda m: row[f"gpu_{m}_s"])
                row["ratio"] = row["cpu_peel_s"] / best if row.get("cpu_peel_s") else None
                row["ratio_tarjan"] = row["cpu_tarjan_s"] / best if row.get("cpu_tarjan_s") else None
            rows.append(row)
            cells = "".join(f"{row[c + '_s']:>16.4g}" if row.get(c + "_s") is not None else f"{'-':>16}"
                            for c in columns)
            ratios = "".join(f"{row[k]:>{w}.2f}" if row.get(k) else f"{'-':>{w}}"
                             for k, w in (("ratio", 9), ("ratio_tarjan", 11)))
            kept = "".join(f"{row[k]:>{w}.4g}" if row.get(k) is not None else f"{'-':>{w}}"
                           for k, w in (("cpu_peel_kept_s", 12), ("gpu_kept_s", 12), ("ratio_kept", 11)))
            print(f"{name:<22}{row['variables']:>6}{edges:>11,}{cells}{row['host_part_s']:>13.4g}{ratios}{kept}",
                  flush=True)
    firsts = []
    for spec in solves:
        for xp in ([None] if "cpu" in args.solve_on else []) + ([cp] if cp is not None and "gpu" in args.solve_on else []):
            firsts.append(solve_first(spec, xp, args.solve_limit, limits))
            f = firsts[-1]
            print(f"first solution {spec} on the {f['device']}: {f['status']} in {f['seconds']:.3g} s, "
                  f"{f['nodes']} nodes ({f['nodes_per_s']:.4g}/s), {f['failures']} failures", flush=True)
        pair = [f for f in firsts if f["instance"] == spec]
        if len(pair) == 2:  # the seed's speed-up: nodes per second, GPU over CPU
            pair[1]["speedup_nodes_per_s"] = pair[1]["nodes_per_s"] / pair[0]["nodes_per_s"]
            print(f"  nodes/s GPU / CPU: {pair[1]['speedup_nodes_per_s']:.3g}", flush=True)
    device = gpu_name() if cp is not None else cpu_name()
    write_result("alldiff", device, cpu=cpu_name(), quick=args.quick, density=args.density, rows=rows,
                 first_solutions=firsts, gpu_min_scope=args.gpu_min_scope, solve_limit=args.solve_limit)


if __name__ == "__main__":
    main()
