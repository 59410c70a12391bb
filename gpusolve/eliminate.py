"""Executing a plan on an engine: every mini-bucket in plan order, then values in reverse order.

The value-assignment phase recomputes each bucket's costs over its variable
given the values already chosen for later variables, so no argmin tables are
stored.
"""
from __future__ import annotations

import time
from typing import Callable

from .engines import Engine, sparse
from .model import Problem
from .plan import MiniBucket, Plan


class TimeLimit(RuntimeError):
    """The time limit passed before a bound was found (exit code 4)."""


def run_plan(problem: Problem, plan: Plan, engine: Engine, deadline: float | None = None,
             progress: Callable[[int], None] | None = None,
             op: Callable[[MiniBucket], str] = lambda mb: "min"):
    """Execute every mini-bucket (eliminating with op(mb)); returns (combined roots, tables, messages)."""
    def check():
        if deadline is not None and time.perf_counter() > deadline:
            raise TimeLimit("time limit reached during elimination")

    dom = problem.domains
    tables = engine.put_many([f.table for f in problem.functions])
    bound = sparse.RestBound(engine.xp, dom, problem.top) if plan.sparse else None
    for i, t in enumerate(tables if bound is not None else ()):
        bound.add(("f", i), t, problem.functions[i].scope)
    messages: dict[int, object] = {}
    stored = 0  # rows of the sparse messages kept, counted against plan.row_limit
    for mb in plan.minibuckets:
        check()
        inputs = [(tables[i], problem.functions[i].scope) for i in mb.functions]
        inputs += [(messages[j], plan.minibuckets[j].scope) for j in mb.messages]
        limit = None if plan.row_limit is None else plan.row_limit - stored
        messages[mb.index] = engine.eliminate_bucket(mb, inputs, dom, problem.top, problem.integer, check,
                                                     op(mb), bound, limit)
        stored += messages[mb.index].rows if mb.sparse else 0
        if progress:
            progress(mb.joint_entries)
    lower = _saturating_sum([problem.functions[i].table[()] for i in plan.constants]
                            + [sparse.scalar(engine, messages[r], problem.top) for r in plan.roots], problem)
    return lower, tables, messages


def _saturating_sum(values, problem: Problem):
    total = problem.dtype(0)
    for v in values:
        total = min(total + v, problem.top) if problem.integer else total + v
    return total


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
        costs = xp.zeros(dom[var], dtype=problem.dtype)
        for m in plan.buckets.get(var, ()):
            mb = plan.minibuckets[m]
            parts = [(tables[i], problem.functions[i].scope) for i in mb.functions]
            parts += [(messages[j], plan.minibuckets[j].scope) for j in mb.messages]
            for table, scope in parts:
                costs = costs + sparse.slice_over(xp, table, scope, var, value, problem.top)
                if problem.integer:
                    costs = xp.minimum(costs, problem.top)
        value[var] = int(xp.argmin(costs))
    return value
