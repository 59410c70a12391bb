"""The anytime schedule's phases: one class per kind, each saying what it is and running itself.

A phase's `describe()` is its line in `gpusolve info` (its kind, plan,
prediction and time slice); `run(ctx)` tightens the bounds in `ctx` and
returns what ran, as the result's `method` names it. It raises Stopped, or
returns when `returns_when_stopped`, once the stop comes; NotStarted when
what it needs is missing. `RunContext` carries what phases share: the
engine, the bounds, the stop, the budget, the cluster, the tightest MBE run
(the guide of search and local search), the FGLP-shifted problem and the
outcome being built. Adding a phase is one class here and one line in
anytime.plan_schedule.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, ClassVar, NamedTuple

import numpy as np

from gpusolve.distributed.cluster import Cluster
from gpusolve.engines import select as engines
from gpusolve.limits import DEFAULT, Limits
from gpusolve.model.problem import Problem
from gpusolve.plan.buckets import Plan, build_plan
from gpusolve.schedule.bounds import Bounds
from gpusolve.stop import Stop, Stopped

FGLP_SHARE = 0.25  # FGLP sweeps until its bound converges; with a time limit, this share of the time left
JGLP_PASSES = 10  # its regions' join, then three sweeps of about three passes each: ten MBE runs' time


def predict_s(plan: Plan, engine: str, threads: int = 1) -> float:
    """A phase's time before starting it (engines.predict_s: joint entries per second, a cost per bucket),
    bucket by bucket: the CPU threads a bucket takes depend on its size."""
    return sum(engines.predict_s(mb.joint_entries, 1, engine, threads) for mb in plan.minibuckets)


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


@dataclass
class RunContext:
    """What the phases of one run share; each phase reads it and leaves its results in it."""

    problem: Problem
    order: list[int]
    engine: object
    bounds: Bounds
    stop: Stop
    budget: int  # host bytes
    rates: tuple[str, int] = ("numpy", 1)  # (engine, CPU threads) the schedule's predictions assumed
    n_components: int = 1
    cluster: Cluster | None = None
    progress_factory: Callable | None = None
    limits: Limits = DEFAULT  # MAC's and the plans built here (the schedule's plans carry their own)
    guide: Run | None = None  # the tightest MBE run: heuristic and rollout guide
    shifted: Problem | None = None  # the FGLP-shifted equivalent, when shifting raised the bound
    later: tuple = ()  # the phases after the one running
    core: object = None  # the compiled search (dfbb.Beside), paused between the phases it runs in
    out: Outcome = field(default_factory=Outcome)

    def predict_s(self, plan: Plan) -> float:
        return predict_s(plan, *self.rates)

    def compiled_search(self):
        """The run's compiled search, made at its first use: every phase resumes the same search (and
        numba loads it once)."""
        if self.core is None:
            from gpusolve.search.dfbb import Beside
            self.core = Beside(self.problem, self.bounds)
        return self.core


class NotStarted(Exception):
    """What a phase needs is missing (its message, if any, goes into the note)."""


class Phase:
    """One step of the schedule. Subclasses are frozen dataclasses with the fields they need."""

    name: ClassVar[str]  # the kind, as `info` prints it
    timer: ClassVar[str]  # its Result.phases key
    returns_when_stopped: ClassVar[bool] = False  # returns, rather than raises, when the stop comes
    # The compiled search, once the schedule made it, searches beside the phase (a portfolio: numba
    # releases the GIL); the phases that run it themselves say False.
    core_beside: ClassVar[bool] = True
    plan: Plan | None = None  # the elimination it runs
    predicted_s: float = 0.0
    shifted: bool = False  # runs on the FGLP-shifted problem
    seconds: float | None = None  # its time slice

    @property
    def label(self) -> str:
        """The method as the literature names it, for the result's `method`."""
        return self.name

    def describe(self) -> str:
        """Its line in `info`: kind, plan and prediction, time slice."""
        what = self.name
        if self.plan is not None:
            what += " (exact BE)" if self.plan.z is None else f" (z={self.plan.z})"
            what += f", predicted {self.predicted_s:.3g} s, peak {self.plan.peak_bytes / 2**20:.1f} MiB"
        if self.shifted:
            what += ", on the cost-shifted problem"
        if self.seconds is not None:
            what += f", {self.seconds:.3g} s" if math.isfinite(self.seconds) else ", until proof or stop"
        return what

    def run(self, ctx: RunContext) -> str:
        """Tighten ctx.bounds; returns what ran (the result's `method`)."""
        raise NotImplementedError


@dataclass(frozen=True)
class MBE(Phase):
    """Mini-bucket elimination at the plan's z (exact when z is None): a lower bound, and the greedy
    assignment from its messages as an incumbent; with `shifted`, MBE-MM on the FGLP-shifted problem."""

    name: ClassVar[str] = "mbe"
    timer: ClassVar[str] = "eliminate"
    plan: Plan
    predicted_s: float = 0.0
    shifted: bool = False

    @property
    def label(self) -> str:
        if self.plan.z is None:
            return "exact BE"
        return f"MBE(z={self.plan.z})" + ("-MM on the FGLP-shifted problem" if self.shifted else "")

    def run(self, ctx: RunContext) -> str:
        from gpusolve.inference import eliminate
        from gpusolve.distributed.slicing import sliced_step
        on, bounds, engine = ctx.shifted if self.shifted else ctx.problem, ctx.bounds, ctx.engine
        # The shifted problem has its own function list: the same z, planned again for it.
        plan = build_plan(on, ctx.order, self.plan.z, ctx.n_components, limits=ctx.limits) if self.shifted \
            else self.plan
        progress = ctx.progress_factory(sum(mb.joint_entries for mb in plan.minibuckets)) \
            if ctx.progress_factory else None
        matched = {}
        with sliced_step(ctx.cluster, plan, on.domains, engine, ctx.budget) as step:
            lower, tables, messages = eliminate.run_plan(on, plan, engine, progress, stop=ctx.stop,
                                                         match=self.shifted, matched=matched, dense_step=step)
            ctx.out.note += f"; {step.summary()}" if step else ""
        label = "BE" if plan.z is None else f"MBE(z={plan.z})" + (" FGLP+MM" if self.shifted else "")
        if ctx.guide is None or lower >= ctx.guide.lower:  # neither plain nor shifted MBE wins everywhere
            ctx.guide = Run(on, plan, tables, messages, lower, matched)
            ctx.out.plan, ctx.out.messages = plan, messages
        if on.is_forbidden(lower):
            bounds.raise_lower(ctx.problem.top, label)
            bounds.prove(label)
        else:
            bounds.raise_lower(lower, label)
            bounds.offer(eliminate.assign(on, plan, engine, tables, messages), label)
            if plan.exact and not on.relaxed:
                bounds.prove(label)
        return self.label


@dataclass(frozen=True)
class BE(MBE):
    """Exact bucket elimination: the optimum, proven."""

    name: ClassVar[str] = "be"


@dataclass(frozen=True)
class BoundedSparseBE(Phase):
    """Exact sparse BE below the best incumbent, its own cheap MBE run's or one held before
    (eliminate.bounded_sparse); `plan` is the MBE that runs after it when the sparse tables outgrow
    the budget. How many rows survive the incumbent is known only once it runs: `predicted_s` is
    its cheap run's, and `seconds` boxes the rest."""

    name: ClassVar[str] = "bounded-sparse"
    timer: ClassVar[str] = "eliminate"
    returns_when_stopped: ClassVar[bool] = True
    label: ClassVar[str] = "bounded sparse BE"
    plan: Plan | None = None
    predicted_s: float = 0.0
    seconds: float | None = None
    rows: int = 0  # its row limit: the sparse messages the memory budget holds
    cheap: Plan | None = None  # its cheap run's plan, as the schedule planned it (None: planned as it starts)

    def describe(self) -> str:
        what = f"{self.name} (exact sparse BE below the incumbent), cheap run predicted {self.predicted_s:.3g} s, " \
               f"at most {self.rows:,} rows"
        if self.seconds is None or not math.isfinite(self.seconds):
            return what + ", until proof or the rows outgrow the memory budget"
        return what + f", {self.seconds:.3g} s at most"

    def run(self, ctx: RunContext) -> str:
        from gpusolve.inference import eliminate
        box = ctx.stop.within(math.inf if self.seconds is None else self.seconds)
        found = eliminate.bounded_sparse(ctx.problem, ctx.order, self.plan, ctx.budget, ctx.engine, box,
                                         ctx.n_components, ctx.progress_factory, ctx.bounds.assignment, self.cheap)
        if found is None:
            raise NotStarted("bounded sparse BE gave up (its sparse tables outgrew the memory budget)")
        lower, assignment, ctx.out.plan, ctx.out.messages = found
        ctx.bounds.offer(assignment, "bounded sparse BE")
        ctx.bounds.raise_lower(lower, "bounded sparse BE")
        boxed = box.deadline is not None and box.deadline < (ctx.stop.deadline or math.inf)
        if boxed and time.perf_counter() >= box.deadline:  # read, not polled: an interrupt test counts polls
            ctx.out.note += f"; bounded sparse BE stopped at its {self.seconds:.3g} s"
        return self.label


@dataclass(frozen=True)
class FGLP(Phase):
    """Cost shifting on the factor graph (FGLP): a lower bound, and the shifted problem later phases
    run on when it raised the bound."""

    name: ClassVar[str] = "fglp"
    timer: ClassVar[str] = "fglp"
    returns_when_stopped: ClassVar[bool] = True
    label: ClassVar[str] = "FGLP"

    def run(self, ctx: RunContext) -> str:
        from gpusolve.inference.shift import fglp
        candidate = fglp(ctx.problem, stop=ctx.stop.within(FGLP_SHARE * ctx.stop.remaining()))
        if candidate.constant > ctx.bounds.trivial:
            ctx.shifted = candidate
            ctx.bounds.raise_lower(candidate.constant, "FGLP")
        return self.label


@dataclass(frozen=True)
class JGLP(Phase):
    """Cost shifting on the join graph of the tightest MBE run (JGLP): a lower bound never below it,
    for no longer than the eliminations before it took."""

    name: ClassVar[str] = "jglp"
    timer: ClassVar[str] = "jglp"
    returns_when_stopped: ClassVar[bool] = True
    seconds: float | None = None

    def describe(self) -> str:
        return super().describe() + (" at most," if self.seconds is not None else ",") + \
            " no longer than the eliminations before it, from the tighter MBE run"

    def run(self, ctx: RunContext) -> str:
        guide = ctx.guide
        if guide is None or ctx.shifted is None:
            raise NotStarted()  # where FGLP raised nothing, hard constraints absorb shifts on the join graph too (CELAR6)
        from gpusolve.inference.shift import JGLP_BYTES, jglp
        seconds = min(math.inf if self.seconds is None else self.seconds, ctx.out.phase_s.get("eliminate", 0.0))
        if JGLP_PASSES * ctx.predict_s(guide.plan) > seconds:
            raise NotStarted(f"jglp not started (predicted over its {seconds:.3g} s)")
        lower = jglp(guide.problem, guide.plan, ctx.engine, guide.tables, guide.messages, guide.matched,
                     min(ctx.budget // 4, JGLP_BYTES), ctx.stop.within(seconds))
        ctx.bounds.raise_lower(lower, f"JGLP(z={guide.plan.z})")
        return self.label


@dataclass(frozen=True)
class LocalSearch(Phase):
    """Chains then large neighbourhood search (incumbents), each until it stalls, within its slice."""

    name: ClassVar[str] = "local-search"
    timer: ClassVar[str] = "local_search"
    returns_when_stopped: ClassVar[bool] = True
    label: ClassVar[str] = "local search"
    seconds: float = math.inf
    stall: tuple[float, float] = (0.0, 0.0)  # LNS ends after max(s, share of its time) without gain

    def describe(self) -> str:
        floor, share = self.stall
        return super().describe() + \
            f" at most, until improvements stop (LNS: none for {floor:g} s or {share:.0%} of its time)"

    def run(self, ctx: RunContext) -> str:
        core = ctx.core is not None and ctx.core.loaded.is_set()  # VNS's balls are searched without a compile
        _local_search(ctx.problem, ctx.guide, ctx.engine, ctx.bounds, ctx.stop, self.seconds, self.stall, core)
        return self.label


@dataclass(frozen=True)
class Search(Phase):
    """AND/OR branch and bound guided by the tightest MBE run, the compiled search beside it: its
    completion proves the incumbent optimal. Boxed to `seconds` and to the time later phases predict."""

    core_beside: ClassVar[bool] = False
    name: ClassVar[str] = "search"
    timer: ClassVar[str] = "search"
    label: ClassVar[str] = "AND/OR search"
    seconds: float | None = None

    def describe(self) -> str:
        boxed = self.seconds is not None and math.isfinite(self.seconds)
        return super().describe() + (" at most, until proof" if boxed else "")

    def run(self, ctx: RunContext) -> str:
        from gpusolve.search.dfbb import supports
        if ctx.guide is None and (ctx.cluster is not None or supports(ctx.problem) is not None):
            raise NotStarted("search not started (no MBE completed to guide it)")
        seconds = math.inf if self.seconds is None else self.seconds
        core = ctx.compiled_search() if ctx.cluster is None and supports(ctx.problem) is None else None
        return _search(ctx.problem, ctx.order, ctx.guide, ctx.engine, ctx.bounds,
                       ctx.stop.within(seconds, sum(p.predicted_s for p in ctx.later)), ctx.out, ctx.cluster, core)


@dataclass(frozen=True)
class Core(Phase):
    """The compiled search alone (HBFS with EDAC*), before the other phases: small networks of binary
    and ternary functions are proven in milliseconds once it is loaded. Its load (milliseconds when built
    ahead of time; else numba's import and on-disk cache, or a compile with a cold cache, tens of seconds)
    is waited for `load_s` at most, and timed
    as the phase `core_load`; then it searches for `seconds` at most. Stopped, it is paused: the searches
    later in the schedule resume it, and a compile not done goes on beside the phases in between."""

    core_beside: ClassVar[bool] = False
    name: ClassVar[str] = "hbfs"
    timer: ClassVar[str] = "search"
    label: ClassVar[str] = "HBFS (EDAC*)"
    seconds: float = math.inf
    load_s: float = math.inf

    def describe(self) -> str:
        return f"{self.name} (the compiled search alone), its load waited for {self.load_s:.3g} s at most, " \
               f"then {self.seconds:.3g} s at most, until proof"

    def run(self, ctx: RunContext) -> str:
        core = ctx.compiled_search()
        t = time.perf_counter()
        core.run_here(ctx.bounds, ctx.stop.within(self.load_s), until=core.loaded)
        # the phase's time is run_schedule's to add up: the load is moved from it to its own timer
        loading = time.perf_counter() - t
        ctx.out.phase_s["core_load"] = ctx.out.phase_s.get("core_load", 0.0) + loading
        ctx.out.phase_s[self.timer] = ctx.out.phase_s.get(self.timer, 0.0) - loading
        if not core.loaded.is_set():
            core.pause(ctx.bounds)
            if ctx.stop():
                raise Stopped(ctx.stop.signal())
            raise NotStarted(f"{self.name} not started (its load took over {self.load_s:.3g} s: a compile; "
                             "it goes on beside the next phases)")
        return _core_alone(core, ctx.bounds, ctx.stop.within(self.seconds), ctx.out)


@dataclass(frozen=True)
class MAC(Phase):
    """A satisfaction problem: search maintaining arc consistency and GAC, whose first solution is optimal."""

    core_beside: ClassVar[bool] = False
    name: ClassVar[str] = "mac"
    timer: ClassVar[str] = "search"
    seconds: float | None = math.inf

    def run(self, ctx: RunContext) -> str:
        _mac(ctx.problem, ctx.engine, ctx.bounds, ctx.stop, ctx.out, ctx.limits)
        return self.label


def _local_search(problem, guide, engine, bounds: Bounds, stop: Stop, seconds: float,
                  lns_stall: tuple[float, float], core: bool = False) -> None:
    """Chains (on the engine's array module, or NumPy for a small problem: local_search.chains_module),
    seeded by rollouts from the guiding messages and the incumbent, until they stall; then, where the
    compiled search is loaded (`core`), variable neighbourhood search with it (vns) from the incumbent
    until it stalls; then large neighbourhood search on the engine until it stalls too, within the slice.
    VNS's balls of tens of variables are searched with soft arc consistency where LNS's, solved by BE,
    hold a few at CELAR's domain 44: on scen07 (2-core dev box) the first incumbent at most 354,198 came
    at 9.8-45 s with VNS only as the core's polish."""
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
    # a feasible incumbent (Bounds takes no other), and no interrupt that stopped the stage before
    if bounds.assignment is not None and core and not box.signal():
        from gpusolve.search.dfbb import ball_search
        from gpusolve.search.vns import vns
        last[0] = time.perf_counter()
        vns(problem, bounds.assignment, ball_search, rng, Stalled(box, bounds, last, *lns_stall), improved)
    if bounds.assignment is not None and not box.signal():
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


def _search(problem, order, guide, engine, bounds: Bounds, stop: Stop, out: Outcome, cluster=None,
            beside=None) -> str:
    """AND/OR search with the mini-bucket heuristic and, beside it, the compiled depth-first search with
    soft arc consistency `beside` (dfbb.Beside, on integer problems: a portfolio, the first to finish
    proves, incumbents are shared as they come); without a heuristic the compiled search alone. Returns
    what ran."""
    from gpusolve.consistency.globals import propagators
    from gpusolve.search.andor import AndOrSearch, Heuristic
    if stop.remaining() <= 0:  # a box already spent: neither search starts
        raise Stopped()
    if guide is None:
        return _core_alone(beside, bounds, stop, out)
    heuristic = Heuristic.from_run(guide.plan, engine, guide.messages)
    if cluster is not None:
        _search_on_dask(guide.problem, order, heuristic, bounds, stop, out, cluster)
        return "AND/OR search (Dask)"

    def target(upper):
        """The cost the search must beat. Floats: only a clear improvement counts, so summation order
        cannot fake one."""
        return upper if problem.integer or problem.is_forbidden(upper) else upper - 1e-9 * max(1.0, abs(float(upper)))

    def offered(assignment):  # the search's greedy completions, as it goes
        bounds.offer(assignment, "AND/OR search")
        return target(bounds.upper)

    # Each poll publishes what the core beside found (its proof stops the search) and tightens the
    # search's budgets to the incumbent: the core's incumbents prune the AND/OR search too.
    watched = stop if beside is None else beside.watching(bounds, stop)
    s = AndOrSearch(guide.problem, order, heuristic, Polled(watched, lambda: s.tighten(target(bounds.upper))),
                    propagators=propagators(guide.problem, limits=guide.plan.limits), on_incumbent=offered)
    label = "AND/OR search" if beside is None else f"AND/OR search + {beside.LABEL}"
    bounds.begin(label, lambda: s.stats.nodes + (beside.search.nodes if beside is not None else 0))
    if beside is not None:
        beside.start()
    try:
        cost, assignment = s.run(target(bounds.upper))
    except Stopped as e:
        if e.lower is not None:  # the least bound of the open nodes holds for the whole problem
            bounds.raise_lower(e.lower, "AND/OR search")
        if beside is None or not beside.complete:
            raise
        assignment = None  # the core proved first
    finally:
        out.search = s.stats.to_json()
        if beside is not None:
            beside.pause(bounds)
            out.search["dfbb"] = beside.stats()
            out.search["complete"] = s.stats.complete or beside.complete  # the phase's proof, by either
    if s.stats.complete:
        if assignment is not None:
            bounds.offer(assignment, "AND/OR search")
        bounds.prove("AND/OR search")
    return label


def _core_alone(core, bounds: Bounds, stop: Stop, out: Outcome) -> str:
    """The compiled search alone until it proves or `stop` says so; then it is paused."""
    bounds.begin(core.LABEL, lambda: core.search.nodes)
    core.run_here(bounds, stop)
    core.pause(bounds)
    out.search = {"dfbb": core.stats(), "complete": core.complete}
    if not core.complete:
        raise Stopped(stop.signal())
    return core.LABEL


class Polled(Stop):
    """`parent`'s stop, calling `on_poll()` at each poll after asking it."""

    def __init__(self, parent: Stop, on_poll: Callable[[], None]):
        super().__init__(parent=parent)
        self.on_poll = on_poll

    def __call__(self) -> bool:
        done = super().__call__()
        self.on_poll()
        return done


def _mac(problem, engine, bounds: Bounds, stop: Stop, out: Outcome, limits: Limits = DEFAULT) -> None:
    """A satisfaction problem's first solution is optimal; an exhausted search proves infeasibility."""
    from gpusolve.search.mac import Mac
    m = Mac(problem, stop, xp=engine.xp if engine.spec.on_device else None, limits=limits)
    bounds.begin("MAC", lambda: m.stats.nodes)
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
