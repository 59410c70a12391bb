"""Sparse tables against the dense step, dense BE and brute force, on the CPU and the GPU."""
import gc
import weakref

import numpy as np
import pytest
from helpers import bounded_case, brute_force, internal, same_messages, tight_problem

from gpusolve.order import graph
from gpusolve.engines import sparse, streaming
from gpusolve.engines.sparse_streamed import Streamer
from gpusolve.engines.sparse import SparseTable
from gpusolve.engines.dense import eliminate_dense
from gpusolve.engines.numpy_engine import NumpyEngine
from gpusolve.model.problem import CostFunction, Problem, Variable
from gpusolve.plan import buckets as plan_module
from gpusolve.plan.buckets import build_plan
from gpusolve.inference.eliminate import assign, run_plan
from gpusolve.inference.eliminate import bounded_sparse
from gpusolve.limits import DEFAULT, Limits
from gpusolve.schedule.solve import Options, solve

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
def test_sparse_join_and_eliminate_equal_the_dense_step(chunk):
    limits = Limits(chunk_rows=chunk) if chunk else DEFAULT
    rng = np.random.default_rng(chunk or 0)
    top = 50
    for _ in range(150):
        var, sep, inputs, dom = random_bucket(rng, top)
        dense = eliminate_dense(np, var, sep, inputs, dom, top, True)
        got = sparse.eliminate_sparse(np, var, sep, inputs, dom, top, limits=limits)
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
        streamer = Streamer(streaming.Pipeline(np, log), room)
        got = sparse.eliminate_sparse(np, var, sep, inputs, dom, top, streamer=streamer)
        assert got.scope == sep and np.all(got.keys[1:] > got.keys[:-1])
        np.testing.assert_array_equal(sparse.to_dense(np, got, top, np.int64), dense)
    for step in ("join", "sort", "merge"):
        assert max(r["chunks"] for r in log if r["what"].startswith(step)) > 1


@pytest.mark.parametrize("room", [1 << 20, 32 << 20, 200 << 20])
def test_a_streamer_below_one_stream_room_takes_one_stream_and_jobs_twice_as_large(room):
    """One stream: a job holds the room but for the previous job's results, still going down; two:
    each job half of it."""
    pipe = streaming.Pipeline(np, [])
    one, two = Streamer(pipe, room), Streamer(pipe, room, streams=2)
    assert one.streams == 1 and two.streams == 2
    assert Streamer(pipe, DEFAULT.one_stream_room).streams == 2
    assert (one.job_room, one.wait, two.job_room, two.wait) == (room, plan_module.ROW_BYTES, room // 2, 0)
    per_row = DEFAULT.sort_row_bytes
    assert one.run_rows * (per_row + one.wait) <= room < (one.run_rows + 1) * (per_row + one.wait)
    assert 2 * two.run_rows * per_row <= room
    assert one.run_rows > 1.6 * two.run_rows


def test_a_streamed_join_sizes_its_chunks_for_their_rows_inputs_and_the_waiting_results():
    """Chunks of output rows whose work (join_row_bytes each) and input rows fit a job's room beside
    the previous chunk's results: on one stream some 40% fewer chunks than on two."""
    rng = np.random.default_rng(3)
    a = SparseTable((0, 1, 2), (6, 6, 6), np.sort(rng.choice(216, 150, replace=False)).astype(np.int64),
                    rng.integers(0, 9, 150))
    b = SparseTable((0, 3, 4), (6, 6, 6), np.sort(rng.choice(216, 170, replace=False)).astype(np.int64),
                    rng.integers(0, 9, 170))
    total = sparse.join_index(np, a, b).total
    counts = {}
    for streams in (1, 2):
        log = []
        streamer = Streamer(streaming.Pipeline(np, log), 20_000, streams)
        runs = streamer.join(a, b, (0, 1, 2, 3, 4), (6,) * 5, 100, None, lambda k, c, count=None: (k, c))
        rows = [r[0].shape[0] for r in runs]
        assert sum(rows) == total
        per_row = DEFAULT.join_row_bytes + streamer.wait
        assert max(rows) * per_row <= streamer.job_room
        counts[streams] = len(runs)
    assert counts[1] <= 0.65 * counts[2]


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


@pytest.mark.parametrize("seed", SEEDS)
def test_the_rest_bound_keeps_exactly_the_rows_below_top_by_brute_force(seed):
    """RestBound's row filter against its definition, computed entry by entry: a row is kept when
    its cost plus, for every active table (dense, sparse, constant; some consumed, some passed as
    extra), that table's least entry agreeing with the row, stays below top (a small top, summed at
    once, or the largest, summed in turn)."""
    from gpusolve.engines.rest_bound import RestBound
    from gpusolve.model.problem import MAX_TOP
    rng = np.random.default_rng(seed)
    n, top = int(rng.integers(2, 7)), int(rng.integers(20, 80)) if seed % 4 else MAX_TOP
    dom = [int(rng.integers(1, 4)) for _ in range(n)]
    bound, tables, extra = RestBound(np, dom, top), {}, []
    for k in range(int(rng.integers(1, 9))):
        scope = tuple(int(u) for u in rng.choice(n, size=int(rng.integers(0, min(n, 3) + 1)), replace=False))
        table = rng.integers(0, 15, size=[dom[u] for u in scope]).astype(np.int64)
        table[rng.random(table.shape) < 0.2] = top
        stored = sparse.from_dense(np, table, scope, top) if scope and rng.random() < 0.4 else table
        if rng.random() < 0.2:
            extra.append((stored, scope))
        else:
            bound.add(("f", k), stored, scope)
            tables[("f", k)] = (table, scope)
    gone = [key for key in tables if rng.random() < 0.3]
    bound.consume(gone)
    scope = tuple(int(u) for u in rng.permutation(n)[:int(rng.integers(1, n + 1))])
    rows = np.array(list(np.ndindex(*[dom[u] for u in scope])), dtype=np.int64).reshape(-1, len(scope))
    costs = rng.integers(0, 20, size=len(rows)).astype(np.int64)
    got = bound.keep(scope, extra)([rows[:, i].copy() for i in range(len(scope))], costs.copy())
    terms = [t for key, t in tables.items() if key not in gone] + \
        [(sparse.to_dense(np, t, top, np.int64) if isinstance(t, SparseTable) else t, s) for t, s in extra]
    for row, cost, kept in zip(rows, costs, got):
        lb = int(cost)
        for table, s in terms:
            index = tuple(int(row[scope.index(u)]) if u in scope else slice(None) for u in s)
            lb = min(lb + int(np.min(table[index])), top)
        assert bool(kept) == (lb < top), (seed, row, lb)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["int64", "float64", "int32"])
def test_segment_min_on_the_gpu_equals_numpy(cupy, dtype):
    """Short runs (a join chunk's), one run of 10^5 rows (a projection onto few values), and none."""
    rng = np.random.default_rng(5)
    for n, codes_max in [(1000, 300), (100_000, 1), (0, 1), (50_000, 40_000)]:
        codes = rng.integers(0, codes_max, n).astype(np.int64)
        costs = (rng.integers(-50, 1000, n) if dtype != "float64" else rng.normal(size=n) * 100).astype(dtype)
        if dtype == "float64" and n:
            costs[::7] = np.inf
        want = sparse.segment_min(np, codes, costs)
        got = sparse.segment_min(cupy, cupy.asarray(codes), cupy.asarray(costs))
        for w, g in zip(want, got):
            np.testing.assert_array_equal(cupy.asnumpy(g), w)
            assert cupy.asnumpy(g).dtype == w.dtype


@pytest.mark.gpu
def test_a_counted_segment_min_leaves_the_number_of_codes_on_the_device(cupy):
    """What a streamed merge's ranges reduce by: the codes and minima NumPy gives, their number in
    a device scalar (no wait for it), the rows past it left unread."""
    rng = np.random.default_rng(12)
    for n, codes_max in [(5000, 300), (70_000, 10 ** 6), (1, 1)]:
        codes, costs = rng.integers(0, codes_max, n).astype(np.int64), rng.integers(0, 1000, n)
        want = sparse.segment_min(np, codes, costs)
        got = sparse.segment_min(cupy, cupy.asarray(codes), cupy.asarray(costs), counted=True)
        assert isinstance(got, streaming.Counted) and isinstance(got.count, cupy.ndarray)
        m = int(got.count.get()[0])
        assert m == len(want[0])
        for w, g in zip(want, got.arrays):
            np.testing.assert_array_equal(cupy.asnumpy(g[:m]), w)


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
    cpu, gpu = (solve(problem, Options(device=d, tables="sparse", host_max=0)) for d in ("cpu", "gpu"))
    assert (gpu.status, gpu.lower_bound, gpu.upper_bound) == (cpu.status, cpu.lower_bound, cpu.upper_bound)
    if gpu.assignment is not None:
        assert problem.evaluate(gpu.assignment) == pytest.approx(problem.evaluate(cpu.assignment))
    problem, order, fallback = bounded_case(seed)
    on_gpu, on_cpu = (bounded_sparse(problem, order, fallback, 1 << 30, e, None) for e in (CupyEngine(), NumpyEngine()))
    assert on_gpu[0] == on_cpu[0] and (on_gpu[1] is None) == (on_cpu[1] is None)
    if on_gpu[1] is not None:
        assert problem.evaluate(on_gpu[1]) == problem.evaluate(on_cpu[1])


@pytest.mark.gpu
@pytest.mark.parametrize("limit, work_row_bytes, streams", [(1 << 14, 2048, 1), (1 << 16, 16384, 1), (1 << 16, 8192, 2)])
def test_streamed_plans_on_the_gpu_equal_the_cpu(cupy, limit, work_row_bytes, streams):
    """A device budget of a few KiB (originals mostly in host memory, or on the device) and large
    predicted workspaces: sparse buckets stream through pinned host buffers, in chunks of a few
    rows and sort runs of 2-8 rows, on one stream (small rooms) or two."""
    from gpusolve.engines.cupy_engine import CupyEngine
    limits = Limits(work_row_bytes=work_row_bytes, join_row_bytes=work_row_bytes,
                    sort_row_bytes=8192 // streams,  # one stream: jobs of twice the room
                    one_stream_room=0 if streams == 2 else DEFAULT.one_stream_room)
    log = []
    for seed in range(12):
        problem = tight_problem(seed)
        plan = build_plan(problem, graph.elimination_order(problem), None, 1, "sparse", limits)
        engine = CupyEngine(gpu_mem_limit=limit)
        ref, got = run_plan(problem, plan, NumpyEngine()), run_plan(problem, plan, engine)
        same_messages(ref, got, lambda a: sparse.to_module(np, a))
        if not problem.is_forbidden(got[0]):
            assert assign(problem, plan, engine, got[1], got[2]) == assign(problem, plan, NumpyEngine(), ref[1], ref[2])
        log += engine.stream_log
    for step in ("join", "sort", "merge"):
        assert max(r["chunks"] for r in log if r["what"].startswith(step)) > 1


def random_pair(rng, dtype):
    """Two sparse tables sharing some variables, and an output scope over all of theirs."""
    n = int(rng.integers(2, 7))
    dom = [int(rng.integers(1, 6)) for _ in range(n)]
    tables = []
    for _ in range(2):
        scope = tuple(int(u) for u in rng.permutation(n)[:int(rng.integers(1, n + 1))])
        table = rng.integers(0, 30, size=[dom[u] for u in scope]).astype(dtype)
        table[rng.random(table.shape) < rng.uniform(0.2, 0.9)] = 50
        tables.append(sparse.from_dense(np, table, scope, 50))
    scope = tuple(int(u) for u in rng.permutation(sorted(set(tables[0].scope) | set(tables[1].scope))))
    return tables[0], tables[1], scope, tuple(dom[u] for u in scope)


def test_gather_axes_compose_the_output_keys():
    """The one-launch gather's key composition (per output variable: input, divisor, modulus,
    place), done here in NumPy, gives the array code's keys."""
    rng = np.random.default_rng(3)
    for _ in range(200):
        a, b, scope, dims = random_pair(rng, np.int64)
        ix = sparse.join_index(np, a, b)
        keys, costs, count = sparse.gather(np, ix, a, b, 0, ix.total, scope, dims, 200, None)  # top above any sum
        assert count is None
        i = np.arange(ix.total)
        g = np.searchsorted(ix.out_start, i, side="right") - 1
        t = i - ix.out_start[g]
        ra, rb = ix.a_rows[ix.a_start[g] + t % ix.a_size[g]], ix.b_rows[ix.b_start[g] + t // ix.a_size[g]]
        composed = np.zeros(ix.total, dtype=np.int64)
        for src, div, mod, place in sparse.gather_axes(a, b, scope, dims).reshape(-1, 4):
            composed += ((b.keys[rb] if src else a.keys[ra]) // div) % mod * place
        np.testing.assert_array_equal(composed, keys)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.int64, np.float64])
def test_one_launch_gather_equals_the_array_code(cupy, dtype):
    """The GPU's gather kernel against gather's array code on NumPy, whole and in chunks of output
    rows, from inputs in shared-code order or through the sort's permutation (rows come back in no
    fixed order: compared sorted by key)."""
    rng = np.random.default_rng(5)
    for trial in range(150):
        a, b, scope, dims = random_pair(rng, dtype)
        ix = sparse.join_index(np, a, b)
        da, db = (sparse.moved(cupy, t) for t in (a, b))
        dix = sparse.JoinIndex(*(None if x is None else cupy.asarray(x) for x in (
            ix.a_rows, ix.b_rows, ix.a_start, ix.a_size, ix.b_start, ix.b_size, ix.out_start)))
        step = max(1, ix.total // int(rng.integers(1, 4)))
        for lo in range(0, max(ix.total, 1), step):
            hi = min(lo + step, ix.total)
            want = sparse.gather(np, ix, a, b, lo, hi, scope, dims, 50, None)
            got = sparse.gather(cupy, dix, da, db, lo, hi, scope, dims, 50, None)
            order = np.argsort(want[0])
            k, c = cupy.asnumpy(got[0]), cupy.asnumpy(got[1])
            np.testing.assert_array_equal(np.sort(k), want[0][order])
            np.testing.assert_array_equal(c[np.argsort(k)], want[1][order])
            assert got[2] is None
            counted = sparse.gather(cupy, dix, da, db, lo, hi, scope, dims, 50, None, counted=True)
            n = int(counted[2].get()[0])  # the rows kept; the arrays hold every output row
            assert n == k.shape[0] and counted[0].shape[0] == hi - lo
            np.testing.assert_array_equal(np.sort(cupy.asnumpy(counted[0][:n])), np.sort(k))
            assert bool(cupy.all(counted[0][n:] == np.iinfo(np.int64).max))  # they sort last


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["int64", "float64", "int32"])
def test_counted_sort_keeps_the_valid_rows_first(cupy, dtype):
    """by_first given a device count (the rows past it hold the largest key, as the counted gather
    leaves them) sorts the first count rows as NumPy does and returns them as a Counted."""
    rng = np.random.default_rng(11)
    for n, count in [(1000, 1000), (1000, 613), (1000, 0), (5, 1), (0, 0)]:
        codes = rng.integers(0, 50, n).astype(np.int64)
        codes[count:] = np.iinfo(np.int64).max
        costs = rng.integers(-5, 100, n).astype(dtype)
        dev_count = cupy.asarray([count], dtype=cupy.int64)
        ordered = sparse.by_first(cupy, cupy.asarray(codes), cupy.asarray(costs), count=dev_count)
        assert isinstance(ordered, sparse.streaming.Counted) and ordered.count is dev_count
        for w, g in zip(sparse.by_first(np, codes[:count], costs[:count]), ordered.arrays):
            np.testing.assert_array_equal(cupy.asnumpy(g[:count]), w)


def test_a_streamed_step_frees_its_tables_when_they_go():
    """A streamed message's arrays die with the table, not at the next run of the cycle collector
    (the GPU's page blocks return to their pool then): nothing of the step holds them in a cycle."""
    rng = np.random.default_rng(4)
    gc.disable()
    try:
        for _ in range(30):
            var, sep, inputs, dom = random_bucket(rng, 50)
            got = sparse.eliminate_sparse(np, var, sep, inputs, dom, 50,
                                          streamer=Streamer(streaming.Pipeline(np, []), 700))
            owners = [weakref.ref(a.base if a.base is not None else a) for a in (got.keys, got.costs)]
            del got
            assert [o() for o in owners] == [None, None]
    finally:
        gc.enable()
