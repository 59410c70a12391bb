"""Functional variable elimination in preprocessing (toulbar2's -f 1): the optimum and the reported
assignments stay those of the file's problem, against brute force and toulbar2."""
import itertools

import numpy as np
import pytest
from helpers import internal, toulbar2_optimum

from gpusolve.consistency.preprocess import preprocess
from gpusolve.inference.eliminate import bounded_sparse
from gpusolve.engines.numpy_engine import NumpyEngine
from gpusolve.limits import Limits
from gpusolve.model.problem import FORBIDDEN, AllDifferent, CostFunction, Problem, TupleFunction, Variable, \
    finalize_integer
from gpusolve.order import graph
from gpusolve.plan.buckets import build_plan
from gpusolve.schedule.solve import Options, solve

PLANTS = ("permutation", "partial", "duplex", "chain", "two", "constant")


def exhaustive(problem: Problem):
    """Every assignment's cost at once, by broadcasting each table over the grid of all assignments
    (saturating at top): the independent reference."""
    n = len(problem.variables)
    total = np.zeros(problem.domains, dtype=problem.dtype)
    for f in problem.functions:
        order = np.argsort(f.scope)
        table = np.transpose(f.table, order) if f.scope else f.table
        shape = [1] * n
        for v in f.scope:
            shape[v] = problem.domains[v]
        total = total + table.reshape(shape)
        if problem.integer:
            total = np.minimum(total, problem.top)
    return total


def scoped(problem: Problem) -> int:
    return len({v for f in problem.functions for v in f.scope})


def functional_table(rng, dx: int, dy: int, partial: bool, costs: int) -> np.ndarray:
    """A table over (x, y) allowing at most one y per x (exactly one unless `partial`), with costs
    below `costs` on the allowed pairs."""
    table = np.full((dx, dy), FORBIDDEN, dtype=np.int64)
    for a in range(dx):
        if not partial or rng.random() < 0.8:
            table[a, rng.integers(dy)] = rng.integers(costs)
    return table


def planted(seed: int) -> tuple[Problem, bool]:
    """(a random problem of soft and hard binary and ternary functions with planted functional
    hard constraints, whether one of them is sure to be functional); some functions listed as
    tuples, some costs real."""
    rng = np.random.default_rng(seed)
    integer = seed % 6 != 5
    n = int(rng.integers(3, 7))
    domains = [int(d) for d in rng.integers(1, 5, size=n)] if seed % 2 else [int(rng.integers(2, 5))] * n
    costs = int(rng.choice([3, 20]))  # few costs: ties
    functions = []
    sure = False
    for _ in range(int(rng.integers(1, 3))):
        kind = PLANTS[int(rng.integers(len(PLANTS)))]
        x, y, z = (int(v) for v in rng.choice(n, 3, replace=False))
        if kind == "permutation" and domains[x] != domains[y]:
            kind = "partial"
        if kind == "permutation":
            table = np.full((domains[x], domains[x]), FORBIDDEN, dtype=np.int64)
            table[np.arange(domains[x]), rng.permutation(domains[x])] = rng.integers(costs, size=domains[x])
            functions.append(CostFunction((x, y), table))
        elif kind in ("partial", "constant"):
            if kind == "partial":
                table = functional_table(rng, domains[x], domains[y], True, costs)
            else:  # every x with the same y value
                table = np.where(np.arange(domains[y])[None, :] == rng.integers(domains[y]),
                                 rng.integers(costs, size=(domains[x], 1)), FORBIDDEN)
            # either scope order
            functions.append(CostFunction((x, y), table) if rng.random() < 0.5 else
                             CostFunction((y, x), np.ascontiguousarray(table.T)))
        elif kind == "duplex":  # |x - y| = k: functional where one side has one partner in the domain
            k = int(rng.integers(0, 3))
            gap = np.abs(np.arange(domains[x])[:, None] - np.arange(domains[y])[None, :])
            functions.append(CostFunction((x, y), np.where(gap == k, 0, FORBIDDEN).astype(np.int64)))
        elif kind == "chain":  # x -> y -> z
            functions.append(CostFunction((x, y), functional_table(rng, domains[x], domains[y], False, costs)))
            functions.append(CostFunction((y, z), functional_table(rng, domains[y], domains[z], False, costs)))
        else:  # y a function of x and of z
            functions.append(CostFunction((x, y), functional_table(rng, domains[x], domains[y], True, costs)))
            functions.append(CostFunction((z, y), functional_table(rng, domains[z], domains[y], True, costs)))
        sure |= kind != "duplex"
    for _ in range(int(rng.integers(1, 7))):
        arity = int(rng.integers(1, min(3, n) + 1))
        scope = tuple(int(v) for v in rng.choice(n, arity, replace=False))
        shape = tuple(domains[v] for v in scope)
        table = rng.integers(0, costs, size=shape).astype(np.int64)
        table[rng.random(shape) < rng.choice([0.0, 0.2, 0.5])] = FORBIDDEN
        functions.append(CostFunction(scope, table))
    functions = [listed(f, rng) if rng.random() < 0.3 else f for f in functions]
    problem = Problem(f"planted{seed}", [Variable(f"x{i}", d) for i, d in enumerate(domains)], functions)
    problem = finalize_integer(problem, int(rng.integers(costs, 6 * costs)))
    if not integer:
        problem = as_real(problem)
    return problem, sure


def listed(f: CostFunction, rng) -> TupleFunction:
    """f as its tuples: the forbidden ones left to a forbidden default, or all but those of one
    cost left to that cost as the default."""
    table = f.table
    default = FORBIDDEN if rng.random() < 0.5 or not (table < FORBIDDEN).any() else int(table[table < FORBIDDEN][0])
    tuples = np.argwhere(table != default)
    return TupleFunction(f.scope, table.shape, tuples, table[tuple(tuples.T)], default)


def as_real(problem: Problem) -> Problem:
    """The problem with real costs (forbidden: inf)."""
    functions = [CostFunction(f.scope, np.where(f.table >= problem.top, np.inf, f.table * 0.37))
                 for f in problem.functions]
    return Problem(problem.name, problem.variables, functions, integer=False, top=np.inf)


@pytest.mark.parametrize("chunk", range(10))
def test_functional_elimination_keeps_the_optimum_and_reports_assignments_of_the_file(chunk):
    """240 planted problems: the reduced problem's optimum is the original's, every reduced
    assignment expands to one of the same cost in the original, solve reports the optimum with an
    assignment evaluating to it, and a planted functional constraint removes a variable."""
    counts = {"eliminated": 0, "infeasible": 0, "tuples": 0}
    for seed in range(24 * chunk, 24 * chunk + 24):
        problem, sure = planted(seed)
        grid = exhaustive(problem)
        best = grid.min()
        reduced = preprocess(problem)
        r = solve(problem, Options(device="cpu"))
        if best >= problem.top:
            assert r.status == "infeasible", seed
            counts["infeasible"] += 1
            continue
        assert r.status == "optimal", seed
        assert internal(problem, r.upper_bound) == pytest.approx(best), seed
        assert problem.evaluate(r.assignment) == pytest.approx(best), seed
        assert not reduced.infeasible
        small = reduced.problem
        if sure:
            assert scoped(small) < scoped(problem), seed
        counts["eliminated"] += len(reduced.functional)
        counts["tuples"] += any(isinstance(f, TupleFunction) for f in problem.functions) and bool(reduced.functional)
        assert exhaustive(small).min() == pytest.approx(best), seed
        for a in itertools.product(*(range(d) for d in small.domains)):
            expanded = reduced.expand(a)
            assert all(0 <= v < d for v, d in zip(expanded, problem.domains)), seed
            assert problem.evaluate(expanded) == pytest.approx(small.evaluate(a)), seed
    assert counts["eliminated"] >= 12 and counts["tuples"] >= 2 and counts["infeasible"] >= 1, counts


@pytest.mark.parametrize("seed", range(30))
def test_toulbar2_agrees_on_planted_problems(seed, tmp_path):
    problem, _ = planted(seed * 6)  # integer costs
    theirs = toulbar2_optimum(problem, tmp_path / "p.wcsp")
    r = solve(problem, Options(device="cpu"))
    assert (None if r.status == "infeasible" else r.upper_bound) == theirs


@pytest.mark.parametrize("seed", range(40))
def test_bounded_sparse_be_expands_what_its_own_preprocessing_eliminated(seed):
    """Bounded sparse BE preprocesses again below its incumbent's cost, where more functions are
    functional; its assignment is in the indices of the problem it was given."""
    problem, _ = planted(1000 + seed)
    if not problem.integer:
        return
    best = exhaustive(problem).min()
    order = graph.elimination_order(problem)
    fallback = build_plan(problem, order, problem.max_arity)
    lower, assignment, _, _ = bounded_sparse(problem, order, fallback, 1 << 30, NumpyEngine(), None)
    if best >= problem.top:
        assert lower >= problem.top
        return
    assert lower == best and problem.evaluate(assignment) == best


def duplex_pairs(pairs: int, frequencies: int, gap: int, seed: int) -> Problem:
    """RLFAP in small: links in duplex pairs |x - y| = gap (frequencies of x below the gap, of y
    above it), interference costs between links of different pairs, a preferred value for some."""
    rng = np.random.default_rng(seed)
    n = 2 * pairs
    f = np.arange(frequencies)
    functions = [CostFunction((2 * i, 2 * i + 1), np.where(np.abs(f[:, None] - f[None, :]) == gap, 0, FORBIDDEN))
                 for i in range(pairs)]
    for _ in range(2 * n):
        i, j = (int(v) for v in rng.choice(n, 2, replace=False))
        functions.append(CostFunction((i, j), np.where(np.abs(f[:, None] - f[None, :]) < 2,
                                                       rng.integers(1, 50), 0).astype(np.int64)))
    functions += [CostFunction((v,), rng.integers(0, 9, size=frequencies)) for v in range(0, n, 3)]
    problem = Problem("duplex", [Variable(f"f{i}", frequencies) for i in range(n)], functions)
    return finalize_integer(problem, None)


def test_duplex_constraints_halve_the_variables():
    """Each duplex pair keeps one variable (as toulbar2's preprocessing reports on CELAR6-SUB1, 28
    variables to 14); the optimum and the assignment are the file's."""
    problem = duplex_pairs(4, 5, 3, seed=2)
    reduced = preprocess(problem)
    assert len(reduced.functional) == 4 and scoped(reduced.problem) == 4
    best = exhaustive(problem).min()
    r = solve(problem, Options(device="cpu"))
    assert r.status == "optimal" and r.upper_bound == best and problem.evaluate(r.assignment) == best
    for a, b in zip(r.assignment[::2], r.assignment[1::2]):
        assert abs(a - b) == 3


def test_variables_of_globals_and_large_rewrites_stay():
    """y is kept where a global constraint reads it, and where a rewritten table would pass
    limits.functional_entries and its own size."""
    rng = np.random.default_rng(1)
    table = functional_table(rng, 4, 4, False, 5)
    variables = [Variable(f"x{i}", 4) for i in range(3)]
    pair = [CostFunction((0, 1), table), CostFunction((1, 2), rng.integers(0, 5, size=(4, 4)))]
    problem = finalize_integer(Problem("g", variables, pair), None)
    assert [y for y, _, _ in preprocess(problem).functional] == [1]
    values = tuple(np.arange(4) for _ in range(2))
    problem.globals = [AllDifferent((1, 2), values, FORBIDDEN), AllDifferent((0, 1), values, FORBIDDEN)]
    assert preprocess(finalize_integer(problem, None)).functional == []
    # x (4 values) functional onto y (2 values): y's other table grows from 2 x 4 to 4 x 4 entries
    many = np.full((4, 2), FORBIDDEN, dtype=np.int64)
    many[np.arange(4), [0, 1, 1, 0]] = 0
    variables = [Variable("x", 4), Variable("y", 2), Variable("w", 4)]
    problem = finalize_integer(Problem("m", variables, [CostFunction((0, 1), many),
                                                        CostFunction((1, 2), rng.integers(0, 5, size=(2, 4)))]), None)
    assert len(preprocess(problem, Limits(functional_entries=16)).functional) == 1
    assert preprocess(problem, Limits(functional_entries=15)).functional == []


def test_solve_and_info_report_the_eliminated_variables(tmp_path):
    import json

    from click.testing import CliRunner

    from gpusolve.cli.group import main
    from gpusolve.parsers.wcsp import write_wcsp
    path = tmp_path / "duplex.wcsp"
    write_wcsp(duplex_pairs(3, 5, 3, seed=1), path)
    out = CliRunner().invoke(main, ["solve", str(path), "--json", "--device", "cpu"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["preprocess"]["functional_variables"] == 3
    out = CliRunner().invoke(main, ["info", str(path)])
    assert out.exit_code == 0 and "3 variables eliminated as functions of others" in out.stdout
