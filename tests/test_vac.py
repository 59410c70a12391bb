"""Virtual arc consistency (gpusolve/inference/vac.py): an equivalent problem, a constant that bounds the optimum,
Bool(P) arc consistent at the end, exact integers with large costs, a stop honoured."""
import csv
import itertools
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from gpusolve import parsers
from gpusolve.model.problem import FORBIDDEN, CostFunction, Problem, Variable, finalize_integer
from gpusolve.inference.vac import vac
from helpers import brute_force, random_problem, toulbar2_optimum


def constant(q):
    return int(q.functions[0].table[()])


def case(seed, arity_max=2):
    """Binary (or up to ternary) problems with hard tuples; p_hard up to 0.7 makes some infeasible."""
    rng = np.random.default_rng(seed)
    return random_problem(rng, n_max=6, d_max=4, f_max=10, arity_max=arity_max,
                          p_hard=float(rng.uniform(0.0, 0.7)))


def assert_equivalent(p, q, seed):
    for f in q.functions:
        assert f.table.dtype == np.int64 and (f.table >= 0).all() and (f.table <= q.top).all(), seed
    for a in itertools.product(*(range(d) for d in p.domains)):
        assert q.evaluate(a) == p.evaluate(a), (seed, a)


@pytest.mark.parametrize("block", range(4))
def test_every_assignment_keeps_its_cost_and_c0_bounds_the_optimum(block):
    infeasible = 0
    for seed in range(block * 60, block * 60 + 60):
        p = case(seed, arity_max=2 + seed % 2)
        q = vac(p)
        assert q.functions[0].scope == () and q.top == p.top
        assert_equivalent(p, q, seed)
        optimum, _ = brute_force(p)
        infeasible += optimum >= p.top
        assert constant(q) <= min(optimum, p.top), seed
        before = sum(int(f.table[()]) for f in p.functions if not f.scope)
        assert constant(q) >= min(before, p.top), seed
    assert infeasible >= 3  # the generator's hard tuples make some problems infeasible


def bool_p_arc_consistent(q) -> bool:
    """Arc consistency on Bool(q), where every positive cost is forbidden, wipes out no domain."""
    unary = [np.zeros(d, dtype=np.int64) for d in q.domains]
    pairs = {}
    for f in q.functions:
        if f.arity == 1:
            unary[f.scope[0]] = unary[f.scope[0]] + f.table
        elif f.arity == 2:
            pairs[f.scope] = pairs.get(f.scope, 0) + f.table
    alive = [{a for a in range(d) if unary[v][a] == 0} for v, d in enumerate(q.domains)]
    changed = True
    while changed:
        changed = False
        for (i, j), t in pairs.items():
            for x, y, table in ((i, j, t), (j, i, t.T)):
                kept = {a for a in alive[x] if any(table[a, b] == 0 for b in alive[y])}
                changed |= kept != alive[x]
                alive[x] = kept
    return all(alive)


@pytest.mark.parametrize("seed", range(100))
def test_the_result_is_virtual_arc_consistent(seed):
    """VAC's fixed point: Bool(P) of the output has a non-empty arc consistent closure (else c0 is top)."""
    p = case(1000 + seed)
    q = vac(p)
    assert constant(q) >= q.top or bool_p_arc_consistent(q), seed


def tree_problem(seed):
    """A random tree of binary functions with unary costs and hard tuples."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 8))
    variables = [Variable(f"x{i}", int(rng.integers(1, 5))) for i in range(n)]
    functions, p_hard = [], float(rng.uniform(0, 0.5))
    for i in range(1, n):
        j = int(rng.integers(0, i))
        shape = (variables[i].domain, variables[j].domain)
        table = rng.integers(0, 20, size=shape).astype(np.int64)
        table[rng.random(shape) < p_hard] = FORBIDDEN
        functions.append(CostFunction((i, j), table))
    for i in range(n):
        if rng.random() < 0.5:
            functions.append(CostFunction((i,), rng.integers(0, 20, size=variables[i].domain).astype(np.int64)))
    return finalize_integer(Problem("tree", variables, functions), int(rng.integers(20, 200)))


@pytest.mark.parametrize("seed", range(100))
def test_trees_are_solved(seed):
    """On a tree, arc consistency of Bool(P) means a solution of Bool(P), whose cost is c0 (Cooper et
    al., AIJ 2010): VAC's bound is the optimum."""
    p = tree_problem(seed)
    optimum, _ = brute_force(p)
    assert constant(vac(p)) == min(optimum, p.top), seed


@pytest.mark.parametrize("seed", range(20))
def test_costs_near_the_int64_limit_stay_exact(seed):
    """Costs of about 2^56 (a top beyond 2^58): no product or sum overflows."""
    rng = np.random.default_rng(2000 + seed)
    small = random_problem(rng, n_max=5, d_max=4, f_max=8, arity_max=2, p_hard=0.2)
    functions = [CostFunction(f.scope, np.where(f.table >= small.top, FORBIDDEN, f.table << 52))
                 for f in small.functions]
    p = finalize_integer(Problem("large", small.variables, functions), None)
    q = vac(p)
    assert_equivalent(p, q, seed)
    assert constant(q) <= brute_force(p)[0]


@pytest.mark.parametrize("checks", [0, 1, 2, 5, 20])
def test_a_stop_leaves_an_equivalent_problem(checks):
    """Stopped after `checks` checks: equivalent, its bound no better than the full run's."""
    for seed in range(30):
        p = case(3000 + seed)
        seen = []

        def stop():
            seen.append(1)
            return len(seen) > checks

        q = vac(p, stop=stop)
        assert_equivalent(p, q, seed)
        assert constant(q) <= constant(vac(p))


@pytest.mark.parametrize("seed", range(12))
def test_c0_bounds_toulbar2s_optimum(seed, tmp_path):
    """Problems too large to enumerate (14 variables, domain 6): c0 at most pytoulbar2's optimum."""
    rng = np.random.default_rng(4000 + seed)
    n, d = 14, 6
    variables = [Variable(f"x{i}", d) for i in range(n)]
    functions = []
    for _ in range(30):
        i, j = (int(v) for v in rng.choice(n, 2, replace=False))
        table = rng.integers(0, 50, size=(d, d)).astype(np.int64)
        table[rng.random((d, d)) < 0.3] = FORBIDDEN
        functions.append(CostFunction((i, j), table))
    p = finalize_integer(Problem("random", variables, functions), None)
    optimum = toulbar2_optimum(p, tmp_path / "p.wcsp")
    c0 = constant(vac(p))
    assert c0 >= p.top if optimum is None else c0 <= optimum


def test_shared_instances_bounds(shared_instances):
    """On the real instances with a known optimum, VAC's constant never exceeds it."""
    with open(shared_instances / "optima.csv") as f:
        optima = {row["file"]: float(row["optimum"]) for row in csv.DictReader(f)}
    for name in ("404.wcsp", "CELAR6-SUB0.wcsp", "warehouse.wcsp", "example.wcsp"):
        p = parsers.read(str(shared_instances / name))
        assert p.to_file_value(constant(vac(p))) <= optima[name], name


def test_float_costs_are_refused():
    p = random_problem(np.random.default_rng(0), integer=False)
    with pytest.raises(ValueError, match="integer"):
        vac(p)


@pytest.mark.gpu
def test_the_gpu_gives_the_cpus_problem(cupy):
    """The same passes on CuPy arrays: the same tables, function by function."""
    for seed in range(60):
        p = case(5000 + seed, arity_max=2 + seed % 2)
        host, device = vac(p), vac(p, xp=cupy)
        assert [f.scope for f in host.functions] == [f.scope for f in device.functions], seed
        for f, g in zip(host.functions, device.functions):
            assert isinstance(g.table, np.ndarray) and np.array_equal(f.table, g.table), seed


def compiled_passes():
    pytest.importorskip("numba")
    from gpusolve.search.dfbb_build import jit_core
    return jit_core()


def same_problem(p, q, seed):
    assert [f.scope for f in p.functions] == [f.scope for f in q.functions], seed
    for f, g in zip(p.functions, q.functions):
        assert np.array_equal(f.table, g.table), seed


@pytest.mark.parametrize("block", range(3))
def test_the_compiled_passes_give_the_array_passes_problem(block):
    """Passes 1 and 2 compiled (vac_kernels) and on NumPy: the same steps (theta, c0), the same tables,
    function by function; on random problems with hard tuples and unequal domains, trees, grids, costs
    near the int64 limit."""
    kernels = compiled_passes()
    from gpusolve.generate import generate
    for seed in range(block * 40, block * 40 + 40):
        p = [case(6000 + seed, arity_max=2 + seed % 2), tree_problem(seed),
             generate("grid", (3 + seed % 3) ** 2, 2 + seed % 5, 0.3, float(seed % 3) / 4, seed)][seed % 3]
        if seed % 7 == 0:
            functions = [CostFunction(f.scope, np.where(f.table >= p.top, FORBIDDEN, f.table << 50))
                         for f in p.functions]
            p = finalize_integer(Problem("large", p.variables, functions), None)
        steps = {True: [], False: []}
        for compiled in steps:
            q = vac(p, kernels=kernels if compiled else None, on_step=lambda *a, c=compiled: steps[c].append(a))
            steps[compiled].append(q)
        assert steps[True][:-1] == steps[False][:-1], seed
        same_problem(steps[True][-1], steps[False][-1], seed)


@pytest.mark.parametrize("vac_after", [None, 0])
@pytest.mark.parametrize("seed", range(1, 6))
def test_the_depth_first_core_starts_from_vacs_bound(seed, vac_after):
    """The compiled core's root bound (EDAC* after VAC) is at least VAC's on small grids, where EDAC*
    alone stays below it: VAC at once (vac_after None) or after 0 nodes (its deferred path)."""
    pytest.importorskip("numba")
    from gpusolve.search.dfbb import DepthFirst
    from gpusolve.generate import generate
    p = generate("grid", 16, 4, 0.3, 0.3, seed)
    search = DepthFirst(p, vac_after=vac_after)
    search.run(0)  # the root's propagation
    assert search.lower_bound >= constant(vac(p)), seed
    assert search.vac_after is None


def test_the_core_waits_vac_after_nodes_for_vac():
    """Before VAC_AFTER nodes the core searches the problem as given (EDAC* alone, below VAC's bound on
    this grid); the slice that reaches them restarts it from VAC's equivalent, the nodes counted on."""
    pytest.importorskip("numba")
    from gpusolve.search.dfbb import DepthFirst
    from gpusolve.generate import generate
    p = generate("grid", 16, 4, 0.3, 0.3, 1)
    search = DepthFirst(p, vac_after=5)
    search.run(0)
    assert search.lower_bound < constant(vac(p)) and search.vac_after == 5
    search.run(5)
    assert search.vac_after is None and search.nodes == 5 and search.lower_bound >= constant(vac(p))


def test_the_core_goes_on_where_vac_raises_nothing(monkeypatch):
    """Where VAC leaves the constant as it was (here: skipped by its gate, so not done), the search is not
    started again, and VAC waits for its longer budget at VAC_LONGER_AFTER nodes."""
    pytest.importorskip("numba")
    from gpusolve.search import dfbb
    from gpusolve.generate import generate
    p = generate("grid", 16, 4, 0.3, 0.3, 1)
    monkeypatch.setattr(dfbb, "before_search", lambda problem, seconds, kernels: (problem, False))
    search = dfbb.DepthFirst(p, vac_after=5)
    state = search.S
    search.run(5)
    search.run(5)
    assert search.vac_after == dfbb.VAC_LONGER_AFTER and search.S is state and search.nodes == 10


def test_tables_beyond_root_entries_are_left_without_timing_a_pass(monkeypatch):
    """before_search gives back the problem itself, not timing a pass, where its binary tables hold more
    than ROOT_ENTRIES entries; at or below, it reparameterises (a small grid: its bound rises)."""
    from gpusolve.generate import generate
    from gpusolve.inference import vac as vac_module
    p = generate("grid", 16, 4, 0.3, 0.3, 2)
    entries = sum(f.table.size for f in p.functions if f.arity == 2)
    monkeypatch.setattr(vac_module, "project_ac", lambda s: pytest.fail("a pass was timed"))
    monkeypatch.setattr(vac_module, "ROOT_ENTRIES", entries - 1)
    assert vac_module.before_search(p) == (p, True)
    monkeypatch.undo()
    monkeypatch.setattr(vac_module, "ROOT_ENTRIES", entries)
    start, done = vac_module.before_search(p)
    assert done and constant(start) > sum(int(f.table) for f in p.functions if f.arity == 0)


def toulbar2_vac_root(path) -> int | None:
    """pytoulbar2's root bound with VAC in preprocessing (toulbar2's -A), read from the line it prints once
    its preprocessing ends, in a child ended there; None when its preprocessing solves the problem."""
    pytest.importorskip("pytoulbar2")
    if shutil.which("stdbuf") is None:
        pytest.skip("stdbuf (coreutils) is needed to read toulbar2's output as it comes")
    code = ("import sys, pytoulbar2\n"
            "cfn = pytoulbar2.CFN(vac=1, verbose=0)\n"
            "cfn.Read(sys.argv[1])\n"
            "try:\n    cfn.Solve()\nexcept Exception:\n    pass\n")
    with subprocess.Popen(["stdbuf", "-oL", sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE,
                          text=True) as child:
        for line in child.stdout:
            found = re.search(r"Initial lower and upper bounds: \[(\d+),", line)
            if found:
                child.kill()
                return int(found.group(1))
    return None


@pytest.mark.parametrize("p2", [0.0, 0.5])
def test_grids_reach_toulbar2s_vac_bound(p2, tmp_path):
    """Generated 10 x 10 grids of domain 10, where VAC meets many bottlenecks (lambda < 1): within 1% of
    toulbar2's VAC root bound (the two differ in their order of cost moves; toulbar2 also runs EDAC between
    them). Stopping VAC at the first run of bottlenecks left 3,290 against toulbar2's 3,528."""
    from gpusolve.generate import generate
    from gpusolve.parsers.wcsp import write_wcsp
    p = generate("grid", 100, 10, 0.3, p2, 1)
    write_wcsp(p, tmp_path / "grid.wcsp")
    reference = toulbar2_vac_root(tmp_path / "grid.wcsp")
    assert reference is not None and constant(vac(p)) >= 0.99 * reference


def test_a_vac_cut_by_its_budget_gets_the_longer_one_later(monkeypatch):
    """A VAC stopped by its first budget (here 0 s) is not done; the search restarts from what it reached
    where that raised the constant, and at VAC_LONGER_AFTER nodes VAC runs again, to its end."""
    pytest.importorskip("numba")
    from gpusolve.search import dfbb
    from gpusolve.generate import generate
    from gpusolve.inference import vac as vac_module
    p = generate("grid", 25, 5, 0.3, 0.3, 3)
    seen = []
    real = vac_module.before_search

    def recorded(problem, seconds, kernels):
        out = real(problem, 0.0 if not seen else seconds, kernels)
        seen.append((seconds, out[1]))
        return out
    monkeypatch.setattr(dfbb, "before_search", recorded)
    monkeypatch.setattr(dfbb, "VAC_LONGER_AFTER", 20)
    search = dfbb.DepthFirst(p, vac_after=5)
    while search.nodes < 20 and search.run(5) != dfbb.COMPLETE:
        pass
    if search.complete and search.nodes < 20:
        pytest.skip("proven before the second budget")
    assert [done for _, done in seen] == [False, True] and seen[1][0] == dfbb.VAC_LONGER_S
    assert search.vac_after is None and search.lower_bound >= constant(vac(p))
