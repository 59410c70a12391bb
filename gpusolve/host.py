"""The host machine: the memory a run may use, the cores it may use, and sizes in words."""
from __future__ import annotations

import functools
import os
from typing import Callable


class BudgetError(RuntimeError):
    """Work that does not fit the memory budget (exit code 3); the message says what would."""


def available_memory() -> int:
    """Memory available to a new allocation: the kernel's MemAvailable on Linux (what psutil reads
    there, without its 30-40 ms import in a 0.3 s start-up), psutil elsewhere, else free pages."""
    try:
        with open("/proc/meminfo") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError, IndexError):
        pass
    try:
        import psutil
    except ImportError:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    return int(psutil.virtual_memory().available)


def cores() -> int:
    """The CPU cores this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def host_threads(threads: int | None = None) -> int:
    """The CPU engine's threads: `threads`, else one per core this process may use."""
    return threads or cores()


def over_threads(n: int, part: Callable[[int, int], None]) -> None:
    """part(lo, hi) over equal slices of range(n), one per copy thread: one core fills fresh memory
    at a few GB/s, and NumPy's copies release the GIL."""
    pool, threads = _copy_pool()
    list(pool.map(lambda i: part(i * n // threads, (i + 1) * n // threads), range(threads)))


@functools.lru_cache(maxsize=1)
def _copy_pool():
    from concurrent.futures import ThreadPoolExecutor
    threads = max(1, min(host_threads(), 16))
    return ThreadPoolExecutor(threads, thread_name_prefix="gpusolve-copy"), threads


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
