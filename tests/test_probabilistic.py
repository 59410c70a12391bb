"""PR and MAR against brute-force enumeration and an independent contraction (opt_einsum)."""
import functools
import itertools
import json
import math

import numpy as np
import pytest

from gpusolve import parsers
from gpusolve.schedule.solve import Options, solve


def random_network(rng, bayes: bool, n_max=6, d_max=3, p_zero=0.15):
    """(domains, factors as (scope, probability table), kind) of a small Markov or Bayesian network."""
    n = int(rng.integers(1, n_max + 1))
    dom = [int(rng.integers(1, d_max + 1)) for _ in range(n)]
    factors = []
    if bayes:
        for v in range(n):
            parents = sorted(rng.choice(v, int(rng.integers(0, min(v, 2) + 1)), replace=False).tolist()) if v else []
            shape = tuple(dom[u] for u in parents) + (dom[v],)
            t = rng.random(shape) + 0.05
            t[rng.random(shape) < p_zero] = 0.0
            t[t.sum(axis=-1) == 0] = 1.0  # every row needs some probability
            factors.append((tuple(parents) + (v,), t / t.sum(axis=-1, keepdims=True)))
    else:
        for _ in range(int(rng.integers(0, 2 * n + 1))):
            k = int(rng.integers(1, min(3, n) + 1))
            scope = tuple(int(u) for u in rng.choice(n, k, replace=False))
            t = rng.random(tuple(dom[u] for u in scope)) * 2
            t[rng.random(t.shape) < p_zero] = 0.0
            factors.append((scope, t))
    return dom, factors


def write_uai(path, dom, factors, bayes, evidence=None):
    lines = ["BAYES" if bayes else "MARKOV", str(len(dom)), " ".join(map(str, dom)), str(len(factors))]
    lines += [f"{len(s)} " + " ".join(map(str, s)) for s, _ in factors]
    for _, t in factors:
        lines += ["", str(t.size), " ".join(repr(float(x)) for x in t.ravel())]
    path.write_text("\n".join(lines) + "\n")
    if evidence is not None:
        path.with_name(path.name + ".evid").write_text(
            f"{len(evidence)} " + " ".join(f"{v} {x}" for v, x in evidence.items()) + "\n")


def brute(dom, factors, evidence):
    """Z, marginals and the MPE weight by enumeration."""
    z = best = 0.0
    marg = [np.zeros(d) for d in dom]
    for a in itertools.product(*(range(d) for d in dom)):
        if any(a[v] != x for v, x in evidence.items()):
            continue
        w = math.prod(float(t[tuple(a[u] for u in s)]) for s, t in factors)
        z += w
        best = max(best, w)
        for v, x in enumerate(a):
            marg[v][x] += w
    return z, [m / z if z > 0 else m for m in marg], best


@pytest.mark.parametrize("seed", range(220))
def test_pr_mar_and_bounds_against_enumeration(tmp_path, seed):
    rng = np.random.default_rng(1000 + seed)
    bayes = seed % 2 == 0
    dom, factors = random_network(rng, bayes)
    evidence = {}
    if seed % 3 == 0:
        for v in rng.choice(len(dom), int(rng.integers(1, len(dom) + 1)), replace=False):
            evidence[int(v)] = int(rng.integers(0, dom[v]))
    path = tmp_path / "net.uai"
    write_uai(path, dom, factors, bayes, evidence if seed % 3 == 0 else None)
    z, marg, best = brute(dom, factors, evidence)
    problem = parsers.read(path)

    mpe = solve(problem, Options(device="cpu"))
    if best == 0:
        assert mpe.status == "infeasible"
    else:
        assert mpe.status == "optimal" and mpe.lower_bound == pytest.approx(math.log10(best), abs=1e-9)
        assert len(mpe.assignment) == len(dom) and all(mpe.assignment[v] == x for v, x in evidence.items())

    pr = solve(problem, Options(device="cpu", task="PR"))
    mar = solve(problem, Options(device="cpu", task="MAR"))
    if z == 0:
        assert pr.status == "infeasible" and mar.status == "infeasible"
        return
    assert pr.status == "optimal" and pr.lower_bound == pytest.approx(math.log10(z), abs=1e-9)
    assert mar.lower_bound == pytest.approx(math.log10(z), abs=1e-9)
    assert len(mar.marginals) == len(dom)
    for v, m in enumerate(mar.marginals):
        np.testing.assert_allclose(m, marg[v], atol=1e-9)
    max_arity = max([len(s) for s, _ in factors] + [1])
    for zz in range(max_arity, len(dom) + 1):
        b = solve(problem, Options(device="cpu", task="PR", z=zz))
        assert b.upper_bound >= math.log10(z) - 1e-9
        assert b.lower_bound is None or b.lower_bound <= math.log10(z) + 1e-9


def test_family_covers_zero_probabilities():
    zeros = 0
    for seed in range(220):
        rng = np.random.default_rng(1000 + seed)
        dom, factors = random_network(rng, seed % 2 == 0)
        zeros += any((t == 0).any() for _, t in factors)
    assert zeros > 20


def grid_network(side, d, seed):
    rng = np.random.default_rng(seed)
    n = side * side
    factors = [((v,), rng.random(d) + 0.5) for v in range(n)]
    for r in range(side):
        for c in range(side):
            v = r * side + c
            for u in ([v + 1] if c + 1 < side else []) + ([v + side] if r + 1 < side else []):
                t = rng.random((d, d)) + 0.5
                t[rng.random((d, d)) < 0.1] = 0.0
                factors.append(((v, u), t))
    return [d] * n, factors


@pytest.mark.parametrize("side, d, seed", [(5, 2, 0), (6, 2, 1), (4, 3, 2), (5, 3, 3)])
def test_larger_grids_against_opt_einsum(tmp_path, side, d, seed):
    oe = pytest.importorskip("opt_einsum")
    dom, factors = grid_network(side, d, seed)
    path = tmp_path / "grid.uai"
    write_uai(path, dom, factors, bayes=False)
    problem = parsers.read(path)
    pr = solve(problem, Options(device="cpu", task="PR"))
    mar = solve(problem, Options(device="cpu", task="MAR"))
    syms = [oe.get_symbol(i) for i in range(len(dom))]
    operands = []
    for s, t in factors:
        operands += [t, [syms[u] for u in s] and "".join(syms[u] for u in s)]
    terms = ",".join(operands[1::2])
    z = oe.contract(f"{terms}->", *operands[0::2])
    assert pr.lower_bound == pytest.approx(math.log10(z), abs=1e-9)
    for v in range(len(dom)):
        m = oe.contract(f"{terms}->{syms[v]}", *operands[0::2])
        np.testing.assert_allclose(mar.marginals[v], m / m.sum(), atol=1e-9)


@pytest.mark.slow
def test_uai_result_files(tmp_path, shared_instances):
    import csv

    from click.testing import CliRunner

    from gpusolve.cli.commands import main
    from helpers import log10_partition, marginals
    net = shared_instances / "network.uai"
    for task in ("PR", "MAR", "MPE"):
        out = tmp_path / f"r.{task}"
        res = CliRunner().invoke(main, ["solve", str(net), "--task", task, "--uai-output", str(out), "--device", "cpu"])
        assert res.exit_code == 0, res.output
        head, body = out.read_text().splitlines()
        assert head == task
        values = body.split()
        problem = parsers.read(net)
        if task == "PR":  # against opt_einsum
            assert float(values[0]) == pytest.approx(log10_partition(problem), abs=1e-6)
        elif task == "MAR":  # per variable: its domain size, then its marginal, against opt_einsum
            assert int(values[0]) == len(problem.variables)
            at = 1
            for m in marginals(problem):
                assert int(values[at]) == len(m)
                np.testing.assert_allclose([float(x) for x in values[at + 1:at + 1 + len(m)]], m, atol=1e-6)
                at += 1 + len(m)
            assert at == len(values)
        else:  # an assignment of the optimum listed in optima.csv (toulbar2's, log10 probability)
            with open(shared_instances / "optima.csv") as f:
                best = next(float(row["optimum"]) for row in csv.DictReader(f) if row["file"] == "network.uai")
            assert int(values[0]) == len(problem.variables) == len(values) - 1
            assert problem.to_file_value(problem.evaluate([int(x) for x in values[1:]])) == pytest.approx(best, abs=1e-6)


def test_task_errors():
    from click.testing import CliRunner

    from gpusolve.cli.commands import main
    import pathlib
    bundled = pathlib.Path(__file__).resolve().parents[1] / "instances" / "random-n14-d10-s1.wcsp"
    r = CliRunner().invoke(main, ["solve", str(bundled), "--task", "PR"])
    assert r.exit_code == 2 and "applies to probabilistic models" in r.stderr


@pytest.mark.parametrize("op", ["lse", "min", "max"])
def test_contract_in_blocks(op):
    """Blocks of any size, host-memory inputs (HostTable) and forbidden entries give the one-block result."""
    from gpusolve.engines.dense import HostTable
    from gpusolve.inference.probabilistic import contract
    rng = np.random.default_rng(11)
    dom = [2, 3, 2, 4, 3]
    inputs = []
    for scope in ((0, 1), (1, 2, 3), (3, 4), (4,), (0, 2, 4)):
        t = rng.random(tuple(dom[u] for u in scope)) * 5
        t[rng.random(t.shape) < 0.2] = np.inf
        inputs.append((t, scope))
    inputs[2][0][:, 1] = np.inf  # a value of x4 forbidden everywhere
    hosted = [(HostTable(t, np) if i % 2 else t, s) for i, (t, s) in enumerate(inputs)]
    for keep in ((), (4,), (1, 3), (3, 1, 0), (2, 0, 1, 3, 4)):
        want = contract(np, inputs, keep, dom, op, block=1 << 20)
        for block in (1, 3, 7, 50, 200):
            got = contract(np, hosted, keep, dom, op, block=block)
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-12)


# -- Models of probability 0: every route to Z = 0, through the command line's JSON and UAI files --

def reject(constant):
    raise AssertionError(f"JSON holds {constant}, which strict parsers reject")


@functools.cache
def schema_validator():
    """gpusolve/schema.json's validator, checked once (jsonschema.validate checks it every call)."""
    jsonschema = pytest.importorskip("jsonschema")
    from gpusolve.report import schema
    jsonschema.Draft202012Validator.check_schema(schema())
    return jsonschema.Draft202012Validator(schema())


def zero_network(rng):
    """(domains, factors, evidence): random_network plus, each at random, the routes to Z = 0 of
    issue 32: a constant (scope 0) factor, of probability 0 or not, a factor all zeros, evidence
    on a value of probability 0 (and evidence elsewhere)."""
    dom, factors = random_network(rng, bool(rng.integers(2)))
    if rng.random() < 0.5:
        factors.append(((), np.array(0.0 if rng.random() < 0.4 else float(rng.random() * 3 + 0.1))))
    if factors and rng.random() < 0.15:
        k = int(rng.integers(len(factors)))
        factors[k] = (factors[k][0], np.zeros_like(factors[k][1]))
    evidence = {}
    if rng.random() < 0.5:
        v = int(rng.integers(len(dom)))
        unary = rng.random(dom[v]) + 0.1
        evidence[v] = int(rng.integers(dom[v]))
        if rng.random() < 0.5:
            unary[evidence[v]] = 0.0
        factors.append(((v,), unary))
    return dom, factors, evidence


ZERO_SEEDS = 120


def test_zero_networks_cover_every_route_to_z_zero():
    """The family below holds models of Z = 0 by each route alone, and models of Z > 0."""
    routes = {"constant": 0, "all-zero factor": 0, "evidence": 0, "positive": 0}
    for seed in range(ZERO_SEEDS):
        dom, factors, evidence = zero_network(np.random.default_rng(5000 + seed))
        z = brute(dom, factors, evidence)[0]
        constant = any(not s and t == 0 for s, t in factors)
        all_zero = any(s and not t.any() for s, t in factors)
        routes["constant"] += constant
        routes["all-zero factor"] += all_zero
        routes["evidence"] += z == 0 and not constant and not all_zero and bool(evidence)
        routes["positive"] += z > 0
    assert min(routes.values()) >= 10, routes


@pytest.mark.parametrize("seed", range(ZERO_SEEDS))
def test_models_of_probability_zero_on_the_command_line(tmp_path, seed):
    """MPE, PR (exact and mini-bucket) and MAR: strict JSON valid for the schema, the statuses of
    schema.json (Z = 0: infeasible, bounds null, no marginals) and --uai-output, against enumeration."""
    from click.testing import CliRunner

    from gpusolve.cli.commands import main
    dom, factors, evidence = zero_network(np.random.default_rng(5000 + seed))
    path = tmp_path / "net.uai"
    write_uai(path, dom, factors, False, evidence)  # net.uai.evid: the command line's default evidence
    z, marg, best = brute(dom, factors, evidence)
    log10_z = math.log10(z) if z > 0 else None
    z_max = max([len(s) for s, _ in factors] + [1])

    def solve_json(task, *args):
        out = tmp_path / f"r.{task}"
        r = CliRunner().invoke(main, ["solve", str(path), "--task", task, "--json", "--device", "cpu",
                                      "--uai-output", str(out), *map(str, args)])
        assert r.exit_code == 0, r.output
        obj = json.loads(r.stdout, parse_constant=reject)
        schema_validator().validate(obj)
        if obj["status"] == "infeasible":
            assert obj["lower_bound"] is None and obj["upper_bound"] is None and obj["marginals"] is None
            assert "probability 0" in obj["message"]
        return obj, out.read_text().splitlines()

    for args in ([], ["--z", z_max]):
        mpe, lines = solve_json("MPE", *args)
        if best == 0:
            assert mpe["status"] == "infeasible" and mpe["assignment"] is None and lines == ["MPE"]
        else:
            a = mpe["assignment"]
            assert mpe["status"] == "optimal" and all(a[v] == x for v, x in evidence.items())
            assert mpe["lower_bound"] == pytest.approx(math.log10(best), abs=1e-9) == mpe["upper_bound"]
            weight = math.prod(float(t[tuple(a[u] for u in s)]) for s, t in factors)
            assert math.log10(weight) == pytest.approx(math.log10(best), abs=1e-9)
            assert lines == ["MPE", " ".join(map(str, [len(dom)] + a))]

    pr, lines = solve_json("PR")
    assert lines[0] == "PR" and pr["uai_output"]["bound"] == "exact"
    if z == 0:
        assert pr["status"] == "infeasible" and "Z = 0" in pr["message"] and lines[1] == "-inf"
    else:
        assert pr["status"] == "optimal" and pr["lower_bound"] == pytest.approx(log10_z, abs=1e-9)
        assert float(lines[1]) == pytest.approx(log10_z, abs=1e-9)

    bounds, lines = solve_json("PR", "--z", z_max)  # mini-buckets may not see Z = 0, never claim it wrongly
    assert bounds["status"] in (("infeasible", "bounded") if z == 0 else ("optimal", "bounded"))
    if z == 0:
        assert bounds["lower_bound"] is None
    else:
        assert bounds["upper_bound"] >= log10_z - 1e-9
        assert bounds["lower_bound"] is None or bounds["lower_bound"] <= log10_z + 1e-9

    mar, lines = solve_json("MAR")
    if z == 0:
        assert mar["status"] == "infeasible" and lines == ["MAR"] and mar["uai_output"]["bound"] == "none"
    else:
        assert mar["status"] == "optimal"
        values = [float(x) for x in lines[1].split()]
        assert values[0] == len(dom)
        pos = 1
        for v, m in enumerate(mar["marginals"]):
            np.testing.assert_allclose(m, marg[v], atol=1e-9)
            assert values[pos] == dom[v]
            np.testing.assert_allclose(values[pos + 1:pos + 1 + dom[v]], m)
            pos += 1 + dom[v]


@pytest.mark.parametrize("task", ["MPE", "PR", "MAR"])
def test_a_constant_factor_of_probability_zero(tmp_path, task):
    """Issue 32's reproducer, a scope-0 factor of probability 0: every task said optimal with bounds
    of -Infinity, though each assignment has probability 0.5 * 0 = 0."""
    import gpusolve
    path = tmp_path / "zero.uai"
    path.write_text("MARKOV\n1\n2\n2\n0\n1 0\n\n1\n0.0\n\n2\n0.5 0.5\n")
    r = gpusolve.solve(path, task=task, device="cpu")
    assert (r.status, r.lower_bound, r.upper_bound, r.assignment, r.marginals) == ("infeasible",) + (None,) * 4
    obj = json.loads(json.dumps(r.to_json()), parse_constant=reject)
    assert "probability 0" in obj["message"]
