"""The one kernel loader (cuda/loader.py): a kernel per source, options and device, prebuilt cubins
where they run, and the seconds of every load charged to the process and to the engine.

On the CPU against a fake CuPy (as tests/test_suite.py fakes it); on a GPU against CUDA."""
import sys
import types

import numpy as np
import pytest

from gpusolve.cuda import cubins, loader, runtime
from gpusolve.limits import DEFAULT


class FakeCupy:
    """What the loader uses of CuPy: the current device, its properties, RawKernel and RawModule.
    Counts compilations and cubin loads."""

    def __init__(self, capability="90"):
        self.device = 0
        self.compiled, self.modules = [], []
        fake = self

        class RawKernel:
            def __init__(self, source, name, options=()):
                self.source, self.name, self.options = source, name, options

            def compile(self):
                fake.compiled.append((self.name, self.options, fake.device))

        class RawModule:
            def __init__(self, path):
                fake.modules.append(path)

            def get_function(self, name):
                return ("from cubin", name)
        self.RawKernel, self.RawModule = RawKernel, RawModule
        props = {"name": b"Fake GPU", "multiProcessorCount": 4}
        self.cuda = types.SimpleNamespace(
            runtime=types.SimpleNamespace(getDevice=lambda: fake.device, getDeviceProperties=lambda i: props),
            Device=lambda i: types.SimpleNamespace(compute_capability=capability))


@pytest.fixture
def fake(monkeypatch, tmp_path):
    cupy = FakeCupy()
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setattr(loader, "_KERNELS", {})
    monkeypatch.setattr(loader, "PROCESS", loader.Account())
    monkeypatch.setattr(cubins, "FOLDER", tmp_path)  # no cubin ships unless a test writes one
    monkeypatch.setenv("CUPY_NVRTC_USE_PCH", "1")  # import_cupy sets it
    runtime.device_info.cache_clear()
    yield cupy
    runtime.device_info.cache_clear()
    loader.charge_to(None)


def test_a_kernel_is_compiled_once_per_source_options_and_device(fake):
    a = loader.load("src a", "k")
    assert loader.load("src a", "k") is a and fake.compiled == [("k", (), 0)]
    assert loader.loaded("src a") and not loader.loaded("src a", ("-std=c++17",))
    b = loader.load("src a", "k", ("-std=c++17",))
    c = loader.load("src b", "k")
    assert len({id(a), id(b), id(c)}) == 3 and len(fake.compiled) == 3
    fake.device = 1  # another GPU of the process: its own copy
    assert loader.load("src a", "k") is not a and fake.compiled[-1] == ("k", (), 1)
    assert loader.PROCESS.compiled == 4 and loader.PROCESS.prebuilt == 0


def test_a_key_stands_for_the_source(fake):
    """The engines' generated kernels are keyed by their generator's arguments, known before the source."""
    k = loader.load("generated source", "be_1", key=("fused", 3))
    assert loader.loaded(("fused", 3)) and not loader.loaded("generated source")
    assert loader.load("never generated again", "be_1", key=("fused", 3)) is k and len(fake.compiled) == 1


def test_a_prebuilt_cubin_is_loaded_instead_of_compiling_where_it_runs(fake):
    cubins.path("be_generic_x", "sm_90").write_bytes(b"\x7fELF")
    assert loader.load("source", "be_generic_x") == ("from cubin", "be_generic_x")
    assert fake.modules == [str(cubins.path("be_generic_x", "sm_90"))] and not fake.compiled
    # other options than the cubin's build: compiled, never the cubin
    assert loader.load("source", "be_generic_x", ("-std=c++17",)) != ("from cubin", "be_generic_x")
    assert len(fake.modules) == 1 and len(fake.compiled) == 1
    assert (loader.PROCESS.prebuilt, loader.PROCESS.compiled) == (1, 1)


def test_load_seconds_are_charged_to_the_process_and_the_charged_account(fake, monkeypatch):
    clock = iter(range(100))
    monkeypatch.setattr(loader.time, "perf_counter", lambda: float(next(clock)))  # each load takes 1 s
    loader.load("one", "k")
    engine = loader.Account()
    loader.charge_to(engine)
    loader.load("two", "k")
    loader.load("two", "k")  # cached: no charge
    loader.load("three", "k")
    assert (engine.compile_s, engine.compiled) == (2.0, 2)
    assert (loader.PROCESS.compile_s, loader.PROCESS.compiled) == (3.0, 3)
    loader.charge_to(None)
    loader.load("four", "k")
    assert engine.compile_s == 2.0 and loader.PROCESS.compile_s == 4.0


def test_the_engines_kernels_go_through_the_loader(fake):
    """Every kernel source of the engines: launched through kernels.load, so through one cache."""
    from gpusolve.engines import kernels, row_kernels
    for spec in (kernels.generic_source("i64", False), kernels.assign_source("f64"), row_kernels.sample_source(),
                 row_kernels.bisect_source(), row_kernels.join_gather_source("i64"), row_kernels.segment_min_source("f64"),
                 row_kernels.pieces_gather_source(8)):
        k = kernels.load(spec)
        assert k.source == spec.source and loader.loaded(spec.key) and kernels.load(spec) is k
    assert len(fake.compiled) == 7


def test_alldiff_and_csg_kernels_go_through_the_loader(fake):
    from gpusolve.consistency import alldiff_kernel
    from gpusolve.csg import gpu as csg_gpu
    k = alldiff_kernel._kernel(10, 12, DEFAULT)
    assert k.source == alldiff_kernel.kernel_source(10, 12) and loader.loaded(k.source)
    f32, f64 = csg_gpu._kernel("float32"), csg_gpu._kernel("float64")
    assert f32 is not f64 and csg_gpu._kernel("float32") is f32 and f32.options == ("-std=c++17",)
    assert loader.PROCESS.compiled == 3


def test_device_budget_is_one_share_of_the_free_memory(monkeypatch, fake):
    pool = types.SimpleNamespace(free_bytes=lambda: 1000)
    fake.get_default_memory_pool = lambda: pool
    fake.cuda.runtime.memGetInfo = lambda: (9000, 20000)
    room = int(10000 * runtime.DEVICE_MEMORY_SHARE)
    assert runtime.device_budget() == room
    assert runtime.device_budget(room // 2) == room // 2 and runtime.device_budget(10 ** 12) == room
    assert runtime.device_info(0) == ("Fake GPU", 4, "90")


# -- on a GPU ----------------------------------------------------------------------

@pytest.mark.gpu
def test_gpu_loader_caches_uses_cubins_and_counts_seconds(cupy, monkeypatch):
    """A fresh kernel is compiled once and its seconds counted; a shape-generic kernel loads from its
    cubin where one ships for the device; a cached one costs nothing; both launch."""
    from gpusolve.engines import kernels
    monkeypatch.setattr(loader, "_KERNELS", {})
    account = loader.Account()
    loader.charge_to(account)
    try:
        source = 'extern "C" __global__ void gpusolve_test_fill(long long* a, long long v) { a[threadIdx.x] = v; }'
        fill = loader.load(source, "gpusolve_test_fill")
        assert loader.load(source, "gpusolve_test_fill") is fill
        assert account.compiled == 1 and account.compile_s > 0
        a = cupy.zeros(32, dtype=cupy.int64)
        fill((1,), (32,), (a, np.int64(7)))
        assert int(a.sum()) == 7 * 32
        spec = kernels.generic_source("i64", False)
        capability = runtime.device_info(cupy.cuda.runtime.getDevice())[2]
        shipped = cubins.find(spec.name, capability) is not None
        kernels.load(spec)
        assert (account.prebuilt, account.compiled) == ((1, 1) if shipped else (0, 2))
    finally:
        loader.charge_to(None)


@pytest.mark.gpu
def test_gpu_engine_reports_what_its_run_loaded(cupy, monkeypatch):
    """The engine's compile_s counts every kernel its run loads, the sparse path's included."""
    from gpusolve.engines import kernels, row_kernels
    from gpusolve.engines.cupy_engine import CupyEngine
    monkeypatch.setattr(loader, "_KERNELS", {})
    engine = CupyEngine()
    try:
        kernels.load(row_kernels.segment_min_source("i64"))  # as sparse.segment_min launches it
        assert engine.kernels.compiled == 1 and engine.compile_s == engine.kernels.compile_s > 0
    finally:
        loader.charge_to(None)
