"""Device code built ahead of time for the kernels every plan may need (engines/kernels.py:
shape_generic_specs); loader.py loads a kernel from here when its cubin runs on the device.

On a new machine CuPy compiles each kernel through NVRTC the first time (0.4-0.5 s of a fresh
process that eliminates on the GPU, bench/gpube.py), and even with its disk cache warm it loads
NVRTC and compiles an empty file to key that cache. A kernel found here is loaded from its
cubin instead, without NVRTC. A file is named after its kernel, whose name holds a hash of the
source, and its architecture: a kernel whose source changed is never matched with old code
(tests/test_kernels.py fails until `make cubins` rebuilds them on a machine with CuPy).

A cubin for sm_XY runs on devices of compute capability X.Z with Z >= Y: sm_80 serves
Ampere and Ada, sm_90 Hopper; other devices compile as before.

    python -m gpusolve.engines.kernels      # writes gpusolve/cuda/cubin/*.cubin (make cubins)
"""
from __future__ import annotations

from pathlib import Path

FOLDER = Path(__file__).with_name("cubin")
ARCHS = ("sm_80", "sm_90")
OPTIONS = ("-ftz=true",)  # CuPy's own for RawKernel, so prebuilt and compiled kernels are the same code


def path(name: str, arch: str) -> Path:
    return FOLDER / f"{name}.{arch}.cubin"


def find(name: str, capability: str) -> Path | None:
    """The prebuilt cubin of kernel `name` that runs on a device of `capability` (CuPy's "90"), or None."""
    major, minor = int(capability[:-1]), int(capability[-1])
    usable = [a for a in ARCHS if int(a[3:-1]) == major and int(a[-1]) <= minor]
    for arch in sorted(usable, reverse=True):
        if path(name, arch).is_file():
            return path(name, arch)
    return None


def build(specs, archs=ARCHS) -> list[Path]:
    """Compile kernels `specs` (each with a name and a source) for `archs` with NVRTC (no GPU needed)
    into FOLDER, removing cubins of kernels that are not among them."""
    from cupy_backends.cuda.libs import nvrtc

    FOLDER.mkdir(exist_ok=True)
    written = []
    for spec in specs:
        for arch in archs:
            program = nvrtc.createProgram(spec.source, spec.name + ".cu", [], [])
            try:
                nvrtc.compileProgram(program, [*OPTIONS, f"-arch={arch}"])
                code = nvrtc.getCUBIN(program)
            finally:
                nvrtc.destroyProgram(program)
            path(spec.name, arch).write_bytes(code)
            written.append(path(spec.name, arch))
    for stale in set(FOLDER.glob("*.cubin")) - set(written):
        stale.unlink()
    return written
