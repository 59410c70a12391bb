"""Random small problems and brute-force enumeration: the independent reference."""
from __future__ import annotations

import itertools
import math

import numpy as np

from gpusolve.order import graph
from gpusolve.model.problem import FORBIDDEN, CostFunction, Problem, Variable, finalize_integer
from gpusolve.plan.buckets import MiniBucket, build_plan
from gpusolve.stop import Stop

# CUDA runtime errors that mean no GPU here, not a broken one
CUDA_ERROR_INSUFFICIENT_DRIVER, CUDA_ERROR_NO_DEVICE = 35, 100


class InterruptAfter(Stop):
    """Interrupted (as by Ctrl-C) at its k-th poll and after: a stop point without a clock. `polls`
    counts every question asked of it, its children's through them included."""

    def __init__(self, k: int):
        super().__init__()
        self.k, self.polls = k, 0

    def __call__(self) -> bool:
        self.polls += 1
        if self.polls >= self.k:
            self.interrupted = True
        return super().__call__()


def random_problem(rng, n_max=6, d_max=5, f_max=9, arity_max=3, p_hard=0.2, integer=True,
                   n_components=1) -> Problem:
    """Arity 0..arity_max, domains 1..d_max, soft and hard tuples; variables split into components."""
    n = int(rng.integers(1, n_max + 1))
    variables = [Variable(f"x{i}", int(rng.integers(1, d_max + 1))) for i in range(n)]
    groups = np.array_split(rng.permutation(n), min(n_components, n))
    functions = []
    for _ in range(int(rng.integers(0, f_max + 1))):
        group = groups[int(rng.integers(0, len(groups)))]
        arity = int(rng.integers(0, min(arity_max, len(group)) + 1))
        scope = tuple(int(v) for v in rng.choice(group, arity, replace=False))
        shape = tuple(variables[v].domain for v in scope)
        if integer:
            table = rng.integers(0, 20, size=shape).astype(np.int64)
            table[rng.random(shape) < p_hard] = FORBIDDEN
        else:
            table = np.asarray(rng.random(shape) * 3.0)
            table[rng.random(shape) < p_hard] = np.inf
        functions.append(CostFunction(scope, table))
    problem = Problem("random", variables, functions, integer=integer)
    if integer:
        return finalize_integer(problem, int(rng.integers(5, 80)))
    problem.top = np.inf
    return problem


def brute_force(problem: Problem):
    """(optimal internal cost, an optimal assignment) by enumeration; cost >= top when infeasible."""
    best, arg = problem.top, None
    for a in itertools.product(*(range(d) for d in problem.domains)):
        c = problem.evaluate(a)
        if c < best:
            best, arg = c, a
    return best, arg


def tight_problem(seed):
    rng = np.random.default_rng(seed)
    return random_problem(rng, n_max=6, d_max=4, f_max=9, arity_max=4, p_hard=float(rng.uniform(0.3, 0.95)),
                          integer=seed % 5 != 4, n_components=1 + seed % 2)


def internal(problem, value):
    """File-sense bound -> internal cost (offset removed); None stays None."""
    return None if value is None else problem.sense * value - problem.offset


def same_messages(ref, got, to_host=lambda a: a):
    assert got[0] == ref[0]
    for i, m in ref[2].items():
        g = got[2][i]
        np.testing.assert_array_equal(to_host(g.keys), m.keys)
        np.testing.assert_array_equal(to_host(g.costs), m.costs)


def bounded_case(seed):
    """A random problem, its order and the smallest MBE plan (whose z caps the incumbent's run)."""
    rng = np.random.default_rng(1000 + seed)
    problem = random_problem(rng, n_max=7, d_max=4, f_max=12, arity_max=3, p_hard=float(rng.uniform(0.0, 0.6)))
    order = graph.elimination_order(problem)
    return problem, order, build_plan(problem, order, max([f.arity for f in problem.functions] + [1]))


def toulbar2_optimum(problem: Problem, path):
    """pytoulbar2's optimum of `problem` written to `path` (.wcsp), None when infeasible; skips the
    test when pytoulbar2 is not installed."""
    from gpusolve.parsers.wcsp import write_wcsp
    write_wcsp(problem, path)
    return toulbar2_file_optimum(path)


def toulbar2_in_a_child(path):
    """(optimum, assignment) by pytoulbar2 in a fresh process, None when infeasible: its reader may
    abort on bad input, and after the rest of the suite in one process a 64-variable grid that takes
    10 s alone ran past 10 minutes."""
    import json
    import subprocess
    import sys

    import pytest
    pytest.importorskip("pytoulbar2")
    code = ("import pytoulbar2, sys, json\nc = pytoulbar2.CFN(verbose=-1)\n"  # reading may prove infeasibility
            "try:\n    c.Read(sys.argv[1])\n    r = c.Solve()\nexcept pytoulbar2.pytb2.Contradiction:\n    r = None\n"
            "print(json.dumps(None if r is None else [r[1], list(r[0])]))")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def toulbar2_file_optimum(path):
    """pytoulbar2's optimum of the file at `path`, None when infeasible; skips the test when
    pytoulbar2 is not installed."""
    import pytest
    pytoulbar2 = pytest.importorskip("pytoulbar2")
    try:
        cfn = pytoulbar2.CFN(verbose=-1)
        cfn.Read(str(path))
        res = cfn.Solve()
    except pytoulbar2.pytb2.Contradiction:  # toulbar2's preprocessing proved it infeasible
        return None
    return None if res is None else round(res[1])


def random_bucket(rng, max_arity=5, integer=True):
    """A mini-bucket over a random separator with inputs of random scopes (each holds var)."""
    n = int(rng.integers(1, 8))
    domains = [int(rng.choice([1, 2, 3, 4, 5, 7, 10, 17, 32])) for _ in range(n)]
    var = int(rng.integers(0, n))
    others = [u for u in range(n) if u != var]
    if integer:
        top = int(rng.choice([60, 1 << 40, (1 << 62) - 1]))
    else:
        top = np.inf
    inputs, covered = [], set()
    for _ in range(int(rng.integers(1, 7))):
        k = int(rng.integers(0, min(max_arity - 1, len(others)) + 1))
        scope = tuple(int(u) for u in rng.permutation([var] + list(rng.choice(others, k, replace=False))))
        covered.update(scope)
        shape = tuple(domains[u] for u in scope)
        if integer:
            table = rng.integers(0, min(top, 1 << 61) // 2, size=shape, dtype=np.int64)
            table[rng.random(shape) < 0.2] = top
        else:
            table = rng.random(shape) * 3.0
            table[rng.random(shape) < 0.2] = np.inf
        if table.ndim > 1 and rng.random() < 0.3:
            table = np.asfortranarray(table)
        inputs.append((table, scope))
    sep = tuple(int(u) for u in rng.permutation(sorted(covered - {var})))
    out = math.prod(domains[u] for u in sep)
    mb = MiniBucket(0, var, (), (), sep, out, out * domains[var])
    return mb, inputs, domains, top


def cuda_absent() -> str | None:
    """Why GPU tests cannot run here (no CuPy, no driver, no device), None when a device is
    present. Anything else (a driver that fails, a broken CUDA install) raises: GPU tests then
    fail instead of skipping, so a GPU host with a broken CUDA is not green."""
    import ctypes
    try:
        from gpusolve.cuda.runtime import import_cupy
        cp = import_cupy()
    except ImportError as e:
        return f"CuPy is not importable ({e})".splitlines()[0]
    try:
        count = cp.cuda.runtime.getDeviceCount()
    except cp.cuda.runtime.CUDARuntimeError as e:
        if e.status == CUDA_ERROR_NO_DEVICE:
            return f"no CUDA device ({e})"
        if e.status == CUDA_ERROR_INSUFFICIENT_DRIVER:  # also what no driver at all reads as
            try:
                ctypes.CDLL("libcuda.so.1")
            except OSError:
                return f"no CUDA driver ({e})"
        raise
    return None if count > 0 else "no CUDA device"


def _contraction(problem: Problem):
    """opt_einsum's terms and operands of a probabilistic problem: its tables as probabilities
    (10^-cost); skips the test when opt_einsum is not installed."""
    import pytest
    oe = pytest.importorskip("opt_einsum")
    syms = [oe.get_symbol(i) for i in range(len(problem.variables))]
    operands = [10.0 ** -f.table for f in problem.functions]
    return oe, syms, ",".join("".join(syms[u] for u in f.scope) for f in problem.functions), operands


def log10_partition(problem: Problem) -> float:
    """log10 Z by one opt_einsum contraction of every table, the constant factors (offset) apart."""
    oe, _, terms, operands = _contraction(problem)
    return math.log10(oe.contract(f"{terms}->", *operands, optimize="greedy")) - problem.offset


def marginals(problem: Problem) -> list:
    """Each variable's marginal by opt_einsum contractions."""
    oe, syms, terms, operands = _contraction(problem)
    out = []
    for v in range(len(problem.variables)):
        m = oe.contract(f"{terms}->{syms[v]}", *operands, optimize="greedy")
        out.append(m / m.sum())
    return out
