"""Page-locked host memory for asynchronous copies to and from the device: CuPy's pinned pool for
small arrays, registered page blocks, kept and reused, for large ones. NumPy arrays in plain memory
when CUDA is absent or refuses to pin.
"""
from __future__ import annotations

import collections
import ctypes
import math
import threading
import time
import weakref

import numpy as np

from gpusolve.host import available_memory, over_threads

PAGE = 1 << 12  # bytes of a host memory page, the unit of page-locking
POOLED_PINNED_MAX = 1 << 25  # smaller pinned arrays come from CuPy's pool, larger ones are registered pages
# Results a later step uploads again (sorted runs in the kept arenas, merged tables) are page-locked
# while they fit in this share of the host memory available, and free page blocks are kept up to it;
# past it results go through the staging buffers into plain memory.
PINNED_SHARE = 8
# cudaHostRegisterPortable | cudaHostRegisterMapped: page-locked for every CUDA context (a pooled block
# may serve an engine on another device), and kernels may read the pages in place
REGISTER_FLAGS = 1 | 2


def pinned_array(xp, shape, dtype) -> np.ndarray:
    """A numpy array in page-locked memory, for asynchronous copies with module `xp` (CuPy); plain
    memory on the CPU or where none can be had.

    Below POOLED_PINNED_MAX it comes from CuPy's pinned memory pool, which hands freed blocks out
    again: an engine per solve allocates its small staging buffers anew each time, and
    registering them cost a tiny instance's warm solve 0.35 ms of its 1.6 ms (cProfile, H100).
    Larger ones are blocks of whole pages of a plain allocation, faulted in by the copy threads,
    then registered with CUDA (cudaHostRegister): on the H100 host 0.04 s per GiB, where
    cudaHostAlloc takes 0.33 s, faulting and locking the pages on one core. When an array's last
    view goes its block returns to `_PAGES` for the next large array (a streamed step's merged
    table, the next step's), unregistered only past the pool's share of the host memory."""
    nbytes = math.prod(shape) * np.dtype(dtype).itemsize
    if xp is np or not nbytes:
        return np.empty(shape, dtype=dtype)
    if nbytes < POOLED_PINNED_MAX:
        try:  # what cupyx.empty_pinned does, without importing cupyx (it pulls in scipy, 0.3 s)
            return np.ndarray(shape, dtype=dtype, buffer=xp.cuda.alloc_pinned_memory(nbytes))
        except Exception:  # pinning refused (limits, container): copies just stop overlapping
            return np.empty(shape, dtype=dtype)
    block = _PAGES.take(xp.cuda.runtime, -(-nbytes // PAGE) * PAGE)
    if block is None:  # pinning refused (limits, container): copies just stop overlapping
        return np.empty(shape, dtype=dtype)
    lease = (ctypes.c_ubyte * nbytes).from_address(block.ctypes.data)  # the arrays' base: its end is seen
    lease.block = block
    weakref.finalize(lease, _PAGES.give, xp.cuda.runtime, block).atexit = False
    return np.ndarray(shape, dtype=dtype, buffer=lease)


class _PagePool:
    """Registered page blocks of large pinned arrays, kept when their arrays go and handed out
    again for a request of at least half their size: registering fresh pages and faulting them in
    cost 0.03 s per 540 MB merged table on the H100 host, and unregistering them about as much.
    Free blocks are unregistered, oldest first, past PINNED_SHARE of the available host memory."""

    def __init__(self):
        self.free: list[np.ndarray] = []  # oldest first
        self.returned: collections.deque = collections.deque()  # given back, not yet sorted in
        self.lock = threading.Lock()
        self.stats = {"reused": 0, "registered": 0, "registered_bytes": 0, "register_s": 0.0, "unregistered": 0}

    def take(self, runtime, size: int) -> np.ndarray | None:
        """A registered block of at least `size` bytes (a multiple of PAGE), or None if refused."""
        with self.lock:
            self._sort_in(runtime)
            fits = [i for i, b in enumerate(self.free) if size <= b.nbytes <= 2 * size]
            if fits:
                self.stats["reused"] += 1
                return self.free.pop(min(fits, key=lambda i: self.free[i].nbytes))
        t0 = time.perf_counter()
        raw = np.empty(size + PAGE, dtype=np.uint8)
        at = -raw.ctypes.data % PAGE
        block = raw[at:at + size]  # pages no other allocation shares: each is registered once
        over_threads(size // PAGE, lambda lo, hi: block[lo * PAGE:hi * PAGE].fill(0))
        try:
            runtime.hostRegister(block.ctypes.data, size, REGISTER_FLAGS)
        except Exception:
            return None
        self.stats["registered"] += 1
        self.stats["registered_bytes"] += size
        self.stats["register_s"] += time.perf_counter() - t0
        return block

    def give(self, runtime, block: np.ndarray) -> None:
        """A block whose arrays are gone (a finalizer: any thread, any moment, even inside take)."""
        self.returned.append(block)
        if self.lock.acquire(blocking=False):
            try:
                self._sort_in(runtime)
            finally:
                self.lock.release()

    def _sort_in(self, runtime) -> None:
        """Given-back blocks join the free ones, the oldest unregistered past the share (lock held)."""
        while self.returned:
            self.free.append(self.returned.popleft())
        cap = available_memory() // PINNED_SHARE
        while self.free and sum(b.nbytes for b in self.free) > cap:
            _unregister(runtime, self.free.pop(0).ctypes.data)
            self.stats["unregistered"] += 1


_PAGES = _PagePool()


def _unregister(runtime, address: int) -> None:
    try:
        runtime.hostUnregister(address)
    except Exception:  # the CUDA context is already gone
        pass
