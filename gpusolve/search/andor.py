"""AND/OR branch and bound guided by mini-bucket heuristics (Marinescu & Dechter, AIJ 2009).

The search space is the pseudo tree of the elimination order: a variable's
parent is the earliest-eliminated variable of its exact-BE separator, so the
subtrees below a variable are independent once its ancestors are assigned,
and the value of a subtree depends only on its *context* (that separator).
Subproblems with the same context are solved once and cached (AOBB-C).

The heuristic comes from one MBE(z) run on the same order (any engine; the
messages are read on the host). A message made in the bucket of Y and placed
in the bucket of P crosses every pseudo-tree edge on the path from Y up to P:
it belongs to the heuristic h(C) of every C on that path. At an OR node X
all of X's bucket functions and the heuristics of X's children are looked
up for every value of X at once: one gather from a pool holding every table
flat, so a node costs a few array operations whatever its number of tables.

A subproblem is solved against a *budget*: it returns its exact value when
that is below the budget, otherwise a lower bound >= the budget. The root's
budget is the incumbent's cost, so finishing the search either improves the
incumbent or proves it optimal. A `Subproblem` (a variable, its context's
values and a budget) is the unit of work a distributed search would hand out.

The search is anytime (after Otten & Dechter, AI Comm. 2012): each time a
subproblem is solved under the current path, the path, the subproblems solved
beside it and a first solution of each subproblem still open make a complete
assignment, offered as an incumbent; the incumbent's cost then bounds every
budget on the path. As in their breadth-rotating AOBB, the open subproblems
get a turn of depth-first search each (a dive: values cheapest first by bucket
functions and heuristic, backtracking where hard tuples cut) instead of
waiting until the subproblems to their left are exhausted. A dive under the
path is dropped when its turn runs out; what it keeps is its solutions (reused
by later dives) and the dead ends it proved (in the context cache, which the
search reads too). While no incumbent is known, a dive for a first solution
of the whole problem is suspended and resumed turn after turn, alternating
with the search. A stop reports the least lower bound over the open nodes: a
bound for the whole problem.
"""
from __future__ import annotations

import gc
import math
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np

from gpusolve.model.problem import Problem
from gpusolve.order.pseudo_tree import pseudo_tree
from gpusolve.plan.buckets import Plan
from gpusolve.stop import Stop, Stopped

# Values the context cache may hold in all (subtree assignments and bounds): about 1 GiB.
CACHE_VALUES = 100_000_000
# Depth of Python recursion the search needs per pseudo-tree level: frames of _or_node and _branch,
# and of a dive started from the deepest of them.
_FRAMES_PER_LEVEL = 3
# A completion costs its dives' nodes and one node per function its evaluation reads: the next one
# waits for this many times as many nodes (once, while no incumbent is known), so completions take
# a small share of the search (half of it, while a first feasible point is worth as much as search).
COMPLETION_SPACING = 4
# Nodes a dive may expand in one turn.
TURN_NODES = 1024


def _number(x):
    """A Python number: NumPy scalars on the path would make every budget's arithmetic slower."""
    return x.item() if isinstance(x, np.generic) else x


@dataclass
class Heuristic:
    """Mini-bucket messages of one MBE run on the host, with the plan that made them."""

    plan: Plan
    messages: dict[int, np.ndarray]  # mini-bucket index -> dense message (scope: plan's mb.scope)

    @classmethod
    def from_run(cls, plan: Plan, engine, messages: dict) -> "Heuristic":
        if plan.sparse:
            raise ValueError("the search heuristic needs a plan of dense tables")
        return cls(plan, {i: np.asarray(engine.get(m)) for i, m in messages.items()})


@dataclass
class SearchStats:
    nodes: int = 0  # OR nodes expanded
    cache_hits: int = 0
    cached: int = 0  # values held by the context cache
    time_s: float = 0.0
    complete: bool = False  # the whole space was searched: the result is proven

    def to_json(self) -> dict:
        return {"nodes": self.nodes, "cache_hits": self.cache_hits, "cached_values": self.cached,
                "time_s": self.time_s, "nodes_per_s": self.nodes / self.time_s if self.time_s else 0.0,
                "complete": self.complete}


class Propagator(Protocol):
    """A constraint that filters values or adds costs during search (AllDifferent, globals.py).

    Its scope joins the pseudo tree like a cost function's, so the variables it couples lie on one
    path; at an OR node of one of them, every variable above it is assigned.
    """

    scope: tuple[int, ...]

    def lower(self, var: int, above: tuple[int, ...], value: np.ndarray) -> np.ndarray:
        """Over var's domain, given value[u] for the scope variables `above` var: the cost var's
        value adds (top: forbidden). Summed over the scope along a path, the constraint's cost."""


@dataclass(frozen=True)
class Subproblem:
    """A unit of work: the subtree below `var`, its context's values fixed, solved below `budget`.

    Plain data, so the same search can hand subproblems to other processes or hosts.
    """

    var: int
    context: tuple[tuple[int, int], ...]  # (variable, value) for every variable of var's context
    budget: object


@dataclass
class _Lookup:
    """Everything an OR node of one variable gathers, as flat index arithmetic into the pool."""

    anc: np.ndarray  # ancestor variables read
    strides: np.ndarray  # (len(anc), rows): stride of each ancestor in each row's table
    offset: np.ndarray  # (rows,) start of each row's table in the pool
    xstride: np.ndarray  # (rows,) stride of the variable itself (0: not in the table)
    starts: np.ndarray  # first row of each group: group 0 the bucket's functions, then one per child
    groups: list[int]  # which of (w, child 0, child 1, ...) each start is
    zeros: np.ndarray  # (1 + children, d) zeros: the costs of an empty group

    def __post_init__(self):
        # (rows, d): where each row's table starts plus the offset of each of v's values
        self.xoff = self.offset[:, None] + self.xstride[:, None] * np.arange(self.zeros.shape[1])
        self.empty = not len(self.offset)
        self.complete = len(self.groups) == self.zeros.shape[0]


class AndOrSearch:
    """Depth-first AND/OR branch and bound with context caching over a pseudo tree."""

    def __init__(self, problem: Problem, order: list[int], heuristic: Heuristic,
                 stop: Stop | None = None, cache_values: int = CACHE_VALUES,
                 propagators=(), on_incumbent: Callable[[list[int]], object] | None = None):
        """`on_incumbent(assignment)` is offered complete assignments as the search goes and returns the
        incumbent's cost then (or None): the search prunes against it, as against `tighten`."""
        self.problem = problem
        self.on_incumbent = on_incumbent
        self.upper = math.inf  # the incumbent's cost (internal): no budget on the path exceeds it
        self.path: list[list] = []  # the AND nodes open on the current path, see _offer_completion
        self.complete_at = 0  # the node count from which the next completion is offered
        self.turn = 0  # nodes left to the dive of this turn
        self.first = None  # the dive for a first solution of the whole problem, suspended between turns
        self.propagators = tuple(propagators)
        self.tree = pseudo_tree(len(problem.variables), [f.scope for f in problem.functions]
                                + [p.scope for p in self.propagators], order)
        self.watch = [[(p, self.tree.above(v, p.scope)) for p in self.propagators if v in p.scope]
                      for v in range(len(problem.variables))]
        self.dom = problem.domains
        self.stop = stop or Stop()
        self.stats = SearchStats()
        self.integer = problem.integer
        self.top = problem.top
        self._build(heuristic)
        self.cache: list[dict | None] = [self._cache_for(v) for v in range(len(self.dom))]
        self.found = [None if c is None else {} for c in self.cache]  # the dives' solutions, by context
        self.cache_values = cache_values
        self.ctx = [np.array(c, dtype=np.int64) for c in self.tree.context]
        self.subtree = self._subtrees()

    # --- compilation of the heuristic into flat lookups ---------------------------------------
    def _build(self, heuristic: Heuristic) -> None:
        p, plan, tree = self.problem, heuristic.plan, self.tree
        tables: list[tuple[np.ndarray, tuple[int, ...]]] = []
        rows: list[list[list[int]]] = [[[] for _ in range(1 + len(tree.children[v]))] for v in range(len(self.dom))]
        child_slot = {c: (v, 1 + k) for v, cs in enumerate(tree.children) for k, c in enumerate(cs)}
        self.constant = 0.0 if not self.integer else 0
        for i, f in enumerate(p.functions):
            if not f.scope:
                self.constant = self.problem.add(self.constant, f.table[()])
                continue
            first = min(f.scope, key=plan.position.__getitem__)  # the bucket holding f
            tables.append((f.table, f.scope))
            rows[first][0].append(len(tables) - 1)
        self.root_h = {r: (0 if self.integer else 0.0) for r in tree.roots}
        for mb in plan.minibuckets:
            msg = heuristic.messages[mb.index]
            place = mb.scope[-1] if mb.scope else -1
            if place < 0:  # a constant: part of the heuristic of the root above mb.var
                root = list(tree.path_up(mb.var, -1))[-1]
                self.root_h[root] = self.problem.add(self.root_h[root], msg[()])
                continue
            tables.append((msg, mb.scope))
            t = len(tables) - 1
            for c in tree.path_up(mb.var, place):
                v, slot = child_slot[c]
                rows[v][slot].append(t)
        dtype = p.dtype
        # Entries at or above the cap never beat an incumbent: clipping them keeps sums in int64.
        self.pool = np.concatenate([np.asarray(t, dtype=dtype).reshape(-1) for t, _ in tables]) \
            if tables else np.zeros(0, dtype=dtype)
        offsets = np.cumsum([0] + [t.size for t, _ in tables])
        self.lookups = [self._lookup(v, rows[v], tables, offsets) for v in range(len(self.dom))]
        most = max((len(lk.offset) for lk in self.lookups), default=0) + 2
        self.saturating = self.integer and int(self.top) * most >= (1 << 62)

    def _lookup(self, v: int, groups: list[list[int]], tables, offsets) -> _Lookup:
        order = [(g, t) for g, ts in enumerate(groups) for t in ts]
        anc = sorted({u for _, t in order for u in tables[t][1] if u != v})
        pos = {u: i for i, u in enumerate(anc)}
        strides = np.zeros((len(anc), len(order)), dtype=np.int64)
        xstride = np.zeros(len(order), dtype=np.int64)
        for r, (_, t) in enumerate(order):
            scope = tables[t][1]
            dims = [self.dom[u] for u in scope]
            s = 1
            for u, d in zip(reversed(scope), reversed(dims)):
                if u == v:
                    xstride[r] = s
                else:
                    strides[pos[u], r] = s
                s *= d
        offset = np.array([offsets[t] for _, t in order], dtype=np.int64)
        present = [g for g in range(len(groups)) if groups[g]]
        starts = np.array([sum(len(groups[h]) for h in range(g)) for g in present], dtype=np.int64)
        return _Lookup(np.array(anc, dtype=np.int64), strides, offset, xstride, starts, present,
                       np.zeros((len(groups), self.dom[v]), dtype=self.pool.dtype))

    def _subtrees(self) -> list[list[int]]:
        """Variables of each subtree in the order an OR node lists their values: v, then each child's."""
        sub: list[list[int]] = [[] for _ in self.dom]
        for v in self.tree.post_order():
            sub[v] = [v] + [u for c in self.tree.children[v] for u in sub[c]]
        return sub

    def _cache_for(self, v: int) -> dict | None:
        """Cache a variable whose context is smaller than its ancestor path (else no key repeats)."""
        ctx = self.tree.context[v]
        ancestors = len(list(self.tree.path_up(self.tree.parent[v], -1))) if self.tree.parent[v] >= 0 else 0
        if len(ctx) >= ancestors or math.prod(self.dom[u] for u in ctx) >= 1 << 62:
            return None
        return {}

    def root_costs(self, r: int) -> np.ndarray:
        """(1 + children, d) at root r: its bucket functions, then each child's heuristic, for every
        value of r. A distributed search splits on these (distributed/search.py)."""
        return self._evaluate(r, np.zeros(len(self.dom), dtype=np.int64))

    # --- evaluation of one OR node ------------------------------------------------------------
    def _evaluate(self, v: int, value: np.ndarray) -> np.ndarray:
        """(1 + children, d) costs: row 0 the bucket functions of v, row 1+k child k's heuristic.

        Sums are not clipped at top: they stay below 2^62 (else `saturating`) and are only
        compared with budgets <= top.
        """
        lk = self.lookups[v]
        if lk.empty:
            return lk.zeros
        vals = self.pool[(value[lk.anc] @ lk.strides)[:, None] + lk.xoff] if len(lk.anc) else self.pool[lk.xoff]
        if self.saturating:
            out = lk.zeros.copy()
            bounds = list(lk.starts) + [len(vals)]
            for g, lo, hi in zip(lk.groups, bounds[:-1], bounds[1:]):
                out[g] = self._sum_rows(vals[lo:hi])
            return out
        grouped = np.add.reduceat(vals, lk.starts, axis=0)
        if lk.complete:
            return grouped
        out = lk.zeros.copy()
        out[lk.groups] = grouped
        return out

    # --- the search ---------------------------------------------------------------------------
    def _costs(self, v: int, value: np.ndarray) -> np.ndarray:
        """_evaluate with the propagators' costs added to v's own row."""
        costs = self._evaluate(v, value)
        for prop, above in self.watch[v]:
            costs = costs.copy() if costs is self.lookups[v].zeros else costs
            costs[0] = np.minimum(costs[0] + prop.lower(v, above, value), self.top)
        return costs

    def _or_node(self, v: int, budget, value: np.ndarray, outside=0):
        """(value of the subtree below v given its ancestors, its values in `subtree[v]` order)
        when below `budget`; else (a lower bound >= the budget reached, None). `outside`: what the
        rest of the path costs at least, so that `upper - outside` bounds the budget as the incumbent
        improves. Budgets and costs are Python numbers here: scalar arithmetic on NumPy values would
        cost more than the gathers."""
        cache = self.cache[v]
        if cache is not None:
            key = value[self.ctx[v]].tobytes()
            hit = cache.get(key)
            if hit is not None and (hit[1] is not None or hit[0] >= budget):
                self.stats.cache_hits += 1
                cost, sub = hit
                return (cost, sub) if sub is not None and cost < budget else (max(cost, budget), None)
        self.stats.nodes += 1
        if self.stats.nodes & 255 == 0:
            self.stop.check()
        costs = self._costs(v, value)
        kids = self.tree.children[v]
        if not kids:  # a leaf: its cheapest value
            x = int(costs[0].argmin())
            cost = costs[0, x].item()
            result = ((cost, (x,)) if cost < budget else (max(cost, budget), None))
        else:
            result = self._branch(v, kids, costs, budget, value, outside)
        if cache is not None:
            self._remember(v, key, result)
        return result

    def _remember(self, v: int, key: bytes, result) -> None:
        """Cache a subproblem's exact value, or a lower bound higher than the one held."""
        if self.stats.cached < self.cache_values:
            old = self.cache[v].get(key)
            if old is None or result[1] is not None or result[0] > old[0]:
                self.cache[v][key] = result
                self.stats.cached += len(self.subtree[v]) if result[1] is not None else 1

    def _branch(self, v: int, kids, costs: np.ndarray, budget, value: np.ndarray, outside):
        """An OR node with children: its values cheapest first, each an AND node solving the
        children in turn against what is left of the budget (or of the incumbent, once lower).
        Stopped, it sets the exception's `lower` to this subproblem's least open bound."""
        heur = self._sum_rows(costs[1:])
        fval = heur + costs[0] if not self.saturating else np.minimum(heur + costs[0], self.top)
        rows, hl, fl = costs.tolist(), heur.tolist(), fval.tolist()
        w = rows[0]
        top, integer = self.top, self.integer
        best, best_sub, lower = budget, None, None
        ranked = fval.argsort().tolist()
        node = [v, kids, 0, [0]]  # this AND node on the path: children solved, values (x first)
        self.path.append(node)
        for i, x in enumerate(ranked):
            limit = min(best, self.upper - outside)
            if fl[x] >= limit:
                lower = fl[x] if lower is None else min(lower, fl[x])
                break
            value[v] = x
            acc, rest = w[x], hl[x]
            parts = node[3] = [x]
            node[2] = 0
            for k, c in enumerate(kids):
                rest -= rows[1 + k][x]
                try:
                    got, csub = self._or_node(c, min(best, self.upper - outside) - acc - rest, value,
                                              outside + acc + rest)
                except Stopped as e:
                    below = rows[1 + k][x] if e.lower is None else max(e.lower, rows[1 + k][x])  # both bound it
                    open_ = [acc + below + rest] + ([best] if best_sub is not None else []) \
                        + ([lower] if lower is not None else []) + ([fl[ranked[i + 1]]] if i + 1 < len(ranked) else [])
                    e.lower = min(min(open_), top) if integer else min(open_)
                    self.path.pop()
                    raise
                acc = min(acc + got, top) if integer else acc + got
                if csub is None:  # the child cannot fit its budget: x cannot beat `best`
                    lb_x = min(acc + rest, top) if integer else acc + rest
                    lower = lb_x if lower is None else min(lower, lb_x)
                    break
                parts.extend(csub)
                node[2] = k + 1
                if self.stats.nodes >= self.complete_at and self.on_incumbent is not None:
                    self._offer_completion(value)
            else:
                best, best_sub = acc, tuple(parts)
        self.path.pop()
        if best_sub is not None and (lower is None or lower >= best):
            return best, best_sub
        # Either nothing fits, or the incumbent fell below `best` and cut values that could beat it.
        return lower if best_sub is None else min(lower, best), None

    def _sum_rows(self, rows):
        if not self.saturating:
            return rows.sum(axis=0)
        acc = rows[0]
        for row in rows[1:]:
            acc = np.minimum(acc + row, self.top)
        return acc

    def tighten(self, upper) -> None:
        """The incumbent's cost fell to `upper` (found elsewhere): budgets on the path shrink to it."""
        if upper is not None and upper < self.upper:
            self.upper = _number(upper)

    def run(self, incumbent) -> tuple[object, list[int] | None]:
        """Search for an assignment cheaper than `incumbent` (internal cost; top: none known).

        Returns (cost, assignment) of a strictly better one, or (lower bound >= incumbent, None)
        when none exists: the incumbent (or a better one offered since) is then optimal. Raises
        gpusolve.stop.Stopped when `stop` says so, with `lower` set.
        """
        self.upper = _number(incumbent)
        result = self._in_thread(self._roots)
        self.stats.complete = True
        return result

    def solve(self, sub: Subproblem) -> tuple[object, dict[int, int] | None]:
        """The subtree below sub.var given its context: (cost, {variable: value}) when below
        sub.budget, else (a lower bound >= sub.budget, None)."""
        def body(value):
            for u, x in sub.context:
                value[u] = x
            cost, values = self._or_node(sub.var, sub.budget, value)
            return cost, None if values is None else dict(zip(self.subtree[sub.var], values))
        return self._in_thread(body)

    def _in_thread(self, fn):
        """fn(value array) in a thread with a C stack and recursion limit deep enough for the tree."""
        t0 = time.perf_counter()
        self.path = []
        value = np.zeros(len(self.dom), dtype=np.int64)
        for var, val in self.problem.evidence.items():
            value[var] = val
        limit = max(sys.getrecursionlimit(), _FRAMES_PER_LEVEL * self.tree.depth + 200)
        result: list = []

        def body():
            old = sys.getrecursionlimit()
            sys.setrecursionlimit(limit)
            gc.freeze()  # the search's cache and tuples need no cycle collection over what came before
            try:
                result.append(fn(value))
            except BaseException as e:  # re-raised in the caller's thread
                result.append(e)
            finally:
                gc.unfreeze()
                sys.setrecursionlimit(old)

        size = threading.stack_size()
        threading.stack_size(min(max(64 << 20, self.tree.depth * 8192), 1 << 30))
        try:
            worker = threading.Thread(target=body, daemon=True)
            worker.start()
        finally:
            threading.stack_size(size)
        worker.join()
        self.stats.time_s += time.perf_counter() - t0
        if isinstance(result[0], BaseException):
            raise result[0]
        return result[0]

    def _roots(self, value):
        """The independent subtrees of the roots in turn: the first AND node of the path."""
        roots = [r for r in self.tree.roots if r not in self.problem.evidence]
        hs = [_number(self.root_h[r]) for r in roots]
        acc = _number(self.constant)
        rest = sum(hs)
        if self.problem.add(acc, rest) >= self.upper:
            return self.problem.add(acc, rest), None
        node = [-1, roots, 0, [-1]]  # no variable of its own: a placeholder value
        self.path = [node]
        if self.on_incumbent is not None:  # its first turn: an incumbent before any subproblem is solved
            self.first = self._first_solution(roots, value.copy())
            self._offer_completion(value, under_path=False)
        for k, (r, h) in enumerate(zip(roots, hs)):
            rest -= h
            try:
                got, sub = self._or_node(r, self.upper - acc - rest, value, acc + rest)
            except Stopped as e:
                e.lower = self.problem.add(acc, (h if e.lower is None else max(e.lower, h)) + rest)
                raise
            acc = self.problem.add(acc, got)
            if sub is None:
                return max(self.problem.add(acc, rest), self.upper), None
            node[3].extend(sub)
            node[2] = k + 1
            if k + 1 < len(roots) and self.stats.nodes >= self.complete_at and self.on_incumbent is not None:
                self._offer_completion(value)
        if acc >= self.upper:
            return self.upper, None
        full = value.copy()
        for r, (start, stop) in zip(roots, self._spans(roots)):
            full[self.subtree[r]] = node[3][1 + start:1 + stop]
        return acc, full.tolist()

    def _spans(self, kids):
        """(start, stop) of each child's values in an AND node's list of its children's values."""
        stops = np.cumsum([len(self.subtree[c]) for c in kids]).tolist()
        return zip([0] + stops[:-1], stops)

    def _offer_completion(self, value: np.ndarray, under_path: bool = True) -> None:
        """The current path, the subproblems solved beside it and a dive's solution of each one still
        open: a complete assignment, offered as an incumbent. Where a dive runs out of its turn or
        finds no solution (the path has none) and no incumbent is known yet, the dive for a first
        solution of the whole problem gets a turn instead."""
        spent = 0
        if under_path:
            full = value.copy()
            open_: list[int] = []
            last = len(self.path) - 1
            for depth, (v, kids, solved, parts) in enumerate(self.path):
                if v >= 0:
                    full[v] = parts[0]
                for c, (start, stop) in zip(kids[:solved], self._spans(kids[:solved])):
                    full[self.subtree[c]] = parts[1 + start:1 + stop]
                open_.extend(kids[solved + (depth < last):])  # above the last, the next child is on the path
            self.turn = TURN_NODES
            completed = self._complete(open_, full)
            spent += TURN_NODES - max(self.turn, 0)
        if self.first is not None and self.upper >= self.top and not (under_path and completed):
            self.turn = TURN_NODES
            done, full = self._turn(self.first)
            spent += TURN_NODES - max(self.turn, 0)
            if done:
                self.first = None
                if full is not None:
                    self.tighten(self.on_incumbent(full.tolist()))
        spacing = 1 if self.upper >= self.top else COMPLETION_SPACING
        self.complete_at = self.stats.nodes + spacing * (spent + len(self.problem.functions))

    @staticmethod
    def _turn(dive):
        """Run a dive (a generator) until it returns, (True, its result), or suspends, (False, None)."""
        try:
            next(dive)
        except StopIteration as e:
            return True, e.value
        return False, None

    def _complete(self, open_: list[int], full: np.ndarray) -> bool:
        """Dive into each subproblem of `open_` in turn; where all have a solution within the turn,
        offer `full` so completed."""
        for c in open_:
            done, found = self._turn(self._dive(c, self.top, full))
            if not done or found is None or found[1] is None:
                return False
            full[self.subtree[c]] = found[1]
        self.tighten(self.on_incumbent(full.tolist()))
        return True

    def _first_solution(self, roots: list[int], full: np.ndarray):
        """A dive over the roots' subtrees in turn, resumed turn after turn (a generator): the whole
        problem's first solution, or None where a root has none."""
        for r in roots:
            found = yield from self._dive(r, self.top, full)
            if found is None or found[1] is None:
                return None
            full[self.subtree[r]] = found[1]
        return full

    def _dive(self, v: int, budget, value: np.ndarray):
        """A generator that yields where its turn runs out, and returns a solution of the subtree
        below v cheaper than `budget`, the first found depth-first: (cost, its values in
        `subtree[v]` order). Else (budget, None) where none exists (a bound
        the search may cache), or None where one may (a solution of a child cost too much, and
        another might not have). A child's budget subtracts its siblings' heuristics, not their
        dives' costs: its failure then proves that the parent's value has no solution."""
        cache, found = self.cache[v], self.found[v]
        if cache is not None:
            key = value[self.ctx[v]].tobytes()
            for hit in (cache.get(key), found.get(key)):
                if hit is not None and (hit[1] is None) == (hit[0] >= budget):
                    return hit if hit[1] is not None else (budget, None)
        self.turn -= 1
        if self.turn < 0 or (self.turn & 255 == 0 and self.stop()):
            yield  # suspended: out of its turn, or asked to stop
        costs = self._costs(v, value)
        fval = self._sum_rows(costs)
        rows, fl = costs.tolist(), fval.tolist()
        proved = True
        for x in fval.argsort(kind="stable").tolist():
            if fl[x] >= budget:
                break
            value[v] = x
            acc, parts = rows[0][x], [x]
            for k, c in enumerate(self.tree.children[v]):
                got = yield from self._dive(c, budget - fl[x] + rows[1 + k][x], value)
                if got is None or got[1] is None:
                    proved = proved and got is not None
                    break
                acc = self.problem.add(acc, got[0])
                parts.extend(got[1])
            else:
                if acc < budget:
                    result = (acc, tuple(parts))
                    if cache is not None and self.stats.cached < self.cache_values:
                        found[key] = result
                        self.stats.cached += len(parts)
                    return result
                proved = False
        if not proved:
            return None
        if cache is not None:
            self._remember(v, key, (budget, None))
        return budget, None
