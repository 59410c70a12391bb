"""Engines by name, as opt_einsum's backends/dispatch.py holds its backends.

A spec says how to make an engine (imported only then), how fast it does each kind of work, whether
this process can run it, and what it can do. The device policy (select.py) and every caller that
places work read specs and engines' `spec`; none checks an engine's name.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable, Mapping

from gpusolve.cuda import runtime
from gpusolve.plan.buckets import CHUNK_ENTRIES, THREADS_MAX

# The kinds of work a rate is given for, and how a prediction's note names their size.
WORK = {"join-sum": "the plan's {:,} joint entries",  # bucket elimination: joint-table entries, a step per mini-bucket
        "split": "{:,} split evaluations"}  # CSG's dynamic programming: a step per level


@dataclass(frozen=True)
class Rate:
    """How fast an engine does one kind of work: items per second on one host thread, seconds per step
    (launches, syncs), and what each thread past the first adds, as a share of one thread's (up to
    THREADS_MAX threads, each taking at least `chunk` items)."""

    per_s: float
    step_s: float = 0.0
    thread_gain: float = 0.0
    chunk: int = 1

    def seconds(self, items: int, steps: int = 1, threads: int = 1) -> float:
        used = min(threads, THREADS_MAX, max(1, items // self.chunk))
        return items / (self.per_s * (1 + self.thread_gain * (used - 1))) + steps * self.step_s


@dataclass(frozen=True)
class EngineSpec:
    """An engine: its factory, rates, availability probe and capabilities."""

    name: str  # what results report
    factory: str  # "module:Class", imported when an engine is made
    options: tuple[str, ...]  # the keyword options the factory takes (threads, gpu_mem_limit)
    rates: Mapping[str, Rate]  # per kind of work (WORK)
    probe: Callable[[], str | None]  # why this process cannot run the engine; None when it can
    array_module: Callable[[], object]  # where its tables live: numpy or cupy
    on_device: bool = False  # tables in device memory: a device budget, CUDA kernels, GPU workers
    start_s: float = 0.0  # cost before its first step in a process where it has not started
    streams: bool = False  # messages beyond its device budget are streamed through host memory
    sparse: bool = True  # sparse tables (engines/sparse.py)
    dense_first: bool = False  # --tables auto keeps a dense plan that fits: its sparse path costs compilations

    def make(self, **options):
        """The engine, given the options its factory takes among `options`."""
        module, _, cls = self.factory.partition(":")
        return getattr(importlib.import_module(module), cls)(**{k: v for k, v in options.items() if k in self.options})

    def predict_s(self, items: int, steps: int = 1, threads: int = 1, work: str = "join-sum",
                  started: bool = True) -> float:
        """Seconds for `items` of `work` in `steps`, on `threads` host threads, plus the start unless `started`."""
        return self.rates[work].seconds(items, steps, threads) + (0.0 if started else self.start_s)


def _numpy():
    import numpy
    return numpy


# What each CPU thread past the first adds to the NumPy engine's rate, as a share of one thread's
# (random n=18 and n=20 networks on 16 Xeon cores: 5.3x and 6.6x the one-thread rate; CSG's level
# step on the H100 host's 16 threads: 7.1e8-8.0e8 splits/s, docs/csg.md, against 1.5e8 on one).
THREAD_GAIN = 0.3

_ENGINES: dict[str, EngineSpec] = {}


def register(spec: EngineSpec) -> None:
    _ENGINES[spec.name] = spec


def get(name: str) -> EngineSpec:
    return _ENGINES[name]


def specs() -> list[EngineSpec]:
    return list(_ENGINES.values())


def for_place(on_device: bool) -> EngineSpec:
    """The engine that runs work on the device (True) or on the host."""
    return next(s for s in _ENGINES.values() if s.on_device == on_device)


def ran_on_host(name: str) -> bool:
    """Whether the engine a result names kept its tables in host memory (False for "none": no engine ran)."""
    return name in _ENGINES and not _ENGINES[name].on_device


# Rates: joint-table entries per second and a fixed cost per mini-bucket (launches, syncs;
# bench/cpu_engine.py, bench/gpube.py's warm process); CSG's split evaluations per second (the
# blocked level step: 1.5e8 per CPU-second; the H100: 5.0e11 at n = 21, 7.7e11-1.1e12 for n = 22..28,
# docs/csg.md). The GPU's start where CUDA has not started in the process: CuPy's import and the
# CUDA context (0.60 s on an H100, bench/startup.py).
register(EngineSpec("numpy", "gpusolve.engines.numpy_engine:NumpyEngine", ("threads",),
                    {"join-sum": Rate(1.5e8, 5e-5, THREAD_GAIN, CHUNK_ENTRIES),
                     "split": Rate(1.5e8, 0.0, THREAD_GAIN)},
                    probe=lambda: None, array_module=_numpy))
register(EngineSpec("cupy", "gpusolve.engines.cupy_engine:CupyEngine", ("gpu_mem_limit",),
                    {"join-sum": Rate(5e10, 5e-4), "split": Rate(5e11)},
                    probe=lambda: runtime.gpu_unavailable_reason(), array_module=lambda: runtime.import_cupy(),
                    on_device=True, start_s=0.6, streams=True, dense_first=True))
