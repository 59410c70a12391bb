"""Executing a plan on an engine: every mini-bucket in plan order, then values in reverse order.

The value-assignment phase recomputes each bucket's costs over its variable
given the values already chosen for later variables, so no argmin tables are
stored.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from gpusolve.engines.select import Engine
from gpusolve.engines import sparse
from gpusolve.engines.rest_bound import RestBound
from gpusolve.model.problem import Problem
from gpusolve.plan.buckets import MiniBucket, Plan, PlansByZ, build_plan, largest_fitting_z, place
from gpusolve.consistency.preprocess import lower_top, preprocess
from gpusolve.stop import Stop, Stopped

# The cheap mini-bucket run that finds an incumbent for bounded sparse BE may use this much memory.
INCUMBENT_BYTES = 256 << 20


def run_plan(problem: Problem, plan: Plan, engine: Engine, progress: Callable[[int], None] | None = None,
             op: Callable[[MiniBucket], str] = lambda mb: "min", stop: Stop | None = None,
             match: bool = False, matched: dict | None = None, dense_step: Callable | None = None):
    """Execute every mini-bucket (eliminating with op(mb)); returns (combined roots, tables, messages).

    Raises Stopped between chunks once `stop` says so. `match`:
    moment-match the dense mini-buckets of every bucket eliminated by min (MBE-MM,
    shift.match_bucket) before eliminating them, for a tighter lower bound; `matched` receives
    those unaries by mini-bucket (shift.jglp starts from them). `dense_step`: computes the dense
    mini-buckets instead of engine.eliminate (slicing.SlicedStep: some over Dask workers).
    """
    check = (stop or Stop()).check
    dom = problem.domains
    room = None if engine.budget is None else engine.budget - engine.device_bytes
    where = place(problem, plan, room).where
    tables = engine.put_many([f.table for f in problem.functions])
    bound = RestBound(engine.xp, dom, problem.top) if plan.sparse else None
    for i, t in enumerate(tables if bound is not None else ()):
        bound.add(("f", i), t, problem.functions[i].scope)
    messages: dict[int, object] = {}
    stored = 0  # rows of the sparse messages kept, counted against plan.row_limit
    shifts: dict[int, object] = {}
    for mb in plan.minibuckets:
        check()
        inputs = plan.inputs(problem, mb, tables, messages)
        if match and op(mb) == "min" and mb.index == plan.buckets[mb.var][0]:
            from gpusolve.inference import shift  # moment matching: only the runs that ask for it load cost shifting
            shifts = shift.match_bucket(engine.xp, problem, plan, mb.var, tables, messages, check)
            if matched is not None:
                matched.update(shifts)
        inputs += [(shifts[mb.index], (mb.var,))] if mb.index in shifts else []
        limit = None if plan.row_limit is None else plan.row_limit - stored
        messages[mb.index] = engine.eliminate_bucket(mb, inputs, dom, problem.top, problem.integer, check,
                                                     op(mb), bound, limit, where[mb.index], dense_step, plan.limits)
        stored += messages[mb.index].rows if mb.sparse else 0
        if progress:
            progress(mb.joint_entries)
    lower = problem.total([problem.functions[i].table[()] for i in plan.constants]
                          + [sparse.scalar(engine, messages[r], problem.top) for r in plan.roots])
    return lower, tables, messages


def assign(problem: Problem, plan: Plan, engine: Engine, tables, messages) -> list[int]:
    """Values in reverse elimination order, each minimising its bucket given later choices.

    An engine may do the whole phase itself (the GPU in one launch); this is the generic path.
    """
    done = engine.assign_values(problem, plan, tables, messages)
    if done is not None:
        return done
    xp = engine.xp
    dom = problem.domains  # a property that builds its list: read once
    value = [0] * len(problem.variables)
    for var, val in problem.evidence.items():
        value[var] = val
    for var in reversed(plan.order):
        if var in problem.evidence:
            continue
        inputs = [pair for m in plan.buckets.get(var, ())
                  for pair in plan.inputs(problem, plan.minibuckets[m], tables, messages)]
        value[var] = int(xp.argmin(bucket_costs(xp, inputs, var, dom[var], value, problem.top, problem.dtype)))
    return value


def bucket_costs(xp, inputs, var: int, domain: int, chosen, top, dtype):
    """The cost of each value of `var` in its bucket (`inputs`, (table, scope) pairs) given the values
    `chosen` for the rest of their scopes: the VALUE step of BE and of DPOP alike. Integer costs
    saturate at `top` after every addition."""
    costs = xp.zeros(domain, dtype=dtype)
    for table, scope in inputs:
        costs = costs + sparse.slice_over(xp, table, scope, var, chosen, top)
        if costs.dtype.kind in "iu":
            costs = xp.minimum(costs, top)
    return costs


def cheap_plan(problem: Problem, order: list[int], fallback: Plan, budget: int, n_components: int = 1,
               plans: PlansByZ | None = None) -> Plan | None:
    """Bounded sparse BE's cheap MBE run: the largest z up to fallback's within INCUMBENT_BYTES (`plans`:
    as largest_fitting_z shares them)."""
    return largest_fitting_z(problem, order, min(budget, INCUMBENT_BYTES), problem.max_arity, fallback.z,
                             n_components, fallback.limits, plans)


def bounded_sparse(problem: Problem, order: list[int], fallback: Plan, budget: int, engine: Engine,
                   stop: Stop | None = None, n_components: int = 1, progress_factory=None,
                   held: list[int] | None = None, cheap: Plan | None = None):
    """Exact sparse BE below an incumbent's cost, for an integer problem whose exact plan does not fit.

    A cheap MBE run (at most INCUMBENT_BYTES) gives bounds and an incumbent
    of cost ub (or `held`, an assignment found before, when it costs less:
    the lower ub, the fewer rows survive). With top lowered to ub every row that cannot beat the
    incumbent counts as forbidden, so preprocessing and the sparse tables'
    RestBound prune all of them; what is left is often small. Returns (lower,
    assignment, plan, messages) with lower the optimum (>= top: infeasible),
    the mini-bucket bounds when the stop comes during the exact run (Stopped
    during the cheap run),
    or None when the sparse tables outgrow the budget (then MBE `fallback` runs). Plans take fallback's limits.
    `progress_factory(total)` gives each of the two runs a bar (joint entries, as run_plan counts).
    `cheap`: the cheap run's plan where the schedule made it already (else cheap_plan's).
    """

    def bar(plan: Plan):
        return progress_factory(sum(mb.joint_entries for mb in plan.minibuckets)) if progress_factory else None

    cheap = cheap_plan(problem, order, fallback, budget, n_components) if cheap is None else cheap
    if cheap is None or not fallback.rows_within(budget):
        return None
    lower, tables, messages = run_plan(problem, cheap, engine, bar(cheap), stop=stop)
    if problem.is_forbidden(lower):
        return lower, None, cheap, messages
    incumbent = min((a for a in (assign(problem, cheap, engine, tables, messages), held) if a is not None),
                    key=problem.evaluate)
    ub = problem.evaluate(incumbent)
    if lower == ub:
        return ub, incumbent, cheap, messages
    below = preprocess(lower_top(problem, ub), fallback.limits)
    if below.infeasible:
        return ub, incumbent, cheap, messages  # nothing beats the incumbent
    plan = build_plan(below.problem, order, None, n_components, "sparse", fallback.limits)
    if not all(mb.sparse for mb in plan.minibuckets):
        return None  # a key wider than 63 bits
    plan = dataclasses.replace(plan, row_limit=plan.rows_within(budget))
    try:
        lower, tables, messages = run_plan(below.problem, plan, engine, bar(plan), stop=stop)
    except Stopped:
        return lower, incumbent, cheap, messages  # still the mini-bucket bounds
    except sparse.SparseOverflow:
        return None
    if below.problem.is_forbidden(lower):
        return ub, incumbent, plan, messages  # nothing beats the incumbent
    return lower, below.expand(assign(below.problem, plan, engine, tables, messages)), plan, messages
