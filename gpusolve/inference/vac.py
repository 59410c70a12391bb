"""Virtual arc consistency (VAC) as a root lower bound, in dense passes over all binary tables at once.

VAC (Cooper, de Givry, Sanchez, Schiex, Zytnicki & Werner, "Soft arc
consistency revisited", AIJ 2010) looks at Bool_theta(P), the classical CSP
that forbids every unary or binary cost of at least theta. If arc consistency
wipes out a variable i0 of Bool_theta(P), a sequence of cost moves raises c0:
each value deleted by a binary function e is owed k units of cost by e (pass
2 counts them, backwards from i0, whose values each owe 1), e gets them by
extensions from the values of its other variable deleted earlier, down to the
values deleted by their own unary costs, which pay; a step of lambda per unit
then raises c0 by lambda (pass 3). theta runs down a scale of the problem's
costs to 1 (as toulbar2 does), where a problem without wipe-out is VAC.

Here arc consistency runs in synchronous rounds: a round deletes, at once,
every value without a support given the values alive after the previous
round, over all binary tables stacked in one (E, dl, dr) array, so a round is
a few array operations on NumPy or CuPy. Pass 2 walks the rounds backwards in
the same way. The cost moves are not made one by one: the net change of each
tuple and unary cost is computed in units of lambda, and lambda is the largest
integer keeping every finite cost non-negative, so the output is exact
(int64; entries at top stay forbidden; a sum reaching top saturates, which is
safe because every cost stays non-negative).
"""
from __future__ import annotations

import time
from typing import Callable

import numpy as np

from gpusolve.engines.sparse import to_module
from gpusolve.model.problem import CostFunction, Problem

# A wipe-out whose costs cannot pay a whole unit (lambda < 1) marks its cheapest cost function or
# variable, which then reads its blocking cost as zero (toulbar2's threshold per function); after this
# many such marks in a row VAC moves on to the next threshold. (toulbar2 stops VAC there: on a generated
# 10 x 10 grid of domain 10, stopping at threshold 5 left the bound at 3,290, moving on reached 3,570.)
BREAKS = 5
SCALE_POINTS = 20  # thresholds taken from the problem's costs before halving to 1 (toulbar2: at most 20)
K_LIMIT = 1 << 40  # a count of units beyond this stops VAC: lambda would round to 0 anyway
# Before a search, VAC runs for at most ROOT_S CPU seconds (its first budget; the core gives a second, longer
# one to a VAC not done when its search goes on), and WALL * ROOT_S on the wall clock (a loaded
# machine does not cut it much shorter; nothing waits on it longer; stopped, it leaves an equivalent problem
# with the bound reached so far), and only where one dense pass over the tables (the AC* projection, timed
# on the host) takes at most ROOT_S / ROOT_PASSES, so that its stop is seen often and some passes fit.
# cap131 (2,500 tables of 2 x 50, 105 raises of c0) took 307 rounds of arc consistency and 0.8 CPU-s on
# NumPy (one projection: 5 ms on a loaded machine); scen07 (817 tables of 44 x 44, 605 raises) 4,554 rounds
# and 16 CPU-s. The core runs the passes compiled (vac_kernels): 0.14 and 1.9 CPU-s (bench/vac.py, dev box).
ROOT_S, ROOT_PASSES, WALL = 0.5, 20, 5
# A pass costs 10-21 ns per table entry (the instances above, CELAR6-SUB0, 10_1): tables holding more than
# ROOT_ENTRIES entries cannot pass the timing even at half the fastest rate, so it is not taken (10_1, 45
# tables of up to 1036 x 1036: two timed passes and the state cost 1.6 s).
ROOT_ENTRIES = 5_000_000


class _State:
    """The problem as dense arrays on the array module: c0, unary U (n, d), binary T (E, dl, dr) over the
    pairs ev (E, 2), each with its smaller domain first (a facility of 2 values and a customer of 50:
    2 x 50 entries, not 50 x 50), and `inc` (n, degree) listing each variable's sides (2e + t: variable
    ev[e, t] of edge e), padded with 2E, a side that is always supported. Rows indexed by side are d
    wide."""

    def __init__(self, problem: Problem, xp):
        top = int(problem.top)
        dom = problem.domains
        n, d = len(dom), max(dom, default=1)
        unary = np.full((n, d), top, dtype=np.int64)
        for v, size in enumerate(dom):
            unary[v, :size] = 0
        const, binary, self.others = 0, {}, []
        for f in problem.functions:
            table = np.minimum(np.asarray(f.table, dtype=np.int64), top)
            if f.arity == 0:
                const = min(const + int(table), top)
            elif f.arity == 1:
                v = f.scope[0]
                unary[v, :dom[v]] = np.minimum(unary[v, :dom[v]] + table, top)
            elif f.arity == 2 and f.scope[0] != f.scope[1]:
                i, j = f.scope
                if (dom[i], i) > (dom[j], j):
                    i, j, table = j, i, table.T
                binary[i, j] = table if (i, j) not in binary else np.minimum(binary[i, j] + table, top)
            else:
                self.others.append(f)
        pairs = sorted(binary)
        self.xp, self.top, self.n, self.d, self.dom = xp, top, n, d, dom
        self.dl = max((dom[i] for i, _ in pairs), default=1)
        self.dr = max((dom[j] for _, j in pairs), default=1)
        self.c0 = const
        self.valid = xp.asarray(np.arange(d)[None, :] < np.array(dom)[:, None])
        self.U = xp.asarray(unary)
        self.ev_host = np.array(pairs, dtype=np.int64).reshape(-1, 2)
        self.ev = xp.asarray(self.ev_host)
        T = np.full((len(pairs), self.dl, self.dr), top, dtype=np.int64)
        for e, (i, j) in enumerate(pairs):
            T[e, :dom[i], :dom[j]] = binary[i, j]
        self.T = xp.asarray(T)
        sides = [[] for _ in range(n)]
        for e, (i, j) in enumerate(pairs):
            sides[i].append(2 * e)
            sides[j].append(2 * e + 1)
        width = max((len(s) for s in sides), default=0)
        inc = np.full((n, max(width, 1)), 2 * len(pairs), dtype=np.int64)
        for v, s in enumerate(sides):
            inc[v, :len(s)] = s
        self.inc = xp.asarray(inc)
        self.other_var = xp.asarray(self.ev_host[:, ::-1].reshape(-1))  # the other variable of side s

    def width(self, t: int) -> int:
        """The values of side t (0: rows of T, 1: columns)."""
        return self.dl if t == 0 else self.dr

    @property
    def E(self) -> int:
        return len(self.ev_host)

    def problem(self, problem: Problem) -> Problem:
        """The reparameterised problem: c0, a unary per variable where not all zero, the binary tables,
        the other functions as they were."""
        U, T = to_module(np, self.U), to_module(np, self.T)
        functions = [CostFunction((), np.array(self.c0, dtype=np.int64))]
        for v, size in enumerate(self.dom):
            if U[v, :size].any():
                functions.append(CostFunction((v,), np.ascontiguousarray(U[v, :size])))
        for (i, j), table in zip(self.ev_host, T):
            functions.append(CostFunction((int(i), int(j)), np.ascontiguousarray(table[:self.dom[i], :self.dom[j]])))
        return problem.like(functions + self.others)


def _times(xp, lam: int, units, top: int):
    """lam * units (units >= 0), saturating at top without overflow."""
    return xp.where(units > top // lam, top, units * lam)


def project_ac(s: _State) -> None:
    """One dense AC* pass: each binary table's row then column minima onto the unary costs, then each
    variable's least unary cost onto c0 (exact: finite entries lose what their unary gains)."""
    xp, top = s.xp, s.top
    if s.E:
        for t in (0, 1):
            low = s.T.min(axis=2 - t)  # (E, width(t)): per value of ev[:, t]
            dead = low >= top
            cut = xp.where(dead, 0, low)
            s.T = xp.where(s.T >= top, top, s.T - (cut[:, :, None] if t == 0 else cut[:, None, :]))
            gain = xp.zeros((2 * s.E + 1, s.d), dtype=np.int64)  # a variable's rows, from all its edges
            gain[t: 2 * s.E: 2, : s.width(t)] = xp.where(dead, top, cut)
            s.U = xp.minimum(s.U + _saturating_sum(xp, gain[s.inc], top), top)
    low = s.U.min(axis=1)
    cut = xp.where(low >= top, 0, low)
    s.U = xp.where(s.U >= top, top, s.U - cut[:, None])
    s.c0 = min(s.c0 + int(cut.sum()) + (top if bool((low >= top).any()) else 0), top)


def _saturating_sum(xp, parts, top: int):
    """Sum over axis 1 of costs in [0, top], saturating at top: pairwise, so no int64 sum overflows."""
    while parts.shape[1] > 1:
        if parts.shape[1] % 2:
            parts = xp.concatenate([parts, xp.zeros_like(parts[:, :1])], axis=1)
        parts = xp.minimum(parts[:, 0::2] + parts[:, 1::2], top)
    return parts[:, 0]


class _Wipeout:
    """What pass 1 recorded: the round each value died in (0: by its own unary cost, -1: alive), the side
    that killed it, the wiped-out variable and the allowed tuples of Bool_theta(P)."""

    def __init__(self, rounds, killer, i0, allowed, last):
        self.rounds, self.killer, self.i0, self.allowed, self.last = rounds, killer, i0, allowed, last


def _supports(s: _State, allowed, alive, sides):
    """For each side in `sides` (an array), whether each value of its variable has a support in the
    other variable's live values, (len(sides), d): a batched product of each allowed matrix (0/1)
    with the other variable's live values."""
    xp = s.xp
    out = xp.zeros((sides.shape[0], s.d), dtype=bool)
    live = alive.astype(allowed.dtype)
    for t in (0, 1):
        at = xp.flatnonzero(sides % 2 == t)
        if at.size == 0:
            continue
        e = sides[at] // 2
        a = allowed if at.size == s.E else allowed[e]
        other = live[s.ev[e, 1 - t], : s.width(1 - t)]
        count = (a @ other[:, :, None])[:, :, 0] if t == 0 else (other[:, None, :] @ a)[:, 0, :]
        out[at, : s.width(t)] = count > 0
    return out


class _Bool:
    """Bool_theta(P): a unary or binary cost is forbidden from theta on, or from the larger threshold its
    variable or edge got at a bottleneck. `allowed` (0/1 in float32 for products, or bool for the compiled
    passes, which also keep it as bits) follows the tables: `refresh` after the tables of `edges` change,
    which marks them dirty. The supports of the first round of arc consistency are kept with the live
    values they were found for (first, first_alive or first_live): the next pass recomputes them only on
    the dirty edges and the sides whose other variable has new live values (a step only lowers unary
    costs)."""

    def __init__(self, s: _State, compiled: bool = False):
        self.s, self.theta, self.dtype = s, 1, bool if compiled else np.float32
        self.var = s.xp.zeros(s.n, dtype=np.int64)
        self.edge = s.xp.zeros(s.E, dtype=np.int64)
        self.allowed = self.first = self.first_alive = None
        self.bits = self.first_live = None
        if compiled:  # every table is dirty before the first pass, which fills them
            words, sides = (s.d + 63) // 64, 2 * s.E + 1
            self.bits = np.zeros((sides, s.d, words), dtype=np.uint64)
            self.first_live = np.zeros((s.n, words), dtype=np.uint64)
            self.first = np.zeros((sides, s.d), dtype=bool)
        self.dirty = s.xp.zeros(s.E, dtype=bool)

    def at(self, theta: int) -> None:
        self.theta = theta
        self.allowed = self._allowed(slice(None))
        self.dirty[:] = True

    def refresh(self, edges) -> None:
        self.allowed[edges] = self._allowed(edges)
        self.dirty[edges] = True

    def _allowed(self, edges):
        limit = self.s.xp.maximum(self.edge[edges], self.theta)
        return (self.s.T[edges] < limit[:, None, None]).astype(self.dtype)

    def alive(self):
        return self.s.valid & (self.s.U < self.s.xp.maximum(self.var, self.theta)[:, None])

    def unblock(self, kind: str, at: int, cost: int) -> None:
        """A bottleneck: the variable's or edge's cost `cost` now reads as zero."""
        if kind == "var":
            self.var[at] = cost + 1
        else:
            self.edge[at] = cost + 1
            self.refresh(self.s.xp.asarray([at]))

    def first_round(self, alive):
        """The supports known for `alive` before the first round, and the sides to recompute."""
        s, xp = self.s, self.s.xp
        if self.first is None:
            return xp.ones((2 * s.E + 1, s.d), dtype=bool), xp.arange(2 * s.E)
        grown = (alive != self.first_alive).any(axis=1)
        stale = xp.repeat(self.dirty, 2) | grown[s.other_var]
        return self.first.copy(), xp.flatnonzero(stale)

    def remember(self, alive, supported) -> None:
        self.first, self.first_alive = supported.copy(), alive
        self.dirty[:] = False


def pass1(s: _State, bool_p: _Bool, stop, kernels=None) -> _Wipeout | None:
    """Arc consistency on Bool_theta(P) in synchronous rounds; the wipe-out found, or None. With
    `kernels` (vac_kernels' compiled on NumPy), stop is only checked between passes."""
    if kernels is not None:
        return _compiled_pass1(s, bool_p, kernels)
    xp = s.xp
    allowed, alive = bool_p.allowed, bool_p.alive()
    rounds = xp.where(s.valid & ~alive, 0, -1)
    killer = xp.full((s.n, s.d), -1, dtype=np.int64)
    supported, sides = bool_p.first_round(alive)
    r = 0
    while True:
        wiped = xp.flatnonzero(~alive.any(axis=1))
        if wiped.size:
            return _Wipeout(rounds, killer, int(wiped[0]), allowed, r)
        if stop is not None and stop():
            return None
        if sides.size == 0 and r > 0:
            return None
        r += 1
        supported[sides] = _supports(s, allowed, alive, sides)
        if r == 1:
            bool_p.remember(alive, supported)
        lacking = ~supported[s.inc]  # (n, degree, d)
        killed = alive & lacking.any(axis=1)
        if not bool(killed.any()):
            return None
        first = xp.argmax(lacking, axis=1)  # the first side without a support
        side = xp.take_along_axis(s.inc, first, axis=1)
        killer = xp.where(killed, side, killer)
        rounds = xp.where(killed, r, rounds)
        alive = alive & ~killed
        changed = killed.any(axis=1)
        sides = xp.flatnonzero(changed[s.other_var])  # sides whose other variable lost values


def pass2(s: _State, w: _Wipeout, kernels=None):
    """The units k each deleted value owes (n, d), and the units each side's values extend into its
    edge (2E + 1, d), walking the rounds backwards from the wiped-out variable."""
    if kernels is not None:
        return _compiled_pass2(s, w, kernels)
    xp = s.xp
    k = xp.zeros((s.n, s.d), dtype=np.int64)
    k[w.i0] = xp.where(s.valid[w.i0], 1, 0)
    extend = xp.zeros((2 * s.E + 1, s.d), dtype=np.int64)
    for r in range(w.last, 0, -1):
        owing = xp.flatnonzero((w.rounds == r) & (k > 0))
        if owing.size == 0:
            continue
        killer, value, owed = w.killer.reshape(-1)[owing], owing % s.d, k.reshape(-1)[owing]
        grown = xp.zeros((2 * s.E + 1, s.d), dtype=np.int64)
        for t in (0, 1):  # the value b of the other variable extends the most any value allowed with b owes
            at = xp.flatnonzero(killer % 2 == t)
            if at.size == 0:
                continue
            sides, row = xp.unique(killer[at], return_inverse=True)
            p = xp.zeros((sides.size, s.width(t)), dtype=np.int64)
            p[row.reshape(-1), value[at]] = owed[at]
            a = w.allowed[sides // 2] > 0
            need = xp.where(a, p[:, :, None], 0).max(axis=1) if t == 0 else \
                xp.where(a, p[:, None, :], 0).max(axis=2)
            other, wide = sides ^ 1, s.width(1 - t)
            grown[other, :wide] = xp.maximum(need - extend[other, :wide], 0)
            extend[other, :wide] = xp.maximum(extend[other, :wide], need)
        k = k + grown[s.inc].sum(axis=1)  # a variable's values, from all its sides (no scatter-add)
        if bool((k > K_LIMIT).any()):
            return None, None
    return k, extend


def _compiled_pass1(s: _State, bool_p: _Bool, kernels) -> _Wipeout | None:
    alive = bool_p.alive()
    rounds = np.where(s.valid & ~alive, 0, -1)
    killer = np.full((s.n, s.d), -1, dtype=np.int64)
    out = np.zeros(2, dtype=np.int64)
    sides = 2 * s.E + 1
    i0 = kernels.ac_rounds(bool_p.allowed, bool_p.dirty, bool_p.bits, np.empty_like(bool_p.first_live),
                           bool_p.first_live, bool_p.first, alive, s.inc, s.ev, rounds, killer,
                           np.empty((sides, s.d), dtype=bool), np.empty(sides, dtype=bool),
                           np.empty(s.n, dtype=bool), out)
    return None if i0 < 0 else _Wipeout(rounds, killer, int(i0), bool_p.allowed, int(out[1]))


def _compiled_pass2(s: _State, w: _Wipeout, kernels):
    k = np.zeros((s.n, s.d), dtype=np.int64)
    extend = np.zeros((2 * s.E + 1, s.d), dtype=np.int64)
    if not kernels.owed_units(w.allowed, s.valid, w.rounds, w.killer, s.ev, w.i0, w.last, k, extend,
                              np.zeros_like(extend), np.zeros(2 * s.E + 1, dtype=np.int64),
                              np.empty(2 * s.E + 1, dtype=np.int64), K_LIMIT):
        return None, None
    return k, extend


def _net_units(s: _State, k, w: _Wipeout, extend):
    """The edges the moves touch, and the units each of their tuples loses (projections onto deleted
    values minus extensions from them), (touched, d, d)."""
    xp = s.xp
    proj = xp.zeros((2 * s.E + 1, s.d), dtype=np.int64)
    owing = (w.rounds > 0) & (k > 0)
    rows = xp.where(owing, w.killer, 2 * s.E)
    proj[rows, xp.arange(s.d)[None, :]] = xp.where(owing, k, 0)
    net = proj[:-1] - extend[:-1]
    edges = xp.flatnonzero(net.reshape(s.E, 2 * s.d).any(axis=1))
    return edges, net[2 * edges, : s.dl, None] + net[2 * edges + 1, None, : s.dr]


def _lambda(s: _State, k, w: _Wipeout, edges, units):
    """The largest integer step keeping every finite cost non-negative, and where it is tightest:
    (lambda, ('edge', e, cost) or ('var', v, cost)); lambda is None when no finite cost bounds it."""
    xp, top = s.xp, s.top
    best, where = None, None
    paying = (w.rounds == 0) & (k > 0) & (s.U < top)
    if bool(paying.any()):
        ratio = xp.where(paying, s.U // xp.maximum(k, 1), top)
        at = int(xp.argmin(ratio))
        best, where = int(ratio.reshape(-1)[at]), ("var", at // s.d, int(s.U.reshape(-1)[at]))
    T = s.T[edges]
    losing = (units > 0) & (T < top)
    if bool(losing.any()):
        ratio = xp.where(losing, T // xp.maximum(units, 1), top)
        at = int(xp.argmin(ratio))
        value = int(ratio.reshape(-1)[at])
        if best is None or value < best:
            best, where = value, ("edge", int(edges[at // (s.dl * s.dr)]), int(T.reshape(-1)[at]))
    return best, where


def _apply(s: _State, lam: int, k, w: _Wipeout, edges, units) -> None:
    """Pass 3: every tuple loses lam * its units (or gains, saturating), the values deleted by their
    unary costs pay lam * k, and c0 gains lam."""
    xp, top = s.xp, s.top
    T = s.T[edges]
    gain = _times(xp, lam, xp.maximum(-units, 0), top)
    s.T[edges] = xp.where(T >= top, top, xp.where(units > 0, T - lam * xp.maximum(units, 0),
                                                  xp.minimum(T + gain, top)))
    paying = (w.rounds == 0) & (k > 0) & (s.U < top)
    s.U = xp.where(paying, s.U - lam * k, s.U)
    s.c0 = min(s.c0 + lam, top)


def step_size(s: _State, k, w: _Wipeout, extend, kernels=None):
    """(lambda, where it is tightest, the step for take_step): `_net_units` then `_lambda`, or compiled."""
    if kernels is None:
        edges, units = _net_units(s, k, w, extend)
        return (*_lambda(s, k, w, edges, units), (edges, units))
    net, edges, out = np.empty((2 * s.E + 1, s.d), dtype=np.int64), np.empty(s.E, dtype=np.int64), np.zeros(5, np.int64)
    count = kernels.step_size(s.T, s.U, w.rounds, w.killer, k, extend, s.top, net, edges, out)
    if not out[0]:
        return None, None, None
    return int(out[1]), ("var" if out[2] == 0 else "edge", int(out[3]), int(out[4])), (net, edges, count)


def take_step(s: _State, bool_p: _Bool, lam: int, k, w: _Wipeout, step, kernels=None) -> None:
    """Pass 3 by lam, and Bool_theta(P) after it."""
    if kernels is None:
        edges, units = step
        _apply(s, lam, k, w, edges, units)
        bool_p.refresh(edges)
    else:
        net, edges, count = step
        kernels.apply_step(s.T, s.U, w.rounds, k, net, edges, count, lam, s.top, bool_p.allowed, bool_p.dirty,
                           bool_p.edge, bool_p.theta)
        s.c0 = min(s.c0 + lam, s.top)


def thresholds(s: _State) -> list[int]:
    """The decreasing thresholds theta: up to SCALE_POINTS costs splitting the finite positive unary and
    binary costs into packets of equal count (toulbar2's scale), then halving the least down to 1."""
    xp, top = s.xp, s.top
    costs = xp.concatenate([s.U.reshape(-1), s.T.reshape(-1)])
    costs = to_module(np, costs[(costs > 0) & (costs < top)])
    if costs.size == 0:
        return [1]
    values, counts = np.unique(costs, return_counts=True)
    packet = 50
    while True:
        cut = np.nonzero(np.diff(np.cumsum(counts) // packet, prepend=0) > 0)[0]
        if len(cut) <= SCALE_POINTS:
            break
        packet *= 2
    scale = sorted({int(values[c]) for c in cut} | {int(values[-1])}, reverse=True)
    out = scale
    while out[-1] > 1:
        out.append(out[-1] // 2)
    return out


def vac(problem: Problem, stop: Callable[[], bool] | None = None, xp=np,
        on_step: Callable[[int, int], None] | None = None, kernels=None) -> Problem:
    """An equivalent problem whose constant function is the VAC lower bound (see the module's doc).

    Binary functions on the same pair are summed; functions of arity 3 or more are kept as they are
    (Bool(P) leaves them out, a relaxation). `stop()` is checked before every round of arc consistency;
    a stopped run returns the equivalent problem reached so far. on_step(theta, c0) follows each
    raise of c0. `kernels` (with vac_kernels' functions, on NumPy) runs the passes compiled.
    """
    if not problem.integer:
        raise ValueError("VAC needs integer costs")
    s = _State(problem, xp)
    project_ac(s)
    bool_p = _Bool(s, compiled=kernels is not None)
    for theta in thresholds(s):
        bool_p.at(theta)
        breaks = 0
        while s.c0 < s.top:
            if stop is not None and stop():
                return s.problem(problem)
            w = pass1(s, bool_p, stop, kernels)
            if w is None:
                break
            k, extend = pass2(s, w, kernels)
            if k is None:
                return s.problem(problem)
            lam, where, step = step_size(s, k, w, extend, kernels)
            if lam is None or lam >= s.top - s.c0:  # only forbidden costs: no assignment is below top
                s.c0 = s.top
                break
            if lam < 1:
                breaks += 1
                if breaks > BREAKS:
                    break
                bool_p.unblock(*where)
                continue
            breaks = 0
            take_step(s, bool_p, lam, k, w, step, kernels)
            if on_step:
                on_step(theta, s.c0)
    return s.problem(problem)


def before_search(problem: Problem, seconds: float = ROOT_S, kernels=None) -> tuple[Problem, bool]:
    """(the problem a search over integer costs starts from, whether VAC ran to its end): VAC's
    reparameterisation within `seconds` of the thread's CPU (WALL times that on the clock) where a pass
    takes at most seconds / ROOT_PASSES and the tables hold at most ROOT_ENTRIES entries, else the
    problem itself. Not done: its stop came, or a gate left it out."""
    if not problem.integer or sum(f.table.size for f in problem.functions if f.arity == 2) > ROOT_ENTRIES:
        return problem, True  # never: a longer budget would not change it
    cpu, wall = time.thread_time(), time.perf_counter()  # the thread's: the search runs beside other phases
    s = _State(problem, np)
    project_ac(s)  # a first pass also warms NumPy up (17 ms where the next one takes 0.5 ms)
    t = time.thread_time()
    project_ac(s)
    if (time.thread_time() - t) * ROOT_PASSES > seconds:
        return problem, False
    stopped = []

    def spent() -> bool:
        if time.thread_time() - cpu > seconds or time.perf_counter() - wall > WALL * seconds:
            stopped.append(True)
        return bool(stopped)
    out = vac(problem, stop=spent, kernels=kernels)
    return out, not stopped
