"""Shared pytest fixtures."""
import os
from pathlib import Path

import pytest

from helpers import cuda_absent


def shared_instances_path() -> Path:
    """The read-only benchmark instances beside the checkout (`../shared/instances`).

    GPUSOLVE_INSTANCES points elsewhere: the GPU machine gets a copy, not the folder beside.
    """
    return Path(os.environ.get("GPUSOLVE_INSTANCES") or Path(__file__).resolve().parents[2] / "shared" / "instances")


@pytest.fixture(scope="session")
def shared_instances() -> Path:
    path = shared_instances_path()
    if not path.is_dir():
        pytest.skip(f"shared instances not found at {path}")
    return path


def pytest_report_collectionfinish(config, start_path, items):
    """One line before the run when the tests on the shared instances will skip: a skip is
    otherwise easy to miss among hundreds."""
    path = shared_instances_path()
    needing = sum("shared_instances" in item.fixturenames for item in items)
    if needing and not path.is_dir():
        return [f"shared instances not found at {path} (set GPUSOLVE_INSTANCES): "
                f"{needing} tests that read them will skip"]
    return []


@pytest.fixture(scope="module")
def cupy():
    """CuPy with a CUDA device; skips where there is none, fails where CUDA is there but broken."""
    reason = cuda_absent()
    if reason:
        pytest.skip(reason)
    from gpusolve.cuda.runtime import import_cupy
    return import_cupy()
