"""Shared pytest fixtures."""
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def shared_instances() -> Path:
    """The read-only benchmark instances beside the checkout (`../shared/instances`)."""
    path = Path(__file__).resolve().parents[2] / "shared" / "instances"
    if not path.is_dir():
        pytest.skip(f"shared instances not found at {path}")
    return path
