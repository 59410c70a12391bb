"""Variable neighbourhood search with the compiled search (toulbar2's VNS, Ouali, Allouche, de Givry,
Loudni, Lebbah, Loukil, UAI 2017, with a node limit in place of its discrepancy limit): a connected ball
of variables around a random one is searched by branch and bound with EDAC* (dfbb.DepthFirst), the
others fixed to the incumbent's values, for a strictly better assignment within VNS_NODES nodes.

local.lns solves its balls exactly by BE, so their width bounds them: a few variables at CELAR's domain
44. Soft arc consistency searches balls of tens. On scen07, from an incumbent of 364,013 (a 60 s run's
last) that LNS left as it was in 10 s with each of 4 seeds, balls of 30 variables and 5,000 nodes found
354,104 or better within 0.04-4.5 s with each of 4 (354,005 with 3); from 364,412, balls of 20-40 variables
and 1,000-2,000 nodes found 354,112 or better within 0.04-0.23 s with each of 6 (/tmp/vns.py, dev box,
under load).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from gpusolve.model.problem import CostFunction, Problem, Variable
from gpusolve.search.dfbb_state import COMPLETE
from gpusolve.search.local import ball, movable_adjacency
from gpusolve.stop import Stop

# The ball's size at first; one more after a ball searched to its end without a better assignment, one
# less (down to VNS_MIN) after one that reached the node limit.
VNS_SIZE, VNS_MIN, VNS_NODES = 30, 4, 1000


def vns(problem: Problem, assignment, search: Callable, rng, stop: Stop,
        on_improve: Callable[[int, list[int]], None] | None = None,
        size: int = VNS_SIZE, nodes: int = VNS_NODES) -> tuple[list[int], int]:
    """From a feasible `assignment`: (the best assignment found, its cost). `search(problem, upper)` makes
    the search of a ball (dfbb.ball_search: its module starts this one, not the other way round);
    on_improve(cost, assignment) hears each better one; `stop` is checked before each ball."""
    best, cost = list(assignment), int(problem.evaluate(assignment))
    if problem.globals:  # a ball would have to restrict them: none is searched
        return best, cost
    adjacency = movable_adjacency(problem)
    touching: list[list[CostFunction]] = [[] for _ in problem.variables]
    for f in problem.functions:
        for v in f.scope:
            touching[v].append(f)
    while adjacency and not stop():
        free = sorted(ball(adjacency, rng, size))
        sub, upper = _ball_problem(problem, free, best, touching)
        s = search(sub, upper)
        while s.run(nodes - s.nodes) != COMPLETE and s.nodes < nodes:
            pass
        if s.ub < upper:
            for i, v in enumerate(free):
                best[v] = int(s.best[i])
            cost = int(problem.evaluate(best))
            if on_improve:
                on_improve(cost, list(best))
        elif s.complete:
            size = min(size + 1, len(adjacency))
        else:
            size = max(size - 1, VNS_MIN)
    return best, cost


def _ball_problem(problem: Problem, free: list[int], best: list[int],
                  touching: list[list[CostFunction]]) -> tuple[Problem, int]:
    """(the functions touching `free`, the other variables fixed to `best`'s values, over `free` numbered
    0.., the cost of `best` on them): a better assignment of the ball costs less than that."""
    index = {v: i for i, v in enumerate(free)}
    functions, seen, upper = [], set(), 0
    for v in free:
        for f in touching[v]:
            if id(f) in seen:
                continue
            seen.add(id(f))
            table = np.asarray(f.table[tuple(slice(None) if u in index else best[u] for u in f.scope)])
            scope = tuple(index[u] for u in f.scope if u in index)
            functions.append(CostFunction(scope, table))
            upper += int(table[tuple(best[free[i]] for i in scope)])
    variables = [problem.variables[v] for v in free]
    return Problem(problem.name, [Variable(x.name, x.domain) for x in variables], functions, True,
                   problem.top), upper
