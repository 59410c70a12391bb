"""How much memory a run may use: available RAM, the default budget of reading, planning and solving."""
from __future__ import annotations

import os


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
