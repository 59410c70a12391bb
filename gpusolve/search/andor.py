"""AND/OR branch and bound guided by mini-bucket heuristics (Marinescu & Dechter, AIJ 2009).

The search space is the pseudo tree of the elimination order: a variable's
parent is the earliest-eliminated variable of its exact-BE separator, so the
subtrees below a variable are independent once its ancestors are assigned,
and the value of a subtree depends only on its *context* (that separator).
Subproblems with the same context are solved once and cached (AOBB-C).

The heuristic and the functions are read through flat lookups (lookup.py).

A subproblem is solved against a *budget*: it returns its exact value when
that is below the budget, otherwise a lower bound >= the budget. The root's
budget is the incumbent's cost, so finishing the search either improves the
incumbent or proves it optimal. A `Subproblem` (a variable, its context's
values and a budget) is the unit of work a distributed search would hand out.

The search is anytime, as breadth-rotating AOBB (Otten & Dechter, AI Comm.
2012) makes it: the children of an AND node, independent subproblems, are
solved in rotation, each for a turn of TURN_NODES nodes, instead of each
waiting until the ones to its left are exhausted; a search is a generator that
suspends where a turn ends, and the path below a suspended child is set aside
until its next turn. Each time a subproblem is solved, the path, the
subproblems solved beside it and a solution of each one still open (the best
the search has found in it so far, else a dive's: values cheapest first by
bucket functions and heuristic, backtracking where hard tuples cut) make a
complete assignment, offered as an incumbent; the incumbent's cost then
bounds every budget on the path. A dive is dropped when its turn runs out;
what it keeps is its solutions (reused by later dives) and the dead ends it
proved (in the context cache, which the search reads too). While no
incumbent is known, a dive for a first solution of the whole problem is
suspended and resumed turn after turn, alternating with the search. A stop
reports the least lower bound over the open nodes: a bound for the whole
problem.
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
from gpusolve.search.lookup import FlatHeuristic, Heuristic
from gpusolve.stop import Stop, Stopped

# Values the context cache may hold in all (subtree assignments and bounds): about 1 GiB.
CACHE_VALUES = 100_000_000
# Depth of Python recursion the search needs per pseudo-tree level: frames of _or_node, _branch and
# _turn (through which a rotating AND node resumes a child), and of a dive started from the deepest.
_FRAMES_PER_LEVEL = 4
# A completion costs its dives' nodes and one node per function its evaluation reads: the next one
# waits for this many times as many nodes (once, while no incumbent is known), so completions take
# a small share of the search (half of it, while a first feasible point is worth as much as search).
COMPLETION_SPACING = 4
# Nodes a subproblem of the rotation, or a dive, may expand in one turn.
TURN_NODES = 1024


def _number(x):
    """A Python number: NumPy scalars on the path would make every budget's arithmetic slower."""
    return x.item() if isinstance(x, np.generic) else x


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
        self.turn = 0  # nodes left to this turn (of a subproblem in the rotation, or of a dive)
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
        self.flat = FlatHeuristic(problem, self.tree, heuristic)
        self.cache: list[dict | None] = [self._cache_for(v) for v in range(len(self.dom))]
        self.found = [None if c is None else {} for c in self.cache]  # the dives' solutions, by context
        self.latest: list = [None] * len(self.dom)  # the search's last improvement below each variable
        self.cache_values = cache_values
        self.ctx = [np.array(c, dtype=np.int64) for c in self.tree.context]
        self.subtree = self._subtrees()

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
        return self.flat.evaluate(r, np.zeros(len(self.dom), dtype=np.int64))

    # --- the search ---------------------------------------------------------------------------
    def _costs(self, v: int, value: np.ndarray) -> np.ndarray:
        """_evaluate with the propagators' costs added to v's own row."""
        costs = self.flat.evaluate(v, value)
        for prop, above in self.watch[v]:
            costs = costs.copy() if costs is self.flat.lookups[v].zeros else costs
            costs[0] = np.minimum(costs[0] + prop.lower(v, above, value), self.top)
        return costs

    def _or_node(self, v: int, budget, value: np.ndarray, outside=0):
        """A generator that yields where its turn runs out and returns (value of the subtree below v
        given its ancestors, its values in `subtree[v]` order) when below `budget`; else (a lower
        bound >= the budget reached, None). `outside`: what the rest of the path costs at least, so
        that `upper - outside` bounds the budget as the incumbent improves. Budgets and costs are
        Python numbers here: scalar arithmetic on NumPy values would cost more than the gathers."""
        cache = self.cache[v]
        if cache is not None:
            key = value[self.ctx[v]].tobytes()
            hit = cache.get(key)
            if hit is not None and (hit[1] is not None or hit[0] >= budget):
                self.stats.cache_hits += 1
                cost, sub = hit
                return (cost, sub) if sub is not None and cost < budget else (max(cost, budget), None)
        self.stats.nodes += 1
        self.turn -= 1
        if self.turn < 0:
            yield  # suspended: the turn of this subproblem is over
        if self.stats.nodes & 255 == 0:
            self.stop.check()
        costs = self._costs(v, value)
        kids = self.tree.children[v]
        if not kids:  # a leaf: its cheapest value
            x = int(costs[0].argmin())
            cost = costs[0, x].item()
            result = ((cost, (x,)) if cost < budget else (max(cost, budget), None))
        else:
            result = yield from self._branch(v, kids, costs, budget, value, outside)
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
        """An OR node with children: its values cheapest first (below `best`, or the incumbent once
        lower), each an AND node whose children, independent subproblems, are solved in rotation
        (breadth-rotating AOBB, Otten & Dechter 2012): a child runs for a turn, then the next unsolved
        one gets one, so every open subproblem makes progress and complete assignments come early. A
        child starts with the budget that its solved siblings' values and its unsolved siblings'
        heuristics leave. A generator: it yields (up to the driver) when a child's turn is over, and
        the next child's turn comes on resumption. Stopped, it sets the exception's `lower` to this
        subproblem's least open bound. v < 0: the roots' AND node, one value."""
        heur = self.flat.sum_rows(costs[1:])
        fval = heur + costs[0] if not self.flat.saturating else np.minimum(heur + costs[0], self.top)
        rows, fl = costs.tolist(), fval.tolist()
        add, n, depth = self.problem.add, len(kids), len(self.path)
        best, best_sub, lower = budget, None, None
        ranked = fval.argsort().tolist()
        for i, x in enumerate(ranked):
            if fl[x] >= min(best, self.upper - outside):
                lower = fl[x] if lower is None else min(lower, fl[x])
                break
            if v >= 0:
                value[v] = x
            hs = [r[x] for r in rows[1:]]
            sols, gens, held = [None] * n, [None] * n, [None] * n  # held: the path below a suspended child
            node = [v, kids, -1, x, sols]  # this AND node on the path: the child running, x, solutions
            self.path.append(node)
            pending, acc, turn = list(range(n)), rows[0][x], 0
            while pending:
                at = turn % len(pending)
                k = pending[at]
                if gens[k] is None:
                    rest = sum(hs[j] for j in pending if j != k) if n > 1 else 0
                    gens[k] = self._or_node(kids[k], min(best, self.upper - outside) - acc - rest, value,
                                            outside + acc + rest)
                node[2] = k
                if held[k]:
                    self.path.extend(held[k])
                    held[k] = None
                try:
                    if len(pending) > 1:
                        done, result = self._turn(gens[k])
                    else:  # none to rotate with: its suspensions pass up as they are
                        done, result = True, (yield from gens[k])
                except Stopped as e:
                    below = hs[k] if e.lower is None else max(e.lower, hs[k])  # both bound it
                    open_ = [add(acc, below + sum(hs[j] for j in pending if j != k))] \
                        + ([best] if best_sub is not None else []) + ([lower] if lower is not None else []) \
                        + ([fl[ranked[i + 1]]] if i + 1 < len(ranked) else [])
                    e.lower = min(min(open_), self.top) if self.integer else min(open_)
                    raise
                if not done:  # its turn is over: the next child's comes when the driver resumes this node
                    held[k] = self.path[depth + 1:]
                    del self.path[depth + 1:]
                    turn = at + 1
                    yield
                    continue
                got, sub = result
                pending.pop(at)
                acc = add(acc, got)
                if sub is None:  # the child cannot fit its budget: x cannot beat `best`
                    acc = add(acc, sum(hs[j] for j in pending))
                    break
                sols[k] = sub
                node[2] = -1
                if self.stats.nodes >= self.complete_at and self.on_incumbent is not None and (pending or v >= 0):
                    self._offer_completion(value)
            del self.path[depth:]
            if pending or acc >= min(best, self.upper - outside):  # x cannot beat `best`
                lower = acc if lower is None else min(lower, acc)
                continue
            best, best_sub = acc, (x,) + (sols[0] if n == 1 else tuple(u for sol in sols for u in sol))
            if v >= 0:
                self.latest[v] = (value[self.ctx[v]].tobytes(), best_sub)
        if best_sub is not None and (lower is None or lower >= best):
            return best, best_sub
        # Either nothing fits, or the incumbent fell below `best` and cut values that could beat it.
        return lower if best_sub is None else min(lower, best), None

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
            cost, values = yield from self._or_node(sub.var, sub.budget, value)
            return cost, None if values is None else dict(zip(self.subtree[sub.var], values))
        return self._in_thread(body)

    def _in_thread(self, fn):
        """fn(value array), a search, driven in a thread with a C stack and recursion limit deep enough
        for the tree."""
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
                result.append(self._drive(fn(value)))
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

    def _drive(self, search):
        """Run a search (a generator) turn after turn until it returns its result."""
        while True:
            self.turn = TURN_NODES
            try:
                next(search)
            except StopIteration as e:
                return e.value

    def _roots(self, value):
        """The independent subtrees of the roots, in rotation: an AND node of one value (the first of
        the path) whose own cost is the constant functions'."""
        roots = [r for r in self.tree.roots if r not in self.problem.evidence]
        costs = np.array([[_number(self.flat.constant)]] + [[_number(self.flat.root_h[r])] for r in roots],
                         dtype=self.flat.pool.dtype)
        if self.on_incumbent is not None:  # its first turn: an incumbent before any subproblem is solved
            self.first = self._first_solution(roots, value.copy())
            self._offer_completion(value, under_path=False)
        got, parts = yield from self._branch(-1, roots, costs, self.upper, value, 0)
        if parts is None:
            return max(got, self.upper), None
        full = value.copy()
        for r, (start, stop) in zip(roots, self._spans(roots)):
            full[self.subtree[r]] = parts[1 + start:1 + stop]
        return got, full.tolist()

    def _spans(self, kids):
        """(start, stop) of each child's values in an AND node's list of its children's values."""
        stops = np.cumsum([len(self.subtree[c]) for c in kids]).tolist()
        return zip([0] + stops[:-1], stops)

    def _offer_completion(self, value: np.ndarray, under_path: bool = True) -> None:
        """The current path, the subproblems solved beside it and a dive's solution of each one still
        open: a complete assignment, offered as an incumbent. Where a dive runs out of its turn or
        finds no solution (the path has none) and no incumbent is known yet, the dive for a first
        solution of the whole problem gets a turn instead."""
        spent, saved = 0, self.turn  # the turn of the search, which the dives below spend their own
        if under_path:
            full = value.copy()
            open_: list[int] = []
            for v, kids, running, x, sols in self.path:
                if v >= 0:
                    full[v] = x
                for j, c in enumerate(kids):
                    if sols[j] is not None:
                        full[self.subtree[c]] = sols[j]
                    elif j != running:  # the running child holds the rest of the path
                        open_.append(c)
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
        self.turn = saved
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
        """Complete each subproblem of `open_` in turn: by the best solution the search has found in it
        so far (its turn in the rotation may not be over), else by a dive; where all have a solution
        within the turn, offer `full` so completed."""
        for c in open_:
            held = self.latest[c]
            if held is not None and held[0] == full[self.ctx[c]].tobytes():
                full[self.subtree[c]] = held[1]
                continue
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
        fval = self.flat.sum_rows(costs)
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
