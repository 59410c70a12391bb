"""The pseudo tree of an elimination order: the bucket tree, whose subtrees are independent once the
variables above them are assigned (AND/OR search, DPOP)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PseudoTree:
    """The bucket tree of an elimination order, used as a pseudo tree (roots first in `dfs`)."""

    parent: tuple[int, ...]  # -1 for a root
    children: tuple[tuple[int, ...], ...]
    context: tuple[tuple[int, ...], ...]  # exact-BE separator: the ancestors a subtree depends on
    roots: tuple[int, ...]
    depth: int

    def post_order(self) -> list[int]:
        """Children before parents."""
        out, stack = [], [(r, False) for r in reversed(self.roots)]
        while stack:
            v, done = stack.pop()
            if done:
                out.append(v)
                continue
            stack.append((v, True))
            stack.extend((c, False) for c in reversed(self.children[v]))
        return out

    def above(self, v: int, scope) -> tuple[int, ...]:
        """The variables of `scope` that are ancestors of v (assigned when v is)."""
        ancestors = set(self.path_up(self.parent[v], -1)) if self.parent[v] >= 0 else set()
        return tuple(u for u in scope if u in ancestors)

    def path_up(self, y: int, stop: int):
        """Y, its parent, ... up to (excluding) `stop` (-1: to the root)."""
        while y != stop and y != -1:
            yield y
            y = self.parent[y]


def pseudo_tree(n: int, scopes, order: list[int]) -> PseudoTree:
    """Eliminate along `order` on the graph of `scopes`: each variable's later neighbours are its
    context, the first of them to be eliminated its parent."""
    pos = {v: i for i, v in enumerate(order)}
    adj: dict[int, set[int]] = {v: set() for v in range(n)}
    for scope in scopes:
        for u in scope:
            adj[u].update(w for w in scope if w != u)
    parent = [-1] * n
    context: list[tuple[int, ...]] = [()] * n
    for v in order:
        sep = adj.pop(v)
        for u in sep:
            adj[u].discard(v)
            adj[u].update(sep - {u})
        context[v] = tuple(sorted(sep, key=lambda u: -pos[u]))  # latest-eliminated first, as plan scopes
        parent[v] = context[v][-1] if sep else -1
    children: list[list[int]] = [[] for _ in range(n)]
    for v in reversed(order):
        if parent[v] >= 0:
            children[parent[v]].append(v)
    roots = tuple(v for v in reversed(order) if parent[v] < 0)
    depth = [0] * n
    for v in reversed(order):  # parents come later in the order
        depth[v] = depth[parent[v]] + 1 if parent[v] >= 0 else 1
    return PseudoTree(tuple(parent), tuple(tuple(c) for c in children), tuple(context), roots,
                      max(depth, default=0))
