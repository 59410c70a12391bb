"""The elimination plan: buckets, mini-buckets, table scopes, sizes and memory.

A plan is built from the model and an elimination order alone, so it can be
printed (`gpusolve info`), scored and tested without running any engine. An
engine executes `plan.minibuckets` in list order; every message goes to the
bucket of the earliest-eliminated variable of its scope, which always comes
later in the list.

Message scopes list variables latest-eliminated first, so the variable that
eliminates a message is its last (fastest-varying) axis, as in GpuBE.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from .model import Problem

# Joint-table entries an engine evaluates at once; bounds the working memory.
CHUNK_ENTRIES = 1 << 20


@dataclass(frozen=True)
class MiniBucket:
    index: int
    var: int  # the eliminated variable
    functions: tuple[int, ...]  # original cost functions (indices into problem.functions)
    messages: tuple[int, ...]  # mini-buckets whose output is an input here
    scope: tuple[int, ...]  # output (separator) scope, latest-eliminated first
    out_entries: int
    joint_entries: int  # out_entries * domain of var


@dataclass
class Plan:
    order: list[int]
    z: int | None  # None: exact bucket elimination
    minibuckets: list[MiniBucket]
    buckets: dict[int, list[int]]  # variable -> its mini-buckets
    constants: list[int]  # zero-arity functions (after conditioning)
    roots: list[int]  # mini-buckets whose message is a constant
    induced_width: int
    n_components: int
    itemsize: int
    original_bytes: int
    position: dict[int, int] = field(repr=False, default_factory=dict)

    @property
    def exact(self) -> bool:
        return all(len(b) <= 1 for b in self.buckets.values())

    @property
    def message_bytes(self) -> int:
        return sum(mb.out_entries for mb in self.minibuckets) * self.itemsize

    @property
    def workspace_bytes(self) -> int:
        largest = max((mb.joint_entries for mb in self.minibuckets), default=0)
        return 2 * min(largest, CHUNK_ENTRIES) * self.itemsize

    @property
    def peak_bytes(self) -> int:
        """Original tables + every message (kept for the assignment phase) + workspace."""
        return self.original_bytes + self.message_bytes + self.workspace_bytes

    @property
    def propagation_bytes(self) -> int:
        """Two-pass propagation (MAR): messages both ways plus the largest clique, twice."""
        largest = max((mb.joint_entries for mb in self.minibuckets), default=0)
        return self.original_bytes + 2 * self.message_bytes + 2 * largest * self.itemsize

    def largest(self) -> MiniBucket | None:
        return max(self.minibuckets, key=lambda mb: mb.out_entries, default=None)

    def describe(self, limit: int = 12) -> str:
        kind = "exact BE" if self.z is None else f"MBE(z={self.z})"
        lines = [
            f"{kind}: {len(self.order)} variables, {len(self.minibuckets)} mini-buckets, "
            f"{self.n_components} component(s), induced width {self.induced_width}",
            f"memory: originals {fmt_bytes(self.original_bytes)}, messages "
            f"{fmt_bytes(self.message_bytes)}, workspace {fmt_bytes(self.workspace_bytes)}, "
            f"peak {fmt_bytes(self.peak_bytes)}",
        ]
        shown = sorted(self.minibuckets, key=lambda mb: -mb.joint_entries)[:limit]
        if shown:
            lines.append(f"{'bucket':>8} {'var':>6} {'inputs':>6} {'sep':>4} {'out entries':>14} {'joint entries':>14}")
            for mb in sorted(shown, key=lambda mb: mb.index):
                lines.append(f"{mb.index:>8} {mb.var:>6} {len(mb.functions) + len(mb.messages):>6} "
                             f"{len(mb.scope):>4} {mb.out_entries:>14,} {mb.joint_entries:>14,}")
            if len(self.minibuckets) > limit:
                lines.append(f"({len(self.minibuckets) - limit} smaller mini-buckets not shown)")
        return "\n".join(lines)


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def build_plan(problem: Problem, order: list[int], z: int | None = None,
               n_components: int = 1) -> Plan:
    """Place functions in buckets and partition buckets into mini-buckets of <= z variables.

    Partitioning follows Dechter & Rish: largest scopes first, first fit.
    """
    dom = problem.domains
    pos = {v: i for i, v in enumerate(order)}
    itemsize = 8
    # items waiting in each bucket: (scope as a set, "f" or "m", index)
    pending: dict[int, list[tuple[frozenset, str, int]]] = {v: [] for v in order}
    constants = []
    for i, f in enumerate(problem.functions):
        if not f.scope:
            constants.append(i)
            continue
        first = min(f.scope, key=pos.__getitem__)
        pending[first].append((frozenset(f.scope), "f", i))
    minibuckets: list[MiniBucket] = []
    buckets: dict[int, list[int]] = {}
    roots = []
    width = 0
    for v in order:
        items = sorted(pending.pop(v), key=lambda it: (-len(it[0]), it[1], it[2]))
        groups: list[tuple[set, list]] = []
        for scope, kind, idx in items:
            for union, members in groups:
                if z is None or len(union | scope) <= z:
                    union |= scope
                    members.append((kind, idx))
                    break
            else:
                groups.append((set(scope), [(kind, idx)]))
        buckets[v] = []
        for union, members in groups:
            sep = tuple(sorted(union - {v}, key=lambda u: -pos[u]))
            width = max(width, len(sep))
            out = math.prod(dom[u] for u in sep)
            mb = MiniBucket(
                index=len(minibuckets), var=v,
                functions=tuple(i for k, i in members if k == "f"),
                messages=tuple(i for k, i in members if k == "m"),
                scope=sep, out_entries=out, joint_entries=out * dom[v])
            minibuckets.append(mb)
            buckets[v].append(mb.index)
            if sep:
                pending[sep[-1]].append((frozenset(sep), "m", mb.index))
            else:
                roots.append(mb.index)
    original = sum(f.table.size for f in problem.functions) * itemsize
    return Plan(order=list(order), z=z, minibuckets=minibuckets, buckets=buckets,
                constants=constants, roots=roots, induced_width=width, n_components=n_components,
                itemsize=itemsize, original_bytes=original, position=pos)
