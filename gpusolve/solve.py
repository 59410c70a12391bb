"""Solving: choose a plan within the memory budget, run it on an engine, assign values, report bounds.

Phases: order -> plan -> eliminate (the engine, eliminate.py) -> assign.
"""
from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable


from . import graph, probabilistic
from .engines import Engine, select_engine, sparse
from .eliminate import TimeLimit, assign, run_plan
from .model import Problem
from .plan import Plan, build_plan, fmt_bytes
from .preprocess import lower_top, preprocess

# The cheap mini-bucket run that finds an incumbent for bounded sparse BE may use this much memory.
INCUMBENT_BYTES = 256 << 20


PROBABILISTIC = ("PR", "MAR")


class BudgetError(RuntimeError):
    """The plan asked for does not fit the memory budget (exit code 3)."""


@dataclass
class Options:
    z: int | None = None
    order: str = "minfill"  # minfill | mindegree | path to an order file
    device: str = "auto"
    time_limit: float | None = None
    mem_limit: int | None = None  # bytes; None: available RAM
    task: str | None = None  # None: the file's own (WCSP or MPE); PR or MAR for .uai files
    tables: str = "auto"  # auto | dense | sparse: table kind per mini-bucket (engines/sparse.py)
    gpu_mem_limit: int | None = None  # bytes of device memory before the GPU engine streams; None: free memory


@dataclass
class Result:
    file: str
    task: str
    status: str  # optimal | bounded | infeasible | timeout | error
    lower_bound: float | int | None
    upper_bound: float | int | None
    assignment: list[int] | None
    z: int | None
    induced_width: int | None
    time_s: float
    phases: dict[str, float] = field(default_factory=dict)
    engine: str = ""
    device_note: str = ""
    exact: bool = False
    peak_bytes: int = 0
    message: str = ""
    marginals: list[list[float]] | None = None  # MAR: one distribution per variable, file order
    largest_rows: int = 0  # rows of the largest sparse message (0: no sparse table)

    def to_json(self) -> dict:
        return asdict(self)


def available_memory() -> int:
    """MemAvailable from /proc/meminfo, else physical memory."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def elimination_order(problem: Problem, how: str, g=None) -> list[int]:
    if how in graph.ORDERINGS:
        return graph.elimination_order(problem, how, g)
    return graph.read_order(how, len(problem.variables))


def choose_plan(problem: Problem, order: list[int], z: int | None, budget: int,
                n_components: int = 1, tables: str = "dense") -> Plan:
    """Exact BE when it fits (or MBE(z) when z is given), else the largest z that fits.

    With tables auto, a plan that does not fit with its per-bucket choice is tried all sparse
    (its bound on rows may fit where dense tables do not) before mini-buckets.
    """
    max_arity = max((f.arity for f in problem.functions), default=0)
    if z is not None and z < max(max_arity, 1):
        raise ValueError(f"--z {z} is smaller than the largest arity ({max_arity}); z counts every "
                         f"variable of a mini-bucket, the eliminated one included")
    plan = build_plan(problem, order, z, n_components, tables)
    if plan.peak_bytes <= budget:
        return plan
    if tables == "auto":
        all_sparse = build_plan(problem, order, z, n_components, "sparse")
        if all_sparse.peak_bytes <= budget:
            return all_sparse
    fitting = largest_fitting_z(problem, order, budget, max_arity, plan.induced_width + 1, n_components)
    if z is None and fitting is not None:
        return fitting
    big = plan.largest()
    advice = (f"the largest z that fits is {fitting.z}" if fitting is not None
              else "no mini-bucket bound fits either")
    what = "exact bucket elimination" if z is None else f"MBE(z={z})"
    raise BudgetError(
        f"{what} needs {fmt_bytes(plan.peak_bytes)} but the memory budget is {fmt_bytes(budget)}; "
        f"largest bucket: variable {big.var}, {len(big.scope)} separator variables, "
        f"{big.out_entries:,} entries = {fmt_bytes(big.out_entries * plan.itemsize)}; {advice} "
        f"(raise --mem-limit or pass --z)")


def largest_fitting_z(problem, order, budget, max_arity, upper, n_components=1) -> Plan | None:
    """MBE plans shrink as z decreases; scan down from the exact width."""
    for z in range(upper, max(max_arity, 1) - 1, -1):
        plan = build_plan(problem, order, z, n_components)
        if plan.peak_bytes <= budget:
            return plan
    return None


def bounded_sparse(problem: Problem, order: list[int], fallback: Plan, budget: int, engine: Engine,
                   deadline: float | None, n_components: int = 1):
    """Exact sparse BE below an incumbent's cost, for an integer problem whose exact plan does not fit.

    A cheap MBE run (at most INCUMBENT_BYTES) gives bounds and an incumbent
    of cost ub. With top lowered to ub every row that cannot beat the
    incumbent counts as forbidden, so preprocessing and the sparse tables'
    RestBound prune all of them; what is left is often small. Returns (lower,
    assignment, plan, messages) with lower the optimum (>= top: infeasible),
    the mini-bucket bounds when the time limit strikes during the exact run,
    or None when the sparse tables outgrow the budget (then MBE `fallback` runs).
    """
    max_arity = max((f.arity for f in problem.functions), default=0)
    cheap = largest_fitting_z(problem, order, min(budget, INCUMBENT_BYTES), max_arity, fallback.z, n_components)
    if cheap is None or not fallback.rows_within(budget):
        return None
    lower, tables, messages = run_plan(problem, cheap, engine, deadline)
    if problem.is_forbidden(lower):
        return lower, None, cheap, messages
    incumbent = assign(problem, cheap, engine, tables, messages)
    ub = problem.evaluate(incumbent)
    if lower == ub:
        return ub, incumbent, cheap, messages
    below = preprocess(lower_top(problem, ub))
    if below.infeasible:
        return ub, incumbent, cheap, messages  # nothing beats the incumbent
    plan = build_plan(below.problem, order, None, n_components, "sparse")
    if not all(mb.sparse for mb in plan.minibuckets):
        return None  # a key wider than 63 bits
    plan.row_limit = plan.rows_within(budget)
    try:
        lower, tables, messages = run_plan(below.problem, plan, engine, deadline)
    except TimeLimit:
        return lower, incumbent, cheap, messages  # still the mini-bucket bounds
    except sparse.SparseOverflow:
        return None
    if below.problem.is_forbidden(lower):
        return ub, incumbent, plan, messages  # nothing beats the incumbent
    return lower, below.expand(assign(below.problem, plan, engine, tables, messages)), plan, messages


def solve(problem: Problem, options: Options, file: str = "",
          progress_factory: Callable[[int], Callable[[int], None]] | None = None,
          read_time: float = 0.0) -> Result:
    """Solve a problem; raises BudgetError, TimeLimit, DeviceError, ValueError, OrderError."""
    t0 = time.perf_counter()
    task = check_task(problem, options)
    deadline = t0 + options.time_limit if options.time_limit is not None else None
    phases = {"read": read_time}
    reduced = None
    if task not in PROBABILISTIC:  # removing values would change a sum over assignments
        reduced = preprocess(problem)
        phases["preprocess"] = time.perf_counter() - t0
        if reduced.infeasible:
            return Result(file=file, task=task, status="infeasible", lower_bound=None, upper_bound=None,
                          assignment=None, z=None, induced_width=None,
                          time_s=time.perf_counter() - t0 + read_time, phases=phases, engine="none",
                          device_note="no engine ran", message="preprocessing emptied a domain")
        problem = reduced.problem
    g = graph.primal_graph(problem)
    n_comp = len(graph.components(g))
    order = elimination_order(problem, options.order, g)
    t1 = time.perf_counter()
    phases["order"] = t1 - t0
    budget = options.mem_limit if options.mem_limit is not None else available_memory()
    if task == "MAR":
        plan = build_plan(problem, order, None, n_comp)
        if plan.propagation_bytes > budget:
            raise BudgetError(f"exact marginals need {fmt_bytes(plan.propagation_bytes)} but the memory "
                              f"budget is {fmt_bytes(budget)} (largest clique: "
                              f"{max(mb.joint_entries for mb in plan.minibuckets):,} entries)")
    else:
        plan = choose_plan(problem, order, options.z, budget, n_comp,
                           "dense" if task in PROBABILISTIC else options.tables)
    t_plan = time.perf_counter()
    phases["plan"] = t_plan - t1
    engine, note = select_engine(options.device, sum(mb.joint_entries for mb in plan.minibuckets),
                                 options.gpu_mem_limit)
    t2 = time.perf_counter()
    if engine.startup_s:  # CuPy import and device context; kernel compilation is added to the note below
        phases["gpu_startup"] = t2 - t_plan
    passes = 2 if task == "PR" and not plan.exact else 1
    progress = progress_factory(passes * sum(mb.joint_entries for mb in plan.minibuckets)) \
        if progress_factory else None

    def run(op):
        return run_plan(problem, plan, engine, deadline, progress, op)

    marg = assignment = None
    messages: dict[int, object] = {}
    if task == "PR":
        lower, upper = probabilistic.partition_bounds(problem, plan, lambda op: run(op)[0])
        status = "infeasible" if problem.is_forbidden(lower) else "optimal" if plan.exact else "bounded"
        phases["eliminate"] = time.perf_counter() - t2
    elif task == "MAR":
        lower, tables, messages = run(lambda mb: "lse")
        lower = upper = float(lower) - probabilistic.log10_free(problem, plan)
        t3 = time.perf_counter()
        phases["eliminate"] = t3 - t2
        status = "infeasible" if problem.is_forbidden(lower) else "optimal"
        marg = probabilistic.marginals(problem, plan, engine, tables, messages)
        phases["distribute"] = time.perf_counter() - t3
    else:
        found = None
        if plan.z is not None and options.z is None and options.tables != "dense" and problem.integer:
            found = bounded_sparse(problem, order, plan, budget, engine, deadline, n_comp)
        if found is not None:
            lower, assignment, plan, messages = found
        else:
            lower, tables, messages = run(lambda mb: "min")
        t3 = time.perf_counter()
        phases["eliminate"] = t3 - t2
        if problem.is_forbidden(lower):
            upper, status = None, "infeasible"
        else:
            if assignment is None:
                assignment = assign(problem, plan, engine, tables, messages)
            upper = problem.evaluate(assignment)
            status = "optimal" if plan.exact or _same(lower, upper, problem) else "bounded"
            if plan.exact and not problem.is_forbidden(upper):
                lower = upper  # BE proves its assignment optimal; equal up to float summation order
        phases["assign"] = time.perf_counter() - t3
        if assignment is not None and reduced is not None:
            assignment = reduced.expand(assignment)
    lb, ub = _file_bounds(problem, lower, upper, status)
    largest = max((m.rows for m in messages.values() if isinstance(m, sparse.SparseTable)), default=0)
    if engine.compile_s:
        note += f"; kernels compiled in {engine.compile_s:.2f} s (within eliminate)"
    return Result(file=file, task=task, status=status, lower_bound=lb, upper_bound=ub,
                  assignment=assignment, z=plan.z, induced_width=plan.induced_width,
                  time_s=time.perf_counter() - t0 + read_time, phases=phases, engine=engine.name,
                  device_note=note, exact=plan.exact, peak_bytes=plan.peak_bytes, marginals=marg,
                  largest_rows=largest)


def check_task(problem: Problem, options: Options) -> str:
    """The task to run: the file's own (WCSP, MPE) unless --task asks for PR or MAR."""
    task = (options.task or problem.task).upper()
    if task not in (problem.task, *PROBABILISTIC):
        raise ValueError(f"unknown task {task!r} (choose {', '.join(('MPE',) + PROBABILISTIC)})")
    if task in PROBABILISTIC and problem.task != "MPE":
        raise ValueError(f"--task {task} applies to probabilistic models (.uai files)")
    if task == "MAR" and options.z is not None:
        raise ValueError("--task MAR computes exact marginals: --z does not apply")
    return task


def _same(lower, upper, problem: Problem) -> bool:
    if problem.integer:
        return lower == upper
    return abs(float(upper) - float(lower)) <= 1e-9 * max(1.0, abs(float(upper)))


def _file_bounds(problem: Problem, lower, upper, status):
    """Internal (min) bounds -> the file's own objective, keeping lower <= upper."""
    if status == "infeasible":
        return None, None
    lo, hi = problem.to_file_value(lower), problem.to_file_value(upper)
    if problem.sense < 0:
        lo, hi = hi, lo
    return lo, hi


def write_solution(path: str | Path, assignment: list[int]) -> None:
    """toulbar2's solution format: the value index of every variable on one line."""
    Path(path).write_text(" ".join(map(str, assignment)) + "\n")

