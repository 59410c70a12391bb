"""A DP run on one engine: its options, the memory it will hold, the device, the `Table` holding f,
and `solve`.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

from gpusolve.csg.bounds import structure_and_bounds
from gpusolve.csg.dp import ALGORITHMS, BLOCK, level_masks, level_splits, level_step, total_splits
from gpusolve.csg.gpu import cuda_level
from gpusolve.csg.values import GEN_CHUNK, CSGError, check_agents, popcount
from gpusolve.host import BudgetError

# NumPy loads in the functions that use it: the command line reads the names below without it.

PRECISIONS = {"single": "float32", "double": "float64"}  # f's dtype; "auto": single on the GPU, else double


def predict_memory(n: int, precision: str, on_gpu: bool, threads: int = 1, shares: bool = False) -> dict[str, int]:
    """Bytes the run holds at its peak: host (the float64 input, and f for the CPU engine) and device.

    With `shares` (a Dask worker's table) the GPU also holds every mask's size and a level's masks."""
    item = {"single": 4, "double": 8}[precision]
    size = 1 << n
    work = BLOCK * 8 * 8 * (1 if on_gpu else threads)  # a block's temporaries, per thread
    level = math.comb(n, n // 2) * 8 * 2  # the largest level's masks, and its row maxima (or shares)
    if on_gpu:
        return {"host": size * 8 + work + (level if shares else 0),
                "device": size * item + work + (size + level if shares else 0)}
    return {"host": size * 8 + size * item + size + level + work, "device": 0}


def check_memory(n: int, precision: str, on_gpu: bool, host_budget: int, device_budget: int | None,
                 threads: int = 1, shares: bool = False) -> dict:
    """The prediction, or BudgetError naming what would fit."""
    need = predict_memory(n, precision, on_gpu, threads, shares)
    from gpusolve.host import fmt_bytes
    if need["host"] > host_budget:
        raise BudgetError(f"n = {n} needs {fmt_bytes(need['host'])} of host memory (the 2^{n} input values "
                          f"in float64{'' if on_gpu else ' and f'}), more than the {fmt_bytes(host_budget)} "
                          f"budget; raise --mem-limit on a larger machine"
                          + ("" if on_gpu else ", or run on a GPU (f then lives on the device)")
                          + (", or use --precision single (f in 4 bytes a coalition)" if precision == "double" and
                             not on_gpu else ""))
    if on_gpu and device_budget is not None and need["device"] > device_budget:
        other = "single" if precision == "double" else None
        hint = f"use --precision {other} (half the memory), " if other else ""
        raise BudgetError(f"n = {n} needs {fmt_bytes(need['device'])} of device memory (f: 2^{n} {precision}-"
                          f"precision values), more than the {fmt_bytes(device_budget)} budget; {hint}"
                          f"a device with more memory, or --device cpu")
    return need


@dataclass
class Options:
    algorithm: str = "idp"
    device: str = "auto"
    precision: str = "auto"
    time_limit: float | None = None
    mem_limit: int | None = None  # host bytes; None: available RAM
    gpu_mem_limit: int | None = None  # device bytes; None: free device memory
    threads: int | None = None  # the CPU engine's threads; None: one per core this process may use


@dataclass
class Result:
    file: str
    task: str
    status: str  # optimal | bounded
    lower_bound: float
    upper_bound: float
    structure: list[list[int]]  # coalitions as sorted agent indices (agent i = bit i of a mask)
    value: float  # the structure's value, summed from the input in float64
    n: int
    algorithm: str
    precision: str  # single or double: what ran
    time_s: float
    method: str = ""  # as the literature names it, with the precision
    phases: dict[str, float] = field(default_factory=dict)
    engine: str = ""
    device_note: str = ""
    levels_done: int = 0  # sizes whose every coalition has been evaluated
    splits: int = 0  # split evaluations done
    splits_per_s: float = 0.0
    peak_bytes: dict[str, int] = field(default_factory=dict)
    trace: list[list] = field(default_factory=list)  # [time_s, lower, upper, phase]
    workers: int = 1  # Dask workers that shared the levels (solve_on_workers)
    worker_compute_s: list[float] = field(default_factory=list)  # each worker's seconds in level steps

    def to_json(self) -> dict:
        return asdict(self)


def pick_device(device: str, n: int, algorithm: str, threads: int | None, here: bool = True):
    """(engine spec, note) for --device: the solver's device policy (engines/select.py) on the DP's
    split evaluations, a step per level; --device gpu takes the GPU whatever n. `here`: the DP runs
    in this process (else on Dask workers)."""
    from gpusolve.cuda import runtime
    from gpusolve.engines.select import choose
    spec, note = choose(device, total_splits(n, algorithm), n, 0 if device == "gpu" else None, threads, "split", here)
    if spec.on_device and here:
        runtime.mark_started()
        note += "; " + runtime.device_info(runtime.import_cupy().cuda.runtime.getDevice())[0]
    return spec, note


class Table:
    """The DP's state on one engine: f (2^n values) and what a level step and the answer need.

    `solve` holds one; under `solve_on_workers` each Dask worker holds one, f whole, and computes a
    share of each level. Raises BudgetError (memory), DeviceError (--device gpu without one),
    CSGError.
    """

    def __init__(self, values: np.ndarray, options: Options, threads: int | None = None, shares: bool = False):
        from gpusolve.host import cores
        from gpusolve.host import available_memory
        n = values.size.bit_length() - 1
        check_agents(n)
        if options.algorithm not in ALGORITHMS:
            raise CSGError(f"unknown algorithm {options.algorithm!r}")
        self.values, self.options, self.n = values, options, n
        if options.precision not in ("auto", *PRECISIONS):
            raise CSGError(f"unknown precision {options.precision!r}")
        self.threads = options.threads or threads or cores()
        spec, self.note = pick_device(options.device, n, options.algorithm, self.threads)
        self.xp, self.engine, self.on_gpu = spec.array_module(), spec.name, spec.on_device
        xp = self.xp
        self.precision = precision_on(options.precision, self.on_gpu)
        if not self.on_gpu:
            self.note += f"; {self.threads} thread{'s' if self.threads > 1 else ''}"
        device_budget = None
        if self.on_gpu:
            from gpusolve.cuda.runtime import device_budget as room
            device_budget = room(options.gpu_mem_limit)
        host_budget = options.mem_limit if options.mem_limit is not None else available_memory() + values.nbytes
        self.need = check_memory(n, self.precision, self.on_gpu, host_budget, device_budget, self.threads, shares)
        self.dtype = PRECISIONS[self.precision]
        self.f = xp.empty(1 << n, dtype=self.dtype)
        for lo in range(0, 1 << n, 1 << 26):  # converted and uploaded in slices: no full-size host copy
            self.f[lo:lo + (1 << 26)] = xp.asarray(values[lo:lo + (1 << 26)].astype(self.dtype))
        self.sizes = None
        self.level_at = (0, None)  # (k, the k-coalitions)
        self.last_share = None  # (k, ranks lo, hi) of the share this worker computed last
        self.sync()

    def sync(self) -> None:
        if self.on_gpu:
            self.xp.cuda.get_current_stream().synchronize()

    def masks(self, k: int):
        """The k-coalitions in colex (increasing) order: the CPU engine's rows, a worker's shares."""
        xp, n = self.xp, self.n
        if self.sizes is None:
            self.sizes = xp.empty(1 << n, dtype=xp.uint8)
            for lo in range(0, 1 << n, GEN_CHUNK):
                self.sizes[lo:lo + GEN_CHUNK] = popcount(xp, xp.arange(lo, min(lo + GEN_CHUNK, 1 << n), dtype=xp.int64))
        if self.level_at[0] != k:
            self.level_at = (k, None)  # the last level's masks go before the next's are made
            self.level_at = (k, level_masks(xp, self.sizes, k))
        return self.level_at[1]

    def level(self, k: int, lo: int = 0, hi: int | None = None, stop: Callable[[], bool] = lambda: False,
              advance: Callable[[int], None] | None = None) -> bool:
        """Level k for the k-coalitions of colex ranks lo..hi-1 (default: all); False when stopped."""
        if self.on_gpu:
            return cuda_level(self.f, self.n, k, self.options.algorithm, stop, advance, lo, hi)
        import numpy as np
        return level_step(np, self.f, self.masks(k)[lo:hi], self.n, k, self.options.algorithm, stop=stop,
                          advance=advance, threads=self.threads)

    def share(self, k: int, lo: int, hi: int) -> np.ndarray:
        """f of the k-coalitions of ranks lo..hi-1, on the host: what a worker sends the others."""
        self.last_share = (k, lo, hi)
        part = self.f[self.masks(k)[lo:hi]]
        return part.get() if self.on_gpu else part

    def receive(self, shares) -> None:
        """Write the other workers' shares (tuples from `share` via _level_on_worker) into f."""
        for k, lo, part, *_ in shares:
            if part is not None and (k, lo, lo + part.size) != self.last_share:
                self.f[self.masks(k)[lo:lo + part.size]] = self.xp.asarray(part)

    def answer(self, done: int) -> dict:
        """The best structure found, its value from the input, status and upper bound, once the DP
        has finished the sizes up to `done`."""
        self.sizes, self.level_at = None, (0, None)  # room for the recovery's temporaries
        return {**structure_and_bounds(self.xp, self.f, self.n, self.values, self.dtype, done),
                "precision": self.precision}


def precision_on(precision: str, on_gpu: bool) -> str:
    """--precision resolved: auto is single on the GPU (half the memory and traffic), double on the CPU
    engine (as fast there, and a finished run is optimal)."""
    return precision if precision != "auto" else "single" if on_gpu else "double"


def result_of(file: str, options: Options, n: int, answer: dict, t0: float, phases: dict, done: int, splits: int,
            **fields) -> Result:
    phases["recover"] = answer["recover_s"]
    value, upper, status = answer["value"], answer["upper"], answer["status"]
    elapsed = time.perf_counter() - t0 + sum(v for k, v in phases.items() if k in ("read", "generate", "cluster"))
    precision = answer["precision"]
    return Result(file=file, task="CSG", status=status, lower_bound=value, upper_bound=upper,
                  structure=[[i for i in range(n) if c >> i & 1] for c in answer["masks"]], value=value, n=n,
                  algorithm=options.algorithm, precision=precision, time_s=elapsed, phases=phases,
                  method=f"{options.algorithm.upper()} over subsets, {precision} precision",
                  levels_done=done, splits=splits, splits_per_s=splits / phases["dp"] if phases["dp"] > 0 else 0.0,
                  trace=[[elapsed, value, upper, "dp" if status == "optimal" else f"dp to size {done}"]], **fields)


def stopper(t0: float, options: Options, stop: Callable[[], bool] | None) -> Callable[[], bool]:
    deadline = None if options.time_limit is None else t0 + options.time_limit
    return lambda: (stop is not None and stop()) or (deadline is not None and time.perf_counter() >= deadline)


def solve(values: np.ndarray, options: Options, file: str = "", phases: dict | None = None,
          progress: Callable[[int], Callable[[int], None]] | None = None,
          stop: Callable[[], bool] | None = None) -> Result:
    """The best coalition structure for `values` (2^n floats, mask order), with bounds on the optimum.

    Raises as Table does. With a time limit or a stop request the DP ends after the launch (GPU) or
    the blocks (CPU) in progress and the answer is `bounded`.
    """
    t0 = time.perf_counter()
    phases = dict(phases or {})
    stopped = stopper(t0, options, stop)
    t = time.perf_counter()
    table = Table(values, options)
    n = table.n
    phases["setup"] = time.perf_counter() - t

    advance = progress(total_splits(n, options.algorithm)) if progress else None
    t = time.perf_counter()
    done, splits = 1, 0
    for k in range(2, n + 1):
        if stopped() or not table.level(k, stop=stopped, advance=advance):
            break
        done = k
        splits += math.comb(n, k) * level_splits(n, k, options.algorithm)
    table.sync()
    phases["dp"] = time.perf_counter() - t
    return result_of(file, options, n, table.answer(done), t0, phases, done, splits, engine=table.engine,
                   device_note=table.note, peak_bytes=table.need)
