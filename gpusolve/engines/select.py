"""Engine selection. CuPy is imported only when a GPU run is asked for, or a plan is large enough;
NumPy only when an engine is made, so the command line reads DEVICES without it."""
from __future__ import annotations

import importlib.util

from gpusolve.cuda import runtime
from gpusolve.cuda.runtime import DeviceError, gpu_unavailable_reason, warm_up_cuda
from gpusolve.engines.base import Engine
from gpusolve.host import host_threads

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
    where, why = where_to_run(device, plan_joint_entries, buckets, host_max, bool(runtime._started), threads)
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
    runtime._started.append(True)
    return engine, f"{why}; {engine.device_name}, CuPy start-up {engine.init_s:.2f} s"
