"""Cost shifting (gpusolve/inference/shift.py): FGLP keeps the problem equivalent, MBE-MM keeps bounds valid."""
import csv
import itertools
from collections import Counter

import numpy as np
import pytest

from gpusolve import parsers
from gpusolve.parsers.wcsp import write_wcsp
from gpusolve.order import graph
from gpusolve.inference.eliminate import run_plan
from gpusolve.engines.numpy_engine import NumpyEngine
from gpusolve.generate import generate
from gpusolve.model.problem import FORBIDDEN, CostFunction, Problem, Variable, finalize_integer
from gpusolve.plan.buckets import build_plan
from gpusolve.consistency.preprocess import preprocess
from gpusolve.inference.shift import fglp, jglp
from helpers import InterruptAfter, brute_force, random_problem, toulbar2_in_a_child, toulbar2_optimum
from gpusolve.stop import Stop

SEEDS = range(300)


def mbe(problem, z, match=False):
    """MBE(z) lower bound (internal cost) with a min-fill order."""
    plan = build_plan(problem, graph.elimination_order(problem, "minfill"), z)
    return run_plan(problem, plan, NumpyEngine(), match=match)[0], plan


def close(a, b):
    return a == b or abs(float(a) - float(b)) <= 1e-9 * max(1.0, abs(float(a)))


def at_most(a, b):
    return a <= b or close(a, b)


def generated(seed):
    """Arity up to 3, hard tuples, up to 3 components; every third problem float (-log10 p, inf)."""
    rng = np.random.default_rng(seed)
    return random_problem(rng, n_max=7, arity_max=3, integer=seed % 3 != 0, n_components=1 + seed % 3)


@pytest.mark.parametrize("block", range(6))
def test_fglp_is_equivalent_and_its_constant_bounds_the_optimum(block):
    for seed in SEEDS[block::6]:
        p = generated(seed)
        q = fglp(p)
        assert q.functions[0].scope == () and q.functions[0].table.ndim == 0
        assert {f.scope for f in p.functions if f.arity > 1} == {f.scope for f in q.functions if f.arity > 1}
        assert all(f.arity < 2 or f.table.dtype == p.dtype for f in q.functions)
        for a in itertools.product(*(range(d) for d in p.domains)):
            if p.integer:
                assert q.evaluate(a) == p.evaluate(a), (seed, a)
            else:
                assert close(q.evaluate(a), p.evaluate(a)), (seed, a)
        before = sum(f.table[()] for f in p.functions if not f.scope)
        const = q.functions[0].table[()]
        assert at_most(min(before, p.top), const), seed
        opt = brute_force(p)[0]
        assert at_most(const, opt), seed
        z = max(max((f.arity for f in p.functions), default=0), 1)
        assert at_most(mbe(q, z)[0], opt) and at_most(mbe(p, z, True)[0], opt), seed


def dense_problem(rng, integer: bool) -> Problem:
    """6-10 variables, n..2n functions of arity 2-3, 10% hard tuples, top above every finite sum:
    wide enough that plain MBE(z) is loose at small z (random_problem's are mostly exact or infeasible)."""
    n = int(rng.integers(6, 11))
    variables = [Variable(f"x{i}", int(rng.integers(2, 5))) for i in range(n)]
    functions = []
    for _ in range(int(rng.integers(n, 2 * n + 1))):
        scope = tuple(int(v) for v in rng.choice(n, int(rng.integers(2, 4)), replace=False))
        shape = tuple(variables[v].domain for v in scope)
        hard = rng.random(shape) < 0.1
        table = rng.integers(0, 20, size=shape).astype(np.int64) if integer else rng.random(shape) * 3.0
        table[hard] = FORBIDDEN if integer else np.inf
        functions.append(CostFunction(scope, table))
    p = Problem("dense", variables, functions, integer=integer)
    if integer:
        return finalize_integer(p, None)
    p.top = np.inf
    return p


@pytest.mark.slow
def test_shifted_and_matched_mbe_bounds_are_valid_and_mostly_tighter():
    """Every variant (MBE on the FGLP problem, MBE-MM, both) stays at or below the optimum (exact
    BE, itself checked against brute force in test_solve) at every z and at or above the FGLP
    constant, and MBE-MM is exact at width + 1. Beating plain MBE(z) is not a theorem: where
    plain MBE is loose, each variant loses to it in 5-14% of the cases below (seed 1, z=3 is
    one) and beats it in 85-90%; the test holds those rates."""
    room, above, below = Counter(), Counter(), Counter()
    for seed in SEEDS:
        p = dense_problem(np.random.default_rng(seed), integer=seed % 3 != 0)
        q = fglp(p)
        opt, plan = mbe(p, None)
        arity = max(f.arity for f in p.functions)
        for z in range(arity, plan.induced_width + 2):
            plain = mbe(p, z)[0]
            variants = {"fglp": mbe(q, z)[0], "mm": mbe(p, z, True)[0], "fglp+mm": mbe(q, z, True)[0]}
            for name, b in variants.items():
                assert at_most(b, opt), (seed, z, name, b, opt)
                if not at_most(opt, plain):
                    room[name] += 1
                    above[name] += not at_most(b, plain)
                    below[name] += not at_most(plain, b)
            assert at_most(q.functions[0].table[()], variants["fglp"])
            assert at_most(q.functions[0].table[()], variants["fglp+mm"])
        assert close(mbe(p, plan.induced_width + 1, True)[0], opt)  # one mini-bucket per bucket
    for name in room:
        assert room[name] >= 400
        assert above[name] >= 0.8 * room[name] and below[name] <= 0.15 * room[name], (name, room, above, below)


def ascended(p, z, match=False, engine=None, **kw):
    """(JGLP bound, the MBE run's bound it started from) at z."""
    engine = engine or NumpyEngine()
    plan = build_plan(p, graph.elimination_order(p, "minfill"), z)
    matched = {}
    lower, tables, messages = run_plan(p, plan, engine, match=match, matched=matched)
    return jglp(p, plan, engine, tables, messages, matched, **kw), lower


@pytest.mark.slow
@pytest.mark.parametrize("block", range(3))
def test_jglp_never_below_the_mbe_run_it_starts_from_and_never_above_the_optimum(block):
    """Block coordinate ascent on the join graph: the acceptance of the anytime issue asks a shifted
    bound at least plain MBE's at every z, and at most the optimum, on >= 300 random problems with
    hard tuples; from MBE-MM's run as well. It must also rise on most loose cases."""
    loose = rose = 0
    for seed in SEEDS[block::3]:
        p = dense_problem(np.random.default_rng(seed), integer=seed % 3 != 0)
        opt, plan = mbe(p, None)
        for z in range(max(f.arity for f in p.functions), plan.induced_width + 1):
            for match in (False, True):
                bound, start = ascended(p, z, match)
                assert at_most(start, bound) and at_most(bound, opt), (seed, z, match, start, bound, opt)
                if not at_most(opt, start):
                    loose += 1
                    rose += not at_most(bound, start)
    assert loose >= 100 and rose >= 0.5 * loose, (loose, rose)


def test_jglp_on_generated_problems_with_components_and_floats():
    """random_problem's shapes (unary, several components, forbidden values, floats with inf)."""
    for seed in SEEDS:
        p = generated(seed)
        opt = brute_force(p)[0]
        for z in (1, 2):
            bound, start = ascended(p, z)
            assert at_most(start, bound) and at_most(bound, opt), (seed, z, start, bound, opt)


def test_jglp_keeps_regions_within_its_budget_and_stops_at_its_deadline():
    """No room or no time: the run's own bound comes back unchanged."""
    p = dense_problem(np.random.default_rng(1), integer=True)
    bound, start = ascended(p, 3)
    assert bound > start  # seed 1 at z=3 is loose and JGLP lifts it
    assert ascended(p, 3, budget=0) == (start, start)
    assert ascended(p, 3, stop=Stop(0.0)) == (start, start)


def test_fglp_keeps_top_and_detects_infeasibility():
    """A value forbidden everywhere and an empty domain: shifting must keep both forbidden."""
    v = [Variable("a", 2), Variable("b", 2)]
    top = 10
    f = CostFunction((0, 1), np.array([[top, top], [3, top]], dtype=np.int64))
    g = CostFunction((1,), np.array([4, 0], dtype=np.int64))
    p = Problem("t", v, [f, g], top=top)
    q = fglp(p)
    assert [q.evaluate(a) for a in itertools.product(range(2), range(2))] == [top, top, 7, top]
    assert q.functions[0].table[()] == 7
    dead = Problem("t", v, [CostFunction((0, 1), np.full((2, 2), top, dtype=np.int64))], top=top)
    assert fglp(dead).functions[0].table[()] == top
    assert fglp(p, stop=Stop(0.0)).functions[0].table[()] == 3  # no sweep: the functions' minima only


def internal_optimum(problem, value: float) -> float:
    """optima.csv's file objective in the solver's internal cost (minimised, offset excluded)."""
    return problem.sense * value - float(problem.offset)


@pytest.mark.slow
def test_instances_bounds_valid(shared_instances):
    with open(shared_instances / "optima.csv") as f:
        rows = [r for r in csv.DictReader(f) if r["file"].endswith((".wcsp", ".uai"))]
    assert len(rows) >= 15
    lifted = 0
    for row in rows:
        reduced = preprocess(parsers.read(shared_instances / row["file"]))
        p = reduced.problem
        opt = internal_optimum(p, float(row["optimum"]))
        q = fglp(p)
        assert at_most(q.functions[0].table[()], opt + 1e-6), row["file"]
        arity = max(f.arity for f in p.functions)
        for z in range(max(arity, 2), arity + 3):
            plain, plan = mbe(p, z)
            if sum(mb.joint_entries for mb in plan.minibuckets) > 3e7:
                break  # keeps the test fast (CELAR6 from z=4)
            bounds = [mbe(q, z)[0], mbe(p, z, True)[0], mbe(q, z, True)[0]]
            assert all(at_most(b, opt + 1e-6) for b in [plain, *bounds]), (row["file"], z, plain, bounds, opt)
            lifted += max(bounds) > plain + 1e-9
    assert lifted >= 20  # the shifts pay on most instances (44 of the pairs on 2026-11-23)


@pytest.mark.gpu
def test_fglp_and_matching_on_the_gpu_agree_with_the_cpu(cupy):
    """The same code on CuPy arrays: FGLP tables and MBE-MM bounds as on NumPy (floats within 1e-9)."""
    cp = cupy
    from gpusolve.engines.cupy_engine import CupyEngine
    gpu = CupyEngine()
    for seed in range(40):
        p = dense_problem(np.random.default_rng(seed), integer=seed % 3 != 0)
        host, device = fglp(p), fglp(p, xp=cp)
        for f, g in zip(host.functions, device.functions):
            assert f.scope == g.scope and f.table.dtype == g.table.dtype
            assert np.array_equal(f.table, g.table) if p.integer else np.allclose(f.table, g.table, rtol=1e-9)
        order = graph.elimination_order(p, "minfill")
        for z in (3, 4):
            plan = build_plan(p, order, z)
            cpu_bound = run_plan(p, plan, NumpyEngine(), match=True)[0]
            assert close(run_plan(p, plan, gpu, match=True)[0], cpu_bound), (seed, z)
            assert all(close(a, b) for a, b in zip(ascended(p, z, True), ascended(p, z, True, gpu))), (seed, z)


def test_matching_leaves_sparse_mini_buckets_alone():
    """All-sparse plans match nothing (the bound is plain MBE's); mixed plans stay valid."""
    for seed in range(15):
        p = dense_problem(np.random.default_rng(seed), integer=True)
        order = graph.elimination_order(p, "minfill")
        opt = mbe(p, None)[0]
        for tables in ("sparse", "auto"):
            plan = build_plan(p, order, 3, tables=tables)
            matched = run_plan(p, plan, NumpyEngine(), match=True)[0]
            plain = run_plan(p, plan, NumpyEngine())[0]
            assert matched <= opt
            if tables == "sparse":
                assert matched == plain


def test_weighted_mini_buckets_bound_z_from_above():
    """WMB (probabilistic.weighted_bound): never above -log10 Z (brute force on small problems, exact
    BE on larger ones), exact for exact plans; on these 100 problems it beats one sum and K-1 maxima
    at 112 of 164 (problem, z) pairs and loses at 52 (equal weights, not optimised)."""
    from gpusolve.inference.probabilistic import partition_bounds, weighted_bound
    eng = NumpyEngine()
    for seed in range(60):
        p = generated(3 * seed)  # float
        with np.errstate(divide="ignore"):  # Z = 0: -log10 Z = inf
            z_true = -np.log10(sum(10.0 ** -float(p.evaluate(a))
                                   for a in itertools.product(*(range(d) for d in p.domains))))
        z = max(max((f.arity for f in p.functions), default=1), 1)
        plan = build_plan(p, graph.elimination_order(p, "minfill"), z)
        assert weighted_bound(p, plan, eng) <= z_true + 1e-9 * max(1.0, abs(z_true)), seed
    better = worse = 0
    for seed in range(100):
        p = dense_problem(np.random.default_rng(seed), integer=False)
        order = graph.elimination_order(p, "minfill")
        exact = build_plan(p, order, None)
        log_z = weighted_bound(p, exact, eng)
        assert close(log_z, partition_bounds(p, exact, lambda op: run_plan(p, exact, eng, op=op)[0])[0])
        for z in range(3, exact.induced_width + 1):
            plan = build_plan(p, order, z)
            low = partition_bounds(p, plan, lambda op: run_plan(p, plan, eng, op=op)[0])[0]
            w = weighted_bound(p, plan, eng)
            assert at_most(w, log_z), (seed, z)
            better += w > low + 1e-9
            worse += w < low - 1e-9
    assert better >= 2 * worse, (better, worse)


def shifting_network(seed):
    """A generated network of 16-36 variables, domains 3-6, 0-30% of the entries forbidden: pytoulbar2
    solves each within seconds."""
    rng = np.random.default_rng(seed)
    topology = ("grid", "random", "scalefree")[seed % 3]
    n = (16, 25, 36)[seed % 4 % 3] if topology == "grid" else int(rng.integers(16, 37))
    return generate(topology, n, int(rng.integers(3, 7)), 0.15, (0.0, 0.1, 0.2, 0.3)[seed % 4], seed)


@pytest.mark.parametrize("block", range(3))
def test_fglp_converges_no_lower_than_100_fixed_sweeps_and_below_the_optimum(tmp_path, block):
    """90 networks: the bound after each sweep never falls, never passes the optimum (pytoulbar2), is
    what a run capped there returns, and the converged run ends no lower than 100 fixed sweeps (the
    former stop after 20 sweeps without a rise ended lower on 13 of them)."""
    for seed in range(30 * block, 30 * (block + 1)):
        p = shifting_network(seed)
        optimum = toulbar2_optimum(p, tmp_path / "p.wcsp")
        seen = []
        converged = fglp(p, on_sweep=lambda sweeps, bound: seen.append(bound)).functions[0].table[()]
        assert seen == sorted(seen) and converged == seen[-1], seed
        assert optimum is None or p.to_file_value(converged) <= optimum, seed
        half = (len(seen) + 1) // 2
        assert fglp(p, half).functions[0].table[()] == seen[half - 1], seed
        assert fglp(p, 100, window=100).functions[0].table[()] <= converged, seed


def test_fglp_bounds_after_every_sweep_stay_below_the_brute_force_optimum():
    for seed in SEEDS[::5]:
        p = generated(seed)
        opt = brute_force(p)[0]
        seen = []
        fglp(p, on_sweep=lambda sweeps, bound: seen.append(bound))
        assert all(at_most(a, b) for a, b in zip(seen, seen[1:])) and all(at_most(b, opt) for b in seen), seed


def test_fglp_stops_when_asked_and_reports_its_sweeps():
    """Checked before each sweep; this grid converges only after 262 sweeps."""
    p = generate("grid", 100, 10, 0.3, 0.0, 1)
    stop, seen = InterruptAfter(6), []
    q = fglp(p, stop=stop, on_sweep=lambda sweeps, bound: seen.append((sweeps, bound)))
    assert stop.polls == 6 and [s for s, _ in seen] == [1, 2, 3, 4, 5]
    assert q.functions[0].table[()] == seen[-1][1]


def test_jglp_sweeps_until_its_bound_converges(tmp_path):
    """Past the former cap of 50 sweeps, where this grid's bound still rises; below its optimum."""
    p = generate("grid", 64, 6, 0.3, 0.2, 2)
    write_wcsp(p, tmp_path / "g.wcsp")
    optimum = round(toulbar2_in_a_child(tmp_path / "g.wcsp")[0])
    seen = []
    bound, start = ascended(p, 3, True, on_sweep=lambda sweeps, b: seen.append(b))
    assert len(seen) > 50 and seen == sorted(seen) and bound == seen[-1]
    assert start <= ascended(p, 3, True, sweeps=50)[0] < bound <= optimum
