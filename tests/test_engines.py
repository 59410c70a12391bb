"""Engine selection (engines/__init__.py): where a plan runs, decided before CuPy is imported."""
import sys

import pytest

from gpusolve.engines.select import AUTO_MIN_JOINT, GPU_START_S, RATE, predict_s, select_engine, where_to_run


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


def test_cpu_threads_count_in_the_prediction():
    entries = 2 * AUTO_MIN_JOINT  # the GPU wins against one thread in a fresh process ...
    assert where_to_run("auto", entries, 10, threads=1)[0] == "device"
    where, why = where_to_run("auto", entries, 10, threads=16)  # ... not against sixteen
    assert where == "host" and "(16 threads)" in why
    assert predict_s(entries, 10, "numpy", 16) < predict_s(entries, 10, "numpy", 1) / 4
    assert predict_s(entries, 10, "cupy", 16) == predict_s(entries, 10, "cupy", 1)


@pytest.mark.parametrize("op", ["min", pytest.param("max", marks=pytest.mark.slow),
                                pytest.param("lse", marks=pytest.mark.slow)])
def test_threaded_dense_step_equals_one_thread(op):
    """Blocks computed by several threads: the same message, bit for bit."""
    import numpy as np

    from gpusolve.engines import dense as base
    from helpers import random_bucket
    rng = np.random.default_rng(7)
    split = 0
    for _ in range(150):
        integer = op == "min" and rng.random() < 0.5
        mb, inputs, domains, top = random_bucket(rng, integer=integer)
        if mb.joint_entries > 20000:  # thousands of 64-entry blocks: slow, and no more telling
            continue
        one = base.eliminate_dense(np, mb.var, mb.scope, inputs, domains, top, integer, None, op, chunk=64)
        many = base.eliminate_dense(np, mb.var, mb.scope, inputs, domains, top, integer, None, op, chunk=64,
                                    threads=4)
        assert one.dtype == many.dtype and np.array_equal(one, many)
        split += mb.joint_entries > 64
    assert split > 30


def test_a_stop_in_a_thread_ends_the_threaded_step():
    import numpy as np

    from gpusolve.engines import dense as base
    from gpusolve.stop import Stopped
    d, calls = 10, []

    def check():
        calls.append(1)
        if len(calls) > 5:
            raise Stopped()
    inputs = [(np.ones((d, d, d, d), dtype=np.int64), (0, 1, 2, 3))]
    with pytest.raises(Stopped):
        base.eliminate_dense(np, 0, (1, 2, 3), inputs, [d] * 4, 100, True, check, chunk=d, threads=2)
    assert len(calls) <= 6 + 2  # the blocks not started when the stop came were skipped


def test_the_cuda_warm_up_is_harmless_without_a_driver(monkeypatch):
    """It runs on a daemon thread beside the solve; where libcuda cannot be loaded it just ends."""
    import ctypes
    import threading

    from gpusolve.cuda import runtime

    def no_driver(name, *args, **kw):
        raise OSError(f"{name}: cannot open shared object file")
    monkeypatch.setattr(ctypes, "CDLL", no_driver)
    monkeypatch.setattr(runtime, "_warming", [])
    runtime._retain_primary_context()  # returns, raises nothing
    runtime.warm_up_cuda()
    started = [t for t in threading.enumerate() if t.name == "gpusolve-cuda-start"]
    assert all(t.daemon for t in started)
    for t in started:
        t.join(5)
    assert not any(t.is_alive() for t in started)


def test_cuda_is_started_only_for_a_plan_placed_on_the_device(monkeypatch):
    """A plan that stays on the host never starts CUDA (its context would cost 0.1 s at exit)."""
    from gpusolve.cuda import runtime
    from gpusolve.engines import select as engines
    calls = []
    monkeypatch.setattr(runtime, "_warming", [])
    monkeypatch.setattr(runtime, "_retain_primary_context", lambda: calls.append(1))
    monkeypatch.setattr(engines, "gpu_unavailable_reason", lambda: "no CUDA device found")
    engine, why = engines.select_engine("auto", 1000, threads=1)
    assert engine.name == "numpy" and "running on the CPU" in why and not runtime.cuda_started()
    engine, why = engines.select_engine("auto", 10 ** 13, threads=1)
    assert engine.name == "numpy" and why.startswith("GPU not used: no CUDA device found")
    runtime._warming[0].join(5)
    assert calls == [1] and runtime.cuda_started()
    engines.select_engine("auto", 10 ** 13, threads=1)
    assert calls == [1]  # once per process
