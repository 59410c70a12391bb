"""Generated networks: the section 8.1 recipes, the .wcsp round trip, and pytoulbar2 as reference."""
import math

import networkx as nx
import numpy as np
import pytest
from helpers import toulbar2_optimum

from gpusolve import parsers
from gpusolve.order import graph
from gpusolve.generate import generate, scalefree_edges
from gpusolve.schedule.solve import Options, solve
from gpusolve.parsers.wcsp import write_wcsp

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


def test_grid_is_networkx_grid_numbered_row_by_row():
    side = 5
    expected = sorted([(v, v + 1) for v in range(side * side) if (v + 1) % side]
                      + [(v, v + side) for v in range(side * (side - 1))])
    assert [f.scope for f in generate("grid", side * side, 2, seed=1).functions] == expected


def journal_scalefree(n, rng):
    """The journal's process as written: from one edge, each new node links to two nodes drawn
    with probability proportional to their degree (the reference for networkx's generator)."""
    edges, degree = [(0, 1)], [1, 1]
    for v in range(2, n):
        targets = rng.choice(v, size=2, replace=False, p=np.array(degree) / sum(degree))
        edges += [(int(t), v) for t in sorted(targets)]
        for t in targets:
            degree[t] += 1
        degree.append(2)
    return edges


@pytest.mark.slow
def test_scalefree_has_the_journals_degree_distribution():
    """networkx's Barabasi-Albert from a 2-node path draws what the journal describes: same edge
    count, and the same mean degrees of the first nodes and largest degree over 2000 graphs
    (standard error of each mean about 0.035)."""
    n, runs = 14, 2000
    ours = [scalefree_edges(n, np.random.default_rng(s)) for s in range(runs)]
    ref = [journal_scalefree(n, np.random.default_rng(10_000 + s)) for s in range(runs)]
    assert all(len(e) == 2 * (n - 2) + 1 for e in ours)

    def stats(edge_lists):
        degrees = [np.bincount(np.array(e).reshape(-1), minlength=n) for e in edge_lists]
        return np.array([np.mean([d[k] for d in degrees]) for k in (0, 2, 5)] + [np.mean([d.max() for d in degrees])])

    assert np.abs(stats(ours) - stats(ref)).max() < 0.2
