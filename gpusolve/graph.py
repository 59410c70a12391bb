"""Primal graph, greedy elimination orderings and induced width.

An ordering lists variables in the order they are *eliminated* (first entry
first). Orderings are computed per connected component and concatenated, so
components never share a bucket and are solved independently.
"""
from __future__ import annotations

from pathlib import Path

import networkx as nx

from .model import Problem

ORDERINGS = ("minfill", "mindegree")


class OrderError(ValueError):
    pass


def primal_graph(problem: Problem) -> nx.Graph:
    """One node per variable, an edge between variables sharing a cost function."""
    g = nx.Graph()
    g.add_nodes_from(range(len(problem.variables)))
    for f in problem.functions:
        s = f.scope
        for i in range(len(s)):
            for j in range(i + 1, len(s)):
                g.add_edge(s[i], s[j])
    return g


def _fill_in(adj: dict[int, set[int]], v: int) -> int:
    nb = list(adj[v])
    missing = 0
    for i, a in enumerate(nb):
        na = adj[a]
        for b in nb[i + 1:]:
            if b not in na:
                missing += 1
    return missing


def _greedy(g: nx.Graph, nodes, score) -> list[int]:
    """Eliminate the node of least score (ties: smallest index), connecting its neighbours.

    Scores are cached and recomputed only around the eliminated node, whose
    neighbourhood is the only place fill edges appear.
    """
    adj = {v: set(g.adj[v]) for v in nodes}
    scores = {v: score(adj, v) for v in adj}
    order = []
    while adj:
        v = min(scores, key=lambda u: (scores[u], u))
        nb = adj.pop(v)
        del scores[v]
        for a in nb:
            adj[a].discard(v)
            adj[a].update(nb - {a})
        touched = set(nb)
        for a in nb:
            touched.update(adj[a])
        for u in touched:
            scores[u] = score(adj, u)
        order.append(v)
    return order


_SCORES = {
    "minfill": lambda adj, v: (_fill_in(adj, v), len(adj[v])),
    "mindegree": lambda adj, v: (len(adj[v]), _fill_in(adj, v)),
}


def components(g: nx.Graph) -> list[list[int]]:
    """Connected components, each sorted, listed by smallest variable."""
    return sorted((sorted(c) for c in nx.connected_components(g)), key=lambda c: c[0])


def elimination_order(problem: Problem, method: str = "minfill", g: nx.Graph | None = None) -> list[int]:
    """Greedy ordering per connected component (components in index order)."""
    if method not in _SCORES:
        raise OrderError(f"unknown ordering {method!r} (choose {', '.join(ORDERINGS)} or a file)")
    g = primal_graph(problem) if g is None else g
    order: list[int] = []
    for comp in components(g):
        order += _greedy(g, comp, _SCORES[method])
    return order


def read_order(path: str | Path, n: int) -> list[int]:
    """A user order file: variable indices in elimination order (whitespace separated)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise OrderError(f"{path}: cannot read order file ({e.strerror})") from None
    order = []
    for lineno, line in enumerate(text.splitlines(), 1):
        for tok in line.split("#")[0].split():
            try:
                v = int(tok)
            except ValueError:
                raise OrderError(f"{path}:{lineno}: {tok!r} is not a variable index") from None
            if not 0 <= v < n:
                raise OrderError(f"{path}:{lineno}: variable {v} out of range (n={n})")
            order.append(v)
    if sorted(order) != list(range(n)):
        seen = set()
        dup = next((v for v in order if v in seen or seen.add(v)), None)
        what = f"variable {dup} appears twice" if dup is not None else \
            f"{n - len(set(order))} variable(s) missing"
        raise OrderError(f"{path}: order must list each of the {n} variables once: {what}")
    return order


def induced_width(g: nx.Graph, order: list[int]) -> int:
    """Largest number of later neighbours of a variable when eliminated in `order`."""
    adj = {v: set(g.adj[v]) for v in g.nodes}
    width = 0
    for v in order:
        nb = adj.pop(v)
        width = max(width, len(nb))
        for a in nb:
            adj[a].discard(v)
            adj[a].update(nb - {a})
    return width
