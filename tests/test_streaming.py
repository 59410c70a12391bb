"""The streaming pipeline and its users against the unstreamed computations, on NumPy and on the GPU.

With NumPy the pipeline runs synchronously, so the chunking, the order of
results, the range partition of the device merge and the dense and sparse
users are all checked on the CPU; the gpu-marked tests run the same on CuPy.
"""
import gc
import itertools
import math

import numpy as np
import pytest

from gpusolve.cuda import pinned
from gpusolve.engines import sparse, streaming
from gpusolve.engines.sparse_streamed import Streamer
from gpusolve.engines.dense import eliminate_dense
from gpusolve.limits import DEFAULT, Limits


def random_runs(rng, unique: bool):
    """Sorted runs of (keys, costs): keys shared across runs, repeated within a run unless `unique`,
    some runs empty."""
    runs = []
    for _ in range(int(rng.integers(1, 7))):
        n = int(rng.integers(0, 40))
        keys = rng.integers(0, int(rng.choice([3, 20, 1000])), size=n).astype(np.int64)
        keys = np.unique(keys) if unique else np.sort(keys)
        runs.append((keys, rng.integers(0, 50, size=keys.shape[0]).astype(np.int64)))
    return runs


def host_merge(runs, reduce: bool):
    """The merge the streamed steps did on the host: a stable sort of the concatenated runs, then
    the minimum cost of each key."""
    keys, costs = (np.concatenate([r[j] for r in runs]) for j in (0, 1))
    if reduce:
        return sparse.segment_min(np, keys, costs, runs=True)
    order = np.argsort(keys, kind="stable")
    return keys[order], costs[order]


def combine(xp, reduce: bool):
    """What a merge range does on the device: sort (stably) by key, or keep each key's minimum cost."""
    if reduce:
        return lambda k, c: sparse.segment_min(xp, k, c)

    def by_key(k, c):
        order = xp.argsort(k, kind="stable")
        return k[order], c[order]
    return by_key


def test_map_keeps_job_order_and_logs_every_chunk():
    log = []
    pipe = streaming.Pipeline(np, log)
    jobs = [(np.arange(i, i + 3), [np.full(i, i), np.arange(2)]) for i in range(5)]
    out = pipe.map(jobs, lambda i, a, b: (a * 2, b + i), "double")
    for i, (a, b) in enumerate(out):
        np.testing.assert_array_equal(a, 2 * np.arange(i, i + 3))
        np.testing.assert_array_equal(b, np.concatenate([np.full(i, i), np.arange(2)]) + i)
    (rec,) = log
    assert rec["what"] == "double" and rec["chunks"] == 5
    assert rec["h2d_bytes"] == sum(a.nbytes + sum(p.nbytes for p in b) for a, b in jobs)
    assert rec["d2h_bytes"] == sum(a.nbytes + b.nbytes for a, b in out)
    assert rec["bytes"] == rec["h2d_bytes"] + rec["d2h_bytes"] and rec["seconds"] >= 0
    assert {"copy_s", "work_s", "overlap_s", "span_s", "GB_per_s"} <= set(rec)


def test_counted_results_come_down_cut_back_to_back():
    """A work step returning Counted (its row count still on the device) has only its counted rows
    come down, once the count is known: `into` places them one job after another with no gap, in
    job order, and the log counts the bytes that moved."""
    log = []
    pipe = streaming.Pipeline(np, log)
    jobs = [(np.arange(6) + 10 * i,) for i in range(4)]
    arena = np.full(24, -1)
    into = streaming.side_by_side([arena])
    out = pipe.map(jobs, lambda i, a: streaming.Counted((a * 2,), np.array([i + 1])), "counted", None, into)
    at = 0
    for i, (a,) in enumerate(out):
        np.testing.assert_array_equal(a, 2 * (np.arange(i + 1) + 10 * i))
        assert np.shares_memory(a, arena[at:at + i + 1])
        at += i + 1
    assert into.filled == 10 and log[-1]["d2h_bytes"] == 10 * 8
    np.testing.assert_array_equal(arena[10:], -1)


@pytest.mark.parametrize("seed", range(40))
def test_brackets_hold_each_boundary_key(seed):
    """The key at global rank p (the p-th smallest of all runs) lies in its bracket, for repeated
    keys, empty and one-key runs and every rank."""
    rng = np.random.default_rng(seed)
    runs = [np.sort(rng.integers(0, int(rng.choice([2, 30, 10 ** 6])), int(rng.choice([0, 1, 7, 90]))))
            for _ in range(int(rng.integers(1, 9)))]
    every = np.sort(np.concatenate(runs))
    if not every.size:
        return
    targets = np.arange(every.size)
    lo, hi = streaming.brackets(runs, targets, every.size)
    assert np.all(lo <= every) and np.all(every <= hi)


@pytest.mark.parametrize("seed", range(60))
@pytest.mark.parametrize("split_equal", [True, False])
def test_range_cuts_partition_the_runs_in_order(seed, split_equal):
    rng = np.random.default_rng(seed)
    runs = [k for k, _ in random_runs(rng, unique=not split_equal)]
    rows = int(rng.integers(1, 12))
    cuts = streaming.range_cuts(runs, rows, split_equal)
    assert np.all(cuts[0] == 0) and np.array_equal(cuts[-1], [r.shape[0] for r in runs])
    assert np.all(np.diff(cuts, axis=0) >= 0)
    sizes = np.diff(cuts, axis=0).sum(axis=1)
    if split_equal:
        assert np.all(sizes[:-1] == rows) and (0 < sizes[-1] <= rows or sizes.sum() == 0)
    else:
        assert sizes.max() <= rows + len(runs) - 1
    last = -1
    for a, b in zip(cuts[:-1], cuts[1:]):
        keys = np.concatenate([r[i:j] for r, i, j in zip(runs, a, b)])
        if keys.size:
            assert keys.min() >= last  # ranges ordered
            last = keys.max()
            if not split_equal:  # a key never spans two ranges
                assert all(r[j] > keys.max() for r, j in zip(runs, b) if j < r.shape[0])


@pytest.mark.parametrize("seed", range(80))
def test_device_merge_equals_the_host_merge(seed):
    """Stable merge (equal keys in run order) and merge reducing equal keys to their minimum cost."""
    rng = np.random.default_rng(seed)
    log = []
    pipe = streaming.Pipeline(np, log)
    rows = int(rng.integers(1, 30))
    for reduce in (False, True):
        runs = random_runs(rng, unique=reduce)
        got = streaming.merge(pipe, runs, rows, combine(np, reduce), not reduce, "merge")
        for g, want in zip(got, host_merge(runs, reduce)):
            np.testing.assert_array_equal(g, want)
        live = [k for k, _ in runs if k.size]
        if len(live) > 1:  # merged on the "device", range by range
            assert log[-1]["ranges"] == log[-1]["chunks"] >= min(sum(k.size for k in live) // rows, 2)


def test_sort_by_code_equals_a_stable_host_sort():
    rng = np.random.default_rng(3)
    dims = (4, 3, 5, 2)
    for room in (1, 300, 1 << 20):
        log = []
        streamer = Streamer(streaming.Pipeline(np, log), room)
        keys = np.flatnonzero(rng.random(math.prod(dims)) < 0.6).astype(np.int64)
        t = sparse.SparseTable((0, 1, 2, 3), dims, keys, rng.integers(0, 9, size=keys.shape[0]))
        code, k, c = streamer.sort_by_code(t, (2, 0), None)
        want = t.code(np, (2, 0))
        order = np.argsort(want, kind="stable")
        for got, ref in zip((code, k, c), (want[order], t.keys[order], t.costs[order])):
            np.testing.assert_array_equal(got, ref)
        if room == 1:
            assert any(r["what"].startswith("merge") and r["chunks"] > 1 for r in log)


def random_dense_bucket(rng, integer):
    n = int(rng.integers(1, 6))
    dom = [int(rng.integers(1, 5)) for _ in range(n)]
    var = int(rng.integers(n))
    sep = tuple(int(u) for u in rng.permutation([u for u in range(n) if u != var]))
    inputs = []
    for _ in range(int(rng.integers(1, 5))):
        scope = tuple(int(u) for u in rng.permutation([var] + [u for u in sep if rng.random() < 0.6]))
        shape = [dom[u] for u in scope]
        table = rng.integers(0, 30, size=shape).astype(np.int64) if integer else rng.random(shape) * 3
        if table.ndim > 1 and rng.random() < 0.3:
            table = np.asfortranarray(table)
        inputs.append((table, scope))
    covered = {u for _, s in inputs for u in s}
    return var, tuple(u for u in sep if u in covered), inputs, dom


def stream_dense_bucket(xp, pipe, var, sep, inputs, dom, top, integer, op, room):
    plan = streaming.dense_chunks(sep, inputs, dom, room)
    dtype = np.int64 if integer else np.float64
    return plan, streaming.stream_dense(
        pipe, plan, inputs, dom, dtype,
        lambda chunk: eliminate_dense(xp, var, plan.free, chunk, dom, top, integer, None, op),
        "dense bucket")


@pytest.mark.parametrize("seed", range(80))
def test_streamed_dense_message_equals_eliminate_dense(seed):
    """Chunks over the leading separator variables, as many as their values, sized by `room`."""
    rng = np.random.default_rng(seed)
    integer = seed % 3 != 2
    op = ("min", "max", "lse")[seed % 3] if not integer else "min"
    var, sep, inputs, dom = random_dense_bucket(rng, integer)
    top = 40 if integer else np.inf
    room = int(rng.choice([1, 64, 256, 1 << 20]))
    log = []
    plan, got = stream_dense_bucket(np, streaming.Pipeline(np, log), var, sep, inputs, dom, top, integer, op, room)
    ref = eliminate_dense(np, var, sep, inputs, dom, top, integer, None, op)
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-12) if op == "lse" else np.testing.assert_array_equal(got, ref)
    (rec,) = log
    assert rec["chunks"] == math.prod(dom[u] for u in plan.fixed) and rec["rows_per_chunk"] == plan.rows
    assert plan.fixed + plan.free == sep
    if room >= 1 << 20:
        assert plan.fixed == ()


@pytest.mark.gpu
@pytest.mark.parametrize("seed", range(30))
def test_gpu_streamed_dense_message_equals_the_cpu(cupy, seed):
    """Host inputs uploaded in slices, device inputs sliced in place, messages into pinned memory."""
    rng = np.random.default_rng(500 + seed)
    integer = seed % 2 == 0
    var, sep, inputs, dom = random_dense_bucket(rng, integer)
    inputs = [(cupy.asarray(t) if i % 2 else t, s) for i, (t, s) in enumerate(inputs)]
    top = 40 if integer else np.inf
    pipe = streaming.Pipeline(cupy, [])
    plan, got = stream_dense_bucket(cupy, pipe, var, sep, inputs, dom, top, integer, "min", 64)
    host = [(cupy.asnumpy(t) if not isinstance(t, np.ndarray) else t, s) for t, s in inputs]
    want = eliminate_dense(np, var, sep, host, dom, top, integer)
    if integer:
        np.testing.assert_array_equal(got, want)
    else:  # the device may add a row's inputs in another order: equal to the last bits
        np.testing.assert_allclose(got, want, rtol=1e-12)
    assert pipe.is_pinned(got.reshape(-1)) or got.size == 0


@pytest.mark.gpu
@pytest.mark.parametrize("seed", range(30))
def test_gpu_merge_equals_the_host_merge(cupy, seed, monkeypatch):
    rng = np.random.default_rng(seed)
    pipe = streaming.Pipeline(cupy, [])
    pinned = pipe.pinned((5,), np.int64)  # a tracked pinned source goes without staging, however small
    pinned[:] = np.arange(5)
    staged = []
    monkeypatch.setattr(streaming, "_copy", lambda dest, src, limits, real=streaming._copy: (staged.append(src),
                                                                                          real(dest, src, limits)))
    out = pipe.map([(pinned, np.arange(3))], lambda i, a, b: (a + 1, b), "pinned")
    np.testing.assert_array_equal(out[0][0], np.arange(1, 6))
    assert [s.size for s in staged] == [3, 5, 3]  # the plain input up, both results down: not the pinned input
    monkeypatch.undo()
    for reduce in (False, True):
        runs = random_runs(rng, unique=reduce)
        rows = int(rng.integers(1, 30))
        pinned_runs = [tuple(pin(pipe, a) for a in r) for r in runs]  # uploaded piece by piece, no staging
        for given, streams in itertools.product((runs, pinned_runs), (1, 2)):
            got = streaming.merge(pipe, given, rows, combine(cupy, reduce), not reduce, "merge", None, streams)
            for g, want in zip(got, host_merge(runs, reduce)):
                assert isinstance(g, np.ndarray)
                np.testing.assert_array_equal(g, want)


@pytest.mark.gpu
@pytest.mark.parametrize("streams", [1, 2])
def test_gpu_map_lands_counted_results_in_job_order(cupy, streams):
    """Counted results come down once their count is read, a job behind the queue: back to back
    into the runs arenas (read in place), or through the staging buffers into fresh arrays."""
    rng = np.random.default_rng(streams)
    pipe = streaming.Pipeline(cupy, [])
    jobs = [(rng.integers(0, 100, int(rng.integers(0, 60))),) for _ in range(25)]

    def work(i, a):
        key = cupy.full(a.shape[0] + 3, 1 << 62, dtype=cupy.int64)  # rows past the count: never read
        key[:a.shape[0]] = cupy.sort(a) * 2
        return streaming.Counted((key, key + i), cupy.asarray([a.shape[0] // 2]))
    for arena in (True, False):
        into = pipe.arena_into(sum(a.shape[0] for a, in jobs), (np.int64, np.int64)) if arena else None
        got = pipe.map(jobs, work, "counted", None, into, streams)
        for i, ((a,), (key, shifted)) in enumerate(zip(jobs, got)):
            want = np.sort(a)[:a.shape[0] // 2] * 2
            np.testing.assert_array_equal(key, want)
            np.testing.assert_array_equal(shifted, want + i)
            assert pipe.in_arena(key) == (arena and key.size > 0)


def needs_reads_in_place(cupy, pipe):
    """Skips unless the device may read registered host memory at its host address (Hopper does;
    elsewhere merges upload through copies), asked of the device itself; the Pipeline must agree."""
    rt = cupy.cuda.runtime
    can = bool(rt.deviceGetAttribute(rt.cudaDevAttrCanUseHostPointerForRegisteredMem, cupy.cuda.Device().id))
    assert pipe.in_place == can
    if not can:
        pytest.skip("this device cannot read registered host memory at its host address")


@pytest.mark.gpu
def test_host_pieces_are_read_in_place_by_one_kernel(cupy):
    """HostPieces of page-locked arrays upload as their concatenation, for every item size, with
    empty pieces first, between and last; the log counts their bytes."""
    log = []
    pipe = streaming.Pipeline(cupy, log)
    needs_reads_in_place(cupy, pipe)
    rng = np.random.default_rng(3)
    for dtype in (np.int64, np.float64, np.int32, np.int16, np.bool_):
        for lengths in ([0, 5, 0, 1, 3000, 0], [7], [0, 0], [1] * 300):
            pieces = [pin(pipe, (rng.integers(-100, 100, n)).astype(dtype)) for n in lengths]
            sizes = np.array(lengths, dtype=np.int64)
            outs = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
            job = streaming.HostPieces(np.array([p.ctypes.data for p in pieces], dtype=np.int64), outs,
                                       int(sizes.sum()), np.dtype(dtype))
            (got,), = pipe.map([(job,)], lambda i, d: (d,), "pieces")
            np.testing.assert_array_equal(got, np.concatenate(pieces))
            assert got.dtype == dtype and log[-1]["h2d_bytes"] == job.nbytes


@pytest.mark.gpu
@pytest.mark.parametrize("n_runs", [1, 7, 300])
def test_device_bisect_equals_the_host_bisect(cupy, n_runs):
    """Pipeline.bisect (a block per target, runs read in place) gives the host's cut positions, with
    empty runs, keys repeated within and across runs, more runs than a block has threads, and keys
    up to 2^62; range_cuts built on it equal the host's."""
    pipe = streaming.Pipeline(cupy, [])
    needs_reads_in_place(cupy, pipe)
    rng = np.random.default_rng(n_runs)
    for high in (5, 1000, 2 ** 62):
        runs = [pin(pipe, np.sort(rng.integers(0, high, int(rng.choice([0, 1, 50, 400]))))) for _ in range(n_runs)]
        live = [r for r in runs if r.size]
        if not live:
            continue
        total = sum(r.size for r in runs)
        targets = np.sort(rng.integers(0, total, 40))
        wide = [np.full(40, f(int(r[i]) for r in live), dtype=np.int64) for f, i in ((min, 0), (max, -1))]
        for lo, hi in (streaming.brackets(runs, targets, total), wide):
            for got, want in zip(pipe.bisect(runs, targets, lo, hi), streaming.bisect(runs, targets, lo, hi)):
                np.testing.assert_array_equal(got, want)
        for split_equal in (True, False):
            rows = int(rng.integers(1, 60))
            np.testing.assert_array_equal(streaming.range_cuts(runs, rows, split_equal, pipe.bisect),
                                          streaming.range_cuts(runs, rows, split_equal))


@pytest.mark.gpu
def test_merge_reads_pinned_runs_in_place(cupy, monkeypatch):
    """Runs in the runs arena are merged through HostPieces; a single run in the arena comes back
    as a copy (the next request overwrites the arena), and a tracked array's range is forgotten
    when its registered pages go."""
    pipe = streaming.Pipeline(cupy, [], Limits(pooled_pinned_max=1 << 12))  # registered pages from 4 KiB on
    rng = np.random.default_rng(8)
    runs = [tuple(np.sort(a) if k == 0 else a for k, a in enumerate(r)) for r in random_runs(rng, unique=False)]
    runs += [(np.sort(rng.integers(0, 1000, 3000)), rng.integers(0, 50, 3000)) for _ in range(3)]
    into = pipe.arena_into(sum(r[0].shape[0] for r in runs), (np.int64, np.int64))
    landed = pipe.map(runs, lambda i, k, c: (k, c), "runs", None, into)
    assert all(pipe.in_arena(a) and pipe.is_pinned(a) for r in landed for a in r if a.size)
    put = []
    monkeypatch.setattr(pipe, "_put_pieces", lambda s, slot, k, p, real=pipe._put_pieces: put.append(p) or real(s, slot, k, p))
    searched = []
    monkeypatch.setattr(pipe, "bisect", lambda *args, real=pipe.bisect: searched.append(args) or real(*args))
    got = streaming.merge(pipe, landed, 500, combine(cupy, False), True, "merge")
    if pipe.in_place:
        assert put and all(isinstance(p, streaming.HostPieces) for p in put) and len(searched) == 1
    else:  # a device that cannot read host memory in place: the runs go up through copies
        assert not put and not searched
    for g, want in zip(got, host_merge(runs, False)):
        np.testing.assert_array_equal(g, want)
        assert pipe.is_pinned(g) and not pipe.in_arena(g)
    (one,) = [r for r in landed if r[0].size][-1:]
    alone = streaming.merge(pipe, [one], 500, combine(cupy, False), True, "merge")
    assert not np.shares_memory(alone[0], one[0]) and np.array_equal(alone[0], one[0])
    tracked = len(pipe._pinned_ranges)
    big = pipe.pinned((3, 1000), np.int64)
    view = big[1]
    assert pipe.is_pinned(view) and len(pipe._pinned_ranges) == tracked + 1
    flat = big.reshape(-1)
    assert pipe.is_pinned(flat[2999:]) and not pipe.is_pinned(np.empty(10)) and not pipe.is_pinned(big[:, :10])
    assert not pipe.is_pinned(np.lib.stride_tricks.as_strided(flat[2999:], shape=(2,)))  # runs past the end
    del flat
    del big
    gc.collect()
    assert len(pipe._pinned_ranges) == tracked + 1  # a view keeps the pages
    del view
    gc.collect()
    assert len(pipe._pinned_ranges) == tracked


def pin(pipe, a):
    p = pipe.pinned(a.shape, a.dtype)
    p[...] = a
    return p


def test_large_host_copies_split_over_threads_copy_everything():
    """Copies past copy_split_bytes go in slices on threads: every item lands, whatever the split."""
    limits = Limits(copy_split_bytes=64)
    rng = np.random.default_rng(0)
    for n in (1, 7, 8, 1000, 4099, 7007):
        src = rng.integers(-2**62, 2**62, size=n)
        dest = np.zeros(n, dtype=np.int64)
        streaming._copy(dest, src, limits)
        np.testing.assert_array_equal(dest, src)
        landed = streaming._land(None, src.reshape(1, n), limits)
        assert landed.shape == (1, n) and np.array_equal(landed[0], src) and not np.shares_memory(landed, src)
        cuts = np.sort(rng.integers(0, n + 1, size=int(rng.integers(0, 6))))
        pieces = np.split(src, cuts)  # empty pieces too; a thread's slice may start or end inside a piece
        dest = np.zeros(n, dtype=np.int64)
        streaming._copy(dest, pieces, limits)
        np.testing.assert_array_equal(dest, src)
        if n % 7 == 0:  # one array of another shape into a flat buffer (a staged upload of a 2-d slice)
            dest = np.zeros(n, dtype=np.int64)
            streaming._copy(dest, src.reshape(7, n // 7), limits)
            np.testing.assert_array_equal(dest, src)


@pytest.mark.gpu
def test_pinned_arrays_are_page_locked_and_large_blocks_reused_after_their_last_view(cupy, monkeypatch):
    """Small arrays (CuPy's pinned pool) and large ones (registered page blocks, side by side: no
    page is registered twice) are page-locked; a large one's block returns to the pool when its
    last view goes, serves the next request of at least half its size, and is unregistered once
    the free blocks pass the pool's share of the host memory."""
    rt = cupy.cuda.runtime
    large = DEFAULT.pooled_pinned_max // 8 + 1
    arrays = [pinned.pinned_array(cupy, (n,), np.int64) for n in (1, 3, 511, 512, 513, 5)]
    arrays += [pinned.pinned_array(cupy, (n,), np.int64) for n in (large, large + 511, large)]
    for a in arrays:
        assert a.base is not None and rt.pointerGetAttributes(a.ctypes.data).type == rt.memoryTypeHost
        a[...] = 7
        assert np.all(a == 7)
    pool = pinned._PagePool()
    monkeypatch.setattr(pinned, "_PAGES", pool)
    big = pinned.pinned_array(cupy, (3, large), np.int64)
    view = big[1, 10:20]
    address = big.ctypes.data
    del big
    gc.collect()
    assert not pool.free and not pool.returned and rt.pointerGetAttributes(view.ctypes.data).type == rt.memoryTypeHost
    del view
    gc.collect()
    assert [b.ctypes.data for b in pool.free] == [address]
    small = pinned.pinned_array(cupy, (large,), np.int64)  # under half the block: a new one
    again = pinned.pinned_array(cupy, (2, large), np.int64)
    assert again.ctypes.data == address and small.ctypes.data != address and not pool.free
    ended = []
    monkeypatch.setattr(pinned, "_unregister", lambda runtime, address: (ended.append(address),
                                                                              runtime.hostUnregister(address)))
    pool.limits = Limits(pinned_share=10 ** 18)  # no room: free blocks are unregistered
    del again
    gc.collect()
    assert ended == [address] and not pool.free
