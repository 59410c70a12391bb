"""The one kernel loader: CUDA source -> a launchable kernel, once per process and device.

Every kernel of the solver (bucket elimination, sparse and streamed steps, AllDifferent, CSG) is
loaded here. A kernel compiled with CuPy's default options whose prebuilt cubin (cubins.py) runs on
the device is loaded from it, without NVRTC; any other is compiled by NVRTC through CuPy (which
keeps the binary in its disk cache across processes). Each load's seconds are charged to the
process's `Account` and to the one this thread charges (`charge_to`): an engine charges itself when
it is made, so its compile_s counts every kernel its run loads, wherever it is launched from.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from gpusolve.cuda import cubins
from gpusolve.cuda.runtime import device_info, import_cupy


@dataclass(eq=False)  # identity: a set of accounts holds each once
class Account:
    """Kernels loaded, by how, and the seconds their loading took."""

    compile_s: float = 0.0
    compiled: int = 0  # by NVRTC (or CuPy's disk cache)
    prebuilt: int = 0  # from a cubin shipped with the package


PROCESS = Account()  # every load of this process
_KERNELS: dict[tuple, object] = {}  # (source or key, options, device) -> kernel
_LOCK = threading.Lock()
_charged = threading.local()


def charge_to(account: Account | None) -> None:
    """Loads on this thread from now on are charged to `account` too (None: to the process's alone)."""
    _charged.account = account


def _cache_key(source: str, options: tuple[str, ...], key) -> tuple:
    return (source if key is None else key, tuple(options), import_cupy().cuda.runtime.getDevice())


def loaded(key, options: tuple[str, ...] = ()) -> bool:
    """Whether the kernel of this source (or `key`, as `load` was given it) is loaded on the current
    device already: launching it costs no compilation."""
    return _cache_key(key, options, None) in _KERNELS


def load(source: str, name: str, options: tuple[str, ...] = (), key=None):
    """The kernel `name` of `source` on the current device, compiled with NVRTC `options`; `key`, when
    given, stands for the source in the cache (a generator's arguments: cheaper to hash than the text
    they make, and knowable before making it)."""
    at = _cache_key(source, options, key)
    kernel = _KERNELS.get(at)
    if kernel is not None:
        return kernel
    with _LOCK:  # one compilation of a kernel, whichever thread asks first
        kernel = _KERNELS.get(at)
        if kernel is not None:
            return kernel
        cupy = import_cupy()
        t0 = time.perf_counter()
        prebuilt = None if options else cubins.find(name, device_info(at[2])[2])
        if prebuilt is not None:  # get_function loads the module (no NVRTC)
            kernel = cupy.RawModule(path=str(prebuilt)).get_function(name)
        else:
            kernel = cupy.RawKernel(source, name, options=tuple(options))
            kernel.compile()
        seconds = time.perf_counter() - t0
        accounts = {PROCESS, getattr(_charged, "account", None) or PROCESS}
        for account in accounts:
            account.compile_s += seconds
            if prebuilt is None:
                account.compiled += 1
            else:
                account.prebuilt += 1
        _KERNELS[at] = kernel
    return kernel
