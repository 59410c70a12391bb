"""Distributed solving of DCOPs: DPOP and ADPOP, every agent's work a Dask task.

DPOP (Petcu & Faltings 2005) is bucket elimination along a DFS pseudo tree:
each agent joins its constraints with the UTIL messages of its children,
minimises its variable out and sends the result, over its *separator*, to its
parent; the root learns the optimum and VALUE messages carry the chosen
values back down. ADPOP bounds the dimension of UTIL messages to `max_dim`
separator variables: an agent splits its bucket into mini-buckets (as MBE(z)
with z = max_dim + 1) and sends each mini-bucket's message to the ancestor
holding the deepest variable of its scope; the root's sum is a lower bound,
the cost of the values chosen an upper bound. Mini-bucket messages
underestimate, so those values may break a hard constraint the messages lost:
they are then repaired centrally (`repair`: local search from them, else
MAC's first solution), and the result says how, or that MAC proved there is
no feasible assignment, or that none was found within the repair's budget.

Here the pseudo tree is networkx's DFS from the most-connected variable,
visiting the most-connected neighbours first; its post-order is an
elimination order, so the separators and mini-buckets are those of
`plan.build_plan` on it, and the UTIL computation is the dense step of the
engines `solve` uses (NumPy, or CuPy on a worker with a GPU). Each UTIL and
VALUE computation is a plain function of plain data (`util`, `value`)
submitted to Dask with the messages it waits for as arguments, so the
pseudo tree *is* the task graph: an embedded LocalCluster (processes,
threads for small problems), a running cluster (`scheduler`), or this
process alone (`"inline"`, no Dask needed).

Agents holding several variables (FRODO's `agent` attribute, pyDCOP's
`must_host` hints): the pseudo tree is over variables, and an agent runs the
computations of all its variables, one at a time. A message between two
variables of the same agent stays inside it (not counted, no latency).

Simulated runtime (Sultanik et al. 2007, as the GPU-DBE papers use it): every
computation's time is measured where it ran; an agent starts a computation
once its inputs arrived (sender's finish plus `latency` per message) and it
is free; the run ends when the last VALUE computation does. Pseudo-tree
construction is centralised here and reported apart.
"""
from __future__ import annotations

import heapq
import itertools
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np

from gpusolve.distributed import cluster as scaleout
from gpusolve.engines import registry
from gpusolve.inference.eliminate import bucket_costs
from gpusolve.order.graph import components, primal_graph
from gpusolve.model.problem import Problem
from gpusolve.plan.buckets import MiniBucket, Plan, build_plan
from gpusolve.host import BudgetError
from gpusolve.host import fmt_bytes
from gpusolve.limits import DEFAULT, Limits
from gpusolve.order.pseudo_tree import PseudoTree, pseudo_tree
from gpusolve.stop import Stop, Stopped

ALGOS = ("dpop", "adpop")
_RUNS = itertools.count()  # distinguishes the task keys of successive runs on one cluster


class DcopError(ValueError):
    """A DCOP run that cannot start: unknown algorithm, bad --max-dim (exit code 2)."""


def agent_of(problem: Problem) -> tuple[str, ...]:
    """The agent holding each variable: the file's, else an agent of its own named after it."""
    return tuple(v.agent or v.name for v in problem.variables)


def dfs_order(problem: Problem) -> list[int]:
    """Post-order of the DFS pseudo tree: networkx DFS from each component's most-connected variable,
    most-connected neighbours first (ties: smaller index). Children come before parents."""
    import networkx as nx
    g = primal_graph(problem)
    G = nx.Graph()
    G.add_nodes_from(g)
    G.add_edges_from((u, v) for u, nb in g.items() for v in nb if u < v)

    def most_connected(nodes):
        return sorted(nodes, key=lambda u: (-len(g[u]), u))
    order: list[int] = []
    for comp in components(g):
        order += nx.dfs_postorder_nodes(G, most_connected(comp)[0], sort_neighbors=most_connected)
    return order


@dataclass(frozen=True)
class DcopPlan:
    """What the agents will compute, built without running anything: the pseudo tree, each variable's
    agent, and the mini-buckets (one per variable for DPOP) with their message scopes and sizes."""

    tree: PseudoTree
    plan: Plan
    agent: tuple[str, ...]
    max_dim: int | None  # None: DPOP

    def dest(self, mb: MiniBucket) -> int:
        """The variable whose bucket receives mb's UTIL message (-1: a constant, kept by the root)."""
        return mb.scope[-1] if mb.scope else -1

    def inbox(self, var: int) -> list[int]:
        """Mini-buckets whose messages var's bucket receives, in plan order."""
        return [j for m in self.plan.buckets.get(var, ()) for j in self.plan.minibuckets[m].messages]

    def internal(self, mb: MiniBucket) -> bool:
        """A message between two variables of one agent never leaves it."""
        return mb.scope == () or self.agent[mb.var] == self.agent[self.dest(mb)]

    def messages(self) -> dict:
        """Messages between agents: UTIL (entries each) and VALUE (one value per separator variable)."""
        util = [mb.out_entries for mb in self.plan.minibuckets if not self.internal(mb)]
        value = [len(self.tree.context[v]) for v, p in enumerate(self.tree.parent)
                 if p >= 0 and self.agent[v] != self.agent[p]]
        return {"util": len(util), "util_entries": sum(util), "largest_util": max(util, default=0),
                "value": len(value), "value_entries": sum(value), "total": len(util) + len(value),
                "total_entries": sum(util) + sum(value)}


def plan_dcop(problem: Problem, algo: str = "dpop", max_dim: int | None = None) -> DcopPlan:
    if algo not in ALGOS:
        raise DcopError(f"unknown algorithm {algo!r} (choose {', '.join(ALGOS)})")
    arity = max((f.arity for f in problem.functions), default=0)
    if algo == "adpop":
        if max_dim is None:
            raise DcopError("--algo adpop needs --max-dim K (UTIL messages of at most K variables)")
        if max_dim < max(arity - 1, 0):
            raise DcopError(f"--max-dim {max_dim} is below the largest arity minus one ({arity - 1}): a constraint "
                            f"of {arity} variables already sends a message of {arity - 1}")
    order = dfs_order(problem)
    tree = pseudo_tree(len(problem.variables), [f.scope for f in problem.functions], order)
    z = None if algo == "dpop" else max_dim + 1
    plan = build_plan(problem, order, z, len(tree.roots), "dense")
    return DcopPlan(tree, plan, agent_of(problem), None if algo == "dpop" else max_dim)


# --- the units of work: plain functions of plain data --------------------------------------------

def util(mb: MiniBucket, scopes: tuple, domains: tuple, top, integer: bool, device: str,
         functions: list, *received) -> tuple[np.ndarray, float, str]:
    """One UTIL computation: join-sum the agent's constraints (`functions`, (table, scope) pairs) and
    the messages received (results of `util`, over `scopes`), minimise mb.var out.
    Returns (message on the host, seconds, engine name)."""
    return scaleout.bucket_message(mb, tuple(s for _, s in functions) + scopes, domains, top, integer, device,
                                   "min", *(t for t, _ in functions), *(r[0] for r in received))


def value(var: int, domain: int, top, integer: bool, functions: list, scopes: tuple, above, *received):
    """One VALUE computation: the value of `var` minimising its bucket (its constraints and the
    messages it received) given the values above it (the parent's result; None at a root).
    Returns (values chosen on the path to var, seconds, (seconds, engine) of each message received)."""
    t0 = time.perf_counter()
    chosen = dict(above[0]) if above is not None else {}
    inputs = functions + [(r[0], s) for r, s in zip(received, scopes)]
    chosen[var] = int(bucket_costs(np, inputs, var, domain, chosen, top, np.int64 if integer else np.float64).argmin())
    return chosen, time.perf_counter() - t0, [r[1:] for r in received]


# --- where the units run -------------------------------------------------------------------------

class _Done:
    """The result of a unit run at once (the inline executor's future)."""

    def __init__(self, result):
        self.value = result

    def result(self):
        return self.value


class Inline:
    """Runs each unit of work when submitted, in this process: the same functions, no Dask."""

    def submit(self, fn, *args, key=None, pure=False):
        return _Done(fn(*(a.result() if isinstance(a, _Done) else a for a in args)))

    def gather(self, futures):
        return [f.result() for f in futures]


@contextmanager
def executor(scheduler: str | None, workers: int | None, threads: bool, device: str):
    """The inline executor for "inline", else scaleout.executor's Dask client (one worker per GPU
    for --device gpu).
    Yields (client, what it is, seconds it took to start)."""
    if scheduler == "inline":
        yield Inline(), "inline (this process, no Dask)", 0.0
        return
    with scaleout.executor(scheduler, workers, threads and device != "gpu", gpus=device == "gpu") as got:
        yield got


# --- a run ---------------------------------------------------------------------------------------

@dataclass
class DcopResult:
    file: str
    algo: str
    max_dim: int | None
    status: str  # optimal | bounded | infeasible
    lower_bound: float | int | None
    upper_bound: float | int | None
    assignment: list[int] | None
    values: list[str] | None  # the assignment as the file's value names (None: the file names none)
    agents: int
    variables: int
    induced_width: int
    messages: dict
    wall_s: float  # first task submitted to the last result back
    simulated_s: float  # critical path of measured computations plus latency per message
    util_simulated_s: float  # the same, up to the end of the UTIL phase
    latency_s: float
    compute_s: float  # all computations added up
    cluster_s: float  # starting (or joining) the cluster
    pseudo_tree_s: float
    executor: str
    engines: list[str] = field(default_factory=list)
    time_s: float = 0.0
    repair_s: float = 0.0  # local search on ADPOP's values, centralised like the pseudo tree
    message: str | None = None  # how the upper bound was found when ADPOP's values were infeasible

    def to_json(self) -> dict:
        return asdict(self)


def simulated_runtime(dp: DcopPlan, util_s: dict[int, float], value_s: dict[int, float],
                      latency: float) -> tuple[float, float]:
    """(end of the run, end of the UTIL phase) in simulated time: a discrete-event run where each
    agent computes one thing at a time, in the order its inputs arrive."""
    mbs = dp.plan.minibuckets
    tree = dp.tree
    # tasks: ("u", i) mini-bucket i's UTIL computation, ("v", var) var's VALUE computation;
    # succ: task -> (task it feeds, delay of the message); waiting: inputs a task still lacks
    succ: dict[tuple, list[tuple[tuple, float]]] = {}
    waiting: dict[tuple, int] = {}
    for mb in mbs:
        task = ("u", mb.index)
        waiting.setdefault(task, 0)
        waiting.setdefault(("v", mb.var), 0)
        succ.setdefault(task, []).append((("v", mb.var), 0.0))
        waiting[("v", mb.var)] += 1
        if mb.scope:
            hop = 0.0 if dp.internal(mb) else latency
            for m in dp.plan.buckets[dp.dest(mb)]:
                succ[task].append((("u", m), hop))
                waiting[("u", m)] = waiting.get(("u", m), 0) + 1
    for v, p in enumerate(tree.parent):
        waiting.setdefault(("v", v), 0)
        if p >= 0:
            succ.setdefault(("v", p), []).append((("v", v), 0.0 if dp.agent[v] == dp.agent[p] else latency))
            waiting[("v", v)] += 1
    ready = [(0.0, t) for t, n in waiting.items() if n == 0]
    heapq.heapify(ready)
    arrival = {t: 0.0 for t in waiting}
    free: dict[str, float] = {}
    end = util_end = 0.0
    while ready:
        at, task = heapq.heappop(ready)
        kind, i = task
        agent = dp.agent[mbs[i].var if kind == "u" else i]
        finish = max(at, free.get(agent, 0.0)) + (util_s[i] if kind == "u" else value_s[i])
        free[agent] = finish
        end = max(end, finish)
        if kind == "u":
            util_end = max(util_end, finish)
        for nxt, hop in succ.get(task, ()):
            arrival[nxt] = max(arrival[nxt], finish + hop)
            waiting[nxt] -= 1
            if waiting[nxt] == 0:
                heapq.heappush(ready, (arrival[nxt], nxt))
    return end, util_end


def solve_dcop(problem: Problem, algo: str = "dpop", max_dim: int | None = None, device: str = "auto",
               scheduler: str | None = None, workers: int | None = None, latency: float = 0.0,
               file: str = "", progress: Callable[[int], Callable[[], None]] | None = None,
               mem_limit: int | None = None, limits: Limits = DEFAULT) -> DcopResult:
    """Run DPOP or ADPOP on `problem`; raises DcopError for what the user can fix, BudgetError when
    the UTIL messages (all kept until the VALUE phase) and a bucket's workspace exceed `mem_limit`
    (default: this host's available memory; a cluster's workers together may hold more). `limits`:
    when threads serve (threads_below) and how long a repair tries (repair_sweeps, repair_nodes).

    `progress(total)` returns a callback called once per computation finished.
    """
    from gpusolve.host import available_memory
    t0 = time.perf_counter()
    dp = plan_dcop(problem, algo, max_dim)
    tree_s = time.perf_counter() - t0
    budget = mem_limit if mem_limit is not None else available_memory()
    if dp.plan.peak_bytes > budget:
        big = dp.plan.largest()
        raise BudgetError(f"{algo.upper()} needs {fmt_bytes(dp.plan.peak_bytes)} for its UTIL messages but the "
                          f"memory budget is {fmt_bytes(budget)}; largest message: {len(big.scope)} separator "
                          f"variables, {big.out_entries:,} entries (try --algo adpop --max-dim K, or --mem-limit)")
    joint = sum(mb.joint_entries for mb in dp.plan.minibuckets)
    threads = joint < limits.threads_below
    with executor(scheduler, workers, threads, device) as (client, description, cluster_s):
        t1 = time.perf_counter()
        utils, values, roots = _submit(client, problem, dp, device)
        tick = progress(len(utils) + len(values)) if progress else None
        if tick is not None and not isinstance(client, Inline):
            from dask.distributed import as_completed
            for _ in as_completed(list(utils.values()) + list(values.values())):
                tick()
        results = client.gather([values[v] for v in range(len(problem.variables))] + [utils[r] for r in roots])
        wall = time.perf_counter() - t1
    n = len(problem.variables)
    chosen: dict[int, int] = {}
    value_s, util_s, engines = {}, {}, set()
    for v, (path, seconds, received) in enumerate(results[:n]):
        chosen.update(path)
        value_s[v] = seconds
        for j, (s, engine) in zip(dp.inbox(v), received):
            util_s[j] = s
            engines.add(engine)
    for r, (_, seconds, engine) in zip(roots, results[n:]):
        util_s[r] = seconds
        engines.add(engine)
    const = [problem.functions[i].table[()] for i in dp.plan.constants]
    lower = problem.total(const + [results[n + k][0][()] for k in range(len(roots))])
    assignment = [chosen[v] for v in range(n)]
    upper = problem.evaluate(assignment)
    repair_s, message, none_exists = 0.0, None, problem.is_forbidden(lower)
    if not none_exists and problem.is_forbidden(upper):  # ADPOP only: DPOP's values are optimal
        t = time.perf_counter()
        assignment, none_exists, message = repair(problem, assignment, limits)
        repair_s = time.perf_counter() - t
        upper = problem.top if assignment is None else problem.evaluate(assignment)
    if none_exists:
        status, lo, hi, assignment = "infeasible", None, None, None
    else:
        status = "optimal" if problem.bounds_meet(lower, upper) else "bounded"
        lo, hi = problem.file_bounds(lower, None if problem.is_forbidden(upper) else upper)
    simulated, util_end = simulated_runtime(dp, util_s, value_s, latency)
    return DcopResult(
        file=file, algo=algo, max_dim=dp.max_dim, status=status, lower_bound=lo, upper_bound=hi,
        assignment=assignment, values=problem.value_labels(assignment), agents=len(set(dp.agent)), variables=n, induced_width=dp.plan.induced_width,
        messages=dp.messages(), wall_s=wall, simulated_s=simulated, util_simulated_s=util_end,
        latency_s=latency, compute_s=sum(util_s.values()) + sum(value_s.values()), cluster_s=cluster_s,
        pseudo_tree_s=tree_s, executor=description, engines=sorted(engines) or [registry.for_place(on_device=False).name],
        time_s=time.perf_counter() - t0, repair_s=repair_s, message=message)


def repair(problem: Problem, assignment: list[int],
           limits: Limits = DEFAULT) -> tuple[list[int] | None, bool, str]:
    """A feasible assignment in place of ADPOP's infeasible `assignment`: local search from it (seeded,
    stopping at the first found or after limits.repair_sweeps sweeps), else MAC's first solution within
    limits.repair_nodes nodes. Returns (the assignment or None, whether MAC proved there is none, what happened)."""
    from gpusolve.search.local import local_search
    from gpusolve.search.mac import Mac
    found = Stop()  # interrupted by the first feasible point
    best, _ = local_search(problem, [assignment], found, np.random.default_rng(0), max_sweeps=limits.repair_sweeps,
                           on_improve=lambda cost, a: setattr(found, "interrupted", True))
    broke = "ADPOP's values break a hard constraint"
    if best is not None:
        return best, False, f"{broke}; local search from them found the upper bound's assignment"
    mac = Mac(problem, max_nodes=limits.repair_nodes, limits=limits)
    try:
        best = mac.run()
    except Stopped:
        return None, False, (f"{broke}; neither {limits.repair_sweeps} sweeps of local search from them nor "
                             f"{limits.repair_nodes:,} nodes of MAC found a feasible assignment: no upper bound")
    if best is None:
        return None, True, f"{broke}, and MAC proved that no assignment satisfies the hard constraints"
    if problem.is_forbidden(problem.evaluate(best)):  # every table allows it, their sum reaches top
        return None, False, f"{broke}; MAC's first solution costs top: no upper bound"
    return best, False, f"{broke}; MAC found the upper bound's assignment ({mac.stats.nodes:,} nodes)"


def _submit(client, problem: Problem, dp: DcopPlan, device: str):
    """Every UTIL and VALUE computation, each waiting on the results it reads. Returns
    (UTIL futures by mini-bucket, VALUE futures by variable, the mini-buckets of constant messages)."""
    plan, tree = dp.plan, dp.tree
    dom = tuple(problem.domains)
    run = next(_RUNS)
    tables = [(f.table, f.scope) for f in problem.functions]
    utils: dict[int, object] = {}
    for mb in plan.minibuckets:
        scopes = tuple(plan.minibuckets[j].scope for j in mb.messages)
        utils[mb.index] = client.submit(
            util, mb, scopes, dom, problem.top, problem.integer, device, [tables[i] for i in mb.functions],
            *(utils[j] for j in mb.messages), key=f"util-{dp.agent[mb.var]}-{mb.var}-{mb.index}-r{run}", pure=False)
    values: dict[int, object] = {}
    for v in reversed(plan.order):  # parents first
        inbox = dp.inbox(v)
        own = [tables[i] for m in plan.buckets[v] for i in plan.minibuckets[m].functions]
        parent = tree.parent[v]
        values[v] = client.submit(
            value, v, dom[v], problem.top, problem.integer, own, tuple(plan.minibuckets[j].scope for j in inbox),
            values[parent] if parent >= 0 else None, *(utils[j] for j in inbox),
            key=f"value-{dp.agent[v]}-{v}-r{run}", pure=False)
    return utils, values, list(plan.roots)
