"""The anytime schedule: phases that only ever tighten the bounds held, until proof or stop.

A `Schedule` is planned once from the model, the elimination order and the
budgets, printed by `gpusolve info`, then run. Exact BE alone when its plan
fits and its predicted time does; otherwise, for integer costs and functions
of arity at most 3, the compiled depth-first search (dfbb.py) alone in a short
box first (it proves small networks in milliseconds once loaded: CELAR6-SUB0),
then cheap bounds and proof last: MBE at a small z (a lower bound, and the
greedy assignment as an incumbent), local search from rollouts guided by its
messages (incumbents), cost shifting (FGLP) and MBE(z) with moment matching on
the shifted problem (a tighter lower bound and the search heuristic), JGLP cost
shifting on the join graph of the tighter of those two runs (a lower bound
never below theirs), then AND/OR branch and bound (andor.py), whose completion
proves the incumbent optimal. Where the compiled search (HBFS with EDAC*) came
first, it goes on beside every later phase, each of its incumbents published
at the phase's next poll, and its proof ends the phase under way. For
integer costs search is first boxed, then bounded
sparse BE runs below the best incumbent (a proof whenever the incumbent leaves
few rows, where search may stall: SPOT5 505), then JGLP and search again (local search
takes half its box before the exact method). A satisfaction problem (costs 0 or forbidden) that BE
cannot take runs one phase instead: depth-first search maintaining arc
consistency and GAC (mac.py), whose first solution is optimal.
Plain MBE at the heuristic's z runs before cost shifting: neither wins on
every instance, so the tighter of the two guides the last phases; shifting
and JGLP are skipped where FGLP cannot raise the bound (problems ruled by
hard constraints, whose shifted costs are absorbed by top).

Each phase kind is a class of phases.py; the schedule is a list of them.
`Bounds` holds the best lower bound and incumbent; each phase reports to
it, and it never accepts a worse value. A stop request (deadline, Ctrl-C,
SIGTERM) ends the phase in progress cooperatively; the bounds held stand.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

from gpusolve.distributed.cluster import Cluster
from gpusolve.engines import select as engines
from gpusolve.host import fmt_bytes
from gpusolve.limits import DEFAULT, Limits
from gpusolve.model.problem import Problem
from gpusolve.inference.eliminate import cheap_plan
from gpusolve.plan.buckets import Plan, PlansByZ, build_plan, choose_plan, place
from gpusolve.schedule.bounds import Bounds
from gpusolve.schedule.phases import (
    BE, FGLP, JGLP, MAC, MBE, BoundedSparseBE, Core, LocalSearch, NotStarted, Outcome, Phase, RunContext, Search,
    predict_s,
)
from gpusolve.search import dfbb
from gpusolve.stop import Stop, Stopped

# Every share of a time limit below is capped, and no limit takes the caps: a longer limit, or none,
# never gets a weaker phase. (No limit once meant a 1 s heuristic share and local search after it with
# a shorter stall: on a 29-variable WCSP, z=6 and over 3 M search nodes, where 30 s took z=7, found
# the optimum by local search and proved it in 0.33 M nodes.)
# The cheap first bound may take this long; the search heuristic this share of the time limit, at
# least HEURISTIC_MIN_S and at most HEURISTIC_MAX_S: a larger z often costs more than the search it
# saves (that WCSP at z=8: 15 s predicted on two cores, then over 4 M nodes from local search's
# incumbent; CELAR6-SUB0 at z=5: 15 s, where z=4 proves it in 0.15 M nodes).
FIRST_BOUND_S = 0.05
HEURISTIC_SHARE, HEURISTIC_MIN_S, HEURISTIC_MAX_S = 0.15, 1.0, 10.0
# Local search: at most this share of the limit and at most LOCAL_SEARCH_S (a long limit is for the
# proof), right after the first MBE (incumbents early: they prune the search too); it ends once it stalls.
LOCAL_SEARCH_SHARE, LOCAL_SEARCH_S = 0.4, 10.0
# Large neighbourhood steps take tens of milliseconds: LNS gives up after (seconds, share of its time)
# without a gain.
LNS_STALL = (1.0, 0.5)
# JGLP (cost shifting on the join graph of the tightest MBE run) raises only the lower bound, not the
# search heuristic: this share of a time limit, and never longer than the eliminations before it took.
JGLP_SHARE = 0.1
# The search heuristic's messages are copied into one host pool: its plan may hold this much.
HEURISTIC_BYTES = 2 << 30
# Bounded sparse BE keeps at most the rows the memory budget holds, so it ends, proven or given up,
# where search may never: with no limit it runs to its end, before search; with one, for this share
# of it (SPOT5 505: no plan fits, search stalls 2% above the optimum, bounded sparse BE proves it).
BOUNDED_SPARSE_SHARE = 0.85
# ... where its exact plan is predicted within SPARSE_REACH times the limit: rows below the incumbent cut
# dense BE's work by orders of magnitude (505: predicted 4,060 s dense, proven in 32 s), not by billions
# (scen06 on the CPU: 3e11 s, its whole box spent without a result; 10x10 grids of domain 10: 2.5e3 s on
# the GPU, 6.3e5 s on two cores).
SPARSE_REACH = 1e5
# Beyond that reach, a larger MBE takes the place of bounded sparse BE, for the lower bound (and as the
# search heuristic when tighter): the largest z the heuristic's memory holds whose run is predicted within
# DEEPER_SHARE of the limit, at most DEEPER_MAX_S (scen06 on the CPU: z=4's bound 715, z=5's 1221). It
# proves nothing, so it comes before the boxed search (which then has its heuristic), and the compiled
# search finds the incumbents beside it: on two cores scen06's z=5 is predicted 40.8 s (ran 46 s beside
# it), over the 18 s that 0.3 of a 60 s limit gave; the 16-core H100 host's CPU runs it in under 10 s.
DEEPER_SHARE, DEEPER_MAX_S = 0.7, 60.0
# ... after a search boxed to this share of the limit, at most SEARCH_FIRST_S: the proofs search
# makes in seconds come first, and the exact method gets the rest.
SEARCH_FIRST_SHARE = 0.1
SEARCH_FIRST_S = 30.0
# The compiled search (search/dfbb.py) first, alone, where it applies (integer costs) and functions have
# at most CORE_ARITY variables (beyond, its soft arc consistency weakens): it proves small networks in
# milliseconds once loaded, where the phases below took seconds before its proof (CELAR6-SUB0: 151 nodes,
# against 5 s; the RLFAP-like networks of bench/search.py: under 300 nodes, against 5-12 s). Its load is
# waited for at most CORE_LOAD_S (built ahead of time, milliseconds; else numba's import and cache load:
# 0.5-0.8 s on two loaded cores; a compile, with a cold cache, tens of seconds: it goes on beside the next
# phases), then it searches for at most CORE_FIRST_S; each box at most CORE_FIRST_SHARE of a time limit.
# Past its box it searches on beside every later phase (a portfolio in one process: the core releases the
# GIL), nodes kept; its proof ends the phase.
CORE_ARITY = 3
CORE_LOAD_S, CORE_FIRST_S, CORE_FIRST_SHARE = 3.0, 1.0, 0.1
# ... and local search before it half its box (SPOT5 505 on the GPU at 60 s: the phases before bounded
# sparse BE took 28 s, of which local search 10 s; bounded sparse BE then needed 32 s more), also where
# the exact plan is beyond bounded sparse BE's reach (a longer limit never gets a weaker schedule).
BOUNDED_LOCAL_SHARE = 0.5


@dataclass(frozen=True)
class Schedule:
    phases: tuple[Phase, ...]
    engine: str  # numpy | cupy: what the predictions assumed
    threads: int = 1  # ... and the CPU engine's threads
    note: str = ""  # what planning changed from the options (a --z that did not fit)
    choice: tuple[str, ...] = ()  # why each exact method is or is not scheduled, with its prediction

    @property
    def heuristic(self) -> Plan | None:
        """The plan whose messages guide search and local search (the last MBE)."""
        return next((p.plan for p in reversed(self.phases) if p.name == "mbe"), None)

    @property
    def largest(self) -> tuple[int, int]:
        """(joint entries, mini-buckets) of the largest phase's plan: what the engine is chosen by."""
        return max(((sum(mb.joint_entries for mb in p.plan.minibuckets), len(p.plan.minibuckets))
                    for p in self.phases if p.plan), default=(0, 0))

    def describe(self) -> str:
        lines = [f"{i + 1}. {p.describe()}" for i, p in enumerate(self.phases)]
        return "\n".join(lines + ([f"note: {self.note}"] if self.note else []))


WHY_NO_EXACT = {True: "no plan fits the memory budget", False: "a --z asks for mini-buckets"}


def plan_schedule(problem: Problem, order: list[int], exact: Plan | None, budget: int,
                  time_limit: float | None, engine: str, z: int | None = None, search: bool = True,
                  n_components: int = 1, tables: str = "auto", threads: int = 1,
                  device_budget: int | None = None, limits: Limits = DEFAULT,
                  proven: Callable[[], bool] | None = None) -> Schedule:
    """Phases for an optimisation task (WCSP, MPE).

    `exact` is the exact plan when it fits the memory budget (None otherwise). A satisfaction
    problem runs MAC search alone unless exact BE is predicted instant. Exact BE runs
    alone when its predicted time fits the limit (or search is off), unless its messages exceed
    the GPU's `device_budget`: streamed through host memory they cost more than search often takes
    to prove (grid n=64 d=10: 10 s of BE against 2 s), so the phases below run first, search
    for at most BE's predicted time, and BE last. Otherwise: a first cheap
    MBE, local search, plain MBE(z), FGLP and MBE-MM(z) on the shifted problem — z given, or the
    largest whose predicted time fits a share of the limit (capped: no limit takes the cap) — and
    AND/OR search until proof or stop; for integer costs and no --z, that search is first boxed
    (SEARCH_FIRST_SHARE of the limit, at most SEARCH_FIRST_S), then bounded sparse BE runs (boxed to
    BOUNDED_SPARSE_SHARE of the limit, unboxed without one), or where the exact plan is beyond its reach
    (SPARSE_REACH) a larger MBE for the bound, then JGLP and search again; local search then has
    BOUNDED_LOCAL_SHARE of its box. A longer limit, or none, never gets a weaker schedule.
    `choice` says why each exact method is or is not scheduled, with its prediction.
    `proven()` says the compiled search started before planning (solve._early_core) has proven the
    optimum: where it is scheduled first, the schedule is then that phase alone, the plans of the later
    ones (cap131: 0.2-0.35 s of the 0.5 s it took) not built; exact BE scheduled alone stays so, whatever
    that search did (the result does not depend on which finished first).
    Without search: MBE(z) (z given, or the largest that fits the memory budget), preceded
    for integer problems by bounded sparse BE, as before search existed. Plans are built with `limits`.
    """
    limit = math.inf if time_limit is None else time_limit

    def cost(plan: Plan) -> float:
        return predict_s(plan, engine, threads)
    # A satisfaction problem's first solution is optimal: MAC search unless BE is instant (donald:
    # 0.07 s against 6 s of BE). MAC, with GAC and the globals, is loaded only then.
    if search and z is None and (exact is None or cost(exact) > FIRST_BOUND_S):
        if problem.is_satisfaction:
            return Schedule((MAC(),), engine, threads)
    last = (Search(seconds=math.inf),)
    choice = [] if exact is not None else [f"exact BE: not scheduled, {WHY_NO_EXACT[z is None]}"]
    if exact is not None and z is None:
        streamed = 0 if device_budget is None else place(problem, exact, device_budget).streamed_bytes(exact)
        be_s = cost(exact) + streamed / engines.STREAM_BYTES_PER_S
        what = f"exact BE ({_tables(exact)}): predicted {be_s:.3g} s, peak {fmt_bytes(exact.peak_bytes)}"
        if not search or (be_s <= 0.8 * limit and not streamed):
            return Schedule((BE(exact, be_s),), engine, threads, choice=(f"{what}: scheduled alone",))
        if be_s <= 0.8 * limit:
            last = (Search(seconds=be_s), BE(exact, be_s))
            choice.append(f"{what}: scheduled last, after a search boxed to its time (its messages are streamed)")
        else:
            choice.append(f"{what}: not scheduled, over 80% of the {limit:g} s limit")
    first_box = _core_first(problem, z, limit, choice) if search else ()

    def settle() -> None:
        """Ends planning, before each plan is built, once the compiled search scheduled first has proven."""
        if first_box and proven is not None and proven():
            raise _Proved
    try:
        settle()
        note = ""
        if z is not None:  # the z asked for, or the largest below it that fits memory and the time left
            z, note = _given_z(problem, order, z, budget, n_components, limit, cost, limits)
        if not search:
            fitting = choose_plan(problem, order, z, budget, n_components, limits=limits)
            # nothing but MBE after it: the whole limit (its stop returns the cheap run's bounds)
            bounded = _bounded_sparse(problem, order, fitting, budget, z, tables, n_components, limit, cost, choice)
            return Schedule(bounded + (MBE(fitting, cost(fitting)),), engine, threads, note, tuple(choice))
        max_arity = problem.max_arity
        settle()
        full = build_plan(problem, order, None, n_components, limits=limits)  # the dense exact plan
        width = full.induced_width

        plans = PlansByZ(problem, order, n_components, limits, settle)  # shared with the cheap run's choice

        def mbe_within(seconds: float, top_z: int) -> Plan | None:
            """The largest z up to top_z that fits the heuristic's memory and `seconds` (the smallest z
            regardless of time). Search reads every message from one host pool: a few GiB at most."""
            best, room = None, min(budget // 4, HEURISTIC_BYTES)
            for zz in range(max_arity, top_z + 1):
                plan = plans[zz]
                if (best is not None and plan.peak_bytes > room) or plan.peak_bytes > budget \
                        or (best is not None and cost(plan) > seconds):
                    break
                best = plan
                if plan.exact:
                    break
            return best

        if z is not None:
            heuristic = choose_plan(problem, order, z, budget, n_components, limits=limits)
        else:
            # Plain and matched MBE at this z cost about three plain runs.
            heuristic = mbe_within(max(min(HEURISTIC_SHARE * limit, HEURISTIC_MAX_S), HEURISTIC_MIN_S) / 3, width + 1)
            if heuristic is None:  # not even the smallest z fits: choose_plan says so
                heuristic = choose_plan(problem, order, None, budget, n_components, limits=limits)
        first = mbe_within(FIRST_BOUND_S, heuristic.z if heuristic.z is not None else width + 1)
        # the reach is bounded sparse BE's: asked only where it could be scheduled (integer costs, no --z)
        exact_s = cost(full) if problem.integer and z is None and tables != "dense" and heuristic.z is not None else 0.0
        beyond = math.isfinite(limit) and exact_s > SPARSE_REACH * limit
        bounded = _bounded_sparse(problem, order, heuristic, budget, z, tables, n_components,
                                  BOUNDED_SPARSE_SHARE * limit, cost, choice,
                                  f"its exact plan is predicted {exact_s:.3g} s, over {SPARSE_REACH:g} times the "
                                  f"{limit:g} s limit" if beyond else "", plans)
        deeper = None
        if beyond:
            deeper = mbe_within(min(DEEPER_SHARE * limit, DEEPER_MAX_S), width)
            deeper = deeper if deeper is not None and not deeper.exact and deeper.z > heuristic.z else None
            choice.append(f"a larger MBE for the bound: scheduled at z={deeper.z}, predicted {cost(deeper):.3g} s"
                          if deeper else f"a larger MBE for the bound: not scheduled, none above z={heuristic.z} fits "
                          f"{min(DEEPER_SHARE * limit, DEEPER_MAX_S):.3g} s and the heuristic's memory")
        # Local search follows the first cheap MBE (its messages guide the rollouts), before the
        # heuristic's larger z takes its share; before bounded sparse BE, whose cheap run finds an
        # incumbent too and whose proof ends the run, it takes BOUNDED_LOCAL_SHARE of its box.
        local = LocalSearch(seconds=min(LOCAL_SEARCH_SHARE * limit, LOCAL_SEARCH_S)
                            * (BOUNDED_LOCAL_SHARE if bounded or beyond else 1), stall=LNS_STALL)
        phases = []
        if first is not None and (first.z or 0) < (heuristic.z or width + 1):
            phases += [MBE(first, cost(first)), local]
        phases.append(MBE(heuristic, cost(heuristic)))
        phases.append(FGLP())
        # Moment matching computes every bucket's min-marginals as well: about twice plain MBE.
        phases.append(MBE(heuristic, 2 * cost(heuristic), shifted=True))
        jglp = JGLP(seconds=JGLP_SHARE * limit if math.isfinite(limit) else None)
        if not bounded and not deeper:
            phases.append(jglp)
        if local not in phases:
            phases.append(local)
        boxed = (Search(seconds=min(SEARCH_FIRST_SHARE * limit, SEARCH_FIRST_S)),)
        if bounded:  # search first, boxed: where it proves in seconds the long phase never starts; JGLP, which
            # only raises the lower bound that a proof makes moot, waits for it
            last = boxed + bounded + (jglp,) + last
        elif deeper:  # the larger MBE (a bound, no proof) first, then the boxed search guided by it
            last = (MBE(deeper, cost(deeper)),) + boxed + (jglp,) + last
        return Schedule(first_box + tuple(phases) + last, engine, threads, note, tuple(choice))
    except _Proved:
        choice.append("the phases after it: not planned, the compiled search proved the optimum meanwhile")
        return Schedule(first_box, engine, threads, choice=tuple(choice))


class _Proved(Exception):
    """Raised by plan_schedule's `settle` between plans: the compiled search scheduled first has proven."""


def why_not_core_first(problem: Problem, z: int | None) -> str:
    """Why the compiled search does not run first, or "" where it does (unless exact BE runs alone)."""
    return "a --z asks for mini-buckets" if z is not None else dfbb.supports(problem) or (
        f"functions of arity {problem.max_arity}, over {CORE_ARITY}" if problem.max_arity > CORE_ARITY else "")


def _core_first(problem: Problem, z: int | None, limit: float, choice: list[str]) -> tuple[Phase, ...]:
    """The compiled search alone first, boxed, where it applies (see CORE_ARITY); why, into `choice`."""
    why = why_not_core_first(problem, z)
    if why:
        choice.append(f"compiled search (HBFS, EDAC*) first: not scheduled, {why}")
        return ()
    share = CORE_FIRST_SHARE * limit
    core = Core(seconds=min(CORE_FIRST_S, share), load_s=min(CORE_LOAD_S, share))
    choice.append(f"compiled search (HBFS, EDAC*) first: scheduled, integer costs and functions of arity at most "
                  f"{CORE_ARITY}, where it proves small networks in milliseconds once loaded; its load waited for "
                  f"{core.load_s:.3g} s at most, then {core.seconds:.3g} s at most; after that it searches on beside "
                  f"every phase below, whose proof ends the phase")
    return (core,)


def exact_predictions(problem: Problem, order: list[int], budget: int, engine: str, threads: int = 1,
                      n_components: int = 1, limits: Limits = DEFAULT) -> list[str]:
    """`info`'s lines on exact BE with dense and with all-sparse tables: predicted time and memory."""
    lines = []
    for tables in ("dense", "sparse"):
        plan = build_plan(problem, order, None, n_components, tables, limits)
        fits = "fits" if plan.peak_bytes <= budget else "over"
        lines.append(f"exact BE ({_tables(plan)}): predicted {predict_s(plan, engine, threads):.3g} s, "
                     f"peak {fmt_bytes(plan.peak_bytes)}, {fits} the memory budget ({fmt_bytes(budget)})")
    return lines


def _tables(plan: Plan) -> str:
    sparse = sum(mb.sparse for mb in plan.minibuckets)
    return "dense" if not sparse else "all sparse" if sparse == len(plan.minibuckets) else f"{sparse} sparse"


def _bounded_sparse(problem: Problem, order: list[int], fallback: Plan, budget: int, z: int | None, tables: str,
                    n_components: int, seconds: float, cost, choice: list[str], beyond: str = "",
                    plans: PlansByZ | None = None) -> tuple[Phase, ...]:
    """Bounded sparse BE (falling back on MBE `fallback`) when its cheap run's prediction fits its
    `seconds` and its sparse tables may hold rows, boxed to them, unless `beyond` says why it is out of
    reach; why not, into `choice`. `plans`: the MBE plans built so far, by z."""
    why = "a --z asks for mini-buckets" if z is not None else "--tables dense" if tables == "dense" \
        else "costs are not integers" if not problem.integer else "the exact plan fits" if fallback.z is None \
        else beyond
    cheap = None if why else cheap_plan(problem, order, fallback, budget, n_components, plans)
    rows = fallback.rows_within(budget)
    if not why and (cheap is None or not rows):
        why = "the memory budget holds no sparse rows"
    if not why and cost(cheap) > seconds:
        why = f"its cheap MBE(z={cheap.z}) is predicted {cost(cheap):.3g} s, over its {seconds:.3g} s"
    if why:
        choice.append(f"bounded sparse BE: not scheduled, {why}")
        return ()
    choice.append(f"bounded sparse BE: scheduled, cheap MBE(z={cheap.z}) predicted {cost(cheap):.3g} s, "
                  f"then exact sparse BE below the incumbent, at most {rows:,} rows; what the incumbent leaves is known "
                  f"only as it runs: " + (f"boxed to {seconds:.3g} s" if math.isfinite(seconds)
                                          else "with no limit it runs to its end (memory caps its rows)"))
    return (BoundedSparseBE(fallback, cost(cheap), None if math.isinf(seconds) else seconds, rows, cheap),)


# A --z whose MBE is predicted to take more than this share of the time limit runs at a smaller z.
GIVEN_Z_SHARE = 0.5


def _given_z(problem: Problem, order: list[int], z: int, budget: int, n_components: int, limit: float,
             cost, limits: Limits) -> tuple[int, str]:
    """(z, note): `z` when MBE(z) fits the memory budget and its share of the limit, else the largest
    smaller z that does, and the note that says so; BudgetError when no z fits memory."""
    max_arity = problem.max_arity
    plan = build_plan(problem, order, z, n_components, limits=limits)
    if plan.peak_bytes <= budget and cost(plan) <= GIVEN_Z_SHARE * limit:
        return z, ""
    why = (f"needs {fmt_bytes(plan.peak_bytes)}, the memory budget is {fmt_bytes(budget)}"
           if plan.peak_bytes > budget else f"is predicted to take {cost(plan):.3g} s of the {limit:g} s limit")
    # Below the z asked for, no slower than the default schedule's own heuristic may be.
    allowed = max(min(HEURISTIC_SHARE * limit, HEURISTIC_MAX_S), HEURISTIC_MIN_S)
    for smaller in range(min(z, plan.induced_width + 1) - 1, max_arity - 1, -1):
        fitting = build_plan(problem, order, smaller, n_components, limits=limits)
        if fitting.peak_bytes <= budget and cost(fitting) <= allowed:
            return smaller, (f"MBE(z={z}) {why}: running z={smaller}, the largest within the memory budget "
                                f"and the default heuristic's time")
    return z, ""  # nothing smaller fits either: choose_plan refuses with the figures


def run_schedule(problem: Problem, order: list[int], schedule: Schedule, engine, bounds: Bounds,
                 stop: Stop, budget: int, progress_factory=None, n_components: int = 1,
                 cluster: Cluster | None = None, limits: Limits = DEFAULT, core=None) -> Outcome:
    """Run the phases in order until the bounds close, the schedule ends or `stop` says so. With `cluster`
    exact BE slices its largest buckets over Dask workers (slicing.py) and the search runs there.
    MAC and plans built here take `limits` (the schedule's plans carry their own). `core`: the compiled
    search started while the schedule was planned (dfbb.Beside), which its phases resume."""
    ctx = RunContext(problem, order, engine, bounds, stop, budget, (schedule.engine, schedule.threads), n_components,
                     cluster, progress_factory, limits, core=core)
    began = False
    try:
        for i, phase in enumerate(schedule.phases):
            if bounds.closed or stop():
                break
            ctx.later = schedule.phases[i + 1:]
            began = True
            _run_phase(phase, ctx)
    finally:  # the compiled search, paused between the phases it runs in, ends with the run; started before
        # planning but stopped before any phase, it reports nothing (the run reads as one that began none)
        if ctx.core is not None:
            ctx.core.finish(bounds if began else None)
    return ctx.out


def _run_phase(phase: Phase, ctx: RunContext) -> None:
    """One phase, unless what it needs is missing or its prediction exceeds the time left; timed, and
    noted when cut off or skipped."""
    out, stop = ctx.out, ctx.stop
    if phase.predicted_s > stop.remaining():
        out.note += f"; {phase.name} not started (predicted {phase.predicted_s:.3g} s)"
        return
    if phase.shifted and ctx.shifted is None:
        out.note += f"; {phase.name} on the shifted problem skipped (FGLP raised no bound)"
        return
    core = ctx.core if phase.core_beside and ctx.core is not None and not ctx.core.complete else None
    if core is not None:  # the compiled search goes on beside the phase; its proof stops the phase
        core.start()
        ctx.stop = core.watching(ctx.bounds, stop)
    ctx.bounds.begin(phase.label)
    t = time.perf_counter()
    try:
        label = phase.run(ctx)
        cut = phase.returns_when_stopped and ctx.stop()
    except NotStarted as e:
        out.note += f"; {e}" if str(e) else ""
        return
    except Stopped:
        cut = True  # the bounds held stand
    finally:
        out.phase_s[phase.timer] = out.phase_s.get(phase.timer, 0.0) + time.perf_counter() - t
        if core is not None:
            core.pause(ctx.bounds)
            ctx.stop = stop
    if core is not None and core.complete:  # proven beside the phase, which did not complete
        out.note += f"; {core.LABEL} proved the optimum during {phase.label}"
        out.ran.append(core.LABEL)
        out.search = {**(out.search or {}), "dfbb": core.stats(), "complete": True}
    elif cut:
        out.note += f"; {phase.label} cut off"
    else:
        out.ran.append(label)
