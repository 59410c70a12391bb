"""The CUDA runtime of a process: CuPy's import, whether a device is usable, the driver's start, the
device's name and size, and the device memory a run may take (pinned host memory: pinned.py; kernels:
loader.py).

Nothing here imports CuPy or NumPy at import time: the command line and a CPU run never pay for them.
"""
from __future__ import annotations

import functools
import os

_started: list[bool] = []  # non-empty once an engine on the device was made: CUDA is up in this process
_warming: list = []  # warm_up_cuda's thread, once started
# The share of the device memory free (CuPy's cached blocks counted free) that a run may hold: the rest
# is left to the CUDA context's growth, CuPy's workspaces and fragmentation. One margin for every
# user of the device (engines, CSG).
DEVICE_MEMORY_SHARE = 0.9


class DeviceError(RuntimeError):
    """--device gpu asked for, but no usable GPU engine."""


def import_cupy():
    """CuPy, first imported with NVRTC's precompiled headers on unless the environment says otherwise
    (CuPy reads CUPY_NVRTC_USE_PCH once, at import): the kernels CuPy generates for array operations
    (local search, cost shifting) then compile in about a third less time on a new machine
    (CELAR6-SUB0's local search with an empty kernel cache: 3.0-3.1 s against 4.8-4.9 s on an H100)."""
    os.environ.setdefault("CUPY_NVRTC_USE_PCH", "1")
    import cupy
    return cupy


def gpu_unavailable_reason() -> str | None:
    """Why the GPU engine cannot run here, or None when it can."""
    try:
        cupy = import_cupy()
    except Exception as e:  # ImportError, or a CUDA library failing to load
        return f"CuPy is not importable ({type(e).__name__}: {e})".splitlines()[0]
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA device found"
    except Exception as e:
        return f"no usable CUDA device ({e})".splitlines()[0]
    return None


def warm_up_cuda() -> None:
    """Start the CUDA driver and the device's primary context on a background thread, once the
    plan is placed on the device, while CuPy is imported: CuPy's runtime then finds the context
    made (0.2-0.3 s of a fresh process on an H100, bench/startup.py). Not before: a plan that
    stays on the host would pay for a context it never uses when the process exits (0.1 s).
    Through ctypes, so nothing is imported for it; without a driver, nothing happens."""
    if _warming:
        return
    import threading
    _warming.append(threading.Thread(target=_retain_primary_context, name="gpusolve-cuda-start", daemon=True))
    _warming[0].start()


def cuda_started() -> bool:
    """Whether this process started CUDA (an engine on the device, or its warm-up)."""
    return bool(_started or _warming)


def mark_started() -> None:
    """Something on the device was made: CUDA is up in this process, and its start is paid."""
    if not _started:
        _started.append(True)


@functools.lru_cache(maxsize=None)
def device_info(device_id: int) -> tuple[str, int, str]:
    """(name, SM count, compute capability as CuPy writes it, "90") of a device: read once per
    process, the query takes about a millisecond."""
    cupy = import_cupy()
    props = cupy.cuda.runtime.getDeviceProperties(device_id)
    name = props["name"]
    return ((name.decode() if isinstance(name, bytes) else str(name)), props["multiProcessorCount"],
            cupy.cuda.Device(device_id).compute_capability)


def device_budget(limit: int | None = None) -> int:
    """Bytes of the current device a run may hold: DEVICE_MEMORY_SHARE of what is free now, and
    at most `limit` (--gpu-mem-limit)."""
    cupy = import_cupy()
    free = cupy.cuda.runtime.memGetInfo()[0] + cupy.get_default_memory_pool().free_bytes()
    room = int(free * DEVICE_MEMORY_SHARE)
    return room if limit is None else min(int(limit), room)


def _retain_primary_context() -> None:
    import ctypes
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return
    device, context = ctypes.c_int(), ctypes.c_void_p()
    if cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(device), 0) == 0:
        cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device)
