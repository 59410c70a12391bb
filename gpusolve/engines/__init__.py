"""Engine selection. CuPy is imported only when a GPU run is asked for, or a plan is large enough;
NumPy only when an engine is made, so the command line reads DEVICES without it."""
from __future__ import annotations

import importlib.util

from .base import Engine

DEVICES = ("auto", "cpu", "gpu")

# --device auto uses the GPU from this many joint-table entries in the whole
# plan: below it the CPU engine (1.5e8-4e8 entries/s) finishes before CuPy's
# import and CUDA context (0.5 s on an H100) are ready (bench/gpu_end_to_end.py).
AUTO_MIN_JOINT = 100_000_000
# --device gpu keeps a plan with fewer joint entries than this (all its buckets) on the host
# (--host-max): the CPU engine finishes it (under 10 ms at 1.5e8 entries/s) before CuPy's
# import and CUDA context (0.8 s on an H100) are ready, and nothing is compiled.
HOST_MAX_JOINT = 1 << 20


class DeviceError(RuntimeError):
    """--device gpu asked for, but no usable GPU engine."""


def gpu_unavailable_reason() -> str | None:
    """Why the GPU engine cannot run here, or None when it can."""
    try:
        import cupy  # noqa: F401
    except Exception as e:  # ImportError, or a CUDA library failing to load
        return f"CuPy is not importable ({type(e).__name__}: {e})".splitlines()[0]
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA device found"
    except Exception as e:
        return f"no usable CUDA device ({e})".splitlines()[0]
    return None


def select_engine(device: str, plan_joint_entries: int | None = None,
                  gpu_mem_limit: int | None = None, host_max: int = HOST_MAX_JOINT) -> tuple[Engine, str]:
    """The engine for --device, and a sentence saying why it was chosen.

    `plan_joint_entries` (the plan's total joint-table entries) lets auto keep
    small plans on the CPU without even importing CuPy; unknown, auto stays on
    the CPU. `gpu_mem_limit` (bytes) caps the device memory the GPU engine
    uses before it streams messages through host memory. `host_max`: with --device gpu,
    a plan below it is placed on the host (0: always the device).
    """
    from .numpy_engine import NumpyEngine
    if device == "cpu":
        return NumpyEngine(), "cpu requested"
    if device == "gpu" and importlib.util.find_spec("cupy") is None:
        raise DeviceError("--device gpu: CuPy is not installed")
    if device == "gpu" and plan_joint_entries is not None and plan_joint_entries < host_max:
        return NumpyEngine(), (f"gpu requested; the plan's {plan_joint_entries:,} joint entries are below "
                               f"--host-max {host_max:,}, so it is placed on the host and CUDA is not started")
    if device == "auto":
        if plan_joint_entries is None:
            return NumpyEngine(), "auto: plan size unknown, running on the CPU"
        if plan_joint_entries < AUTO_MIN_JOINT:
            return NumpyEngine(), (f"auto: the plan's {plan_joint_entries:,} joint entries are below "
                                   f"{AUTO_MIN_JOINT:,}, where the GPU starts to gain; running on the CPU")
    reason = gpu_unavailable_reason()
    if reason:
        if device == "gpu":
            raise DeviceError(f"--device gpu: {reason}")
        return NumpyEngine(), f"GPU not used: {reason}; running on the CPU"
    from .cupy_engine import CupyEngine
    engine = CupyEngine(gpu_mem_limit=gpu_mem_limit)
    why = "gpu requested" if device == "gpu" else f"auto: the plan's {plan_joint_entries:,} joint entries favour the GPU"
    return engine, f"{why}; {engine.device_name}, CuPy start-up {engine.init_s:.2f} s"
