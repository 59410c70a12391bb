"""Primal graph, orderings and induced width (networkx as the independent reference)."""
import networkx as nx
import numpy as np
import pytest
from helpers import random_problem

from gpusolve import graph
from gpusolve.generate import generate
from gpusolve.model import CostFunction, Problem, Variable


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
    w = graph.induced_width(g, graph.elimination_order(p, "minfill", g))
    assert 5 <= w <= 6  # treewidth of a 5x5 grid is 5


def test_orderings_are_deterministic_and_per_component():
    rng = np.random.default_rng(0)
    p = random_problem(rng, n_max=12, f_max=12, n_components=3)
    g = graph.primal_graph(p)
    a = graph.elimination_order(p, "minfill", g)
    assert a == graph.elimination_order(p, "minfill", g)
    comp = {v: i for i, c in enumerate(graph.components(g)) for v in c}
    seen = [comp[v] for v in a]
    assert seen == sorted(seen), "components are eliminated one after another"


def test_induced_width_of_order_agrees_with_networkx_treewidth_bound():
    for seed in range(20):
        p = generate("random", 12, 2, 0.4, 0.5, seed=seed)
        g = graph.primal_graph(p)
        w = graph.induced_width(g, graph.elimination_order(p, "minfill", g))
        nx_w, _ = nx.algorithms.approximation.treewidth_min_fill_in(nx.Graph(g))
        assert w >= 1 and abs(w - nx_w) <= 2


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
