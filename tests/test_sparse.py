"""Sparse tables, bounded sparse BE and hard-constraint preprocessing against dense BE and brute force."""
import itertools

import numpy as np
import pytest
from helpers import brute_force, random_problem
from test_gpu import cupy  # noqa: F401  (the fixture: CuPy and a CUDA device, else skip)

import parsers
from gpusolve import graph
from gpusolve.engines import sparse
from gpusolve.engines.base import eliminate_dense
from gpusolve.engines.numpy_engine import NumpyEngine
from gpusolve.model import FORBIDDEN, CostFunction, Problem, Variable, finalize_integer
from gpusolve import plan as plan_module
from gpusolve.plan import build_plan
from gpusolve.preprocess import lower_top, preprocess
from gpusolve.generate import generate
from gpusolve.eliminate import assign, run_plan
from gpusolve.solve import Options, bounded_sparse, solve

SEEDS = range(120)


def random_bucket(rng, top):
    """Inputs of one bucket (every table holds `var`), its separator, and the domains."""
    n = int(rng.integers(1, 6))
    dom = [int(rng.integers(1, 5)) for _ in range(n)]
    var = int(rng.integers(n))
    others = [u for u in range(n) if u != var]
    sep = tuple(int(u) for u in rng.permutation(others))
    inputs = []
    for _ in range(int(rng.integers(1, 5))):
        scope = [var] + [u for u in sep if rng.random() < 0.5]
        scope = tuple(int(u) for u in rng.permutation(scope))
        table = rng.integers(0, 30, size=[dom[u] for u in scope]).astype(np.int64)
        table[rng.random(table.shape) < rng.uniform(0.3, 0.95)] = top
        inputs.append((table, scope))
    covered = {u for _, s in inputs for u in s}
    return var, tuple(u for u in sep if u in covered), inputs, dom


@pytest.mark.parametrize("chunk", [None, 1, 3])
def test_sparse_join_and_eliminate_equal_the_dense_step(monkeypatch, chunk):
    if chunk:
        monkeypatch.setattr(plan_module, "CHUNK_ROWS", chunk)
    rng = np.random.default_rng(chunk or 0)
    top = 50
    for _ in range(150):
        var, sep, inputs, dom = random_bucket(rng, top)
        dense = eliminate_dense(np, var, sep, inputs, dom, top, True)
        got = sparse.eliminate_sparse(np, var, sep, inputs, dom, top)
        assert got.scope == sep and np.all(got.keys[1:] > got.keys[:-1])
        np.testing.assert_array_equal(sparse.to_dense(np, got, top, np.int64), dense)


@pytest.mark.parametrize("room", [1, 700, 5000])
def test_streamed_bucket_steps_equal_the_dense_step(room):
    """The streamed step (host tables, chunks and sort runs sized by `room` bytes) on NumPy."""
    rng = np.random.default_rng(room)
    top, log = 50, []
    for _ in range(150):
        var, sep, inputs, dom = random_bucket(rng, top)
        dense = eliminate_dense(np, var, sep, inputs, dom, top, True)
        got = sparse.eliminate_sparse(np, var, sep, inputs, dom, top, streamer=sparse.Streamer(np, room, log))
        assert got.scope == sep and np.all(got.keys[1:] > got.keys[:-1])
        np.testing.assert_array_equal(sparse.to_dense(np, got, top, np.int64), dense)
    assert max(r["chunks"] for r in log if r["what"].startswith("join")) > 1
    assert max(r["chunks"] for r in log if r["what"].startswith("sort")) > 1


class SmallDevice(NumpyEngine):
    """The CPU engine given a device budget of a few rows, so that sparse buckets stream."""

    device_bytes = 0

    def __init__(self, budget):
        self.budget = budget


def same_messages(ref, got, to_host=lambda a: a):
    assert got[0] == ref[0]
    for i, m in ref[2].items():
        g = got[2][i]
        np.testing.assert_array_equal(to_host(g.keys), m.keys)
        np.testing.assert_array_equal(to_host(g.costs), m.costs)


@pytest.mark.parametrize("budget, work_row_bytes", [(1, 80), (2000, 80), (200, 0)])
def test_plans_streamed_through_a_tiny_budget_equal_in_memory_runs(monkeypatch, budget, work_row_bytes):
    """Every message equal (bounds pruning included), and the assignment phase reads host tables.
    With no workspace predicted, some buckets start in memory and fall back to streaming."""
    monkeypatch.setattr(plan_module, "WORK_ROW_BYTES", work_row_bytes)
    in_memory = sparse.eliminate_sparse
    fell_back = []

    def spy(*args, **kwargs):
        try:
            return in_memory(*args, **kwargs)
        except sparse.DeviceFull:
            fell_back.append(args[1])
            raise
    monkeypatch.setattr(sparse, "eliminate_sparse", spy)
    streamed = 0
    for seed in range(40):
        problem = tight_problem(seed)
        plan = build_plan(problem, graph.elimination_order(problem), None, 1, "sparse")
        engine = SmallDevice(budget)
        ref, got = run_plan(problem, plan, NumpyEngine()), run_plan(problem, plan, engine)
        same_messages(ref, got)
        if not problem.is_forbidden(got[0]):
            assert assign(problem, plan, engine, got[1], got[2]) == assign(problem, plan, NumpyEngine(), ref[1], ref[2])
        streamed += len(engine.stream_log)
    assert streamed > 0 and (work_row_bytes or fell_back)


def test_dense_sparse_round_trip_lookup_and_slices():
    rng = np.random.default_rng(1)
    table = rng.integers(0, 9, size=(3, 4, 2)).astype(np.int64)
    table[rng.random(table.shape) < 0.6] = 9
    t = sparse.from_dense(np, table, (5, 1, 7), 9)
    assert t.rows == int((table < 9).sum())
    np.testing.assert_array_equal(sparse.to_dense(np, t, 9, np.int64), table)
    value = {5: 2, 1: 3, 7: 1}
    for var in (5, 1, 7):
        np.testing.assert_array_equal(sparse.slice_over(np, t, (5, 1, 7), var, value, 9),
                                      sparse.slice_over(np, table, (5, 1, 7), var, value, 9))


def test_keys_wider_than_63_bits_are_refused_and_planned_dense():
    with pytest.raises(sparse.KeyOverflow):
        sparse.SparseTable((0, 1), (1 << 32, 1 << 32), np.zeros(0, np.int64), np.zeros(0, np.int64))
    n = 66  # a clique of binary variables: the first buckets' joint tables have 2^66.. entries
    variables = [Variable(f"x{i}", 2) for i in range(n)]
    functions = [CostFunction((u, v), np.zeros((2, 2), np.int64)) for u in range(n) for v in range(u + 1, n)]
    plan = build_plan(Problem("clique", variables, functions, top=10), list(range(n)), None, 1, "sparse")
    assert [mb.sparse for mb in plan.minibuckets] == [mb.joint_entries <= 1 << 63 for mb in plan.minibuckets]
    assert not plan.minibuckets[0].sparse and plan.minibuckets[-1].sparse


def tight_problem(seed):
    rng = np.random.default_rng(seed)
    return random_problem(rng, n_max=6, d_max=4, f_max=9, arity_max=4, p_hard=float(rng.uniform(0.3, 0.95)),
                          integer=seed % 5 != 4, n_components=1 + seed % 2)


def internal(problem, value):
    return None if value is None else problem.sense * value - problem.offset


@pytest.mark.parametrize("seed", SEEDS)
def test_sparse_be_equals_dense_be_and_brute_force(seed):
    problem = tight_problem(seed)
    best, _ = brute_force(problem)
    for tables in ("sparse", "dense", "auto"):
        r = solve(problem, Options(device="cpu", tables=tables))
        if best >= problem.top:
            assert r.status == "infeasible" and r.assignment is None
            continue
        assert r.status == "optimal" and r.z is None
        assert internal(problem, r.upper_bound) == pytest.approx(best, abs=1e-9)
        # original value indices: the assignment evaluates to the bound on the file's problem
        assert problem.evaluate(r.assignment) == pytest.approx(best, abs=1e-9)


def test_forced_chunking_and_a_tiny_row_limit(monkeypatch):
    monkeypatch.setattr(plan_module, "CHUNK_ROWS", 2)
    for seed in range(30):
        problem = tight_problem(seed)
        best, _ = brute_force(problem)
        r = solve(problem, Options(device="cpu", tables="sparse"))
        assert (r.status == "infeasible") == (best >= problem.top)
        if r.status == "optimal":
            assert problem.evaluate(r.assignment) == pytest.approx(best, abs=1e-9)
    problem = generate("random", 8, 4, 0.5, 0.3, seed=1)
    plan = build_plan(problem, graph.elimination_order(problem), None, 1, "sparse")
    plan.row_limit = 5
    with pytest.raises(sparse.SparseOverflow):
        run_plan(problem, plan, NumpyEngine())


def bounded_case(seed):
    """A random problem, its order and the smallest MBE plan (whose z caps the incumbent's run)."""
    rng = np.random.default_rng(1000 + seed)
    problem = random_problem(rng, n_max=7, d_max=4, f_max=12, arity_max=3, p_hard=float(rng.uniform(0.0, 0.6)))
    order = graph.elimination_order(problem)
    return problem, order, build_plan(problem, order, max([f.arity for f in problem.functions] + [1]))


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


def test_default_solve_stays_exact_with_sparse_tables_where_dense_be_does_not_fit(monkeypatch):
    monkeypatch.setattr(plan_module, "CHUNK_ROWS", 1 << 12)  # a chunk workspace within the small budget
    problem = generate("random", 16, 6, 0.5, 0.3, seed=3)
    exact = solve(problem, Options(device="cpu", tables="dense"))
    r = solve(problem, Options(device="cpu", mem_limit=exact.peak_bytes // 4))
    assert r.status == "optimal" and r.z is None and r.largest_rows > 0
    assert r.upper_bound == exact.upper_bound and problem.evaluate(r.assignment) == exact.upper_bound
    dense = solve(problem, Options(device="cpu", mem_limit=exact.peak_bytes // 4, tables="dense"))
    assert dense.z is not None  # without sparse tables the same budget only affords mini-buckets


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


def test_plan_reports_sparse_buckets_and_smaller_memory_for_tight_tables():
    rng = np.random.default_rng(4)
    problem = random_problem(rng, n_max=8, d_max=6, f_max=20, arity_max=3, p_hard=0.97)
    order = graph.elimination_order(problem)
    dense, tight = build_plan(problem, order), build_plan(problem, order, None, 1, "auto")
    assert tight.sparse and "sparse" in tight.describe()
    assert tight.message_bytes < dense.message_bytes
    assert all(mb.rows <= mb.out_entries and mb.joint_rows <= mb.joint_entries for mb in tight.minibuckets)


@pytest.mark.parametrize("name, optimum", [("404.wcsp", 114), ("CELAR6-SUB0.wcsp", 159)])
def test_instances_reach_their_proven_optima(shared_instances, name, optimum):
    problem = parsers.read(shared_instances / name)
    r = solve(problem, Options(device="cpu", mem_limit=8 << 30))
    assert r.status == "optimal" and r.z is None
    assert r.lower_bound == r.upper_bound == optimum
    assert problem.to_file_value(problem.evaluate(r.assignment)) == optimum


@pytest.mark.gpu
def test_sparse_step_on_the_gpu_equals_the_cpu(cupy):
    rng = np.random.default_rng(7)
    for _ in range(100):
        var, sep, inputs, dom = random_bucket(rng, 50)
        cpu = sparse.eliminate_sparse(np, var, sep, inputs, dom, 50)
        gpu = sparse.eliminate_sparse(cupy, var, sep, [(cupy.asarray(t), s) for t, s in inputs], dom, 50)
        np.testing.assert_array_equal(cupy.asnumpy(gpu.keys), cpu.keys)
        np.testing.assert_array_equal(cupy.asnumpy(gpu.costs), cpu.costs)


@pytest.mark.gpu
@pytest.mark.parametrize("seed", range(40))
def test_sparse_and_bounded_solves_on_the_gpu_equal_the_cpu(cupy, seed):
    from gpusolve.engines.cupy_engine import CupyEngine
    problem = tight_problem(seed)
    cpu, gpu = (solve(problem, Options(device=d, tables="sparse")) for d in ("cpu", "gpu"))
    assert (gpu.status, gpu.lower_bound, gpu.upper_bound) == (cpu.status, cpu.lower_bound, cpu.upper_bound)
    if gpu.assignment is not None:
        assert problem.evaluate(gpu.assignment) == pytest.approx(problem.evaluate(cpu.assignment))
    problem, order, fallback = bounded_case(seed)
    on_gpu, on_cpu = (bounded_sparse(problem, order, fallback, 1 << 30, e, None) for e in (CupyEngine(), NumpyEngine()))
    assert on_gpu[0] == on_cpu[0] and (on_gpu[1] is None) == (on_cpu[1] is None)
    if on_gpu[1] is not None:
        assert problem.evaluate(on_gpu[1]) == problem.evaluate(on_cpu[1])


@pytest.mark.gpu
@pytest.mark.parametrize("limit, work_row_bytes", [(1 << 14, 2048), (1 << 16, 8192)])
def test_streamed_plans_on_the_gpu_equal_the_cpu(cupy, monkeypatch, limit, work_row_bytes):
    """A device budget of a few KiB (originals mostly in host memory, or on the device) and large
    predicted workspaces: sparse buckets stream through pinned host buffers, in chunks of a few
    rows and sort runs of 2-8 rows."""
    from gpusolve.engines.cupy_engine import CupyEngine
    monkeypatch.setattr(plan_module, "WORK_ROW_BYTES", work_row_bytes)
    monkeypatch.setattr(sparse, "SORT_ROW_BYTES", 4096)
    log = []
    for seed in range(12):
        problem = tight_problem(seed)
        plan = build_plan(problem, graph.elimination_order(problem), None, 1, "sparse")
        engine = CupyEngine(gpu_mem_limit=limit)
        ref, got = run_plan(problem, plan, NumpyEngine()), run_plan(problem, plan, engine)
        same_messages(ref, got, lambda a: sparse.to_module(np, a))
        if not problem.is_forbidden(got[0]):
            assert assign(problem, plan, engine, got[1], got[2]) == assign(problem, plan, NumpyEngine(), ref[1], ref[2])
        log += engine.stream_log
    assert max(r["chunks"] for r in log if r["what"].startswith("join")) > 1
    assert max(r["chunks"] for r in log if r["what"].startswith("sort")) > 1
