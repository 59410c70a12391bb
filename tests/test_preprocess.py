"""Node and arc consistency on forbidden tuples: infeasibility found early, optimum and values kept."""
import itertools

import numpy as np
import pytest
from helpers import brute_force, random_problem, tight_problem

from gpusolve.model.problem import FORBIDDEN, CostFunction, Problem, TupleFunction, Variable, finalize_integer
from gpusolve.consistency.preprocess import lower_top, preprocess
from gpusolve.schedule.solve import Options, solve


def hand_made(unary, binary, domains=(2, 2, 2), top=10):
    """A problem from {var: costs} and {(u, v): table} with forbidden = top."""
    variables = [Variable(f"x{i}", d) for i, d in enumerate(domains)]
    functions = [CostFunction((v,), np.array(c, dtype=np.int64)) for v, c in unary.items()]
    functions += [CostFunction(s, np.array(t, dtype=np.int64)) for s, t in binary.items()]
    return finalize_integer(Problem("hand", variables, functions), top)


def test_arc_consistency_wipes_out_a_domain():
    f = FORBIDDEN
    # x0 != 0, x0 == x1, x1 != 1: x0 = 1 forces x1 = 1, which is forbidden
    problem = hand_made({0: [f, 0], 1: [0, f]}, {(0, 1): [[0, f], [f, 0]]})
    assert preprocess(problem).infeasible
    r = solve(problem, Options(device="cpu"))
    assert r.status == "infeasible" and "preprocessing" in r.message
    # a wipe-out two arcs away: x2 == x1 as well
    problem = hand_made({0: [f, 0], 2: [0, f]}, {(0, 1): [[0, f], [f, 0]], (1, 2): [[0, f], [f, 0]]})
    assert preprocess(problem).infeasible
    # unary costs that add up to top empty a domain on their own
    two = hand_made({0: [6, 7]}, {}, top=11)
    assert not preprocess(two).infeasible
    two.functions.append(CostFunction((0,), np.array([6, 6], dtype=np.int64)))
    assert preprocess(two).infeasible


def test_preprocessing_keeps_the_optimum_and_maps_values_back():
    removed = 0
    for seed in range(150):
        problem = tight_problem(seed)
        reduced = preprocess(problem)
        best, _ = brute_force(problem)
        if reduced.infeasible:
            assert best >= problem.top
            continue
        removed += reduced.removed
        small = reduced.problem
        assert brute_force(small)[0] == pytest.approx(best)
        for a in itertools.islice(itertools.product(*(range(d) for d in small.domains)), 50):
            assert problem.evaluate(reduced.expand(a)) == pytest.approx(small.evaluate(a))
    assert removed >= 10  # the family exercises the value maps


def test_random_infeasible_problems_are_reported_infeasible():
    caught = infeasible = 0
    for seed in range(200):
        problem = tight_problem(seed)
        if brute_force(problem)[0] < problem.top:
            continue
        infeasible += 1
        caught += preprocess(problem).infeasible
        assert solve(problem, Options(device="cpu")).status == "infeasible"
    assert infeasible >= 20 and caught >= infeasible // 2


def test_lower_top_forbids_exactly_the_costs_at_or_above_it():
    problem = tight_problem(7)
    while brute_force(problem)[0] >= problem.top:
        problem = tight_problem(int(problem.top) + 11)
    best, _ = brute_force(problem)
    assert brute_force(lower_top(problem, best + 1))[0] == best
    assert brute_force(lower_top(problem, best))[0] >= best


@pytest.mark.parametrize("seed", range(40))
def test_functions_over_one_scope_are_merged_into_an_equivalent_one(seed):
    rng = np.random.default_rng(seed)
    problem = random_problem(rng, n_max=4, d_max=3, f_max=14, arity_max=2, integer=seed % 4 != 3)
    reduced = preprocess(problem)
    if reduced.infeasible:
        return
    scopes = [frozenset(f.scope) for f in reduced.problem.functions if f.scope]
    assert len(scopes) == len(set(scopes))
    for a in itertools.product(*(range(d) for d in reduced.problem.domains)):
        assert reduced.problem.evaluate(a) == pytest.approx(problem.evaluate(reduced.expand(a)))


def naive_arc_consistency(tables, live):
    """The arc-consistent domains by definition: repeat until nothing changes, keeping a value while
    some allowed tuple of each table over it has only live values."""
    live = [m.copy() for m in live]
    changed = True
    while changed:
        changed = False
        for scope, ok in tables:
            for k, u in enumerate(scope):
                for a in np.flatnonzero(live[u]):
                    if not any(ok[t] and all(live[w][t[j]] for j, w in enumerate(scope))
                               for t in itertools.product(*(range(len(live[w])) for w in scope)) if t[k] == a):
                        live[u][a] = False
                        changed = True
    return live


def test_revise_reaches_the_arc_consistent_fixpoint_on_pair_lists_and_dense_tables():
    """revise keeps a binary table with few allowed pairs as their list, one allowing every tuple as None
    (supporting every live value unless another domain is empty) and any other as a boolean table read
    over the live values; each ends at the fixpoint the definition gives."""
    from gpusolve.consistency.preprocess import revise
    rng = np.random.default_rng(4)
    kinds = set()
    for seed in range(120):
        domains = rng.integers(2, 12, size=int(rng.integers(2, 5)))
        n = len(domains)
        scopes = [(int(rng.integers(n)),)] + [tuple(int(v) for v in rng.choice(n, size=2, replace=False))
                                              for _ in range(int(rng.integers(1, 4)))]
        if n >= 3 and seed % 3 == 0:
            scopes.append(tuple(int(v) for v in rng.choice(n, size=3, replace=False)))
        functions = []
        for scope in scopes:
            shape = tuple(int(domains[v]) for v in scope)
            density = rng.choice([0.03, 0.1, 0.5, 0.9])
            table = np.where(rng.random(shape) < density, 0, FORBIDDEN).astype(np.int64)
            functions.append(CostFunction(scope, table))
        problem = finalize_integer(Problem("r", [Variable(f"x{i}", int(d)) for i, d in enumerate(domains)],
                                           functions), 10)
        live = [rng.random(int(d)) < 0.8 for d in domains]
        want = naive_arc_consistency([(f.scope, f.table < problem.top) for f in problem.functions], live)
        watching: dict = {}
        for i, f in enumerate(problem.functions):
            for v in f.scope:
                watching.setdefault(v, []).append(i)
        allowed: dict = {}
        got = [m.copy() for m in live]
        queue = list(range(len(problem.functions)))
        ok = revise(problem, got, watching, queue, set(queue), allowed)
        kinds.update(type(a) for a in allowed.values())
        assert ok == all(m.any() for m in want)
        if ok:  # revise stops at the first empty domain
            for g, w in zip(got, want):
                np.testing.assert_array_equal(g, w)
    assert kinds == {tuple, np.ndarray, type(None)}  # every representation was exercised (None: all allowed)


@pytest.mark.parametrize("seed", range(60))
def test_root_arc_consistency_by_batches_of_one_shape_reaches_the_fixpoint(seed):
    """consistent revises small dense binary tables a shape at a time (_revise_batches), the rest one by
    one: the domains it keeps are the arc-consistent ones by definition, infeasible where one empties."""
    from gpusolve.consistency.preprocess import consistent
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 7))
    domains = rng.choice([2, 3, 4], size=n)
    functions = [CostFunction((v,), np.where(rng.random(int(domains[v])) < 0.2, FORBIDDEN, 1).astype(np.int64))
                 for v in range(n)]
    for _ in range(int(rng.integers(2, 10))):  # few shapes: batches of several functions
        scope = tuple(int(v) for v in rng.choice(n, size=2, replace=False))
        table = np.where(rng.random((int(domains[scope[0]]), int(domains[scope[1]])))
                         < rng.choice([0.3, 0.6, 0.9]), 0, FORBIDDEN).astype(np.int64)
        functions.append(CostFunction(scope, table))
    if seed % 3 == 0:
        scope = tuple(int(v) for v in rng.choice(n, size=3, replace=False))
        shape = tuple(int(domains[v]) for v in scope)
        functions.append(CostFunction(scope, np.where(rng.random(shape) < 0.5, 0, FORBIDDEN).astype(np.int64)))
    problem = finalize_integer(Problem("r", [Variable(f"x{i}", int(d)) for i, d in enumerate(domains)],
                                       functions), 10)
    live = [np.ones(int(d), dtype=bool) for d in domains]
    for f in problem.functions:
        if f.arity == 1:
            live[f.scope[0]] &= f.table < problem.top
    want = naive_arc_consistency([(f.scope, f.table < problem.top) for f in problem.functions if f.arity > 1],
                                 live)
    got = consistent(problem)
    assert got.infeasible == (not all(m.any() for m in want))
    if not got.infeasible:
        for kept, m in zip(got.values, want):
            np.testing.assert_array_equal(np.asarray(kept), np.flatnonzero(m))


def listed(f: CostFunction, dims) -> TupleFunction:
    """f as its tuples below FORBIDDEN and a forbidden default."""
    tuples = np.argwhere(f.table < FORBIDDEN)
    return TupleFunction(f.scope, dims, tuples, f.table[tuple(tuples.T)], FORBIDDEN)


def test_listed_tuples_are_the_dense_table():
    """A TupleFunction's table, costs, least cost, restriction and finalisation (negative costs into
    the offset) are those of the dense table it lists."""
    rng = np.random.default_rng(3)
    for seed in range(60):
        dims = tuple(int(d) for d in rng.integers(1, 5, size=int(rng.integers(1, 4))))
        table = rng.integers(-5, 9, size=dims).astype(np.int64)
        table[rng.random(dims) < 0.4] = FORBIDDEN
        default = int(rng.integers(-3, 6)) if seed % 2 else FORBIDDEN
        some = rng.random(dims) < 0.6
        tuples = np.argwhere(some)
        f = TupleFunction(tuple(range(len(dims))), dims, tuples, table[some], default)
        dense = np.where(some, table, default)
        np.testing.assert_array_equal(f.table, dense)
        assert f.least() == dense.min() and f.entries == dense.size
        for t in itertools.product(*(range(d) for d in dims)):
            assert f.cost(t) == dense[t]
        kept = [np.sort(rng.choice(d, size=int(rng.integers(1, d + 1)), replace=False)) for d in dims]
        np.testing.assert_array_equal(f.restrict(kept).table, dense[np.ix_(*kept)])
        variables = [Variable(f"x{i}", d) for i, d in enumerate(dims)]
        a = finalize_integer(Problem("a", variables, [f]), None)
        b = finalize_integer(Problem("b", variables, [CostFunction(f.scope, dense.copy())]), None)
        assert (a.offset, a.top) == (b.offset, b.top), seed
        np.testing.assert_array_equal(a.functions[0].table, b.functions[0].table)
    huge = TupleFunction((0, 1), (1 << 32, 1 << 32), [[5, 7], [1 << 31, 3]], [4, 9], FORBIDDEN)  # no flat index
    assert (huge.cost((5, 7)), huge.cost((1 << 31, 3)), huge.cost((7, 5))) == (4, 9, FORBIDDEN)


def test_pair_supports_reach_the_arc_consistent_fixpoint():
    """MAC's PairSupports (binary functions propagated from removed values): from full domains
    (`start`) and after removing random values from an arc-consistent state (`follow`), the
    domains the definition gives, or a wiped-out domain where it empties one."""
    from gpusolve.consistency.preprocess import PairSupports
    rng = np.random.default_rng(5)
    checked = {True: 0, False: 0}
    for seed in range(150):
        domains = [int(d) for d in rng.integers(2, 7, size=int(rng.integers(2, 6)))]
        n, width = len(domains), max(domains)
        functions = []
        for _ in range(int(rng.integers(1, 6))):
            scope = tuple(int(v) for v in rng.choice(n, size=2, replace=False))
            shape = tuple(domains[v] for v in scope)
            table = np.where(rng.random(shape) < rng.choice([0.2, 0.5, 0.8]), 0, FORBIDDEN).astype(np.int64)
            functions.append(listed(CostFunction(scope, table), shape))
        problem = finalize_integer(Problem("p", [Variable(f"x{i}", d) for i, d in enumerate(domains)], functions), 10)
        tables = [(f.scope, f.table < problem.top) for f in problem.functions]
        matrix = np.zeros((n, width), dtype=bool)
        for v, d in enumerate(domains):
            matrix[v, :d] = True
        pairs = PairSupports(problem, matrix, {})
        assert pairs.members == list(range(len(functions)))
        heard = []
        ok = pairs.start(lambda r, c: heard.append((np.asarray(r), np.asarray(c))))
        want = naive_arc_consistency(tables, [np.ones(d, dtype=bool) for d in domains])
        assert ok == all(m.any() for m in want), seed
        checked[ok] += 1
        if not ok:
            continue
        for v, d in enumerate(domains):
            np.testing.assert_array_equal(matrix[v, :d], want[v], err_msg=f"seed {seed}")
        gone = np.zeros_like(matrix)
        for r, c in heard:
            gone[r, c] = True
        np.testing.assert_array_equal(gone, ~matrix & (np.arange(width)[None, :] < np.array(domains)[:, None]))
        live = np.argwhere(matrix)
        drop = live[rng.random(len(live)) < 0.25]
        matrix[drop[:, 0], drop[:, 1]] = False
        if not matrix.any(axis=1).all():  # search removes values from domains it leaves non-empty
            continue
        want = naive_arc_consistency(tables, [matrix[v, :d].copy() for v, d in enumerate(domains)])
        ok = pairs.follow(drop[:, 0], drop[:, 1], lambda r, c: None)
        assert ok == all(m.any() for m in want), seed
        if ok:
            for v, d in enumerate(domains):
                np.testing.assert_array_equal(matrix[v, :d], want[v], err_msg=f"seed {seed}")
    assert min(checked.values()) >= 20
