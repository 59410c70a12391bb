"""NumPy-engine throughput on a fixed bucket: joint-table entries evaluated per second.

The bucket: one eliminated variable and W separator variables, domain D, with
one binary cost table pairing the eliminated variable with each separator
variable (GpuBE's standard bucket, scaled to one CPU core). Prints the figure
and writes JSON to bench/results/.
"""
from __future__ import annotations

import argparse
import os
import platform
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
import numpy as np  # noqa: E402
from common import cpu_name, write_result  # noqa: E402

from gpusolve.engines.numpy_engine import NumpyEngine  # noqa: E402
from gpusolve.plan import MiniBucket  # noqa: E402


def standard_bucket(w: int, d: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    var, sep = 0, tuple(range(w, 0, -1))
    inputs = [(rng.integers(0, 101, size=(d, d)).astype(np.int64), (var, s)) for s in sep]
    mb = MiniBucket(index=0, var=var, functions=(), messages=(), scope=sep,
                    out_entries=d ** w, joint_entries=d ** (w + 1))
    return mb, inputs, [d] * (w + 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--w", type=int, default=7, help="separator variables")
    ap.add_argument("--d", type=int, default=10, help="domain size")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="a tiny bucket, once (checks the script runs)")
    args = ap.parse_args()
    if args.quick:
        args.w, args.repeat = 4, 1
    mb, inputs, domains = standard_bucket(args.w, args.d)
    engine = NumpyEngine()
    top = 1 << 40
    times = []
    for _ in range(args.repeat):
        t = time.perf_counter()
        out = engine.eliminate(mb, inputs, domains, top, True)
        times.append(time.perf_counter() - t)
    # spot-check against a direct evaluation of a few rows
    rng = np.random.default_rng(1)
    for _ in range(20):
        row = tuple(int(x) for x in rng.integers(0, args.d, size=args.w))
        direct = min(sum(int(t[x, row[i]]) for i, (t, _) in enumerate(inputs)) for x in range(args.d))
        assert out[row] == direct
    best = min(times)
    rate = mb.joint_entries / best
    print(f"bucket w={args.w} d={args.d}: {mb.joint_entries:.3g} joint entries, best {best:.3f} s "
          f"-> {rate:.3g} entries/s (one core)")
    write_result("cpu_engine", cpu_name(), host=platform.node(), cpus_used=1, w=args.w, d=args.d,
                 joint_entries=mb.joint_entries, times_s=times, best_s=best, entries_per_s=rate,
                 numpy=np.__version__)


if __name__ == "__main__":
    main()
