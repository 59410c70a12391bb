"""Real benchmark instances (../shared/instances) against their known optima."""
import csv
import math

import pytest

from gpusolve import parsers
from gpusolve.schedule.solve import Options, solve
from helpers import log10_partition, marginals

BUDGET = 1 << 30  # 1 GiB keeps CI fast; wider instances must still be bracketed


def optima(root):
    with open(root / "optima.csv") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_every_listed_instance_is_solved_or_bracketed(shared_instances):
    rows = optima(shared_instances)
    assert len(rows) >= 15
    for row in rows:
        problem = parsers.read(shared_instances / row["file"])
        r = solve(problem, Options(device="cpu", mem_limit=BUDGET))
        best = float(row["optimum"])
        if r.z is None:
            assert r.status == "optimal", row["file"]
            assert math.isclose(r.lower_bound, best, rel_tol=1e-9, abs_tol=1e-6), (row["file"], r.lower_bound)
            assert math.isclose(r.upper_bound, best, rel_tol=1e-9, abs_tol=1e-6)
        else:
            assert r.lower_bound <= best + 1e-6, row["file"]
            assert r.upper_bound is None or r.upper_bound >= best - 1e-6, row["file"]
        if r.assignment is not None:  # the incumbent is what the upper bound says it costs
            assert math.isclose(problem.to_file_value(problem.evaluate(r.assignment)), r.upper_bound,
                                rel_tol=1e-9, abs_tol=1e-6), row["file"]


def test_water_mpe_log10_probability(shared_instances):
    """The optimum listed in optima.csv (toulbar2's, evaluated in float64)."""
    best = next(float(row["optimum"]) for row in optima(shared_instances) if row["file"] == "water.uai")
    r = solve(parsers.read(shared_instances / "water.uai"), Options(device="cpu"))
    assert r.task == "MPE" and r.status == "optimal"
    assert r.lower_bound == pytest.approx(best, abs=1e-8)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["network.uai", "water.uai"])
def test_partition_function_and_marginals(shared_instances, name):
    """log10 Z to 1e-6 and marginals against an independent contraction by opt_einsum."""
    import numpy as np
    problem = parsers.read(shared_instances / name)
    pr = solve(problem, Options(device="cpu", task="PR"))
    assert pr.status == "optimal" and pr.lower_bound == pytest.approx(log10_partition(problem), abs=1e-6)
    mar = solve(problem, Options(device="cpu", task="MAR"))
    for v, m in enumerate(marginals(problem)):
        np.testing.assert_allclose(mar.marginals[v], m, atol=1e-9)


@pytest.mark.parametrize("name, by", [("404.wcsp", "BE"), pytest.param("CELAR6-SUB0.wcsp", "search", marks=pytest.mark.slow)])
def test_instances_reach_their_proven_optima(shared_instances, name, by):
    """404 by exact BE; CELAR6-SUB0, whose exact plan needs 1.6 TiB, by AND/OR search."""
    optimum = next(int(row["optimum"]) for row in optima(shared_instances) if row["file"] == name)
    problem = parsers.read(shared_instances / name)
    r = solve(problem, Options(device="cpu", mem_limit=8 << 30))
    assert r.status == "optimal"
    assert r.z is None if by == "BE" else r.search["complete"]
    assert r.lower_bound == r.upper_bound == optimum
    assert problem.to_file_value(problem.evaluate(r.assignment)) == optimum
