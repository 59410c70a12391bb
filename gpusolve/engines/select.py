"""The device policy: where work runs for --device, decided from the engines' rates (registry.py)
before any engine is made. Solve, scale-out's workers and CSG all place their work here.

CuPy is imported only when a GPU run is asked for, or the work is large enough; NumPy only when an
engine is made, so the command line reads DEVICES without it.
"""
from __future__ import annotations

import importlib.util

from gpusolve.cuda import runtime
from gpusolve.cuda.runtime import DeviceError, warm_up_cuda
from gpusolve.engines import registry
from gpusolve.engines.base import Engine
from gpusolve.engines.registry import EngineSpec
from gpusolve.host import host_threads

DEVICES = ("auto", "cpu", "gpu")
# Bytes of messages streamed through host memory per second of GPU elimination, both crossings counted
# (grid n=64 d=10: exact BE streams 98.8 GiB of messages in 10.3 s on an H100, bench/batch_gpu.py).
STREAM_BYTES_PER_S = 1e10


def predict_s(items: int, steps: int, engine: str, threads: int = 1, work: str = "join-sum") -> float:
    """Seconds of `items` of `work` in `steps` on the engine named `engine` (its spec's rate); on the
    CPU, threads share a bucket a chunk each, so only what one holds in chunks counts (pass one
    bucket at a time)."""
    return registry.get(engine).predict_s(items, steps, threads, work)


def where_to_run(device: str, size: int | None, steps: int = 1, host_max: int | None = None,
                 started: bool = False, threads: int = 1, work: str = "join-sum") -> tuple[str, str]:
    """("host" or "device", why) for --device auto or gpu.

    Work (`size` items of `work` in `steps`: a plan's joint entries in mini-buckets, CSG's splits in
    levels) runs where it is predicted to finish first (on `threads` CPU threads or the GPU),
    counting the device's start unless CUDA has `started` in this process: work the CPU finishes
    before CuPy is even imported stays on the host. Unknown size: auto stays on the host, gpu goes
    to the device. `host_max` (--host-max) replaces the prediction for --device gpu: below that
    many items the host, else the device (0: always the device).
    """
    known = size is not None
    if device == "gpu" and host_max is not None:
        if known and size < host_max:
            return "host", (f"gpu requested; {registry.WORK[work].format(size)} are below "
                            f"--host-max {host_max:,}, so it is placed on the host and CUDA is not started")
        return "device", "gpu requested"
    if not known:
        return ("host", "auto: plan size unknown, running on the CPU") if device == "auto" else ("device", "gpu requested")
    host, gpu = registry.for_place(False), registry.for_place(True)
    cpu_s = host.predict_s(size, steps, threads, work)
    start = 0.0 if started else gpu.start_s
    gpu_s = gpu.predict_s(size, steps, 1, work) + start
    why = (f"{device}: {registry.WORK[work].format(size)}, predicted {cpu_s:.3g} s on the CPU "
           f"({threads} thread{'s' if threads > 1 else ''}) and "
           f"{gpu_s:.3g} s on the GPU" + (f" with {start:.2g} s to start CUDA" if start else ""))
    if cpu_s <= gpu_s:
        return "host", why + "; running on the CPU" + ("" if device == "auto" else " (--host-max 0: on the device)")
    return "device", why


def choose(device: str, size: int | None = None, steps: int = 1, host_max: int | None = None,
           threads: int | None = None, work: str = "join-sum", here: bool = True) -> tuple[EngineSpec, str]:
    """The engine spec for --device and a sentence saying why (`where_to_run`), before any engine is made.

    `here`: the work runs in this process, so a device already started costs no start, and CUDA's
    warm-up begins once the device is chosen (else: workers, fresh processes). Raises DeviceError
    for --device gpu without a usable GPU; auto falls back to the CPU.
    """
    host, gpu = registry.for_place(False), registry.for_place(True)
    if device == "cpu":
        return host, "cpu requested"
    if device == "gpu" and importlib.util.find_spec("cupy") is None:
        raise DeviceError("--device gpu: CuPy is not installed")
    started = here and bool(runtime._started)
    where, why = where_to_run(device, size, steps, host_max, started, host_threads(threads), work)
    if where == "host":
        return host, why
    if here:
        warm_up_cuda()
    reason = gpu.probe()
    if reason:
        if device == "gpu":
            raise DeviceError(f"--device gpu: {reason}")
        return host, f"GPU not used: {reason}; running on the CPU"
    return gpu, why


def make_engine(spec: EngineSpec, threads: int | None = None, gpu_mem_limit: int | None = None) -> Engine:
    """The engine of `spec`: `threads` for the CPU's (None: one per core), `gpu_mem_limit` bytes of
    device memory before the GPU's streams messages through host memory."""
    engine = spec.make(threads=host_threads(threads), gpu_mem_limit=gpu_mem_limit)
    if spec.on_device:
        runtime.mark_started()
    return engine


def select_engine(device: str, plan_joint_entries: int | None = None, buckets: int = 1,
                  gpu_mem_limit: int | None = None, host_max: int | None = None,
                  threads: int | None = None) -> tuple[Engine, str]:
    """The engine for --device and a plan of `plan_joint_entries` in `buckets` mini-buckets, and a
    sentence saying why it was chosen (`choose`)."""
    spec, why = choose(device, plan_joint_entries, buckets, host_max, threads)
    engine = make_engine(spec, threads, gpu_mem_limit)
    if spec.on_device:
        why += f"; {engine.device_name}, CuPy start-up {engine.init_s:.2f} s"
    return engine, why
