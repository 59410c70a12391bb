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
from typing import TYPE_CHECKING, Callable

from gpusolve.host import BudgetError, fmt_bytes
from gpusolve.limits import DEFAULT, Limits

if TYPE_CHECKING:
    from gpusolve.model.problem import Problem

# Joint-table entries an engine evaluates at once; bounds the working memory.
CHUNK_ENTRIES = 1 << 20
# The CPU engine's threads on one bucket, each a chunk at a time (bench/cpu_engine.py: on 16 cores,
# no gain past 12-16); a bound the plan's memory counts whatever the machine.
THREADS_MAX = 16
# Sparse tables (engines/sparse.py): bytes per stored row (int64 key + 8-byte cost); the rows
# gathered at once and their workspace are Limits.chunk_rows and Limits.work_row_bytes.
ROW_BYTES = 16
KEY_LIMIT = 1 << 63  # sparse keys are int64: a scope fits when the product of its domains is <= this
TABLES = ("auto", "dense", "sparse")
# --tables auto makes a mini-bucket sparse when its predicted joint rows are at most
# this share of the dense joint table: a sorted row costs far more than a dense entry.
SPARSE_FRACTION = 0.05
# A streamed message is built chunk by chunk, this many in flight (one per CUDA stream).
CHUNKS_IN_FLIGHT = 2


@dataclass(frozen=True)
class MiniBucket:
    index: int
    var: int  # the eliminated variable
    functions: tuple[int, ...]  # original cost functions (indices into problem.functions)
    messages: tuple[int, ...]  # mini-buckets whose output is an input here
    scope: tuple[int, ...]  # output (separator) scope, latest-eliminated first
    out_entries: int
    joint_entries: int  # out_entries * domain of var
    sparse: bool = False  # computed as a sparse table (engines/sparse.py)
    rows: int = 0  # upper bound on the message's feasible rows
    joint_rows: int = 0  # upper bound on the joint table's feasible rows


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
    tables: str = "dense"  # the --tables choice the plan was built with
    row_limit: int | None = None  # sparse tables may hold at most this many rows (speculative runs)
    limits: Limits = field(repr=False, default=DEFAULT)  # sizes its memory and the engine's sparse steps

    @property
    def exact(self) -> bool:
        return all(len(b) <= 1 for b in self.buckets.values())

    @property
    def sparse(self) -> bool:
        return any(mb.sparse for mb in self.minibuckets)

    @property
    def message_bytes(self) -> int:
        return sum(self.out_bytes(mb) for mb in self.minibuckets)

    def out_bytes(self, mb: MiniBucket) -> int:
        """Bytes of mini-bucket mb's message: its feasible rows (sparse) or every entry (dense)."""
        return mb.rows * ROW_BYTES if mb.sparse else mb.out_entries * self.itemsize

    @property
    def workspace_bytes(self) -> int:
        """Dense: two chunks for each CPU thread the largest bucket may take. Sparse: a chunk of
        gathered rows plus stored intermediate joins, estimated by the joint bound."""
        largest = max((mb.joint_entries for mb in self.minibuckets if not mb.sparse), default=0)
        dense = 2 * min(largest, CHUNK_ENTRIES) * self.itemsize * min(THREADS_MAX, max(1, largest // CHUNK_ENTRIES))
        joint = max((mb.joint_rows for mb in self.minibuckets if mb.sparse), default=None)
        if joint is None:
            return dense
        return max(dense, self.chunk_bytes(joint) + joint * ROW_BYTES)

    def chunk_bytes(self, joint_rows: int) -> int:
        """Workspace of a sparse join of `joint_rows` rows: a chunk of gathered rows at most."""
        return min(joint_rows, self.limits.chunk_rows) * self.limits.work_row_bytes

    def rows_within(self, budget: int) -> int:
        """Row limit of a speculative sparse run in `budget`: the originals, a chunk of gathered
        rows, and four times the rows stored (messages kept, the table being built, sort copies)."""
        return max(budget - self.original_bytes - self.chunk_bytes(self.limits.chunk_rows), 0) // (4 * ROW_BYTES)

    @property
    def peak_bytes(self) -> int:
        """Original tables + every message (kept for the assignment phase) + workspace;
        a run with a row limit stops before its limit's share."""
        peak = self.original_bytes + self.message_bytes + self.workspace_bytes
        if self.row_limit is not None:
            peak = min(peak, self.original_bytes + self.chunk_bytes(self.limits.chunk_rows)
                       + 4 * self.row_limit * ROW_BYTES)
        return peak

    @property
    def propagation_bytes(self) -> int:
        """Two-pass propagation (MAR): messages both ways plus the largest clique, twice."""
        largest = max((mb.joint_entries for mb in self.minibuckets), default=0)
        return self.original_bytes + 2 * self.message_bytes + 2 * largest * self.itemsize

    def inputs(self, problem: Problem, mb: MiniBucket, tables, messages) -> list[tuple[object, tuple[int, ...]]]:
        """The (table, scope) pairs mini-bucket `mb` joins: its functions and the messages it receives."""
        return ([(tables[i], problem.functions[i].scope) for i in mb.functions]
                + [(messages[j], self.minibuckets[j].scope) for j in mb.messages])

    def largest(self) -> MiniBucket | None:
        return max(self.minibuckets, key=lambda mb: mb.out_entries, default=None)

    def describe(self, limit: int = 12) -> str:
        kind = "exact BE" if self.z is None else f"MBE(z={self.z})"
        n_sparse = sum(mb.sparse for mb in self.minibuckets)
        kind += f", tables {self.tables} ({n_sparse} sparse)" if self.tables != "dense" else ""
        lines = [
            f"{kind}: {len(self.order)} variables, {len(self.minibuckets)} mini-buckets, "
            f"{self.n_components} component(s), induced width {self.induced_width}",
            f"memory: originals {fmt_bytes(self.original_bytes)}, messages "
            f"{fmt_bytes(self.message_bytes)}, workspace {fmt_bytes(self.workspace_bytes)}, "
            f"peak {fmt_bytes(self.peak_bytes)}",
        ]
        shown = sorted(self.minibuckets, key=lambda mb: -mb.joint_entries)[:limit]
        if shown:
            lines.append(f"{'bucket':>8} {'var':>6} {'inputs':>6} {'sep':>4} {'out entries':>14} "
                         f"{'joint entries':>14} {'table':>6} {'rows <=':>14}")
            for mb in sorted(shown, key=lambda mb: mb.index):
                lines.append(f"{mb.index:>8} {mb.var:>6} {len(mb.functions) + len(mb.messages):>6} "
                             f"{len(mb.scope):>4} {mb.out_entries:>14,} {mb.joint_entries:>14,} "
                             f"{'sparse' if mb.sparse else 'dense':>6} {mb.rows:>14,}")
            if len(self.minibuckets) > limit:
                lines.append(f"({len(self.minibuckets) - limit} smaller mini-buckets not shown)")
        return "\n".join(lines)


@dataclass(frozen=True)
class Placement:
    """Where each mini-bucket of a plan runs for a device budget, decided before any engine runs
    (as cotengra decides slices), so it can be printed (`gpusolve info --gpu-mem-limit`) and tested.

    `host`: the whole plan has fewer joint entries than the host limit, so the CPU finishes it
    before CUDA would have started. `device`: the bucket's host inputs, its message and the
    messages kept so far fit the budget beside the original tables (on the device when they fit
    half of it). `streamed`: its message is built in chunks of output rows, `lead[i]` leading
    separator variables fixed per chunk (CHUNKS_IN_FLIGHT in flight), and kept in host memory.
    """

    budget: int | None
    where: tuple[str, ...]
    lead: tuple[int, ...]

    def streamed_bytes(self, plan: Plan) -> int:
        """Bytes of the messages kept in host memory: each crosses the bus to the host and back."""
        return sum(plan.out_bytes(mb) for mb in plan.minibuckets if self.where[mb.index] == "streamed")

    def describe(self, plan: Plan, domains) -> str:
        counts = {w: self.where.count(w) for w in dict.fromkeys(self.where)}
        head = (f"placement for a device budget of {fmt_bytes(self.budget)}: " if self.budget is not None
                else "placement: ") + ", ".join(f"{c} {w}" for w, c in counts.items())
        lines = [head]
        for mb in plan.minibuckets:
            if self.where[mb.index] == "streamed":
                rows = math.prod(domains[u] for u in mb.scope[self.lead[mb.index]:])
                lines.append(f"  bucket {mb.index} (variable {mb.var}): streamed, {self.lead[mb.index]} leading "
                             f"separator variable(s) fixed per chunk, {rows:,} rows per chunk")
        return "\n".join(lines)


def streamed_lead(sep, host_scopes, domains, room: int, itemsize: int = 8) -> int:
    """Fewest leading separator variables to fix per chunk of a streamed message such that
    CHUNKS_IN_FLIGHT chunks (their output rows and the slices of the host inputs over
    `host_scopes` they upload) fit `room` device bytes."""
    def chunk_bytes(k: int) -> int:
        fixed = set(sep[:k])
        return itemsize * (math.prod(domains[u] for u in sep[k:]) + sum(
            math.prod(domains[u] for u in s if u not in fixed) for s in host_scopes))
    return next((k for k in range(len(sep) + 1) if CHUNKS_IN_FLIGHT * chunk_bytes(k) <= room), len(sep))


def place(problem: Problem, plan: Plan, budget: int | None, host_max: int = 0) -> Placement:
    """The placement of `plan` for `budget` device bytes (None: a CPU engine, everything on the host)."""
    n = len(plan.minibuckets)
    if budget is None or sum(mb.joint_entries for mb in plan.minibuckets) < host_max:
        return Placement(budget, ("host",) * n, (0,) * n)
    dom = problem.domains
    originals_on_device = plan.original_bytes <= budget // 2
    held = plan.original_bytes if originals_on_device else 0
    on_host: set[int] = set()  # streamed messages
    where, lead = [], []
    for mb in plan.minibuckets:
        out = plan.out_bytes(mb)
        host_scopes = ([] if originals_on_device else [problem.functions[i].scope for i in mb.functions]) + \
            [plan.minibuckets[j].scope for j in mb.messages if j in on_host]
        host_in = sum(math.prod(dom[u] for u in s) for s in host_scopes) * plan.itemsize
        if held + out + host_in <= budget:
            where.append("device")
            lead.append(0)
            held += out
            continue
        where.append("streamed")
        lead.append(streamed_lead(mb.scope, host_scopes, dom, max(budget - held, 0), plan.itemsize))
        on_host.add(mb.index)
    return Placement(budget, tuple(where), tuple(lead))


def cover_bound(scope, items, dom) -> int:
    """Upper bound on the feasible rows of a join of `items` ((scope, feasible rows) pairs) over `scope`.

    A row is determined by its projections onto the chosen tables' scopes and
    its values of the uncovered variables, so rows <= product of the chosen
    tables' rows (each capped by its projection's dense size) times the domains
    of the uncovered variables. Tables are chosen greedily while they shrink the bound.
    """
    scope = set(scope)
    cands = [(set(s) & scope, r) for s, r in items]
    cands = [(s, min(r, math.prod(dom[u] for u in s))) for s, r in cands if s]
    uncovered, bound = set(scope), 1
    while True:
        ratios = [(r / math.prod(dom[u] for u in s & uncovered), i)
                  for i, (s, r) in enumerate(cands) if s & uncovered]
        if not ratios or min(ratios)[0] >= 1:
            return bound * math.prod(dom[u] for u in uncovered)
        s, r = cands[min(ratios)[1]]
        bound *= r
        uncovered -= s


def joint_bound(problem: Problem, v: int, sep, functions, messages) -> tuple[int, int]:
    """Upper bounds on the feasible rows of a bucket's joint table and of its message.

    Every input holds `v`, so the joint is bounded value by value of `v`: the
    sum over a of cover_bound over the separator of the inputs' rows with v = a
    (a function's exact count; a message's rows capped by its size without v).
    `messages` are (scope, rows) pairs.
    """
    dom = problem.domains
    sep = set(sep)
    per_value = []
    for i in functions:
        f = problem.functions[i]
        k = f.scope.index(v)
        counts = (f.table < problem.top).sum(axis=tuple(j for j in range(f.arity) if j != k))
        per_value.append((set(f.scope) - {v}, [int(c) for c in counts]))
    for scope, rows in messages:
        rest = set(scope) - {v}
        per_value.append((rest, [min(rows, math.prod(dom[u] for u in rest))] * dom[v]))
    joint = min(math.prod(dom[u] for u in sep) * dom[v],
                sum(cover_bound(sep, [(s, c[a]) for s, c in per_value], dom) for a in range(dom[v])))
    items = [(s, sum(c)) for s, c in per_value]
    return joint, min(joint, cover_bound(sep, items, dom))


def build_plan(problem: Problem, order: list[int], z: int | None = None,
               n_components: int = 1, tables: str = "dense", limits: Limits = DEFAULT) -> Plan:
    """Place functions in buckets and partition buckets into mini-buckets of <= z variables.

    Partitioning follows Dechter & Rish: largest scopes first, first fit.
    `tables` chooses dense or sparse tables per mini-bucket: sparse needs
    keys that fit 63 bits; auto also needs a predicted joint feasible share
    of at most SPARSE_FRACTION (from joint_bound on the inputs' feasible rows).
    `limits` size the sparse workspace, here and in the engine that runs the plan.
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
            joint_rows, rows = out * dom[v], out
            if tables != "dense" and out * dom[v] <= KEY_LIMIT:  # beyond, dense whatever its bound (which is
                # slow to count on wide separators and only loosens the bounds of later buckets, whose
                # joint tables then are at least KEY_LIMIT / dom[v] entries: no budget holds such a plan)
                joint_rows, rows = joint_bound(
                    problem, v, sep, [i for k, i in members if k == "f"],
                    [(minibuckets[i].scope, minibuckets[i].rows) for k, i in members if k == "m"])
            sparse = tables != "dense" and out * dom[v] <= KEY_LIMIT and (
                tables == "sparse" or joint_rows <= SPARSE_FRACTION * out * dom[v])
            mb = MiniBucket(
                index=len(minibuckets), var=v,
                functions=tuple(i for k, i in members if k == "f"),
                messages=tuple(i for k, i in members if k == "m"),
                scope=sep, out_entries=out, joint_entries=out * dom[v],
                sparse=sparse, rows=rows, joint_rows=joint_rows)
            minibuckets.append(mb)
            buckets[v].append(mb.index)
            if sep:
                pending[sep[-1]].append((frozenset(sep), "m", mb.index))
            else:
                roots.append(mb.index)
    original = sum(f.entries for f in problem.functions) * itemsize
    return Plan(order=list(order), z=z, minibuckets=minibuckets, buckets=buckets,
                constants=constants, roots=roots, induced_width=width, n_components=n_components,
                itemsize=itemsize, original_bytes=original, position=pos, tables=tables, limits=limits)


def choose_plan(problem: Problem, order: list[int], z: int | None, budget: int,
                n_components: int = 1, tables: str = "dense", limits: Limits = DEFAULT) -> Plan:
    """Exact BE when it fits (or MBE(z) when z is given), else the largest z that fits.

    With tables auto, a plan that does not fit with its per-bucket choice is tried all sparse
    (its bound on rows may fit where dense tables do not) before mini-buckets.
    """
    max_arity = max((f.arity for f in problem.functions), default=0)
    if z is not None and z < max(max_arity, 1):
        raise ValueError(f"--z {z} is smaller than the largest arity ({max_arity}); z counts every "
                         f"variable of a mini-bucket, the eliminated one included")
    found = plan_within(problem, order, z, budget, n_components, tables, limits)
    if found is not None:
        return found
    plan = build_plan(problem, order, z, n_components, tables, limits)
    fitting = largest_fitting_z(problem, order, budget, max_arity, plan.induced_width + 1, n_components, limits)
    if z is None and fitting is not None:
        return fitting
    big = plan.largest()
    advice = (f"the largest z that fits is {fitting.z} (raise --mem-limit or pass --z)" if fitting is not None
              and z is None else "no mini-bucket bound fits either (raise --mem-limit)")
    what = "exact bucket elimination" if z is None else f"MBE(z={z})"
    raise BudgetError(
        f"{what} needs {fmt_bytes(plan.peak_bytes)} but the memory budget is {fmt_bytes(budget)}; "
        f"largest bucket: variable {big.var}, {len(big.scope)} separator variables, "
        f"{big.out_entries:,} entries = {fmt_bytes(big.out_entries * plan.itemsize)}; {advice}")


def plan_within(problem: Problem, order: list[int], z: int | None, budget: int, n_components: int = 1,
                tables: str = "dense", limits: Limits = DEFAULT) -> Plan | None:
    """The plan at z if it fits the budget (with tables auto, tried all sparse too), else None."""
    plan = build_plan(problem, order, z, n_components, tables, limits)
    if plan.peak_bytes <= budget:
        return plan
    if tables == "auto":
        plan = build_plan(problem, order, z, n_components, "sparse", limits)
        if plan.peak_bytes <= budget:
            return plan
    return None


class PlansByZ(dict):
    """The dense MBE plans of one problem and order, by z, each built at its first use: plan_schedule's
    choices and bounded sparse BE's cheap run scan the same z's (cap131: 0.22 -> 0.14 s of schedule)."""

    def __init__(self, problem: Problem, order: list[int], n_components: int = 1, limits: Limits = DEFAULT,
                 before: Callable[[], None] | None = None):
        super().__init__()
        self.problem, self.order, self.n_components, self.limits = problem, order, n_components, limits
        self.before = before  # called before each plan is built (plan_schedule's settle may end planning there)

    def __missing__(self, z: int) -> Plan:
        if self.before is not None:
            self.before()
        plan = self[z] = build_plan(self.problem, self.order, z, self.n_components, limits=self.limits)
        return plan


def largest_fitting_z(problem, order, budget, max_arity, upper, n_components=1,
                      limits: Limits = DEFAULT, plans: PlansByZ | None = None) -> Plan | None:
    """MBE plans shrink as z decreases; scan down from the exact width. `plans`: the caller's, for these
    arguments, shared."""
    plans = PlansByZ(problem, order, n_components, limits) if plans is None else plans
    for z in range(upper, max(max_arity, 1) - 1, -1):
        plan = plans[z]
        if plan.peak_bytes <= budget:
            return plan
    return None
