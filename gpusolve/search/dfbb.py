"""Depth-first branch and bound with soft arc consistency, compiled with numba.

At every node the problem is kept EDAC* (de Givry, Heras, Zytnicki & Larrosa,
IJCAI 2005): binary costs are projected onto unary costs until every value has
a support (AC*, Larrosa & Schiex, AIJ 2004) and, towards later variables, a
full support (DAC*); a variable none of whose values of zero cost is fully
supported by all its neighbours (not EAC) gets full supports from all of them,
which raises its unary costs. Unary costs go onto the constant c0 (node
consistency NC*), and a value is pruned once c0 plus its unary cost reaches
the upper bound. c0 is then a lower bound of every assignment below the node.
An n-ary function (arity 3 or more) keeps AC* as a binary one does, its least
cost given each value projected onto that value, whenever the live part of its
table is small (NARY_TUPLES tuples; always once all but one of its variables
are assigned). A hard AllDifferent kept whole (too large for its binary tables) takes each assigned
variable's value from its other variables (forward checking). Branching is binary
(x = a, then x != a) on dom/wdeg (Boussemart et al., ECAI 2004) with last
conflict (Lecoutre et al., AIJ 2009), values by the incumbent's while alive,
else the EAC value. A domain of more than SPLIT_SIZE values is split at the
middle of its live range instead, the half holding that value first
(toulbar2's default dichotomic branching): removing one value of 44 barely
moves c0, so HBFS's open nodes would keep the root's bound.

Every change of the state is written on a trail (once per index and choice
point) and undone on backtracking; nothing is copied per node. The search
runs in slices of nodes, so that the caller publishes incumbents as they come,
reports the global lower bound and honours a stop between slices.

The default order is Hybrid Best-First Search (Allouche, de Givry, Katsirelos,
Schiex & Zytnicki, CP 2015): depth-first dives, each stopped after Z
backtracks, from the open node of least lower bound; a stopped dive leaves its
unexplored right branches as open nodes (their decisions from the root and
their parent's c0). The global lower bound is the least over open nodes and
the current dive's. Z starts at Z_FIRST, doubles when replaying open nodes costs more than
HBFS_BETA of the nodes and halves below HBFS_ALPHA (toulbar2's rule and
defaults); past OPEN_LIMIT stored decisions, dives run to their end. A node is
replayed by restoring the root's state and taking all its decisions at once.
"""
from __future__ import annotations

import heapq
import threading
import time
from dataclasses import dataclass

import numpy as np

from gpusolve.consistency.alldiff import value_ids
from gpusolve.model.problem import Problem
from gpusolve.inference.vac import ROOT_S, before_search
from gpusolve.stop import Stop

from gpusolve.search.dfbb_build import entry_points
from gpusolve.search.dfbb_state import (
    AC, BASE, COMPLETE, DAC, DEPTH, DTOP, EAC, FOUND, GROW, LAST, LIMIT, N_CTL, NODES, PAUSED, QLEN, SLACK, SPLIT, UB,
    ZLIMIT
)

HBFS_ALPHA, HBFS_BETA = 0.05, 0.10  # the share of replayed nodes that Z keeps between
Z_FIRST = 1 << 12  # the first dive's Z: small problems are proven in it, as depth-first search proves them
Z_MAX = 1 << 14  # Z doubles up to here
OPEN_LIMIT = 1 << 24  # decisions stored in open nodes (12 bytes each, 192 MiB in all, and one Python tuple per node)
NO_LIMIT = 1 << 62
SPLIT_SIZE = 10  # larger domains are split in two at each choice point (toulbar2's default, -d=1)
# VAC (before_search) waits for VAC_AFTER nodes: cap131 is proven in 150 nodes and 0.16 s without it, where
# VAC takes 0.5 s first; a search it pays off for loses a few hundredths of a second. Not done within its
# budget (ROOT_S), it has VAC_LONGER_S more once the search reaches VAC_LONGER_AFTER nodes: on scen07 (VAC
# 10 s on NumPy on the dev box, 1.2-1.9 s compiled) the core alone found 344,199 9.8 s after a whole VAC,
# where after none it held 353,913 at 25 s (toulbar2 with VAC: 344,198 at 19 s). The search starts again
# from VAC's problem where VAC raised the constant (not on CELAR6 or scen06), its incumbent, bound and node
# count kept.
VAC_AFTER, VAC_LONGER_AFTER, VAC_LONGER_S = 1 << 10, 1 << 12, 20.0


@dataclass
class Layout:
    """Where each part of the state vector S lives; S[0] is c0, S[SLACK] the gap between the upper
    bound and c0 at the last pass of NC* over every variable."""

    n: int
    d: int  # the largest domain
    m: int  # binary functions
    k: int  # n-ary functions
    a: int  # the n-ary functions' arities, summed

    @property
    def unary(self) -> int:
        return SLACK + 1

    @property
    def alive(self) -> int:
        return self.unary + self.n * self.d

    @property
    def size(self) -> int:
        return self.alive + self.n * self.d

    @property
    def fixed(self) -> int:
        return self.size + self.n

    @property
    def proj(self) -> int:
        return self.fixed + self.n

    @property
    def left(self) -> int:  # unassigned variables per n-ary function
        return self.proj + 2 * self.m * self.d

    @property
    def nproj(self) -> int:  # what each n-ary function projected onto each value of each of its variables
        return self.left + self.k

    @property
    def eac(self) -> int:  # each variable's EAC value: alive, of unary cost 0, fully supported by its neighbours
        return self.nproj + self.a * self.d

    @property
    def dom(self) -> int:  # each variable's values, the live ones first: not trailed (see remove)
        return self.eac + self.n

    @property
    def pos(self) -> int:  # where each value stands in dom
        return self.dom + self.n * self.d

    @property
    def length(self) -> int:
        return self.pos + self.n * self.d


def supports(problem: Problem) -> str | None:
    """Why this core cannot search `problem`, or None when it can."""
    if not problem.integer:
        return "costs are not integers"
    if any(not g.tabled and g.cost < problem.top for g in problem.globals):
        return "a soft global constraint is kept whole"
    if problem.evidence:
        return "evidence"
    return None


class DepthFirst:
    """The resumable search over one integer problem; `run` advances it by a slice of nodes. HBFS, its first
    dive limited to `z` backtracks, unless `best_first` is False (plain depth-first branch and bound)."""

    def __init__(self, problem: Problem, upper=None, best_first: bool = True, z: int = Z_FIRST,
                 split: int = SPLIT_SIZE, vac_after: int | None = VAC_AFTER):
        why = supports(problem)
        if why:
            raise ValueError(f"depth-first search with soft arc consistency does not apply: {why}")
        self.ub = min(int(upper), int(problem.top)) if upper is not None else int(problem.top)
        self.best = np.full(len(problem.variables), -1, dtype=np.int64)
        self.complete = False
        self.best_first = best_first
        self.z = z  # HBFS's backtrack limit per dive
        self.split = split
        self.pushed = 0
        self.replayed = 0  # decisions taken again to start dives
        self._lower = 0
        # VAC's budgets: (nodes searched before it, its seconds); the first at once where vac_after is None
        self._vac = [(vac_after or 0, ROOT_S), (max(vac_after or 0, VAC_LONGER_AFTER), VAC_LONGER_S)]
        self._start = problem  # what the search runs on: the problem given, or VAC's equivalent
        if vac_after is None:
            self._vac_step()
        self._load(self._start)

    @property
    def vac_after(self) -> int | None:
        """The node count at which VAC runs next, or None when it is done."""
        return self._vac[0][0] if self._vac else None

    def _vac_step(self) -> None:
        """VAC on the problem searched, within its next budget; the later budgets are dropped once it is
        done (it ran to its end, or can never run)."""
        _, seconds = self._vac.pop(0)
        self._start, done = before_search(self._start, seconds, entry_points())
        if done:
            self._vac = []

    def _load(self, problem: Problem, nodes: int = 0) -> None:
        """The search from the root of `problem` (the one given, or its VAC equivalent), `nodes` counted
        already; the incumbent and the lower bound are kept."""
        top = int(problem.top)
        n = len(problem.variables)
        d = max(problem.domains, default=1)
        unary = np.zeros((n, d), dtype=np.int64)
        const = 0
        binary: dict[tuple[int, int], np.ndarray] = {}
        nary = []
        for f in problem.functions:
            table = np.minimum(np.asarray(f.table, dtype=np.int64), top)
            if f.arity == 0:
                const = min(const + int(table), top)
            elif f.arity == 1:
                unary[f.scope[0], : table.shape[0]] = np.minimum(unary[f.scope[0], : table.shape[0]] + table, top)
            elif f.arity == 2:
                i, j = f.scope
                if i > j:
                    i, j, table = j, i, table.T
                key = (i, j)
                binary[key] = table if key not in binary else np.minimum(binary[key] + table, top)
            else:
                nary.append(f)
        for v, size in enumerate(problem.domains):
            unary[v, size:] = top  # padding values never live
        self.lay = Layout(n, d, len(binary), len(nary), sum(f.arity for f in nary))
        self._build(unary, const, binary, nary, top, problem.domains, problem.globals)
        self.ctl[UB] = self.ub
        self.ctl[ZLIMIT] = self.z if self.best_first else NO_LIMIT
        self.ctl[SPLIT] = self.split
        self.ctl[NODES] = nodes
        self.open: list = []  # (lower bound, -depth, sequence number, decisions: 3 x depth)
        self.stored = 0  # decisions in self.open
        self._lower = max(self._lower, min(const, self.ub))

    def _build(self, unary, const, binary, nary, top, domains, alldiffs) -> None:
        lay = self.lay
        n, d, m, k = lay.n, lay.d, lay.m, lay.k
        self.top, self.U0, self.c00 = top, unary, const
        pairs = sorted(binary)
        self.bvar = np.array([v for p in pairs for v in p], dtype=np.int64)
        # int32 where every cost (at most top) fits: half the memory traffic of the tables, read at every node;
        # each table padded to d x d with top, written in place (10_1's 45 tables of up to 1036 x 1036)
        narrow = np.int32 if top <= np.iinfo(np.int32).max else np.int64
        T = np.full((m, d, d), top, dtype=narrow)
        for j, pair in enumerate(pairs):
            T[j, : binary[pair].shape[0], : binary[pair].shape[1]] = binary[pair]
        self.T = T.reshape(-1) if m else np.zeros(1, narrow)
        self.boff = np.arange(m, dtype=np.int64) * d * d
        self.bdj = np.full(m, d, dtype=np.int64)
        incident = [[] for _ in range(n)]
        for j, (a, b) in enumerate(pairs):
            incident[a].append((j, 0))
            incident[b].append((j, 1))
        self.adj_ptr = np.cumsum([0] + [len(x) for x in incident], dtype=np.int64)
        self.adj_k = np.array([j for x in incident for j, _ in x], dtype=np.int64)
        self.adj_side = np.array([s for x in incident for _, s in x], dtype=np.int64)
        self.nptr = np.cumsum([0] + [f.arity for f in nary], dtype=np.int64)
        self.nscope = np.array([v for f in nary for v in f.scope], dtype=np.int64)
        self.nstride = np.array([s // 8 for f in nary for s in np.zeros(f.table.shape, np.int64).strides],
                                dtype=np.int64)
        sizes = [f.table.size for f in nary]
        self.noff = np.cumsum([0] + sizes[:-1], dtype=np.int64) if nary else np.zeros(0, dtype=np.int64)
        self.NT = (np.concatenate([np.minimum(np.asarray(f.table, np.int64), top).ravel() for f in nary])
                   if nary else np.zeros(1, dtype=np.int64))
        touching = [[] for _ in range(n)]
        for j, f in enumerate(nary):
            for v in f.scope:
                touching[v].append(j)
        self.nadj_ptr = np.cumsum([0] + [len(x) for x in touching], dtype=np.int64)
        self.nadj_k = np.array([j for x in touching for j in x], dtype=np.int64)
        self._alldifferents(alldiffs, n, d)
        S = np.zeros(lay.length, dtype=np.int64)
        S[0] = const
        S[SLACK] = top + 1  # no pass yet
        S[lay.unary: lay.alive] = unary.ravel()
        alive = np.zeros((n, d), dtype=np.int64)
        for v, size in enumerate(domains):
            alive[v, :size] = 1
        S[lay.alive: lay.size] = alive.ravel()
        S[lay.size: lay.fixed] = domains
        S[lay.left: lay.nproj] = [f.arity for f in nary]
        S[lay.dom: lay.pos] = S[lay.pos: lay.length] = np.tile(np.arange(d), n)
        self.S = S
        S[lay.eac: lay.dom] = -1
        # lay as the kernels read it: unary, d, alive, size, proj, fixed, n, m, left, k, dom, pos, nproj, eac
        self.lay_arr = np.array([lay.unary, d, lay.alive, lay.size, lay.proj, lay.fixed, n, m, lay.left, k, lay.dom,
                                 lay.pos, lay.nproj, lay.eac], dtype=np.int64)
        # hints, never trailed: simple-support residues, full-support residues
        self.hints = np.full(4 * m * d, -1, dtype=np.int64)
        self.weight = np.zeros(m + k, dtype=np.int64)
        self.trail = np.zeros((4 * lay.length + 1024, 2), dtype=np.int64)
        self.stamp = np.full(lay.length, -1, dtype=np.int64)
        self.ctl = np.zeros(N_CTL, dtype=np.int64)
        self.ctl[LAST] = -1
        self.qs = np.zeros((4, 2 * n), dtype=np.int64)
        for row in (AC, DAC, EAC):  # the root propagates everything
            self.qs[row] = np.concatenate([np.arange(n), np.ones(n)])
            self.ctl[QLEN + row] = n
        self.ctl[DTOP] = n - 1
        depth = int(sum(domains)) + 1
        self.dvar, self.dval, self.dbranch, self.dmark, self.dlb = (np.zeros(depth, dtype=np.int64)
                                                                    for _ in range(5))
        self.scratch = np.zeros(n, dtype=np.int64)  # a leaf's assignment; an n-ary function's live tuple
        # full_support's costs and values; least_nary's least costs per position and value
        self.tmp = np.zeros(max([2] + [f.arity for f in nary]) * d, dtype=np.int64)

    def _alldifferents(self, alldiffs, n: int, d: int) -> None:
        """The hard AllDifferents kept whole (a tabled one is among the binary tables), as forward_check reads
        them: each one's scope positions (gptr, gscope, gowner), the column of each domain index at each
        position in its variable-value graph (gid, d per position: equal values share one, an exempt value
        has its own, so it binds nothing), each variable's positions (gadj_ptr, gadj_p)."""
        kept = [g for g in alldiffs if not g.tabled]
        self.gptr = np.cumsum([0] + [len(g.scope) for g in kept], dtype=np.int64)
        self.gscope = np.array([v for g in kept for v in g.scope], dtype=np.int64)
        self.gowner = np.array([i for i, g in enumerate(kept) for _ in g.scope], dtype=np.int64)
        self.gid = np.full(len(self.gscope) * d, -1, dtype=np.int64)  # -1: beyond a domain, never live
        for i, g in enumerate(kept):
            for k, columns in enumerate(value_ids(g)[0]):
                p = int(self.gptr[i]) + k
                self.gid[p * d: p * d + len(columns)] = columns
        at = [[] for _ in range(n)]
        for p, v in enumerate(self.gscope.tolist()):
            at[v].append(p)
        self.gadj_ptr = np.cumsum([0] + [len(x) for x in at], dtype=np.int64)
        self.gadj_p = np.array([p for x in at for p in x], dtype=np.int64)

    @property
    def nodes(self) -> int:
        return int(self.ctl[NODES])

    @property
    def lower_bound(self) -> int:
        """A lower bound of the optimum, never falling: the least over the open nodes and the current
        dive's (its open right branches, its current path), or the incumbent's cost when less."""
        return self._lower

    def _bound(self) -> int:
        if self.complete:
            return self.ub
        depth, base = int(self.ctl[DEPTH]), int(self.ctl[BASE])
        if depth == 0:
            bound = int(self.S[0])
        else:
            left = np.flatnonzero(self.dbranch[base:depth] % 2 == 0)  # first branches: their second is open
            bound = int(self.dlb[base + left[0] if left.size else depth - 1])
        if self.open:
            bound = min(bound, self.open[0][0])
        return min(bound, self.ub)

    def run(self, node_limit: int = 1 << 14) -> int:
        """Advance by at most `node_limit` nodes; PAUSED, FOUND (a better incumbent in `best`, cost
        `ub`) or COMPLETE (the incumbent, if any, is optimal)."""
        run32, run64, replay = entry_points()[:3]  # loaded with the first search, not at import
        stop_at = self.nodes + node_limit
        while True:
            limit = stop_at if self.vac_after is None else min(stop_at, max(self.vac_after, self.nodes))
            run = run32 if self.T.dtype == np.int32 else run64
            status = run(self.S, self.lay_arr, self.U0, self.c00, self.T, self.boff, self.bdj, self.bvar,
                         self.adj_ptr, self.adj_k, self.adj_side, self.nptr, self.nscope, self.nstride, self.noff,
                         self.NT, self.nadj_ptr, self.nadj_k, self.gptr, self.gscope, self.gowner, self.gid,
                         self.gadj_ptr, self.gadj_p, self.top, self.hints, self.weight, self.trail,
                         self.stamp, self.ctl, self.qs, self.dvar, self.dval, self.dbranch, self.dmark, self.dlb,
                         self.best, self.scratch, self.tmp, max(limit - self.nodes, 0))
            if status == PAUSED and self.vac_after is not None and self.nodes >= self.vac_after:
                before = self._start
                self._vac_step()
                if self._start.constant > before.constant:  # the search starts again from VAC's root; else goes on
                    self._lower = max(self._lower, self._bound())
                    self._load(self._start, self.nodes)
                continue
            if status == GROW:
                self.trail = np.concatenate([self.trail, np.zeros_like(self.trail)])
                continue
            if status == LIMIT:
                self._suspend()
            if status in (LIMIT, COMPLETE):
                if self._next_dive(replay):
                    continue
                self.complete = True
            if status == FOUND:
                self.ub = int(self.ctl[UB])
            self._lower = max(self._lower, self._bound())
            return COMPLETE if self.complete else status

    def _suspend(self) -> None:
        """The dive stopped: its unexplored right branches become open nodes, at their parent's c0."""
        depth, base = int(self.ctl[DEPTH]), int(self.ctl[BASE])
        for i in range(base, depth):
            if self.dbranch[i] % 2 == 0 and self.dlb[i] < self.ub:
                path = np.stack([self.dvar[: i + 1], self.dval[: i + 1], self.dbranch[: i + 1]]).astype(np.int32)
                path[2, i] += 1
                heapq.heappush(self.open, (int(self.dlb[i]), -(i + 1), self.pushed, path))
                self.pushed += 1
                self.stored += i + 1

    def tighten(self, upper) -> None:
        """Take an incumbent's cost found elsewhere as the upper bound, between slices: from the next node
        on, the search prunes as its own incumbent of that cost would make it (`best` stays its own)."""
        if upper < self.ub:
            self.ub = int(upper)
            self.ctl[UB] = self.ub

    def adopt(self, assignment, cost) -> None:
        """Take a better incumbent made from this search's own (its polish, Beside): the bound, and the
        values the next dives try first."""
        if cost < self.ub:
            self.tighten(cost)
            self.best[:] = assignment

    def _next_dive(self, replay) -> bool:
        """Start a dive from the open node of least lower bound (the deepest among ties); False when none
        is left below the incumbent."""
        while self.open:
            lower, _, _, path = heapq.heappop(self.open)
            depth = path.shape[1]
            self.stored -= depth
            if lower >= self.ub:
                self.open, self.stored = [], 0  # the heap's least: every open node is refuted
                break
            self.dvar[:depth], self.dval[:depth], self.dbranch[:depth] = path
            self.dlb[:depth] = lower
            replay(self.S, self.lay_arr, self.trail, self.stamp, self.ctl, self.qs, self.dvar, self.dval,
                   self.dbranch, depth)
            self.replayed += depth
            if self.replayed > HBFS_BETA * self.nodes and self.z <= Z_MAX:
                self.z *= 2
            elif self.replayed < HBFS_ALPHA * self.nodes and self.z >= 2:
                self.z //= 2
            self.ctl[ZLIMIT] = NO_LIMIT if self.stored > OPEN_LIMIT else self.z
            return True
        return False


def ball_search(problem: Problem, upper: int) -> DepthFirst:
    """The search of one ball of vns: below `upper`, without VAC (its balls are searched for a few
    thousand nodes at most)."""
    return DepthFirst(problem, upper, vac_after=NO_LIMIT)


POLL_S = 0.05  # how often run_here looks at its stop while the core's thread works
# Once the core has searched POLISH_AFTER_S of its time without an incumbent POLISH_GAIN below the last one
# so marked (VAC done), nor a polish, its thread polishes the incumbent by variable neighbourhood search (vns:
# balls of variables around it searched by this core, `ball_search`) until POLISH_STALL_S pass without a
# better one, each time with another seed. Its time after its last better incumbent (the stall that ends
# it, or all of it when it found none) is kept within POLISH_SHARE of the core's search time (at least
# POLISH_MIN_S left to start): a proof the core makes is delayed by at most that share, and by the time
# that gave it better incumbents (which prune its search). The better incumbents found are the search's,
# their values tried first. On scen07 the core held 363,908-364,013 for the last 27-38 s of some 60 s runs
# (3 of 17 with LNS by BE as the polish, local.lns, which from 364,013 found nothing in 10 s with each of
# 4 seeds); vns takes such incumbents below 354,198 in under 5 s (vns.py). Charged its whole time, one run
# of 8 on the H100 host had a first polish of 7.9 s (6 better incumbents) leave too little share for a
# second one before the 60 s limit: 363,702 held from 35.7 s. Any better incumbent putting the polish off,
# one run of 3 on the 2-core dev box went from 445,821 at 12.4 s to 354,198 or less at 39.4 s only, by steps
# of a few to a few thousand, where the polish takes such incumbents there within seconds.
POLISH_AFTER_S, POLISH_STALL_S, POLISH_SHARE, POLISH_MIN_S, POLISH_GAIN = 5.0, 5.0, 0.2, 2.0, 0.01


class Beside:
    """The core searching in a thread of its own (numba releases the GIL) while the caller's thread runs
    other phases; `publish`, called from the caller's side, hands its incumbents and bound to the
    schedule's Bounds, so that only one thread at a time touches them, and hands the caller's incumbent
    to the core. Paused between phases and resumed by the next (the schedule runs it beside each phase
    after its first box), it is one search, and one load of the compiled core, for the whole run."""

    LABEL = "HBFS (EDAC*)"

    def __init__(self, problem: Problem, bounds, slice_nodes: int = 1 << 12, best_first: bool = True):
        self.search = DepthFirst(problem, bounds.upper, best_first)
        if not best_first:
            self.LABEL = "DFBB (EDAC*)"
        self.slice_nodes = slice_nodes
        self._lock = threading.Lock()
        self._found: list[np.ndarray] = []
        self._lower = self.search.lower_bound
        self._upper = self.search.ub  # the caller's incumbent's cost, which the core takes between slices
        self._handed = None  # the caller's incumbent, which the polish starts from where it is the better
        self._quit = False
        self._go = threading.Event()  # cleared, the core waits after its slice
        self.loaded = threading.Event()  # set once the first slice (the core's load or compile) has ended
        self.compile_s = 0.0
        self._busy_s, self._slice_began = 0.0, None
        self.problem = problem
        self._better_at = 0.0  # the core's time at its last marked incumbent, or last polish
        self._marked = self.search.ub  # the cost of that incumbent
        self.polish = {"runs": 0, "time_s": 0.0, "idle_s": 0.0, "better": 0}  # idle: after its last better
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> "Beside":
        """Start the core's thread, or resume it."""
        if self._thread.ident is None:
            self._thread.start()
        self._go.set()
        return self

    def pause(self, bounds) -> None:
        """The core waits after its slice until `start` resumes it; what it holds is published, without
        waiting for that slice."""
        self._go.clear()
        self.publish(bounds)

    def _loop(self) -> None:
        while self._go.wait() and not self._quit and self._step() != COMPLETE:
            allowed = POLISH_SHARE * self.time_s - self.polish["idle_s"]
            if self.time_s - self._better_at > POLISH_AFTER_S and allowed >= POLISH_MIN_S \
                    and (self.search.best[0] >= 0 or self._handed is not None):
                self._polish(allowed)
                self._better_at, self._marked = self.time_s, self.search.ub

    def _polish(self, seconds: float) -> None:
        """VNS from the incumbent (the core's own or the caller's, whichever is better), in this thread, until it
        stalls or `seconds` pass, or the core is paused or finished."""
        from gpusolve.search.vns import vns
        began = time.perf_counter()
        last = [began]

        def stop() -> bool:
            now = time.perf_counter()
            return self._quit or not self._go.is_set() or now - last[0] > POLISH_STALL_S or now - began > seconds

        def better(cost, assignment) -> None:
            last[0] = time.perf_counter()
            if cost < self.search.ub:  # the bound may have been tightened since VNS started
                assignment = np.asarray(assignment, dtype=np.int64)
                with self._lock:
                    self._found.append(assignment)
                self.search.adopt(assignment, cost)
                self.polish["better"] += 1
        with self._lock:
            handed, upper = self._handed, self._upper  # upper: handed's cost (publish takes both from Bounds)
        start = [int(v) for v in self.search.best]  # all -1 before the core's first incumbent
        if handed is not None and (start[0] < 0 or upper < self.problem.evaluate(start)):
            start = list(handed)
        vns(self.problem, start, ball_search, np.random.default_rng(self.polish["runs"]), stop, better)
        self.polish["runs"] += 1
        self.polish["time_s"] += time.perf_counter() - began
        self.polish["idle_s"] += time.perf_counter() - last[0]

    @property
    def time_s(self) -> float:
        """The core's time so far, pauses left out: a stop may leave its last slice running."""
        began = self._slice_began
        return self._busy_s + (0.0 if began is None else time.perf_counter() - began)

    def _step(self) -> int:
        """One slice; the first one also compiles (or loads) the core and propagates the root."""
        with self._lock:
            upper = self._upper
        self.search.tighten(upper)
        self._slice_began = t0 = time.perf_counter()
        status = self.search.run(self.slice_nodes if self.loaded.is_set() else 0)
        took = time.perf_counter() - t0
        self._busy_s, self._slice_began = self._busy_s + took, None
        if not self.loaded.is_set():
            self.compile_s = took
            self.loaded.set()
        with self._lock:
            if status == FOUND:
                self._found.append(self.search.best.copy())
            if status == FOUND and self.search.ub <= (1 - POLISH_GAIN) * self._marked:
                self._better_at, self._marked = self.time_s, self.search.ub
            if self.search.vac_after is not None:
                self._better_at = self.time_s
            self._lower = self.search.lower_bound
        return status

    @property
    def complete(self) -> bool:
        return self.search.complete

    def publish(self, bounds) -> bool:
        """Offer what the core found since the last call, and hand it the incumbent held; True once it has
        proven the optimum."""
        with self._lock:
            found, self._found, lower = self._found, [], self._lower
        for assignment in found:
            bounds.offer(assignment, self.LABEL)
        with self._lock:
            self._upper, self._handed = bounds.upper, bounds.assignment
        if self.search.complete:
            bounds.raise_lower(self.search.ub, self.LABEL)
            if bounds.closed:
                bounds.prove(self.LABEL)
            return True
        bounds.raise_lower(lower, self.LABEL)
        return False

    def finish(self, bounds) -> None:
        """Ask the core to stop for good after its slice and publish what it holds (unless `bounds` is None),
        without waiting for that slice: the first one compiles the core (tens of seconds with a cold numba
        cache), which must hold back neither a Ctrl-C nor a proof made beside it."""
        self._quit = True
        self._go.set()
        if bounds is not None:
            self.publish(bounds)

    def watching(self, bounds, stop: Stop) -> Stop:
        """A stop for the search run beside the core: `stop`, or the core has proven the optimum; each
        poll publishes what the core found."""
        return _Publishing(self, bounds, stop)

    def run_here(self, bounds, stop: Stop, until: threading.Event | None = None) -> None:
        """The core alone until it completes, `stop` says so or `until` is set; it goes on after that
        (`pause` stops it). Its slices run in its own thread while this one polls `stop`: the first slice
        compiles the core (tens of seconds with a cold numba cache), and a Ctrl-C must not wait for that."""
        watched = self.watching(bounds, stop)
        self.start()
        while self._thread.is_alive() and not watched() and not (until is not None and until.is_set()):
            if until is None:
                self._thread.join(POLL_S)
            else:
                until.wait(POLL_S)

    def stats(self) -> dict:
        nodes = self.search.nodes
        took = max(self.time_s - self.compile_s, 0.0)
        return {"order": self.LABEL.split()[0], "nodes": nodes, "nodes_per_s": nodes / took if took else 0.0,
                "complete": self.search.complete, "open_nodes": len(self.search.open), "time_s": self.time_s,
                "compile_s": self.compile_s, "core": entry_points().how if self.loaded.is_set() else None,
                "polish": dict(self.polish)}


class _Publishing(Stop):
    """Beside.watching's stop."""

    def __init__(self, beside: Beside, bounds, parent: Stop):
        super().__init__(parent.deadline, parent)  # its deadline, for the time a phase has left
        self.beside, self.bounds = beside, bounds

    def __call__(self) -> bool:
        return self.beside.publish(self.bounds) or super().__call__()
