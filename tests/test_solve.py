"""Solving against brute force: BE exact, mini-bucket bounds bracket the optimum, bounded sparse BE exact."""
import numpy as np
import pytest
from helpers import bounded_case, brute_force, internal, random_problem

from gpusolve.limits import Limits
from gpusolve.engines.numpy_engine import NumpyEngine
from gpusolve.generate import generate
from gpusolve.inference.eliminate import bounded_sparse
from gpusolve.schedule.solve import Options, solve
from gpusolve.host import BudgetError

SEEDS = range(320)


@pytest.mark.parametrize("seed", SEEDS)
def test_be_equals_brute_force_and_mbe_brackets(seed):
    rng = np.random.default_rng(seed)
    problem = random_problem(rng, integer=seed % 4 != 3, n_components=1 + seed % 3)
    best, _ = brute_force(problem)
    feasible = best < problem.top
    r = solve(problem, Options(device="cpu"))
    if not feasible:
        assert r.status == "infeasible" and r.lower_bound is None and r.assignment is None
        return
    assert r.status == "optimal"
    assert r.lower_bound == r.upper_bound
    assert internal(problem, r.upper_bound) == pytest.approx(best, rel=1e-12, abs=1e-12)
    assert problem.evaluate(r.assignment) == pytest.approx(best, rel=1e-12, abs=1e-12)
    max_arity = max([f.arity for f in problem.functions] + [1])
    for z in range(max_arity, len(problem.variables) + 2):
        m = solve(problem, Options(device="cpu", z=z))
        assert m.status in ("optimal", "bounded")
        assert internal(problem, m.lower_bound) <= best + 1e-9
        if m.upper_bound is not None:
            assert internal(problem, m.upper_bound) >= best - 1e-9
            assert problem.evaluate(m.assignment) == pytest.approx(internal(problem, m.upper_bound))
        if m.status == "optimal":
            assert internal(problem, m.lower_bound) == pytest.approx(best)


def test_infeasible_cases_are_covered():
    """The random family must include infeasible and multi-component problems, or the test above proves little."""
    infeasible = 0
    for seed in SEEDS:
        problem = random_problem(np.random.default_rng(seed), integer=seed % 4 != 3, n_components=1 + seed % 3)
        infeasible += brute_force(problem)[0] >= problem.top
    assert 10 <= infeasible <= len(SEEDS) - 100


def test_z_below_largest_arity_is_refused():
    rng = np.random.default_rng(5)
    problem = random_problem(rng, n_max=6, arity_max=3)
    while max((f.arity for f in problem.functions), default=0) < 3:
        problem = random_problem(rng, n_max=6, arity_max=3)
    with pytest.raises(ValueError, match="largest arity"):
        solve(problem, Options(device="cpu", z=2))


def test_memory_budget_picks_largest_fitting_z_or_refuses():
    from gpusolve.generate import generate
    problem = generate("random", 16, 6, 0.5, 0.3, seed=3)
    exact = solve(problem, Options(device="cpu"))
    assert exact.z is None and exact.status == "optimal"
    budget = exact.peak_bytes - 1
    # dense: else bounded sparse BE proves it; no search: else the compiled search, first, proves it
    r = solve(problem, Options(device="cpu", mem_limit=budget, tables="dense", search=False))
    assert r.z is not None and r.peak_bytes <= budget
    assert r.lower_bound <= exact.lower_bound
    assert r.upper_bound is None or exact.lower_bound <= r.upper_bound
    # --z of the exact plan over the budget: the largest z that fits runs instead, and the note says so
    given = solve(problem, Options(device="cpu", z=exact.induced_width + 1, mem_limit=budget))
    assert given.z is not None and given.z <= exact.induced_width and given.peak_bytes <= budget
    assert f"running z={given.z}" in given.device_note
    assert given.lower_bound <= exact.lower_bound <= (given.upper_bound or exact.lower_bound)
    with pytest.raises(BudgetError, match="no mini-bucket bound fits"):
        solve(problem, Options(device="cpu", mem_limit=1000))


@pytest.mark.parametrize("seed", range(60))
def test_bounded_sparse_be_below_an_incumbent_is_exact(seed):
    problem, order, fallback = bounded_case(seed)
    best, _ = brute_force(problem)
    found = bounded_sparse(problem, order, fallback, 1 << 30, NumpyEngine(), None)
    lower, assignment, plan, _ = found
    if best >= problem.top:
        assert lower >= problem.top
        return
    assert lower == best and problem.evaluate(assignment) == best


@pytest.mark.parametrize("seed", range(40))
def test_bounded_sparse_be_below_a_held_incumbent_is_exact(seed):
    """In the search schedule it runs after local search: a held incumbent cheaper than its own cheap
    run's lowers top further (here the optimum itself: nothing is left to beat it)."""
    problem, order, fallback = bounded_case(seed)
    best, optimal = brute_force(problem)
    if best >= problem.top:
        return
    for held in (list(optimal), [int(v) for v in np.zeros(len(problem.domains), dtype=int)]):
        lower, assignment, _, _ = bounded_sparse(problem, order, fallback, 1 << 30, NumpyEngine(), None, held=held)
        assert lower == best and problem.evaluate(assignment) == best


def test_default_solve_stays_exact_with_sparse_tables_where_dense_be_does_not_fit():
    limits = Limits(chunk_rows=1 << 12)  # a chunk workspace within the small budget
    problem = generate("random", 16, 6, 0.5, 0.3, seed=3)
    exact = solve(problem, Options(device="cpu", tables="dense"))
    for search in (False, True):  # bounded sparse BE without search; with it, the search boxed before it proves
        r = solve(problem, Options(device="cpu", mem_limit=exact.peak_bytes // 4, search=search, limits=limits))
        assert r.status == "optimal"
        assert (r.z is None and r.largest_rows > 0) if not search else r.search["complete"]
        assert r.upper_bound == exact.upper_bound and problem.evaluate(r.assignment) == exact.upper_bound
    dense = solve(problem, Options(device="cpu", mem_limit=exact.peak_bytes // 4, tables="dense", search=False,
                                   limits=limits))
    assert dense.z is not None  # without sparse tables the same budget only affords mini-buckets


def test_records_keep_the_command_line_options_without_the_limits():
    """Limits are the API's and tests': a result's options (what --json writes and batch resume
    compares) are every other option, as before they existed."""
    from dataclasses import fields
    problem = generate("random", 6, 3, 0.5, 0.3, seed=1)
    r = solve(problem, Options(device="cpu", limits=Limits(chunk_rows=2)))
    assert set(r.options) == {f.name for f in fields(Options)} - {"limits"}
    assert r.options == Options(device="cpu").settings()


@pytest.mark.parametrize("seed", range(4))
def test_on_bounds_hears_each_improvement_in_the_files_objective(seed):
    """The live listener hears what the result reports: each row of the trace, in the file's
    objective (a maximisation with an offset here), the last one the result's bounds."""
    from dataclasses import replace
    problem = replace(random_problem(np.random.default_rng(seed), p_hard=0.1), sense=-1, offset=7)
    heard = []
    r = solve(problem, Options(), on_bounds=lambda lo, hi, phase: heard.append([lo, hi, phase]))
    assert heard and heard == [row[1:] for row in r.trace]
    best = brute_force(problem)[0]
    if problem.is_forbidden(best):
        assert r.status == "infeasible"
        return
    assert r.status == "optimal" and heard[-1][:2] == [r.lower_bound, r.upper_bound]
    assert internal(problem, r.lower_bound) == internal(problem, r.upper_bound) == best
