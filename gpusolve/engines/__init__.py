"""Engine selection. CuPy is imported only when a GPU run is asked for."""
from __future__ import annotations

from .base import Engine
from .numpy_engine import NumpyEngine

DEVICES = ("auto", "cpu", "gpu")


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
    return "the GPU engine is not implemented yet"


def select_engine(device: str) -> tuple[Engine, str]:
    """The engine for --device, and a sentence saying why it was chosen."""
    if device == "cpu":
        return NumpyEngine(), "cpu requested"
    reason = gpu_unavailable_reason()
    if device == "gpu":
        if reason:
            raise DeviceError(f"--device gpu: {reason}")
    return NumpyEngine(), f"GPU not used: {reason}; running on the CPU"
