"""Engine selection. CuPy is imported only when a GPU run is asked for, or a plan is large enough;
NumPy only when an engine is made, so the command line reads DEVICES without it."""
from __future__ import annotations

import importlib.util
import os

from gpusolve.engines.base import Engine

DEVICES = ("auto", "cpu", "gpu")

# Predicted seconds of a plan on each engine: joint-table entries per second and a fixed cost per
# mini-bucket (launches, syncs; bench/cpu_engine.py, bench/gpube.py's warm process).
RATE = {"numpy": 1.5e8, "cupy": 5e10}
BUCKET_OVERHEAD_S = {"numpy": 5e-5, "cupy": 5e-4}
# Bytes of messages streamed through host memory per second of GPU elimination, both crossings counted
# (grid n=64 d=10: exact BE streams 98.8 GiB of messages in 10.3 s on an H100, bench/batch_gpu.py).
STREAM_BYTES_PER_S = 1e10
# What the GPU costs before its first bucket in a process where CUDA has not started: CuPy's
# import and the CUDA context (0.60 s on an H100, bench/startup.py).
GPU_START_S = 0.6
# A plan this large gains from the GPU even in a cold process (Dask workers decide by it).
AUTO_MIN_JOINT = int(GPU_START_S * RATE["numpy"])
_started: list[bool] = []  # non-empty once select_engine made a CupyEngine: CUDA is up in this process
_warming: list = []  # warm_up_cuda's thread, once started


# What each CPU thread past the first adds to the NumPy engine's rate, as a share of one thread's
# (random n=18 and n=20 networks on 16 Xeon cores: 5.3x and 6.6x the one-thread rate).
THREAD_GAIN = 0.3


def predict_s(joint_entries: int, buckets: int, engine: str, threads: int = 1) -> float:
    """Seconds for `buckets` mini-buckets of `joint_entries` in all; on the CPU, threads share a
    bucket a chunk each, so only what one holds in chunks counts (pass one bucket at a time)."""
    rate = RATE[engine]
    if engine == "numpy":
        from gpusolve.plan.buckets import CHUNK_ENTRIES, THREADS_MAX
        rate *= 1 + THREAD_GAIN * (min(threads, THREADS_MAX, max(1, joint_entries // CHUNK_ENTRIES)) - 1)
    return joint_entries / rate + buckets * BUCKET_OVERHEAD_S[engine]


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


def _retain_primary_context() -> None:
    import ctypes
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return
    device, context = ctypes.c_int(), ctypes.c_void_p()
    if cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(device), 0) == 0:
        cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device)


def host_threads(threads: int | None = None) -> int:
    """The CPU engine's threads: `threads`, else one per core this process may use."""
    from gpusolve.distributed.cluster import default_workers
    return threads or default_workers()


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


def where_to_run(device: str, plan_joint_entries: int | None, buckets: int = 1, host_max: int | None = None,
                 started: bool = False, threads: int = 1) -> tuple[str, str]:
    """("host" or "device", why) for --device auto or gpu, before any engine is made.

    A plan (`plan_joint_entries` in `buckets` mini-buckets) runs where it is predicted to finish
    first (on `threads` CPU threads or the GPU), counting GPU_START_S for the device unless CUDA has
    `started` in this process: a plan
    the CPU finishes before CuPy is even imported stays on the host. Unknown size: auto stays
    on the host, gpu goes to the device. `host_max` (--host-max) replaces the prediction for
    --device gpu: below that many joint entries the host, else the device (0: always the device).
    """
    known = plan_joint_entries is not None
    if device == "gpu" and host_max is not None:
        if known and plan_joint_entries < host_max:
            return "host", (f"gpu requested; the plan's {plan_joint_entries:,} joint entries are below "
                            f"--host-max {host_max:,}, so it is placed on the host and CUDA is not started")
        return "device", "gpu requested"
    if not known:
        return ("host", "auto: plan size unknown, running on the CPU") if device == "auto" else ("device", "gpu requested")
    cpu_s = predict_s(plan_joint_entries, buckets, "numpy", threads)
    start = 0.0 if started else GPU_START_S
    gpu_s = predict_s(plan_joint_entries, buckets, "cupy") + start
    why = (f"{device}: the plan's {plan_joint_entries:,} joint entries, predicted {cpu_s:.3g} s on the CPU "
           f"({threads} thread{'s' if threads > 1 else ''}) and "
           f"{gpu_s:.3g} s on the GPU" + (f" with {start:.2g} s to start CUDA" if start else ""))
    if cpu_s <= gpu_s:
        return "host", why + "; running on the CPU" + ("" if device == "auto" else " (--host-max 0: on the device)")
    return "device", why


def select_engine(device: str, plan_joint_entries: int | None = None, buckets: int = 1,
                  gpu_mem_limit: int | None = None, host_max: int | None = None,
                  threads: int | None = None) -> tuple[Engine, str]:
    """The engine for --device, and a sentence saying why it was chosen (`where_to_run`).

    `gpu_mem_limit` (bytes) caps the device memory the GPU engine uses before it streams
    messages through host memory; `threads` are the CPU engine's (None: one per core).
    """
    from gpusolve.engines.numpy_engine import NumpyEngine
    threads = host_threads(threads)
    if device == "cpu":
        return NumpyEngine(threads), "cpu requested"
    if device == "gpu" and importlib.util.find_spec("cupy") is None:
        raise DeviceError("--device gpu: CuPy is not installed")
    where, why = where_to_run(device, plan_joint_entries, buckets, host_max, bool(_started), threads)
    if where == "host":
        return NumpyEngine(threads), why
    warm_up_cuda()
    reason = gpu_unavailable_reason()
    if reason:
        if device == "gpu":
            raise DeviceError(f"--device gpu: {reason}")
        return NumpyEngine(threads), f"GPU not used: {reason}; running on the CPU"
    from gpusolve.engines.cupy_engine import CupyEngine
    engine = CupyEngine(gpu_mem_limit=gpu_mem_limit)
    _started.append(True)
    return engine, f"{why}; {engine.device_name}, CuPy start-up {engine.init_s:.2f} s"
