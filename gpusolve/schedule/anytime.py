"""The anytime schedule: phases that only ever tighten the bounds held, until proof or stop.

A `Schedule` is planned once from the model, the elimination order and the
budgets, printed by `gpusolve info`, then run. Exact BE alone when its plan
fits and its predicted time does; otherwise cheap bounds first and proof
last: MBE at a small z (a lower bound, and the greedy assignment as an
incumbent), local search from rollouts guided by its messages (incumbents),
cost shifting (FGLP) and MBE(z) with moment matching on the shifted problem
(a tighter lower bound and the search heuristic), JGLP cost shifting on the
join graph of the tighter of those two runs (a lower bound never below
theirs), then AND/OR branch and bound (search.py), whose completion proves
the incumbent optimal. A satisfaction problem (costs 0 or forbidden) that BE
cannot take runs one phase instead: depth-first search maintaining arc
consistency and GAC (mac.py), whose first solution is optimal.
Plain MBE at the heuristic's z runs before cost shifting: neither wins on
every instance, so the tighter of the two guides the last phases; shifting
and JGLP are skipped where FGLP cannot raise the bound (problems ruled by
hard constraints, whose shifted costs are absorbed by top).

`Bounds` holds the best lower bound and incumbent; each phase reports to
it, and it never accepts a worse value. A stop request (deadline, Ctrl-C,
SIGTERM) ends the phase in progress cooperatively; the bounds held stand.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

import numpy as np

from gpusolve.engines import select as engines
from gpusolve.model.problem import Problem
from gpusolve.plan.buckets import Plan, build_plan, choose_plan, place
from gpusolve.host import fmt_bytes
from gpusolve.distributed.cluster import Cluster
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
JGLP_PASSES = 10  # its regions' join, then three sweeps of about three passes each: ten MBE runs' time
FGLP_SHARE = 0.25  # FGLP sweeps until its bound converges; with a time limit, this share of the time left
# The search heuristic's messages are copied into one host pool: its plan may hold this much.
HEURISTIC_BYTES = 2 << 30
# Result.phases keys: elimination phases share one timer, as before the schedule existed.
TIMER = {"be": "eliminate", "mbe": "eliminate", "bounded-sparse": "eliminate", "local-search": "local_search",
         "mac": "search"}


@dataclass
class Bounds:
    """Best lower bound and incumbent so far (internal costs), and the trace of improvements."""

    problem: Problem
    t0: float
    lower: object
    upper: object
    assignment: list[int] | None = None
    proven: bool = False  # lower == upper by proof (or infeasibility)
    trivial: object = 0  # the bound before any phase: each function's minimum
    trace: list[tuple[float, object, object, str]] = field(default_factory=list)
    on_change: Callable[["Bounds", str], None] | None = None

    @classmethod
    def start(cls, problem: Problem, t0: float, on_change=None) -> "Bounds":
        """The trivial lower bound (each function's minimum) before any phase runs."""
        lower = problem.total(f.least() if f.entries else problem.top for f in problem.functions)
        b = cls(problem, t0, lower, problem.top, trivial=lower, on_change=on_change)
        b._record("trivial")
        return b

    @property
    def closed(self) -> bool:
        return self.proven or self.lower >= self.upper or self.problem.is_forbidden(self.lower)

    def raise_lower(self, lower, phase: str) -> None:
        lower = min(lower, self.upper) if self.assignment is not None else lower
        if lower > self.lower:
            self.lower = lower
            self._record(phase)

    def offer(self, assignment, phase: str) -> bool:
        """Take an assignment as the incumbent if it is feasible and cheaper."""
        if assignment is None:
            return False
        assignment = [int(a) for a in assignment]
        cost = self.problem.evaluate(assignment)
        if self.problem.is_forbidden(cost) or cost >= self.upper:
            return False
        self.upper, self.assignment = cost, assignment
        if self.lower > cost:  # float summation order: the evaluated cost is the truth
            self.lower = cost
        self._record(phase)
        return True

    def prove(self, phase: str) -> None:
        """The incumbent is optimal (or, with none, the problem is infeasible)."""
        self.proven = True
        if self.lower != self.upper:
            self.lower = self.upper
            self._record(phase)

    def _record(self, phase: str) -> None:
        self.trace.append((time.perf_counter() - self.t0, self.lower, self.upper, phase))
        if self.on_change:
            self.on_change(self, phase)


@dataclass(frozen=True)
class Phase:
    name: str  # be | mbe | fglp | jglp | local-search | search | bounded-sparse | mac
    plan: Plan | None = None  # the elimination this phase runs
    predicted_s: float = 0.0
    shifted: bool = False  # runs on the FGLP-shifted problem
    seconds: float | None = None  # a time slice (local search)
    stall: tuple[float, float] = (0.0, 0.0)  # local search: LNS ends after max(s, share of its time) without gain

    @property
    def label(self) -> str:
        """The method as the literature names it, for the result's `method`."""
        if self.name in ("be", "mbe") and self.plan is not None:
            if self.plan.z is None:
                return "exact BE"
            return f"MBE(z={self.plan.z})" + ("-MM on the FGLP-shifted problem" if self.shifted else "")
        return {"fglp": "FGLP", "local-search": "local search", "search": "AND/OR search",
                "bounded-sparse": "bounded sparse BE"}.get(self.name, self.name)

    def describe(self) -> str:
        what = self.name
        if self.plan is not None:
            what += " (exact BE)" if self.plan.z is None else f" (z={self.plan.z})"
            what += f", predicted {self.predicted_s:.3g} s, peak {self.plan.peak_bytes / 2**20:.1f} MiB"
        if self.shifted:
            what += ", on the cost-shifted problem"
        if self.seconds is not None:
            what += f", {self.seconds:.3g} s" if math.isfinite(self.seconds) else ", until proof or stop"
        if self.name == "search" and self.seconds is not None and math.isfinite(self.seconds):
            what += " at most, until proof"
        if self.name == "local-search":
            floor, share = self.stall
            what += f" at most, until improvements stop (LNS: none for {floor:g} s or {share:.0%} of its time)"
        if self.name == "jglp":
            what += (" at most," if self.seconds is not None else ",") + \
                " no longer than the eliminations before it, from the tighter MBE run"
        return what


@dataclass(frozen=True)
class Schedule:
    phases: tuple[Phase, ...]
    engine: str  # numpy | cupy: what the predictions assumed
    threads: int = 1  # ... and the CPU engine's threads
    note: str = ""  # what planning changed from the options (a --z that did not fit)

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


def predict_s(plan: Plan, engine: str, threads: int = 1) -> float:
    """A phase's time before starting it (engines.predict_s: joint entries per second, a cost per bucket),
    bucket by bucket: the CPU threads a bucket takes depend on its size."""
    return sum(engines.predict_s(mb.joint_entries, 1, engine, threads) for mb in plan.minibuckets)


def plan_schedule(problem: Problem, order: list[int], exact: Plan | None, budget: int,
                  time_limit: float | None, engine: str, z: int | None = None, search: bool = True,
                  n_components: int = 1, tables: str = "auto", threads: int = 1,
                  device_budget: int | None = None) -> Schedule:
    """Phases for an optimisation task (WCSP, MPE).

    `exact` is the exact plan when it fits the memory budget (None otherwise). A satisfaction
    problem runs MAC search alone unless exact BE is predicted instant. Exact BE runs
    alone when its predicted time fits the limit (or search is off), unless its messages exceed
    the GPU's `device_budget`: streamed through host memory they cost more than search often takes
    to prove (grid n=64 d=10: 10 s of BE against 2 s), so the phases below run first, search
    for at most BE's predicted time, and BE last. Otherwise: a first cheap
    MBE, plain MBE(z), FGLP and MBE-MM(z) on the shifted problem — z given, or the largest whose
    predicted time fits a share of the limit (capped: no limit takes the cap) — local search
    (right after the first MBE), and AND/OR search until proof or stop. A longer limit, or none,
    never gets a weaker schedule.
    Without search: MBE(z) (z given, or the largest that fits the memory budget), preceded
    for integer problems by bounded sparse BE, as before search existed.
    """
    limit = math.inf if time_limit is None else time_limit

    def cost(plan: Plan) -> float:
        return predict_s(plan, engine, threads)
    # A satisfaction problem's first solution is optimal: MAC search unless BE is instant (donald:
    # 0.07 s against 6 s of BE). MAC, with GAC and the globals, is loaded only then.
    if search and z is None and (exact is None or cost(exact) > FIRST_BOUND_S):
        if problem.is_satisfaction:
            return Schedule((Phase("mac", seconds=math.inf),), engine, threads)
    last = (Phase("search", seconds=math.inf),)
    if exact is not None and z is None:
        streamed = 0 if device_budget is None else place(problem, exact, device_budget).streamed_bytes(exact)
        be_s = cost(exact) + streamed / engines.STREAM_BYTES_PER_S
        if not search or (be_s <= 0.8 * limit and not streamed):
            return Schedule((Phase("be", exact, be_s),), engine, threads)
        if be_s <= 0.8 * limit:
            last = (Phase("search", seconds=be_s), Phase("be", exact, be_s))
    note = ""
    if z is not None:  # the z asked for, or the largest below it that fits memory and the time left
        z, note = _given_z(problem, order, z, budget, n_components, limit, cost)
    if not search:
        fitting = choose_plan(problem, order, z, budget, n_components)
        phases = (Phase("mbe", fitting, cost(fitting)),)
        if z is None and tables != "dense" and problem.integer:
            phases = (Phase("bounded-sparse", fitting),) + phases
        return Schedule(phases, engine, threads, note)
    max_arity = max(max((f.arity for f in problem.functions), default=1), 1)
    width = build_plan(problem, order, None, n_components).induced_width

    def mbe_within(seconds: float, top_z: int) -> Plan | None:
        """The largest z up to top_z that fits the heuristic's memory and `seconds` (the smallest z
        regardless of time). Search reads every message from one host pool: a few GiB at most."""
        best, room = None, min(budget // 4, HEURISTIC_BYTES)
        for zz in range(max_arity, top_z + 1):
            plan = build_plan(problem, order, zz, n_components)
            if (best is not None and plan.peak_bytes > room) or plan.peak_bytes > budget \
                    or (best is not None and cost(plan) > seconds):
                break
            best = plan
            if plan.exact:
                break
        return best

    if z is not None:
        heuristic = choose_plan(problem, order, z, budget, n_components)
    else:
        # Plain and matched MBE at this z cost about three plain runs.
        heuristic = mbe_within(max(min(HEURISTIC_SHARE * limit, HEURISTIC_MAX_S), HEURISTIC_MIN_S) / 3, width + 1)
        if heuristic is None:  # not even the smallest z fits: choose_plan says so
            heuristic = choose_plan(problem, order, None, budget, n_components)
    first = mbe_within(FIRST_BOUND_S, heuristic.z if heuristic.z is not None else width + 1)
    # Local search follows the first cheap MBE (its messages guide the rollouts), before the
    # heuristic's larger z takes its share.
    local = Phase("local-search", seconds=min(LOCAL_SEARCH_SHARE * limit, LOCAL_SEARCH_S), stall=LNS_STALL)
    phases = []
    if first is not None and (first.z or 0) < (heuristic.z or width + 1):
        phases += [Phase("mbe", first, cost(first)), local]
    phases.append(Phase("mbe", heuristic, cost(heuristic)))
    phases.append(Phase("fglp"))
    # Moment matching computes every bucket's min-marginals as well: about twice plain MBE.
    phases.append(Phase("mbe", heuristic, 2 * cost(heuristic), shifted=True))
    phases.append(Phase("jglp", seconds=JGLP_SHARE * limit if math.isfinite(limit) else None))
    if local not in phases:
        phases.append(local)
    return Schedule(tuple(phases) + last, engine, threads, note)


# A --z whose MBE is predicted to take more than this share of the time limit runs at a smaller z.
GIVEN_Z_SHARE = 0.5


def _given_z(problem: Problem, order: list[int], z: int, budget: int, n_components: int, limit: float,
             cost) -> tuple[int, str]:
    """(z, note): `z` when MBE(z) fits the memory budget and its share of the limit, else the largest
    smaller z that does, and the note that says so; BudgetError when no z fits memory."""
    max_arity = max(max((f.arity for f in problem.functions), default=1), 1)
    plan = build_plan(problem, order, z, n_components)
    if plan.peak_bytes <= budget and cost(plan) <= GIVEN_Z_SHARE * limit:
        return z, ""
    why = (f"needs {fmt_bytes(plan.peak_bytes)}, the memory budget is {fmt_bytes(budget)}"
           if plan.peak_bytes > budget else f"is predicted to take {cost(plan):.3g} s of the {limit:g} s limit")
    # Below the z asked for, no slower than the default schedule's own heuristic may be.
    allowed = max(min(HEURISTIC_SHARE * limit, HEURISTIC_MAX_S), HEURISTIC_MIN_S)
    for smaller in range(min(z, plan.induced_width + 1) - 1, max_arity - 1, -1):
        fitting = build_plan(problem, order, smaller, n_components)
        if fitting.peak_bytes <= budget and cost(fitting) <= allowed:
            return smaller, (f"MBE(z={z}) {why}: running z={smaller}, the largest within the memory budget "
                                f"and the default heuristic's time")
    return z, ""  # nothing smaller fits either: choose_plan refuses with the figures


def rng_for(problem: Problem) -> np.random.Generator:
    """Deterministic runs: the same file gives the same trace of incumbents."""
    return np.random.default_rng(len(problem.variables) * 7919 + len(problem.functions))


class Run(NamedTuple):
    """An MBE run kept to guide the later phases."""

    problem: Problem  # the problem it ran on (the original or the FGLP-shifted equivalent)
    plan: Plan
    tables: list
    messages: dict
    lower: object
    matched: dict  # moment-matching unaries by mini-bucket (empty for plain MBE)


@dataclass
class Outcome:
    """What the phases left besides the bounds: for the report."""

    plan: Plan | None = None  # the tightest elimination that completed: its z is the reported bound's
    messages: dict = field(default_factory=dict)  # ... and its messages
    phase_s: dict[str, float] = field(default_factory=dict)
    search: dict | None = None  # SearchStats.to_json() of the search phase
    note: str = ""  # phases skipped or cut off, among others
    ran: list[str] = field(default_factory=list)  # labels of the phases that completed, in order


# Phases that return, rather than raise, when the stop comes: cut off if it holds when they return.
RETURN_WHEN_STOPPED = ("fglp", "jglp", "local-search", "bounded-sparse")


def run_schedule(problem: Problem, order: list[int], schedule: Schedule, engine, bounds: Bounds,
                 stop: Stop, budget: int, progress_factory=None, n_components: int = 1,
                 cluster: Cluster | None = None) -> Outcome:
    """Run the phases in order until the bounds close, the schedule ends or `stop()`. With `cluster`
    exact BE slices its largest buckets over Dask workers (slicing.py) and the search runs there."""
    from gpusolve.inference import eliminate
    from gpusolve.distributed.slicing import sliced_step

    out = Outcome()
    shifted = None  # the FGLP-shifted equivalent, when shifting raised the bound
    guide = None  # the tightest MBE Run: heuristic and rollout guide
    for i, phase in enumerate(schedule.phases):
        if bounds.closed or stop():
            break
        if phase.predicted_s > stop.remaining():
            out.note += f"; {phase.name} not started (predicted {phase.predicted_s:.3g} s)"
            continue
        if phase.shifted and shifted is None:
            out.note += f"; {phase.name} on the shifted problem skipped (FGLP raised no bound)"
            continue
        t = time.perf_counter()
        on = shifted if phase.shifted else problem
        cut = False
        try:
            if phase.name in ("be", "mbe"):
                # The shifted problem has its own function list: the same z, planned again for it.
                plan = build_plan(on, order, phase.plan.z, n_components) if phase.shifted else phase.plan
                progress = progress_factory(sum(mb.joint_entries for mb in plan.minibuckets)) \
                    if progress_factory else None
                matched = {}
                with sliced_step(cluster, plan, on.domains, engine, budget) as step:
                    lower, tables, messages = eliminate.run_plan(on, plan, engine, progress, stop=stop,
                                                                 match=phase.shifted, matched=matched,
                                                                 dense_step=step)
                    out.note += f"; {step.summary()}" if step else ""
                label = "BE" if plan.z is None else f"MBE(z={plan.z})" + (" FGLP+MM" if phase.shifted else "")
                if guide is None or lower >= guide.lower:  # neither plain nor shifted MBE wins everywhere
                    guide = Run(on, plan, tables, messages, lower, matched)
                    out.plan, out.messages = plan, messages
                if on.is_forbidden(lower):
                    bounds.raise_lower(problem.top, label)
                    bounds.prove(label)
                else:
                    bounds.raise_lower(lower, label)
                    bounds.offer(eliminate.assign(on, plan, engine, tables, messages), label)
                    if plan.exact and not on.relaxed:
                        bounds.prove(label)
            elif phase.name == "fglp":
                from gpusolve.inference.shift import fglp
                candidate = fglp(problem, stop=stop.within(FGLP_SHARE * stop.remaining()))
                if _constant(candidate) > bounds.trivial:
                    shifted = candidate
                    bounds.raise_lower(_constant(candidate), "FGLP")
            elif phase.name == "jglp":
                if guide is None or shifted is None:
                    continue  # where FGLP raised nothing, hard constraints absorb shifts on the join graph too (CELAR6)
                from gpusolve.inference.shift import JGLP_BYTES, jglp
                seconds = min(math.inf if phase.seconds is None else phase.seconds, out.phase_s.get("eliminate", 0.0))
                if JGLP_PASSES * predict_s(guide.plan, schedule.engine, schedule.threads) > seconds:
                    out.note += f"; jglp not started (predicted over its {seconds:.3g} s)"
                    continue
                lower = jglp(guide.problem, guide.plan, engine, guide.tables, guide.messages, guide.matched,
                             min(budget // 4, JGLP_BYTES), stop.within(seconds))
                bounds.raise_lower(lower, f"JGLP(z={guide.plan.z})")
            elif phase.name == "local-search":
                _local_search(problem, guide, engine, bounds, stop, phase.seconds, phase.stall)
            elif phase.name == "search":
                from gpusolve.search.dfbb import supports
                if guide is None and (cluster is not None or supports(problem) is not None):
                    out.note += "; search not started (no MBE completed to guide it)"
                    continue
                later = schedule.phases[i + 1:]
                seconds = math.inf if phase.seconds is None else phase.seconds
                label = _search(on, order, guide, engine, bounds,
                                stop.within(seconds, sum(p.predicted_s for p in later)), out, cluster)
            elif phase.name == "mac":
                _mac(problem, engine, bounds, stop, out)
            elif phase.name == "bounded-sparse":
                found = eliminate.bounded_sparse(problem, order, phase.plan, budget, engine, stop,
                                                 n_components, progress_factory)
                if found is not None:
                    lower, assignment, out.plan, out.messages = found
                    bounds.offer(assignment, "bounded sparse BE")
                    bounds.raise_lower(lower, "bounded sparse BE")
            cut = phase.name in RETURN_WHEN_STOPPED and stop()
        except Stopped:
            cut = True  # the bounds held stand
        finally:
            key = TIMER.get(phase.name, phase.name)
            out.phase_s[key] = out.phase_s.get(key, 0.0) + time.perf_counter() - t
        if cut:
            out.note += f"; {phase.label} cut off"
        else:
            out.ran.append(label if phase.name == "search" else phase.label)
    return out


def _constant(problem: Problem):
    return problem.total(f.table[()] for f in problem.functions if not f.scope)


def _local_search(problem, guide, engine, bounds: Bounds, stop: Stop, seconds: float,
                  lns_stall: tuple[float, float]) -> None:
    """Chains (on the engine's array module, or NumPy for a small problem: local_search.chains_module),
    seeded by rollouts from the guiding messages and the incumbent, until they stall; then large
    neighbourhood search on the engine from the incumbent until it stalls too, within the slice."""
    from gpusolve.search import local as local_search
    from gpusolve.engines.sparse import to_module
    xp = local_search.chains_module(problem, engine.xp)
    box = stop.within(seconds)
    last = [time.perf_counter()]
    chains_stop = Stalled(box, bounds, last, STALL_S, STALL_SHARE)
    rng = rng_for(problem)
    starts = []
    if guide is not None:
        starts.append(to_module(xp, local_search.rollouts(guide.problem, guide.plan, engine, guide.tables,
                                                          guide.messages, ROLLOUTS, rng)))
    if bounds.assignment is not None:
        starts.append(xp.asarray([bounds.assignment], dtype=xp.int64))

    def improved(cost, assignment):
        if bounds.offer(assignment, "local search"):
            last[0] = time.perf_counter()

    local_search.local_search(problem, xp.concatenate(starts) if starts else None,
                              chains_stop, rng, xp=xp, on_improve=improved,
                              on_progress=lambda: last.__setitem__(0, time.perf_counter()))  # towards feasibility
    # Chains stall in basins (grids: 1-2% above the optimum); large neighbourhoods solved exactly leave them.
    if bounds.assignment is not None:  # a feasible incumbent: Bounds takes no other
        last[0] = time.perf_counter()
        local_search.lns(problem, bounds.assignment, engine, rng, Stalled(box, bounds, last, *lns_stall), improved)


# Local search gives up once it has not improved for STALL_S, or for this share of its time so far.
STALL_S, STALL_SHARE = 0.1, 0.25
ROLLOUTS = 1024


class Stalled(Stop):
    """Local search's stop: its box's, once the bounds close, or with no improvement for `floor`
    seconds or for `share` of the time since it was made (`last[0]`: the last improvement's time)."""

    def __init__(self, box: Stop, bounds: Bounds, last: list[float], floor: float, share: float):
        super().__init__(parent=box)
        self.bounds, self.last, self.floor, self.share = bounds, last, floor, share
        self.since = time.perf_counter()

    def __call__(self) -> bool:
        now = time.perf_counter()
        return super().__call__() or self.bounds.closed or \
            now - self.last[0] > max(self.floor, self.share * (now - self.since))


def _search(problem, order, guide, engine, bounds: Bounds, stop: Stop, out: Outcome, cluster=None) -> str:
    """AND/OR search with the mini-bucket heuristic and, on integer problems, the compiled depth-first
    search with soft arc consistency beside it (a portfolio: the first to finish proves, incumbents
    are shared as they come); without a heuristic the compiled search alone. Returns what ran."""
    from gpusolve.search import dfbb
    from gpusolve.consistency.globals import propagators
    from gpusolve.search.andor import AndOrSearch, Heuristic
    if stop.remaining() <= 0:  # a box already spent: neither search starts
        raise Stopped()
    beside = dfbb.Beside(problem, bounds) if cluster is None and dfbb.supports(problem) is None else None
    if guide is None:
        beside.run_here(bounds, stop)
        out.search = {"dfbb": beside.stats(), "complete": beside.complete}
        if not beside.complete:
            raise Stopped()
        return beside.LABEL
    heuristic = Heuristic.from_run(guide.plan, engine, guide.messages)
    if cluster is not None:
        _search_on_dask(guide.problem, order, heuristic, bounds, stop, out, cluster)
        return "AND/OR search (Dask)"
    s = AndOrSearch(guide.problem, order, heuristic, stop if beside is None else beside.watching(bounds, stop),
                    propagators=propagators(guide.problem))
    # Floats: only a clear improvement counts, so summation order cannot fake one.
    target = bounds.upper if problem.integer or problem.is_forbidden(bounds.upper) else \
        bounds.upper - 1e-9 * max(1.0, abs(float(bounds.upper)))
    if beside is not None:
        beside.start()
    try:
        cost, assignment = s.run(target)
    except Stopped:
        if beside is None or not beside.complete:
            raise
        assignment = None  # the core proved first
    finally:
        out.search = s.stats.to_json()
        if beside is not None:
            beside.finish(bounds, wait=not stop())
            out.search["dfbb"] = beside.stats()
            out.search["complete"] = s.stats.complete or beside.complete  # the phase's proof, by either
    if s.stats.complete:
        if assignment is not None:
            bounds.offer(assignment, "AND/OR search")
        bounds.prove("AND/OR search")
    return "AND/OR search" if beside is None else f"AND/OR search + {beside.LABEL}"


def _mac(problem, engine, bounds: Bounds, stop: Stop, out: Outcome) -> None:
    """A satisfaction problem's first solution is optimal; an exhausted search proves infeasibility."""
    from gpusolve.search.mac import Mac
    m = Mac(problem, stop, xp=engine.xp if engine.name == "cupy" else None)
    try:
        assignment = m.run()
    finally:
        out.search = {"method": "MAC", **m.stats.to_json()}
    if assignment is None:
        bounds.raise_lower(problem.top, "MAC")
    else:
        bounds.offer(assignment, "MAC")
    bounds.prove("MAC")


def _search_on_dask(problem, order, heuristic, bounds: Bounds, stop: Stop, out: Outcome, cluster) -> None:
    """The search phase with subproblems on Dask workers (distributed/search.py)."""
    from gpusolve.distributed.cluster import executor
    from gpusolve.search.on_dask import search_on_dask
    with executor(cluster.scheduler, cluster.workers) as (client, what, started):
        out.search = {"nodes": 0, "cache_hits": 0, "time_s": 0.0, "nodes_per_s": 0.0, "complete": False,
                      "executor": what, "cluster_s": started}  # as it stands if the search is stopped
        t = time.perf_counter()
        cost, assignment, nodes = search_on_dask(client, problem, order, heuristic, bounds.assignment, stop)
        took = time.perf_counter() - t
    out.search.update(nodes=nodes, time_s=took, nodes_per_s=nodes / took if took else 0.0, complete=True)
    if assignment is not None and cost < bounds.upper:
        bounds.offer(assignment, "AND/OR search (Dask)")
    bounds.prove("AND/OR search (Dask)")
