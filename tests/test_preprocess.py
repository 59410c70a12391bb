"""Node and arc consistency on forbidden tuples: infeasibility found early, optimum and values kept."""
import itertools

import numpy as np
import pytest
from helpers import brute_force, random_problem, tight_problem

from gpusolve.model import FORBIDDEN, CostFunction, Problem, Variable, finalize_integer
from gpusolve.preprocess import lower_top, preprocess
from gpusolve.solve import Options, solve


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
