"""Random binary networks as in GpuBE section 8.1: random, scale-free and grid topologies.

Costs are uniform integers in [0, 100]; each entry is forbidden with
probability p2 (the tightness); the graph is always connected. NumPy and the
model load when a problem is built, so the command line can offer
TOPOLOGIES without importing them.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpusolve.model.problem import Problem

TOPOLOGIES = ("random", "scalefree", "grid")
MAX_COST = 100
# Memory per table entry: the int64 table and its random draws, and the entry as .wcsp text while
# written (about 100 bytes measured at d = 300 and 600, the most of the three formats).
ENTRY_BYTES = 128


class GenerateError(ValueError):
    """Parameters that cannot give a problem (exit 2)."""


class GenerateBudget(GenerateError):
    """A problem whose tables would not fit in memory (exit 3)."""


def random_edges(n: int, p1: float, rng) -> list[tuple[int, int]]:
    """A random spanning tree plus random edges up to floor(n(n-1)/2 * p1) edges.

    Hand-written: networkx's G(n, m) is not connected for sparse m, and rejecting until it is
    never ends there. The journal writes floor(n(n-1) p1) edges, but its induced widths (Table 1:
    5.3, 6.4, 7.5 at n = 15, 17, 18) match half that (min-fill on 50 seeds: 4.8, 6.0, 6.7; the
    journal's count gives 8.8, 10.4, 11.2)."""
    target = max(n - 1, math.floor(n * (n - 1) / 2 * p1))
    perm = rng.permutation(n)
    edges = {tuple(sorted((int(perm[i]), int(perm[rng.integers(0, i)])))) for i in range(1, n)}
    while len(edges) < target:
        a, b = sorted(rng.choice(n, 2, replace=False).tolist())
        edges.add((a, b))
    return sorted(edges)


def scalefree_edges(n: int, rng) -> list[tuple[int, int]]:
    """Barabasi-Albert from one edge, each new node linked to two nodes chosen by degree (networkx's
    generator from a 2-node path: the journal's process); edges ordered by their newer node."""
    import networkx as nx
    if n == 2:
        return [(0, 1)]
    g = nx.barabasi_albert_graph(n, 2, seed=rng, initial_graph=nx.path_graph(2))
    return sorted(((min(e), max(e)) for e in g.edges()), key=lambda e: (e[1], e[0]))


def grid_edges(n: int) -> list[tuple[int, int]]:
    """networkx's side x side grid, node (r, c) numbered r * side + c, edges in sorted order."""
    import networkx as nx
    side = math.isqrt(n)
    if side * side != n:
        raise GenerateError(f"grid needs a square number of variables, got {n}")
    g = nx.grid_2d_graph(side, side)
    return sorted(tuple(sorted((r * side + c, rr * side + cc))) for (r, c), (rr, cc) in g.edges())


def generate(topology: str, n: int, d: int = 10, p1: float = 0.3, p2: float = 0.5,
             seed: int = 0) -> Problem:
    import numpy as np

    from gpusolve.model.problem import FORBIDDEN, CostFunction, Problem, Variable, finalize_integer
    if n < 2 or d < 1 or not 0 <= p1 <= 1 or not 0 <= p2 <= 1:
        raise GenerateError("need n >= 2, d >= 1, 0 <= p1 <= 1 and 0 <= p2 <= 1")
    rng = np.random.default_rng(seed)
    if topology == "random":
        edges = random_edges(n, p1, rng)
    elif topology == "scalefree":
        edges = scalefree_edges(n, rng)
    elif topology == "grid":
        edges = grid_edges(n)
    else:
        raise GenerateError(f"unknown topology {topology!r} (choose {', '.join(TOPOLOGIES)})")
    check_size(len(edges), d)
    functions = []
    for a, b in edges:
        table = rng.integers(0, MAX_COST + 1, size=(d, d)).astype(np.int64)
        table[rng.random((d, d)) < p2] = FORBIDDEN
        functions.append(CostFunction((a, b), table))
    name = f"{topology}-n{n}-d{d}-s{seed}"
    problem = Problem(name, [Variable(f"x{i}", d) for i in range(n)], functions)
    return finalize_integer(problem, len(edges) * MAX_COST + 1)


def check_size(tables: int, d: int) -> None:
    """Refuse, before any allocation, tables the readers would refuse or memory could not hold."""
    from gpusolve.host import available_memory
    from gpusolve.parsers.tables import MAX_TABLE
    entries = d * d
    if entries > MAX_TABLE:
        raise GenerateError(f"-d {d}: each binary table would hold {entries:,} entries, more than a file may "
                            f"declare (2^31): lower -d")
    need, free = tables * entries * ENTRY_BYTES, available_memory()
    if need > free:
        raise GenerateBudget(f"{tables} tables of {entries:,} entries need about {need / 2**30:,.1f} GiB to generate "
                             f"and write, more than the {free / 2**30:,.1f} GiB available: lower -d or -n")


def markov_grid(side: int, d: int = 2, seed: int = 0, p_zero: float = 0.0) -> Problem:
    """A side x side Markov grid (MPE/PR/MAR benchmarks): unary and pairwise potentials in [0.5, 1.5)."""
    import numpy as np

    from gpusolve.model.problem import CostFunction, Problem, Variable
    rng = np.random.default_rng(seed)
    n = side * side
    functions = [CostFunction((v,), rng.random(d) + 0.5) for v in range(n)]
    for a, b in grid_edges(n):
        t = rng.random((d, d)) + 0.5
        t[rng.random((d, d)) < p_zero] = 0.0
        functions.append(CostFunction((a, b), t))
    with np.errstate(divide="ignore"):
        for f in functions:
            f.table = -np.log10(f.table)
    return Problem(f"grid{side}x{side}-d{d}-s{seed}", [Variable(f"x{i}", d) for i in range(n)], functions,
                   integer=False, top=np.inf, sense=-1, task="MPE")


def queens(n: int) -> Problem:
    """N-queens as three AllDifferents over the rows x_i, the diagonals x_i + i and x_i - i."""
    import numpy as np

    from gpusolve.model.problem import FORBIDDEN, AllDifferent, Problem, Variable, finalize_integer
    rows = np.arange(n, dtype=np.int64)
    globals_ = [AllDifferent(tuple(range(n)), tuple(rows + shift * i for i in range(n)), FORBIDDEN)
                for shift in (0, 1, -1)]
    problem = Problem(f"queens-{n}", [Variable(f"q{i}", n) for i in range(n)], [], globals=globals_)
    return finalize_integer(problem, None)


def langford(n: int) -> Problem:
    """Langford's L(2, n): the positions of the two copies of each digit d (1..n) in 2n places,
    d other digits between them: p[2(d-1)+1] = p[2(d-1)] + d + 1 (its allowed pairs listed),
    all positions different."""
    import numpy as np

    from gpusolve.model.problem import FORBIDDEN, AllDifferent, Problem, TupleFunction, Variable, finalize_integer
    size = 2 * n
    places = np.arange(size, dtype=np.int64)
    functions = [TupleFunction((2 * (d - 1), 2 * (d - 1) + 1), (size, size),
                               np.stack([places[:size - d - 1], places[:size - d - 1] + d + 1], axis=1),
                               np.zeros(size - d - 1, dtype=np.int64), FORBIDDEN)
                 for d in range(1, n + 1)]
    globals_ = [AllDifferent(tuple(range(size)), tuple(places for _ in range(size)), FORBIDDEN)]
    problem = Problem(f"langford-2-{n}", [Variable(f"p{d // 2 + 1}{'ab'[d % 2]}", size) for d in range(size)],
                      functions, globals=globals_)
    return finalize_integer(problem, None)


CSP_MODELS = ("queens", "langford")


def csp_xcsp3(kind: str, n: int) -> str:
    """The XCSP3 text of `queens(n)` or `langford(n)` (the same variables, AllDifferents and
    constraints once read back), as pycsp3 writes them: N-queens' diagonals as allDifferent over
    add(q[i],i) / sub(q[i],i), Langford's gaps as intension constraints."""
    if kind not in CSP_MODELS or n < 1:
        raise GenerateError(f"need one of {', '.join(CSP_MODELS)} and n >= 1")
    if kind == "queens":
        body = [f'  <variables>\n    <array id="q" size="[{n}]"> 0..{n - 1} </array>\n  </variables>',
                "  <constraints>", "    <allDifferent> q[] </allDifferent>",
                "    <allDifferent> " + " ".join(f"add(q[{i}],{i})" for i in range(n)) + " </allDifferent>",
                "    <allDifferent> " + " ".join(f"sub(q[{i}],{i})" for i in range(n)) + " </allDifferent>"]
    else:
        body = [f'  <variables>\n    <array id="p" size="[{2 * n}]"> 0..{2 * n - 1} </array>\n  </variables>',
                "  <constraints>", "    <allDifferent> p[] </allDifferent>"]
        body += [f"    <intension> eq(p[{2 * d - 1}],add(p[{2 * d - 2}],{d + 1})) </intension>" for d in range(1, n + 1)]
    return '<instance format="XCSP3" type="CSP">\n' + "\n".join(body) + "\n  </constraints>\n</instance>\n"
