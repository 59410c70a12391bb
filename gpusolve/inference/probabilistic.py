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

import itertools
import math

import numpy as np

from gpusolve.engines.select import Engine
from gpusolve.engines.dense import aligned, host_or_table, reduce_axes
from gpusolve.model.problem import Problem
from gpusolve.plan.buckets import CHUNK_ENTRIES, MiniBucket, Plan


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


def contract(xp, inputs, keep: tuple[int, ...], domains, op: str = "lse", block: int = CHUNK_ENTRIES):
    """Combine tables over the union of their scopes and eliminate everything but `keep`.

    Works in blocks of at most `block` joint entries (device memory, CPU
    caches): the leading union axes, kept ones first, are fixed one value
    combination at a time and each input contributes only its slice, so a
    table left in host memory (a streamed message, a numpy array on a device
    engine) uploads just that slice. Blocks that differ only in eliminated
    axes are eliminated once more together. The result is on the engine when
    it fits `block`, else in host memory.
    """
    union = list(keep)
    for _, scope in inputs:
        union += [u for u in scope if u not in union]
    dims = [domains[u] for u in union]
    lead = next(n for n in range(len(union) + 1) if math.prod(dims[n:]) <= block)
    kept = min(lead, len(keep))
    out_shape = tuple(dims[:len(keep)])
    out = xp.empty(out_shape) if math.prod(out_shape) <= block else np.empty(out_shape)
    for fixed_keep in itertools.product(*(range(d) for d in dims[:kept])):
        parts = [_block(xp, inputs, dict(zip(union[:lead], fixed_keep + fixed_drop)), union[lead:],
                        len(keep) - kept, domains, op)
                 for fixed_drop in itertools.product(*(range(d) for d in dims[kept:lead]))]
        part = parts[0] if lead <= len(keep) else reduce_axes(xp, xp.stack(parts), (0,), op)
        out[fixed_keep] = part if isinstance(out, xp.ndarray) else part.get()
    return out


def _block(xp, inputs, fixed: dict[int, int], free: list[int], n_keep: int, domains, op: str):
    """One block of `contract`: the inputs' slices at `fixed`, summed over `free`, whose first n_keep axes are kept."""
    axes = {u: i for i, u in enumerate(free)}
    views = []
    for table, scope in inputs:
        part = _slice(xp, table, tuple(fixed.get(u, slice(None)) for u in scope))
        views.append(aligned(xp, part, tuple(u for u in scope if u not in fixed), axes, len(free)))
    views.sort(key=lambda a: a.size)
    acc = views[0]
    for v in views[1:]:
        acc = acc + v
    acc = xp.broadcast_to(acc, tuple(domains[u] for u in free))
    drop = tuple(range(n_keep, len(free)))
    return reduce_axes(xp, acc, drop, op) if drop else acc


def _slice(xp, table, index):
    """`table[index]` as an array of `xp`: tables in host memory upload just the slice."""
    part = host_or_table(table)[index]
    return part if isinstance(part, xp.ndarray) else xp.asarray(part)


def marginals(problem: Problem, plan: Plan, engine: Engine, tables, messages) -> list[list[float]]:
    """Exact single-variable marginals by the backward (distribute) pass over the bucket tree.

    A bucket with children sends each of them its belief without that
    child's message; the bucket's own marginal then comes from any child's
    separator (which holds the bucket variable) instead of one more pass over
    the whole clique. A child whose other inputs are empty gets no message
    (cost 0 everywhere).
    """
    xp = engine.xp
    dom = problem.domains
    mbs = plan.minibuckets
    block = engine.block_entries()
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
        for j, _ in children:
            rest = own + [c for k, c in children if k != j]
            if rest:
                parent_msg[j] = contract(xp, rest, mbs[j].scope, dom, block=block)
        if children:
            j, child = children[0]  # a message in the bucket of `var` has `var` in its scope
            belief = contract(xp, [child] + ([(parent_msg[j], child[1])] if j in parent_msg else []),
                              (var,), dom, block=block)
        else:
            belief = contract(xp, own, (var,), dom, block=block)
        result[var] = _normalise(engine.get(belief))
    return result


def _normalise(costs) -> list[float]:
    """-log10 weights -> probabilities summing to one (Z > 0: solve distributes no other case)."""
    c = np.asarray(costs, dtype=float)
    finite = np.isfinite(c)
    w = np.where(finite, 10.0 ** (c[finite].min() - np.where(finite, c, 0.0)), 0.0)
    return (w / w.sum()).tolist()


def weighted_bound(problem: Problem, plan: Plan, engine: Engine) -> float:
    """Lower bound on -log10 Z (offset excluded), i.e. an upper bound on Z, by weighted mini-buckets.

    Liu & Ihler (2011): each of a bucket's K mini-buckets eliminates its
    variable with a power sum of weight w = 1/K, in costs w * lse(c / w); by
    Hölder's inequality the product of the K results bounds the bucket's sum
    from above. One sum and K - 1 maxima (partition_bounds) is the limit of
    one weight 1 and the rest 0; equal weights are usually tighter. Exact
    plans give -log10 Z.
    """
    dom = problem.domains
    tables = engine.put_many([f.table for f in problem.functions])
    messages: dict[int, object] = {}
    for mb in plan.minibuckets:
        w = 1.0 / len(plan.buckets[mb.var])
        inputs = plan.inputs(problem, mb, tables, messages)
        if w < 1:
            inputs = [(host_or_table(t) / w, s) for t, s in inputs]  # a HostTable scales on the host
        out = engine.eliminate(mb, inputs, dom, problem.top, False, None, "lse")
        messages[mb.index] = host_or_table(out) * w if w < 1 else out
    total = sum(float(problem.functions[i].table[()]) for i in plan.constants)
    total += sum(float(engine.get(messages[r])[()]) for r in plan.roots)
    return total - log10_free(problem, plan)
