"""AND/OR branch and bound against brute force and pytoulbar2, with exact BE forced off."""
import itertools

import numpy as np
import pytest
from helpers import brute_force, random_problem

import parsers
from gpusolve import graph
from gpusolve.eliminate import run_plan
from gpusolve.engines.numpy_engine import NumpyEngine
from gpusolve.generate import generate
from gpusolve.model import CostFunction, Problem, Variable
from gpusolve.plan import build_plan
from gpusolve.search import AndOrSearch, Heuristic, Stopped, pseudo_tree
from gpusolve.solve import Options, solve
from parsers.write import write_wcsp


def search_for(problem, z):
    order = graph.elimination_order(problem)
    plan = build_plan(problem, order, z)
    _, _, messages = run_plan(problem, plan, NumpyEngine())
    return AndOrSearch(problem, order, Heuristic.from_run(plan, NumpyEngine(), messages))


@pytest.mark.parametrize("seed", range(320))
def test_search_finds_the_optimum_and_proves_it(seed):
    rng = np.random.default_rng(1000 + seed)
    problem = random_problem(rng, n_max=7, d_max=4, f_max=12, integer=seed % 3 != 0, n_components=1 + seed % 3)
    best, _ = brute_force(problem)
    max_arity = max([f.arity for f in problem.functions] + [1])
    z = max_arity + seed % 3
    cost, assignment = search_for(problem, z).run(problem.top)
    if best >= problem.top:
        assert assignment is None and cost >= problem.top
        return
    assert problem.evaluate(assignment) == pytest.approx(best, rel=1e-12, abs=1e-12)
    assert cost == pytest.approx(best, rel=1e-12, abs=1e-12)
    if problem.integer:  # with the optimum as incumbent nothing better exists: a proof
        cost, assignment = search_for(problem, z).run(best)
        assert assignment is None and cost >= best


def test_pseudo_tree_children_are_independent_given_their_context():
    problem = generate("grid", 25, 3, 0.3, 0.5, seed=1)
    order = graph.elimination_order(problem)
    tree = pseudo_tree(len(problem.variables), [f.scope for f in problem.functions], order)
    ancestors = {}
    for v in reversed(order):
        p = tree.parent[v]
        ancestors[v] = set() if p < 0 else ancestors[p] | {p}
        assert set(tree.context[v]) <= ancestors[v]
    for f in problem.functions:  # every function lies on one root-to-leaf path
        deepest = min(f.scope, key=order.index)
        assert set(f.scope) - {deepest} <= ancestors[deepest]


def test_search_stops_when_asked():
    problem = generate("grid", 64, 6, 0.3, 0.3, seed=2)
    s = search_for(problem, 2)
    s.should_stop = lambda: s.stats.nodes > 1000
    with pytest.raises(Stopped):
        s.run(problem.top)
    assert 1000 < s.stats.nodes < 1300 and not s.stats.complete


WIDE = [(topology, n, d, p2, seed) for seed in range(60)
        for topology, n, d, p2 in [("random", 16, 4, 0.3), ("grid", 16, 4, 0.3), ("scalefree", 18, 3, 0.2),
                                   ("random", 14, 5, 0.25), ("grid", 25, 3, 0.2)]]


@pytest.mark.parametrize("topology, n, d, p2, seed", WIDE)
def test_search_agrees_with_pytoulbar2(tmp_path, topology, n, d, p2, seed):
    """300 generated networks, hard tuples, MBE(z=2) heuristics: exact BE never runs."""
    pytoulbar2 = pytest.importorskip("pytoulbar2")
    problem = generate(topology, n, d, 0.4, p2, seed)
    path = tmp_path / "g.wcsp"
    write_wcsp(problem, path)
    try:
        cfn = pytoulbar2.CFN(verbose=-1)
        cfn.Read(str(path))
        res = cfn.Solve()
    except pytoulbar2.pytb2.Contradiction:  # toulbar2's preprocessing proved it infeasible
        res = None
    ours = solve(parsers.read(path), Options(device="cpu", z=2))
    if res is None:
        assert ours.status == "infeasible"
        return
    assert ours.status == "optimal" and ours.lower_bound == ours.upper_bound == round(res[1])
    assert ours.search is None or ours.search["complete"]


def test_the_pytoulbar2_family_needs_search():
    """Most of the networks above are feasible and left open by bounds and local search: search proves them."""
    proven_by_search = feasible = 0
    for topology, n, d, p2, seed in WIDE[:50]:
        r = solve(generate(topology, n, d, 0.4, p2, seed), Options(device="cpu", z=2))
        feasible += r.status != "infeasible"
        proven_by_search += r.status == "optimal" and r.trace[-1][3] == "AND/OR search"
    assert feasible >= 0.8 * 50 and proven_by_search >= 0.7 * 50
