"""GPU engine against the CPU engine: identical messages, bounds and assignments.

Every test needs CuPy and a CUDA device and is skipped without them. The fused
kernels are compared with the NumPy reference `eliminate_dense` bit for bit
(float sums keep its order), whole solves with the NumPy engine, and forced
streaming (a tiny device budget) with both.
"""

import numpy as np
import pytest
from helpers import random_bucket, random_problem

from gpusolve.order import graph
from gpusolve.engines.dense import eliminate_dense
from gpusolve.engines.cupy_engine import HostTable
from gpusolve.engines.numpy_engine import NumpyEngine
from gpusolve.model.problem import CostFunction, Problem, Variable, condition
from gpusolve.plan.buckets import build_plan
from gpusolve.inference.eliminate import assign, run_plan
from gpusolve.schedule.solve import Options, solve

pytestmark = pytest.mark.gpu


def engine(**kw):
    from gpusolve.engines.cupy_engine import CupyEngine
    return CupyEngine(**kw)


@pytest.mark.parametrize("seed", range(120))
def test_fused_kernel_equals_eliminate_dense(cupy, seed):
    rng = np.random.default_rng(seed)
    integer = seed % 3 != 2
    op = "max" if seed % 5 == 4 else "min"
    mb, inputs, domains, top = random_bucket(rng, integer=integer)
    ref = eliminate_dense(np, mb.var, mb.scope, inputs, domains, top, integer, None, op)
    eng = engine(fuse_min=0, stage=seed % 4 != 0)
    on_device = [(cupy.asarray(t) if i % 2 else t, s) for i, (t, s) in enumerate(inputs)]
    got = eng.get(eng.eliminate(mb, on_device, domains, top, integer, None, op))
    assert got.dtype == ref.dtype and got.shape == ref.shape
    assert np.array_equal(got, ref)
    assert eng.stats["fused"] == 1


def test_prebuilt_kernels_are_loaded_and_equal_compiled_ones(cupy, monkeypatch):
    """On an architecture cuda/cubins.py ships, the shape-generic kernels come from their cubins
    (no NVRTC); compiled from source instead, every message is the same: the NumPy reference's."""
    from gpusolve.cuda import cubins, loader
    from gpusolve.cuda.runtime import device_info
    from gpusolve.engines.kernels import shape_generic_specs
    rng = np.random.default_rng(77)
    buckets = [random_bucket(rng, integer=bool(i % 2)) for i in range(40)]

    def run():
        monkeypatch.setattr(loader, "_KERNELS", {})
        eng = engine(stage=False)
        outs = [eng.get(eng.eliminate(mb, [(cupy.asarray(t), s) for t, s in inputs], domains, top, i % 2 == 1))
                for i, (mb, inputs, domains, top) in enumerate(buckets)]
        return eng, outs
    prebuilt, a = run()
    capability = device_info(cupy.cuda.runtime.getDevice())[2]
    if not any(cubins.find(s.name, capability) for s in shape_generic_specs()):
        pytest.skip(f"no cubin ships for compute capability {capability}")
    assert prebuilt.kernels.prebuilt >= 2 and prebuilt.kernels.compiled == 0
    monkeypatch.setattr(cubins, "find", lambda name, capability: None)
    compiled, b = run()
    assert compiled.kernels.prebuilt == 0 and compiled.kernels.compiled >= 2
    assert all(x.dtype == y.dtype and np.array_equal(x, y) for x, y in zip(a, b))
    ref = [eliminate_dense(np, mb.var, mb.scope, inputs, domains, top, i % 2 == 1)
           for i, (mb, inputs, domains, top) in enumerate(buckets)]
    assert all(x.dtype == y.dtype and np.array_equal(x, y) for x, y in zip(a, ref))


@pytest.mark.parametrize("seed", range(80))
def test_generic_kernel_equals_eliminate_dense(cupy, seed):
    """The shape-generic kernel, one compiled kernel for every bucket shape: bit-equal messages."""
    rng = np.random.default_rng(500 + seed)
    integer = seed % 3 != 2
    op = "max" if seed % 5 == 4 else ("lse" if not integer and seed % 2 else "min")
    mb, inputs, domains, top = random_bucket(rng, integer=integer)
    ref = eliminate_dense(np, mb.var, mb.scope, inputs, domains, top, integer, None, op)
    eng = engine(stage=False)
    got = eng.get(eng.eliminate(mb, [(cupy.asarray(t), s) for t, s in inputs], domains, top, integer, None, op))
    assert eng.stats["generic"] == 1 and got.dtype == ref.dtype and got.shape == ref.shape
    if op == "lse":  # powers and logarithms may round differently on the device
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
    else:
        assert np.array_equal(got, ref)


def test_small_bucket_reuses_a_compiled_kernel(cupy):
    """Below fuse_min a bucket takes the generic kernel (or, without it, the dense CuPy step)
    unless a kernel specialised to its shape is compiled already."""
    rng = np.random.default_rng(7)
    mb, inputs, domains, top = random_bucket(rng)
    ref = eliminate_dense(np, mb.var, mb.scope, inputs, domains, top, True)
    fresh = engine(stage=False)  # a kernel signature no other test compiles
    assert np.array_equal(fresh.get(fresh.eliminate(mb, inputs, domains, top, True)), ref)
    assert (fresh.stats["generic"], fresh.stats["fused"]) == (1, 0)
    dense = engine(stage=False, generic=False)
    assert np.array_equal(dense.get(dense.eliminate(mb, inputs, domains, top, True)), ref)
    assert (dense.stats["dense"], dense.stats["fused"]) == (1, 0)
    engine(fuse_min=0, stage=False).eliminate(mb, inputs, domains, top, True)
    reuse = engine(stage=False)
    assert np.array_equal(reuse.get(reuse.eliminate(mb, inputs, domains, top, True)), ref)
    assert (reuse.stats["generic"], reuse.stats["fused"], reuse.kernels.compiled) == (0, 1, 0)


def test_generic_descriptors_wrap_around_the_ring(cupy):
    """More descriptors than the pinned ring holds: slots are reused only after the stream passed them."""
    from gpusolve.engines import cupy_engine
    rng = np.random.default_rng(11)
    cases = [random_bucket(rng) for _ in range(30)]
    eng = engine()
    ring = cupy_engine.DESCRIPTOR_RING
    cupy_engine.DESCRIPTOR_RING = 256  # a descriptor here holds at most 66
    try:
        outs = [eng.eliminate(mb, [(cupy.asarray(t), s) for t, s in inputs], domains, top, True)
                for mb, inputs, domains, top in cases]
    finally:
        cupy_engine.DESCRIPTOR_RING = ring
    for (mb, inputs, domains, top), out in zip(cases, outs):
        assert np.array_equal(eng.get(out), eliminate_dense(np, mb.var, mb.scope, inputs, domains, top, True))


@pytest.mark.parametrize("seed", range(40))
def test_streamed_bucket_equals_eliminate_dense(cupy, seed):
    """A device budget smaller than one chunk pair forces row chunks and host-resident inputs."""
    rng = np.random.default_rng(1000 + seed)
    integer = seed % 3 != 2
    op = "min" if integer or seed % 2 else "lse"
    mb, inputs, domains, top = random_bucket(rng, integer=integer)
    ref = eliminate_dense(np, mb.var, mb.scope, inputs, domains, top, integer, None, op)
    # under out + inputs + workspace, so the bucket cannot run in core
    limit = int(rng.choice([mb.out_entries * 4, mb.out_entries * 8])) + 16
    eng = engine(gpu_mem_limit=limit)
    got = eng.get(eng.eliminate(mb, inputs, domains, top, integer, None, op))
    assert eng.stats["streamed"] == 1
    if op == "lse":  # powers and logarithms may round differently on the device
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
    else:
        assert np.array_equal(got, ref)


def test_put_many_is_one_buffer(cupy):
    rng = np.random.default_rng(0)
    tables = [rng.integers(0, 9, size=s) for s in [(3, 4), (5,), (2, 2, 2)]] + [rng.random((3, 3))]
    eng = engine()
    dev = eng.put_many(tables)
    assert all(isinstance(t, cupy.ndarray) for t in dev)
    assert all(np.array_equal(eng.get(d), t) for d, t in zip(dev, tables))
    assert dev[0].data.mem is dev[1].data.mem is dev[2].data.mem
    assert eng.device_bytes >= sum(t.nbytes for t in tables)


def test_a_small_plan_asked_on_the_gpu_is_placed_on_the_host(cupy):
    """A plan the CPU finishes before CUDA would start runs on the host; at --host-max 0 on the device, same answer."""
    problem = random_problem(np.random.default_rng(3), n_max=8, d_max=4)
    placed = solve(problem, Options(device="gpu"))
    forced = solve(problem, Options(device="gpu", host_max=0))
    assert placed.engine == "numpy" and "--host-max" in placed.device_note and forced.engine == "cupy"
    assert_same(placed, forced, problem)


def assert_same(a, b, problem=None):
    """Equal results. Two optimal assignments of equal cost may differ where the engines took
    different ways to them: local search (its random streams are the array module's), or a
    satisfaction problem that the GPU's predicted speed sends to exact BE and the CPU's to MAC
    search (gpube-8queens); then both are proven optimal and each costs its upper bound."""
    assert (a.status, a.lower_bound, a.upper_bound, a.z) == (b.status, b.lower_bound, b.upper_bound, b.z)
    if a.assignment != b.assignment:
        assert problem is not None and (a.search is not None or b.search is not None), (a, b)
        assert a.status == b.status == "optimal", (a, b)
        for r in (a, b):
            assert problem.to_file_value(problem.evaluate(r.assignment)) == r.upper_bound


@pytest.mark.parametrize("seed", range(200))
def test_solve_gpu_equals_cpu(cupy, seed):
    """Exact BE and MBE at every z, on the GPU engine's default path; every fifth seed also
    through a tiny --gpu-mem-limit (messages streamed to host memory)."""
    rng = np.random.default_rng(seed)
    problem = random_problem(rng, integer=seed % 4 != 3, n_components=1 + seed % 3)
    max_arity = max([f.arity for f in problem.functions] + [1])
    for z in [None] + list(range(max_arity, len(problem.variables) + 1)):
        cpu = solve(problem, Options(device="cpu", z=z))
        gpu = solve(problem, Options(device="gpu", host_max=0, z=z))
        assert gpu.engine == ("none" if cpu.engine == "none" else "cupy")  # none: preprocessing decided
        assert_same(gpu, cpu)
        if seed % 5 == 0:
            # Exact BE streamed through host memory runs after a bounded search unless search is off.
            streamed = Options(device="gpu", host_max=0, z=z, gpu_mem_limit=512, search=z is not None)
            assert_same(solve(problem, streamed), cpu)
            if z is None:
                anytime = solve(problem, Options(device="gpu", host_max=0, gpu_mem_limit=512))
                assert (anytime.status, anytime.lower_bound, anytime.upper_bound) == \
                    (cpu.status, cpu.lower_bound, cpu.upper_bound)


def run(problem, plan, eng):
    lower, tables, messages = run_plan(problem, plan, eng)
    if problem.is_forbidden(lower):
        return lower, None
    return lower, assign(problem, plan, eng, tables, messages)


def plan_for(problem, z=None):
    return build_plan(problem, graph.elimination_order(problem, "minfill"), z)


def tied_problem(rng, integer):
    """A random problem whose costs take few distinct values, so argmin ties are everywhere."""
    problem = random_problem(rng, n_max=8, d_max=6, f_max=12, integer=integer)
    if not integer:
        for f in problem.functions:
            f.table = np.where(np.isinf(f.table), np.inf, np.round(f.table * 2) / 2)
    if len(problem.variables) > 2 and rng.random() < 0.4:
        problem = condition(problem, {0: 0})
    return problem


def cpu_assignment(problem, plan):
    lower, tables, messages = run_plan(problem, plan, NumpyEngine())
    if problem.is_forbidden(lower):
        return None
    return assign(problem, plan, NumpyEngine(), tables, messages)


@pytest.mark.parametrize("seed", range(500, 560))
def test_assign_values_equals_numpy_assign(cupy, seed):
    """The one-kernel assignment picks solve.assign's values, ties to the lowest, at every z."""
    rng = np.random.default_rng(seed)
    problem = tied_problem(rng, integer=seed % 3 != 2)
    max_arity = max([f.arity for f in problem.functions] + [1])
    for z in [None] + list(range(max_arity, len(problem.variables) + 1)):
        plan = plan_for(problem, z)
        ref = cpu_assignment(problem, plan)
        if ref is None:
            continue
        eng = engine()
        _, tables, messages = run_plan(problem, plan, eng)
        assert eng.assign_values(problem, plan, tables, messages) == ref


@pytest.mark.parametrize("seed", range(600, 620))
def test_assign_values_host_tables(cupy, seed):
    """Messages streamed to host memory are uploaded for the walk when they fit, else it declines."""
    rng = np.random.default_rng(seed)
    problem = tied_problem(rng, integer=seed % 2 == 0)
    plan = plan_for(problem)
    ref = cpu_assignment(problem, plan)
    if ref is None:
        return
    eng = engine(gpu_mem_limit=256)
    _, tables, messages = run_plan(problem, plan, eng)
    got = eng.assign_values(problem, plan, tables, messages)
    assert got in (None, ref)
    if any(isinstance(t, HostTable) and t.host.nbytes > 256 for t in [*tables, *messages.values()]):
        assert got is None
    eng.budget = 1 << 30  # room again: every host table is uploaded
    assert eng.assign_values(problem, plan, tables, messages) == ref
    assert assign(problem, plan, eng, tables, messages) == ref


def test_assign_values_declines_sparse_tables(cupy):
    """Sparse messages have no dense layout to walk: the generic path runs and agrees."""
    from gpusolve.generate import generate
    problem = generate("random", 10, 4, 0.4, 0.3, seed=3)
    plan = build_plan(problem, graph.elimination_order(problem, "minfill"), None, 1, "sparse")
    eng = engine()
    lower, tables, messages = run_plan(problem, plan, eng)
    assert not problem.is_forbidden(lower)
    assert eng.assign_values(problem, plan, tables, messages) is None
    assert assign(problem, plan, eng, tables, messages) == cpu_assignment(problem, plan)


@pytest.mark.parametrize("seed", range(200, 260))
def test_fused_plan_equals_cpu(cupy, seed):
    """Every mini-bucket through a compiled kernel (no size threshold)."""
    rng = np.random.default_rng(seed)
    problem = random_problem(rng, n_max=8, d_max=6, f_max=12, integer=seed % 4 != 3)
    for z in (None, 3):
        if z is not None and any(f.arity > z for f in problem.functions):
            continue
        plan = plan_for(problem, z)
        eng = engine(fuse_min=0)
        assert run(problem, plan, eng) == run(problem, plan, NumpyEngine())
        assert eng.stats["dense"] == 0


@pytest.mark.parametrize("seed", range(300, 340))
def test_forced_streaming_plan_equals_cpu(cupy, seed):
    """A tiny device budget: every message in host memory, inputs streamed back in slices."""
    rng = np.random.default_rng(seed)
    problem = random_problem(rng, n_max=8, d_max=6, f_max=12, integer=seed % 4 != 3)
    plan = plan_for(problem)
    limit = int(rng.choice([256, 4096]))
    eng = engine(gpu_mem_limit=limit)
    assert run(problem, plan, eng) == run(problem, plan, NumpyEngine())
    if any(mb.out_entries * 8 > limit for mb in plan.minibuckets):
        assert eng.stats["streamed"] > 0


@pytest.mark.parametrize("fraction", [0.05, 0.3, 0.7])
def test_partly_resident_plan_equals_cpu(cupy, fraction):
    """A budget between: some messages on the device, some streamed, chunks over several axes."""
    from gpusolve.generate import generate
    problem = generate("random", 14, 6, 0.5, 0.3, seed=11)
    plan = plan_for(problem)
    eng = engine(gpu_mem_limit=int(plan.message_bytes * fraction), fuse_min=0)
    assert run(problem, plan, eng) == run(problem, plan, NumpyEngine())
    assert eng.stats["streamed"] > 0
    assert all(e["chunks"] >= 1 for e in eng.stream_log)


def test_int64_sums_that_would_overflow_saturate(cupy):
    """Costs near 2^62: sums must clamp at top after every addition, never wrap."""
    top = (1 << 62) - 1
    variables = [Variable(f"x{i}", 3) for i in range(3)]
    big = np.full((3, 3), top - 5, dtype=np.int64)
    big[0, 0] = 1
    functions = [CostFunction((0, 1), big.copy()), CostFunction((1, 2), big.copy()),
                 CostFunction((0, 2), big.copy()), CostFunction((0,), np.array([2, top - 1, 0]))]
    problem = Problem("big", variables, functions, integer=True, top=top)
    plan = plan_for(problem)
    assert run(problem, plan, engine(fuse_min=0)) == run(problem, plan, NumpyEngine())


def matches_reference(eng, seed):
    """The engine's messages of two random buckets (integer min, float log-sum-exp) equal eliminate_dense's
    (seeds apart from the other tests', whose kernels a process may hold compiled already)."""
    import cupy
    rng = np.random.default_rng(seed)
    for integer, op in ((True, "min"), (False, "lse")):
        mb, inputs, domains, top = random_bucket(rng, integer=integer)
        ref = eliminate_dense(np, mb.var, mb.scope, inputs, domains, top, integer, None, op)
        got = eng.get(eng.eliminate(mb, [(cupy.asarray(t), s) for t, s in inputs], domains, top, integer, None, op))
        assert got.dtype == ref.dtype and got.shape == ref.shape
        if op == "lse":  # powers and logarithms may round differently on the device
            np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
        else:
            assert np.array_equal(got, ref)


def test_select_engine(cupy):
    from gpusolve.engines.select import select_engine
    eng, note = select_engine("gpu")
    assert eng.name == "cupy" and eng.startup_s > 0 and "gpu requested" in note
    matches_reference(eng, 4343)
    assert select_engine("auto", 10)[0].name == "numpy"
    assert select_engine("auto", 10 ** 10)[0].name == "cupy"
    assert select_engine("auto", 10 ** 10, gpu_mem_limit=1000)[0].budget == 1000
    # CUDA is up in this process now: a plan worth a few milliseconds of the CPU goes to the device
    eng, note = select_engine("gpu", 10 ** 7, 4)
    assert eng.name == "cupy" and "to start CUDA" not in note


def small_plan_z(problem, limit=20_000_000):
    """Exact BE, or the largest z <= 12, whose plan stays under `limit` joint entries; None if none."""
    order = graph.elimination_order(problem, "minfill")
    max_arity = max([f.arity for f in problem.functions] + [1])
    for z in [None] + list(range(12, max_arity - 1, -1)):
        plan = build_plan(problem, order, z)
        if sum(mb.joint_entries for mb in plan.minibuckets) <= limit:
            return z, True
    return None, False


def test_real_instances_gpu_equals_cpu(cupy, shared_instances):
    from gpusolve import parsers
    files = sorted(p for p in shared_instances.rglob("*") if p.suffix in (".wcsp", ".uai"))
    compared = 0
    for path in files:
        problem = parsers.read(path)
        z, small = small_plan_z(problem)
        if not small:
            continue
        cpu = solve(problem, Options(device="cpu", z=z))
        gpu = solve(problem, Options(device="gpu", host_max=0, z=z))
        assert_same(gpu, cpu, problem)
        compared += 1
    assert compared >= 10


def test_engine_turns_off_cub_block_reductions_unless_asked(cupy, monkeypatch):
    """CUB block reductions compile for 1.3-1.5 s per reduction and size class: off, unless
    CUPY_ACCELERATORS says otherwise."""
    from cupy._core import _accelerator
    monkeypatch.delenv("CUPY_ACCELERATORS", raising=False)
    before = _accelerator.get_reduction_accelerators()

    def dense_step_matches(eng):  # the dense step runs CuPy's reductions: right with CUB and without
        matches_reference(eng, 4242)
        assert eng.stats["dense"] == 2
    try:
        eng = engine(stage=False, generic=False)
        assert _accelerator.get_reduction_accelerators() == []
        dense_step_matches(eng)
        _accelerator.set_reduction_accelerators(["cub"])
        monkeypatch.setenv("CUPY_ACCELERATORS", "cub")
        eng = engine(stage=False, generic=False)
        assert _accelerator.get_reduction_accelerators() == [_accelerator.ACCELERATOR_CUB]
        dense_step_matches(eng)
    finally:
        _accelerator.set_reduction_accelerators(before)


def test_cupy_comes_up_with_precompiled_headers_unless_told_otherwise(cupy):
    """CuPy reads CUPY_NVRTC_USE_PCH once, when imported: a fresh process shows what gpusolve asks,
    and a kernel compiled there gives the NumPy reference's message."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    probe = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
             "from gpusolve.cuda.runtime import import_cupy; import_cupy(); from cupy.cuda import compiler\n"
             "from gpusolve.engines.cupy_engine import CupyEngine; from test_gpu import matches_reference\n"
             "eng = CupyEngine(fuse_min=0, stage=False)\n"
             "matches_reference(eng, 4444)\n"
             "assert eng.stats['fused'] == 2\n"
             "print(compiler._use_pch)")
    env = {k: v for k, v in os.environ.items() if k != "CUPY_NVRTC_USE_PCH"}
    on = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env)
    off = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         env=dict(env, CUPY_NVRTC_USE_PCH="0"))
    assert (on.stdout.strip(), off.stdout.strip()) == ("True", "False"), (on.stderr, off.stderr)


def test_registry_and_policy_on_cuda(cupy):
    """On a GPU: the device spec probes usable and makes the CuPy engine (its spec, its array module,
    its budget within the one margin); solve's and CSG's placements by the one policy land there."""
    from gpusolve.csg import dp
    from gpusolve.cuda.runtime import DEVICE_MEMORY_SHARE, device_budget
    from gpusolve.engines import registry
    from gpusolve.engines.select import choose, make_engine
    spec = registry.for_place(True)
    assert spec.probe() is None and spec.array_module() is cupy
    engine = make_engine(spec, gpu_mem_limit=1 << 20)
    assert engine.spec is spec and engine.budget == 1 << 20 and engine.xp is cupy
    free = cupy.cuda.runtime.memGetInfo()[0] + cupy.get_default_memory_pool().free_bytes()
    assert device_budget() <= int(free * DEVICE_MEMORY_SHARE)
    assert choose("auto", 10 ** 12, 1, threads=16)[0] is spec
    r = dp.solve(dp.generate_values("uniform", 22, 1), dp.Options(device="auto", threads=16))
    assert r.engine == spec.name and r.levels_done == 22
