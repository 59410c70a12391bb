"""Sum-product tasks on -log10 p costs: partition function (PR) and marginals (MAR).

PR eliminates with log-sum-exp ("lse"); with mini-buckets, one mini-bucket of
each bucket sums and the others maximise (upper bound on Z) or minimise
(lower bound on Z) probability, as in Dechter & Rish. MAR runs two passes on
the bucket tree: the forward pass of BE collects messages towards the roots,
then each bucket, from the last eliminated to the first, forms its belief
(its functions, its children's messages and its parent's message) and sends
every child the belief without that child's own message.
"""
from __future__ import annotations

import math

import numpy as np

from .engines import Engine
from .engines.base import aligned, reduce_axes
from .model import Problem
from .plan import MiniBucket, Plan


def free_variables(problem: Problem, plan: Plan) -> list[int]:
    """Variables in no function: each multiplies Z by its domain size."""
    return [v for v in plan.order if not plan.buckets.get(v) and v not in problem.evidence]


def log10_free(problem: Problem, plan: Plan) -> float:
    return sum(math.log10(problem.domains[v]) for v in free_variables(problem, plan))


def partition_bounds(problem: Problem, plan: Plan, run) -> tuple[float, float]:
    """(lower, upper) bounds on -log10 Z (offset excluded); equal when the plan is exact.

    `run(op)` executes the plan with op(mb) and returns the combined roots.
    """
    first = {mbs[0] for mbs in plan.buckets.values() if mbs}
    shift = log10_free(problem, plan)
    if plan.exact:
        c = float(run(lambda mb: "lse")) - shift
        return c, c
    low = float(run(lambda mb: "lse" if mb.index in first else "min")) - shift
    high = float(run(lambda mb: "lse" if mb.index in first else "max")) - shift
    return low, high


def contract(xp, inputs, keep: tuple[int, ...], domains, op: str = "lse"):
    """Combine tables over the union of their scopes and eliminate everything but `keep`."""
    union = list(keep)
    for _, scope in inputs:
        union += [u for u in scope if u not in union]
    axes = {u: i for i, u in enumerate(union)}
    views = sorted((aligned(xp, t, s, axes, len(union)) for t, s in inputs), key=lambda a: a.size)
    acc = views[0]
    for v in views[1:]:
        acc = acc + v
    acc = xp.broadcast_to(acc, tuple(domains[u] for u in union))
    drop = tuple(range(len(keep), len(union)))
    return reduce_axes(xp, acc, drop, op) if drop else acc


def marginals(problem: Problem, plan: Plan, engine: Engine, tables, messages) -> list[list[float]]:
    """Exact single-variable marginals by the backward (distribute) pass over the bucket tree."""
    xp = engine.xp
    dom = problem.domains
    mbs = plan.minibuckets
    parent_msg: dict[int, object] = {}  # mini-bucket index -> message from its parent, over its scope
    result: list[list[float] | None] = [None] * len(dom)
    for var in reversed(plan.order):
        if var in problem.evidence:
            result[var] = [1.0 if i == problem.evidence[var] else 0.0 for i in range(dom[var])]
            continue
        if not plan.buckets.get(var):
            result[var] = [1.0 / dom[var]] * dom[var]
            continue
        (m,) = plan.buckets[var]
        mb: MiniBucket = mbs[m]
        own = [(tables[i], problem.functions[i].scope) for i in mb.functions]
        if m in parent_msg:
            own.append((parent_msg.pop(m), mb.scope))
        children = [(j, (messages[j], mbs[j].scope)) for j in mb.messages]
        belief = contract(xp, own + [c for _, c in children], (var,), dom)
        result[var] = _normalise(engine.get(belief))
        for j, _ in children:
            rest = own + [c for k, c in children if k != j]
            parent_msg[j] = contract(xp, rest, mbs[j].scope, dom) if rest else \
                xp.zeros(tuple(dom[u] for u in mbs[j].scope))
    return result


def _normalise(costs) -> list[float]:
    """-log10 weights -> probabilities summing to one (all zero when the evidence is impossible)."""
    c = np.asarray(costs, dtype=float)
    finite = np.isfinite(c)
    if not finite.any():
        return [0.0] * len(c)
    w = np.where(finite, 10.0 ** (c[finite].min() - np.where(finite, c, 0.0)), 0.0)
    return (w / w.sum()).tolist()
