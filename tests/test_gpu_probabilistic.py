"""PR, MAR and MPE on the GPU engine equal the CPU engine (skipped without CuPy and a device)."""
import numpy as np
import pytest
from test_probabilistic import random_network, write_uai

import parsers
from gpusolve.generate import markov_grid
from gpusolve.solve import Options, solve

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module", autouse=True)
def device():
    cp = pytest.importorskip("cupy")
    try:
        if cp.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("no CUDA device")
    except Exception as e:
        pytest.skip(f"no usable CUDA device: {e}")


def same(cpu, gpu):
    assert gpu.engine != "numpy" and gpu.status == cpu.status
    for a, b in ((cpu.lower_bound, gpu.lower_bound), (cpu.upper_bound, gpu.upper_bound)):
        assert (a is None) == (b is None)
        if a is not None:
            assert b == pytest.approx(a, abs=1e-9)
    if cpu.marginals is not None:
        np.testing.assert_allclose(gpu.marginals, cpu.marginals, atol=1e-9)
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
             solve(problem, Options(device="gpu", task=task, z=z)))


@pytest.mark.parametrize("side, d", [(6, 2), (7, 3), (9, 2)])
def test_grids(side, d):
    problem = markov_grid(side, d, seed=side, p_zero=0.05)
    for task, z in (("MPE", None), ("PR", None), ("MAR", None), ("PR", 4)):
        same(solve(problem, Options(device="cpu", task=task, z=z)),
             solve(problem, Options(device="gpu", task=task, z=z)))


def test_shared_uai(shared_instances):
    for name in ("network.uai", "water.uai"):
        problem = parsers.read(shared_instances / name)
        for task in ("MPE", "PR", "MAR"):
            same(solve(problem, Options(device="cpu", task=task)), solve(problem, Options(device="gpu", task=task)))
