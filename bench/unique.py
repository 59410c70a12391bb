"""Run finding in sparse tables: engines/sparse.py's `groups` against `xp.unique(..., return_index=True,
return_counts=True)` on sorted int64 codes (the join-sum's histogram), NumPy and, with --devices gpu,
CuPy. Both give the distinct codes, first indices and run sizes; unique sorts again. Writes
bench/results/unique-<device>-<date>.json.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import best_time, cpu_name, gpu_name, write_result  # noqa: E402

from gpusolve.engines.sparse import groups  # noqa: E402


def codes(xp, n: int, mean_run: int, seed: int = 0):
    rng = xp.random.default_rng(seed) if hasattr(xp.random, "default_rng") else xp.random.RandomState(seed)
    return xp.sort(rng.integers(0, max(n // mean_run, 1), size=n, dtype=xp.int64))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="small sizes only (the test suite runs this)")
    ap.add_argument("--devices", nargs="+", default=["cpu"], choices=("cpu", "gpu"))
    args = ap.parse_args()
    sizes = (10_000, 100_000) if args.quick else (100_000, 1_000_000, 10_000_000)
    rows, names = [], []
    for device in args.devices:
        if device == "gpu":
            import cupy as xp
            sync, names = xp.cuda.Device().synchronize, names + [gpu_name()]
        else:
            import numpy as xp
            sync, names = (lambda: None), names + [cpu_name()]
        for n in sizes:
            for mean_run in (1, 4, 64):
                c = codes(xp, n, mean_run)
                t_runs, ours = best_time(lambda: groups(xp, c), sync, 5)
                t_unique, theirs = best_time(lambda: xp.unique(c, return_index=True, return_counts=True), sync, 5)
                assert all(bool((a == b).all()) for a, b in zip(ours, theirs))
                rows.append({"device": device, "rows": n, "mean_run": mean_run, "groups_s": t_runs,
                             "unique_s": t_unique, "unique_over_groups": t_unique / t_runs})
                print(f"{device} {n:>10,} rows, mean run {mean_run:>3}: groups {t_runs * 1e3:8.3f} ms, "
                      f"xp.unique {t_unique * 1e3:8.3f} ms ({t_unique / t_runs:.2f}x)")
    write_result("unique", " + ".join(names), rows=rows)


if __name__ == "__main__":
    main()
