"""AND/OR branch and bound against brute force and pytoulbar2, with exact BE forced off."""
import itertools

import numpy as np
import pytest
from helpers import InterruptAfter, brute_force, random_problem, toulbar2_optimum

from gpusolve import parsers
from gpusolve.order import graph
from gpusolve.search.dfbb import Beside
from gpusolve.inference.eliminate import run_plan
from gpusolve.schedule.bounds import Bounds
from gpusolve.engines.numpy_engine import NumpyEngine
from gpusolve.generate import generate
from gpusolve.model.problem import CostFunction, Problem, Variable
from gpusolve.plan.buckets import build_plan
from gpusolve.search import andor
from gpusolve.search.andor import AndOrSearch, Heuristic, Subproblem, pseudo_tree
from gpusolve.stop import Stop, Stopped
from gpusolve.schedule.solve import Options, solve


def search_for(problem, z, **options):
    order = graph.elimination_order(problem)
    plan = build_plan(problem, order, z)
    _, _, messages = run_plan(problem, plan, NumpyEngine())
    return AndOrSearch(problem, order, Heuristic.from_run(plan, NumpyEngine(), messages), **options)


def offering_to(bounds: Bounds, offered: list):
    """on_incumbent for a search: each assignment complete and within the domains, offered to `bounds`
    (which computes its cost), the node count noted; the search then prunes against the incumbent."""
    def offer(assignment):
        assert len(assignment) == len(bounds.problem.variables)
        assert all(0 <= a < d for a, d in zip(assignment, bounds.problem.domains))
        offered.append(assignment)
        bounds.offer(assignment, "AND/OR search")
        return bounds.upper
    return offer


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


def ends_with_the_optimum(problem, z: int) -> None:
    """A search offering its incumbents to bounds ends with the optimum (brute force) or with the proof
    that the incumbent is optimal."""
    best, _ = brute_force(problem)
    bounds, offered = Bounds.start(problem, 0.0), []
    cost, assignment = search_for(problem, z, on_incumbent=offering_to(bounds, offered)).run(problem.top)
    if assignment is not None:
        bounds.offer(assignment, "AND/OR search")
        assert cost == pytest.approx(problem.evaluate(assignment), rel=1e-12, abs=1e-12)
    if best >= problem.top:
        assert bounds.assignment is None
    else:
        assert bounds.upper == pytest.approx(best, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("seed", range(120))
def test_search_pruning_against_its_own_incumbents_still_proves_the_optimum(seed):
    """Greedy completions become incumbents as the search goes and cut its budgets."""
    rng = np.random.default_rng(3000 + seed)
    problem = random_problem(rng, n_max=7, d_max=4, f_max=12, integer=seed % 3 != 0, n_components=1 + seed % 3)
    ends_with_the_optimum(problem, max([f.arity for f in problem.functions] + [1]))


@pytest.mark.parametrize("seed", range(200))
def test_search_in_rotation_with_turns_of_a_few_nodes_proves_the_optimum(seed, monkeypatch):
    """Turns of 1 to 3 nodes: the children of every AND node are suspended and resumed all the time,
    their budgets set as each starts and their paths set aside between turns."""
    monkeypatch.setattr(andor, "TURN_NODES", 1 + seed % 3)
    rng = np.random.default_rng(5000 + seed)
    problem = random_problem(rng, n_max=9, d_max=3, f_max=12, integer=seed % 4 != 0, n_components=1 + seed % 3)
    ends_with_the_optimum(problem, max([f.arity for f in problem.functions] + [1]) + seed % 2)


def two_grids(n: int, d: int, seed: int) -> Problem:
    """Two generated grids side by side, no function between them: the roots' AND node has two children."""
    a, b = generate("grid", n, d, 0.3, 0.0, seed), generate("grid", n, d, 0.3, 0.0, seed + 1)
    shifted = [CostFunction(tuple(v + n for v in f.scope), f.table) for f in b.functions]
    return a.like(a.functions + shifted, variables=a.variables + b.variables, top=a.top + b.top)


def test_the_subproblems_of_an_and_node_take_turns():
    """Two independent grids: stopped at node 4096, the search has expanded OR nodes of both, although
    each alone takes more than 4096 nodes to solve (depth-first AOBB would not have left the first)."""
    n = 36
    for part in (generate("grid", n, 5, 0.3, 0.0, 7), generate("grid", n, 5, 0.3, 0.0, 8)):
        alone = search_for(part, 2)
        alone.run(part.top)
        assert alone.stats.nodes > 4096
    problem = two_grids(n, 5, 7)
    s = search_for(problem, 2)
    expanded = set()
    evaluate = s.flat.evaluate
    s.flat.evaluate = lambda v, value: expanded.add(v) or evaluate(v, value)
    s.stop = InterruptAfter(16)  # polled every 256 nodes
    with pytest.raises(Stopped) as stopped:
        s.run(problem.top)
    assert s.stats.nodes == 4096
    assert any(v < n for v in expanded) and any(v >= n for v in expanded)
    optimum, _ = search_for(problem, 2).run(problem.top)
    assert stopped.value.lower <= optimum


STOP_NODES = 256  # the search asks whether to stop every 256 nodes; every network below needs more


class InterruptOnceHeld(Stop):
    """Interrupted at its first poll once `bounds` hold a feasible assignment."""

    def __init__(self, bounds: Bounds):
        super().__init__()
        self.bounds = bounds

    def __call__(self) -> bool:
        self.interrupted = self.interrupted or self.bounds.assignment is not None
        return super().__call__()


@pytest.mark.parametrize("when", ["first poll", "once held"])
@pytest.mark.parametrize("seed", range(160))
def test_a_search_stopped_midway_holds_incumbents_and_a_lower_bound(tmp_path, seed, when):
    """Stopped before the root completes, the search has offered incumbents as it went (completions
    of its path, and a resumable dive for a first solution while none is known). Against pytoulbar2:
    the incumbent is no better than the optimum, and the least bound of the open nodes, never below
    the heuristic's own bound, is no worse. Stopped at its first poll (node 256), a network with hard
    tuples may hold none yet (8 of the 90 feasible ones here: their first solution takes the dive
    more nodes); stopped at the first poll once one is held, every feasible network holds one
    before the root completes."""
    topology, n = ("random", 18) if seed % 2 else ("grid", 25)
    hard = 0.3 if seed % 4 < 3 else 0.0
    problem = generate(topology, n, 4, 0.4, hard, seed)
    optimum = toulbar2_optimum(problem, tmp_path / "g.wcsp")
    bounds, offered = Bounds.start(problem, 0.0), []
    s = search_for(problem, 2, on_incumbent=offering_to(bounds, offered))
    s.stop = InterruptAfter(1) if when == "first poll" else InterruptOnceHeld(bounds)
    if optimum is None and when == "once held":  # infeasible: the search completes with the proof
        cost, assignment = s.run(problem.top)
        assert assignment is None and cost >= problem.top and bounds.assignment is None
        return
    with pytest.raises(Stopped) as stopped:
        s.run(problem.top)
    assert not s.stats.complete
    assert stopped.value.lower >= s.flat.constant + sum(s.flat.root_h.values())  # the heuristic's bound at the root
    if optimum is None:
        assert bounds.assignment is None
        return
    assert stopped.value.lower <= optimum
    assert bounds.assignment is not None or (hard and when == "first poll")
    assert bounds.assignment is None or problem.top > problem.evaluate(bounds.assignment) == bounds.upper >= optimum


def test_the_first_incumbent_of_a_network_where_only_optima_are_feasible(shared_instances):
    """CELAR6-SUB0 with `top` lowered to its optimum plus one: only optimal assignments are feasible.
    The search once found one after 545k nodes and, stopped, reported none; now the completion of its
    first descent is one, offered before the search first asks whether to stop."""
    problem = parsers.read(shared_instances / "CELAR6-SUB0.wcsp")
    optimum = 159  # optima.csv
    problem = problem.like(problem.functions, top=optimum + 1)
    bounds, offered = Bounds.start(problem, 0.0), []
    s = search_for(problem, 4, on_incumbent=offering_to(bounds, offered))
    s.stop = InterruptAfter(1)
    with pytest.raises(Stopped) as stopped:
        s.run(problem.top)
    assert s.stats.nodes == 256 and bounds.upper == optimum == problem.evaluate(bounds.assignment)
    assert stopped.value.lower <= optimum


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
    s.stop = InterruptAfter(4)  # polled every 256 nodes: at node 1024
    with pytest.raises(Stopped):
        s.run(problem.top)
    assert 1000 < s.stats.nodes < 1300 and not s.stats.complete


WIDE = [(topology, n, d, p2, seed) for seed in range(60)
        for topology, n, d, p2 in [("random", 16, 4, 0.3), ("grid", 16, 4, 0.3), ("scalefree", 18, 3, 0.2),
                                   ("random", 14, 5, 0.25), ("grid", 25, 3, 0.2)]]


@pytest.mark.parametrize("topology, n, d, p2, seed", [c if c[-1] < 10 else pytest.param(*c, marks=pytest.mark.slow)
                                                      for c in WIDE])  # 50 in the fast set
def test_search_agrees_with_pytoulbar2(tmp_path, topology, n, d, p2, seed):
    """300 generated networks, hard tuples, MBE(z=2) heuristics: exact BE never runs."""
    path = tmp_path / "g.wcsp"
    optimum = toulbar2_optimum(generate(topology, n, d, 0.4, p2, seed), path)
    ours = solve(parsers.read(path), Options(device="cpu", z=2))
    if optimum is None:
        assert ours.status == "infeasible"
        return
    assert ours.status == "optimal" and ours.lower_bound == ours.upper_bound == optimum
    assert ours.search is None or ours.search["complete"]


@pytest.mark.slow
def test_the_pytoulbar2_family_needs_search():
    """Most of the networks above are feasible and left open by bounds and local search: search proves them
    (AND/OR search or the depth-first search beside it, whichever finishes first)."""
    proven_by_search = feasible = 0
    for topology, n, d, p2, seed in WIDE[:50]:
        r = solve(generate(topology, n, d, 0.4, p2, seed), Options(device="cpu", z=2))
        feasible += r.status != "infeasible"
        proven_by_search += r.status == "optimal" and r.trace[-1][3] in ("AND/OR search", Beside.LABEL)
    assert feasible >= 0.8 * 50 and proven_by_search >= 0.7 * 50


class AllDifferent:
    """Forward checking: a value taken by a variable above is not allowed."""

    def __init__(self, scope, domain):
        self.scope, self.domain = tuple(scope), domain

    def lower(self, var, above, value):
        costs = np.zeros(self.domain, dtype=np.int64)
        costs[value[list(above)]] = 10_000
        return costs


@pytest.mark.parametrize("seed", range(20))
def test_propagators_filter_values_during_search(seed):
    """Random costs under an AllDifferent: search with the propagator equals brute force."""
    rng = np.random.default_rng(seed)
    n = 5
    functions = [CostFunction((i, j), rng.integers(0, 9, size=(n, n)).astype(np.int64))
                 for i in range(n) for j in range(i + 1, n) if rng.random() < 0.5]
    problem = Problem("alldiff", [Variable(f"x{i}", n) for i in range(n)], functions, top=10_000)
    alldiff = AllDifferent(range(n), n)
    best = min((problem.evaluate(a), a) for a in itertools.permutations(range(n)))
    order = graph.elimination_order(problem)
    plan = build_plan(problem, order, 2)
    _, _, messages = run_plan(problem, plan, NumpyEngine())
    s = AndOrSearch(problem, order, Heuristic.from_run(plan, NumpyEngine(), messages), propagators=[alldiff])
    cost, assignment = s.run(problem.top)
    assert cost == best[0] and sorted(assignment) == list(range(n))


def test_subproblems_of_the_root_compose_the_optimum():
    """Each child of the root, solved alone given the root's optimal value, adds up to the optimum."""
    problem = generate("grid", 16, 3, 0.3, 0.0, seed=4)
    s = search_for(problem, 2)
    best, assignment = s.run(problem.top)
    (root,) = s.tree.roots
    x = assignment[root]
    total = sum(f.table[x] for f in problem.functions if f.scope == (root,))
    for c in s.tree.children[root]:
        cost, values = s.solve(Subproblem(c, tuple((u, assignment[u]) for u in s.tree.context[c]), problem.top))
        assert values is not None and set(values) == set(s.subtree[c])
        total += cost
    assert total == best and s.tree.children[root]
