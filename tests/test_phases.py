"""Every phase kind hears Ctrl-C: interrupted at its k-th poll, it ends within one more, bounds valid.

No clock: the stop flips to interrupted after k polls (helpers.InterruptAfter), and a poll is what
a phase makes per unit of work (a mini-bucket or block, a sweep, a region, 256 search nodes, a
local search sweep or LNS step, a MAC node), so a bounded number of polls is a bounded time.
"""
import math
import signal
import threading
import time

import numpy as np
import pytest
from helpers import InterruptAfter, brute_force, internal, random_problem, toulbar2_optimum

from gpusolve.engines.numpy_engine import NumpyEngine
from gpusolve.generate import generate
from gpusolve.model.problem import CostFunction, Problem, Variable
from gpusolve.order import graph
from gpusolve.plan.buckets import build_plan
from gpusolve.schedule.anytime import plan_schedule
from gpusolve.schedule.bounds import Bounds
from gpusolve.schedule.phases import (
    BE, FGLP, JGLP, MAC, MBE, BoundedSparseBE, Core, LocalSearch, NotStarted, RunContext, Search,
)
from gpusolve.stop import Stop, Stopped

FURTHER_POLLS = 1  # after the poll that said stop: local search's LNS asks once, search's core once
KS = (1, 2, 3, 5, 8, 13)


def context(problem, stop=None):
    order = graph.elimination_order(problem)
    bounds = Bounds.start(problem, time.perf_counter())
    return RunContext(problem, order, NumpyEngine(1), bounds, stop or Stop(), 1 << 30)


def interrupt(phase, ctx, k: int) -> bool:
    """Run `phase` with a stop interrupted at its k-th poll; True when the interrupt came while it ran."""
    ctx.stop = stop = InterruptAfter(k)
    try:
        phase.run(ctx)
    except Stopped as e:
        assert e.interrupted and stop.polls >= k  # raised by the interrupt, not by anything else
    assert stop.polls <= k + FURTHER_POLLS, (phase, k, stop.polls)
    return stop.polls >= k


def assert_valid(ctx, optimum) -> None:
    """lower <= optimum <= upper, the incumbent's cost its upper bound (internal costs)."""
    b = ctx.bounds
    assert b.lower <= optimum + 1e-9
    if b.assignment is not None:
        assert b.upper == ctx.problem.evaluate(b.assignment) >= optimum - 1e-9


def small(seed: int, p_hard: float = 0.2):
    """A random problem small enough to enumerate, large enough for several units of work."""
    problem = random_problem(np.random.default_rng(900 + seed), n_max=8, d_max=4, f_max=14, p_hard=p_hard)
    return problem, brute_force(problem)[0]


def check_kind(make_phase, prepare=lambda ctx: None, seeds=range(6), p_hard=0.2) -> None:
    """For each seed and k: interrupted at poll k the phase ends within FURTHER_POLLS, bounds valid;
    at least one run per kind was interrupted mid-phase."""
    interrupted = 0
    for seed in seeds:
        problem, optimum = small(seed, p_hard)
        for k in KS:
            ctx = context(problem)
            prepare(ctx)
            try:
                interrupted += interrupt(make_phase(ctx), ctx, k)
            except NotStarted:
                break
            assert_valid(ctx, optimum)
    assert interrupted > 0


def smallest_z(ctx):
    return max([f.arity for f in ctx.problem.functions] + [1])


def test_mbe_hears_the_interrupt():
    check_kind(lambda ctx: MBE(build_plan(ctx.problem, ctx.order, smallest_z(ctx))))


def test_exact_be_hears_the_interrupt():
    check_kind(lambda ctx: BE(build_plan(ctx.problem, ctx.order, None)))


def test_bounded_sparse_be_hears_the_interrupt():
    check_kind(lambda ctx: BoundedSparseBE(build_plan(ctx.problem, ctx.order, smallest_z(ctx))), p_hard=0.4)


def test_bounded_sparse_be_hears_the_interrupt_in_its_exact_run(tmp_path):
    """Its exact run below the cheap MBE's incumbent (the second progress bar) hears it too: before, it
    saw only the deadline and ran to its end."""
    problem = generate("grid", 25, 4, 0.3, 0.3, seed=1)
    optimum = internal(problem, toulbar2_optimum(problem, tmp_path / "g.wcsp"))
    in_exact = 0
    for k in range(1, 200, 9):
        runs = []
        ctx = context(problem)
        ctx.progress_factory = lambda total: runs.append(total) or (lambda entries: None)
        cut = interrupt(BoundedSparseBE(build_plan(problem, ctx.order, 2)), ctx, k)
        assert_valid(ctx, optimum)
        in_exact += cut and len(runs) == 2
    assert in_exact > 0


def shifted(ctx) -> None:
    """FGLP run whole (no interrupt), as the schedule runs it before MBE-MM and JGLP."""
    FGLP().run(ctx)


def test_fglp_hears_the_interrupt():
    check_kind(lambda ctx: FGLP(), p_hard=0.0)


def test_mbe_on_the_shifted_problem_hears_the_interrupt():
    def phase(ctx):
        if ctx.shifted is None:
            raise NotStarted()  # FGLP raised nothing here: the schedule skips the shifted MBE too
        return MBE(build_plan(ctx.problem, ctx.order, smallest_z(ctx)), shifted=True)
    check_kind(phase, shifted, seeds=range(12), p_hard=0.0)


def test_jglp_hears_the_interrupt():
    def guided(ctx) -> None:
        MBE(build_plan(ctx.problem, ctx.order, smallest_z(ctx))).run(ctx)
        shifted(ctx)
        ctx.out.phase_s["eliminate"] = math.inf  # JGLP's slice: no longer than the eliminations before it
    check_kind(lambda ctx: JGLP(), guided, seeds=range(12), p_hard=0.0)


def test_local_search_hears_the_interrupt():
    def guided(ctx) -> None:
        MBE(build_plan(ctx.problem, ctx.order, smallest_z(ctx))).run(ctx)
    check_kind(lambda ctx: LocalSearch(seconds=math.inf, stall=(math.inf, 1.0)), guided)


def test_local_search_with_the_compiled_search_loaded_runs_vns_and_hears_the_interrupt(monkeypatch):
    """Where the compiled search is loaded, local search runs VNS with it (vns) between the chains and LNS:
    it hears the interrupt within the same polls, and the bounds it leaves are valid; without it, no VNS."""
    from gpusolve.search import vns as vns_module
    from gpusolve.search.dfbb import Beside, entry_points
    calls, original = [], vns_module.vns
    monkeypatch.setattr(vns_module, "vns", lambda *args, **kwargs: calls.append(1) or original(*args, **kwargs))
    entry_points()

    def guided(ctx, loaded=True) -> None:
        MBE(build_plan(ctx.problem, ctx.order, smallest_z(ctx))).run(ctx)
        ctx.core = Beside(ctx.problem, ctx.bounds)  # made, not started: its load is what local search asks
        if loaded:
            ctx.core.loaded.set()
    check_kind(lambda ctx: LocalSearch(seconds=math.inf, stall=(math.inf, 1.0)), guided)
    assert calls
    calls.clear()
    check_kind(lambda ctx: LocalSearch(seconds=math.inf, stall=(math.inf, 1.0)), lambda ctx: guided(ctx, False))
    assert not calls


def test_mac_hears_the_interrupt():
    """Satisfaction problems (costs 0 or forbidden): MAC's first solution is optimal."""
    interrupted = 0
    for seed in range(6):
        rng = np.random.default_rng(950 + seed)
        top = 1
        variables = [Variable(f"x{i}", 4) for i in range(7)]
        functions = []
        for _ in range(12):
            u, v = (int(x) for x in rng.choice(7, 2, replace=False))
            functions.append(CostFunction((u, v), np.where(rng.random((4, 4)) < 0.3, top, 0).astype(np.int64)))
        problem = Problem("sat", variables, functions, top=top)
        assert problem.is_satisfaction
        optimum = brute_force(problem)[0]
        for k in KS:
            ctx = context(problem)
            interrupted += interrupt(MAC(), ctx, k)
            assert_valid(ctx, optimum)
    assert interrupted > 0


def held_core(monkeypatch) -> threading.Event:
    """The compiled search's slices wait until the returned event is set, as its first slice waits for
    a cold compile."""
    from gpusolve.search import dfbb
    release, run = threading.Event(), dfbb.DepthFirst.run
    monkeypatch.setattr(dfbb.DepthFirst, "run", lambda search, nodes: release.wait(60) and run(search, nodes))
    return release


@pytest.mark.parametrize("beside", ["none", "held", "running"])
def test_search_hears_the_interrupt(beside, tmp_path, monkeypatch):
    """AND/OR search guided by MBE, polled every 256 nodes, with the compiled search beside it or not
    ("none"). "held": the compiled search's slices wait until the test ends, as its first slice waits
    for a cold compile, so the AND/OR search must hear every interrupt. "running": the compiled search
    may prove the optimum first in its thread (then the search ends with that proof); who wins is a
    race, so those runs are checked for valid bounds, not counted."""
    from gpusolve.search import dfbb
    if beside == "none":
        monkeypatch.setattr(dfbb, "supports", lambda problem: "the compiled search is left out of this test")
    release = held_core(monkeypatch) if beside == "held" else threading.Event()
    interrupted = 0
    try:
        for seed in range(3):
            problem = generate("grid", 36, 5, 0.3, 0.3, seed=seed)
            optimum = toulbar2_optimum(problem, tmp_path / "g.wcsp")
            optimum = problem.top if optimum is None else internal(problem, optimum)
            for k in KS[:3]:
                ctx = context(problem)
                MBE(build_plan(problem, ctx.order, 2)).run(ctx)
                cut = interrupt(Search(), ctx, k)
                assert cut or beside == "running" and ctx.bounds.proven
                interrupted += cut
                assert_valid(ctx, optimum)
    finally:
        release.set()
    assert interrupted > 0 or beside == "running"


@pytest.mark.parametrize("core", ["held", "running"])
def test_the_compiled_search_first_hears_the_interrupt(core, monkeypatch):
    """The compiled search alone, first in the schedule, polled while it loads and while it searches.
    "held": its slices wait until the test ends, as its first slice waits for a cold compile, so the
    phase must hear every interrupt while it loads; "running": it may prove the optimum first (a race:
    those runs are checked for valid bounds, not counted)."""
    release = held_core(monkeypatch) if core == "held" else threading.Event()
    interrupted = 0
    try:
        for seed in range(2):
            problem, optimum = small(seed)
            for k in KS[:3]:
                ctx = context(problem)
                try:
                    cut = interrupt(Core(), ctx, k)
                finally:
                    ctx.core.finish(ctx.bounds)
                assert cut or core == "running" and ctx.bounds.proven
                interrupted += cut
                assert_valid(ctx, optimum)
    finally:
        release.set()
    assert interrupted > 0 or core == "running"


def test_a_load_over_its_box_goes_on_and_the_next_search_resumes_it(monkeypatch):
    """A cold compile takes tens of seconds: past its box the first phase ends, the compile goes on, and
    the search after it resumes the same compiled search (its first slice held here for the compile)."""
    release = held_core(monkeypatch)
    proven = 0
    try:
        for seed in range(12):
            problem, optimum = small(seed)
            ctx = context(problem)
            if ctx.bounds.closed:  # infeasible by its trivial bound: nothing to search
                continue
            with pytest.raises(NotStarted, match="its load took over 0 s"):
                Core(load_s=0.0).run(ctx)
            core = ctx.core
            assert not core.loaded.is_set()
            release.set()
            assert Search().run(ctx) == core.LABEL and ctx.core is core and core.loaded.is_set()
            assert ctx.bounds.proven and ctx.bounds.upper == optimum if optimum < problem.top \
                else ctx.bounds.assignment is None
            core.finish(ctx.bounds)
            release.clear()
            proven += 1
    finally:
        release.set()
    assert proven >= 3


def test_the_compiled_search_searches_beside_the_phases_after_its_box_and_its_proof_ends_them():
    """Past its first box the compiled search goes on beside the next phases (a portfolio): a phase that
    never ends by itself (it waits for its stop) is ended by the core's proof, which the run reports
    as the method, with the optimum (brute force); the phase is not listed as run nor as cut off."""
    from gpusolve.schedule.anytime import _run_phase
    from gpusolve.search.dfbb import Beside

    class Waiting(LocalSearch):
        def run(self, ctx):
            while not ctx.stop():
                time.sleep(0.01)
            raise Stopped(ctx.stop.signal())

    proven = 0
    for seed in range(12):
        problem, optimum = small(seed)
        ctx = context(problem, Stop(time.perf_counter() + 120))
        if ctx.bounds.closed or optimum >= problem.top:
            continue
        ctx.core = Beside(problem, ctx.bounds, slice_nodes=1)  # as Core leaves it: made, not done
        _run_phase(Waiting(), ctx)
        assert ctx.bounds.closed and ctx.bounds.upper == optimum
        assert ctx.out.ran == [ctx.core.LABEL] and "cut off" not in ctx.out.note
        ctx.core.finish(ctx.bounds)
        proven += 1
    assert proven >= 3


def test_the_schedule_ends_at_the_interrupt_and_reports_it():
    """Through run_schedule: the phase under way is cut off and not listed as run."""
    from gpusolve.schedule.anytime import run_schedule
    problem, optimum = small(6)
    order = graph.elimination_order(problem)
    exact = build_plan(problem, order, None)
    schedule = plan_schedule(problem, order, exact, 1 << 30, None, "numpy", search=False)
    bounds = Bounds.start(problem, time.perf_counter())
    assert not bounds.closed and [p.name for p in schedule.phases] == ["be"]
    stop = InterruptAfter(2)  # the loop's first poll, then the first bucket of the first phase
    out = run_schedule(problem, order, schedule, NumpyEngine(1), bounds, stop, 1 << 30)
    assert stop.polls <= 2 + 1 and out.note == "; exact BE cut off" and out.ran == []
    assert bounds.lower <= optimum


def test_an_interrupt_reaches_every_phase_stop_with_its_signal():
    root = Stop()
    box = root.within(60.0).within(math.inf, reserve=1.0)
    assert not box()
    root.interrupted = signal.SIGINT
    with pytest.raises(Stopped) as e:
        box.check()
    assert e.value.interrupted == signal.SIGINT
    with pytest.raises(Stopped) as e:
        Stop(0.0).check()  # a deadline passed: no signal
    assert e.value.interrupted is False
