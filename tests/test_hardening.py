"""Adversarial inputs: sizes checked against the budget before allocating, domains never materialised
when no table needs them, one-line errors, and never an infeasible assignment reported."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import random_problem

from gpusolve.model import FORBIDDEN, CostFunction, Problem, Variable, finalize_integer
from gpusolve.parsers import ParseError, read
from gpusolve.solve import Options, solve

ROOT = Path(__file__).resolve().parents[1]


PEAK = ("import atexit, resource, sys\n"
        "atexit.register(lambda: print('peak', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr))\n"
        "from gpusolve.cli import main\nmain(sys.argv[1:])")


def gpusolve(*args):
    """(exit code, JSON record or None, stderr without the peak line, peak RSS of the run in MiB)."""
    p = subprocess.run([sys.executable, "-c", PEAK, "solve", *map(str, args), "--json"],
                       capture_output=True, text=True, cwd=ROOT)
    *err, peak = p.stderr.splitlines()
    rec = json.loads(p.stdout) if p.stdout.strip() else None
    return p.returncode, rec, "".join(line + "\n" for line in err), int(peak.split()[1]) / 1024


def test_declared_table_beyond_the_budget_is_refused_before_allocation(tmp_path):
    huge = tmp_path / "huge.wcsp"
    huge.write_text("t 1 2147483648 1 10\n2147483648\n1 0 0 0\n")  # one unary table of 2^31 entries
    with pytest.raises(ParseError, match="memory budget"):
        read(huge, mem_limit=1 << 30)
    big = tmp_path / "big.wcsp"
    big.write_text("t 1 268435456 1 10\n268435456\n1 0 0 0\n")  # 2^28 entries: 2 GiB of int64
    code, rec, err, rss = gpusolve(big, "--mem-limit", "100M")
    assert code == 3 and rec["status"] == "error" and "memory budget" in rec["message"], err
    assert err.count("\n") == 1 and rss < 400


@pytest.mark.parametrize("domain", [10 ** 8, 10 ** 12])
def test_a_domain_no_table_needs_is_not_materialised(tmp_path, domain):
    path = tmp_path / "free.wcsp"
    path.write_text(f"t 2 {domain} 1 10\n{domain} 2\n1 1 0 1\n1 3\n")
    code, rec, err, rss = gpusolve(path)
    assert code == 0, err
    assert rec["status"] == "optimal" and rec["upper_bound"] == 0 and rec["assignment"] == [0, 0]
    assert rss < 400  # MiB: neither np.ones(d) nor np.arange(d)


def test_unused_large_xcsp_domains_stay_cheap(tmp_path):
    path = tmp_path / "big.xml"
    domains = "".join(f'<domain name="D{i}" nbValues="16777216">0..16777215</domain>' for i in range(3))
    path.write_text(f"""<instance><presentation name="b" format="XCSP 2.1"/>
<domains nbDomains="4">{domains}<domain name="S" nbValues="2">0 1</domain></domains>
<variables nbVariables="2"><variable name="X" domain="D0"/><variable name="Y" domain="S"/></variables>
<relations nbRelations="1"><relation name="R" arity="1" nbTuples="1" semantics="conflicts">0</relation></relations>
<constraints nbConstraints="1"><constraint name="C" arity="1" scope="Y" reference="R"/></constraints>
</instance>""")
    code, rec, err, rss = gpusolve(path)
    assert code == 0, err
    assert rec["status"] == "optimal" and rec["values"] == ["0", "1"]
    assert rss < 1024  # MiB: no value list of 2^24 strings per domain


def test_order_file_not_utf8_names_its_line(tmp_path):
    order = tmp_path / "order.txt"
    order.write_bytes(b"0 1\n2 \xff\n")
    code, rec, err, _ = gpusolve(ROOT / "instances" / "random-n14-d10-s1.wcsp", "--order", order)
    assert code == 2 and f"{order}:2:" in err and "UTF-8" in err


def test_never_an_assignment_that_violates_a_hard_constraint():
    """MBE's greedy assignment, local search and search: whatever is reported is feasible and its cost
    is the upper bound; no upper bound means no assignment."""
    for seed in range(60):
        rng = np.random.default_rng(seed)
        problem = random_problem(rng, n_max=7, d_max=4, f_max=12, arity_max=3, p_hard=0.6)
        for z, search in ((2, False), (2, True), (None, True)):
            arity = max([f.arity for f in problem.functions] + [1])
            r = solve(problem, Options(device="cpu", z=None if z is None else max(z, arity), search=search,
                                       time_limit=5))
            if r.assignment is None:
                continue
            cost = problem.evaluate(r.assignment)
            assert not problem.is_forbidden(cost), (seed, z)
            assert r.upper_bound == problem.to_file_value(cost)


def test_an_unsatisfiable_problem_reports_no_assignment():
    t = np.array([[0, FORBIDDEN], [FORBIDDEN, 0]], dtype=np.int64)
    u = np.array([[FORBIDDEN, 0], [0, FORBIDDEN]], dtype=np.int64)
    p = finalize_integer(Problem("x", [Variable("a", 2), Variable("b", 2)],
                                 [CostFunction((0, 1), t), CostFunction((0, 1), u)]), 10)
    for z in (None, 2):
        r = solve(p, Options(device="cpu", z=z))
        assert r.status == "infeasible" and r.assignment is None and r.upper_bound is None
