"""Streaming through host memory: one pipeline for every step that does not fit the device.

A `Pipeline` runs device work on chunks of host arrays (Cuda-BE section V-B):
chunk i+1 is uploaded on one CUDA stream while chunk i works on the other,
and a chunk's results are read back only when its stream is reused, so copies
overlap work. Host arrays pass through pinned staging buffers that are kept
and reused (page-locking fresh memory costs 0.04 s per GiB at best, see
`gpusolve.cuda.pinned`); arrays already in a pinned buffer of the pipeline go straight, and
many small pieces of them are read in place by one kernel (`HostPieces`). Every
map adds one record to the engine's `stream_log`.

Its users: `stream_dense`, a dense message computed in chunks of output rows
into pinned host memory (the GPU engine's buckets beyond its budget), and the
sparse `Streamer` (sparse.py), whose sorted runs are merged here by `merge`:
range-partitioned on the device, never on the host.

Written against an array module: with NumPy the same code runs synchronously
(streams, events and staging become no-ops), which is how it is tested.
"""
from __future__ import annotations

import bisect as bisect_module
import contextlib
import itertools
import math
import time
import weakref
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from gpusolve.cuda import pinned
from gpusolve.host import available_memory, over_threads
from gpusolve.limits import DEFAULT, Limits
from gpusolve.plan.buckets import CHUNKS_IN_FLIGHT, streamed_lead
from . import kernels, row_kernels

N_STREAMS = CHUNKS_IN_FLIGHT
SLOTS = 2  # jobs in flight on the host side: staging buffers are per slot (job parity)
DIRECT_PIECE_BYTES = 1 << 16  # several pinned pieces this large on average go up a copy call each (one always does)
SAMPLE_KEYS = 19  # Pipeline.bisect samples about 2^19 keys of the runs (4 MiB) onto the device


def _union(intervals) -> float:
    """Total length covered by (start, end) intervals: time some stream spent in that activity."""
    total, reach = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b > reach:
            total += b - max(a, reach)
            reach = b
    return total


def _land(dest, buf, limits: Limits = DEFAULT):
    """A downloaded result on the host: in `dest`, or a copy of the staging buffer that received it."""
    if buf is None:
        return dest
    if dest is None:
        dest = np.empty_like(buf)
    _copy(dest, buf, limits)
    return dest


def _copy(dest: np.ndarray, src, limits: Limits = DEFAULT) -> None:
    """dest[...] = src, or the concatenation of a list of 1-d pieces into contiguous dest; a copy
    of limits.copy_split_bytes or more is split over the host's cores: one core fills fresh memory
    at a few GB/s, which made these copies most of a streamed sparse step (NumPy releases the GIL).
    A small one is one call: a range of a merge gathers a piece of every run, hundreds of them."""
    if not isinstance(src, list):
        if src.nbytes < limits.copy_split_bytes or not (dest.flags.c_contiguous and src.flags.c_contiguous):
            np.copyto(dest, src.reshape(dest.shape))
            return
        src = [src.reshape(-1)]
    elif dest.nbytes < limits.copy_split_bytes:
        np.concatenate(src, out=dest.reshape(-1))
        return
    d, pieces = dest.reshape(-1), src
    ends = np.cumsum([p.size for p in pieces])

    def part(lo, hi):  # the pieces' items that land in d[lo:hi]
        j = int(np.searchsorted(ends, lo, side="right"))
        while j < len(pieces) and lo < hi:
            start = int(ends[j]) - pieces[j].size
            end = min(hi, int(ends[j]))
            np.copyto(d[lo:end], pieces[j][lo - start:end - start])
            lo, j = end, j + 1
    over_threads(d.size, part)


@dataclass(frozen=True)
class HostPieces:
    """Pieces of page-locked host arrays to upload as one array, given by address: what a range of
    a merge uploads (a piece of every run), read in place by one kernel (row_kernels.pieces_gather_source)."""

    addresses: np.ndarray  # int64 address of each piece's first item
    outs: np.ndarray  # int64 exclusive prefix sums of the pieces' sizes: where each lands
    size: int  # items in all
    dtype: np.dtype

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize


@dataclass(frozen=True)
class Counted:
    """Device results of which only the first `count` rows are valid, count being a device scalar
    (int64, shape (1,)) not yet read: a work step returns them so that the host does not wait for
    the device; map downloads them whole and cuts them when they land."""

    arrays: tuple
    count: object


def _reads_host_in_place(xp) -> bool:
    """Whether kernels may read page-locked host memory at its host address (unified addressing)."""
    rt = xp.cuda.runtime
    try:
        return bool(rt.deviceGetAttribute(rt.cudaDevAttrCanUseHostPointerForRegisteredMem, xp.cuda.Device().id))
    except Exception:  # an older runtime: uploads go through copies
        return False


def _root(a):
    """The object an array's memory lives for (the last ndarray base, or a non-array buffer)."""
    while isinstance(a, np.ndarray) and a.base is not None:
        a = a.base
    return a


class Pipeline:
    """Two streams, kept pinned staging buffers, one log; one per engine (module `xp`). `limits`: the
    pinned memory's (pooled_pinned_max, pinned_share) and the host copies' (copy_split_bytes)."""

    def __init__(self, xp, log: list, limits: Limits = DEFAULT):
        self.xp, self.log, self.limits = xp, log, limits
        self.gpu = xp is not np
        self.streams = [xp.cuda.Stream(non_blocking=True) for _ in range(N_STREAMS)] if self.gpu else None
        self.in_place = self.gpu and _reads_host_in_place(xp)
        self._staging: dict = {}
        # tracked pinned arrays, while their memory lives: start -> end, and the starts in order (no
        # two live ones overlap, so the last start at or before an address is the only candidate)
        self._pinned_ranges: dict[int, int] = {}
        self._pinned_starts: list[int] = []

    # -- host memory ------------------------------------------------------
    def pinned(self, shape, dtype, track: bool = True):
        """A numpy array in page-locked memory (async copies), plain memory on the CPU or if none can
        be had. `track`: remember it, so that copies from or into it skip the staging buffers, until
        its last view goes."""
        a = pinned.pinned_array(self.xp, shape, dtype, self.limits)
        if track and a.base is not None:  # page-locked (a plain fallback owns its memory)
            start = a.ctypes.data
            if start not in self._pinned_ranges:
                bisect_module.insort(self._pinned_starts, start)
            self._pinned_ranges[start] = max(self._pinned_ranges.get(start, 0), start + a.nbytes)
            with contextlib.suppress(TypeError):  # CuPy's pool blocks stay page-locked (no weak reference)
                weakref.finalize(_root(a), self._untrack, start).atexit = False
        return a

    def _untrack(self, start: int) -> None:
        if self._pinned_ranges.pop(start, None) is not None:
            self._pinned_starts.pop(bisect_module.bisect_left(self._pinned_starts, start))

    def is_pinned(self, a) -> bool:
        """Whether `a` is contiguous in a tracked pinned buffer, so the device copies it directly."""
        p = a.ctypes.data
        i = bisect_module.bisect_right(self._pinned_starts, p) - 1
        return a.flags.c_contiguous and i >= 0 and p + a.nbytes <= self._pinned_ranges[self._pinned_starts[i]]

    def in_arena(self, a) -> bool:
        """Whether `a` lies in a runs arena, which the next request of it overwrites."""
        p = a.ctypes.data
        return any(k[0] == "runs" and b.ctypes.data <= p < b.ctypes.data + b.nbytes for k, b in self._staging.items())

    def kept(self, n: int, dtype):
        """Room for n items of a result that a later step uploads again (a merged or sorted table):
        page-locked and tracked while it fits in limits.pinned_share of the available host memory, so it
        comes down and goes back up without staging; else plain memory."""
        return self.pinned((n,), dtype) if self._may_pin(n * np.dtype(dtype).itemsize) else np.empty(n, dtype=dtype)

    def _may_pin(self, nbytes: int) -> bool:
        return self.gpu and nbytes <= available_memory() // self.limits.pinned_share

    def arena_into(self, total: int, dtypes) -> Callable | None:
        """An `into` for map that lays result k of every job side by side in runs arena k (jobs'
        results of `total` items at most), so that their merge reads them in place: None on the
        CPU or past limits.pinned_share of the available host memory (then they go through staging)."""
        if not self._may_pin(total * sum(np.dtype(d).itemsize for d in dtypes)):
            return None
        return side_by_side([self.runs_arena(k, total, d) for k, d in enumerate(dtypes)])

    def runs_arena(self, k: int, n: int, dtype) -> np.ndarray:
        """Kept pinned room for n items: results that the next step reads back (sorted runs before
        their merge) land there straight from the device and go back up from there, with no host
        copy either way. A caller holds one arena's contents only until its next request. Grown to
        what is asked, no more: the caller bounds that (`arena_into`: limits.pinned_share), and so the pinned
        memory kept."""
        return self._buffer(("runs", k), n, dtype, arena=True)

    def _buffer(self, key, n: int, dtype, arena: bool = False):
        """The kept buffer `key` as n items of dtype, never shrunk: a staging buffer grows by
        doubling; an arena grows to what is asked and is tracked (copies use it directly)."""
        nbytes = n * np.dtype(dtype).itemsize
        buf = self._staging.get(key)
        if buf is None or buf.size < nbytes:
            size = nbytes if arena else max(nbytes, 2 * (0 if buf is None else buf.size))
            buf = self.pinned((max(size, 1 << 12),), np.uint8, track=arena)
            self._staging[key] = buf
        return buf[:nbytes].view(dtype)

    # -- one chunk's copies -------------------------------------------------
    def _put(self, s: int, slot: int, k: int, a):
        """Host array, list of pieces to concatenate, or HostPieces -> device array on stream s
        (through staging buffers of `slot`: the host's buffers for the jobs of one parity)."""
        if isinstance(a, HostPieces):
            return self._put_pieces(s, slot, k, a)
        pieces = a if isinstance(a, list) else [a]
        if not self.gpu:
            return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
        shape = pieces[0].shape if len(pieces) == 1 else (sum(p.size for p in pieces),)
        with self.streams[s]:  # allocated on stream s: the pool reuses it only after s's work
            d = self.xp.empty(shape, dtype=pieces[0].dtype)
        if not d.nbytes:
            return d
        rt = self.xp.cuda.runtime
        few = len(pieces) == 1 or d.nbytes >= DIRECT_PIECE_BYTES * len(pieces)
        if few and all(self.is_pinned(p) for p in pieces):
            # straight from pinned memory, a copy call per piece (many tiny ones: HostPieces, or one host copy)
            at = 0
            for p in pieces:
                rt.memcpyAsync(d.data.ptr + at, p.ctypes.data, p.nbytes, rt.memcpyHostToDevice, self.streams[s].ptr)
                at += p.nbytes
            return d
        src = self._buffer(("up", slot, k), d.size, d.dtype)
        _copy(src, pieces if len(pieces) > 1 else pieces[0], self.limits)
        rt.memcpyAsync(d.data.ptr, src.ctypes.data, d.nbytes, rt.memcpyHostToDevice, self.streams[s].ptr)
        return d

    def _put_pieces(self, s: int, slot: int, k: int, pieces: HostPieces):
        """HostPieces -> device array on stream s: their address table goes up through staging,
        then one kernel reads the pieces in place."""
        xp, rt, n = self.xp, self.xp.cuda.runtime, len(pieces.addresses)
        with self.streams[s]:
            d = xp.empty(pieces.size, dtype=pieces.dtype)
            table = xp.empty(2 * n, dtype=xp.int64)
        if not pieces.size:
            return d
        staged = self._buffer(("pieces", slot, k), 2 * n, np.int64)
        staged[:n], staged[n:] = pieces.addresses, pieces.outs
        rt.memcpyAsync(table.data.ptr, staged.ctypes.data, staged.nbytes, rt.memcpyHostToDevice, self.streams[s].ptr)
        kernel = kernels.load(row_kernels.pieces_gather_source(d.dtype.itemsize))
        with self.streams[s]:
            kernel(row_kernels.grid(pieces.size), (256,), (table, table[n:], np.int32(n),
                                                                        np.int64(pieces.size), d))
        return d

    def bisect(self, runs: Sequence[np.ndarray], targets: np.ndarray, lo: np.ndarray, hi: np.ndarray):
        """streaming.bisect on the device, reading the page-locked runs (int64 keys) in place: a
        block per target, its threads counting in their runs (row_kernels.bisect_source), each search
        narrowed first in a sample of every `stride`-th key copied to the device
        (row_kernels.sample_source), so that it reads a few keys over the bus, not a whole path. On
        the host it costs a search call per run and step: 0.1 s for a merge of 268 runs in 153 ranges."""
        xp, n = self.xp, np.array([r.shape[0] for r in runs], dtype=np.int64)
        stride = max(64, 1 << int(n.sum() >> SAMPLE_KEYS).bit_length())  # at most ~2 * 2^SAMPLE_KEYS keys sampled
        offsets = np.concatenate([[0], np.cumsum(-(-n // stride))])
        table = xp.asarray(np.concatenate([[r.ctypes.data for r in runs], n, offsets]).astype(np.int64))
        addresses, sizes, starts = table[:len(runs)], table[len(runs):2 * len(runs)], table[2 * len(runs):]
        sample = xp.empty(int(offsets[-1]), dtype=xp.int64)
        kernels.load(row_kernels.sample_source())(row_kernels.grid(sample.size), (256,), (
            addresses, sizes, starts, np.int32(len(runs)), np.int64(stride), np.int64(sample.size), sample))
        left, right = xp.empty((2, targets.shape[0], len(runs)), dtype=xp.int64)
        kernels.load(row_kernels.bisect_source())((targets.shape[0],), (row_kernels.BISECT_BLOCK,), (
            addresses, sizes, sample, starts, np.int64(stride), np.int32(len(runs)), xp.asarray(targets),
            xp.asarray(lo), xp.asarray(hi), left, right))
        return left.get(), right.get()

    def _get(self, s: int, slot: int, k: int, r, dest):
        """Start copying device result r to the host on stream s: (destination, staging buffer of
        `slot` or None)."""
        if not self.gpu:
            if dest is not None:
                dest[...] = r.reshape(dest.shape)
                return dest, None
            return r, None
        if not r.size:
            return (np.empty(r.shape, dtype=r.dtype) if dest is None else dest), None
        r = self.xp.ascontiguousarray(r)
        direct = dest is not None and self.is_pinned(dest)
        buf = dest if direct else self._buffer(("down", slot, k), r.size, r.dtype).reshape(r.shape)
        rt = self.xp.cuda.runtime
        rt.memcpyAsync(buf.ctypes.data, r.data.ptr, r.nbytes, rt.memcpyDeviceToHost, self.streams[s].ptr)
        return (dest, None) if direct else (dest, buf)

    def _mark(self, s: int):
        return self.streams[s].record() if self.gpu else time.perf_counter()

    def _seconds(self, a, b) -> float:
        return self.xp.cuda.get_elapsed_time(a, b) / 1e3 if self.gpu else b - a

    # -- the pipeline -----------------------------------------------------
    def map(self, jobs: Sequence[tuple], work: Callable, what: str, check: Callable[[], None] | None = None,
            into: Callable | None = None, streams: int = N_STREAMS, **fields) -> list[tuple]:
        """work(i, *device arrays) for job i's host arrays (or lists of pieces, concatenated), on
        stream i % `streams`; it returns device arrays, or Counted. The results of every job as host
        arrays, in job order: result k of job i goes to `into(i, k, result)` when that gives a host
        array (called in job order, so offsets may depend on earlier sizes), else to a fresh array.
        Counted results come down once their count is known, cut to it (`into` sees the cut rows).

        The host queues job i before it waits for job i - 1, so the device always has a job. Two
        streams overlap one job's copies with the other's work, each job holding its own device
        memory; on one stream the jobs run in turn, a job reusing the memory the previous one
        freed (CuPy's pool reuses a stream's memory in stream order), so a job may take twice the
        room: for small jobs, where the host's time per job exceeds the copies' time, fewer jobs."""
        n = len(jobs)
        t0 = time.perf_counter()
        if self.gpu:  # device inputs may still be written on the caller's stream: the streams wait for it
            ready = self.xp.cuda.get_current_stream().record()
            for stream in self.streams[:streams]:
                stream.wait_event(ready)
        dev, out, marks = [None] * n, [None] * n, [None] * n
        pending: list = [None] * SLOTS  # per staging slot (job parity): a job whose results have not landed
        moved = [0, 0]

        def on(i):
            return self.streams[i % streams] if self.gpu else contextlib.nullcontext()

        def download(i, arrays):
            copies = [self._get(i % streams, i % SLOTS, k, r, into(i, k, r) if into else None) for k, r in enumerate(arrays)]
            moved[1] += sum(r.nbytes for r in arrays)
            return copies

        def drain(slot):
            """Wait for the job of `slot` (the event after its last copy), then land its results. A
            Counted's rows start down only now, and into page-locked destinations land without a
            wait here (map waits for its streams at the end)."""
            if pending[slot] is None:
                return
            i, copies, counted = pending[slot]
            pending[slot] = None
            if self.gpu:
                marks[i][-1].synchronize()
            if counted is not None:  # the count is read where it landed, then the rows come down
                dest, buf = copies[0]
                rows = int((dest if buf is None else buf)[0])
                with on(i):
                    start = self._mark(i % streams)
                    copies = download(i, [r[:rows] for r in counted.arrays])
                    marks[i][3:] = [start, self._mark(i % streams)]
                if self.gpu and any(buf is not None for _, buf in copies):
                    marks[i][-1].synchronize()  # staged: landed before the staging buffers serve again
            out[i] = tuple(_land(dest, buf, self.limits) for dest, buf in copies)

        def upload(i):
            drain(i % SLOTS)  # job i - 2 has landed: the slot's staging buffers are free
            m = self._mark(i % streams)
            dev[i] = [self._put(i % streams, i % SLOTS, k, a) for k, a in enumerate(jobs[i])]
            moved[0] += sum(sum(p.nbytes for p in a) if isinstance(a, list) else a.nbytes for a in jobs[i])
            marks[i] = [m, self._mark(i % streams)]

        if n:
            upload(0)
        for i in range(n):  # work i is queued before the host waits for job i - 1 (in upload(i + 1))
            if check is not None:
                check()
            with on(i):
                res = work(i, *dev[i])
                dev[i] = None
                marks[i] += [self._mark(i % streams)] * 2  # work done, downloads start
                if isinstance(res, Counted):
                    pending[i % SLOTS] = (i, [self._get(i % streams, i % SLOTS, 0, res.count, None)], res)
                else:
                    pending[i % SLOTS] = (i, download(i, res), None)
                marks[i].append(self._mark(i % streams))
            if i + 1 < n:
                upload(i + 1)
        for i in range(max(n - SLOTS, 0), n):  # in job order: `into` is called in it
            drain(i % SLOTS)
        if self.gpu:
            for stream in self.streams[:streams]:
                stream.synchronize()
        wall = time.perf_counter() - t0
        at = [[self._seconds(marks[0][0], e) for e in m] for m in marks]
        copies = [(a, b) for a, b, _, _, _ in at] + [(d, e) for _, _, _, d, e in at]
        works = [(b, c) for _, b, c, _, _ in at]
        copy_s, work_s = _union(copies), _union(works)
        self.log.append({
            "what": what, "chunks": n, "h2d_bytes": moved[0], "d2h_bytes": moved[1], "bytes": sum(moved),
            "seconds": wall, "GB_per_s": sum(moved) / wall / 1e9 if wall else 0.0,
            "copy_s": copy_s, "work_s": work_s, "overlap_s": copy_s + work_s - _union(copies + works),
            "span_s": max((m[-1] for m in at), default=0.0), **fields})
        return out


# -- dense messages in chunks of output rows ------------------------------------

@dataclass(frozen=True)
class DenseChunks:
    """How a dense message is streamed: the leading `fixed` separator variables take every value in
    turn; a chunk is the `rows` message entries over `free`, each input sliced to `scopes[i]`."""

    fixed: tuple[int, ...]
    free: tuple[int, ...]
    rows: int
    scopes: tuple[tuple[int, ...], ...]


def dense_chunks(sep: Sequence[int], inputs: Sequence[tuple[object, tuple[int, ...]]],
                 domains: Sequence[int], room: int, itemsize: int = 8) -> DenseChunks:
    """The chunks of a streamed dense message: its leading separator variables fixed as
    plan.streamed_lead says (the plan's placement predicts the same), each input's scope in a chunk."""
    host = [s for a, s in inputs if isinstance(a, np.ndarray)]
    dims = [domains[u] for u in sep]
    lead = streamed_lead(sep, host, domains, room, itemsize)
    fixed = tuple(sep[:lead])
    return DenseChunks(fixed, tuple(sep[lead:]), math.prod(dims[lead:]),
                       tuple(tuple(u for u in s if u not in fixed) for _, s in inputs))


def stream_dense(pipe: Pipeline, plan: DenseChunks, inputs: Sequence[tuple[object, tuple[int, ...]]],
                 domains: Sequence[int], dtype, compute: Callable, what: str, check=None, **fields):
    """The message over plan.fixed + plan.free in pinned host memory, one chunk per value of the
    fixed variables. Host (numpy) inputs upload only the slice a chunk selects, device inputs are
    sliced in place; compute(chunk inputs [(array, scope)], in input order) returns the chunk's
    `rows` entries on the device."""
    t0 = time.perf_counter()
    out = pipe.pinned((math.prod(domains[u] for u in plan.fixed) * plan.rows,), dtype)
    fields["pinned_alloc_s"] = time.perf_counter() - t0
    host = [i for i, (a, _) in enumerate(inputs) if isinstance(a, np.ndarray)]
    values = list(itertools.product(*(range(domains[u]) for u in plan.fixed)))

    def index(i, c):
        fixed = dict(zip(plan.fixed, values[c]))
        return tuple(fixed[u] if u in fixed else slice(None) for u in inputs[i][1])
    jobs = [tuple(inputs[i][0][index(i, c)] for i in host) for c in range(len(values))]

    def work(c, *uploaded):
        sent = dict(zip(host, uploaded))
        chunk = [(sent[i] if i in sent else a[index(i, c)], s) for i, ((a, _), s) in enumerate(zip(inputs, plan.scopes))]
        return (compute(chunk).reshape(-1),)
    pipe.map(jobs, work, what, check, lambda c, k, r: out[c * plan.rows:(c + 1) * plan.rows],
             rows_per_chunk=plan.rows, **fields)
    return out.reshape(tuple(domains[u] for u in plan.fixed + plan.free))


# -- sorted runs merged on the device ----------------------------------------------

def range_cuts(runs: Sequence[np.ndarray], rows: int, split_equal: bool, search: Callable | None = None) -> np.ndarray:
    """Cut positions (ranges + 1, runs) that split sorted host runs into ranges of about `rows` rows:
    every range can be sorted alone, and the ranges in order are the stable merge of the runs.

    The boundary at global rank p is the p-th smallest key k, found by bisecting key values
    (`bisect`, or `search` with its arguments: Pipeline.bisect on the device) between the least
    and the greatest of the runs' keys at the same fraction of their length (`brackets`). With `split_equal`,
    rows equal to k are split in (run, position) order so every range holds exactly `rows` rows;
    else they all start the next range (a reduction over equal keys sees them together), and a
    range holds at most `rows` - 1 rows more than those equal to its first key.
    """
    rows = max(rows, 1)
    sizes = np.array([r.shape[0] for r in runs], dtype=np.int64)
    total = int(sizes.sum())
    targets = np.arange(rows, total, rows, dtype=np.int64)
    cuts = [np.zeros(len(runs), dtype=np.int64)]
    if targets.size:
        left, right = (search or bisect)(runs, targets, *brackets(runs, targets, total))
        if split_equal:
            equal = right - left
            before = np.cumsum(equal, axis=1) - equal  # equal rows in earlier runs
            take = targets - left.sum(axis=1)  # equal rows that belong before the boundary
            left = left + np.clip(take[:, None] - before, 0, equal)
        cuts += list(left)
    cuts.append(sizes)
    return np.stack(cuts)


def brackets(runs: Sequence[np.ndarray], targets: np.ndarray, total: int) -> tuple[np.ndarray, np.ndarray]:
    """Per target rank p, keys lo <= k <= hi around the smallest key k with more than p keys <= k
    over the sorted runs (`total` keys): the least and the greatest of the runs' keys at positions
    j_r = floor(p n_r / total). Below the least, run r has at most j_r keys and sum(j_r) <= p; at the
    greatest, each has at least j_r + 1 and sum(j_r + 1) > p. Runs alike make the bracket narrow
    (a merge's runs are chunks of one join), sparing most of the bisection's steps."""
    live = [r for r in runs if r.shape[0]]
    if total * max(r.shape[0] for r in live) >= 1 << 63:  # the positions' products would overflow
        return (np.full(targets.shape, f(int(r[i]) for r in live), dtype=np.int64) for f, i in ((min, 0), (max, -1)))
    at = [r[targets * r.shape[0] // total] for r in live]
    return np.min(at, axis=0), np.max(at, axis=0)


def bisect(runs: Sequence[np.ndarray], targets: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each target rank p, the smallest key k in [lo, hi] (per target) with more than p keys
    <= k over the sorted runs, by bisecting key values (each step counts keys <= mid in every run,
    all targets at once); returned as each run's first position with key >= k and with key > k,
    (targets, runs)."""
    live = [r for r in runs if r.shape[0]]
    while np.any(lo < hi):
        mid = lo + (hi - lo) // 2
        le = sum(np.searchsorted(r, mid, side="right") for r in live)
        big = le > targets
        hi, lo = np.where(big, mid, hi), np.where(big, lo, mid + 1)
    return (np.stack([np.searchsorted(r, lo, side=side) for r in runs], axis=1) for side in ("left", "right"))


class side_by_side:
    """An `into` for Pipeline.map: result k of each job lands in out[k] after those of earlier jobs
    (`filled` counts the items landed). A class, not a closure that reads its own attribute: that
    would be a reference cycle, and the arrays it holds (page blocks) would wait for the collector."""

    def __init__(self, out: Sequence[np.ndarray]):
        self.out, self.filled = out, 0

    def __call__(self, i, k, r):
        lo = self.filled
        if k == len(self.out) - 1:
            self.filled += r.shape[0]
        return self.out[k][lo:lo + r.shape[0]]


def merge(pipe: Pipeline, runs: Sequence[tuple], rows: int, combine: Callable, split_equal: bool,
          what: str, check=None, streams: int = N_STREAMS) -> tuple:
    """Sorted host runs (tuples of arrays, sorted by the first) -> one tuple of host arrays.

    Range-partitioned (range_cuts): each range's pieces of every run are uploaded as one array
    each (read in place when the runs are page-locked: HostPieces), combine(*device arrays) sorts
    them (split_equal) or sorts and reduces equal keys, and the ranges come back in order into the
    output, page-locked where it fits (`Pipeline.kept`). One run (or none but empty ones) is
    already merged when nothing is reduced (`split_equal`); a copy of it is returned when it lies
    in a runs arena.
    """
    live = [r for r in runs if r[0].shape[0]] or [runs[0]]
    if len(live) == 1 and (split_equal or not live[0][0].shape[0]):
        return tuple(a.copy() for a in live[0]) if pipe.in_arena(live[0][0]) else live[0]
    in_place = pipe.in_place and all(pipe.is_pinned(a) for r in live for a in r)
    cuts = range_cuts([r[0] for r in live], rows, split_equal, pipe.bisect if in_place else None)
    spans = [j for j in range(len(cuts) - 1) if (cuts[j + 1] - cuts[j]).sum()]
    if in_place:
        sizes = np.diff(cuts, axis=0)
        outs = np.zeros_like(sizes)
        np.cumsum(sizes[:, :-1], axis=1, out=outs[:, 1:])
        bases = [np.array([a.ctypes.data for a in arrays], dtype=np.int64) for arrays in zip(*live)]
        jobs = [tuple(HostPieces(base + cuts[j] * a.itemsize, outs[j], int(sizes[j].sum()), a.dtype)
                      for base, a in zip(bases, live[0])) for j in spans]
    else:
        jobs = [tuple([r[k][cuts[j][i]:cuts[j + 1][i]] for i, r in enumerate(live) if cuts[j + 1][i] > cuts[j][i]]
                      for k in range(len(live[0]))) for j in spans]
    total = int(cuts[-1].sum())
    out = [pipe.kept(total, a.dtype) for a in live[0]]
    into = side_by_side(out)
    pipe.map(jobs, lambda i, *arrays: combine(*arrays), what, check, into, streams, runs=len(live), ranges=len(jobs))
    n = into.filled
    # a small result frees the rest
    return tuple(a[:n] if 2 * n > total else _land(None, a[:n], pipe.limits) for a in out)
