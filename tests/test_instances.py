"""Real benchmark instances (../shared/instances) against their known optima."""
import csv
import math

import pytest

import parsers
from gpusolve.solve import Options, solve

BUDGET = 1 << 30  # 1 GiB keeps CI fast; wider instances must still be bracketed


def optima(root):
    with open(root / "optima.csv") as f:
        return list(csv.DictReader(f))


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
        if r.assignment is not None:
            assert problem.to_file_value(problem.evaluate(r.assignment)) is not None


def test_water_mpe_log10_probability(shared_instances):
    r = solve(parsers.read(shared_instances / "water.uai"), Options(device="cpu"))
    assert r.task == "MPE" and r.status == "optimal"
    assert r.lower_bound == pytest.approx(-3.456446919, abs=1e-8)
