"""The anytime schedule: bounds only tighten, a stop returns what is held, the schedule is printable."""
import json
import math
import re
import signal
import subprocess
import sys
import time
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import Phase as HypothesisPhase
from hypothesis import strategies as st
from helpers import brute_force, random_problem, toulbar2_optimum

from gpusolve.order import graph
from gpusolve.inference.eliminate import INCUMBENT_BYTES
from gpusolve.schedule import anytime
from gpusolve.schedule.anytime import (BOUNDED_SPARSE_SHARE, SEARCH_FIRST_S, SEARCH_FIRST_SHARE, Schedule,
                                       plan_schedule, run_schedule)
from gpusolve.schedule.bounds import Bounds
from gpusolve.schedule.phases import FGLP, JGLP, MBE, Phase, Search, predict_s
from gpusolve.search.andor import AndOrSearch
from gpusolve.stop import Stop
from gpusolve.generate import generate
from gpusolve.plan.buckets import build_plan, largest_fitting_z, plan_within
from gpusolve.schedule.solve import Options, solve
from gpusolve.consistency.preprocess import preprocess
from gpusolve.model.problem import CostFunction, Problem
from gpusolve.parsers.wcsp import write_wcsp


def hard_grid():
    """10x10 grid, domain 10, half the tuples forbidden: far beyond exact BE, toulbar2 has no proof in 60 s."""
    return generate("grid", 100, 10, 0.3, 0.5, seed=1)


def assert_trace_monotone(trace):
    lows = [lo for _, lo, _, _ in trace if lo is not None]
    highs = [hi for _, _, hi, _ in trace if hi is not None]
    times = [t for t, _, _, _ in trace]
    assert lows == sorted(lows) and highs == sorted(highs, reverse=True) and times == sorted(times)
    if lows and highs:
        assert lows[-1] <= highs[-1]


def test_bounds_accept_only_improvements():
    rng = np.random.default_rng(3)
    while True:  # a problem whose worst assignment is worse than its best
        problem = random_problem(rng, n_max=5, d_max=3, f_max=8, p_hard=0.0)
        best, arg = brute_force(problem)
        worst = max((problem.evaluate(a), a) for a in np.ndindex(*problem.domains))[1]
        if problem.evaluate(worst) > best:
            break
    b = Bounds.start(problem, time.perf_counter())
    assert b.lower <= best
    assert b.offer(worst, "x") and b.upper == problem.evaluate(worst)
    assert b.offer(arg, "y") and b.upper == best
    assert not b.offer(worst, "z") and b.upper == best  # never a worse incumbent
    b.raise_lower(best + 5, "too high")  # a lower bound above the incumbent is clipped to it
    assert b.lower == best and b.closed


class AfterChecks(Stop):
    """Says stop from its k-th question on: every phase boundary and check becomes a stop point."""

    def __init__(self, k: int):
        super().__init__()
        self.k, self.calls = k, 0

    def __call__(self) -> bool:
        self.calls += 1
        return self.calls > self.k


@pytest.mark.parametrize("seed", range(60))
def test_every_stop_point_holds_valid_bounds(seed):
    """Stopped after k checks, any schedule returns lower <= optimum <= upper and a monotone trace."""
    rng = np.random.default_rng(500 + seed)
    problem = random_problem(rng, n_max=7, d_max=4, f_max=12, integer=seed % 3 != 0)
    best, _ = brute_force(problem)
    stop = AfterChecks(seed % 7)
    r = solve(problem, Options(device="cpu", z=max([f.arity for f in problem.functions] + [1])), stop=stop)
    assert_trace_monotone(r.trace)
    if r.status == "infeasible":
        assert best >= problem.top
        return
    lo = problem.sense * r.lower_bound - problem.offset
    assert lo <= best + 1e-9
    if r.upper_bound is not None:
        assert problem.sense * r.upper_bound - problem.offset >= best - 1e-9
        assert problem.evaluate(r.assignment) < problem.top


class StopAt(Stop):
    """A stop at a chosen point instead of a clock: the deadline `solve` sets from the time limit (the
    schedule is planned for it) passes only once `now()` says so, or with `interrupt` a Ctrl-C comes
    then. Slices of their own (local search, JGLP's, bounded sparse BE's box) still end on the wall clock. The phases ask
    through `within`; the checks made once AND/OR search has started (`searching`, set by a patch of
    its run) are counted (a box for it is not kept: these schedules give it none)."""

    def __init__(self, now, monkeypatch, interrupt: bool = False):
        super().__init__()
        self.now, self.interrupt, self.passed, self.search_checks = now, interrupt, False, 0
        self.searching = False
        run = AndOrSearch.run

        def searching(search, incumbent):
            self.searching = True
            return run(search, incumbent)
        monkeypatch.setattr(AndOrSearch, "run", searching)

    def __call__(self) -> bool:
        if not (self.passed or self.interrupted) and self.now():
            self.interrupted, self.passed = self.interrupt, not self.interrupt
        return self.passed or bool(self.interrupted)

    def remaining(self) -> float:
        return 0.0 if self.passed else math.inf

    def within(self, seconds: float, reserve: float = 0.0) -> Stop:
        outer = self

        class SearchStop(Stop):
            def __call__(self) -> bool:
                outer.search_checks += outer.searching
                return outer() or self.deadline is not None and time.perf_counter() >= self.deadline
        return SearchStop(time.perf_counter() + seconds if math.isfinite(seconds) else None)


SEARCH_CHECK_NODES = 256  # the search asks whether to stop every 256 nodes


def test_time_limit_is_honoured_and_bounds_are_reported(monkeypatch):
    """The limit passes at the search's 4th check: the run ends right there, with the bounds held.
    Dense tables: one search, not a boxed one, bounded sparse BE and another (the checks would add up)."""
    problem = hard_grid()
    stop = StopAt(lambda: stop.search_checks >= 4, monkeypatch)
    r = solve(problem, Options(device="cpu", time_limit=3.0, tables="dense"), stop=stop)
    assert stop.deadline is not None and r.search["nodes"] == 4 * SEARCH_CHECK_NODES  # not one node more
    assert r.status == "bounded" and r.lower_bound is not None and r.upper_bound is not None
    assert r.lower_bound < r.upper_bound and problem.evaluate(r.assignment) == r.upper_bound
    assert_trace_monotone(r.trace)
    assert "search" in r.schedule[-1] and not r.search["complete"]
    assert "time limit reached" in r.device_note and "AND/OR search cut off" in r.device_note


def test_interrupt_stops_at_the_next_check(monkeypatch):
    """Interrupted at the search's 4th check (no time limit), the run ends there with an incumbent."""
    problem = hard_grid()
    stop = StopAt(lambda: stop.search_checks >= 4, monkeypatch, interrupt=True)
    r = solve(problem, Options(device="cpu", z=5), stop=stop)  # z=5: cheap, and its greedy assignment is feasible
    assert r.search["nodes"] == 4 * SEARCH_CHECK_NODES and not r.search["complete"]
    assert r.status == "bounded" and r.upper_bound is not None and "interrupted" in r.device_note
    assert problem.evaluate(r.assignment) == r.upper_bound and "time limit" not in r.device_note


def test_search_improvements_are_in_the_trace_as_they_come(tmp_path, monkeypatch):
    """A grid in float costs (no compiled search beside it), MBE(z=2) then AND/OR search stopped at its
    4th check: the incumbents the search offered as it went are in the trace, under its name, and the
    bounds held bracket pytoulbar2's optimum. (Cut off, the search once reported nothing it found.)"""
    from gpusolve.engines.numpy_engine import NumpyEngine
    integer = generate("grid", 25, 4, 0.4, 0.0, seed=1)
    optimum = toulbar2_optimum(integer, tmp_path / "g.wcsp")
    problem = Problem(integer.name, integer.variables, [CostFunction(f.scope, f.table.astype(np.float64))
                                                        for f in integer.functions], integer=False, top=np.inf)
    order = graph.elimination_order(problem)
    schedule = Schedule((MBE(build_plan(problem, order, 2)), Search(seconds=math.inf)), "numpy")
    bounds = Bounds.start(problem, time.perf_counter())
    stop = StopAt(lambda: stop.search_checks >= 4, monkeypatch)
    out = run_schedule(problem, order, schedule, NumpyEngine(1), bounds, stop, 1 << 30)
    assert out.search["nodes"] == 4 * SEARCH_CHECK_NODES and "AND/OR search cut off" in out.note
    mbe_upper = max(hi for _, _, hi, phase in bounds.trace if phase == "MBE(z=2)")
    found = [hi for _, _, hi, phase in bounds.trace if phase == "AND/OR search"]
    assert found and found[0] < mbe_upper and bounds.upper == found[-1] == problem.evaluate(bounds.assignment)
    assert bounds.lower <= optimum <= bounds.upper
    assert_trace_monotone(bounds.trace)


def test_schedule_is_exact_be_when_it_fits_else_bounds_then_search():
    small = generate("random", 12, 4, 0.3, 0.3, seed=1)
    order = graph.elimination_order(small)
    exact = plan_within(small, order, None, 1 << 30, 1, "auto")
    names = [p.name for p in plan_schedule(small, order, exact, 1 << 30, None, "numpy").phases]
    assert names == ["be"]
    problem = hard_grid()
    order = graph.elimination_order(problem)
    assert plan_within(problem, order, None, 1 << 30, 1, "auto") is None
    schedule = plan_schedule(problem, order, None, 1 << 30, 10.0, "numpy")
    names = [p.name for p in schedule.phases]
    # a deadline: the compiled search's box (integer costs, binary functions), incumbents (local search on
    # half its box), the bounds that guide search, a boxed search, bounded sparse BE below the incumbents,
    # JGLP's bound (which a proof makes moot), search again
    assert names == ["hbfs", "mbe", "local-search", "mbe", "fglp", "mbe", "search", "bounded-sparse", "jglp",
                     "search"]
    local = next(p for p in schedule.phases if p.name == "local-search")
    assert local.seconds == anytime.BOUNDED_LOCAL_SHARE * min(anytime.LOCAL_SEARCH_SHARE * 10.0, anytime.LOCAL_SEARCH_S)
    untimed = [p.name for p in plan_schedule(problem, order, None, 1 << 30, None, "numpy").phases]
    assert untimed == names  # no limit: the same phases, each with the caps a long limit gets
    first, plain, matched = [p for p in schedule.phases if p.name == "mbe"]
    assert first.plan.z < plain.plan.z and plain.plan is matched.plan is schedule.heuristic
    assert matched.shifted and not plain.shifted
    assert "search" in schedule.describe()


def test_the_compiled_search_gets_the_first_box_where_exact_be_does_not_run_alone():
    """CELAR6-SUB0 waited 6 s of MBE, local search and AND/OR search for a proof the compiled search
    makes in 151 nodes: an integer network of functions of arity at most 3 that exact BE does not take
    alone gets the compiled search first, boxed (a longer limit, no shorter box); a problem exact BE
    solves at once still goes to exact BE alone; float costs, arity 4 or a --z keep the old order."""
    small = generate("random", 12, 4, 0.3, 0.3, seed=1)
    order = graph.elimination_order(small)
    exact = plan_within(small, order, None, 1 << 30, 1, "auto")
    assert [p.name for p in plan_schedule(small, order, exact, 1 << 30, None, "numpy").phases] == ["be"]
    problem = hard_grid()  # integer, binary; exact BE fits no budget here
    order = graph.elimination_order(problem)
    for limit in LIMITS:
        schedule = plan_schedule(problem, order, None, 1 << 30, limit, "numpy")
        names = [p.name for p in schedule.phases]
        first = schedule.phases[0]
        assert names[0] == "hbfs" and "hbfs" not in names[1:] and names[-1] == "search"
        share = anytime.CORE_FIRST_SHARE * (limit or math.inf)
        assert (first.seconds, first.load_s) == (min(anytime.CORE_FIRST_S, share), min(anytime.CORE_LOAD_S, share))
        assert any(line.startswith("compiled search (HBFS, EDAC*) first: scheduled") for line in schedule.choice)
    floats = Problem(problem.name, problem.variables, [CostFunction(f.scope, f.table.astype(np.float64))
                                                       for f in problem.functions], integer=False, top=np.inf)
    quaternary = Problem(problem.name, problem.variables, problem.functions
                         + [CostFunction((0, 1, 2, 3), np.zeros((10,) * 4, dtype=np.int64))], top=problem.top)
    for other, z, why in ((floats, None, "costs are not integers"), (quaternary, None, "arity 4, over 3"),
                          (problem, 3, "a --z asks for mini-buckets")):
        schedule = plan_schedule(other, order, None, 1 << 30, 10.0, "numpy", z=z)
        assert "hbfs" not in [p.name for p in schedule.phases]
        assert any(line.startswith("compiled search (HBFS, EDAC*) first: not scheduled") and line.endswith(why)
                   for line in schedule.choice), schedule.choice


def test_a_network_the_compiled_search_proves_at_once_takes_no_other_phase(tmp_path, monkeypatch):
    """Exact BE does not fit the memory budget: the compiled search, first, proves pytoulbar2's optimum
    and nothing after it runs (its boxes unbounded here: a loaded machine must not make the test fail)."""
    monkeypatch.setattr(anytime, "CORE_LOAD_S", math.inf)
    monkeypatch.setattr(anytime, "CORE_FIRST_S", math.inf)
    problem = generate("random", 16, 8, 0.4, 0.3, seed=1)
    order = graph.elimination_order(problem)
    budget = 64 << 20
    assert build_plan(problem, order, None).peak_bytes > budget
    r = solve(problem, Options(device="cpu", mem_limit=budget))
    assert r.status == "optimal" and r.upper_bound == toulbar2_optimum(problem, tmp_path / "r.wcsp")
    assert r.method == "HBFS (EDAC*)" and r.search["complete"] and r.search["dfbb"]["nodes"] > 0
    assert "core_load" in r.phases and not {"eliminate", "local_search", "fglp"} & set(r.phases)


def _early_searches(monkeypatch) -> list:
    """The compiled searches solve() makes, recorded."""
    from gpusolve.search import dfbb
    made = []
    init = dfbb.Beside.__init__

    def recorded(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.append(self)
    monkeypatch.setattr(dfbb.Beside, "__init__", recorded)
    return made


def test_the_compiled_search_proves_while_the_schedule_is_planned(tmp_path, monkeypatch):
    """The compiled search starts before ordering and planning; ordering held back until that search has
    proven, the schedule is its phase alone (no plan of a later phase is built), which takes its proof
    (pytoulbar2's optimum) without searching again, and the result reads as that phase's proof always has."""
    from gpusolve.schedule import solve as solve_module
    from gpusolve.search.dfbb_build import built
    if built() is None:
        pytest.skip("the compiled search is not built ahead of time: it starts with the schedule")
    made = _early_searches(monkeypatch)
    order = solve_module._order
    held = []

    def held_back(*args):
        made[0]._thread.join(60)
        held.append((made[0].complete, made[0].search.nodes))
        return order(*args)
    monkeypatch.setattr(solve_module, "_order", held_back)
    problem = generate("random", 16, 8, 0.4, 0.3, seed=1)
    r = solve(problem, Options(device="cpu", mem_limit=64 << 20))  # no exact plan fits
    assert r.status == "optimal" and r.upper_bound == toulbar2_optimum(problem, tmp_path / "r.wcsp")
    assert len(made) == 1 and held == [(True, r.search["dfbb"]["nodes"])]
    assert r.method == "HBFS (EDAC*)" and r.engine == "numpy" and r.schedule[0].startswith("1. hbfs")
    assert len(r.schedule) == 1 and {"order", "plan", "core_load"} <= set(r.phases)


def test_a_schedule_planned_after_the_compiled_search_proved_is_its_phase_alone():
    """plan_schedule's `proven`: once the compiled search started before planning has proven, where it would
    be the first phase it is the only one, and the choice says why; where exact BE runs alone, or where it
    would not run first (float costs), the schedule is the whole one: the method a result names does not
    depend on which finished first."""
    small = generate("random", 12, 4, 0.3, 0.3, seed=1)
    order = graph.elimination_order(small)
    exact = plan_within(small, order, None, 1 << 30, 1, "auto")
    assert [p.name for p in plan_schedule(small, order, exact, 1 << 30, None, "numpy", proven=lambda: True).phases] \
        == ["be"]
    problem = hard_grid()
    order = graph.elimination_order(problem)
    whole = plan_schedule(problem, order, None, 1 << 30, 10.0, "numpy", proven=lambda: False)
    alone = plan_schedule(problem, order, None, 1 << 30, 10.0, "numpy", proven=lambda: True)
    assert [p.name for p in whole.phases][0] == "hbfs" and len(whole.phases) > 1
    assert alone.phases == whole.phases[:1]
    assert alone.choice[-1] == "the phases after it: not planned, the compiled search proved the optimum meanwhile"
    assert alone.choice[:-1] == whole.choice[:len(alone.choice) - 1]
    assert alone.choice[-2].startswith("compiled search (HBFS, EDAC*) first: scheduled")
    asked = []  # proven is asked again before each later plan is built: a proof at any of them ends planning
    plan_schedule(problem, order, None, 1 << 30, 10.0, "numpy", proven=lambda: asked.append(1) and False)
    assert len(asked) > 2
    for k in range(len(asked)):
        calls = iter(range(len(asked)))
        late = plan_schedule(problem, order, None, 1 << 30, 10.0, "numpy", proven=lambda: next(calls) >= k)
        assert late.phases == alone.phases and late.choice[-1] == alone.choice[-1]
    floats = Problem(problem.name, problem.variables, [CostFunction(f.scope, f.table.astype(np.float64))
                                                       for f in problem.functions], integer=False, top=np.inf)
    names = [p.name for p in plan_schedule(floats, order, None, 1 << 30, 10.0, "numpy", proven=lambda: True).phases]
    assert names == [p.name for p in plan_schedule(floats, order, None, 1 << 30, 10.0, "numpy").phases]
    assert len(names) > 1 and "hbfs" not in names


def test_a_search_started_before_planning_is_resumed_or_finished(tmp_path, monkeypatch):
    """Where the schedule starts with the compiled search, its phase resumes the one started before planning
    (one per run) to pytoulbar2's optimum; where exact BE runs alone, that search is finished, whatever it
    found, and BE proves the brute-force optimum; an error in planning finishes it too."""
    from gpusolve.host import BudgetError
    from gpusolve.schedule import solve as solve_module
    from gpusolve.search.dfbb_build import built
    if built() is None:
        pytest.skip("the compiled search is not built ahead of time: it starts with the schedule")
    monkeypatch.setattr(anytime, "CORE_LOAD_S", math.inf)
    monkeypatch.setattr(anytime, "CORE_FIRST_S", math.inf)
    made = _early_searches(monkeypatch)
    tried = 0
    for seed in range(20):
        problem = random_problem(np.random.default_rng(900 + seed), n_max=8, d_max=4, f_max=14, p_hard=0.1)
        reduced = preprocess(problem)
        optimum = brute_force(problem)[0]
        if reduced.infeasible or optimum >= problem.top:
            continue
        made.clear()
        r = solve(problem, Options(device="cpu"))
        assert r.status == "optimal" and r.upper_bound == problem.to_file_value(optimum) and r.method == "exact BE"
        assert len(made) == (0 if reduced.problem.is_satisfaction else 1)
        for core in made:
            core._thread.join(10)
            assert not core._thread.is_alive()
        tried += 1
    assert tried >= 6
    for seed in (1, 2, 3):
        problem = generate("random", 16, 8, 0.4, 0.3, seed=seed)
        made.clear()
        r = solve(problem, Options(device="cpu", mem_limit=64 << 20))  # no exact plan fits
        assert r.status == "optimal" and r.upper_bound == toulbar2_optimum(problem, tmp_path / f"{seed}.wcsp")
        assert r.method == "HBFS (EDAC*)" and r.engine == "numpy" and len(made) == 1
    made.clear()

    def no_budget(*args, **kwargs):
        raise BudgetError("no bound fits")
    monkeypatch.setattr(solve_module, "make_schedule", no_budget)
    with pytest.raises(BudgetError):
        solve(problem, Options(device="cpu"))
    assert len(made) == 1
    made[0]._thread.join(10)
    assert not made[0]._thread.is_alive()


class BoxesSpent(Stop):
    """Every boxed phase is stopped at its first check (no clock); the run itself is not."""

    def within(self, seconds: float, reserve: float = 0.0) -> Stop:
        spent = math.isfinite(seconds)

        class Box(Stop):
            def __call__(self) -> bool:
                return spent or super().__call__()
        return Box(None, self)


def test_the_searches_of_a_run_resume_one_compiled_search(monkeypatch):
    """A boxed search stopped the compiled search and the next search built a new one from the root;
    now one compiled search per run, paused between the phases it runs in, alone or beside AND/OR
    search, and its proof stands (brute force)."""
    from gpusolve.engines.numpy_engine import NumpyEngine
    from gpusolve.search import dfbb
    built = []
    init = dfbb.DepthFirst.__init__

    def counted(self, *args, **kwargs):
        built.append(self)
        init(self, *args, **kwargs)
    monkeypatch.setattr(dfbb.DepthFirst, "__init__", counted)

    def resumed(problem, guide: tuple, optimum) -> bool:
        """Whether the last search ran, on the compiled search the boxed one paused."""
        built.clear()
        order = graph.elimination_order(problem)
        bounds = Bounds.start(problem, time.perf_counter())
        schedule = Schedule(guide + (Search(seconds=1.0), Search()), "numpy")
        out = run_schedule(problem, order, schedule, NumpyEngine(1), bounds, BoxesSpent(), 1 << 30)
        assert len(built) == 1 and bounds.closed
        assert bounds.upper == optimum if optimum < problem.top else bounds.assignment is None
        return "AND/OR search cut off" in out.note and len(out.ran) > len(guide)
    alone = 0
    for seed in range(30):
        problem = random_problem(np.random.default_rng(700 + seed), n_max=7, d_max=4, f_max=12, p_hard=0.15)
        if not Bounds.start(problem, 0.0).closed:  # else a function forbids everything: nothing to search
            alone += resumed(problem, (), brute_force(problem)[0])
    assert alone >= 10
    # beside AND/OR search, on a grid neither proves in their boxes: both boxes spent, one compiled search
    problem = hard_grid()
    order = graph.elimination_order(problem)
    built.clear()
    schedule = Schedule((MBE(build_plan(problem, order, 2)), Search(seconds=1.0), Search(seconds=2.0)), "numpy")
    out = run_schedule(problem, order, schedule, NumpyEngine(1), Bounds.start(problem, time.perf_counter()),
                       BoxesSpent(), 1 << 30)
    assert len(built) == 1 and out.note.count("AND/OR search cut off") == 2


def assert_no_weaker(strong: Schedule, weak: Schedule) -> None:
    """`strong` is no weaker than `weak`: exact BE alone beats any schedule; otherwise a heuristic at no
    smaller z, and each other phase of `weak` in `strong` too, with no shorter slice, stall or box
    (a search boxed for exact BE after it excepted)."""
    if [p.name for p in strong.phases] == ["be"]:
        return
    assert [p.name for p in weak.phases] != ["be"]
    z, seconds = (lambda s: s.heuristic.z or math.inf), (lambda p: math.inf if p.seconds is None else p.seconds)
    assert z(strong) >= z(weak)
    proof = any(p.name == "be" for p in strong.phases)

    def no_weaker(s: Phase, w: Phase) -> bool:
        if s.name == "search" and proof:
            return True
        stall = s.name != "local-search" or s.stall[0] >= w.stall[0] and s.stall[1] >= w.stall[1]
        return seconds(s) >= seconds(w) and stall
    for w in weak.phases:
        if w.name != "mbe":
            assert any(s.name == w.name and no_weaker(s, w) for s in strong.phases), w.describe()


LIMITS = [0.5, 10.0, 30.0, 300.0, None]  # each share below, between and beyond the heuristic's caps
# (topology, variables, domain size, memory budget, engine, its CPU threads, GPU memory budget): problems
# whose schedules change with the limit (z, exact BE instead of bounds, exact BE after a boxed search)
CHANGING = [("random", 64, 8, 1 << 30, "numpy", 2, None), ("random", 100, 5, 1 << 24, "cupy", 1, None),
            ("scalefree", 64, 10, 1 << 30, "numpy", 2, None), ("grid", 64, 5, 1 << 30, "numpy", 2, None),
            ("random", 36, 5, 1 << 30, "numpy", 16, None), ("grid", 100, 10, 1 << 30, "numpy", 2, None),
            ("grid", 36, 5, 1 << 30, "cupy", 1, 1 << 10)]


@settings(max_examples=12, deadline=None, derandomize=True, phases=[HypothesisPhase.generate],
          suppress_health_check=[HealthCheck.too_slow])
@given(config=st.sampled_from(CHANGING), seed=st.integers(0, 9))
def test_a_longer_limit_or_none_never_plans_a_weaker_schedule(config, seed):
    """No limit once took a 1 s share for the heuristic (z=6, over 3 M search nodes) where 30 s took z=7
    (0.33 M nodes), and local search after it with a shorter stall. Planning alone, no solving."""
    topology, n, d, budget, engine, threads, device_budget = config
    problem = generate(topology, n, d, 0.3, 0.5, seed=seed)
    order = graph.elimination_order(problem)
    exact = plan_within(problem, order, None, budget, 1, "auto")
    schedules = [plan_schedule(problem, order, exact, budget, t, engine, threads=threads, device_budget=device_budget)
                 for t in LIMITS]
    for weak, strong in zip(schedules, schedules[1:]):
        assert_no_weaker(strong, weak)


# (topology, variables, domain size, memory budget): integer problems whose exact plan fits, fits only
# slowly, or does not fit (bounded sparse BE's ground); the CPU engine on two threads
EXACT_OR_NOT = [("random", 64, 8, 1 << 30), ("grid", 100, 10, 1 << 30), ("grid", 64, 5, 1 << 30),
                ("random", 100, 5, 1 << 24), ("scalefree", 64, 10, 1 << 26), ("random", 16, 4, 1 << 30)]


@settings(max_examples=12, deadline=None, derandomize=True, phases=[HypothesisPhase.generate],
          suppress_health_check=[HealthCheck.too_slow])
@given(config=st.sampled_from(EXACT_OR_NOT), seed=st.integers(0, 9))
def test_an_exact_method_whose_prediction_fits_the_time_left_is_scheduled(config, seed):
    """SPOT5 505: no exact plan fits, search stalls above the optimum, and bounded sparse BE proves it;
    once search joined the schedule, bounded sparse BE was planned only without search. Exact BE runs
    whenever its prediction fits; bounded sparse BE whenever its cheap run's does and the exact plan is
    within its reach (what it keeps below
    the incumbent is known only as it runs), boxed to its share, after a boxed search (whose quick proofs
    come first) and before search without a box: with no limit unboxed (memory caps its rows: it ends,
    search may not)."""
    topology, n, d, budget = config
    problem = generate(topology, n, d, 0.3, 0.5, seed=seed)
    assert problem.integer
    order = graph.elimination_order(problem)
    exact = plan_within(problem, order, None, budget, 1, "auto")
    for limit in LIMITS:
        schedule = plan_schedule(problem, order, exact, budget, limit, "numpy", threads=2)
        names = [p.name for p in schedule.phases]
        if exact is not None and predict_s(exact, "numpy", 2) <= 0.8 * (limit or math.inf):
            assert "be" in names
        if names == ["be"]:
            continue  # its proof needs nothing else
        heuristic = schedule.heuristic
        cheap = largest_fitting_z(problem, order, min(budget, INCUMBENT_BYTES), problem.max_arity, heuristic.z)
        share = BOUNDED_SPARSE_SHARE * (limit or math.inf)
        if cheap is None or heuristic.rows_within(budget) == 0 or predict_s(cheap, "numpy", 2) > share:
            continue
        if limit is not None and predict_s(build_plan(problem, order, None), "numpy", 2) > anytime.SPARSE_REACH * limit:
            assert "bounded-sparse" not in names  # out of its reach (see the test below)
            continue
        assert "bounded-sparse" in names, schedule.describe()
        at = names.index("bounded-sparse")
        bounded = schedule.phases[at]
        # after the passes that guide search and a boxed search, before JGLP and search without a box
        assert all(i < at for i, p in enumerate(schedule.phases) if p.name == "mbe" and p.plan is heuristic)
        first_search, last_search = schedule.phases[at - 1], schedule.phases[at + 2]
        assert first_search.name == last_search.name == "search" and at + 3 == len(names)
        assert names[at + 1] == "jglp" and "jglp" not in names[:at]
        assert first_search.seconds == min(SEARCH_FIRST_SHARE * (limit or math.inf), SEARCH_FIRST_S)
        assert bounded.seconds == (None if limit is None else share) and bounded.plan is heuristic
        assert bounded.cheap.z == cheap.z  # the run takes the cheap plan the schedule chose
        assert any(line.startswith("bounded sparse BE: scheduled") for line in schedule.choice)


def test_beyond_bounded_sparse_bes_reach_a_larger_mbe_takes_its_place(monkeypatch):
    """Where the exact plan is predicted over SPARSE_REACH times the limit, bounded sparse BE is not
    scheduled; before the boxed search, MBE at the largest z above the heuristic's that fits the heuristic's
    memory and its time share runs in its place. Within reach, bounded sparse BE is scheduled as before."""
    problem = hard_grid()
    order = graph.elimination_order(problem)
    exact_s = predict_s(build_plan(problem, order, None), "numpy", 1)
    budget = 1 << 33
    room = min(budget // 4, anytime.HEURISTIC_BYTES)
    for limit in (60.0, 200.0):
        monkeypatch.setattr(anytime, "SPARSE_REACH", exact_s / limit * 1.01)  # just within reach
        within = [p.name for p in plan_schedule(problem, order, None, budget, limit, "numpy").phases]
        assert within[-4:] == ["search", "bounded-sparse", "jglp", "search"]
        monkeypatch.setattr(anytime, "SPARSE_REACH", exact_s / limit / 1.01)  # just beyond
        schedule = plan_schedule(problem, order, None, budget, limit, "numpy")
        names = [p.name for p in schedule.phases]
        assert "bounded-sparse" not in names and names[-4:] == ["mbe", "search", "jglp", "search"]
        deeper, seconds = schedule.phases[-4].plan, min(anytime.DEEPER_SHARE * limit, anytime.DEEPER_MAX_S)
        heuristic = next(p.plan for p in schedule.phases if p.name == "mbe" and p.shifted)  # MBE-MM's z
        assert deeper is schedule.heuristic and deeper.z > heuristic.z and not deeper.exact
        assert predict_s(deeper, "numpy", 1) <= seconds and deeper.peak_bytes <= room
        above = build_plan(problem, order, deeper.z + 1)
        assert predict_s(above, "numpy", 1) > seconds or above.peak_bytes > room
        assert any(line.startswith(f"a larger MBE for the bound: scheduled at z={deeper.z}") for line in schedule.choice)


def test_streamed_exact_be_comes_after_a_bounded_search():
    """Exact BE whose messages exceed the device budget runs last, after search boxed to BE's
    predicted time; a search stopped at its box leaves the proof to BE (or to the compiled search
    it made, beside BE)."""
    problem = generate("grid", 36, 5, 0.3, 0.3, seed=2)  # search needs more than 256 nodes, its stop test's period
    order = graph.elimination_order(problem)
    exact = plan_within(problem, order, None, 1 << 30, 1, "auto")
    resident = plan_schedule(problem, order, exact, 1 << 30, 30.0, "cupy", device_budget=1 << 30)
    assert [p.name for p in resident.phases] == ["be"]
    schedule = plan_schedule(problem, order, exact, 1 << 30, 30.0, "cupy", device_budget=1 << 10)
    search, be = schedule.phases[-2:]
    assert (search.name, be.name, be.plan) == ("search", "be", exact)
    assert be.predicted_s > resident.phases[0].predicted_s and search.seconds == be.predicted_s
    assert "at most, until proof" in schedule.describe()
    from gpusolve.engines.numpy_engine import NumpyEngine
    first = MBE(build_plan(problem, order, 2))  # too loose to close the bounds alone
    boxed = Schedule((first, replace(search, seconds=0.0), be), "numpy")
    bounds = Bounds.start(problem, time.perf_counter())
    out = run_schedule(problem, order, boxed, NumpyEngine(1), bounds, Stop(), 1 << 30)
    # the proof is exact BE's, or the compiled search's, which the search made and which goes on beside BE
    assert out.ran in (["MBE(z=2)", "exact BE"], ["MBE(z=2)", "HBFS (EDAC*)"])
    assert "AND/OR search cut off" in out.note and bounds.proven
    assert bounds.upper == solve(problem, Options(device="cpu", search=False)).upper_bound


def test_method_lists_the_phases_that_completed_and_z_is_the_reported_bounds(monkeypatch):
    """An MBE cut off halfway is not in `method`, and z is that of the MBE whose bound is reported
    (the cut MBE was listed). The compiled search is left out: beside the phases it may raise the lower
    bound above that MBE's."""
    from gpusolve.search import dfbb
    monkeypatch.setattr(dfbb, "supports", lambda problem: "the compiled search is left out of this test")
    problem = hard_grid()
    done = []  # mini-buckets done by each elimination started

    def progress_factory(total):
        done.append(0)

        def advance(entries):
            done[-1] += 1
        return advance
    stop = StopAt(lambda: len(done) >= 2 and done[1] >= 10, monkeypatch)  # 10 mini-buckets into the 2nd elimination
    # dense tables: no bounded sparse BE, whose runs would be the 2nd and 3rd eliminations
    r = solve(problem, Options(device="cpu", time_limit=3.0, threads=1, mem_limit=1 << 30, tables="dense"),
              progress_factory=progress_factory, stop=stop)
    first, heuristic = [int(z) for z in re.findall(r"mbe \(z=(\d+)\)", "\n".join(r.schedule))][:2]
    assert first < heuristic and done[1] == 10
    assert r.method == f"MBE(z={first}) + local search" and f"MBE(z={heuristic}) cut off" in r.device_note
    assert r.z == first
    assert r.lower_bound == solve(problem, Options(device="cpu", z=first, search=False)).lower_bound


def test_z_is_that_of_the_tightest_elimination():
    """MBE bounds are not monotone in z: where the later, larger z is looser, its run is not the one
    reported (nor the one that guides search)."""
    from gpusolve.inference import eliminate
    from gpusolve.engines.numpy_engine import NumpyEngine
    problem = generate("grid", 36, 4, 0.3, 0.3, seed=4)
    order = graph.elimination_order(problem)
    plans = {z: build_plan(problem, order, z) for z in (3, 4)}
    lower = {z: eliminate.run_plan(problem, plan, NumpyEngine(1))[0] for z, plan in plans.items()}
    assert lower[3] > lower[4]
    schedule = Schedule((MBE(plans[3]), MBE(plans[4])), "numpy")
    bounds = Bounds.start(problem, time.perf_counter())
    out = run_schedule(problem, order, schedule, NumpyEngine(1), bounds, Stop(), 1 << 30)
    assert out.ran == ["MBE(z=3)", "MBE(z=4)"] and out.plan is plans[3] and bounds.lower == lower[3]


def test_phases_that_did_not_run_are_not_listed():
    """JGLP with no time for its passes, and search with no MBE run to guide it, were listed as run."""
    from gpusolve.engines.numpy_engine import NumpyEngine
    problem = hard_grid()
    order = graph.elimination_order(problem)
    plan = build_plan(problem, order, 3)
    schedule = Schedule((MBE(plan), FGLP(), MBE(plan, shifted=True), JGLP(seconds=0.0)), "numpy")
    out = run_schedule(problem, order, schedule, NumpyEngine(1), Bounds.start(problem, time.perf_counter()),
                       Stop(), 1 << 30)
    assert out.ran == ["MBE(z=3)", "FGLP", "MBE(z=3)-MM on the FGLP-shifted problem"]  # FGLP raised the bound
    assert "jglp not started" in out.note
    floats = random_problem(np.random.default_rng(4), n_max=6, p_hard=0.0, integer=False)  # no compiled search
    alone = run_schedule(floats, graph.elimination_order(floats), Schedule((Search(),), "numpy"),
                         NumpyEngine(1), Bounds.start(floats, time.perf_counter()), Stop(), 1 << 30)
    assert alone.ran == [] and "search not started" in alone.note and alone.search is None


def test_without_a_guide_the_compiled_search_runs_alone_and_proves():
    from gpusolve.engines.numpy_engine import NumpyEngine
    searched = 0
    for seed in range(60):
        problem = random_problem(np.random.default_rng(300 + seed), n_max=7, d_max=4, f_max=12, p_hard=0.15)
        bounds = Bounds.start(problem, time.perf_counter())
        if bounds.closed:  # a function forbids everything: nothing to search
            continue
        out = run_schedule(problem, graph.elimination_order(problem), Schedule((Search(),), "numpy"),
                           NumpyEngine(1), bounds, Stop(), 1 << 30)
        optimum, _ = brute_force(problem)
        assert out.ran == ["HBFS (EDAC*)"] and out.search["complete"] and bounds.proven, seed
        assert bounds.upper == optimum if optimum < problem.top else bounds.assignment is None, seed
        searched += 1
    assert searched >= 20


def test_a_phase_stop_ends_at_its_box_its_reserve_or_its_parent():
    parent = Stop(time.perf_counter() + 10.0)
    assert not parent.within(5.0)() and parent.within(0.0)() and parent.within(5.0, reserve=10.0)()
    child = parent.within(5.0)
    parent.interrupted = True
    assert child()
    assert Stop().within(math.inf).deadline is None


# The command line with a line on stderr when the search starts: the moment to press Ctrl-C.
MARKED_SOLVE = """
import sys
from gpusolve.schedule import phases; from gpusolve.cli import group as cli
search = phases._search
def started(*args, **kwargs):
    print("search started", file=sys.stderr, flush=True)
    return search(*args, **kwargs)
phases._search = started
cli.main(sys.argv[1:])
"""


def test_ctrl_c_reports_the_best_bounds(tmp_path):
    path = tmp_path / "grid.wcsp"
    write_wcsp(hard_grid(), path)
    proc = subprocess.Popen([sys.executable, "-c", MARKED_SOLVE, "solve", str(path), "--json", "--device", "cpu",
                             "--z", "5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:  # no limit: without Ctrl-C this search runs for minutes
        if line.startswith("search started"):
            break
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)  # a hang's guard, not a speed: the search stops at 256 nodes
    assert proc.returncode == 130, err  # 128 + SIGINT, after printing the best result held
    r = json.loads(out)
    assert r["status"] == "bounded" and r["lower_bound"] < r["upper_bound"]
    assert r["trace"] and "interrupted" in r["device_note"]
    assert not r["search"]["complete"] and "AND/OR search" not in r["method"]


def test_a_z_that_does_not_fit_runs_the_largest_that_does_and_says_so():
    """`--z N` beyond the memory budget degrades to the largest z that fits and keeps solving (issue 36.1)."""
    problem = generate("grid", 36, 5, 0.3, 0.3, seed=3)
    order = graph.elimination_order(problem)
    exact = build_plan(problem, order, None)
    budget = build_plan(problem, order, 4).peak_bytes  # z=4 fits, anything larger does not
    assert exact.peak_bytes > budget and build_plan(problem, order, 5).peak_bytes > budget
    r = solve(problem, Options(device="cpu", z=exact.induced_width + 1, mem_limit=budget))
    assert r.status in ("optimal", "bounded") and r.z is not None and r.z <= 4
    assert f"MBE(z={exact.induced_width + 1}) needs" in r.device_note and f"running z={r.z}" in r.device_note
    assert problem.evaluate(r.assignment) == r.upper_bound


def test_a_z_given_is_not_told_to_pass_z():
    problem = generate("grid", 36, 5, 0.3, 0.3, seed=3)
    order = graph.elimination_order(problem)
    from gpusolve.plan.buckets import choose_plan
    from gpusolve.host import BudgetError
    with pytest.raises(BudgetError) as e:
        choose_plan(problem, order, 4, 1024)
    assert "pass --z" not in str(e.value) and "raise --mem-limit" in str(e.value)
