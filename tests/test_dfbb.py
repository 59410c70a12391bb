"""Depth-first branch and bound with EDAC*: exact optima, valid bounds at every node, reparameterisations
that keep every assignment's cost, and a search that resumes where a slice ended."""
import itertools
import threading
from dataclasses import replace

import numpy as np
import pytest

from gpusolve.search import dfbb
from gpusolve.search import vns as vns_module
from gpusolve.search.dfbb import DepthFirst
from gpusolve.search.dfbb_state import BRANCH, COMPLETE, DEPTH, FOUND, HIGH, LEFT, LOW, LOW_NEXT, MODE, PAUSED, RIGHT
from gpusolve.model.problem import FORBIDDEN, AllDifferent, CostFunction, Problem, Variable, finalize_integer

from helpers import brute_force, random_problem

pytest.importorskip("numba")


# HBFS from a first dive of one backtrack, so that small problems take many dives; depth-first search;
# HBFS splitting every domain of more than 2 values (dichotomic branching, on large domains by default);
# HBFS that starts again from VAC's equivalent problem after 3 nodes (after VAC_AFTER by default)
ORDERS = {"hbfs": {"z": 1}, "dfbb": {"best_first": False}, "split": {"z": 1, "split": 2},
          "vac": {"z": 1, "vac_after": 3}}


def solve(problem, node_limit=1 << 14, upper=None, order="hbfs"):
    search = DepthFirst(problem, upper, **ORDERS[order])
    while search.run(node_limit) != COMPLETE:
        pass
    return search


def random_case(seed, arity_max=3, n_max=6):
    rng = np.random.default_rng(seed)
    return random_problem(rng, n_max=n_max, d_max=4, f_max=10, arity_max=arity_max,
                          p_hard=float(rng.uniform(0.0, 0.7)))


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("block", range(6))
def test_the_optimum_equals_brute_force(block, order):
    for seed in range(block * 60, block * 60 + 60):
        problem = random_case(seed)
        optimum, _ = brute_force(problem)
        search = solve(problem, order=order)
        assert search.complete and search.lower_bound == search.ub
        if optimum >= problem.top:
            assert search.ub >= problem.top, seed  # infeasible: no incumbent
        else:
            assert search.ub == optimum, seed
            assert problem.evaluate(search.best) == optimum, seed


def current_cost(search, problem, assignment):
    """c0 + unary, binary and n-ary costs of the reparameterised problem at this node."""
    lay, S, d, top = search.lay, search.S, search.lay.d, search.top
    total = int(S[0])
    for v, a in enumerate(assignment):
        total += int(S[lay.unary + v * d + a])
    for k in range(lay.m):
        i, j = search.bvar[2 * k], search.bvar[2 * k + 1]
        a, b = assignment[i], assignment[j]
        t = int(search.T[search.boff[k] + a * d + b])
        if t >= top:
            return top
        total += t - int(S[lay.proj + 2 * k * d + a]) - int(S[lay.proj + (2 * k + 1) * d + b])
    for k in range(lay.k):
        positions = range(search.nptr[k], search.nptr[k + 1])
        t = int(search.NT[search.noff[k] + sum(assignment[search.nscope[p]] * search.nstride[p] for p in positions)])
        if t >= top:
            return top
        total += t - sum(int(S[lay.nproj + p * d + assignment[search.nscope[p]]]) for p in positions)
    return min(total, top)


def decisions(search):
    depth = int(search.ctl[DEPTH])
    return [(int(search.dvar[i]), int(search.dval[i]), int(search.dbranch[i])) for i in range(depth)]


def holds(branch, value, a):
    """Does value a of a variable satisfy the decision `branch` on `value`?"""
    return a == value if branch == LEFT else a != value if branch == RIGHT else \
        (a <= value) == (branch in (LOW, LOW_NEXT))


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("arity_max", [2, 4])
@pytest.mark.parametrize("seed", range(60))
def test_at_every_node_c0_bounds_the_subproblem_and_costs_are_kept(seed, arity_max, order):
    """EPTs keep every live assignment's cost; c0 never exceeds the best assignment under the node's
    decisions (brute force), and the reported global bound never exceeds the optimum nor falls."""
    problem = random_case(1000 + seed, arity_max=arity_max, n_max=5)
    optimum, _ = brute_force(problem)
    search = DepthFirst(problem, **ORDERS[order])
    lay, d = search.lay, search.lay.d
    reported = 0
    while True:
        status = search.run(1)
        assert reported <= search.lower_bound <= min(optimum, problem.top)
        reported = search.lower_bound
        if status == PAUSED and search.ctl[MODE] == BRANCH:  # a node after propagation
            taken = decisions(search)
            best_below = problem.top
            alive = search.S[lay.alive: lay.size].reshape(lay.n, d)
            for a in itertools.product(*(range(s) for s in problem.domains)):
                if all(holds(b, v, a[x]) for x, v, b in taken):
                    cost = problem.evaluate(a)
                    best_below = min(best_below, cost)
                    if all(alive[v, a[v]] for v in range(lay.n)) and cost < search.ub:
                        assert current_cost(search, problem, a) == cost, (seed, a)
            assert search.S[0] <= best_below or best_below >= search.ub
        if status == COMPLETE:
            break
    assert search.ub == min(optimum, problem.top)


def reparameterised(search):
    """c0, unary costs, live values and each binary function's (i, j, current table) at this node."""
    lay, S, d, top = search.lay, search.S, search.lay.d, search.top
    unary = S[lay.unary: lay.alive].reshape(lay.n, d)
    alive = S[lay.alive: lay.size].reshape(lay.n, d).astype(bool)
    proj = S[lay.proj: lay.left].reshape(lay.m, 2, d)
    tables = []
    for k in range(lay.m):
        t = search.T[search.boff[k]: search.boff[k] + d * d].reshape(d, d)
        cost = np.where(t >= top, top, t - proj[k, 0][:, None] - proj[k, 1][None, :])
        tables.append((int(search.bvar[2 * k]), int(search.bvar[2 * k + 1]), cost))
    return int(S[0]), unary, alive, tables


def assert_edac(search):
    """NC*, AC*, DAC* (full supports towards later variables) and EAC (de Givry et al., IJCAI 2005); the
    live values listed first in each domain are the alive ones, and below the gap of the last NC* pass."""
    c0, unary, alive, tables = reparameterised(search)
    for v in range(search.lay.n):
        assert (unary[v][alive[v]] == 0).any(), ("NC*", v)
        assert (c0 + unary[v][alive[v]] < search.ub).all(), ("NC", v)
    full = {v: np.zeros(search.lay.d, bool) for v in range(search.lay.n)}  # values fully supported everywhere
    for v in full:
        full[v][:] = alive[v] & (unary[v] == 0)
    for i, j, cost in tables:
        live = cost[np.ix_(alive[i], alive[j])]
        assert (live.min(axis=1) == 0).all() and (live.min(axis=0) == 0).all(), ("AC*", i, j)
        assert ((live + unary[j][alive[j]][None, :]).min(axis=1) == 0).all(), ("DAC*", i, j)
        zero_i, zero_j = alive[i] & (unary[i] == 0), alive[j] & (unary[j] == 0)
        full[i] &= ((cost == 0) & zero_j[None, :]).any(axis=1)
        full[j] &= ((cost == 0) & zero_i[:, None]).any(axis=0)
    assert all(values.any() for values in full.values()), "EAC"
    eac_value = search.S[search.lay.eac: search.lay.dom]  # the value kept for branching
    assert all(full[v][eac_value[v]] for v in full), "EAC value"
    lay, S = search.lay, search.S
    dom = S[lay.dom: lay.pos].reshape(lay.n, lay.d)
    for v in range(lay.n):
        assert sorted(dom[v, : S[lay.size + v]]) == np.flatnonzero(alive[v]).tolist(), ("live", v)
        assert (unary[v][alive[v]] < S[dfbb.SLACK]).all(), ("slack", v)


def random_binary(rng):
    """A dense binary problem, where FDAC* alone often leaves variables that are not EAC."""
    n = int(rng.integers(5, 11))
    variables = [Variable(f"x{i}", int(rng.integers(2, 6))) for i in range(n)]
    functions = [CostFunction((i, j), rng.integers(0, 10, size=(variables[i].domain, variables[j].domain)))
                 for i, j in itertools.combinations(rng.permutation(n).tolist(), 2) if rng.random() < 0.5]
    return finalize_integer(Problem("binary", variables, functions, integer=True), int(rng.integers(20, 200)))


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("seed", range(40))
def test_every_node_after_propagation_is_edac(seed, order):
    search = DepthFirst(random_binary(np.random.default_rng(4000 + seed)), **ORDERS[order])
    while (status := search.run(1)) != COMPLETE:
        if status == PAUSED and search.ctl[MODE] == BRANCH:
            assert_edac(search)


@pytest.mark.parametrize("seed", range(20))
def test_slices_of_any_size_make_the_same_search(seed):
    problem = random_case(2000 + seed)
    one, many = solve(problem, node_limit=1), solve(problem, node_limit=1 << 20)
    assert (one.ub, one.nodes) == (many.ub, many.nodes)


def test_each_better_incumbent_is_reported_as_found():
    problem = random_case(7, n_max=6)
    search = DepthFirst(problem, **ORDERS["hbfs"])
    seen = []
    while (status := search.run(1 << 10)) != COMPLETE:
        if status == FOUND:
            seen.append(search.ub)
            assert problem.evaluate(search.best) == search.ub
    assert seen == sorted(seen, reverse=True) and len(set(seen)) == len(seen)


def feasible_cases(base: int):
    """(seed, problem, optimum, an optimal assignment) of the feasible ones among 60 random cases: at least
    20 of them."""
    cases = [(seed, problem, *brute_force(problem)) for seed in range(60)
             for problem in [random_case(base + seed)]]
    cases = [case for case in cases if case[2] < case[1].top]
    assert len(cases) >= 20
    return cases


@pytest.mark.parametrize("order", ORDERS)
def test_an_incumbent_handed_over_midway_keeps_the_search_exact(order):
    """Beside.publish hands the core the schedule's incumbent between slices: of the optimum's cost, the
    search ends proving it with nothing better; above it, the search still finds the optimum; a worse
    one changes nothing."""
    for seed, problem, optimum, _ in feasible_cases(3000):
        for upper in (optimum, optimum + 1):
            search = DepthFirst(problem, **ORDERS[order])
            search.run(seed % 5)  # a few nodes in (0: the root propagated)
            search.tighten(upper)
            search.tighten(problem.top)
            while search.run(1) != COMPLETE:
                pass
            assert search.ub == search.lower_bound == optimum, seed
            if upper > optimum:
                assert problem.evaluate(search.best) == optimum, seed


def test_an_adopted_incumbent_keeps_the_search_exact():
    """adopt (the polish's incumbents): a worse assignment changes nothing; a better one becomes the
    bound and the values tried first, and the search still ends proving the optimum."""
    for seed, problem, optimum, best in feasible_cases(3100):
        search = DepthFirst(problem)
        search.run(seed % 5)
        before = (search.ub, search.best.copy())
        search.adopt(np.zeros(len(problem.variables), dtype=np.int64), search.ub)  # not better: ignored
        assert search.ub == before[0] and np.array_equal(search.best, before[1]), seed
        if optimum < search.ub:
            search.adopt(np.asarray(best), optimum)
            assert search.ub == optimum and np.array_equal(search.best, best), seed
        while search.run(1) != COMPLETE:
            pass
        assert search.ub == search.lower_bound == optimum == problem.evaluate(search.best), seed


@pytest.mark.parametrize("handed, own", [(False, True), (True, True), (True, False)])
def test_the_polish_publishes_better_incumbents_of_their_true_cost(monkeypatch, handed, own):
    """Beside._polish (VNS from the core's incumbent, or the caller's where that is better or the core has
    none): each assignment it hands over costs less than the one before and than the one it started from,
    is the search's incumbent at its cost, and the core goes on to prove the optimum."""
    from gpusolve.schedule.bounds import Bounds
    monkeypatch.setattr(dfbb, "POLISH_STALL_S", 0.5)  # the polish ends 0.5 s after its last better incumbent
    rng = np.random.default_rng(5)
    n, d = 24, 4
    functions = [CostFunction((i, j), rng.integers(0, 30, size=(d, d)).astype(np.int64))
                 for i in range(n) for j in range(i + 1, n) if rng.random() < 0.2]
    problem = finalize_integer(Problem("polish", [Variable(f"x{i}", d) for i in range(n)], functions), None)
    bounds = Bounds.start(problem, 0.0, None)
    beside = dfbb.Beside(problem, bounds)
    start = np.full(n, d - 1, dtype=np.int64)
    if own:
        beside.search.adopt(start, problem.evaluate(start))
    if handed:  # the caller holds a better incumbent than the core's: the polish starts from it
        caller = min((rng.integers(0, d, size=n) for _ in range(200)), key=problem.evaluate)
        assert bounds.offer(caller, "elsewhere") and bounds.upper < problem.evaluate(start)
        if not own:  # the core's none (its -1s) would evaluate as every variable's last value
            caller = max((rng.integers(0, d, size=n) for _ in range(200)), key=problem.evaluate)
            bounds = Bounds.start(problem, 0.0, None)
            assert bounds.offer(caller, "elsewhere") and bounds.upper > problem.evaluate(start)
        start = caller
        beside.publish(bounds)
    starts, original = [], vns_module.vns
    monkeypatch.setattr(vns_module, "vns", lambda problem, assignment, *rest: starts.append(assignment) or
                        original(problem, assignment, *rest))
    beside._go.set()
    beside._polish(30.0)
    assert starts == [[int(v) for v in start]]
    found = beside._found
    assert beside.polish["runs"] == 1 and beside.polish["better"] == len(found) >= 1
    costs = [problem.evaluate(a) for a in found]
    assert costs == sorted(set(costs), reverse=True) and costs[0] < problem.evaluate(start)
    assert beside.search.ub == costs[-1] and np.array_equal(beside.search.best, found[-1])
    while beside.search.run(1 << 10) != COMPLETE:
        pass
    beside.publish(bounds)
    assert bounds.upper == beside.search.ub == beside.search.lower_bound <= costs[-1]


def test_a_ball_problem_costs_what_the_whole_does_less_a_constant():
    """vns._ball_problem: over every assignment of a ball's variables (the others as the incumbent has them),
    the whole problem's cost less the ball problem's is one constant, and the bound is the incumbent's cost
    on the ball: a better ball assignment is a better whole one."""
    rng = np.random.default_rng(3)
    checked = 0
    for seed in range(60):
        problem = random_case(seed, n_max=7)
        best, _ = brute_force(problem)
        incumbent = [int(rng.integers(v.domain)) for v in problem.variables]
        touching = [[f for f in problem.functions if v in f.scope] for v in range(len(problem.variables))]
        free = sorted(int(v) for v in rng.choice(len(incumbent), min(3, len(incumbent)), replace=False))
        sub, upper = vns_module._ball_problem(problem, free, incumbent, touching)
        gaps = set()
        for values in itertools.product(*(range(problem.domains[v]) for v in free)):
            whole = list(incumbent)
            for v, a in zip(free, values):
                whole[v] = a
            if problem.evaluate(whole) < problem.top:
                gaps.add(problem.evaluate(whole) - sub.evaluate(list(values)))
        if problem.evaluate(incumbent) < problem.top:
            assert upper == sub.evaluate([incumbent[v] for v in free]), seed
            checked += 1
        assert len(gaps) <= 1, seed
    assert checked >= 10


def test_vns_hands_over_strictly_better_true_costs_and_a_ball_of_all_finds_the_optimum():
    """vns: each assignment it hands over costs less than the one before (its true cost); with a ball of
    every variable and no node limit, its first ball is the whole search: the brute-force optimum."""
    from gpusolve.search.local import ball, movable_adjacency
    found = connected = 0
    for seed in range(150):
        problem = random_case(seed, n_max=7)
        movable = [v for v, d in enumerate(problem.domains) if d > 1]
        chain = [CostFunction((u, v), np.zeros((problem.domains[u], problem.domains[v]), dtype=np.int64))
                 for u, v in zip(movable, movable[1:])]  # costs nothing, connects the variables a ball frees
        problem = Problem("vns", problem.variables, problem.functions + chain, top=problem.top)
        optimum, _ = brute_force(problem)
        start = min(([int(a) for a in np.random.default_rng(seed).integers(0, problem.domains)] for _ in range(50)),
                    key=problem.evaluate)
        adjacency = movable_adjacency(problem)
        if optimum >= problem.top or problem.evaluate(start) >= problem.top or not adjacency \
                or len(ball(adjacency, np.random.default_rng(0), len(start))) < len(adjacency):
            continue  # infeasible, nothing to move, or a ball (connected) cannot hold every variable
        connected += 1
        heard = []
        balls = iter([1])  # one ball, then the stop
        best, cost = vns_module.vns(problem, start, dfbb.ball_search, np.random.default_rng(seed),
                                    lambda: next(balls, 0) == 0, lambda c, a: heard.append((c, a)),
                                    size=len(start), nodes=1 << 30)
        assert [c for c, _ in heard] == sorted({c for c, _ in heard}, reverse=True), seed
        assert all(problem.evaluate(a) == c < problem.evaluate(start) for c, a in heard), seed
        assert cost == problem.evaluate(best) == optimum, seed
        found += bool(heard)
    assert connected >= 25 and found >= 5


def test_a_given_upper_bound_prunes_and_an_unreachable_one_finds_nothing():
    problem = random_case(11)
    optimum, _ = brute_force(problem)
    if optimum >= problem.top:
        pytest.skip("infeasible draw")
    assert solve(problem, upper=optimum + 1).ub == optimum
    assert solve(problem, upper=optimum).best[0] == -1  # nothing strictly better than the optimum


@pytest.mark.parametrize("seed", range(30))
def test_an_nary_function_alone_gives_its_least_cost_at_the_root(seed):
    """AC* on an n-ary function projects its least cost onto a variable, and NC* onto c0: alone, it is the
    optimum (brute force) before any branching."""
    rng = np.random.default_rng(6000 + seed)
    arity = int(rng.integers(3, 6))
    variables = [Variable(f"x{i}", int(rng.integers(1, 5))) for i in range(arity)]
    table = rng.integers(1, 30, size=[v.domain for v in variables])
    table[rng.random(table.shape) < 0.3] = FORBIDDEN
    problem = finalize_integer(Problem("nary", variables, [CostFunction(tuple(range(arity)), table)],
                                       integer=True), 100)
    optimum, _ = brute_force(problem)
    search = DepthFirst(problem)
    search.run(0)  # the root's propagation only
    assert search.nodes == 0 and search.lower_bound == min(optimum, problem.top)


def test_pedigree1s_root_bound_comes_from_its_nary_functions(shared_instances):
    """pedigree1's costs are in functions of arity 3 to 5 whose least cost is 0 each: before n-ary AC*,
    its root bound was 0. It stays below the known optimum (optima.csv)."""
    import csv
    from gpusolve import parsers
    problem = parsers.read(shared_instances / "pedigree1.wcsp")
    with open(shared_instances / "optima.csv") as f:
        optimum = next(int(row["optimum"]) for row in csv.DictReader(f) if row["file"] == "pedigree1.wcsp")
    search = DepthFirst(problem)
    search.run(0)
    assert 0 < problem.to_file_value(search.lower_bound) <= optimum


def test_best_first_raises_the_global_bound_before_the_proof(shared_instances):
    """HBFS's point: on pedigree1 (not proven in these nodes) the bound of its open nodes rises well above
    the root's, where depth-first search keeps the root's open left branch, hence its bound; both stay
    below the optimum (optima.csv), and HBFS's incumbent is no worse."""
    import csv
    from gpusolve import parsers
    problem = parsers.read(shared_instances / "pedigree1.wcsp")
    with open(shared_instances / "optima.csv") as f:
        optimum = next(int(row["optimum"]) for row in csv.DictReader(f) if row["file"] == "pedigree1.wcsp")
    found = {}
    for best_first in (True, False):
        search = DepthFirst(problem, best_first=best_first)
        search.run(0)
        root = search.lower_bound
        while search.nodes < 20000 and search.run(1 << 12) != COMPLETE:
            pass
        assert not search.complete and search.lower_bound <= optimum
        found[best_first] = (search.lower_bound - root, search.ub)
    assert found[False][0] == 0 and found[True][0] > 0
    assert found[True][1] <= found[False][1]


@pytest.mark.parametrize("seed", range(10))
def test_costs_beyond_int32_stay_exact(seed):
    """Binary tables are stored as int32 only where top fits; costs near 2**40 keep the int64 path."""
    narrow = random_case(7000 + seed)
    functions = [CostFunction(f.scope, np.where(f.table == FORBIDDEN, FORBIDDEN, f.table * (1 << 35)))
                 for f in narrow.functions]
    problem = finalize_integer(Problem("wide", narrow.variables, functions, integer=True), None)
    optimum, _ = brute_force(problem)
    search = solve(problem)
    assert search.T.dtype == np.int64 and search.ub == min(optimum, problem.top)


def test_float_problems_and_soft_globals_kept_whole_are_refused():
    rng = np.random.default_rng(3)
    problem = random_problem(rng, integer=False)
    assert dfbb.supports(problem) == "costs are not integers"
    with pytest.raises(ValueError):
        DepthFirst(problem)
    soft = with_alldifferents(random_case(1), np.random.default_rng(1), cost=3)
    assert dfbb.supports(soft) == "a soft global constraint is kept whole"
    assert dfbb.supports(replace(soft, globals=[replace(g, tabled=True) for g in soft.globals])) is None


def with_alldifferents(problem, rng, cost=FORBIDDEN):
    """`problem` with one or two AllDifferents kept whole (not tabled), each comparing values that a domain
    index maps to: the index itself, the index plus the position (N-queens' diagonals) or a random map
    where two indices may share a value; one in three exempts a value."""
    globals_ = []
    for _ in range(int(rng.integers(1, 3))):
        n = len(problem.variables)
        k = int(rng.integers(min(2, n), n + 1))
        scope = tuple(int(v) for v in rng.choice(n, k, replace=False))
        kind = int(rng.integers(3))
        values = tuple(np.arange(problem.domains[v], dtype=np.int64) + (i if kind == 1 else 0) if kind < 2 else
                       rng.integers(0, problem.domains[v] + 1, size=problem.domains[v]).astype(np.int64)
                       for i, v in enumerate(scope))
        exempt = frozenset({int(rng.integers(0, 3))}) if rng.random() < 1 / 3 else frozenset()
        globals_.append(AllDifferent(scope, values, cost, "var", exempt))
    return replace(problem, globals=globals_)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("block", range(3))
def test_hard_alldifferents_kept_whole_are_forward_checked_to_the_brute_force_optimum(block, order):
    """Hard AllDifferents outside the tables: each assigned value leaves the other variables of its
    AllDifferents, so the optimum is brute force's with every violation forbidden (infeasible ones too)."""
    for seed in range(block * 60, block * 60 + 60):
        rng = np.random.default_rng(9000 + seed)
        problem = with_alldifferents(random_case(9000 + seed, arity_max=3, n_max=6), rng)
        assert dfbb.supports(problem) is None
        optimum, _ = brute_force(problem)
        search = solve(problem, order=order)
        assert search.complete and search.lower_bound == search.ub, seed
        if optimum >= problem.top:
            assert search.ub >= problem.top, seed
        else:
            assert search.ub == optimum and problem.evaluate(search.best) == optimum, seed


@pytest.mark.parametrize("block", range(5))
def test_toulbar2_agrees_on_generated_problems(tmp_path, block):
    """500 problems: binary and ternary, hard tuples, infeasible ones and ties; the optimum proven, and the
    bounds of a search cut off after a few nodes bracket it."""
    pytest.importorskip("pytoulbar2")
    from helpers import toulbar2_optimum
    for seed in range(block * 100, block * 100 + 100):
        rng = np.random.default_rng(5000 + seed)
        problem = random_problem(rng, n_max=12, d_max=6, f_max=30, arity_max=3, p_hard=float(rng.uniform(0, 0.5)))
        expected = toulbar2_optimum(problem, tmp_path / f"p{seed}.wcsp")
        search = solve(problem)
        got = None if search.ub >= problem.top else search.ub + problem.offset
        assert got == expected, seed
        cut = DepthFirst(problem, split=4)
        cut.run(int(rng.integers(1, 20)))
        if expected is not None:
            assert cut.lower_bound + problem.offset <= expected <= cut.ub + problem.offset, seed
        else:
            assert cut.ub >= problem.top, seed


@pytest.mark.parametrize("how", ["alone", "beside"])
def test_a_stop_or_a_proof_beside_does_not_wait_for_the_cores_first_slice(how, monkeypatch):
    """The core's first slice compiles it (tens of seconds with a cold numba cache): neither a Ctrl-C
    (`run_here`, the core alone) nor the end of the AND/OR search beside it (`finish`) may wait for
    that. Both return while the slice is still running (a slice that blocks until released stands
    for the compile; no clock involved)."""
    from gpusolve.schedule.bounds import Bounds
    from gpusolve.stop import Stop
    problem = random_problem(np.random.default_rng(3), n_max=5, d_max=3, arity_max=2)
    bounds = Bounds.start(problem, 0.0, None)
    beside = dfbb.Beside(problem, bounds)
    started, release, ended = threading.Event(), threading.Event(), threading.Event()

    def compiling(nodes):
        started.set()
        release.wait(60)
        ended.set()
        return PAUSED
    monkeypatch.setattr(beside.search, "run", compiling)

    class CtrlC(Stop):  # interrupted once the slice has begun
        def __call__(self):
            self.interrupted = self.interrupted or started.is_set()
            return bool(self.interrupted)
    if how == "alone":
        beside.run_here(bounds, CtrlC())
    else:
        beside.start()
        started.wait(60)
        beside.finish(bounds)
    assert started.is_set() and not ended.is_set()
    release.set()


def test_a_large_domain_is_split_at_the_middle_of_its_live_range_the_preferred_half_first():
    """One variable of 8 values whose unary costs are least at value 5, values 0 and 1 pruned by the
    upper bound: the first decision keeps the values above the middle of 2..7 (x > 4), where 5 lies;
    with splitting off, it tries x = 5."""
    unary = np.array([30, 20, 3, 2, 1, 0, 1, 2])
    problem = finalize_integer(Problem("one", [Variable("x", 8)], [CostFunction((0,), unary)], integer=True), 100)
    for split, expected in ((2, (0, 4, HIGH)), (8, (0, 5, LEFT))):
        search = DepthFirst(problem, upper=10, split=split)
        search.run(1)
        assert decisions(search) == [expected]


def test_past_the_open_node_limit_dives_run_to_their_end_and_stay_exact(monkeypatch):
    """With room for a few stored decisions, HBFS's dives stop being cut once the open nodes hold more:
    the search goes on depth-first from there, and still proves the optimum."""
    monkeypatch.setattr(dfbb, "OPEN_LIMIT", 6)
    limited = 0
    for seed in range(40):
        problem = random_binary(np.random.default_rng(9000 + seed))
        optimum = solve(problem, order="dfbb").ub  # proven against brute force above
        search = DepthFirst(problem, z=1)
        unlimited = False
        while search.run(1) != COMPLETE:
            unlimited |= search.stored > 6 and search.ctl[dfbb.ZLIMIT] == dfbb.NO_LIMIT
        limited += unlimited
        assert search.ub == optimum, seed
    assert limited >= 3  # 6 of these 40 problems store more than 6 decisions
