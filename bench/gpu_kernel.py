"""Fused GPU kernel throughput on the standard bucket, next to the device's copy bandwidth.

The bucket (issue 3, benchmark 1): 9 separator variables plus the eliminated
one, domain 10, six binary cost tables each pairing the eliminated variable
with one separator variable. By default the tables pair with the six
fastest-varying separator axes, the placement least favourable to the kernel's
hoisting (one input changes on every output row); `slowest` pairs them with
the six slowest. Figure: joint-table entries per second, d^(w+1) / kernel
time (median of CUDA-event timings after a warm-up). Each variant's output is
poisoned first and spot-checked against direct evaluation; the shape-generic kernel
(compiled once for every shape) runs the same bucket and must write the same message.
"""
from __future__ import annotations

import argparse

import numpy as np
from common import time_events, write_result

from gpusolve.engines.cupy_engine import CupyEngine, _Operand


def copy_bandwidth(cp, nbytes=4 << 30, repeat=10):
    """Device-to-device copy, bytes read plus written per second; and pinned host<->device."""
    src = cp.random.random(nbytes // 8)
    dst = cp.empty_like(src)
    ms, _ = time_events(cp, lambda: dst.__setitem__(Ellipsis, src), repeat)
    d2d = 2 * src.nbytes / (ms / 1e3)
    import cupyx
    host = cupyx.empty_pinned((1 << 28) // 8, dtype=np.float64)
    host[:] = 1.0
    dev = cp.empty(host.shape, dtype=host.dtype)
    stream = cp.cuda.get_current_stream()
    rt = cp.cuda.runtime
    h2d_ms, _ = time_events(cp, lambda: rt.memcpyAsync(dev.data.ptr, host.ctypes.data, host.nbytes,
                                                       rt.memcpyHostToDevice, stream.ptr), repeat)
    d2h_ms, _ = time_events(cp, lambda: rt.memcpyAsync(host.ctypes.data, dev.data.ptr, host.nbytes,
                                                       rt.memcpyDeviceToHost, stream.ptr), repeat)
    return {"device_to_device_Bps": d2d, "host_to_device_pinned_Bps": host.nbytes / (h2d_ms / 1e3),
            "device_to_host_pinned_Bps": host.nbytes / (d2h_ms / 1e3)}


def dense_rate(cp, rng, w=7, d=10):
    """The shared dense step on CuPy arrays: what buckets below FUSE_MIN run (no compilation)."""
    from gpusolve.plan.buckets import MiniBucket
    engine = CupyEngine(fuse_min=1 << 62, generic=False)
    var, sep = 0, tuple(range(w, 0, -1))
    inputs = [(cp.asarray(rng.integers(0, 101, size=(d, d))), (var, s)) for s in sep[-6:]]
    mb = MiniBucket(0, var, (), (), sep, d ** w, d ** (w + 1))
    ms, _ = time_events(cp, lambda: engine.eliminate(mb, inputs, [d] * (w + 1), 601, True), 5)
    assert engine.stats["fused"] == 0
    return {"w": w, "d": d, "joint_entries": d ** (w + 1), "ms": ms, "joint_entries_per_s": d ** (w + 1) / (ms / 1e3)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--w", type=int, default=9, help="separator variables")
    ap.add_argument("--d", type=int, default=10, help="domain size")
    ap.add_argument("--tables", type=int, default=6, help="binary input tables")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="only the default variant, on a tiny bucket")
    args = ap.parse_args()
    if args.quick:
        args.w, args.repeat = 6, 2
    import cupy as cp
    engine = CupyEngine()
    w, d = args.w, args.d
    rng = np.random.default_rng(0)
    var, sep = 0, tuple(range(w, 0, -1))
    domains = [d] * (w + 1)
    joint = d ** (w + 1)
    out = cp.empty(d ** w, dtype=np.int64)
    outf = out.view(np.float64)
    copies = copy_bandwidth(cp, 64 << 20, 2) if args.quick else copy_bandwidth(cp)
    rows = []
    placements = {"fastest": sep[-args.tables:], "slowest": sep[:args.tables]}
    variants = [("fastest", "i32", True), ("fastest", "i64", True), ("fastest", "f64", True),
                ("fastest", "i32", False), ("slowest", "i32", True)]
    if args.quick:
        variants = variants[:1]
    for placement, mode, stage in variants:
        paired = placements[placement]
        if mode == "f64":
            tables = [rng.random((d, d)) * 100 for _ in paired]
            for t in tables:
                t[rng.random((d, d)) < 0.5] = np.inf
            top, integer = np.inf, False
        else:
            tables = [rng.integers(0, 101, size=(d, d)).astype(np.int64) for _ in paired]
            top = 601 if mode == "i32" else (1 << 40)  # i32 when 6 * top < 2^31
            for t in tables:
                t[rng.random((d, d)) < 0.5] = top
            integer = True
        ops = [_Operand(cp.asarray(t), (var, s), True) for t, s in zip(tables, paired)]
        engine.stage = stage
        compile_before = engine.compile_s
        out.fill(-1)
        target = outf if mode == "f64" else out
        ms, times = time_events(cp, lambda: engine.launch(target, ops, {}, var, sep, domains, top, integer),
                                args.repeat)
        compile_s = engine.compile_s - compile_before
        host = target[:1000].get()  # first rows, then random ones
        picks = rng.integers(0, d ** w, size=2000)
        sample = target[cp.asarray(picks)].get()
        for idx, got in list(zip(range(1000), host[:1000])) + list(zip(picks, sample)):
            digits = [(int(idx) // d ** (w - 1 - a)) % d for a in range(w)]
            value = dict(zip(sep, digits))
            sums = [sum(t[x, value[s]] for t, s in zip(tables, paired)) for x in range(d)]
            expect = min(sums) if mode == "f64" else min(min(sums), top)
            assert got == expect, (placement, mode, idx, got, expect)
        rate = joint / (ms / 1e3)
        fused_out = target.copy()
        target.fill(-1)
        gms, _ = time_events(cp, lambda: engine.launch_generic(target, ops, var, sep, domains, top, integer),
                             args.repeat)
        assert bool((target == fused_out).all()), "the generic kernel differs from the specialised one"
        rows.append({"placement": placement, "mode": mode, "stage": stage, "kernel_ms_median": ms,
                     "kernel_ms_all": times, "joint_entries_per_s": rate, "compile_s": compile_s,
                     "output_write_Bps": out.nbytes / (ms / 1e3), "generic_ms_median": gms,
                     "generic_joint_entries_per_s": joint / (gms / 1e3)})
        print(f"{placement:8} {mode} stage={stage!s:5} {ms:8.3f} ms  {rate:.3e} joint entries/s  "
              f"(output written at {out.nbytes / (ms / 1e3) / 1e9:.0f} GB/s; compile {compile_s:.3f} s); "
              f"generic kernel {gms:8.3f} ms  {joint / (gms / 1e3):.3e} joint entries/s")
    # A domain the kernels above were not compiled for: the engine reuses a compiled kernel by shape.
    dense = dense_rate(cp, rng, w=min(w, 7), d=d + 1)
    print(f"dense CuPy step (eliminate_dense, no compiled kernel) on w={dense['w']}, d={dense['d']}: "
          f"{dense['joint_entries_per_s']:.3e} joint entries/s")
    print(f"device-to-device copy {copies['device_to_device_Bps'] / 1e9:.0f} GB/s (read+write); pinned "
          f"H2D {copies['host_to_device_pinned_Bps'] / 1e9:.1f} GB/s, D2H "
          f"{copies['device_to_host_pinned_Bps'] / 1e9:.1f} GB/s")
    write_result("gpu_kernel", engine.device_name,
                 bucket={"separator_vars": w, "domain": d, "binary_tables": args.tables,
                         "joint_entries": joint, "output_bytes": out.nbytes},
                 copy_bandwidth=copies, variants=rows, dense_cupy_step=dense,
                 best_joint_entries_per_s=max(r["joint_entries_per_s"] for r in rows
                                              if r["placement"] == "fastest"))


if __name__ == "__main__":
    main()
