"""Rollouts and parallel local search against brute force and the shared instances' optima."""
import csv
import itertools

import numpy as np
import pytest

from gpusolve import parsers
from gpusolve.order import graph
from gpusolve.inference.eliminate import assign, run_plan
from gpusolve.generate import generate
from gpusolve.engines.numpy_engine import NumpyEngine
from gpusolve.search.local import ball, gathers, induced_tree, lns, local_search, rollouts, scores, tree_move
from gpusolve.model.problem import condition
from gpusolve.parsers.wcsp import write_wcsp
from gpusolve.plan.buckets import build_plan
from gpusolve.consistency.preprocess import preprocess
from helpers import InterruptAfter, brute_force, random_problem, toulbar2_optimum
from gpusolve.stop import Stop


def _plan(problem, z=None, tables="dense"):
    return build_plan(problem, graph.elimination_order(problem), z, tables=tables)


@pytest.mark.parametrize("seed", range(40))
def test_local_search_is_sound_and_never_worse_than_its_seeds(seed):
    rng = np.random.default_rng(seed)
    problem = random_problem(rng, n_max=7, d_max=4, p_hard=0.3)
    opt, _ = brute_force(problem)
    seeds = rng.integers(0, problem.domains, size=(40, len(problem.domains)))  # more than the chains
    seed_best = min(problem.evaluate(s) for s in seeds)
    improved = []
    best, cost = local_search(problem, seeds, None, rng, n=16, max_sweeps=30,
                              on_improve=lambda c, a: improved.append((c, list(a))))
    assert cost <= seed_best
    assert cost >= opt
    if best is None:
        assert cost == problem.top
    else:
        assert cost == problem.evaluate(best) < problem.top
        assert improved[-1] == (cost, best)
        assert all(a[0] > b[0] for a, b in zip(improved, improved[1:]))


@pytest.mark.parametrize("seed", range(40))
def test_local_search_finds_small_optima(seed):
    rng = np.random.default_rng(100 + seed)
    problem = random_problem(rng, n_max=6, d_max=4, p_hard=0.2)
    opt, _ = brute_force(problem)
    best, cost = local_search(problem, None, None, np.random.default_rng(0), n=64, max_sweeps=60)
    assert cost == opt
    assert (best is None) == (opt >= problem.top)


def test_local_search_keeps_evidence_and_stops_when_asked():
    rng = np.random.default_rng(3)
    problem = random_problem(rng, n_max=6, d_max=4, p_hard=0.0)
    while brute_force(problem)[0] >= problem.top:  # the file top may forbid every assignment
        problem = random_problem(rng, n_max=6, d_max=4, p_hard=0.0)
    problem = condition(problem, {0: problem.domains[0] - 1})
    stop = InterruptAfter(4)
    best, cost = local_search(problem, None, stop, rng, n=8)
    assert stop.polls == 4
    assert best[0] == problem.domains[0] - 1 and cost == problem.evaluate(best)


@pytest.mark.parametrize("seed", range(40))
def test_lns_never_worsens_keeps_evidence_and_solves_exactly_when_the_ball_is_everything(seed):
    """Each step is exact on its ball: never worse than the incumbent, the optimum of its
    component when the ball covers it, evidence untouched; a small ball still never worsens."""
    rng = np.random.default_rng(500 + seed)
    problem = random_problem(rng, n_max=7, d_max=4, p_hard=0.2, n_components=1)
    opt, _ = brute_force(problem)
    start = [int(v) for v in rng.integers(0, problem.domains)]
    best, cost = lns(problem, start, NumpyEngine(), rng, InterruptAfter(4), size=len(problem.domains))
    assert cost == problem.evaluate(best) and cost <= problem.evaluate(start)
    keep = {v for v, d in enumerate(problem.domains) if d > 1}
    connected = len(graph.components({v: nb & keep for v, nb in graph.primal_graph(problem).items()
                                      if v in keep})) <= 1
    if connected:
        assert cost == opt or problem.is_forbidden(opt) and problem.is_forbidden(cost)
    fixed = condition(problem, {0: start[0]})
    improved = []
    best, cost = lns(fixed, start, NumpyEngine(), rng, InterruptAfter(10), on_improve=lambda c, a: improved.append(c), size=2)
    assert best[0] == start[0] and cost == fixed.evaluate(best) <= fixed.evaluate(start)
    assert improved == sorted(improved, reverse=True) and (not improved or improved[-1] == cost)


def test_ball_is_connected_and_bounded():
    adjacency = graph.primal_graph(generate("grid", 25, 3, seed=1))
    rng = np.random.default_rng(0)
    for size in (1, 5, 12, 40):
        members = ball(adjacency, rng, size)
        assert len(members) == min(size, 25)
        reached, todo = set(), [next(iter(members))]
        while todo:
            v = todo.pop()
            reached.add(v)
            todo += [u for u in adjacency[v] & members if u not in reached]
        assert reached == members


@pytest.mark.parametrize("seed", range(20))
def test_tree_move_is_the_exact_best_over_the_tree(seed):
    rng = np.random.default_rng(300 + seed)
    problem = generate("grid", 16, 3, 0.3, 0.3, seed) if seed % 2 else random_problem(rng, n_max=7, d_max=3)
    gt = gathers(problem)
    while not gt.neighbours:  # nothing to move
        problem = random_problem(rng, n_max=7, d_max=3)
        gt = gathers(problem)
    members, parent = induced_tree(gt, rng, 6)
    assert len(members) >= (5 if seed % 2 else 1)
    assert all(gt.neighbours[u] & set(members) <= {parent.get(u)} | {c for c in members if parent.get(c) == u}
               for u in members)
    x = rng.integers(0, problem.domains, size=(4, len(problem.domains)))
    moved = x.copy()
    tree_move(np, gt, moved, members, parent, problem.domains)
    for row, new in zip(x, moved):
        assert all(new[v] == row[v] for v in range(len(row)) if v not in members)
        best = np.inf
        for values in itertools.product(*(range(problem.domains[v]) for v in members)):
            y = row.copy()
            y[members] = values
            best = min(best, scores(np, gt, y[None], problem.top)[0][0])
        assert scores(np, gt, new[None], problem.top)[0][0] == pytest.approx(best)


@pytest.mark.parametrize("tables", ["dense", "sparse"])
@pytest.mark.parametrize("seed", range(25))
def test_greedy_rollout_with_exact_messages_is_optimal(seed, tables):
    rng = np.random.default_rng(200 + seed)
    problem = random_problem(rng, n_max=6, d_max=4, p_hard=0.3)
    opt, _ = brute_force(problem)
    plan = _plan(problem, tables=tables)
    engine = NumpyEngine()
    _, tabs, messages = run_plan(problem, plan, engine)
    rows = rollouts(problem, plan, engine, tabs, messages, 32, rng)
    assert rows.shape == (32, len(problem.domains))
    assert list(rows[0]) == assign(problem, plan, engine, tabs, messages)
    if opt < problem.top:
        assert problem.evaluate(rows[0]) == opt
    assert all(0 <= rows[:, v].min() and rows[:, v].max() < d for v, d in enumerate(problem.domains))


def test_rollouts_keep_evidence_and_seed_local_search():
    rng = np.random.default_rng(7)
    problem = condition(random_problem(rng, n_max=7, d_max=4, p_hard=0.2), {1: 0})
    plan = _plan(problem, z=2)
    engine = NumpyEngine()
    _, tabs, messages = run_plan(problem, plan, engine)
    rows = rollouts(problem, plan, engine, tabs, messages, 64, rng)
    assert (rows[:, 1] == 0).all()
    start = min(problem.evaluate(r) for r in rows)
    best, cost = local_search(problem, rows, None, rng, n=64, max_sweeps=20)
    assert cost <= start and cost >= brute_force(problem)[0]


def optimum(shared_instances, name):
    with open(shared_instances / "optima.csv") as f:
        return next(int(row["optimum"]) for row in csv.DictReader(f) if row["file"] == name)


INSTANCES = ("404.wcsp", "CELAR6-SUB0.wcsp", "pedigree1.wcsp", "warehouse.wcsp")
# reached from random starts with seed 0 within SWEEPS (CELAR6-SUB0 after 8 sweeps, warehouse after 1)
REACHED, SWEEPS = ("CELAR6-SUB0.wcsp", "warehouse.wcsp"), 20


@pytest.mark.parametrize("name", [n if n == "warehouse.wcsp" else pytest.param(n, marks=pytest.mark.slow)
                                  for n in INSTANCES])
def test_instances_local_search_alone(shared_instances, name):
    """A sweep count, not a time: what a loaded machine reaches is what any machine reaches."""
    problem = preprocess(parsers.read(shared_instances / name)).problem
    best, cost = local_search(problem, None, None, np.random.default_rng(0), n=256, max_sweeps=SWEEPS)
    best_known = optimum(shared_instances, name)
    print(f"{name}: local search alone reaches {problem.to_file_value(cost)} in {SWEEPS} sweeps (optimum {best_known})")
    assert best is not None and problem.evaluate(best) == cost < problem.top
    assert problem.to_file_value(cost) >= best_known
    if name in REACHED:
        assert problem.to_file_value(cost) == best_known


def test_404_rollouts_from_mini_buckets_then_local_search(shared_instances):
    problem = preprocess(parsers.read(shared_instances / "404.wcsp")).problem
    plan = _plan(problem, z=8)
    engine = NumpyEngine()
    lower, tabs, messages = run_plan(problem, plan, engine)
    rows = rollouts(problem, plan, engine, tabs, messages, 256, np.random.default_rng(0))
    best, cost = local_search(problem, rows, None, np.random.default_rng(0), max_sweeps=5)
    assert lower <= optimum(shared_instances, "404.wcsp") == cost == problem.evaluate(best)


@pytest.mark.gpu
@pytest.mark.parametrize("seed", range(20))
def test_rollouts_and_local_search_on_cupy_are_sound(cupy, seed):
    """The same lines on CuPy arrays: greedy rollouts of exact messages optimal, chains feasible,
    never worse than their seeds, small optima found."""
    from gpusolve.engines.cupy_engine import CupyEngine
    rng = np.random.default_rng(300 + seed)
    problem = random_problem(rng, n_max=6, d_max=4, p_hard=0.2)
    opt, _ = brute_force(problem)
    plan, engine = _plan(problem), CupyEngine()
    _, tables, messages = run_plan(problem, plan, engine)
    starts = rollouts(problem, plan, engine, tables, messages, 32, rng)
    assert isinstance(starts, cupy.ndarray)
    if opt < problem.top:
        assert problem.evaluate(cupy.asnumpy(starts[0])) == pytest.approx(opt)
    seed_best = min(problem.evaluate(s) for s in cupy.asnumpy(starts))
    best, cost = local_search(problem, starts, None, rng, xp=cupy, n=32, max_sweeps=60)
    assert cost <= seed_best and cost >= opt
    assert (best is None) == (opt >= problem.top)
    if best is not None:
        assert cost == problem.evaluate(best) == pytest.approx(opt)


def test_chains_run_on_the_device_only_for_problems_with_many_table_entries():
    """Below DEVICE_MIN_ENTRIES one core sweeps as fast and nothing compiles (bench/local_search.py --sweeps)."""
    from gpusolve.search.local import DEVICE_MIN_ENTRIES, chains_module
    device = object()  # stands for cupy: only its identity is returned
    small, large = generate("grid", 16, 4, 0.3, 0.5, 1), generate("grid", 900, 10, 0.3, 0.5, 1)
    assert sum(f.entries for f in small.functions) < DEVICE_MIN_ENTRIES <= sum(f.entries for f in large.functions)
    assert chains_module(small, device) is np and chains_module(large, device) is device
    assert chains_module(large, np) is np


# Hard-constrained problems: the chains' rank, and feasibility under the schedule's stall rule.

def tight_network(seed, large=False):
    """A generated binary network of tightness 0.3-0.6, where feasibility ends: 10-25 variables of
    domain 3-6, or (large) 20-49 of domain 4-6."""
    rng = np.random.default_rng(seed)
    topology = ("random", "grid", "scalefree")[seed % 3]
    sizes = ((36, 49), (20, 41)) if large else ((16, 25), (10, 21))
    n = sizes[0][seed % 2] if topology == "grid" else int(rng.integers(*sizes[1]))
    return generate(topology, n, int(rng.integers(4 if large else 3, 7)), 0.15 if large else 0.3,
                    float(rng.uniform(0.3, 0.6)), seed)


class Stall(Stop):
    """The schedule's stall rule counted in sweeps, so that any machine reaches what this one does: stop
    after `patience` checks without an incumbent or progress towards one, and at the first incumbent."""

    def __init__(self, patience: int):
        super().__init__()
        self.patience, self.checks, self.last, self.events = patience, 0, 0, []

    def progress(self):
        self.last = self.checks
        self.events.append("progress")

    def improve(self, cost, assignment):
        self.last = self.checks
        self.events.append("improve")

    def __call__(self):
        self.checks += 1
        return "improve" in self.events or self.checks - self.last > self.patience

    def run(self, problem, seed, xp=np, n=64):
        best, cost = local_search(problem, None, self, np.random.default_rng(seed), xp=xp, n=n, max_sweeps=300,
                                  on_improve=self.improve, on_progress=self.progress)
        assert "improve" not in self.events[:-1]  # progress is reported only before the first incumbent
        return best, cost


@pytest.mark.parametrize("seed", range(30))
def test_rank_orders_rows_by_violated_hard_tuples_then_cost(seed):
    rng = np.random.default_rng(700 + seed)
    problem = random_problem(rng, n_max=7, d_max=4, p_hard=0.4)
    gt = gathers(problem)
    rows = rng.integers(0, problem.domains, size=(64, len(problem.domains)))
    _, rank, feasible = scores(np, gt, rows, problem.top)
    keys = []
    for row in rows:
        entries = [int(f.table[tuple(row[list(f.scope)])]) for f in problem.functions]
        hard = sum(e >= problem.top for e in entries)
        keys.append((hard, sum(e for e in entries if e < problem.top)))
        assert feasible[len(keys) - 1] == (problem.evaluate(row) < problem.top)
    for i, j in itertools.combinations(range(len(rows)), 2):
        assert np.sign(rank[i] - rank[j]) == np.sign((keys[i] > keys[j]) - (keys[i] < keys[j]))


@pytest.mark.parametrize("block", range(5))
def test_chains_reach_feasibility_before_the_stall_rule_ends_them(tmp_path, block):
    """240 networks near the threshold, 137 of them feasible (pytoulbar2): each gets a feasible point
    though the chains stop after 5 sweeps without news; without progress reports 7 got none."""
    feasible = 0
    for seed in range(48 * block, 48 * (block + 1)):
        problem = tight_network(seed, large=True)
        if toulbar2_optimum(problem, tmp_path / "p.wcsp") is None:
            continue
        feasible += 1
        best, cost = Stall(5).run(problem, seed)
        assert best is not None and cost == problem.evaluate(best) < problem.top, seed
    assert feasible >= 20


def only_optima_feasible(problem, path):
    """`problem` written with top one above its optimum (pytoulbar2) and read back, and that optimum;
    None when infeasible."""
    optimum = toulbar2_optimum(problem, path)
    if optimum is None:
        return None, None
    write_wcsp(problem.like(problem.functions, top=optimum + 1 - problem.offset), path)
    return preprocess(parsers.read(path)).problem, optimum


@pytest.mark.parametrize("block", range(3))
def test_chains_find_the_only_feasible_points_when_top_is_one_above_the_optimum(tmp_path, block):
    """120 small networks, 67 feasible: with top = optimum + 1 each feasible point is optimal."""
    for seed in range(40 * block, 40 * (block + 1)):
        problem, optimum = only_optima_feasible(tight_network(seed), tmp_path / "p.wcsp")
        if problem is not None:
            best, cost = Stall(5).run(problem, seed)
            assert best is not None and problem.to_file_value(cost) == optimum, seed


def test_celar6_with_top_one_above_its_optimum(shared_instances, tmp_path):
    """The RLFAP subproblem whose only feasible assignments are optimal: the chains stopped after
    0.1 s without one, before progress towards feasibility counted."""
    problem, optimum = only_optima_feasible(preprocess(parsers.read(shared_instances / "CELAR6-SUB0.wcsp")).problem,
                                            tmp_path / "celar.wcsp")
    assert problem.top == optimum + 1
    stall = Stall(5)
    best, cost = stall.run(problem, 0, n=256)
    assert problem.to_file_value(cost) == optimum and "progress" in stall.events


@pytest.mark.gpu
@pytest.mark.parametrize("seed", range(10))
def test_chain_steps_on_cupy_equal_numpy(cupy, seed):
    """Integer costs are exact in float64 on both modules: the rank, a sweep at temperature 0 with hard
    entries weighed lexicographically, and an exact tree move give the same arrays on CuPy as on NumPy."""
    from gpusolve.search.local import _rng, sweep
    problem = tight_network(seed)
    rng = np.random.default_rng(seed)
    x = rng.integers(0, problem.domains, size=(32, len(problem.domains)))
    host, device = gathers(problem, np), gathers(problem, cupy)
    for gt in (host, device):
        gt.pool[gt.hard] = gt.span
    np.testing.assert_array_equal(host.pool, cupy.asnumpy(device.pool))
    for a, b in zip(scores(np, host, x, problem.top), scores(cupy, device, cupy.asarray(x), problem.top)):
        np.testing.assert_array_equal(a, cupy.asnumpy(b))
    on = {np: [x.copy(), np.full(x.shape, -1), np.zeros(x.shape, np.int64)]}
    on[cupy] = [cupy.asarray(a) for a in on[np]]
    for xp, gt in ((np, host), (cupy, device)):
        sweep(xp, gt, *on[xp][:1], xp.zeros((32, 1)), *on[xp][1:], 1, 2, _rng(xp, rng))
    np.testing.assert_array_equal(on[np][0], cupy.asnumpy(on[cupy][0]))
    members, parent = induced_tree(host, rng, 8)
    for xp, gt in ((np, host), (cupy, device)):
        tree_move(xp, gt, on[xp][0], members, parent, problem.domains)
    np.testing.assert_array_equal(on[np][0], cupy.asnumpy(on[cupy][0]))


@pytest.mark.gpu
def test_chains_on_cupy_reach_feasibility_as_on_numpy(cupy, tmp_path):
    """The guarantees of the NumPy tests above on the device (its random stream differs, hence a
    patience of 10 sweeps): a feasible point on every feasible network of their first block, an optimal
    one where top is one above the optimum, and one on the 10x10 grid of domain 10 where the chains
    found none in 0.85 s on a GPU machine."""
    for seed in range(48):
        problem = tight_network(seed, large=True)
        if toulbar2_optimum(problem, tmp_path / "p.wcsp") is not None:
            best, cost = Stall(10).run(problem, seed, xp=cupy)
            assert best is not None and cost == problem.evaluate(best) < problem.top, seed
    for seed in range(40):
        problem, optimum = only_optima_feasible(tight_network(seed), tmp_path / "p.wcsp")
        if problem is not None:
            best, cost = Stall(10).run(problem, seed, xp=cupy)
            assert best is not None and problem.to_file_value(cost) == optimum, seed
    grid = generate("grid", 100, 10, 0.3, 0.5, 2)
    best, cost = Stall(10).run(grid, 0, xp=cupy, n=256)
    assert best is not None and cost == grid.evaluate(best) < grid.top
