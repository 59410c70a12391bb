"""Engine selection (engines/__init__.py): where a plan runs, decided before CuPy is imported."""
import sys

import pytest

from gpusolve.engines import AUTO_MIN_JOINT, GPU_START_S, RATE, predict_s, select_engine, where_to_run


@pytest.mark.parametrize("device", ["auto", "gpu"])
def test_a_plan_the_cpu_finishes_before_cuda_starts_stays_on_the_host(device):
    entries = int(0.5 * GPU_START_S * RATE["numpy"])
    where, why = where_to_run(device, entries, 10, started=False)
    assert where == "host" and "to start CUDA" in why
    # once CUDA is up in the process (a server, a batch), the same plan is faster on the device
    assert where_to_run(device, entries, 10, started=True)[0] == "device"


def test_cold_and_warm_thresholds_follow_the_predictions():
    assert where_to_run("auto", 2 * AUTO_MIN_JOINT, 10, started=False)[0] == "device"
    assert where_to_run("auto", AUTO_MIN_JOINT // 2, 10, started=False)[0] == "host"
    # tiny plans are launch-bound on the device even when it is warm
    assert predict_s(1000, 10, "numpy") < predict_s(1000, 10, "cupy")
    assert where_to_run("gpu", 1000, 10, started=True)[0] == "host"


def test_host_max_replaces_the_prediction_for_gpu_only():
    assert where_to_run("gpu", 10, host_max=0)[0] == "device"
    assert where_to_run("gpu", 10 ** 12, host_max=10 ** 13)[0] == "host"
    assert where_to_run("auto", 10, host_max=0)[0] == "host"


def test_unknown_size():
    assert where_to_run("auto", None)[0] == "host"
    assert where_to_run("gpu", None)[0] == "device"


def test_a_small_plan_on_auto_does_not_import_cupy(monkeypatch):
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    engine, why = select_engine("auto", 10 ** 6, 5)
    assert engine.name == "numpy" and "cupy" not in sys.modules and "running on the CPU" in why
