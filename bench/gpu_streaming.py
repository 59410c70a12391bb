"""Chunked streaming: buckets at least 4x larger than a forced device budget.

Issue 3, benchmark 3. A standard bucket (binary tables pairing the eliminated
variable with separator variables) whose message exceeds `gpu_mem_limit` is
computed in chunks on two streams into pinned host memory; then the next
variable is eliminated from that host-resident message, which streams it back
in slices. Reports achieved host<->device bandwidth, the fraction of
transfer time during which a kernel ran, and the same for the shorter of
copies and kernels (CUDA events per chunk, as unions of intervals over both
streams), and checks the streamed messages against the in-core kernel.
The sparse streamed bucket's throughput is bench/sparse.py's streaming case.
"""
from __future__ import annotations

import argparse

import numpy as np
from common import gpu_name, write_result

from gpusolve.engines.cupy_engine import CupyEngine
from gpusolve.plan.buckets import MiniBucket


def summarize(entry):
    """Copy and kernel times are unions of per-chunk event intervals over both streams (the
    pipeline's log record, engines/streaming.py)."""
    copy, kernel, overlap = entry["copy_s"], entry["work_s"], entry["overlap_s"]
    moved = entry["h2d_bytes"] + entry["d2h_bytes"]
    return dict(entry, bandwidth_during_copies_Bps=moved / copy if copy else 0.0,
                bandwidth_over_span_Bps=moved / entry["span_s"] if entry["span_s"] else 0.0,
                hidden_fraction_of_shorter=overlap / min(kernel, copy) if min(kernel, copy) else 0.0,
                transfer_hidden_fraction=overlap / copy if copy else 0.0)


def case(w, d, dvar, budget, rng):
    import cupy as cp
    var, sep = 0, tuple(range(w, 0, -1))
    domains = [dvar] + [d] * w
    tables = [rng.integers(0, 101, size=(dvar, d)).astype(np.int64) for _ in range(6)]
    paired = sep[-6:]
    top = 1 << 40
    out_entries = d ** w
    mb = MiniBucket(0, var, (), (), sep, out_entries, out_entries * dvar)
    ref_engine = CupyEngine(fuse_min=0)
    ref = ref_engine.eliminate(mb, [(t, (var, s)) for t, s in zip(tables, paired)], domains, top, True)
    engine = CupyEngine(gpu_mem_limit=budget, fuse_min=0)
    inputs = [(engine.put(t), (var, s)) for t, s in zip(tables, paired)]
    msg = engine.eliminate(mb, inputs, domains, top, True)
    assert engine.stats["streamed"] == 1
    assert np.array_equal(engine.get(msg).ravel(), ref.ravel().get()), "streamed message differs"
    first = summarize(engine.stream_log[-1])
    # eliminate the next variable from the host-resident message: inputs stream in as slices
    nxt = sep[-1]
    mb2 = MiniBucket(1, nxt, (), (0,), sep[:-1], out_entries // d, out_entries)
    msg2 = engine.eliminate(mb2, [(msg, sep)], domains, top, True)
    expect = ref.min(axis=-1) if ref.ndim else ref
    assert np.array_equal(engine.get(msg2).ravel(), expect.ravel().get()), "stream-in message differs"
    second = summarize(engine.stream_log[-1])
    del ref, ref_engine
    cp.get_default_memory_pool().free_all_blocks()
    return {"separator_vars": w, "domain": d, "eliminated_domain": dvar, "budget_bytes": budget,
            "message_bytes": out_entries * 8, "ratio_message_to_budget": out_entries * 8 / budget,
            "stream_out": first, "stream_in": second}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one tiny case (checks the script runs)")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    cases = [(8, 10, 10, 180 << 20), (8, 10, 1000, 180 << 20), (9, 10, 10, 1800 << 20)]
    if args.quick:
        cases = [(6, 10, 10, 2 << 20)]
    results = []
    for w, d, dvar, budget in cases:
        r = case(w, d, dvar, budget, rng)
        results.append(r)
        for what in ("stream_out", "stream_in"):
            e = r[what]
            print(f"w={w} d={d} D={dvar} message {r['message_bytes'] / 2**20:.0f} MiB, budget "
                  f"{budget / 2**20:.0f} MiB, {what}: {e['chunks']} chunks, copies {e['copy_s'] * 1e3:.1f} ms, "
                  f"kernels {e['work_s'] * 1e3:.1f} ms, span {e['span_s'] * 1e3:.1f} ms, "
                  f"{e['GB_per_s']:.1f} GB/s over the step ({e['seconds'] * 1e3:.1f} ms), "
                  f"{e['bandwidth_during_copies_Bps'] / 1e9:.1f} GB/s while copying, "
                  f"hidden {100 * e['hidden_fraction_of_shorter']:.0f}% of the shorter, "
                  f"{100 * e['transfer_hidden_fraction']:.0f}% of transfer time; "
                  f"pinned alloc {e['pinned_alloc_s']:.2f} s")
    write_result("gpu_streaming", gpu_name(), cases=results)


if __name__ == "__main__":
    main()
