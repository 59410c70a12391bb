"""Generated networks: the section 8.1 recipes, the .wcsp round trip, and pytoulbar2 as reference."""
import math

import networkx as nx
import numpy as np
import pytest
from helpers import toulbar2_optimum

from gpusolve import parsers
from gpusolve import graph
from gpusolve.generate import generate
from gpusolve.solve import Options, solve
from gpusolve.parsers.write import write_wcsp

CASES = [(t, n, d, p2, seed) for seed, (t, n) in enumerate(
    [("random", 10), ("random", 12), ("scalefree", 12), ("scalefree", 14), ("grid", 16), ("grid", 9)] * 2)
    for d, p2 in [(3 + seed % 3, (0.2, 0.4, 0.6)[seed % 3])]]


def test_generator_recipes():
    r = generate("random", 10, 10, 0.3, 0.5, seed=7)
    assert len(r.functions) == math.floor(10 * 9 / 2 * 0.3)
    s = generate("scalefree", 12, 5, seed=7)
    assert len(s.functions) == 2 * (12 - 2) + 1
    for p in (r, s, generate("grid", 16, 3, seed=7)):
        assert nx.is_connected(nx.Graph(graph.primal_graph(p)))
        hard = np.mean([np.mean(f.table >= p.top) for f in p.functions])
        assert 0.3 < hard < 0.7
        assert all(f.table[f.table < p.top].max() <= 100 for f in p.functions)


@pytest.mark.parametrize("topology, n, d, p2, seed", CASES)
def test_wcsp_round_trip(tmp_path, topology, n, d, p2, seed):
    p = generate(topology, n, d, 0.3, p2, seed)
    path = tmp_path / "g.wcsp"
    write_wcsp(p, path)
    q = parsers.read(path)
    assert q.domains == p.domains and q.top == p.top and q.offset == p.offset
    assert [f.scope for f in q.functions] == [f.scope for f in p.functions]
    for f, g in zip(p.functions, q.functions):
        np.testing.assert_array_equal(f.table, g.table)


@pytest.mark.parametrize("topology, n, d, p2, seed", CASES)
def test_be_agrees_with_pytoulbar2(tmp_path, topology, n, d, p2, seed):
    path = tmp_path / "g.wcsp"
    optimum = toulbar2_optimum(generate(topology, n, d, 0.3, p2, seed), path)
    ours = solve(parsers.read(path), Options(device="cpu"))
    if optimum is None:
        assert ours.status == "infeasible"
    else:
        assert ours.status == "optimal" and ours.lower_bound == optimum
