"""Sparse tables: join-sum and elimination throughput, and time to the proven optimum against toulbar2.

Issue 4's benchmarks, one script for CPU and GPU (the same `xp` code runs on
NumPy or CuPy). Throughput: a star bucket, two random tables over (v, a1..ak)
and (v, b1..bk), domain d, each row feasible with probability f; timed are
the materialised join-sum (index, gather, sort: output rows per second) and
the bucket step (join-sum reduced over v chunk by chunk: joint rows per
second), best of --repeat, each checked against the dense step on small
sizes. Instances: `solve` with default options (bounded sparse BE where the
exact dense plan does not fit; with --tables sparse too when auto chose dense),
then toulbar2 (pytoulbar2) on the same machine. Writes bench/results/sparse-<device>-<date>.json.
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from gpu_kernel import result_path  # noqa: E402

import parsers  # noqa: E402
from gpusolve.engines import sparse  # noqa: E402
from gpusolve.engines.base import eliminate_dense  # noqa: E402
from gpusolve.solve import Options, solve  # noqa: E402

INSTANCES = (("404.wcsp", 114), ("CELAR6-SUB0.wcsp", 159))
TOP = 1 << 40


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def array_module(device: str):
    if device == "cpu":
        return np, lambda: None, cpu_name()
    import cupy
    name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
    return cupy, cupy.cuda.Device().synchronize, name.decode() if isinstance(name, bytes) else str(name)


def random_table(xp, rng, scope, d, f):
    """Rows of a dense d^k table kept with probability f, costs 0..99."""
    dense = d ** len(scope)
    keys = np.flatnonzero(rng.random(dense) < f).astype(np.int64)
    costs = rng.integers(0, 100, size=keys.shape[0]).astype(np.int64)
    return sparse.SparseTable(tuple(scope), (d,) * len(scope), xp.asarray(keys), xp.asarray(costs))


def best_time(fn, sync, repeat):
    times = []
    for _ in range(repeat):
        sync()
        t = time.perf_counter()
        out = fn()
        sync()
        times.append(time.perf_counter() - t)
    return min(times), out


def throughput(xp, sync, d, ks, fractions, max_rows, repeat):
    rows = []
    rng = np.random.default_rng(0)
    for k in ks:
        for f in fractions:
            a = random_table(xp, rng, [0] + list(range(1, k + 1)), d, f)
            b = random_table(xp, rng, [0] + list(range(k + 1, 2 * k + 1)), d, f)
            joint_rows = int(sparse.join_index(xp, a, b).total)
            if joint_rows > max_rows:
                continue
            sep = tuple(range(2 * k, 0, -1))
            scope, dims = sep + (0,), (d,) * (2 * k + 1)
            dom = [d] * (2 * k + 1)
            t_join, joined = best_time(lambda: sparse.join(xp, a, b, scope, dims, TOP), sync, repeat)
            t_elim, msg = best_time(lambda: sparse.eliminate_sparse(xp, 0, sep, [(a, a.scope), (b, b.scope)],
                                                                    dom, TOP), sync, repeat)
            if d ** (2 * k + 1) <= 1 << 22:  # check against the dense step
                dense = [(sparse.to_dense(np, sparse.SparseTable(t.scope, t.dims, _host(t.keys), _host(t.costs)),
                                          TOP, np.int64), t.scope) for t in (a, b)]
                ref = eliminate_dense(np, 0, sep, dense, dom, TOP, True)
                got = sparse.to_dense(np, sparse.SparseTable(msg.scope, msg.dims, _host(msg.keys), _host(msg.costs)),
                                      TOP, np.int64)
                assert np.array_equal(ref, got), (k, f)
            row = {"d": d, "k": k, "feasible_fraction": f, "input_rows": [a.rows, b.rows],
                   "joint_dense_entries": d ** (2 * k + 1), "join_output_rows": joined.rows,
                   "message_rows": msg.rows, "join_s": t_join, "join_rows_per_s": joined.rows / t_join,
                   "eliminate_s": t_elim, "eliminate_joint_rows_per_s": joint_rows / t_elim}
            print(f"k={k} f={f:<5} inputs {a.rows:>10,} x {b.rows:>10,}  join {joined.rows:>12,} rows "
                  f"{row['join_rows_per_s']:.3g}/s   eliminate {row['eliminate_joint_rows_per_s']:.3g} joint rows/s",
                  flush=True)
            rows.append(row)
    return rows


def _host(a):
    return a.get() if hasattr(a, "get") else a


def instances(folder: Path, device: str, toulbar2: bool):
    out = []
    for name, optimum in INSTANCES:
        path = folder / name
        problem = parsers.read(path)
        r = solve(problem, Options(device=device))
        rec = {"file": name, "known_optimum": optimum, "status": r.status, "lower_bound": r.lower_bound,
               "upper_bound": r.upper_bound, "z": r.z, "time_s": r.time_s, "phases": r.phases,
               "largest_sparse_rows": r.largest_rows, "engine": r.engine}
        assert r.status != "optimal" or r.lower_bound == optimum, rec
        if not r.largest_rows:  # auto chose dense tables: time the all-sparse run as well
            s = solve(problem, Options(device=device, tables="sparse"))
            assert s.status == "optimal" and s.lower_bound == optimum, s
            rec["tables_sparse"] = {"time_s": s.time_s, "largest_sparse_rows": s.largest_rows}
        if toulbar2:
            try:
                import pytoulbar2
            except ImportError:
                toulbar2 = False
                print("pytoulbar2 is not installed here: no toulbar2 comparison", flush=True)
        if toulbar2:
            cfn = pytoulbar2.CFN(verbose=-1)
            cfn.Read(str(path))
            t = time.perf_counter()
            res = cfn.Solve()
            rec["toulbar2_s"] = time.perf_counter() - t
            rec["toulbar2_optimum"] = None if not res else res[1]
        sparse_run = rec.get("tables_sparse")
        print(f"{name}: {r.status} {r.lower_bound}..{r.upper_bound} in {r.time_s:.2f} s (largest sparse message "
              f"{r.largest_rows:,} rows" + (f"; --tables sparse {sparse_run['time_s']:.2f} s, largest "
                                            f"{sparse_run['largest_sparse_rows']:,} rows" if sparse_run else "")
              + f"); toulbar2 {rec.get('toulbar2_s', float('nan')):.2f} s", flush=True)
        out.append(rec)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    ap.add_argument("--instances", type=Path, default=ROOT.parent / "shared" / "instances")
    ap.add_argument("--d", type=int, default=10)
    ap.add_argument("--k", type=int, nargs="+", default=[2, 3, 4, 5])
    ap.add_argument("--fractions", type=float, nargs="+", default=[0.01, 0.05, 0.2, 0.5])
    ap.add_argument("--max-rows", type=float, default=None,
                    help="skip buckets with more joint rows (default 3e7 on CPU, 1e9 on GPU)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-toulbar2", action="store_true")
    args = ap.parse_args()
    xp, sync, device = array_module(args.device)
    max_rows = args.max_rows or (3e7 if args.device == "cpu" else 1e9)
    record = {"bench": "sparse", "device": device, "device_kind": args.device, "host": platform.node(),
              "date": datetime.date.today().isoformat(), "numpy": np.__version__,
              "throughput": throughput(xp, sync, args.d, args.k, args.fractions, max_rows, args.repeat),
              "instances": instances(args.instances, args.device, not args.no_toulbar2)}
    path = result_path("sparse", device)
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
