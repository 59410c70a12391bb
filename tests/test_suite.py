"""The test suite's own machinery: GPU tests skip only where no GPU is, and a run says when the
shared instances are missing."""
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

import conftest
import helpers

TESTS = Path(__file__).resolve().parent


def pytest_run(*args, env=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd or TESTS.parent,
                          env={**os.environ, **(env or {})})


def test_gpu_tests_skip_without_a_device_and_fail_on_a_broken_cuda(tmp_path):
    """conftest's `cupy` fixture under a fake CuPy whose getDeviceCount() gives each outcome: skipped
    for no device (cudaErrorNoDevice, or a count of 0), an error for a CUDA that fails otherwise."""
    fake = tmp_path / "site" / "cupy"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        "import os, types\n"
        "class CUDARuntimeError(RuntimeError):\n"
        "    def __init__(self, status):\n"
        "        super().__init__(f'cudaError {status}')\n"
        "        self.status = status\n"
        "def getDeviceCount():\n"
        "    status = int(os.environ['FAKE_CUDA_STATUS'])\n"
        "    if status:\n"
        "        raise CUDARuntimeError(status)\n"
        "    return 0\n"
        "cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=getDeviceCount,\n"
        "                                                           CUDARuntimeError=CUDARuntimeError))\n")
    # cudaErrorNoDevice, a count of 0, cudaErrorUnknown, cudaErrorInitializationError
    expected = {100: "SKIPPED", 0: "SKIPPED", 999: "ERROR", 3: "ERROR"}
    for status in expected:
        (tmp_path / f"test_status_{status}.py").write_text(
            "import os, pytest\n"
            "@pytest.fixture(scope='module')\n"
            f"def status():\n    os.environ['FAKE_CUDA_STATUS'] = '{status}'\n"
            "def test_device(status, cupy):\n    pass\n")
    r = pytest_run("-p", "conftest", "-v", tmp_path, cwd=tmp_path,
                   env={"PYTHONPATH": os.pathsep.join([str(fake.parent), str(TESTS), str(TESTS.parent)])})
    for status, outcome in expected.items():
        assert f"test_status_{status}.py::test_device {outcome}" in r.stdout, r.stdout + r.stderr


class FakeCudaError(RuntimeError):
    def __init__(self, status):
        super().__init__(f"cudaError {status}")
        self.status = status


@pytest.mark.parametrize("driver", [False, True])
def test_insufficient_driver_skips_only_when_no_driver_is_installed(monkeypatch, driver):
    """CUDA reports a missing driver as cudaErrorInsufficientDriver, as it does a driver too old."""
    import ctypes

    def get_count():
        raise FakeCudaError(helpers.CUDA_ERROR_INSUFFICIENT_DRIVER)

    def cdll(name):
        if not driver:
            raise OSError(f"{name}: cannot open shared object file")
        return object()
    runtime = types.SimpleNamespace(getDeviceCount=get_count, CUDARuntimeError=FakeCudaError)
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=runtime)))
    monkeypatch.setattr(ctypes, "CDLL", cdll)
    monkeypatch.delenv("CUPY_NVRTC_USE_PCH", raising=False)  # import_cupy sets it
    if driver:
        with pytest.raises(FakeCudaError):
            helpers.cuda_absent()
    else:
        assert "no CUDA driver" in helpers.cuda_absent()


def test_no_cupy_is_a_reason_to_skip(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy raises ImportError
    assert "CuPy is not importable" in helpers.cuda_absent()


def test_a_run_without_the_shared_instances_says_so_first(tmp_path, monkeypatch):
    """One line after collection naming the folder and how many tests will skip; none when it is there."""
    missing = tmp_path / "missing"
    r = pytest_run("--collect-only", "-q", TESTS / "test_instances.py", env={"GPUSOLVE_INSTANCES": str(missing)})
    collected = [line for line in r.stdout.splitlines() if "::" in line]
    assert collected
    line = f"shared instances not found at {missing} (set GPUSOLVE_INSTANCES): {len(collected)} tests that read them will skip"
    assert r.stdout.splitlines()[0] == line, r.stdout
    monkeypatch.setenv("GPUSOLVE_INSTANCES", str(tmp_path))  # there: no line
    assert conftest.pytest_report_collectionfinish(None, tmp_path, [types.SimpleNamespace(fixturenames=(
        "shared_instances",))]) == []
