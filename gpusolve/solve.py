"""Solving: choose a plan within the memory budget, run it on an engine, assign values, report bounds.

Phases: order -> plan -> eliminate (the engine) -> assign. The value-assignment
phase recomputes each bucket's costs over its variable given the values
already chosen for later variables, so no argmin tables are stored.
"""
from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from . import graph, probabilistic
from .engines import Engine, select_engine
from .model import Problem
from .plan import MiniBucket, Plan, build_plan, fmt_bytes


PROBABILISTIC = ("PR", "MAR")


class BudgetError(RuntimeError):
    """The plan asked for does not fit the memory budget (exit code 3)."""


class TimeLimit(RuntimeError):
    """The time limit passed before a bound was found (exit code 4)."""


@dataclass
class Options:
    z: int | None = None
    order: str = "minfill"  # minfill | mindegree | path to an order file
    device: str = "auto"
    time_limit: float | None = None
    mem_limit: int | None = None  # bytes; None: available RAM
    task: str | None = None  # None: the file's own (WCSP or MPE); PR or MAR for .uai files


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
                n_components: int = 1) -> Plan:
    """Exact BE when it fits (or MBE(z) when z is given), else the largest z that fits."""
    max_arity = max((f.arity for f in problem.functions), default=0)
    if z is not None and z < max(max_arity, 1):
        raise ValueError(f"--z {z} is smaller than the largest arity ({max_arity}); z counts every "
                         f"variable of a mini-bucket, the eliminated one included")
    plan = build_plan(problem, order, z, n_components)
    if plan.peak_bytes <= budget:
        return plan
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


def run_plan(problem: Problem, plan: Plan, engine: Engine, deadline: float | None = None,
             progress: Callable[[int], None] | None = None,
             op: Callable[[MiniBucket], str] = lambda mb: "min"):
    """Execute every mini-bucket (eliminating with op(mb)); returns (combined roots, tables, messages)."""
    def check():
        if deadline is not None and time.perf_counter() > deadline:
            raise TimeLimit("time limit reached during elimination")

    dom = problem.domains
    tables = [engine.put(f.table) for f in problem.functions]
    messages: dict[int, object] = {}
    for mb in plan.minibuckets:
        check()
        inputs = [(tables[i], problem.functions[i].scope) for i in mb.functions]
        inputs += [(messages[j], plan.minibuckets[j].scope) for j in mb.messages]
        messages[mb.index] = engine.eliminate(mb, inputs, dom, problem.top, problem.integer, check, op(mb))
        if progress:
            progress(mb.joint_entries)
    lower = _saturating_sum([problem.functions[i].table[()] for i in plan.constants]
                            + [engine.get(messages[r])[()] for r in plan.roots], problem)
    return lower, tables, messages


def _saturating_sum(values, problem: Problem):
    total = problem.dtype(0)
    for v in values:
        total = min(total + v, problem.top) if problem.integer else total + v
    return total


def assign(problem: Problem, plan: Plan, engine: Engine, tables, messages) -> list[int]:
    """Values in reverse elimination order, each minimising its bucket given later choices."""
    xp = engine.xp
    value = [0] * len(problem.variables)
    for var, val in problem.evidence.items():
        value[var] = val
    for var in reversed(plan.order):
        if var in problem.evidence:
            continue
        costs = xp.zeros(problem.domains[var], dtype=problem.dtype)
        for m in plan.buckets.get(var, ()):
            mb = plan.minibuckets[m]
            parts = [(tables[i], problem.functions[i].scope) for i in mb.functions]
            parts += [(messages[j], plan.minibuckets[j].scope) for j in mb.messages]
            for table, scope in parts:
                idx = tuple(slice(None) if u == var else value[u] for u in scope)
                costs = costs + table[idx]
                if problem.integer:
                    costs = xp.minimum(costs, problem.top)
        value[var] = int(xp.argmin(costs))
    return value


def solve(problem: Problem, options: Options, file: str = "",
          progress_factory: Callable[[int], Callable[[int], None]] | None = None,
          read_time: float = 0.0) -> Result:
    """Solve a problem; raises BudgetError, TimeLimit, DeviceError, ValueError, OrderError."""
    t0 = time.perf_counter()
    task = check_task(problem, options)
    deadline = t0 + options.time_limit if options.time_limit is not None else None
    phases = {"read": read_time}
    engine, note = select_engine(options.device)
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
        plan = choose_plan(problem, order, options.z, budget, n_comp)
    t2 = time.perf_counter()
    phases["plan"] = t2 - t1
    passes = 2 if task == "PR" and not plan.exact else 1
    progress = progress_factory(passes * sum(mb.joint_entries for mb in plan.minibuckets)) \
        if progress_factory else None

    def run(op):
        return run_plan(problem, plan, engine, deadline, progress, op)

    marg = assignment = None
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
        lower, tables, messages = run(lambda mb: "min")
        t3 = time.perf_counter()
        phases["eliminate"] = t3 - t2
        if problem.is_forbidden(lower):
            upper, status = None, "infeasible"
        else:
            assignment = assign(problem, plan, engine, tables, messages)
            upper = problem.evaluate(assignment)
            status = "optimal" if plan.exact or _same(lower, upper, problem) else "bounded"
            if plan.exact and not problem.is_forbidden(upper):
                lower = upper  # BE proves its assignment optimal; equal up to float summation order
        phases["assign"] = time.perf_counter() - t3
    lb, ub = _file_bounds(problem, lower, upper, status)
    return Result(file=file, task=task, status=status, lower_bound=lb, upper_bound=ub,
                  assignment=assignment, z=plan.z, induced_width=plan.induced_width,
                  time_s=time.perf_counter() - t0 + read_time, phases=phases, engine=engine.name,
                  device_note=note, exact=plan.exact, peak_bytes=plan.peak_bytes, marginals=marg)


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

