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

from collections import defaultdict, deque
from typing import Callable

import numpy as np

from gpusolve.order import graph
from gpusolve.engines.dense import aligned, host_or_table, join_dense, min_marginal_dense
from gpusolve.engines.sparse import SparseTable, scalar, to_module
from gpusolve.model.problem import CostFunction, Problem
from gpusolve.stop import Stop


# FGLP sweeps until its bound has risen by at most TOLERANCE (relative) over the last WINDOW sweeps, at
# most MAX_SWEEPS. Bounds creep up long after 100 sweeps (a facility location of 100 variables, domain
# 50: 7,793,764 after 100 sweeps, 7,934,357 after 1,000, optimum 7,934,385), and integer bounds stall
# for tens of sweeps, then rise (generated grid n=100 d=10 p2=0 seed 1: 1,538 after a window of 20,
# 1,688 after one of 50 at sweep 262, where 2,000 sweeps leave it; pedigree1, internal costs:
# 74,460,700 after 100 sweeps, 74,843,640 at sweep 926, 74,845,767 after 2,000).
WINDOW, TOLERANCE, MAX_SWEEPS = 50, 1e-5, 10_000


class Converged:
    """Whether a bound has stopped rising: at most `tolerance` (relative to its size, at least 1)
    over the last `window` updates, or it reached `top` (nothing can follow)."""

    def __init__(self, window: int, tolerance: float, top):
        self.seen, self.tolerance, self.top = deque(maxlen=window + 1), tolerance, top

    def __call__(self, bound) -> bool:
        self.seen.append(bound)
        if bound >= self.top:
            return True
        if len(self.seen) < self.seen.maxlen:
            return False
        return float(bound) - float(self.seen[0]) <= self.tolerance * max(1.0, abs(float(bound)))


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


def fglp(problem: Problem, iterations: int = MAX_SWEEPS, stop: Stop | None = None, xp=np,
         window: int = WINDOW, tolerance: float = TOLERANCE, on_sweep: Callable[[int, object], None] | None = None) -> Problem:
    """An equivalent problem whose constant function is a lower bound raised by min-sum FGLP.

    Each sweep updates the variables colour class by colour class (a class
    shares no function, so its updates are independent and run on all
    stacked tables at once, which is Gauss-Seidel order). Sweeps until the
    bound has converged (Converged(window, tolerance)), or for `iterations`
    sweeps at most, or until `stop` says so, checked before each sweep;
    returns the best state seen.
    on_sweep(sweeps, bound) follows each sweep with that state's bound. The
    output holds the non-unary functions with their scopes, one unary per
    variable where not all zero, and one 0-d constant function.
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
    best = start = _bound(xp, const, tables, unary, problem)
    kept, converged = ([t.copy() for t in tables], unary.copy()), Converged(window, tolerance, top)
    stop = stop or Stop()
    for sweep in range(1, iterations + 1):
        if stop():
            break
        for c in classes:
            _update_class(xp, c, tables, unary, problem)
        bound = _bound(xp, const, tables, unary, problem)
        if _rises(best, bound, integer):  # integer shares (floors) can lower it: the best state is kept
            best, kept = bound, ([t.copy() for t in tables], unary.copy())
        if on_sweep:
            on_sweep(sweep, best)
        # A bound that has not left its start after two sweeps will not (hard constraints
        # absorb every shift: CELAR6-SUB0 stays at 0 through 300 sweeps).
        if converged(best) or (sweep >= 2 and not _rises(start, best, integer)):
            break
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
        inputs = plan.inputs(problem, mb, tables, messages)
        if mb.sparse or any(isinstance(t, SparseTable) for t, _ in inputs):
            continue
        inputs = [(to_module(xp, host_or_table(t)), s) for t, s in inputs]
        mus[m] = min_marginal_dense(xp, var, mb.scope, inputs, dom, top, integer, check)
    if len(mus) < 2:
        return {}
    return dict(zip(mus, _agree(xp, list(mus.values()), problem)))


def _agree(xp, mus, problem: Problem):
    """Shifts that give every min-marginal in `mus` an equal share of their (saturating) sum.

    Integer shares are floors, the remainder on the first; where the sum is
    forbidden every shift is top. Shifts sum to zero elsewhere, so adding
    them keeps the problem equivalent.
    """
    integer, top = problem.integer, problem.top
    k = len(mus)
    total = mus[0]
    for mu in mus[1:]:
        total = xp.minimum(total + mu, top) if integer else total + mu
    dead = total >= top if integer else xp.isinf(total)
    mean = xp.where(dead, 0, total // k) if integer else xp.where(dead, 0.0, total / k)
    return [xp.where(dead, top, mean + (total - mean * k if i == 0 else 0) - xp.where(dead, 0, mu))
            for i, mu in enumerate(mus)]


# JGLP keeps the regions (mini-bucket joins) it shifts in memory: at most this much, largest left out.
JGLP_BYTES = 1 << 30


def jglp(problem: Problem, plan, engine, tables, messages, matched=None, budget: int = JGLP_BYTES,
         stop: Stop | None = None, sweeps: int = MAX_SWEEPS, window: int = 3, tolerance: float = TOLERANCE,
         on_sweep: Callable[[int, object], None] | None = None):
    """Lower bound by cost shifting on the mini-bucket join graph (JGLP), started at an MBE run.

    Region r (a mini-bucket) holds F_r = its functions + the messages it
    received (+ its moment-matching unary, `matched`) - the message it sent.
    The messages telescope, so the constants plus sum of F_r is the problem
    and the constants plus sum of min F_r is the run's bound. Each update
    makes two or more regions agree on what they share (a bucket's regions:
    its variable; a region and the one its message went to: the message's
    scope): block coordinate ascent (Ihler, Flerova, Dechter & Otten, UAI
    2012), so every state gives a valid bound, and the largest is returned,
    never below the run's. Regions that do not fit `budget`, or that hold a
    sparse table, stay as the run left them. Sweeps (the updates forward,
    then backward) until the bound has converged (Converged(window,
    tolerance)), for `sweeps` at most, or until `stop` says so (checked before
    each region and each update); on_sweep(sweeps, bound) follows each.
    """
    xp, matched, integer, stop = engine.xp, matched or {}, problem.integer, stop or Stop()
    constants = [problem.functions[i].table[()] for i in plan.constants]
    start = problem.total(constants + [scalar(engine, messages[r], problem.top) for r in plan.roots])
    if problem.is_forbidden(start):
        return start
    regions, room = {}, budget // problem.dtype().itemsize
    for mb in plan.minibuckets:
        if stop():
            return start
        inputs = _inputs(problem, plan, mb, tables, messages, matched)
        if mb.joint_entries <= room and not mb.sparse and not any(isinstance(t, SparseTable) for t, _ in inputs):
            regions[mb.index] = _region(xp, problem, mb, inputs, messages, mb.index in plan.roots)
            room -= mb.joint_entries
    fixed = constants + [scalar(engine, messages[r], problem.top) for r in plan.roots if r not in regions]
    parent = {j: mb.index for mb in plan.minibuckets for j in mb.messages if mb.index in regions and j in regions}
    steps = []
    for var in plan.order:
        group = [m for m in plan.buckets.get(var, ()) if m in regions]
        steps += [("bucket", tuple(group))] if len(group) > 1 else []
        steps += [("edge", (m, parent[m])) for m in group if m in parent]

    def bound():
        return problem.total(fixed + [(int if integer else float)(f.min()) for f in regions.values()])

    best, converged = start, Converged(window, tolerance, problem.top)
    for sweep in range(sweeps):
        for kind, members in steps if sweep % 2 == 0 else reversed(steps):
            if stop():
                return best
            if kind == "bucket":
                mus = [regions[m].reshape(regions[m].shape[0], -1).min(axis=1) for m in members]
                for m, s in zip(members, _agree(xp, mus, problem)):
                    regions[m] = _shifted(xp, regions[m], s.reshape((-1,) + (1,) * (regions[m].ndim - 1)), problem)
            else:
                _match_edge(xp, problem, plan.minibuckets[members[0]], plan.minibuckets[members[1]], regions)
        value = bound()
        best = value if _rises(best, value, integer) else best
        if on_sweep:
            on_sweep(sweep + 1, best)
        if converged(best):
            break
    return best


def _inputs(problem: Problem, plan, mb, tables, messages, matched):
    """What run_plan summed for `mb`: its functions, the messages it received, its matching unary."""
    unary = [(matched[mb.index], (mb.var,))] if mb.index in matched else []
    return plan.inputs(problem, mb, tables, messages) + unary


def _region(xp, problem: Problem, mb, inputs, messages, root: bool):
    """F_r as a dense table over (var,) + scope: the join minus the message it sent (top stays top)."""
    dom, integer, top = problem.domains, problem.integer, problem.top
    inputs = [(to_module(xp, host_or_table(t)), s) for t, s in inputs]
    joint = join_dense(xp, mb.var, mb.scope, inputs, dom, top, integer)
    if root:
        return joint
    sent = to_module(xp, host_or_table(messages[mb.index]))[None]
    dead = joint >= top if integer else xp.isinf(joint)  # where the message is forbidden, all of its rows are
    joint -= xp.where(sent >= top, 0, sent) if integer else xp.where(xp.isinf(sent), 0.0, sent)
    joint[dead] = top
    return joint


def _shifted(xp, table, shift, problem: Problem):
    """table + shift in place, where forbidden entries stay forbidden (top absorbs)."""
    if not shift.any():
        return table
    if problem.integer:
        dead = table >= problem.top
        table += shift
        xp.minimum(table, problem.top, out=table)
        table[dead] = problem.top
    else:
        table += xp.where(xp.isinf(shift), xp.inf, shift)  # inf + finite stays inf; nan cannot arise
    return table


def _match_edge(xp, problem: Problem, child, parent, regions) -> None:
    """Make `child`'s region and `parent`'s agree on their min-marginals over the child's scope."""
    up, down = regions[child.index], regions[parent.index]
    axes = {parent.var: 0, **{u: i + 1 for i, u in enumerate(parent.scope)}}
    kept = [axes[u] for u in child.scope]
    mu_p = down.min(axis=tuple(a for a in range(down.ndim) if a not in kept)) if len(kept) < down.ndim else down
    mu_p = xp.transpose(mu_p, [sorted(kept).index(a) for a in kept]) if kept else mu_p
    mu_c = up.min(axis=0)
    s_c, s_p = _agree(xp, [mu_c, mu_p], problem)
    regions[child.index] = _shifted(xp, up, s_c[None], problem)
    regions[parent.index] = _shifted(xp, down, aligned(xp, s_p, child.scope, axes, down.ndim), problem)
