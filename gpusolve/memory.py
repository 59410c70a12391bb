"""How much memory a run may use: available RAM, the default budget of reading, planning and solving."""
from __future__ import annotations

import os


def available_memory() -> int:
    """Memory available to a new allocation (psutil; without it, as on a bare GPU host, free pages)."""
    try:
        import psutil
    except ImportError:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    return int(psutil.virtual_memory().available)
