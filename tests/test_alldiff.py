"""AllDifferent: Régin's GAC against brute force, the global in preprocessing, decomposition and search
against brute force and the binary decomposition, the wcsp keywords, the toulbar2 instances."""
import csv
import itertools
import json

import numpy as np
import pytest

from gpusolve.consistency import alldiff, globals as gl
from gpusolve.consistency.alldiff import METHODS, filter_domains, max_matching
from gpusolve.limits import DEFAULT, Limits
from gpusolve.model.problem import Infeasible
from gpusolve.model.problem import FORBIDDEN, AllDifferent, CostFunction, Problem, Variable, finalize_integer
from gpusolve.consistency.preprocess import preprocess
from gpusolve.schedule.solve import Options, solve
from gpusolve.parsers import read

from helpers import brute_force


def brute_force_gac(dom: np.ndarray) -> np.ndarray:
    """The values taken in some injective assignment, by enumeration (tiny inputs)."""
    out = np.zeros_like(dom)
    for values in itertools.product(*(np.flatnonzero(row) for row in dom)):
        if len(set(values)) == len(values):
            out[np.arange(len(values)), list(values)] = True
    return out


def random_domains(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 7))
    m = int(rng.integers(max(n - 1, 1), n + 3))
    return rng.random((n, m)) < rng.uniform(0.2, 0.9)


def gac_or_empty(dom, **kw):
    try:
        return filter_domains(dom, **kw)[0]
    except Infeasible:
        return np.zeros_like(dom)


@pytest.mark.parametrize("method", METHODS)
def test_gac_equals_brute_force_on_300_random_graphs(method):
    for seed in range(300):
        dom = random_domains(seed)
        np.testing.assert_array_equal(gac_or_empty(dom, method=method), brute_force_gac(dom), err_msg=f"seed {seed}")


def blocks_domains(seed: int) -> np.ndarray:
    """A domain graph with many SCCs: variables in blocks, each block dense on its own values (a
    Hall set, or one more value: free), sparse edges from a block to the values of later blocks
    (removed by GAC), the blocks shuffled."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 400))
    cuts = np.sort(rng.choice(np.arange(1, n), size=int(rng.integers(1, min(n - 1, 40))), replace=False))
    sizes = np.diff(np.concatenate([[0], cuts, [n]]))
    extra = rng.random(len(sizes)) < 0.3  # a free value in the block
    m = int(n + extra.sum())
    dom = np.zeros((n, m), dtype=bool)
    row = col = 0
    for size, more in zip(sizes, extra):
        width = size + more
        block = rng.random((size, width)) < rng.uniform(0.1, 0.9)
        block[np.arange(size), rng.permutation(width)[:size]] = True
        dom[row:row + size, col:col + width] = block
        dom[row:row + size, col + width:] |= rng.random((size, m - col - width)) < rng.uniform(0, 0.05)
        row, col = row + size, col + width
    return dom[rng.permutation(n)][:, rng.permutation(m)]


@pytest.mark.parametrize("method", [pytest.param("peel", marks=pytest.mark.slow),
                                    pytest.param("squaring", marks=pytest.mark.slow), "warshall"])
def test_methods_equal_tarjan_on_200_graphs_with_many_sccs(method):
    pruned = 0
    for seed in range(200 if method == "peel" else 30):
        dom = blocks_domains(seed)
        ref = gac_or_empty(dom, method="tarjan")
        np.testing.assert_array_equal(gac_or_empty(dom, method=method), ref, err_msg=f"seed {seed}")
        pruned += bool((ref < dom).any())
    assert pruned >= (150 if method == "peel" else 20)


def test_peel_without_early_stop_equals_brute_force():
    """Every SCC found by forward-backward searches (none left to Tarjan): small graphs against
    brute force, graphs of many SCCs against Tarjan."""
    limits = Limits(peel_small=0, peel_pivots=1000)
    for seed in range(300):
        dom = random_domains(seed)
        np.testing.assert_array_equal(gac_or_empty(dom, limits=limits), brute_force_gac(dom), err_msg=f"seed {seed}")
    for seed in range(30):
        dom = blocks_domains(seed)
        np.testing.assert_array_equal(gac_or_empty(dom, limits=limits), gac_or_empty(dom, method="tarjan"),
                                      err_msg=f"seed {seed}")


def arc_consistency_of_the_binary_decomposition(dom: np.ndarray) -> np.ndarray:
    """AC of the x != y network: a singleton removes its value from the other domains, to a fixpoint."""
    ac = dom.copy()
    while True:
        singles = {int(np.flatnonzero(r)[0]) for r in ac if r.sum() == 1}
        new = ac.copy()
        for x, row in enumerate(ac):
            if row.sum() > 1:
                new[x, list(singles)] = False
        if (new == ac).all():
            return ac
        ac = new


def test_gac_prunes_at_least_what_arc_consistency_of_the_binary_decomposition_prunes():
    """filter_domains against AC of the != network, an independent relaxation: GAC keeps no value
    that AC removes, and prunes strictly more on some domains."""
    stronger = 0
    for seed in range(200):
        dom = random_domains(seed)
        gac, ac = gac_or_empty(dom), arc_consistency_of_the_binary_decomposition(dom)
        assert (gac <= ac).all(), f"seed {seed}"
        stronger += bool((gac < ac).any())
    assert stronger >= 20


def test_matching_is_incremental():
    """The previous matching passed in stays where its edges survive; the result is a matching."""
    rng = np.random.default_rng(3)
    dom = rng.random((40, 50)) < 0.3
    dom[np.arange(40), rng.permutation(50)[:40]] = True
    first = max_matching(dom)
    dom2 = dom.copy()
    dom2[np.arange(0, 40, 4), first[::4]] = False
    second = max_matching(dom2, first)
    assert len(set(second.tolist())) == 40 and dom2[np.arange(40), second].all()
    kept = dom2[np.arange(40), first]
    assert (second[kept] == first[kept]).sum() >= kept.sum() - 10  # augmenting paths move few


def test_infeasible_when_no_matching_covers_all_variables():
    with pytest.raises(Infeasible):
        filter_domains(np.array([[1, 1, 0], [1, 1, 0], [1, 1, 0]], dtype=bool))


# ------------------------------------------------------------------ the global in the solver

def random_global_problem(seed: int, plain: bool = False) -> Problem:
    """Random tables plus AllDifferents: hard or soft (var, dec), value maps, exempt values; `plain`:
    over four variables or more, on the domain indices, none exempt (what pytoulbar2 reads)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(4 if plain else 3, 7))
    d = int(rng.integers(3 if plain else 2, 5))
    variables = [Variable(f"x{i}", d) for i in range(n)]
    functions = []
    for _ in range(int(rng.integers(0, 5))):
        scope = tuple(int(v) for v in rng.choice(n, int(rng.integers(1, 3)), replace=False))
        table = rng.integers(0, 10, size=(d,) * len(scope)).astype(np.int64)
        table[rng.random(table.shape) < 0.1] = FORBIDDEN
        functions.append(CostFunction(scope, table))
    globals_ = []
    for _ in range(int(rng.integers(1, 3))):
        k = int(rng.integers(4 if plain else 2, max(min(n, d + 1), 4 if plain else 2) + 1))
        scope = tuple(int(v) for v in rng.choice(n, k, replace=False))
        shift = rng.random() < 0.3 and not plain  # N-queens-like: compare x_i + i
        values = tuple(np.arange(d, dtype=np.int64) + (i if shift else 0) for i in range(k))
        sem = str(rng.choice(["var", "dec"]))
        cost = FORBIDDEN if rng.random() < 0.5 else int(rng.integers(1, 8))
        exempt = frozenset({0}) if rng.random() < 0.2 and not plain else frozenset()
        globals_.append(AllDifferent(scope, values, cost, sem, exempt))
    problem = Problem("alldiff", variables, functions, globals=globals_)
    return finalize_integer(problem, int(rng.integers(20, 200)))


def decomposed_by_hand(problem: Problem) -> Problem:
    """The reference: every AllDifferent as explicit tables over its scope (enumerated)."""
    functions = list(problem.functions)
    for g in problem.globals:
        shape = tuple(problem.variables[v].domain for v in g.scope)
        table = np.zeros(shape, dtype=np.int64)
        for taken in itertools.product(*(range(s) for s in shape)):
            table[taken] = min(g.cost * g.violation(taken), problem.top)
        functions.append(CostFunction(g.scope, table))
    return problem.like(functions, globals=[])


@pytest.mark.slow
@pytest.mark.parametrize("limit, count", [(None, 200), (0, 60)], ids=["tables", "search"])
def test_solver_with_globals_equals_brute_force_on_random_problems(limit, count):
    """With the decomposition (tables for BE) and without (globals left to search's propagators)."""
    limits = DEFAULT if limit is None else Limits(decompose_entries=limit)
    for seed in range(count):
        problem = random_global_problem(seed)
        best, _ = brute_force(decomposed_by_hand(problem))
        r = solve(problem, Options(device="cpu", limits=limits))
        if best >= problem.top:
            assert r.status == "infeasible", seed
            continue
        assert r.status == "optimal", (seed, r.status)
        assert r.upper_bound - problem.offset == best and r.lower_bound == r.upper_bound, seed
        assert problem.evaluate(r.assignment) == best, seed


def test_preprocessing_applies_gac_and_keeps_the_optimum():
    """Pigeonhole-like: three variables on two values and a third one only for x0."""
    g = AllDifferent((0, 1, 2), tuple(np.arange(3) for _ in range(3)), FORBIDDEN)
    functions = [CostFunction((1,), np.array([0, 0, FORBIDDEN])), CostFunction((2,), np.array([0, 0, FORBIDDEN]))]
    problem = finalize_integer(Problem("p", [Variable(f"x{i}", 3) for i in range(3)], functions, globals=[g]), 10)
    reduced = preprocess(problem)
    assert [v.tolist() for v in reduced.values] == [[2], [0, 1], [0, 1]]
    assert all(g.tabled for g in reduced.problem.globals)


def test_propagator_costs_add_up_to_the_constraint_along_the_scope():
    for seed in range(50):
        problem = random_global_problem(seed)
        rng = np.random.default_rng(seed)
        value = rng.integers(0, problem.variables[0].domain, size=len(problem.variables))
        for g in problem.globals:
            prop = gl.AllDifferentPropagator(g, problem.top)
            full = min(g.cost * g.violation([value[v] for v in g.scope]), problem.top)
            added = sum(int(prop.lower(v, g.scope[:k], value)[value[v]]) for k, v in enumerate(g.scope))
            assert min(added, problem.top) == full


def test_gac_on_scopes_equals_filtering_the_whole_graph():
    """alldiff.gac (assigned variables left out, the graph by a strided copy or a scatter, domains
    as a list or a matrix) against filter_domains on the whole variable-value graph: value maps
    that are runs (N-queens-like), arbitrary ones, domains of different sizes, exempt values."""
    for seed in range(300):
        rng = np.random.default_rng(seed)
        k = int(rng.integers(1, 9))
        sizes = [int(rng.integers(1, 7))] * k if seed % 2 else [int(x) for x in rng.integers(1, 7, size=k)]
        if seed % 3 == 0:
            values = tuple(np.arange(d, dtype=np.int64) + int(rng.integers(-1, 2)) * i for i, d in enumerate(sizes))
        else:
            values = tuple(np.sort(rng.choice(12, size=d, replace=False)).astype(np.int64) for d in sizes)
        exempt = frozenset({int(values[0][0])}) if seed % 7 == 0 else frozenset()
        g = AllDifferent(tuple(range(k)), values, FORBIDDEN, "var", exempt)
        live = [rng.random(d) < 0.6 for d in sizes]
        for v in live:
            v[rng.integers(len(v))] |= rng.random() < 0.7  # mostly non-empty, sometimes one value
        ids, m = alldiff.value_ids(g)
        dom = np.zeros((k, m), dtype=bool)
        for r in range(k):
            dom[r, ids[r][live[r]]] = True
        ref = gac_or_empty(dom)
        expect = [ref[r, ids[r]] & live[r] for r in range(k)]
        feasible = bool(ref.any())
        by_list = [v.copy() for v in live]
        matrix = np.zeros((k, max(sizes)), dtype=bool)
        for r, v in enumerate(live):
            matrix[r, :len(v)] = v
        for got, rows in ((alldiff.gac(g, by_list), by_list), (alldiff.gac(g, matrix), [matrix[r, :d] for r, d in enumerate(sizes)])):
            assert (got is not None) == feasible, seed
            if got is not None:
                for r in range(k):
                    np.testing.assert_array_equal(rows[r], expect[r], err_msg=f"seed {seed}")
                assert all(rows[r][list(ids[r]).index(got[r])] for r in range(k)) and len(set(got.tolist())) == k


def test_wide_hard_alldifferents_stay_untabled_in_satisfaction_problems_only():
    """N-queens 13: its cliques' buckets would hold 13^12 > 2^40 entries, so MAC gets no tables;
    with a cost (an optimisation problem) the tables stay, for the lower bounds; 12 fits."""
    from gpusolve.generate import queens
    assert all(g.tabled for g in gl.decompose(queens(12), [np.arange(12)] * 12)[1])
    assert not any(g.tabled for g in gl.decompose(queens(13), [np.arange(13)] * 13)[1])
    q = queens(13)
    cop = finalize_integer(Problem("cop", q.variables, [CostFunction((0,), np.arange(13, dtype=np.int64))],
                                   globals=[AllDifferent(g.scope, g.values, FORBIDDEN) for g in q.globals]), None)
    assert all(g.tabled for g in gl.decompose(cop, [np.arange(13)] * 13)[1])


def test_value_ids_rank_values_as_unique_does():
    """The prefix-sum ranks (values in a range) and np.unique (values spread wide) agree."""
    for seed in range(50):
        rng = np.random.default_rng(seed)
        spread = 10 if seed % 2 else 10**9
        values = tuple(rng.integers(-spread, spread, size=int(rng.integers(1, 6))) for _ in range(int(rng.integers(1, 6))))
        ids, m = alldiff.value_ids(AllDifferent(tuple(range(len(values))), values, FORBIDDEN))
        shared, inverse = np.unique(np.concatenate(values), return_inverse=True)
        assert m == len(shared) and np.array_equal(np.concatenate(ids), inverse.reshape(-1))


def test_luby():
    from gpusolve.search.mac import luby
    assert [luby(i) for i in range(1, 16)] == [1, 1, 2, 1, 1, 2, 4, 1, 1, 2, 1, 1, 2, 4, 8]


@pytest.mark.parametrize("base", [64, pytest.param(1, marks=pytest.mark.slow)], ids=["default", "restart-after-each-failure"])
def test_mac_finds_a_solution_exactly_when_one_exists(base):
    """Satisfaction problems (hard tables and AllDifferents): MAC against enumeration, alone and as
    the schedule's phase when elimination is not asked for (a given z); with restarts after every
    failure too (each restart's search stays complete)."""
    from gpusolve.search.mac import Mac
    limits = Limits(restart_base=base)
    checked = 0
    for seed in range(150):
        problem = random_global_problem(seed)
        for f in problem.functions:
            f.table = np.where(f.table >= 5, problem.top, 0)
        for g in problem.globals:
            g.cost = problem.top
        assert problem.is_satisfaction
        best, _ = brute_force(decomposed_by_hand(problem))
        found = Mac(problem, limits=limits).run()
        assert (found is not None) == (best < problem.top), seed
        if found is not None:
            assert problem.evaluate(found) == 0
        r = solve(problem, Options(device="cpu", z=2, limits=limits))
        assert r.status == ("optimal" if best < problem.top else "infeasible"), seed
        checked += best < problem.top
    assert checked >= 30


def random_pair_csp(seed: int, listed: bool) -> Problem:
    """Binary hard tables (dense, or their allowed pairs listed) and one or two hard AllDifferents."""
    from gpusolve.model.problem import TupleFunction
    rng = np.random.default_rng(seed)
    n, d = int(rng.integers(4, 8)), int(rng.integers(3, 7))
    functions = []
    for _ in range(int(rng.integers(2, 11))):
        scope = tuple(int(v) for v in rng.choice(n, 2, replace=False))
        table = np.where(rng.random((d, d)) < rng.choice([0.25, 0.5, 0.8]), 0, FORBIDDEN).astype(np.int64)
        tuples = np.argwhere(table == 0)
        functions.append(TupleFunction(scope, (d, d), tuples, np.zeros(len(tuples), np.int64), FORBIDDEN)
                         if listed else CostFunction(scope, table))
    globals_ = [AllDifferent(tuple(int(v) for v in rng.choice(n, int(rng.integers(2, min(n, d) + 1)), replace=False)),
                             (), FORBIDDEN) for _ in range(int(rng.integers(1, 3)))]
    globals_ = [AllDifferent(g.scope, tuple(np.arange(d, dtype=np.int64) for _ in g.scope), FORBIDDEN) for g in globals_]
    return finalize_integer(Problem("pairs", [Variable(f"x{i}", d) for i in range(n)], functions, globals=globals_), None)


def mac_runs(problems, xp=None, limits=DEFAULT) -> list:
    from gpusolve.search.mac import Mac
    out = []
    for problem in problems:
        m = Mac(problem, xp=xp, limits=limits)
        out.append((m.run(), m.stats.to_json()))
    return out


@pytest.mark.slow
def test_mac_searches_listed_pairs_as_dense_tables():
    """Listed pairs (propagated from removed values, PairSupports) and dense tables (AC-3) reach the
    same fixpoints: MAC makes the same search on both, node for node, and finds a solution exactly
    when enumeration does; with restarts after every failure, so that backtracking to the root
    through the trail is exercised."""
    feasible = 0
    for seed in range(200):
        dense, listed = random_pair_csp(seed, False), random_pair_csp(seed, True)
        best, _ = brute_force(decomposed_by_hand(dense))
        (a, sa), (b, sb) = mac_runs([dense, listed], limits=Limits(restart_base=1))
        assert a == b and sa == sb, seed
        assert (a is not None) == (best < dense.top), seed
        if a is not None:
            assert dense.evaluate(a) == 0 and listed.evaluate(a) == 0
        feasible += a is not None
    assert 30 <= feasible <= 170


def fewest_from_graph(m, least):
    """Mac._fewest_takers from the variable-value graph of each node, not from counts kept by the
    trail."""
    from gpusolve.consistency.alldiff import id_table, variable_value_graph
    best = None
    for t in m.permutations:
        dom = variable_value_graph(t.g, m.domains)[1]
        takers = dom.sum(axis=0)
        takers[takers < 2] = least
        c = int(takers.argmin())
        if takers[c] < least:
            least = int(takers[c])
            rows = np.flatnonzero(dom[:, c])
            best = np.stack([np.asarray(t.g.scope)[rows], (id_table(t.g)[0][rows] == c).argmax(axis=1)], axis=1)
    return best


def assert_same(rows, expected):
    assert (rows is None) == (expected is None)
    if rows is not None:
        assert rows.tolist() == expected.tolist()


def test_mac_keeps_the_takers_of_each_value_through_backtracking(monkeypatch):
    """The counts of variables able to take each value, kept from the trail's removals and undos,
    give the branching that the graph of each node gives: on N-queens (runs of values) and
    Langford, restarting after every failure so that the root is restored often."""
    from gpusolve.search import mac
    from gpusolve.generate import langford, queens
    fewest, calls = mac.Mac._fewest_takers, []

    def checked(self, least):
        rows = fewest(self, least)
        assert_same(rows, fewest_from_graph(self, least))
        calls.append(rows is not None)
        return rows
    monkeypatch.setattr(mac.Mac, "_fewest_takers", checked)
    for problem in [queens(8), queens(13), langford(11), langford(12), langford(15)]:
        found = mac.Mac(problem, limits=Limits(restart_base=1)).run()
        assert found is not None and problem.evaluate(found) == 0
    assert sum(calls) >= 20, sum(calls)


@pytest.mark.slow
def test_mac_branching_on_who_takes_a_value_is_complete(monkeypatch):
    """Permutation AllDifferents (as many values as variables) let MAC branch on which variable
    takes the value fewest can: a complete split only because some variable must take it. On
    random permutation problems with tables, MAC finds a solution exactly when MAC branching on
    variables alone does (itself checked against enumeration above), also restarting after every
    failure; such levels do occur."""
    from gpusolve.search import mac
    restart_often = Limits(restart_base=1)
    dual = []
    fewest = mac.Mac._fewest_takers

    def counted(self, least):
        rows = fewest(self, least)
        assert_same(rows, fewest_from_graph(self, least))
        dual.append(rows is not None)
        return rows
    outcomes = {True: 0, False: 0}
    for seed in range(150):
        rng = np.random.default_rng(seed)
        n = int(rng.integers(5, 10))
        functions = [CostFunction((v,), np.where(rng.random(n) < 0.4, FORBIDDEN, 0)) for v in range(n)]  # rare values
        for _ in range(int(rng.integers(1, 8))):
            scope = tuple(int(v) for v in rng.choice(n, 2, replace=False))
            functions.append(CostFunction(scope, np.where(rng.random((n, n)) < rng.choice([0.4, 0.7]), 0, FORBIDDEN)))
        values = tuple(rng.permutation(n).astype(np.int64) + 10 for _ in range(n))  # shuffled labels
        problem = finalize_integer(Problem("perm", [Variable(f"x{i}", n) for i in range(n)], functions,
                                           globals=[AllDifferent(tuple(range(n)), values, FORBIDDEN)]), None)
        monkeypatch.setattr(mac.Mac, "_fewest_takers", lambda self, least: None)
        primal = mac.Mac(problem, limits=restart_often).run()
        monkeypatch.setattr(mac.Mac, "_fewest_takers", counted)
        found = mac.Mac(problem, limits=restart_often).run()
        assert (found is not None) == (primal is not None), seed
        if found is not None:
            assert problem.evaluate(found) == 0
        outcomes[found is not None] += 1
    assert min(outcomes.values()) >= 20 and sum(dual) >= 50, (outcomes, sum(dual))


def test_mac_places_gac_on_the_device_from_gpu_min_scope():
    """Only AllDifferents of gpu_min_scope variables or more make MAC ask for the GPU; without CuPy
    (or with --device auto, as the plan has no buckets to size the choice by) it runs on the CPU."""
    from gpusolve.search import mac
    from gpusolve.generate import langford
    limits = Limits(gpu_min_scope=20)
    assert mac.gac_on_device(langford(10), limits) and not mac.gac_on_device(langford(9), limits)
    r = solve(langford(11), Options(device="auto", limits=limits))
    assert r.engine == "numpy" and "plan size unknown" in r.device_note and r.status == "optimal"


def test_queens_and_langford_first_solutions():
    from gpusolve.generate import langford, queens
    for problem, status in [(queens(3), "infeasible"), (queens(30), "optimal"), (langford(5), "infeasible"),
                            (langford(8), "optimal")]:
        r = solve(problem, Options(device="cpu"))
        assert r.status == status
        if status == "optimal":
            assert problem.evaluate(r.assignment) == 0 and r.search["method"] == "MAC"


@pytest.mark.slow
def test_generated_xcsp3_reads_back_as_the_models(tmp_path):
    """generate-csp's XCSP3 files: the same constraints as generate.queens / langford (every
    assignment of small ones costs the same), and solve finds a solution or proves there is none."""
    from click.testing import CliRunner

    from gpusolve.cli.group import main
    from gpusolve.generate import langford, queens
    for model, n, build, status in [("queens", 5, queens, "optimal"), ("queens", 3, queens, "infeasible"),
                                    ("langford", 3, langford, "optimal"), ("langford", 2, langford, "infeasible")]:
        path = tmp_path / f"{model}{n}.xml"
        assert CliRunner().invoke(main, ["generate-csp", model, str(n), "-o", str(path)]).exit_code == 0
        read_back, ref = read(path), build(n)
        for a in itertools.product(*(range(d) for d in ref.domains)):
            assert (read_back.evaluate(a) == 0) == (ref.evaluate(a) == 0), (model, n, a)
        out = CliRunner().invoke(main, ["solve", str(path), "--json"])
        assert json.loads(out.stdout)["status"] == status, (model, n)


# ------------------------------------------------------------------ the wcsp keywords

def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_wcsp_salldiff_semantics(tmp_path):
    text = "t 4 3 2 1000\n3 3 3 3\n4 0 1 2 3 -1 salldiff {} 5\n1 0 0 1\n0 7\n"
    var = read(write(tmp_path, "v.wcsp", text.format("var")))
    dec = read(write(tmp_path, "d.wcsp", text.format("dec")))
    (gv,), (gd,) = var.globals, dec.globals
    assert gv.violation([0, 0, 0, 1]) == 2 and gd.violation([0, 0, 0, 1]) == 3
    assert var.evaluate([0, 0, 0, 1]) == 10 + 7 and dec.evaluate([0, 0, 0, 1]) == 15 + 7
    assert solve(var, Options(device="cpu")).upper_bound == 5  # four variables, three values: one clash


def test_wcsp_hard_alldiff_with_exempt_values(tmp_path):
    p = read(write(tmp_path, "h.wcsp", "t 3 2 1 10\n2 2 2\n3 0 1 2 -1 alldiff 1 0\n"))
    (g,) = p.globals
    assert g.exempt == {0} and g.cost >= p.top
    assert p.evaluate([0, 0, 1]) == 0 and p.evaluate([1, 1, 0]) >= p.top


@pytest.mark.slow
def test_written_globals_read_back(tmp_path):
    from gpusolve.parsers.wcsp import write_wcsp
    for seed in range(10):
        problem = random_global_problem(seed, plain=True)
        path = tmp_path / f"g{seed}.wcsp"
        write_wcsp(problem, path)
        back = read(path)
        for a in itertools.product(*(range(d) for d in problem.domains)):
            assert min(back.evaluate(a), back.top) == min(problem.evaluate(a), problem.top) or \
                (back.evaluate(a) >= back.top and problem.evaluate(a) >= problem.top)


def test_toulbar2_agrees_on_soft_alldiff(tmp_path):
    """pytoulbar2 reads our written salldiff (var and dec, arity >= 4) and finds the same optimum."""
    from helpers import toulbar2_optimum
    for seed in range(30):
        problem = random_global_problem(seed, plain=True)
        ours = solve(problem, Options(device="cpu"))
        theirs = toulbar2_optimum(problem, tmp_path / f"t{seed}.wcsp")
        assert (ours.upper_bound if ours.status == "optimal" else None) == theirs, seed


@pytest.mark.slow
def test_toulbar2_global_instances_solve_to_their_optima(shared_instances):
    folder = shared_instances / "global"
    with open(folder / "optima.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 5
    for row in rows:
        r = solve(read(folder / row["file"]), Options(device="cpu"))
        assert r.status == "optimal" and r.upper_bound == int(row["optimum"]), row["file"]


# ------------------------------------------------------------------ the GPU propagator

class HostAsDevice:
    """NumPy posing as a device array module (not `np`, with asnumpy): runs the device branches
    (packed upload, residual and closure on `xp`, the peel's rest by squaring) on machines without a GPU."""

    def __getattr__(self, name):
        return getattr(np, name)

    @staticmethod
    def asnumpy(a):
        return np.asarray(a)


@pytest.mark.parametrize("method", [pytest.param("squaring", marks=pytest.mark.slow), "warshall"])
def test_device_branches_equal_tarjan_with_numpy_as_the_device(method):
    xp = HostAsDevice()
    for seed in range(100):
        dom = random_domains(seed)
        np.testing.assert_array_equal(gac_or_empty(dom, xp=xp, method=method), brute_force_gac(dom))
    for seed in range(20 if method != "squaring" else 3):  # float16 products are slow on the host
        dom = blocks_domains(seed)
        np.testing.assert_array_equal(gac_or_empty(dom, xp=xp, method=method), gac_or_empty(dom, method="tarjan"))


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["peel", "squaring", "warshall"])
def test_gpu_gac_equals_cpu(cupy, kind):
    for seed in range(300):
        dom = random_domains(seed)
        np.testing.assert_array_equal(gac_or_empty(dom, xp=cupy, method=kind), gac_or_empty(dom))
    for seed in range(40):  # many SCCs: trimmed, then peeled pivot by pivot
        dom = blocks_domains(seed)
        np.testing.assert_array_equal(gac_or_empty(dom, xp=cupy, method=kind), gac_or_empty(dom, method="tarjan"))
    rng = np.random.default_rng(0)
    for n in (100, 700, 2100):  # float16 and float32 products, several words per packed row
        dom = rng.random((n, n + 5)) < 8 / n
        dom[np.arange(n), rng.permutation(n + 5)[:n]] = True
        np.testing.assert_array_equal(gac_or_empty(dom, xp=cupy, method=kind), gac_or_empty(dom))


def test_kernel_source_is_sized_in_a_few_classes_within_shared_memory():
    from gpusolve.consistency import alldiff_kernel as k
    sources = {k.kernel_source(n, 2 * n) for n in range(1, 12000, 7) if k.fits(n, 2 * n)}
    assert 2 <= len(sources) <= 10  # a handful of compiled kernels over every size a search meets
    for src in sources:
        assert "\nalldiff_gac(u64* D" in src and "alldiff_gac_match" not in src and "SHARED_WORDS" not in src
        assert src.count("{") == src.count("}") and src.count("(") == src.count(")")
        words = int(src.split("pool[")[1].split("]")[0])
        assert 64 <= words and 8 * words + 64 <= DEFAULT.shared_max
    assert k.fits(10_000, 20_000) and not k.fits(200_000, 200_000)
    # every size that fits gets a pool at least as large as its bitsets
    for n, m in ((1, 1), (64, 65), (1000, 1999), (8000, 15999), (10_000, 20_000)):
        assert int(k.kernel_source(n, m).split("pool[")[1].split("]")[0]) >= k.shared_words(n, m)


def test_too_wide_for_the_kernel_runs_the_host_peel():
    """An AllDifferent whose bitsets exceed one block's shared memory is filtered on the host even
    when a device is given (here a stand-in module that fails if anything touches it)."""
    from gpusolve.consistency import alldiff_kernel
    limits = Limits(shared_max=5 * 8 + 64)  # 5 words: fewer than the 2 + 4 needed
    for seed in range(50):
        dom = random_domains(seed)
        assert not alldiff_kernel.fits(*dom.shape, limits)
        np.testing.assert_array_equal(gac_or_empty(dom, xp=object(), limits=limits), brute_force_gac(dom))


@pytest.mark.gpu
def test_gpu_kernel_equals_cpu_on_many_shapes_and_search_states(cupy):
    """The one-launch kernel against the CPU peel: random graphs up to 3000 variables, chains and
    many small SCCs, more values than variables, the matching of an earlier call, and more
    removals than its list holds (they come back as bit-packed rows)."""
    from gpusolve.consistency import alldiff
    rng = np.random.default_rng(7)
    for trial in range(200):
        n = int(rng.integers(1, 300 if trial < 190 else 3000))
        m = n + int(rng.integers(0, n + 2))
        dom = rng.random((n, m)) < rng.choice([1.5 / max(n, 1), 4 / max(n, 1), 0.05, 0.5])
        dom[np.arange(n), rng.permutation(m)[:n]] = True
        if trial % 3 == 0:  # a search state: the matching of the unreduced graph, then values removed
            match = max_matching(dom)
            dom[rng.random(dom.shape) < 0.05] = False
            dom[np.arange(n), match] |= rng.random(n) < 0.8
        else:
            match = None
        np.testing.assert_array_equal(gac_or_empty(dom, match=match, xp=cupy), gac_or_empty(dom, match=match),
                                      err_msg=f"trial {trial}")
    for seed in range(60):
        dom = blocks_domains(seed)
        np.testing.assert_array_equal(gac_or_empty(dom, xp=cupy), gac_or_empty(dom, method="tarjan"))
    n = 3000  # a chain: x_i takes values i and i+1 -- the trimming runs a round per variable
    dom = np.zeros((n, n + 1), dtype=bool)
    dom[np.arange(n), np.arange(n)] = dom[np.arange(n), np.arange(n) + 1] = True
    np.testing.assert_array_equal(gac_or_empty(dom, xp=cupy), gac_or_empty(dom))
    dom = np.triu(np.ones((n, n), dtype=bool))  # x_i takes i..n-1: all but the diagonal removed
    (rows, cols), _ = alldiff.removals(dom, xp=cupy)
    assert rows.size > DEFAULT.list_cap
    np.testing.assert_array_equal(gac_or_empty(dom, xp=cupy), np.eye(n, dtype=bool))


@pytest.mark.gpu
def test_gpu_kept_domains_follow_a_search(cupy):
    """DeviceDomains across a dive: each call sends the values the search removed, gets GAC's
    removals equal to the CPU's, and leaves the device's words equal to the host's filtered domains."""
    from gpusolve.consistency import alldiff_kernel
    from gpusolve.consistency.alldiff import pack
    rng = np.random.default_rng(3)
    for trial in range(30):
        n = int(rng.integers(2, 600))
        m = n + int(rng.integers(0, 40))
        dom = rng.random((n, m)) < rng.uniform(0.02, 0.6)
        dom[np.arange(n), rng.permutation(m)[:n]] = True
        try:
            dom, match = filter_domains(dom)
        except Infeasible:
            continue
        kept = alldiff_kernel.DeviceDomains(cupy, pack(np, dom), m, match)
        for _ in range(8):
            after = dom.copy()
            x = int(rng.integers(n))
            vals = np.flatnonzero(after[x])
            after[x, vals] = False
            after[x, rng.choice(vals)] = True  # the search assigns x
            try:
                want, new = filter_domains(after, match)
            except Infeasible:
                with pytest.raises(Infeasible):
                    kept.removals(np.nonzero(dom & ~after))
                break
            r, c = kept.removals(np.nonzero(dom & ~after))
            got = after.copy()
            got[r, c] = False
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(kept.domains(), pack(np, want))
            assert_covering_matching(kept.matching(), want)
            dom, match = want, new


@pytest.mark.gpu
@pytest.mark.parametrize("pinned", [True, False])
def test_gpu_kept_call_sends_more_edges_than_it_had_room_for(cupy, monkeypatch, pinned):
    """A call sending more removed edges than the constraint has variables regrows the buffer it
    sends them through (and recaptures the replayed launch); where memory cannot be pinned, the
    kernel reads and writes device copies instead. Both give the CPU's removals."""
    from gpusolve.consistency import alldiff_kernel
    from gpusolve.consistency.alldiff import pack
    if not pinned:
        monkeypatch.setattr(alldiff_kernel, "pinned_array", lambda xp, shape, dtype: np.empty(shape, dtype))
    rng = np.random.default_rng(11)
    for trial in range(10):
        n, m = 40, 160
        dom = rng.random((n, m)) < 0.5
        dom[np.arange(n), rng.permutation(m)[:n]] = True
        dom, match = filter_domains(dom)
        kept = alldiff_kernel.DeviceDomains(cupy, pack(np, dom), m, match)
        assert (kept.up.dev is None) == pinned
        after = dom.copy()
        after[rng.random(dom.shape) < 0.3] = False  # about 0.15 * n * m edges at once: more than n
        after[np.arange(n), match] |= rng.random(n) < 0.5
        removed = np.nonzero(dom & ~after)
        assert removed[0].size > n
        try:
            want = filter_domains(after, match)[0]
        except Infeasible:
            with pytest.raises(Infeasible):
                kept.removals(removed)
            continue
        r, c = kept.removals(removed)
        got = after.copy()
        got[r, c] = False
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(kept.domains(), pack(np, want))


def assert_covering_matching(match, dom):
    """match gives every variable a value of its domain, no value twice."""
    assert (match >= 0).all() and dom[np.arange(dom.shape[0]), match].all()
    assert np.unique(match).size == match.size


@pytest.mark.gpu
@pytest.mark.parametrize("cap", [None, 2], ids=["list", "rows-after-lists"])
def test_gpu_mac_keeps_domains_on_the_device_through_a_search(cupy, cap):
    """MAC with every AllDifferent kept on the device (KeptGac: removals sent since the last call,
    the graph uploaded again after a backtrack) makes the CPU's search, node for node, with
    restarts after every failure; also where most calls return more removals than the list holds
    (read from the bit-packed rows, which earlier calls wrote too)."""
    from gpusolve.generate import langford, queens
    limits = Limits(restart_base=1, gpu_min_scope=1, list_cap=DEFAULT.list_cap if cap is None else cap)
    problems = [random_pair_csp(seed, seed % 2 == 1) for seed in range(120)] + [queens(40), langford(24)]
    cpu, gpu = mac_runs(problems, limits=limits), mac_runs(problems, cupy, limits)
    for k, (a, b) in enumerate(zip(cpu, gpu)):
        assert a == b, k
    assert sum(s["failures"] for _, s in gpu) > 50


@pytest.mark.gpu
def test_gpu_solve_runs_mac_with_gac_on_the_device(cupy):
    """--device gpu on a satisfaction problem with an AllDifferent of gpu_min_scope variables or
    more: the engine is CuPy (its plan has no buckets to size the choice by) and MAC's GAC runs
    there; the first solution is valid."""
    from gpusolve.generate import langford
    from gpusolve.search.mac import gac_on_device
    problem = langford(120)
    assert gac_on_device(problem)
    r = solve(problem, Options(device="gpu"))
    assert r.engine == "cupy" and r.search["method"] == "MAC" and r.status == "optimal"
    assert problem.evaluate(r.assignment) == 0


@pytest.mark.gpu
def test_gpu_matching_from_scratch_on_the_device(cupy):
    """DeviceDomains given no matching builds one on the device (an augmenting path per variable):
    the same removals as the CPU, Infeasible exactly when max_matching finds no covering matching."""
    from gpusolve.consistency import alldiff_kernel
    from gpusolve.consistency.alldiff import pack
    rng = np.random.default_rng(5)
    feasible = infeasible = 0
    for trial in range(120):
        n = int(rng.integers(1, 300))
        m = n + int(rng.integers(0, 20))
        dom = rng.random((n, m)) < rng.uniform(0.001, 0.1)
        kept = alldiff_kernel.DeviceDomains(cupy, pack(np, dom), m)
        try:
            max_matching(dom)
        except Infeasible:
            infeasible += 1
            with pytest.raises(Infeasible):
                kept.removals()
            continue
        feasible += 1
        r, c = kept.removals()
        got = dom.copy()
        got[r, c] = False
        np.testing.assert_array_equal(got, filter_domains(dom)[0])
        assert_covering_matching(kept.matching(), got)
    assert feasible >= 20 and infeasible >= 20
