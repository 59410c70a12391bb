"""The compiled core's sources and their digest, which names the module built ahead of time (dfbb_build)
and guards numba's on-disk cache of the kernels (dfbb_kernels)."""
from __future__ import annotations

import functools
import hashlib
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
PACKAGE = HERE.parent
SOURCES = ("search/dfbb_state.py", "search/dfbb_kernels.py", "search/dfbb_search.py", "search/dfbb_build.py",
           "search/dfbb_sources.py", "inference/vac_kernels.py")  # within PACKAGE


@functools.cache
def name() -> str:
    """The built module's name: a digest of what its code depends on (the sources, the interpreter, NumPy).
    Once per process: its file reads, in a thread beside another, each wait for the GIL (cap131's early
    search waited 0.24 s on planning)."""
    digest = hashlib.sha256()
    for source in SOURCES:
        digest.update((PACKAGE / source).read_bytes())
    digest.update(f"{sys.implementation.cache_tag} {np.__version__}".encode())
    return "core_" + digest.hexdigest()[:16]


def fresh_jit_cache() -> None:
    """Drop numba's cached kernels when the core's sources changed since they were cached. numba keys each
    file's cache by that file's own stamp, but the kernels are compiled with the constants of dfbb_state
    (slots, codes): kernels cached before a change to it would run on a layout other than the driver's."""
    cache = HERE / "__pycache__"
    digest = cache / "dfbb_sources.digest"
    current = name()
    try:
        if digest.read_text() == current:
            return
    except OSError:
        pass
    try:
        for stale in [*cache.glob("dfbb_*.nbi"), *cache.glob("dfbb_*.nbc")]:
            stale.unlink(missing_ok=True)
        digest.write_text(current)
    except OSError:  # a read-only installation: numba caches elsewhere, or not at all
        pass
