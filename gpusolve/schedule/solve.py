"""Solving: preprocess, order, plan the anytime schedule within the budgets, run it, report bounds.

The module is callable: `gpusolve.solve(problem_or_path, z=..., time_limit=...)` is `run` below, the
Python API's entry point; `solve(problem, Options())` is the engine room the command line uses.

Optimisation tasks (WCSP, MPE) run anytime.py's schedule (exact BE when it fits,
else bounds, local search and AND/OR search); PR and MAR eliminate exactly or
with mini-buckets.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Callable


from gpusolve.order import graph
from gpusolve.inference import probabilistic
from gpusolve.schedule.anytime import Schedule, plan_schedule, run_schedule, why_not_core_first
from gpusolve.schedule.phases import Core
from gpusolve.search.dfbb_build import built
from gpusolve.schedule.bounds import Bounds
from gpusolve.engines import registry
from gpusolve.engines.registry import EngineSpec
from gpusolve.engines.select import select_engine
from gpusolve.host import host_threads
from gpusolve.limits import DEFAULT, Limits
from gpusolve.engines import sparse
from gpusolve.inference.eliminate import run_plan
from gpusolve.host import available_memory  # noqa: F401  (the default budget, imported from here by callers)
from gpusolve.model.problem import Problem, Reduced
from gpusolve.plan.buckets import build_plan, choose_plan, plan_within
from gpusolve.host import BudgetError
from gpusolve.host import fmt_bytes
from gpusolve.consistency.preprocess import preprocess
from gpusolve.distributed.cluster import Cluster
from gpusolve.stop import Stop

PROBABILISTIC = ("PR", "MAR")
# What `infeasible` means on a probabilistic model, per task (schema.json says the same).
ZERO_PROBABILITY = {"MPE": "every assignment has probability 0",
                    "PR": "Z = 0: every assignment has probability 0 (log10 Z = -inf)",
                    "MAR": "Z = 0: every assignment has probability 0, so no marginal is defined"}


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
    host_max: int | None = None  # --device gpu places plans below this many joint entries on the host (None: predicted)
    search: bool = True  # AND/OR search (with cost shifting and local search) beyond what elimination proves
    scheduler: str | None = None  # exact BE's sliced buckets (slicing.py) and AND/OR search subproblems
    # (distributed/search.py) on this Dask cluster ...
    workers: int | None = None  # ... or on an embedded LocalCluster of this many processes
    slice_min: int | None = None  # joint-table bytes above which exact BE slices a bucket; None: one worker's budget
    threads: int | None = None  # the CPU engine's threads; None: one per core this process may use
    limits: Limits = DEFAULT  # sizes and thresholds of every layer (gpusolve/limits.py)

    def settings(self) -> dict:
        """The options a record holds and batch resume compares: all but `limits`, which only the
        API and tests set, so that records read as before."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "limits"}


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
    peak_bytes: int | None = None  # None: no elimination plan ran
    message: str | None = None
    marginals: list[list[float]] | None = None  # MAR: one distribution per variable, file order
    largest_rows: int = 0  # rows of the largest sparse message (0: no sparse table)
    trace: list[list] = field(default_factory=list)  # [time_s, lower, upper, phase] at each improvement
    search: dict | None = None  # AND/OR search statistics, when it ran
    preprocess: dict | None = None  # what preprocessing removed: {"removed_values", "functional_variables"}
    schedule: list[str] = field(default_factory=list)  # the phases planned, in order
    values: list[str] | None = None  # the assignment as the file's domain values (XCSP, CFN names), else None
    method: str | None = None  # what ran, e.g. "MBE(z=4) + FGLP + AND/OR search"
    options: dict | None = None  # the Options of the run (and evidence), for batch's resume
    uai_output: dict | None = None  # {"path", "bound"} when --uai-output wrote a file

    def to_json(self) -> dict:
        """The schema's object (gpusolve/schema.json), every field present."""
        from gpusolve.report import record
        fields = asdict(self)
        return record(fields.pop("file"), fields.pop("status"), **fields)


def elimination_order(problem: Problem, how: str, g=None) -> list[int]:
    if how in graph.ORDERINGS:
        return graph.elimination_order(problem, how, g)
    return graph.read_order(how, len(problem.variables))


def solve(problem: Problem, options: Options, file: str = "",
          progress_factory: Callable[[int], Callable[[int], None]] | None = None,
          read_time: float = 0.0, on_bounds: Callable[[object, object, str], None] | None = None,
          stop: Stop | None = None, on_phase: Callable[[str, Callable[[], int] | None], None] | None = None
          ) -> Result:
    """Solve a problem; raises BudgetError, Stopped (PR, MAR), DeviceError, ValueError, OrderError.

    Optimisation tasks (WCSP, MPE) run the anytime schedule and always return the bounds held
    when the time limit passes or `stop` is interrupted; `on_bounds(lower, upper, phase)` hears
    every improvement, in the file's objective; `on_phase(phase, nodes)` each phase as it starts
    (`nodes`: a search's node count so far, else None).
    """
    t0 = time.perf_counter()
    task = check_task(problem, options)
    stop = stop or Stop()
    if options.time_limit is not None:  # counted from the start of reading
        stop.deadline = t0 - read_time + options.time_limit
    phases = {"read": read_time}
    if on_phase:
        on_phase(f"{task} by elimination" if task in PROBABILISTIC else "preprocessing and planning")
    if task in PROBABILISTIC:
        return _solve_probabilistic(problem, options, task, file, progress_factory, read_time, t0, stop, phases)
    # removing values would change a sum over assignments: not for PR, MAR
    reduced = preprocess(problem, options.limits)
    phases["preprocess"] = time.perf_counter() - t0
    removed = {"removed_values": reduced.removed, "functional_variables": len(reduced.functional)}
    if reduced.infeasible:
        return Result(file=file, task=task, status="infeasible", lower_bound=None, upper_bound=None,
                      assignment=None, z=None, induced_width=None, preprocess=removed,
                      time_s=time.perf_counter() - t0 + read_time, phases=phases, engine="none",
                      device_note="no engine ran", message=_infeasible(problem, "preprocessing emptied a domain"),
                      method="preprocessing (node and arc consistency)", options=options.settings())
    named, problem = problem, reduced.problem  # values are reported in the file's domains
    bounds = Bounds.start(problem, t0, on_bounds)
    bounds.on_phase = on_phase
    core = _early_core(problem, options, bounds)  # it searches while the order and the schedule are planned
    try:
        g, n_comp, order, budget = _order(problem, options, phases)
        t1 = time.perf_counter()
        schedule = make_schedule(problem, order, options, budget, n_comp, registry.for_place(on_device=False),
                                 proven=None if core is None else lambda: core.complete)
        engine, note, schedule = _engine_for(problem, options, schedule, order, budget, n_comp)
    except BaseException:  # no phase would resume or finish the early core
        if core is not None:
            core.finish(None)
        raise
    phases["plan"] = time.perf_counter() - t1
    if engine.startup_s:  # CuPy import and device context; kernel compilation is added to the note below
        phases["gpu_startup"] = engine.startup_s
    if core is not None and not any(p.name == Core.name for p in schedule.phases):
        core.finish(None)  # exact BE alone, or MAC: they prove without it, whatever it found meanwhile
        core = None
    cluster = Cluster(options.scheduler, options.workers, options.slice_min, options.device) \
        if options.scheduler or options.workers else None
    out = run_schedule(problem, order, schedule, engine, bounds, stop, budget, progress_factory, n_comp, cluster,
                       options.limits, core)
    phases.update(out.phase_s)
    infeasible = problem.is_forbidden(bounds.lower)
    status = "infeasible" if infeasible else "optimal" if bounds.closed and bounds.assignment is not None \
        else "bounded"
    lb, ub, assignment, labels, trace = _in_file_terms(named, reduced, bounds, infeasible)
    if stop.interrupted:
        note += "; interrupted"
    elif not bounds.closed and stop.deadline is not None and stop():
        note += "; time limit reached"
    if engine.compile_s:
        note += f"; kernels compiled or loaded in {engine.compile_s:.2f} s (within eliminate)"
    if schedule.note:
        note += f"; {schedule.note}"
    plan = out.plan  # the z reported is that of the bound reported: none before an elimination completes
    return Result(file=file, task=task, status=status, lower_bound=lb, upper_bound=ub, assignment=assignment,
                  message=_infeasible(problem, None) if infeasible else None,
                  values=labels, method=" + ".join(dict.fromkeys(out.ran)) or None,
                  options=options.settings(),
                  z=plan.z if plan is not None else None,
                  induced_width=graph.induced_width(g, order), time_s=time.perf_counter() - t0 + read_time,
                  phases=phases, engine=engine.name, device_note=note + out.note,
                  exact=out.plan is not None and out.plan.exact and status != "bounded",
                  peak_bytes=_sparse_bytes(out.messages) or (plan.peak_bytes if plan is not None else None),
                  largest_rows=_largest_rows(out.messages), trace=trace,
                  search=out.search, schedule=schedule.describe().splitlines(), preprocess=removed)


def _engine_for(problem: Problem, options: Options, schedule: Schedule, order: list[int], budget: int,
                n_comp: int) -> tuple:
    """(engine, its note, the schedule planned again for it where it is the GPU's)."""
    joint, buckets = schedule.largest
    if any(p.name == "mac" for p in schedule.phases):
        from gpusolve.search.mac import gac_on_device
        # the work is GAC, not buckets: --device gpu runs it there, auto on the host
        if gac_on_device(problem, options.limits):
            joint = None
    engine, note = select_engine(options.device, joint, buckets, options.gpu_mem_limit, options.host_max,
                                 options.threads)
    if engine.spec.on_device:
        schedule = make_schedule(problem, order, options, budget, n_comp, engine.spec, engine.budget)
    return engine, note, schedule


def _early_core(problem: Problem, options: Options, bounds: Bounds):
    """The compiled search (dfbb.Beside), started before the order and the schedule are planned where the
    schedule may run it first: it searches meanwhile (cap131: 0.25-0.4 s of planning, a 0.14 s proof), and
    its phase resumes it, proven or not. None for satisfaction problems (MAC), a cluster, or a core not
    built ahead of time (numba's import would hold the GIL that planning needs; its phase loads it)."""
    if not options.search or options.scheduler or options.workers or problem.is_satisfaction \
            or why_not_core_first(problem, options.z) or built() is None:
        return None
    from gpusolve.search.dfbb import Beside, entry_points
    entry_points()  # loaded here, before planning competes for the GIL
    return Beside(problem, bounds).start()


def _order(problem: Problem, options: Options, phases: dict):
    """(primal graph, number of components, elimination order, memory budget); times the order phase
    (alone: it was timed from the solve's start, preprocessing included)."""
    t0 = time.perf_counter()
    g = graph.primal_graph(problem)
    n_comp = len(graph.components(g))
    order = elimination_order(problem, options.order, g)
    phases["order"] = time.perf_counter() - t0
    budget = options.mem_limit if options.mem_limit is not None else available_memory()
    return g, n_comp, order, budget


def make_schedule(problem: Problem, order: list[int], options: Options, budget: int, n_comp: int,
                  engine: EngineSpec, device_budget: int | None = None,
                  proven: Callable[[], bool] | None = None) -> Schedule:
    """The anytime schedule for these options on `engine` (`device_budget`: the GPU engine's device
    bytes; `proven`: see plan_schedule); raises BudgetError when no bound fits the budget."""
    exact = None
    if options.z is None and not problem.relaxed:  # BE on a relaxation proves nothing: search completes it
        # The GPU runs every dense bucket with one compiled kernel, while its sparse path compiles a
        # dozen CuPy kernels on a new machine (5-11 s, bench/batch_gpu.py): auto stays dense there
        # while the dense plan fits the budget.
        if engine.dense_first and options.tables == "auto":
            exact = plan_within(problem, order, None, budget, n_comp, "dense", options.limits)
        exact = exact or plan_within(problem, order, None, budget, n_comp, options.tables, options.limits)
    return plan_schedule(problem, order, exact, budget, options.time_limit, engine.name, options.z, options.search,
                         n_comp, options.tables, host_threads(options.threads), device_budget, options.limits,
                         proven)


def _sparse_bytes(messages: dict) -> int:
    """Bytes the sparse messages held (keys and costs): bounded sparse BE's plan only bounds its rows
    by the budget, so this is what its run measured."""
    return sum(m.keys.nbytes + m.costs.nbytes for m in messages.values() if isinstance(m, sparse.SparseTable))


def _largest_rows(messages: dict) -> int:
    return max((m.rows for m in messages.values() if isinstance(m, sparse.SparseTable)), default=0)


def _in_file_terms(named: Problem, reduced: Reduced, bounds: Bounds, infeasible: bool) -> tuple:
    """(lower, upper, assignment, value names, trace) as the file states them, converted in one
    place once the schedule ends: its objective, its own variables, and its value indices, which
    preprocessing renumbered."""
    problem = reduced.problem
    trace = _file_trace(problem, bounds.trace)
    if infeasible:
        return None, None, None, None, trace
    found = bounds.assignment is not None
    lower, upper = problem.file_bounds(bounds.lower, bounds.upper if found else None)
    assignment = named.visible(reduced.expand(bounds.assignment)) if found else None
    return lower, upper, assignment, named.value_labels(assignment), trace


def _file_trace(problem: Problem, trace) -> list[list]:
    """[time_s, lower, upper, phase] in the file's objective (upper None before any incumbent)."""
    out = []
    for t, lower, upper, phase in trace:
        lo, hi = problem.file_bounds(min(lower, problem.top), None if problem.is_forbidden(upper) else upper)
        out.append([round(t, 6), lo, hi, phase])
    return out


def _solve_probabilistic(problem, options, task, file, progress_factory, read_time, t0, stop, phases) -> Result:
    """PR (log10 Z, or mini-bucket bounds on it) and MAR (exact marginals)."""
    g, n_comp, order, budget = _order(problem, options, phases)
    t1 = time.perf_counter()
    if task == "MAR":
        plan = build_plan(problem, order, None, n_comp, limits=options.limits)
        if plan.propagation_bytes > budget:
            raise BudgetError(f"exact marginals need {fmt_bytes(plan.propagation_bytes)} but the memory "
                              f"budget is {fmt_bytes(budget)} (largest clique: "
                              f"{max(mb.joint_entries for mb in plan.minibuckets):,} entries)")
    else:
        plan = choose_plan(problem, order, options.z, budget, n_comp, "dense", options.limits)
    t_plan = time.perf_counter()
    phases["plan"] = t_plan - t1
    engine, note = select_engine(options.device, sum(mb.joint_entries for mb in plan.minibuckets),
                                 len(plan.minibuckets), options.gpu_mem_limit, options.host_max, options.threads)
    t2 = time.perf_counter()
    if engine.startup_s:
        phases["gpu_startup"] = t2 - t_plan
    passes = 2 if task == "PR" and not plan.exact else 1
    progress = progress_factory(passes * sum(mb.joint_entries for mb in plan.minibuckets)) \
        if progress_factory else None

    def run(op):
        return run_plan(problem, plan, engine, progress, op, stop=stop)

    marg = None
    if task == "PR":
        lower, upper = probabilistic.partition_bounds(problem, plan, lambda op: run(op)[0])
        if not plan.exact:  # weighted mini-buckets: another bound on Z from above; the tighter stands
            lower = max(lower, probabilistic.weighted_bound(problem, plan, engine))
        status = "infeasible" if problem.is_forbidden(lower) else "optimal" if plan.exact else "bounded"
        phases["eliminate"] = time.perf_counter() - t2
    else:
        lower, tables, messages = run(lambda mb: "lse")
        lower = upper = float(lower) - probabilistic.log10_free(problem, plan)
        t3 = time.perf_counter()
        phases["eliminate"] = t3 - t2
        status = "infeasible" if problem.is_forbidden(lower) else "optimal"
        if status == "optimal":  # Z = 0 conditions on an impossible event: nothing to distribute
            marg = probabilistic.marginals(problem, plan, engine, tables, messages)
            phases["distribute"] = time.perf_counter() - t3
    lb, ub = (None, None) if status == "infeasible" else problem.file_bounds(lower, upper)
    if engine.compile_s:
        note += f"; kernels compiled or loaded in {engine.compile_s:.2f} s (within eliminate)"
    if options.workers or options.scheduler:
        note += f"; {task} ran in this process (--workers and --scheduler slice exact BE of WCSP and MPE only)"
    return Result(file=file, task=task, status=status, lower_bound=lb, upper_bound=ub,
                  message=ZERO_PROBABILITY[task] if status == "infeasible" else None,
                  assignment=None, z=plan.z, induced_width=graph.induced_width(g, order),
                  time_s=time.perf_counter() - t0 + read_time, phases=phases, engine=engine.name,
                  device_note=note, exact=plan.exact, peak_bytes=plan.peak_bytes, marginals=marg,
                  method=("exact BE" if plan.z is None else f"MBE(z={plan.z})")
                  + (" + distribute pass" if marg is not None else ""), options=options.settings())


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


def _infeasible(problem: Problem, how: str | None) -> str | None:
    """Why there is no solution: on a probabilistic model (task MPE) what it means, else `how`."""
    return ZERO_PROBABILITY["MPE"] if problem.task == "MPE" else how


def write_solution(path: str | Path, result: Result) -> None:
    """toulbar2's solution format on one line: domain values where the file names them (XCSP, CFN),
    value indices otherwise (wcsp, uai), as toulbar2 writes them."""
    Path(path).write_text(" ".join(map(str, result.values or result.assignment)) + "\n")



def run(problem_or_path, z: int | None = None, time_limit: float | None = None, device: str = "auto",
        task: str | None = None, evidence=None, **options) -> Result:
    """Solve a Problem, a `Model` or a file (a path read as `gpusolve.read` does).

    Keyword `options` are the other `Options` fields (order, tables, mem_limit, gpu_mem_limit, search).
    Bad input raises ParseError or ValueError; a memory budget too small raises BudgetError.
    """
    if time_limit is not None and not math.isfinite(time_limit) or time_limit is not None and time_limit < 0:
        raise ValueError(f"time_limit must be a non-negative number of seconds, not {time_limit}")
    opts = Options(z=z, time_limit=time_limit, device=device, task=task, **options)
    if hasattr(problem_or_path, "problem"):  # a gpusolve.Model
        problem_or_path = problem_or_path.problem()
    if isinstance(problem_or_path, Problem):
        if evidence is not None:
            raise ValueError("evidence applies to files; condition a Problem with gpusolve.model.problem.condition")
        return solve(problem_or_path, opts, file=problem_or_path.name)
    from gpusolve.parsers import read
    t0 = time.perf_counter()
    problem = read(problem_or_path, evidence, limits=opts.limits)
    return solve(problem, opts, file=str(problem_or_path), read_time=time.perf_counter() - t0)
