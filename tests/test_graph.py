"""Primal graph, orderings and induced width (networkx as the independent reference)."""
import itertools

import networkx as nx
import numpy as np
import pytest
from helpers import random_problem
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusolve.order import graph
from gpusolve.generate import generate
from gpusolve.model.problem import CostFunction, Problem, Variable


def networkx_induced_width(g, order) -> int:
    """The induced width of `order` by eliminating on a networkx graph: each variable's neighbours
    become a clique, then it goes."""
    h = nx.Graph(g)
    h.add_nodes_from(g)
    width = 0
    for v in order:
        nb = list(h.neighbors(v))
        width = max(width, len(nb))
        h.add_edges_from(itertools.combinations(nb, 2))
        h.remove_node(v)
    return width


def chain(n, d=3):
    fs = [CostFunction((i, i + 1), np.zeros((d, d), np.int64)) for i in range(n - 1)]
    return Problem("chain", [Variable(f"x{i}", d) for i in range(n)], fs, top=10)


def test_chain_has_width_one_and_orders_are_permutations():
    p = chain(8)
    for method in graph.ORDERINGS:
        order = graph.elimination_order(p, method)
        assert sorted(order) == list(range(8))
        assert graph.induced_width(graph.primal_graph(p), order) == 1


def test_grid_minfill_width_matches_side():
    p = generate("grid", 25, 2, seed=1)
    g = graph.primal_graph(p)
    assert nx.Graph(g).number_of_edges() == 40
    order = graph.elimination_order(p, "minfill", g)
    w = graph.induced_width(g, order)
    assert w == networkx_induced_width(g, order) and 5 <= w <= 6  # treewidth of a 5x5 grid is 5


def test_orderings_are_deterministic_and_per_component():
    rng = np.random.default_rng(0)
    p = random_problem(rng, n_max=12, f_max=12, n_components=3)
    g = graph.primal_graph(p)
    a = graph.elimination_order(p, "minfill", g)
    assert a == graph.elimination_order(p, "minfill", g)
    comp = {v: i for i, c in enumerate(graph.components(g)) for v in c}
    seen = [comp[v] for v in a]
    assert seen == sorted(seen), "components are eliminated one after another"


def test_induced_width_of_the_minfill_order_equals_networkx_elimination():
    for seed in range(20):
        p = generate("random", 12, 2, 0.4, 0.5, seed=seed)
        g = graph.primal_graph(p)
        order = graph.elimination_order(p, "minfill", g)
        assert graph.induced_width(g, order) == networkx_induced_width(g, order) >= 1


@st.composite
def graphs(draw):
    """A graph on 1..12 variables as {variable: neighbours}."""
    n = draw(st.integers(1, 12))
    edges = draw(st.sets(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)).filter(lambda e: e[0] < e[1])))
    g = {v: set() for v in range(n)}
    for u, v in edges:
        g[u].add(v)
        g[v].add(u)
    return g


@settings(max_examples=100, deadline=None)  # no deadline: a loaded machine is not a failure
@given(g=graphs(), data=st.data())
def test_any_order_has_the_width_networkx_finds_and_orderings_are_permutations(g, data):
    """For any order the induced width is networkx's, never below the graph's degeneracy (a lower
    bound on treewidth); each ordering method returns a permutation of the variables."""
    order = data.draw(st.permutations(sorted(g)))
    degeneracy = max(nx.core_number(nx.Graph(g)).values())
    assert graph.induced_width(g, order) == networkx_induced_width(g, order) >= degeneracy
    problem = Problem("g", [Variable(f"x{v}", 2) for v in g],
                      [CostFunction((u, v), np.zeros((2, 2), np.int64)) for u in g for v in g[u] if u < v], top=10)
    assert graph.primal_graph(problem) == g
    for method in graph.ORDERINGS:
        order = graph.elimination_order(problem, method)
        assert sorted(order) == sorted(g)
        assert graph.induced_width(g, order) == networkx_induced_width(g, order) >= degeneracy


def reference_order(g, method):
    """The greedy ordering by its definition on a networkx graph: component by component (by smallest
    variable), the variable of least (fill-in, degree) for minfill, (degree, fill-in) for mindegree,
    ties to the smallest, eliminated by joining its neighbours."""
    order = []
    for comp in sorted(nx.connected_components(nx.Graph(g)), key=min):
        h = nx.Graph(g).subgraph(comp).copy()
        h.add_nodes_from(comp)
        while h:
            def score(v):
                nb = list(h.neighbors(v))
                fill = sum(not h.has_edge(a, b) for a, b in itertools.combinations(nb, 2))
                return (fill, len(nb)) if method == "minfill" else (len(nb), fill)
            v = min(h, key=lambda u: (score(u), u))
            h.add_edges_from(itertools.combinations(list(h.neighbors(v)), 2))
            h.remove_node(v)
            order.append(v)
    return order


@settings(max_examples=100, deadline=None)
@given(g=graphs())
def test_greedy_orderings_follow_their_definition(g):
    """The bit-set ordering, which recomputes scores only where they can change, picks what the
    definition picks at every step."""
    problem = Problem("g", [Variable(f"x{v}", 2) for v in g],
                      [CostFunction((u, v), np.zeros((2, 2), np.int64)) for u in g for v in g[u] if u < v], top=10)
    for method in graph.ORDERINGS:
        assert graph.elimination_order(problem, method) == reference_order(g, method)


def test_read_order_file(tmp_path):
    f = tmp_path / "o.txt"
    f.write_text("2 0\n1 # comment\n")
    assert graph.read_order(f, 3) == [2, 0, 1]
    f.write_text("2 0 0\n")
    with pytest.raises(graph.OrderError, match="appears twice"):
        graph.read_order(f, 3)
    f.write_text("2 x 1\n")
    with pytest.raises(graph.OrderError, match=r"o.txt:1: 'x' is not a variable index"):
        graph.read_order(f, 3)
    f.write_text("0 1 7\n")
    with pytest.raises(graph.OrderError, match="out of range"):
        graph.read_order(f, 3)
