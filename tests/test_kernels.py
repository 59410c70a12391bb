"""Kernel source generation on the CPU: arithmetic mode, index width, clamping, tiling, caching.

Whether the generated kernels compute the right messages is tested on a GPU
(test_gpu.py); here, what the generator decides for a bucket signature.
"""
import re

import numpy as np
import pytest

from gpusolve.engines.kernels import (BLOCK, GENERIC_MAX_OPS, TILE_MAX, assign_source, fused_source, generic_descriptor,
                                      generic_source, kernel_mode)
from gpusolve.engines.row_kernels import pieces_gather_source, segment_min_source


def c_order_strides(dims):
    out, s = [], 1
    for d in reversed(dims):
        out.append(s)
        s *= d
    return tuple(reversed(out))


def bucket(dims, d, mode="i64", clamp=False, stage=True, op="min"):
    """fused_source for one input holding every output axis and the eliminated variable (last)."""
    full = c_order_strides(tuple(dims) + (d,))
    return fused_source(mode, clamp, d, tuple(dims), (full[:-1],), (full[-1],), stage, op)


def accumulators(source: str) -> int:
    return len(set(re.findall(r"\bb(\d+) =", source)))


def test_kernel_mode_picks_the_narrowest_safe_arithmetic():
    assert kernel_mode(3, np.inf, False) == ("f64", False)
    assert kernel_mode(3, 1000, True) == ("i32", False)
    assert kernel_mode(2, (1 << 30), True) == ("i64", False)  # 2^31 reaches int32's range
    assert kernel_mode(3, (1 << 62) - 1, True) == ("i64", True)  # the sum could overflow int64


def test_index_width_widens_only_past_int32():
    small = bucket((10, 10, 10), 10).source
    assert "unsigned int r" in small and "long long d0" not in small
    wide = bucket((1 << 16, 1 << 16), 2).source  # 2^32 output rows
    assert "unsigned long long r" in wide and "const long long d0" in wide


def test_an_input_beyond_int32_offsets_widens_the_index():
    d = 1 << 22
    dims = (1 << 10,)  # few rows, but the input spans 2^32 entries
    src = fused_source("i64", False, d, dims, ((d,),), (1,), True, "min").source
    assert "unsigned long long r" in src


def test_clamp_after_every_addition_only_when_asked():
    two = (c_order_strides((5, 5))[:1],) * 2
    clamp = fused_source("i64", True, 5, (5,), two, (1, 1), True, "min").source
    plain = fused_source("i64", False, 5, (5,), two, (1, 1), True, "min").source
    assert "s = s < top ? s : top;" in clamp and "s = s < top ? s : top;" not in plain
    assert "b0 = b0 < top ? b0 : top;" in plain  # the final clamp of integer modes


def test_float_messages_are_not_clamped():
    assert "< top ? b0 : top" not in bucket((4, 4), 3, mode="f64").source


def test_a_thread_owns_the_trailing_axes_up_to_tile_max_rows():
    assert accumulators(bucket((10, 10, 10), 10).source) == 10  # 10 * 10 > TILE_MAX
    assert accumulators(bucket((4, 4, 3), 2).source) == 12  # 4 * 4 * 3 > TILE_MAX, 4 * 3 fits
    assert accumulators(bucket((3, 17), 2).source) == 1  # 17: no divisor to split by


def test_a_long_last_axis_is_split_into_tiles():
    k = bucket((4, 64), 3)
    assert accumulators(k.source) == TILE_MAX  # 64 = 4 x 16
    assert k.n_blocks == -(-(4 * 4) // BLOCK)


def test_grid_covers_every_tile():
    k = bucket((100, 100, 7), 2)  # tile 7, 10^4 tiles
    assert k.n_blocks == -(-10_000 // BLOCK)


def test_staging_through_shared_memory_is_optional():
    assert "__shared__" in bucket((8, 8), 2, stage=True).source
    assert "__shared__" not in bucket((8, 8), 2, stage=False).source


def test_ops_choose_initial_value_and_comparison():
    assert "s < b0 ? s : b0" in bucket((4,), 3, op="min").source
    assert "s > b0 ? s : b0" in bucket((4,), 3, op="max").source
    lse = bucket((4,), 3, mode="f64", op="lse").source
    assert "exp10" in lse and "log10(e0)" in lse
    with pytest.raises(ValueError):
        bucket((4,), 3, mode="i64", op="lse")


def test_source_is_named_by_its_hash_and_cached():
    a, b = bucket((6, 5), 4), bucket((6, 5), 4)
    assert a is b  # lru_cache: a signature seen before costs a look-up
    assert re.fullmatch(r"be_[0-9a-f]{20}", a.name) and f"void __launch_bounds__({BLOCK}) {a.name}(" in a.source
    assert a.key == ("i64", False, 4, (6, 5), ((20, 4),), (1,), True, "min")
    assert bucket((6, 5), 4, mode="i32").name != a.name
    assert a.source.count("{") == a.source.count("}")


def test_segment_min_source_per_cost_type():
    i64, f64 = segment_min_source("i64"), segment_min_source("f64")
    assert "atomicMin(out_costs + r, costs[i]);" in i64.source and "atomicCAS" not in i64.source
    assert "atomicCAS(" in f64.source and "atomicMin(" not in f64.source  # CUDA has no atomicMin on doubles
    assert i64.name != f64.name and i64.key == ("segment_min", "i64")
    for k in (i64, f64):
        assert not re.search(r"\b(COST|NAME|TAKE)\b", k.source) and k.source.count("{") == k.source.count("}")


def test_pieces_gather_source_copies_words_of_the_item_size():
    kernels = {n: pieces_gather_source(n) for n in (1, 2, 4, 8)}
    words = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}
    for n, k in kernels.items():
        assert f"typedef {words[n]} W;" in k.source and k.key == ("gather_pieces", n)
        assert not re.search(r"\b(WORD|NAME)\b", k.source) and k.source.count("{") == k.source.count("}")
    assert len({k.name for k in kernels.values()}) == 4 and pieces_gather_source(8) is kernels[8]
    with pytest.raises(KeyError):
        pieces_gather_source(3)


def test_assign_source_per_cost_type():
    i64, f64 = assign_source("i64"), assign_source("f64")
    assert "c = c < top ? c : top;" in i64.source and "isnan" not in i64.source
    assert "isnan" in f64.source and "c = c + t;" in f64.source
    assert i64.name.startswith("assign_") and i64.name != f64.name and i64.n_blocks == 1
    assert i64.key == ("assign", "i64")
    for k in (i64, f64):
        assert k.source.count("{") == k.source.count("}")


def run_descriptor(desc, memory, mode, clamp, op, top):
    """What generic_source's kernel computes, read from the descriptor as the kernel reads it:
    `memory` maps an input's address to its buffer in memory order."""
    n, m, d, rows = (int(x) for x in desc[1:5])
    assert desc[0] == desc.size
    dims = [int(x) for x in desc[5:5 + m]]
    ins = desc[5 + m:].reshape(n, m + 2)
    digits = np.unravel_index(np.arange(rows), dims) if m else ()
    offs = [sum((dg * st for dg, st in zip(digits, row[2:])), np.zeros(rows, np.int64)) for row in ins]
    best = None
    for v in range(d):
        s = memory[ins[0, 0]][offs[0] + v * ins[0, 1]]
        for j in range(1, n):
            s = s + memory[ins[j, 0]][offs[j] + v * ins[j, 1]]
            if clamp:
                s = np.minimum(s, top)
        if best is None:
            best = s
        elif op == "lse":
            with np.errstate(divide="ignore"):
                best = -np.log10(10.0 ** -best + 10.0 ** -s)
        else:
            best = np.maximum(best, s) if op == "max" else np.minimum(best, s)
    return np.minimum(best, top) if mode == "i64" else best


@pytest.mark.parametrize("seed", range(60))
def test_generic_descriptor_reads_every_bucket_as_eliminate_dense(seed):
    """The descriptor's layout, interpreted as the kernel does, gives eliminate_dense's message
    for random buckets (mixed C and Fortran inputs, int64 with top, float)."""
    from helpers import random_bucket

    from gpusolve.engines.dense import eliminate_dense
    rng = np.random.default_rng(seed)
    integer = seed % 3 != 2
    op = "max" if seed % 5 == 4 else ("lse" if not integer and seed % 2 else "min")
    mb, inputs, domains, top = random_bucket(rng, integer=integer)
    ref = eliminate_dense(np, mb.var, mb.scope, inputs, domains, top, integer, None, op)
    ops = sorted(inputs, key=lambda ts: ts[0].size)
    memory, addresses, strides, vstrides = {}, [], [], []
    for j, (t, scope) in enumerate(ops):
        address = (j + 1) << 40
        memory[address] = t.ravel(order="K")
        elem = [st // t.itemsize for st in t.strides]
        strides.append(tuple(elem[scope.index(u)] if u in scope else 0 for u in mb.scope))
        vstrides.append(elem[scope.index(mb.var)])
        addresses.append(address)
    desc = generic_descriptor(addresses, strides, vstrides, tuple(domains[u] for u in mb.scope), domains[mb.var])
    mode, clamp = kernel_mode(len(ops), top, integer)
    got = run_descriptor(desc, memory, "f64" if mode == "f64" else "i64", clamp, op, top).reshape(ref.shape)
    if op == "lse":
        assert np.allclose(got, ref, equal_nan=True)
    else:
        assert np.array_equal(got, ref)


def test_generic_source_is_one_kernel_per_arithmetic_class():
    a = generic_source("i64", False, "min")
    assert generic_source("i64", False, "min") is a
    names = {generic_source(m, c, o).name for m in ("i64", "f64") for c in (False, True) for o in ("min", "max")}
    assert len(names) == 8 and "s = s < top ? s : top;" in generic_source("i64", True).source
    assert "exp10" in generic_source("f64", False, "lse").source
    with pytest.raises(ValueError, match="lse"):
        generic_source("i64", False, "lse")
    with pytest.raises(ValueError, match="exceed"):
        generic_descriptor([0] * (GENERIC_MAX_OPS + 1), [()] * (GENERIC_MAX_OPS + 1), [1] * (GENERIC_MAX_OPS + 1), (), 2)


def test_every_shape_generic_kernel_ships_prebuilt_for_each_architecture():
    """A change to the generic or assignment kernels' source renames them (the name holds a hash of
    the source): their cubins must be rebuilt with `make cubins` (CuPy's NVRTC, no GPU needed)."""
    from gpusolve.cuda import cubins
    from gpusolve.engines.kernels import shape_generic_specs
    wanted = {cubins.path(s.name, a) for s in shape_generic_specs() for a in cubins.ARCHS}
    shipped = set(cubins.FOLDER.glob("*.cubin"))
    assert not wanted - shipped, f"run `make cubins`: missing {sorted(p.name for p in wanted - shipped)}"
    assert not shipped - wanted, f"stale cubins: {sorted(p.name for p in shipped - wanted)}"
    assert all(p.read_bytes()[:4] == b"\x7fELF" for p in shipped)  # device code: ELF objects


@pytest.mark.parametrize("capability, arch", [("90", "sm_90"), ("80", "sm_80"), ("86", "sm_80"), ("89", "sm_80"),
                                              ("75", None), ("100", None), ("120", None)])
def test_a_cubin_is_used_only_where_its_architecture_runs(tmp_path, monkeypatch, capability, arch):
    from gpusolve.cuda import cubins
    monkeypatch.setattr(cubins, "FOLDER", tmp_path)
    for a in cubins.ARCHS:
        cubins.path("k", a).write_bytes(b"\x7fELF")
    assert cubins.find("k", capability) == (None if arch is None else tmp_path / f"k.{arch}.cubin")
    assert cubins.find("other", capability) is None
