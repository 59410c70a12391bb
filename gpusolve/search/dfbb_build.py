"""The compiled search core built ahead of time: numba's pycc turns `dfbb_search.run` and `replay`, and
VAC's passes (`vac_kernels`), into an extension module, which a process loads in milliseconds, where
numba's import and the load of its on-disk cache take about half a second (more than the whole proof of
CELAR6-SUB0).

The Makefile's setup builds it (`python -m gpusolve.search.dfbb_build`, about 10 s). Its name is a digest
of the core's sources, the interpreter and NumPy, so a change to any of them leaves it unused, and
`entry_points` takes numba's JIT (cached on disk) until it is built again.
"""
from __future__ import annotations

import functools
import importlib.util
import inspect
import os
import sys
import sysconfig
import tempfile
import time
import warnings
from pathlib import Path
from typing import Callable, NamedTuple

from gpusolve.search.dfbb_sources import HERE, name

VECTOR, MATRIX, SCALAR = "i8[::1]", "i8[:, ::1]", "i8"
MATRICES = {"U0", "trail", "qs"}
SCALARS = {"c00", "top", "node_limit", "depth"}
TABLES = {"run32": "i4[::1]", "run64": "i8[::1]"}  # binary tables are int32 where every cost fits
VAC_PASSES = ("ac_rounds", "owed_units", "step_size", "apply_step")  # vac_kernels.SIGNATURES' keys


def folders() -> list[Path]:
    """Where the module may lie: beside the sources, as numba's cache, else in the user's cache."""
    user = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpusolve"
    return [HERE / "__pycache__", user]


def built() -> Path | None:
    """The built module's file for these sources, or None; not loaded."""
    module_name = name()
    return next((path for folder in folders()
                 if (path := folder / (module_name + sysconfig.get_config_var("EXT_SUFFIX"))).is_file()), None)


def ahead_of_time():
    """The built module for these sources, or None."""
    path = built()
    if path is None:
        return None
    spec = importlib.util.spec_from_file_location(name(), path)
    try:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except ImportError:  # not a module for this machine: the JIT serves
        return None
    return module


class Core(NamedTuple):
    run32: Callable  # the search over int32 binary tables
    run64: Callable  # over int64 ones
    replay: Callable
    ac_rounds: Callable  # VAC's passes (vac_kernels)
    owed_units: Callable
    step_size: Callable
    apply_step: Callable
    how: str  # how they were compiled


@functools.cache
def entry_points() -> Core:
    module = ahead_of_time()
    if module is not None:
        return Core(module.run32, module.run64, module.replay,
                    *(getattr(module, export) for export in VAC_PASSES), "ahead of time")
    return jit_core()


def jit_core() -> Core:
    from gpusolve.inference import vac_kernels  # numba's import and cache load here
    from gpusolve.search.dfbb_search import replay, run
    return Core(run, run, replay, *(getattr(vac_kernels, export) for export in VAC_PASSES), "numba JIT")


def argument_types(function, table: str = VECTOR) -> list[str]:
    """pycc's argument types of a core entry point, from its parameters' names: every array is C-contiguous
    int64 but the binary tables, `table`."""
    return [MATRIX if p in MATRICES else SCALAR if p in SCALARS else table if p == "T" else VECTOR
            for p in inspect.signature(function).parameters]


def build(folder: Path | None = None) -> Path:
    """Compile the module into `folder` (the first writable of `folders()`) and return its path. The file
    appears whole (renamed into place), so a process starting meanwhile loads it or takes the JIT."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pycc's pending deprecation
        from numba.pycc import CC, compiler
    from gpusolve.inference import vac_kernels
    from gpusolve.search.dfbb_search import replay, run
    folder = folder or next(f for f in folders() if _writable(f))
    folder.mkdir(parents=True, exist_ok=True)
    module_name = name()
    plain = compiler.Flags

    def releasing_gil():  # pycc's wrappers hold the GIL; the core searches beside other phases' threads
        flags = plain()
        flags.release_gil = True
        return flags

    compiler.Flags = releasing_gil
    try:
        with tempfile.TemporaryDirectory(dir=folder) as work:
            cc = CC(module_name)
            cc.output_dir = work
            cc.verbose = False
            for export, table in TABLES.items():
                cc.export(export, f"i8({', '.join(argument_types(run.py_func, table))})")(run.py_func)
            cc.export("replay", f"void({', '.join(argument_types(replay.py_func))})")(replay.py_func)
            for export in VAC_PASSES:
                cc.export(export, vac_kernels.SIGNATURES[export])(getattr(vac_kernels, export).py_func)
            cc.compile()
            built = Path(work) / (module_name + sysconfig.get_config_var("EXT_SUFFIX"))
            path = folder / built.name
            os.replace(built, path)
        for stale in folder.glob("core_*" + sysconfig.get_config_var("EXT_SUFFIX")):  # built from other sources
            if stale != path:
                stale.unlink(missing_ok=True)
    finally:
        compiler.Flags = plain
    return path


def _writable(folder: Path) -> bool:
    while not folder.exists():
        folder = folder.parent
    return os.access(folder, os.W_OK)


def main() -> int:
    began = time.perf_counter()
    try:
        path = build()
    except Exception as error:  # noqa: BLE001 - no C compiler, no write access: the JIT still serves
        print(f"gpusolve: the search core was not built ahead of time ({type(error).__name__}: {error}); "
              "searches compile it with numba's JIT instead", file=sys.stderr)
        return 1
    print(f"gpusolve: built the search core ahead of time in {time.perf_counter() - began:.1f} s: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
