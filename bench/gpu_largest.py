"""The largest single bucket the fused kernel finishes in core on this device (issue 3, benchmark 4).

A standard bucket grown until its int64 message nearly fills device memory:
`--w` (9) separator variables of domain 10 plus one of domain `--extra`, an
eliminated variable of domain `--dvar`, six binary tables pairing it with the
six fastest-varying separator axes. Times one run with CUDA events (after the
compile) and spot-checks rows against direct evaluation.
"""
from __future__ import annotations

import argparse

import numpy as np
from common import time_events, write_result

from gpusolve.engines.cupy_engine import CupyEngine, _Operand


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--w", type=int, default=9, help="separator variables of domain 10")
    ap.add_argument("--extra", type=int, default=8, help="domain of the last separator variable")
    ap.add_argument("--dvar", type=int, default=100, help="domain of the eliminated variable")
    ap.add_argument("--quick", action="store_true", help="a tiny bucket (checks the script runs)")
    args = ap.parse_args()
    if args.quick:
        args.w, args.extra, args.dvar = 6, 2, 10
    import cupy as cp
    engine = CupyEngine()
    rng = np.random.default_rng(0)
    w = args.w
    var, sep = 0, tuple(range(w + 1, 0, -1))
    domains = [args.dvar] + [10] * w + [args.extra]  # variable w + 1 (slowest axis) has the extra domain
    rows = 10 ** w * args.extra
    paired = sep[-6:]
    tables = [rng.integers(0, 101, size=(args.dvar, 10)).astype(np.int64) for _ in paired]
    top = 601
    ops = [_Operand(cp.asarray(t), (var, s), True) for t, s in zip(tables, paired)]
    out = cp.empty(rows, dtype=np.int64)
    out.fill(-1)
    ms, times = time_events(cp, lambda: engine.launch(out, ops, {}, var, sep, domains, top, True), 1)
    picks = rng.integers(0, rows, size=2000)
    got = out[cp.asarray(picks)].get()
    for idx, value in zip(picks, got):
        digits = [(int(idx) // 10 ** (w - a)) % 10 for a in range(w + 1)]  # the last w axes have domain 10
        digits[0] = int(idx) // 10 ** w
        at = dict(zip(sep, digits))
        expect = min(min(sum(int(t[x, at[s]]) for t, s in zip(tables, paired)) for x in range(args.dvar)), top)
        assert value == expect, (idx, value, expect)
    joint = rows * args.dvar
    print(f"largest in-core bucket: {joint:.2e} joint entries, message {rows:.2e} entries = "
          f"{out.nbytes / 2**30:.1f} GiB, kernel {ms / 1e3:.3f} s ({joint / (ms / 1e3):.2e} joint entries/s)")
    write_result("gpu_largest", engine.device_name, joint_entries=joint, output_entries=rows,
                 output_bytes=out.nbytes, kernel_s=ms / 1e3, joint_entries_per_s=joint / (ms / 1e3),
                 compile_s=engine.compile_s)


if __name__ == "__main__":
    main()
