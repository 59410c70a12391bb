"""Shared pytest fixtures."""
import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def shared_instances() -> Path:
    """The read-only benchmark instances beside the checkout (`../shared/instances`).

    GPUSOLVE_INSTANCES points elsewhere: the GPU machine gets a copy, not the folder beside.
    """
    path = Path(os.environ.get("GPUSOLVE_INSTANCES") or Path(__file__).resolve().parents[2] / "shared" / "instances")
    if not path.is_dir():
        pytest.skip(f"shared instances not found at {path}")
    return path


@pytest.fixture(scope="module")
def cupy():
    cp = pytest.importorskip("cupy")
    try:
        if cp.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("no CUDA device")
    except Exception as e:  # no driver
        pytest.skip(f"no usable CUDA device: {e}")
    return cp
