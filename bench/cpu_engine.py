"""NumPy-engine throughput on a fixed bucket: joint-table entries evaluated per second, by threads.

The bucket: one eliminated variable and W separator variables, domain D, with
one binary cost table pairing the eliminated variable with each separator
variable (GpuBE's standard bucket, scaled to one CPU core). Run on 1, 2, 4, ...
threads up to --threads (default: every core): the gain of each thread past
the first is engines/registry.py's THREAD_GAIN measure. Prints the figures and writes JSON
to bench/results/.
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
from gpusolve.plan.buckets import MiniBucket  # noqa: E402
from gpusolve.host import cores  # noqa: E402


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
    ap.add_argument("--threads", type=int, default=None, help="most threads (default: one per core)")
    ap.add_argument("--quick", action="store_true", help="a tiny bucket, once (checks the script runs)")
    args = ap.parse_args()
    if args.quick:
        args.w, args.repeat = 4, 1
    mb, inputs, domains = standard_bucket(args.w, args.d)
    top = 1 << 40
    most = args.threads or cores()
    counts = sorted({1, most} | {t for t in (2, 4, 8, 16, 32, 64) if t < most})
    rows = []
    for threads in counts:
        engine = NumpyEngine(threads)
        times = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            out = engine.eliminate(mb, inputs, domains, top, True)
            times.append(time.perf_counter() - t)
        check(out, inputs, args)
        best = min(times)
        rate = mb.joint_entries / best
        gain = (rate / rows[0]["entries_per_s"] - 1) / (threads - 1) if threads > 1 else None
        rows.append({"threads": threads, "times_s": times, "best_s": best, "entries_per_s": rate,
                     "gain_per_thread": gain})
        print(f"bucket w={args.w} d={args.d}: {mb.joint_entries:.3g} joint entries, {threads} thread(s): best "
              f"{best:.3f} s -> {rate:.3g} entries/s" + (f", each thread past the first adds {gain:.2f}x "
                                                         "the one-thread rate" if gain is not None else ""))
    write_result("cpu_engine", cpu_name(), host=platform.node(), cpus=cores(), w=args.w, d=args.d,
                 joint_entries=mb.joint_entries, rows=rows, numpy=np.__version__)


def check(out, inputs, args):
    """Spot-check against a direct evaluation of a few rows."""
    rng = np.random.default_rng(1)
    for _ in range(20):
        row = tuple(int(x) for x in rng.integers(0, args.d, size=args.w))
        direct = min(sum(int(t[x, row[i]]) for i, (t, _) in enumerate(inputs)) for x in range(args.d))
        assert out[row] == direct

if __name__ == "__main__":
    main()
