"""Upper bounds: many randomized rollouts guided by mini-bucket messages, then parallel local search.

`rollouts` is the value-assignment phase of eliminate.assign for n rows at
once, each variable sampled from its bucket's conditional costs at a row's
temperature (Gumbel-max: argmin of cost - T * Gumbel noise samples the
softmax of -cost / T); row 0 stays greedy, so with exact BE messages it is
an optimal assignment.

`lns` (large neighbourhood search) frees a connected ball of variables
around a random one, fixes the others to the incumbent's values and solves
what is left exactly by bucket elimination on the engine: a move over tens
of variables at once, which takes chains out of basins they cannot leave
one variable or one tree at a time (10x10 grids, domain 10: the optimum
where the chains stall 1-2% above it).

`local_search` improves n chains at once. A sweep moves colour class by
colour class: variables of one colour of the primal graph share no
function, so all of them move simultaneously given the others (chromatic
Gibbs sampling), each sampling its value at its chain's temperature and
never back to the value it just left while tabu. Chains form ladders of
temperatures with replica exchange between neighbouring rungs. After each
sweep every chain takes the exact best values of a random induced tree of
the primal graph given the rest (min-sum dynamic programming: a large
neighbourhood, found by a few (n, d, d) gathers per tree member). Stale
chains restart near their ladder's best or a start, a few values
perturbed. Feasibility is checked exactly and every incumbent with
Problem.evaluate. Until a feasible point is known the chains minimise
(violated hard tuples, cost) lexicographically: a hard entry outweighs
every feasible cost together, and bests, restarts and progress reports
go by that rank (RLFAP with top one above the optimum, where only optimal
assignments are feasible). From the first feasible point on, a hard
entry costs a finite penalty, so hot chains can cross hard tuples.

Every step is whole-array `xp` code over all chains (NumPy or CuPy).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from gpusolve.order import graph
from gpusolve.engines import sparse
from gpusolve.model.problem import Problem
from gpusolve.stop import Stop

# The chains run on the GPU engine's device when the problem's tables hold this many entries in all.
# Below, 256 chains sweep about as fast on one core (GEOM40: 8-9 ms against 14-20 ms on the device,
# grid n=64 d=10 with 11k entries: 35-39 against 35-38 ms, 404: 31-36 against 22-25 ms) and their
# CuPy kernels would compile on a new machine (1.5-3 s); above, the device wins (CELAR6-SUB0, 94k
# entries: 10-11 against 65-74 ms; grid n=400 d=10, 75k: 55-71 against 104-106 ms).
# bench/local_search.py --sweeps 30, two runs on H100s, 2026-11-26.
DEVICE_MIN_ENTRIES = 50_000


def chains_module(problem: Problem, xp):
    """The array module the chains run with: the engine's `xp`, or NumPy for a small problem."""
    if xp is np or sum(f.entries for f in problem.functions) < DEVICE_MIN_ENTRIES:
        return np
    return xp


HOT = 1.0  # hottest chain's temperature, in units of the problem's typical cost difference
COLD = 0.02  # coldest rung's temperature, same units
WEIGHT = 3.0  # a hard entry costs this many times the largest feasible entry while searching


def _rng(xp, rng):
    """A generator of module xp seeded from the NumPy generator `rng`."""
    return rng if xp is np else xp.random.default_rng(int(rng.integers(1 << 62)))


def _gumbel(xp, g, shape):
    u = g.random(shape)
    return -xp.log(-xp.log(xp.clip(u, 1e-300, 1.0 - 1e-16)))


def cost_scale(problem: Problem) -> float:
    """Typical difference between two feasible costs of one function (mean absolute deviation, median
    over functions): the unit of the temperatures."""
    spreads = []
    for f in problem.functions:
        finite = f.table[f.table < problem.top].astype(np.float64)
        if finite.size > 1:
            spreads.append(float(np.abs(finite - finite.mean()).mean()))
    spreads = [s for s in spreads if s > 0]
    return float(np.median(spreads)) if spreads else 1.0


def rollouts(problem: Problem, plan, engine, tables, messages, n: int, rng, hot: float = HOT):
    """n assignments (xp int64 array (n, variables)) sampled in reverse elimination order.

    Row i samples each value at temperature hot * cost_scale * i / (n - 1) from
    the costs of its variable's bucket (functions and mini-bucket messages)
    given the values already chosen: row 0 is eliminate.assign's greedy row.
    """
    xp = engine.xp
    g = _rng(xp, rng)
    dom = problem.domains
    temp = xp.linspace(0.0, hot * cost_scale(problem), n)[:, None]
    values = xp.zeros((n, len(dom)), dtype=xp.int64)
    for var, val in problem.evidence.items():
        values[:, var] = val
    for var in reversed(plan.order):
        if var in problem.evidence:
            continue
        costs = xp.zeros((n, dom[var]), dtype=xp.float64)
        for m in plan.buckets.get(var, ()):
            mb = plan.minibuckets[m]
            for table, scope in plan.inputs(problem, mb, tables, messages):
                costs += sparse.slice_rows(xp, table, scope, var, values, problem.top)
        costs = xp.minimum(costs, float(problem.top))
        values[:, var] = xp.argmin(costs - temp * _gumbel(xp, g, costs.shape), axis=1)
    return values


@dataclass
class Gathers:
    """Index arrays that turn an (n, variables) value array into costs with a few gathers.

    `pool` holds every table flattened, hard entries replaced by a finite
    penalty (weight times the largest feasible entry), and a trailing 0
    that padded slots point at. A function's entry for an assignment is
    pool[offset + sum(values[scope] * strides)]. `span` exceeds the range
    of the feasible entries' sums: a rank of hard tuples * span + cost is
    lexicographic.
    """
    pool: object
    hard: object  # pool entries that are forbidden (cost >= top)
    penalty: float
    span: float
    constant: float  # the scope-0 functions' sum, outside the pool
    scope: object  # (functions, arity) variable indices, padded with 0 (stride 0)
    strides: object
    offset: object
    classes: list  # per colour: (variables, scope, strides, offset, var_stride, values, domain mask)
    host: tuple  # the scope, strides and offset arrays in host memory, for building block moves
    touching: dict  # variable -> [(function, position in its scope)]
    neighbours: dict  # movable variable -> its movable neighbours in the primal graph


def gathers(problem: Problem, xp=np, weight: float = WEIGHT) -> Gathers:
    """Precompute the pool and, per colour class, the functions touching each of its variables."""
    fs = [f for f in problem.functions if f.scope]
    finite = [f.table[f.table < problem.top] for f in fs]
    spreads = [float(t.max()) - min(float(t.min()), 0.0) for t in finite if t.size]
    penalty = weight * max(spreads, default=1.0)
    constant = sum(float(f.table[()]) for f in problem.functions if not f.scope)
    offsets = np.cumsum([0] + [f.table.size for f in fs])
    pad = int(offsets[-1])
    pool = np.concatenate([np.where(f.table < problem.top, f.table, penalty).astype(np.float64).ravel()
                           for f in fs] + [np.zeros(1)])
    hard = np.concatenate([(f.table >= problem.top).ravel() for f in fs] + [np.zeros(1, bool)])
    arity = max((f.arity for f in fs), default=1)
    fscope = np.zeros((len(fs), arity), np.int64)
    fstride = np.zeros((len(fs), arity), np.int64)
    touching: dict[int, list[tuple[int, int]]] = {}
    for i, f in enumerate(fs):
        fscope[i, :f.arity] = f.scope
        fstride[i, :f.arity] = sparse.strides(f.table.shape)
        for k, v in enumerate(f.scope):
            touching.setdefault(v, []).append((i, k))
    dom = problem.domains
    movable = [v for v in range(len(dom)) if dom[v] > 1 and v not in problem.evidence and v in touching]
    import networkx as nx  # only here: a solve that stays with elimination does not pay for its import
    primal = nx.Graph(graph.primal_graph(problem)).subgraph(movable)
    colour = nx.greedy_color(primal, "largest_first")
    classes = []
    for c in sorted(set(colour.values())):
        vs = [v for v in movable if colour[v] == c]
        width, d = max(len(touching[v]) for v in vs), max(dom[v] for v in vs)
        scope = np.zeros((len(vs), width, arity), np.int64)
        stride = np.zeros((len(vs), width, arity), np.int64)
        offset = np.full((len(vs), width), pad, np.int64)
        vstride = np.zeros((len(vs), width), np.int64)
        mask = np.zeros((len(vs), d))
        values = np.minimum(np.arange(d), np.array([dom[v] - 1 for v in vs])[:, None])  # pads repeat the last
        for j, v in enumerate(vs):
            mask[j, dom[v]:] = np.inf
            for s, (i, k) in enumerate(touching[v]):
                scope[j, s], stride[j, s], offset[j, s] = fscope[i], fstride[i], offsets[i]
                vstride[j, s], stride[j, s, k] = fstride[i, k], 0
        classes.append(tuple(xp.asarray(a) for a in (np.array(vs), scope, stride, offset, vstride, values, mask)))
    return Gathers(xp.asarray(pool), xp.asarray(hard), penalty, sum(spreads) + 1.0, constant,
                   xp.asarray(fscope), xp.asarray(fstride), xp.asarray(offsets[:-1]), classes, (fscope, fstride, offsets[:-1]), touching,
                   {v: set(primal.adj[v]) for v in movable})


def induced_tree(gt: Gathers, rng, size: int) -> tuple[list[int], dict[int, int]]:
    """A random tree of at most `size` movable variables grown from a random root, each joining
    next to exactly one member, so no function joins two members unless they are parent and child:
    conditioned on the rest, the members form a tree. Returns (members, leaves first; parent)."""
    movable = list(gt.neighbours)
    root = movable[int(rng.integers(len(movable)))]
    order, parent, on = [root], {}, {root}
    frontier = set(gt.neighbours[root])
    while len(order) < size and frontier:
        options = sorted(u for u in frontier if len(gt.neighbours[u] & on) == 1)
        if not options:
            break
        u = options[int(rng.integers(len(options)))]
        parent[u] = next(iter(gt.neighbours[u] & on))
        order.append(u)
        on.add(u)
        frontier = (frontier | gt.neighbours[u]) - on
    return order[::-1], parent


def tree_move(xp, gt: Gathers, x, members: list[int], parent: dict[int, int], dom) -> None:
    """Every chain takes the exact best values of an induced tree given its other values: min-sum
    dynamic programming from the leaves (one (n, d, d_parent) table per member), then back down."""
    fscope, fstride, offsets = gt.host
    n = x.shape[0]
    children: dict[int, list[int]] = {}
    for v in members:
        if v in parent:
            children.setdefault(parent[v], []).append(v)
    incoming = {v: xp.zeros((n, dom[v])) for v in members}
    back = {}
    for v in members:  # leaves first
        up = parent.get(v, -1)
        below = children.get(v, [])
        fs = [f for f, _ in gt.touching[v] if not any(((fscope[f] == c) & (fstride[f] > 0)).any() for c in below)]
        scope, stride = fscope[fs], fstride[fs].copy()  # functions shared with a child went with the child
        own = np.where(scope == v, stride, 0).sum(1)
        pair = np.where(scope == up, stride, 0).sum(1)
        stride[(scope == v) | (scope == up)] = 0
        base = xp.asarray(offsets[fs]) + (x[:, xp.asarray(scope)] * xp.asarray(stride)).sum(-1)
        dp = dom[up] if up >= 0 else 1
        idx = (base[:, :, None, None] + xp.asarray(own)[:, None, None] * xp.arange(dom[v])[:, None]
               + xp.asarray(pair)[:, None, None] * xp.arange(dp))
        total = incoming[v][:, :, None] + gt.pool[idx].sum(1)  # (n, d, d_parent)
        back[v] = xp.argmin(total, axis=1)
        if up >= 0:
            incoming[up] += total.min(axis=1)
    rows = xp.arange(n)
    for v in reversed(members):  # roots first
        x[:, v] = back[v][rows, x[:, parent[v]]] if v in parent else back[v][:, 0]


def scores(xp, gt: Gathers, values, top):
    """(penalised cost, rank, feasible) of every row (n,). The rank is violated hard tuples * span
    + the feasible entries' cost: a feasible row (no hard tuple, cost below top) ranks by its cost,
    before every infeasible one; exact for integer sums below 2^53."""
    idx = gt.offset + (values[:, gt.scope] * gt.strides).sum(-1)
    entries, hard = gt.pool[idx], gt.hard[idx]
    violated = hard.sum(1)
    cost = gt.constant + xp.where(hard, 0.0, entries).sum(1)
    return entries.sum(1), cost + violated * gt.span, (violated == 0) & (cost < top)


def sweep(xp, gt: Gathers, x, temp, prev, until, step: int, tenure: int, g) -> None:
    """Every colour class in turn: each variable of every chain samples a value given the others
    at its chain's temperature, never the value it left within `tenure` sweeps (tabu)."""
    for vs, scope, stride, offset, vstride, values, mask in gt.classes:
        base = offset + (x[:, scope] * stride).sum(-1)
        d = mask.shape[1]
        costs = gt.pool[base[..., None] + vstride[..., None] * values[:, None, :]].sum(2) + mask
        tabu = (xp.arange(d) == prev[:, vs, None]) & (until[:, vs, None] >= step)
        new = xp.argmin(xp.where(tabu, xp.inf, costs) - temp[:, :, None] * _gumbel(xp, g, costs.shape), axis=2)
        old = x[:, vs]
        moved = new != old
        prev[:, vs] = xp.where(moved, old, prev[:, vs])
        until[:, vs] = xp.where(moved, step + tenure, until[:, vs])
        x[:, vs] = new


def exchange(xp, energy, temp, parity: int, g):
    """Replica exchange: the row permutation that swaps neighbouring rungs (i, i+1), i of the given
    parity, of every ladder (rows reshaped (ladders, rungs)) with the Metropolis probability."""
    ladders, rungs = temp.shape
    e = energy.reshape(ladders, rungs)
    i = xp.arange(parity, rungs - 1, 2)
    gain = (e[:, i] - e[:, i + 1]) * (1.0 / temp[:, i] - 1.0 / temp[:, i + 1])
    swap = xp.log(g.random(gain.shape)) < gain
    perm = xp.broadcast_to(xp.arange(rungs), (ladders, rungs)).copy()
    perm[:, i] = xp.where(swap, i + 1, i)
    perm[:, i + 1] = xp.where(swap, i, i + 1)
    return (perm + rungs * xp.arange(ladders)[:, None]).reshape(-1)


def local_search(problem: Problem, starts, stop: Stop | None, rng, xp=np, n: int = 256,
                 on_improve: Callable[[object, list[int]], None] | None = None,
                 on_progress: Callable[[], None] | None = None,
                 max_sweeps: int | None = None, rungs: int = 16, tenure: int = 2, hot: float = HOT,
                 cold: float = COLD, weight: float = WEIGHT, trees: int = 1, tree_size: int = 64,
                 patience: int = 50, home: float = 0.5, perturb: float = 0.05):
    """Best assignment found (list, or None when no chain got feasible) and its cost (top if None).

    n chains form n / rungs ladders of temperatures cold..hot (times
    cost_scale) with replica exchange after every sweep; hard entries weigh
    more than all feasible entries together until a feasible point is
    known, then `weight` times the largest feasible entry; `trees` induced
    trees of at most `tree_size` variables are optimised exactly per sweep.
    `starts` (k, variables) seed the chains, cheapest first (repeated; random values
    when k = 0 or None); evidence keeps its observed values. A chain that
    has not improved its own best for `patience` sweeps restarts from its
    ladder's best (probability `home`) or a random start, a share `perturb`
    of its values random. Stops after `max_sweeps` sweeps or when `stop`
    says so (checked before each sweep).
    on_improve(cost, assignment) is called for each better feasible
    assignment, the best start's included; until the first, on_progress()
    each time the chains' best comes closer to feasibility (fewer violated
    hard tuples, or as many at a lower cost): a caller's stall rule should
    count it as progress, since no incumbent can come before.
    """
    dom = problem.domains
    nv = len(dom)
    g = _rng(xp, rng)
    gt = gathers(problem, xp, weight)
    rungs = max(1, min(rungs, n))
    n -= n % rungs
    if starts is None or len(starts) == 0:
        x = xp.floor(g.random((n, nv)) * xp.asarray(dom)).astype(xp.int64)
    else:
        starts = xp.asarray(starts, dtype=xp.int64).reshape(-1, nv)
        starts = starts[xp.argsort(scores(xp, gt, starts, problem.top)[1])]  # feasible first, by cost
        x = starts[xp.arange(n) % starts.shape[0]]
        x = x.reshape(rungs, -1, nv).transpose(1, 0, 2).reshape(n, nv)  # the cheapest on the coldest rungs
    for var, val in problem.evidence.items():
        x[:, var] = val
    origin = x.copy()
    temp = xp.broadcast_to(xp.asarray(cost_scale(problem) * np.geomspace(cold, hot, rungs)), (n // rungs, rungs))
    prev = xp.full((n, nv), -1, xp.int64)  # the value a variable left last, tabu until `until`
    until = xp.zeros((n, nv), xp.int64)
    best_cost, best, best_rank = problem.top, None, np.inf
    chain_best = xp.full(n, xp.inf)
    since = xp.zeros(n, xp.int64)
    ladders = n // rungs
    ladder = xp.arange(n) // rungs
    elite, elite_rank = x[::rungs].copy(), xp.full(ladders, xp.inf)  # each ladder's best: its restarts' home

    def take(rank, feasible):
        nonlocal best_cost, best, best_rank
        i = int(xp.argmin(rank))
        if float(rank[i]) >= best_rank:
            return
        if not bool(feasible[i]):  # no feasible point is known: every one ranks lower
            best_rank = float(rank[i])
            if on_progress:
                on_progress()
            return
        a = [int(v) for v in sparse.to_module(np, x[i])]
        c = problem.evaluate(a)
        if c < best_cost:  # (else a global constraint, unseen by the chains, forbids it)
            if best is None:  # hot chains may cross hard tuples again
                gt.pool[gt.hard] = gt.penalty
            best_cost, best, best_rank = c, a, float(rank[i])
            if on_improve:
                on_improve(c, a)

    def done():
        return (max_sweeps is not None and step >= max_sweeps) or (stop is not None and stop())

    gt.pool[gt.hard] = gt.span  # lexicographic until a feasible point is known
    take(*scores(xp, gt, x, problem.top)[1:])
    step = 0
    while not done():
        step += 1
        sweep(xp, gt, x, temp.reshape(n, 1), prev, until, step, tenure, g)
        for _ in range(trees if gt.neighbours else 0):
            tree_move(xp, gt, x, *induced_tree(gt, rng, tree_size), dom)
        energy, rank, feasible = scores(xp, gt, x, problem.top)
        take(rank, feasible)
        i = xp.argmin(rank.reshape(ladders, rungs), axis=1) + rungs * xp.arange(ladders)
        gain = rank[i] < elite_rank
        elite = xp.where(gain[:, None], x[i], elite)
        elite_rank = xp.where(gain, rank[i], elite_rank)
        better = rank < chain_best
        chain_best = xp.minimum(chain_best, rank)
        since = xp.where(better, 0, since + 1)
        stale = since > patience
        if bool(stale.any()):
            source = xp.where(g.random((n, 1)) < home, elite[ladder],
                              origin[xp.floor(g.random(n) * n).astype(xp.int64)])
            fresh = xp.where(g.random((n, nv)) < perturb,
                             xp.floor(g.random((n, nv)) * xp.asarray(dom)).astype(xp.int64), source)
            for var, val in problem.evidence.items():
                fresh[:, var] = val
            x = xp.where(stale[:, None], fresh, x)
            energy = scores(xp, gt, x, problem.top)[0]
            since = xp.where(stale, 0, since)
            chain_best = xp.where(stale, xp.inf, chain_best)
        perm = exchange(xp, energy, temp, step % 2, g)
        x, prev, until = x[perm], prev[perm], until[perm]
    return best, best_cost


# LNS: the freed ball starts at this many variables and adapts so that its exact plan holds about
# LNS_ENTRIES joint entries (the ball shrinks when its plan is larger, grows when much smaller).
LNS_SIZE, LNS_ENTRIES = 40, 10**7


def movable_adjacency(problem: Problem) -> dict[int, set[int]]:
    """The primal graph over the variables a ball may free: more than one value, no evidence."""
    dom = problem.domains
    adjacency = {v: nb for v, nb in graph.primal_graph(problem).items()
                 if dom[v] > 1 and v not in problem.evidence}
    return {v: nb & adjacency.keys() for v, nb in adjacency.items()}


def ball(adjacency, rng, size: int) -> set[int]:
    """A connected set of at most `size` variables grown breadth-first from a random one."""
    movable = list(adjacency)
    root = movable[int(rng.integers(len(movable)))]
    members, seen = [root], {root}
    for v in members:
        neighbours = sorted(adjacency[v] - seen)
        for u in rng.permutation(neighbours)[:size - len(members)] if neighbours else ():
            seen.add(int(u))
            members.append(int(u))
        if len(members) >= size:
            break
    return seen


def lns(problem: Problem, assignment, engine, rng, stop: Stop | None = None,
        on_improve: Callable[[object, list[int]], None] | None = None,
        size: int = LNS_SIZE, max_entries: int = LNS_ENTRIES):
    """Large neighbourhood search from a feasible `assignment`: (best assignment, its cost).

    Each step solves the ball's subproblem exactly, so its result is never worse than the
    incumbent restricted to it; equal-cost results are taken too (the search drifts along
    plateaus). on_improve(cost, assignment) is called for each better one. `stop` is checked
    before each step (a step's plan holds at most `max_entries` joint entries).
    """
    from gpusolve.inference.eliminate import assign, run_plan
    from gpusolve.model.problem import condition
    from gpusolve.plan.buckets import build_plan
    best, cost = list(assignment), problem.evaluate(assignment)
    if problem.globals:  # model.condition does not condition global constraints: no neighbourhood to solve
        return best, cost
    dom = problem.domains
    adjacency = movable_adjacency(problem)
    stop = stop or Stop()
    while adjacency and not stop():
        free = ball(adjacency, rng, size)
        sub = condition(problem, {v: best[v] for v in range(len(dom)) if v not in free})
        order = graph.elimination_order(sub, "minfill", {v: adjacency[v] & free for v in free})
        plan = build_plan(sub, order)
        entries = sum(mb.joint_entries for mb in plan.minibuckets)
        if entries > max_entries:
            size = max(2, int(size * 0.8))
            continue
        if entries < max_entries // 8 and size < len(adjacency):
            size += 2
        tables, messages = run_plan(sub, plan, engine)[1:]
        found = assign(sub, plan, engine, tables, messages)
        c = problem.evaluate(found)
        if c <= cost:
            improved, best, cost = c < cost, found, c
            if improved and on_improve:
                on_improve(c, best)
    return best, cost
