"""AND/OR branch and bound over Dask workers: each (root value, child subtree) pair solved on a worker."""
from __future__ import annotations

import time

from gpusolve.stop import Stop, Stopped


_SEARCHES: dict[str, object] = {}  # per worker process: the AndOrSearch of the run under way, by token


def _child_search(token: str, state, sub_var: int, root: int, x: int, rest, shared: str):
    """Unit of work of the distributed search: the subtree below `sub_var` given root = x, against the
    best total any worker has reported for that root (`shared`, a dask Variable) minus `rest` (the
    root's own cost at x and its other children's heuristics). Returns (cost or lower bound, values, nodes)."""
    from dask.distributed import Variable

    from gpusolve.search.andor import AndOrSearch, Subproblem
    search = _SEARCHES.get(token)
    if search is None:
        _SEARCHES.clear()
        search = _SEARCHES[token] = AndOrSearch(*state)
    budget = Variable(shared).get() - rest
    if budget <= 0:
        return budget, None, 0
    before = search.stats.nodes
    cost, values = search.solve(Subproblem(sub_var, ((root, x),), budget))
    return cost, values, search.stats.nodes - before


def search_on_dask(client, problem, order, heuristic, incumbent: list[int] | None,
                   stop: Stop | None = None):
    """AND/OR branch and bound with each (root value, child subtree) pair solved on a Dask worker
    (daoopt's conditioning, at depth one). Each root keeps its best total in a dask Variable that
    workers read before they start, so every subproblem is pruned with the best bound found anywhere.

    Returns (optimal internal cost, an optimal assignment or None when infeasible, OR nodes
    expanded by the workers); the incumbent's values stand where nothing beats them. Raises
    Stopped when `stop` says so (subproblems already running finish unheard).
    """
    import numpy as np
    from dask.distributed import Variable, as_completed

    from gpusolve.search.andor import AndOrSearch
    local = AndOrSearch(problem, order, heuristic)
    tree = local.tree
    token = f"search-{time.time_ns()}"
    state = client.scatter((problem, order, heuristic), broadcast=True)
    values = list(incumbent) if incumbent is not None else [0] * len(problem.variables)
    for var, val in problem.evidence.items():
        values[var] = val
    futures, pending, best, shared = {}, {}, {}, {}
    for r in (r for r in tree.roots if r not in problem.evidence):
        part = set(local.subtree[r])
        best[r] = problem.top if incumbent is None else problem.total(
            f.table[tuple(values[u] for u in f.scope)] for f in problem.functions if f.scope and f.scope[0] in part)
        costs = local.root_costs(r)
        heur = costs[1:].sum(axis=0)
        first = costs[0] + heur
        kids = tree.children[r]
        if not kids:  # a root alone: its cheapest value
            x = int(first.argmin())
            if first[x] < best[r]:
                best[r], values[r] = first[x].item(), x
            continue
        shared[r] = Variable(f"{token}-{r}", client=client)
        shared[r].set(best[r].item() if hasattr(best[r], "item") else best[r])
        for x in np.argsort(first, kind="stable").tolist():
            if first[x] >= best[r]:
                break
            pending[r, x] = [costs[0, x].item(), len(kids), {r: x}]
            for k, c in enumerate(kids):
                rest = first[x].item() - costs[1 + k, x].item()
                futures[client.submit(_child_search, token, state, c, r, x, rest, shared[r].name,
                                      key=f"{token}-{r}-{x}-{c}", pure=False)] = (r, x)
    nodes = 0
    for future, (cost, found, n) in as_completed(futures, with_results=True):
        if stop is not None and stop():
            client.cancel(list(futures))
            raise Stopped(stop.signal())
        nodes += n
        r, x = futures[future]
        entry = pending.get((r, x))
        if entry is None:
            continue  # a sibling already proved that x cannot win
        if found is None:
            del pending[r, x]
            continue
        entry[0] = problem.add(entry[0], cost)
        entry[1] -= 1
        entry[2].update(found)
        if entry[1] == 0:
            del pending[r, x]
            if entry[0] < best[r]:
                best[r] = entry[0]
                shared[r].set(best[r])
                for u, val in entry[2].items():
                    values[u] = val
    for v in shared.values():
        v.delete()
    total = problem.total([local.flat.constant, *best.values()])
    return total, None if problem.is_forbidden(total) else values, nodes
