"""Functional variable elimination: toulbar2's default preprocessing (its `-f 1`).

A binary function f(x, y) is functional in y when each value a of x allows (cost below top) at most
one value g(a) of y: then y = g(x) in every solution, and y leaves the problem. Each function over
y is rewritten over x through g (where x is in its scope too, its entries with y = g(x) are kept, so
f itself becomes a unary cost on x); a value of x with no partner is forbidden by a unary of its
own. Where g takes one value b, y is b and the functions over y are sliced there instead. Costs stay
exact: an assignment of the rest, with y = g(x), keeps its cost. On RLFAP (CELAR, scen) every duplex
constraint |x - y| = gap is functional, so half the variables go (CELAR6-SUB1: 28 to 14), the
elimination order, the search depth and the bounds all work on the other half, and costs on y meet
x's in one table.

y is never a variable of a global constraint (its propagator reads y) nor an observed one, and is
not eliminated where a rewritten table would exceed limits.functional_entries entries (or tuples)
and its own size. Preprocessing (preprocess.py) runs this after arc consistency and reruns both
until nothing is eliminated.
"""
from __future__ import annotations

import math

import numpy as np

from gpusolve.limits import DEFAULT, Limits
from gpusolve.model.problem import CostFunction, Problem, TupleFunction


def eliminate(problem: Problem, limits: Limits = DEFAULT) -> tuple[Problem, list[tuple[int, int, np.ndarray]]]:
    """(the problem without its functional variables, [(y, x, g)] in the order eliminated): y = g[x]
    in value indices of `problem`, g[a] = -1 where a is forbidden. The eliminated variables keep
    their place and domain but are in no scope."""
    functions = list(problem.functions)
    frozen = set(problem.evidence) | {v for c in problem.globals for v in c.scope}
    over: dict[int, set[int]] = {}  # variable -> the functions over it
    for i, f in enumerate(functions):
        for v in f.scope:
            over.setdefault(v, set()).add(i)
    eliminated = []
    queue = [i for i, f in enumerate(functions) if f.arity == 2]
    while queue:
        f = functions[queue.pop()]
        pairs = _allowed_pairs(f, problem.top, limits) if f.arity == 2 else None
        for k in (0, 1) if pairs is not None else ():
            x, y = f.scope[k], f.scope[1 - k]
            g = _function(pairs[k], pairs[1 - k], _dims(f)[k])
            if g is None or y in frozen:
                continue
            b = _constant(g)
            if any(_rewritten_size(functions[j], y, x, g, b) > max(limits.functional_entries, _size(functions[j]))
                   for j in over[y]):
                continue
            for j in over.pop(y):
                functions[j] = rewrite(functions[j], y, x, g, b)
                if x in functions[j].scope:
                    over[x].add(j)
                if functions[j].arity == 2:
                    queue.append(j)
            if (g < 0).any():
                over[x].add(len(functions))
                functions.append(CostFunction((x,), np.where(g < 0, problem.top, 0).astype(problem.dtype)))
            eliminated.append((y, x, g))
            break
    return (problem.like(functions), eliminated) if eliminated else (problem, [])


def rewrite(h: CostFunction, y: int, x: int, g: np.ndarray, b: int | None) -> CostFunction:
    """h with y = g(x): where x is in h's scope, its entries with y = g(x) over the scope without y;
    else, where g is the constant b, its entries with y = b; else h over x in y's place. Entries
    for x's values without a partner (g = -1) are left to the unary that forbids them."""
    k = h.scope.index(y)
    if isinstance(h, TupleFunction) and h.arity > 1:  # a unary one is read whole (y's domain)
        rows, costs, dims = h.tuples, h.costs, list(h.dims)
        if x in h.scope or b is not None:
            keep = rows[:, k] == (g[rows[:, h.scope.index(x)]] if x in h.scope else b)
            del dims[k]
            return TupleFunction(h.scope[:k] + h.scope[k + 1:], dims, np.delete(rows[keep], k, axis=1),
                                 costs[keep], h.default)
        by_y, starts = _preimages(g, h.dims[k])  # each tuple once per value a of x with g(a) = its y
        count = starts[rows[:, k] + 1] - starts[rows[:, k]]
        rows, costs = np.repeat(rows, count, axis=0), np.repeat(costs, count)
        rows[:, k] = by_y[np.arange(len(rows)) - np.repeat(np.cumsum(count) - count - starts[h.tuples[:, k]], count)]
        dims[k] = len(g)
        return TupleFunction(h.scope[:k] + (x,) + h.scope[k + 1:], dims, rows, costs, h.default)
    if x in h.scope:
        kx = h.scope.index(x)
        scope = tuple(v for v in h.scope if v != y)
        table = np.moveaxis(h.table, (kx, k), (0, 1))[np.arange(len(g)), np.maximum(g, 0)]
        return CostFunction(scope, np.ascontiguousarray(np.moveaxis(table, 0, scope.index(x))))
    if b is not None:
        return CostFunction(h.scope[:k] + h.scope[k + 1:], np.array(np.take(h.table, b, axis=k)))
    return CostFunction(h.scope[:k] + (x,) + h.scope[k + 1:], np.take(h.table, np.maximum(g, 0), axis=k))


def _allowed_pairs(f: CostFunction, top, limits: Limits) -> tuple[np.ndarray, np.ndarray] | None:
    """The value indices (one array per scope variable) of a binary function's pairs cheaper than
    top; None for listed tuples with a default below top whose dense table is too large to read, and
    for a table allowing more pairs than either domain has values, functional in neither variable
    (cap131's 2,500 facility costs)."""
    if isinstance(f, TupleFunction) and f.default >= top:
        allowed = f.tuples[f.costs < top]
        return allowed[:, 0], allowed[:, 1]
    if f.entries > limits.functional_entries:
        return None
    allowed = f.table < top
    return np.nonzero(allowed) if np.count_nonzero(allowed) <= max(allowed.shape) else None


def _function(xs: np.ndarray, ys: np.ndarray, dx: int) -> np.ndarray | None:
    """g with g[a] the one value of y allowed with a (-1: none), or None where some a allows two."""
    if np.bincount(xs, minlength=dx).max(initial=0) > 1:
        return None
    g = np.full(dx, -1, dtype=np.int64)
    g[xs] = ys
    return g


def _constant(g: np.ndarray) -> int | None:
    """The one value g takes where defined, else None."""
    values = np.unique(g[g >= 0])
    return int(values[0]) if len(values) == 1 else None


def _preimages(g: np.ndarray, dy: int) -> tuple[np.ndarray, np.ndarray]:
    """(x's values ordered by their image, where the run of each value of y starts: CSR)."""
    defined = np.flatnonzero(g >= 0)
    by_y = defined[np.argsort(g[defined], kind="stable")]
    starts = np.zeros(dy + 1, dtype=np.int64)
    np.cumsum(np.bincount(g[defined], minlength=dy), out=starts[1:])
    return by_y, starts


def _dims(f: CostFunction) -> tuple[int, ...]:
    return f.dims if isinstance(f, TupleFunction) else f.table.shape


def _size(f: CostFunction) -> int:
    """What a function holds: its listed tuples, or its dense table's entries."""
    return len(f.tuples) if isinstance(f, TupleFunction) else f.entries


def _rewritten_size(h: CostFunction, y: int, x: int, g: np.ndarray, b: int | None) -> int:
    """_size of rewrite(h, y, x, g, b), before making it."""
    k, dims = h.scope.index(y), list(_dims(h))
    if not isinstance(h, TupleFunction) or h.arity == 1:
        dims[k] = len(g) if x not in h.scope and b is None else 1
        return math.prod(dims)
    if x in h.scope or b is not None:
        return len(h.tuples)  # at most
    return int(np.bincount(g[g >= 0], minlength=dims[k])[h.tuples[:, k]].sum())
