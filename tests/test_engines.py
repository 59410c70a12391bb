"""Engine selection (engines/select.py, engines/registry.py): where a plan runs, decided before CuPy is imported."""
import json
import sys

import pytest

from gpusolve.engines import registry
from gpusolve.engines.select import predict_s, select_engine, where_to_run

CPU, GPU = registry.get("numpy"), registry.get("cupy")
# the plan size from which the GPU gains in a fresh process, against one CPU thread
AUTO_MIN_JOINT = int(GPU.start_s * CPU.rates["join-sum"].per_s)


@pytest.mark.parametrize("device", ["auto", "gpu"])
def test_a_plan_the_cpu_finishes_before_cuda_starts_stays_on_the_host(device):
    entries = int(0.5 * GPU.start_s * CPU.rates["join-sum"].per_s)
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
    monkeypatch.setattr(runtime, "gpu_unavailable_reason", lambda: "no CUDA device found")
    engine, why = engines.select_engine("auto", 1000, threads=1)
    assert engine.name == "numpy" and "running on the CPU" in why and not runtime.cuda_started()
    engine, why = engines.select_engine("auto", 10 ** 13, threads=1)
    assert engine.name == "numpy" and why.startswith("GPU not used: no CUDA device found")
    runtime._warming[0].join(5)
    assert calls == [1] and runtime.cuda_started()
    engines.select_engine("auto", 10 ** 13, threads=1)
    assert calls == [1]  # once per process


# -- the registry and the one device policy, against a fake CUDA --------------------------------

class FakeDeviceEngine:
    """What the device spec's factory makes here: no CuPy, no device."""
    name, device_name, init_s = "cupy", "Fake GPU", 0.0

    def __init__(self, gpu_mem_limit=None):
        self.budget = gpu_mem_limit

    @property
    def spec(self):
        return registry.get(self.name)


@pytest.fixture
def fake_cuda(monkeypatch):
    """A usable GPU as far as the policy can tell: the device spec's probe passes, its factory makes a
    FakeDeviceEngine, CuPy's module is a stub that names the device, and nothing is started."""
    import dataclasses
    import importlib.machinery
    import types

    from gpusolve.cuda import runtime
    from gpusolve.distributed import cluster
    module = types.ModuleType("fake_gpu_engine")
    module.FakeDeviceEngine = FakeDeviceEngine
    monkeypatch.setitem(sys.modules, "fake_gpu_engine", module)
    cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(
        getDevice=lambda: 0, getDeviceProperties=lambda i: {"name": b"Fake GPU", "multiProcessorCount": 4}),
        Device=lambda i: types.SimpleNamespace(compute_capability="90"))
    cupy = types.ModuleType("cupy")
    cupy.cuda, cupy.__spec__ = cuda, importlib.machinery.ModuleSpec("cupy", None)  # found: --device gpu passes
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setenv("CUPY_NVRTC_USE_PCH", "1")  # import_cupy sets it
    device = dataclasses.replace(GPU, factory="fake_gpu_engine:FakeDeviceEngine", probe=lambda: None)
    monkeypatch.setattr(registry, "_ENGINES", {"numpy": CPU, "cupy": device})
    monkeypatch.setattr(runtime, "_started", [])
    monkeypatch.setattr(runtime, "_warming", [])
    monkeypatch.setattr(runtime, "_retain_primary_context", lambda: None)
    runtime.device_info.cache_clear()
    cluster._engine.cache_clear()
    yield runtime
    runtime.device_info.cache_clear()
    cluster._engine.cache_clear()


def sizes_around(crossover: int) -> list[int]:
    return [int(crossover * f) for f in (0.01, 0.3, 0.9, 0.99, 1.01, 1.1, 3, 100)]


@pytest.mark.parametrize("threads", [1, 2, 16])
def test_solve_places_a_plan_as_the_policy_does(fake_cuda, threads):
    """select_engine, which solve calls: on the device exactly where where_to_run says, cold each time."""
    for size in sizes_around(AUTO_MIN_JOINT * (1 + registry.THREAD_GAIN * (threads - 1))):
        fake_cuda._started.clear()
        engine, why = select_engine("auto", size, 1, threads=threads)
        where, policy_why = where_to_run("auto", size, 1, started=False, threads=threads)
        assert engine.spec.on_device == (where == "device") and why.startswith(policy_why), (size, threads)


def test_scale_out_places_a_bucket_as_the_policy_does(fake_cuda):
    """cluster.engine_for (Dask workers, DCOP agents): the same choice for the same sizes, on this
    process's threads; a warm device takes more, as it does for solve."""
    from gpusolve.distributed import cluster
    from gpusolve.host import host_threads
    for started in (False, True):
        for size in sizes_around(AUTO_MIN_JOINT * (1 + registry.THREAD_GAIN * (host_threads() - 1))):
            fake_cuda._started[:] = [True] if started else []
            where = where_to_run("auto", size, 1, started=started, threads=host_threads())[0]
            assert cluster.engine_for("auto", size).spec.on_device == (where == "device"), (size, started)
    assert cluster.engine_for("gpu", 1).spec.on_device and not cluster.engine_for("cpu", 10 ** 15).spec.on_device


@pytest.mark.parametrize("threads", [1, 16])
def test_csg_places_the_dp_as_the_policy_does(fake_cuda, threads):
    """CSG's DP by its split evaluations, a step per level: the same policy, not an agent count."""
    from gpusolve.csg import dp
    from gpusolve.csg import solve as csg
    for algorithm in dp.ALGORITHMS:
        for n in range(8, 25):
            fake_cuda._started.clear()
            spec, note = csg.pick_device("auto", n, algorithm, threads)
            where = where_to_run("auto", dp.total_splits(n, algorithm), n, started=False, threads=threads,
                                 work="split")[0]
            assert spec.on_device == (where == "device"), (algorithm, n, threads)
            assert note.endswith("; Fake GPU") == spec.on_device
    assert csg.pick_device("gpu", 2, "idp", 16)[0].on_device and not csg.pick_device("cpu", 30, "idp", 1)[0].on_device


def test_the_three_callers_agree_on_one_size(fake_cuda):
    """solve, scale-out and CSG share the policy: one size of one kind of work, one place."""
    from gpusolve.csg import dp
    from gpusolve.csg import solve as csg
    from gpusolve.distributed import cluster
    from gpusolve.host import host_threads
    t = host_threads()
    for size in sizes_around(AUTO_MIN_JOINT * (1 + registry.THREAD_GAIN * (t - 1))):
        fake_cuda._started.clear()
        by_solve = select_engine("auto", size, 1, threads=t)[0].spec.on_device
        fake_cuda._started.clear()
        assert cluster.engine_for("auto", size).spec.on_device == by_solve
    splits = [dp.total_splits(n, "idp") for n in range(8, 25)]
    fake_cuda._started.clear()
    assert [csg.pick_device("auto", n, "idp", t)[0].on_device for n in range(8, 25)] == \
        [where_to_run("auto", s, n, threads=t, work="split")[0] == "device" for s, n in zip(splits, range(8, 25))]


def test_the_registry_holds_each_engine_with_its_rates_and_capabilities():
    assert {s.name for s in registry.specs()} >= {"numpy", "cupy"}
    assert registry.for_place(False) is CPU and registry.for_place(True) is GPU
    assert not CPU.on_device and GPU.on_device and GPU.dense_first and not CPU.dense_first
    assert CPU.start_s == 0 < GPU.start_s and CPU.probe() is None
    for spec in (CPU, GPU):
        assert set(spec.rates) == set(registry.WORK)
    engine = CPU.make(threads=3, gpu_mem_limit=10)  # options the factory does not take are left out
    assert engine.spec is CPU and engine.threads == 3 and engine.budget is None
    import numpy as np
    assert CPU.array_module() is np
    assert registry.ran_on_host("numpy") and not registry.ran_on_host("cupy") and not registry.ran_on_host("none")
    # the prediction is the spec's rate: entries per second, a cost per step, the start when cold
    rate = GPU.rates["join-sum"]
    assert GPU.predict_s(10 ** 9, 3, started=False) == 10 ** 9 / rate.per_s + 3 * rate.step_s + GPU.start_s
    assert predict_s(10 ** 9, 3, "cupy") == GPU.predict_s(10 ** 9, 3)


@pytest.mark.parametrize("count, usable", [(1, True), (0, False)])
def test_the_gpu_probe_reads_cuda(monkeypatch, count, usable):
    """The device spec's probe on a fake CuPy (as tests/test_suite.py fakes it): a device, or a reason."""
    import types
    runtime_ns = types.SimpleNamespace(getDeviceCount=lambda: count)
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=runtime_ns)))
    monkeypatch.setenv("CUPY_NVRTC_USE_PCH", "1")  # import_cupy sets it
    assert (GPU.probe() is None) == usable
    if not usable:
        assert GPU.probe() == "no CUDA device found"


def test_json_output_says_why_auto_ran_on_the_host(tmp_path):
    """--json prints the device note on stderr when --device auto kept the run on the host (a
    capability of the engine the result names, not its name); not when the CPU was asked for."""
    from click.testing import CliRunner

    from gpusolve.cli.group import main
    path = tmp_path / "r.wcsp"
    made = CliRunner().invoke(main, ["generate", "random", "-n", "8", "-d", "4", "--seed", "3", "-o", str(path)])
    assert made.exit_code == 0
    auto = CliRunner().invoke(main, ["solve", str(path), "--json"])
    cpu = CliRunner().invoke(main, ["solve", str(path), "--json", "--device", "cpu"])
    assert auto.exit_code == cpu.exit_code == 0
    assert json.loads(auto.stdout)["engine"] == "numpy"
    assert "note: auto: the plan's" in auto.stderr and "running on the CPU" in auto.stderr
    assert "note:" not in cpu.stderr
