"""Cost shifting: equivalent reparameterisations that raise mini-bucket lower bounds.

FGLP (Ihler, Flerova, Dechter & Otten, UAI 2012) moves cost between each
function and a unary per variable so that all functions on a variable agree
on its min-marginal; the sum of the functions' minima, a lower bound, rises.
MBE moment matching (MBE-MM, same paper) does the same inside one bucket:
each mini-bucket is shifted by a unary over the eliminated variable so their
min-marginals agree before they are eliminated separately.

Integer problems stay exact: shifts are integers (floor division, the
remainder kept in the unary) and `top` absorbs (top - x = top), as in soft
arc consistency for WCSPs (Cooper & Schiex 2004). Float problems (-log10 p)
use inf the same way.
"""
from __future__ import annotations

import time
from collections import defaultdict

import numpy as np

from . import graph
from .engines.base import min_marginal_dense
from .engines.sparse import SparseTable, to_module
from .model import CostFunction, Problem


# Sweeps without a rise before FGLP stops: integer bounds often stall a few sweeps, then rise
# (grid n=100 d=10 seed 1: 3325 stopping at the first stall, 3452 with this patience).
PATIENCE = 20


class _Class:
    """One colour class of variables: no function holds two of them, so all update at once.

    `parts` lists (group, axis, rows, targets): the rows of a group's stacked
    tables whose `axis` variable is in the class, and the flat unary entries
    (variable * dmax + value) of that variable. `slots` split the min-marginal
    entries so that each slot hits every target at most once (an exact
    saturating sum without scatter-add); `entries` are the class's unary entries
    and `count` the functions sharing each entry (its unary included).
    """

    def __init__(self, parts, slots, entries, count):
        self.parts, self.slots, self.entries, self.count = parts, slots, entries, count


def fglp(problem: Problem, iterations: int = 100, deadline: float | None = None, xp=np,
         patience: int = PATIENCE) -> Problem:
    """An equivalent problem whose constant function is a lower bound raised by min-sum FGLP.

    Each sweep updates the variables colour class by colour class (a class
    shares no function, so its updates are independent and run on all
    stacked tables at once, which is Gauss-Seidel order). Stops after
    `iterations` sweeps, after `patience` sweeps in a row that do not raise
    the bound (integer shifts plateau, then rise again), or at `deadline` (a
    time.perf_counter() value), and returns the best state seen. The output holds
    the non-unary functions with their scopes, one unary per variable where
    not all zero, and one 0-d constant function.
    """
    integer, top = problem.integer, problem.top
    dom = problem.domains
    n, dmax = len(dom), max(dom, default=1)
    const = problem.dtype(0)
    unary = np.full((n, dmax), top, dtype=problem.dtype)
    for v, d in enumerate(dom):
        unary[v, :d] = 0
    shapes: dict[tuple, list[int]] = defaultdict(list)
    for i, f in enumerate(problem.functions):
        if f.arity == 0:
            const = _add(const, f.table[()], problem)
        elif f.arity == 1:
            v = f.scope[0]
            unary[v, :dom[v]] = _add(unary[v, :dom[v]], f.table, problem)
        else:
            shapes[f.table.shape].append(i)
    groups = [list(members) for members in shapes.values()]
    tables = [xp.asarray(np.stack([problem.functions[i].table for i in g])) for g in groups]
    scopes = [np.array([problem.functions[i].scope for i in g]) for g in groups]
    unary = xp.asarray(unary)
    classes = _colour_classes(xp, problem, scopes, dmax)
    best = _bound(xp, const, tables, unary, problem)
    kept, stale, start = ([t.copy() for t in tables], unary.copy()), 0, best
    for _ in range(iterations):
        # A bound that has not left its start after two sweeps will not (hard constraints
        # absorb every shift: CELAR6-SUB0 stays at 0 through 300 sweeps).
        never = stale >= 2 and not _rises(start, best, integer)
        if stale >= patience or never or (deadline is not None and time.perf_counter() > deadline):
            break
        for c in classes:
            _update_class(xp, c, tables, unary, problem)
        bound = _bound(xp, const, tables, unary, problem)
        if _rises(best, bound, integer):
            best, kept, stale = bound, ([t.copy() for t in tables], unary.copy()), 0
        else:
            stale += 1
    tables, unary = kept
    return _extract(xp, problem, groups, scopes, tables, unary, const)


def _add(a, b, problem: Problem):
    """Saturating sum of costs."""
    return np.minimum(a + b, problem.top) if problem.integer else a + b


def _rises(old, new, integer: bool) -> bool:
    if integer:
        return new > old
    return new > old + 1e-9 * max(1.0, abs(old)) if np.isfinite(old) else False


def _colour_classes(xp, problem: Problem, scopes, dmax: int) -> list[_Class]:
    """Greedy colouring of the primal graph, with each class's stacked rows and unary entries."""
    import networkx as nx  # only here: a solve that never shifts costs does not pay for its import
    colour = nx.greedy_color(nx.Graph(graph.primal_graph(problem)), strategy="largest_first")
    col = np.array([colour.get(v, 0) for v in range(len(problem.variables))])
    dom = np.array(problem.domains)
    classes = []
    for c in range(int(col.max(initial=-1)) + 1):
        parts, targets = [], []
        for g, s in enumerate(scopes):
            for axis in range(s.shape[1]):
                rows = np.nonzero(col[s[:, axis]] == c)[0]
                if rows.size:
                    var = s[rows, axis]
                    d = int(dom[s[0, axis]])  # one group: one shape, so one domain per axis
                    tgt = var[:, None] * dmax + np.arange(d)
                    parts.append((g, axis, xp.asarray(rows), tgt))
                    targets.append(tgt.ravel())
        if not parts:
            continue
        flat = np.concatenate(targets)
        order = np.argsort(flat, kind="stable")
        sorted_t = flat[order]
        start = np.r_[0, np.nonzero(np.diff(sorted_t))[0] + 1]
        rank = np.empty_like(order)
        rank[order] = np.arange(flat.size) - np.repeat(start, np.diff(np.r_[start, flat.size]))
        slots = [(xp.asarray(np.nonzero(rank == k)[0]), xp.asarray(flat[rank == k]))
                 for k in range(int(rank.max()) + 1)]
        vars_c = np.nonzero(col == c)[0]
        entries = np.concatenate([v * dmax + np.arange(dom[v]) for v in vars_c])
        count = np.ones(len(col) * dmax, dtype=np.int64)
        np.add.at(count, flat, 1)
        classes.append(_Class([(g, a, r, xp.asarray(t)) for g, a, r, t in parts], slots,
                              xp.asarray(entries), xp.asarray(count[entries])))
    return classes


def _update_class(xp, c: _Class, tables, unary, problem: Problem):
    """Give every function on a class variable, and its unary, an equal share of their min-marginal sum."""
    integer, top = problem.integer, problem.top
    flat = unary.reshape(-1)
    rows_of = [tables[g][rows] for g, _, rows, _ in c.parts]
    lams = [t.min(axis=tuple(a for a in range(1, t.ndim) if a != axis + 1))
            for t, (_, axis, _, _) in zip(rows_of, c.parts)]
    mass = xp.concatenate([lam.reshape(-1) for lam in lams])
    total = flat.copy()
    for pos, tgt in c.slots:
        total[tgt] = total[tgt] + mass[pos]
        if integer:
            total[tgt] = xp.minimum(total[tgt], top)
    total = total[c.entries]
    if integer:
        dead = total >= top
        share = xp.where(dead, 0, total // c.count)
    else:
        dead = xp.isinf(total)
        share = xp.where(dead, 0.0, total / c.count)
    flat[c.entries] = xp.where(dead, top, total - share * (c.count - 1))
    shares = xp.zeros(flat.shape, dtype=flat.dtype)
    shares[c.entries] = share
    for (g, axis, rows, tgt), t, lam in zip(c.parts, rows_of, lams):
        shape = [lam.shape[0]] + [1] * (t.ndim - 1)
        shape[axis + 1] = lam.shape[1]
        if not integer:
            lam = xp.where(xp.isinf(lam), 0.0, lam)  # its rows are inf and stay inf
        moved = (shares[tgt] - lam).reshape(shape)
        if integer:
            tables[g][rows] = xp.where(t >= top, top, xp.minimum(t + moved, top))
        else:
            tables[g][rows] = xp.where(xp.isinf(t), xp.inf, t + moved)


def _bound(xp, const, tables, unary, problem: Problem):
    """The constant plus every function's minimum (saturating): the reparameterisation's lower bound."""
    mins = [to_module(np, t.reshape(t.shape[0], -1).min(axis=1)) for t in tables]
    mins.append(to_module(np, unary.min(axis=1)))
    values = np.concatenate(mins)
    if problem.integer:
        total = int(const) + sum(int(m) for m in values)
        return problem.dtype(min(total, problem.top))
    return float(const) + float(values.sum())


def _extract(xp, problem: Problem, groups, scopes, tables, unary, const) -> Problem:
    """Move every function's minimum into one constant function; back to host tables."""
    integer, top = problem.integer, problem.top
    out: list[CostFunction | None] = [None] * len(problem.functions)
    total = int(const) if integer else float(const)
    for members, s, t in zip(groups, scopes, tables):
        low = t.reshape(t.shape[0], -1).min(axis=1)
        dead = (low >= top) if integer else xp.isinf(low)
        cut = xp.where(dead, 0, low).reshape((-1,) + (1,) * (t.ndim - 1))
        t = xp.where(t >= top, t, t - cut)
        host = to_module(np, t)
        for k, i in enumerate(members):
            out[i] = CostFunction(tuple(int(v) for v in s[k]), np.ascontiguousarray(host[k]))
        low = to_module(np, low)
        total += sum(int(x) for x in low) if integer else float(low.sum())
    functions = [f for f in out if f is not None]
    u = to_module(np, unary)
    for v, d in enumerate(problem.domains):
        row = u[v, :d]
        low = row.min()
        total += int(low) if integer else float(low)
        row = row if low >= top else np.where(row >= top, row, row - low)
        if row.any():
            functions.append(CostFunction((v,), np.ascontiguousarray(row)))
    if integer:
        total = min(total, int(top))
    functions.insert(0, CostFunction((), np.array(total, dtype=problem.dtype)))
    return problem.like(functions, top=top)


def match_bucket(xp, problem: Problem, plan, var: int, tables, messages, check=None) -> dict[int, object]:
    """MBE moment matching: per dense mini-bucket of `var`'s bucket, a unary over `var` to add.

    Each mini-bucket's min-marginal mu_k over `var` is made equal to their
    mean (integer: floor, the remainder on the first); the shifts sum to
    zero, so the bucket's sum is unchanged and the value-assignment phase,
    which never sees them, needs none. Values forbidden by the sum of the
    min-marginals get top in every mini-bucket. Mini-buckets with a sparse
    table (theirs or an input's) are left unmatched: their joins are not
    dense. Returns {} when fewer than two can be matched.
    """
    dom = problem.domains
    integer, top = problem.integer, problem.top
    mus = {}
    for m in plan.buckets[var]:
        mb = plan.minibuckets[m]
        inputs = [(tables[i], problem.functions[i].scope) for i in mb.functions]
        inputs += [(messages[j], plan.minibuckets[j].scope) for j in mb.messages]
        if mb.sparse or any(isinstance(t, SparseTable) for t, _ in inputs):
            continue
        inputs = [(to_module(xp, getattr(t, "host", t)), s) for t, s in inputs]
        mus[m] = min_marginal_dense(xp, var, mb.scope, inputs, dom, top, integer, check)
    if len(mus) < 2:
        return {}
    k = len(mus)
    total = mus[next(iter(mus))]
    for mu in list(mus.values())[1:]:
        total = xp.minimum(total + mu, top) if integer else total + mu
    dead = total >= top if integer else xp.isinf(total)
    mean = xp.where(dead, 0, total // k) if integer else xp.where(dead, 0.0, total / k)
    first = next(iter(mus))
    shifts = {}
    for m, mu in mus.items():
        target = mean + (total - mean * k if m == first else 0)
        shifts[m] = xp.where(dead, top, target - xp.where(dead, 0, mu))
    return shifts
