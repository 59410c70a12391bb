"""PR, MAR and MPE on the GPU engine equal the CPU engine (skipped without CuPy and a device)."""
import numpy as np
import pytest
from test_probabilistic import random_network, write_uai

from gpusolve import parsers
from gpusolve.inference import probabilistic
from gpusolve.engines.numpy_engine import NumpyEngine
from gpusolve.engines.dense import reduce_axes
from gpusolve.generate import markov_grid
from gpusolve.order.graph import elimination_order
from gpusolve.plan.buckets import build_plan
from gpusolve.inference.eliminate import run_plan
from gpusolve.schedule.solve import Options, solve

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module", autouse=True)
def device(cupy):
    """Every test here needs the device: conftest's `cupy` skips without one, fails on a broken one."""


def same(cpu, gpu):
    assert gpu.engine != "numpy" and gpu.status == cpu.status
    for a, b in ((cpu.lower_bound, gpu.lower_bound), (cpu.upper_bound, gpu.upper_bound)):
        assert (a is None) == (b is None)
        if a is not None:
            assert b == pytest.approx(a, abs=1e-9)
    assert (cpu.marginals is None) == (gpu.marginals is None)
    if cpu.marginals is not None:
        assert len(gpu.marginals) == len(cpu.marginals)
        for g, c in zip(gpu.marginals, cpu.marginals):  # one list per variable, lengths differ
            np.testing.assert_allclose(g, c, atol=1e-9)
    assert gpu.assignment == cpu.assignment


@pytest.mark.parametrize("seed", range(120))
def test_random_networks(tmp_path, seed):
    rng = np.random.default_rng(5000 + seed)
    bayes = seed % 2 == 0
    dom, factors = random_network(rng, bayes)
    evidence = {0: 0} if seed % 3 == 0 else None
    path = tmp_path / "n.uai"
    write_uai(path, dom, factors, bayes, evidence)
    problem = parsers.read(path)
    for task, z in (("MPE", None), ("PR", None), ("MAR", None), ("PR", 2)):
        if z is not None and any(len(s) > z for s, _ in factors):
            continue
        same(solve(problem, Options(device="cpu", task=task, z=z)),
             solve(problem, Options(device="gpu", host_max=0, task=task, z=z)))


@pytest.mark.parametrize("side, d", [(6, 2), (7, 3), (9, 2)])
def test_grids(side, d):
    problem = markov_grid(side, d, seed=side, p_zero=0.05)
    for task, z in (("MPE", None), ("PR", None), ("MAR", None), ("PR", 4)):
        same(solve(problem, Options(device="cpu", task=task, z=z)),
             solve(problem, Options(device="gpu", host_max=0, task=task, z=z)))


def test_shared_uai(shared_instances):
    for name in ("network.uai", "water.uai"):
        problem = parsers.read(shared_instances / name)
        for task in ("MPE", "PR", "MAR"):
            same(solve(problem, Options(device="cpu", task=task)), solve(problem, Options(device="gpu", host_max=0, task=task)))


def test_lse_forbidden_rows_on_device():
    """All-forbidden (+inf) rows eliminate to +inf, mixed rows to the CPU's value, never NaN."""
    import cupy as cp
    rng = np.random.default_rng(3)
    acc = rng.random((5, 4, 3)) * 20
    acc[rng.random(acc.shape) < 0.3] = np.inf
    acc[:, 0, :] = np.inf
    acc[2, 1, :] = np.inf
    for axes in ((0,), (2,), (0, 2), (0, 1, 2)):
        want = reduce_axes(np, acc, axes, "lse")
        got = reduce_axes(cp, cp.asarray(acc), axes, "lse").get()
        assert not np.isnan(got).any()
        np.testing.assert_allclose(got, want, rtol=1e-12)
        assert (np.isinf(got) == np.isinf(want)).all()


@pytest.mark.parametrize("limit", [1 << 12, 1 << 15])
def test_mar_with_messages_in_host_memory(limit):
    """A device budget too small for the messages: they stream to host memory (HostTable), the
    original tables stay there too at the smallest limit, and the distribute pass reads them in slices."""
    from gpusolve.engines.cupy_engine import CupyEngine, HostTable
    problem = markov_grid(6, 3, seed=7, p_zero=0.05)
    plan = build_plan(problem, elimination_order(problem, "minfill"))
    want_z, tables, messages = run_plan(problem, plan, NumpyEngine(), op=lambda mb: "lse")
    want = probabilistic.marginals(problem, plan, NumpyEngine(), tables, messages)
    engine = CupyEngine(gpu_mem_limit=limit)
    z, tables, messages = run_plan(problem, plan, engine, op=lambda mb: "lse")
    assert engine.stats["streamed"] > 0 and any(isinstance(m, HostTable) for m in messages.values())
    assert limit > 1 << 12 or any(isinstance(t, HostTable) for t in tables)
    got = probabilistic.marginals(problem, plan, engine, tables, messages)
    assert float(z) == pytest.approx(float(want_z), abs=1e-9)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, atol=1e-9)
    gpu = solve(problem, Options(device="gpu", host_max=0, task="MAR", gpu_mem_limit=limit))
    same(solve(problem, Options(device="cpu", task="MAR")), gpu)


@pytest.mark.parametrize("case", ["grid-d2", "grid-d3-zeros", "water"])
def test_fused_lse_kernel(case, request):
    """The fused lse kernel (forced on every bucket) gives the CPU's log10 Z and marginals."""
    from gpusolve.engines.cupy_engine import CupyEngine
    problem = {"grid-d2": lambda: markov_grid(8, 2, seed=3),
               "grid-d3-zeros": lambda: markov_grid(6, 3, seed=4, p_zero=0.3),
               "water": lambda: parsers.read(request.getfixturevalue("shared_instances") / "water.uai")}[case]()
    plan = build_plan(problem, elimination_order(problem, "minfill"))
    want_z, tables, want_msgs = run_plan(problem, plan, NumpyEngine(), op=lambda mb: "lse")
    want = probabilistic.marginals(problem, plan, NumpyEngine(), tables, want_msgs)
    engine = CupyEngine(fuse_min=0)
    z, tables, messages = run_plan(problem, plan, engine, op=lambda mb: "lse")
    assert engine.stats["fused"] > 0
    assert float(z) == pytest.approx(float(want_z), abs=1e-9)
    for i, m in want_msgs.items():  # forbidden rows stay +inf, never NaN
        np.testing.assert_allclose(engine.get(messages[i]), m, atol=1e-9)
    for g, w in zip(probabilistic.marginals(problem, plan, engine, tables, messages), want):
        np.testing.assert_allclose(g, w, atol=1e-9)
