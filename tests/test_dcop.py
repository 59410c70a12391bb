"""DPOP and ADPOP (gpusolve/dcop/dpop.py): optima against brute force and solve, bounds, pseudo tree,
simulated runtime, Dask clusters of processes, the pyDCOP reader and the `dcop` command."""
import itertools
import json

import numpy as np
import pytest
from click.testing import CliRunner

from gpusolve import parsers
from gpusolve.dcop import dpop as dcop
from gpusolve.cli.commands import main
from gpusolve.generate import generate
from gpusolve.model.problem import CostFunction, Problem, Variable
from gpusolve.schedule.solve import Options, solve

from helpers import brute_force, random_problem, toulbar2_optimum

COLORING = """\
name: graph coloring
objective: {objective}
domains:
  colors:
    values: [R, G, B]
variables:
  v1:
    domain: colors
    cost_function: -1 if v1 == 'R' else 1
  v2:
    domain: colors
  v3:
    domain: colors
    cost_function: 2 * (v3 == 'B')
constraints:
  diff_1_2:
    type: intention
    function: 10 if v1 == v2 else abs(len_hint) if False else 0
  diff_2_3:
    type: extensional
    variables: [v2, v3]
    values:
      10: R R | G G | B B
      3: R G
    default: 0
  c13:
    type: intention
    function: "5 if (v1 == 'G' and v3 != 'R') or v1 == v3 else 1"
agents: [a1, a2, a3]
distribution_hints:
  must_host:
    a1: [v1, v2]
"""

CLEAN = COLORING.replace("abs(len_hint) if False else ", "")


def inline(problem, algo="dpop", max_dim=None):
    return dcop.solve_dcop(problem, algo, max_dim, device="cpu", scheduler="inline")


def file_optimum(problem):
    cost, _ = brute_force(problem)
    return problem.to_file_value(cost)


@pytest.mark.parametrize("seed", range(40))
def test_dpop_matches_brute_force_and_adpop_brackets_it(seed):
    rng = np.random.default_rng(seed)
    problem = random_problem(rng, n_max=7, d_max=4, f_max=10, arity_max=3, p_hard=0.2, n_components=1 + seed % 3)
    best, _ = brute_force(problem)
    r = inline(problem)
    if problem.is_forbidden(best):
        assert r.status == "infeasible"
        return
    assert r.status == "optimal" and r.lower_bound == r.upper_bound == problem.to_file_value(best)
    assert problem.to_file_value(problem.evaluate(r.assignment)) == r.upper_bound
    arity = max((f.arity for f in problem.functions), default=1)
    for k in range(max(arity - 1, 0), r.induced_width + 1):
        a = inline(problem, "adpop", k)
        assert a.messages["largest_util"] <= max(problem.domains) ** k
        assert a.lower_bound <= r.lower_bound
        if a.upper_bound is not None:
            assert a.upper_bound >= r.upper_bound
            assert problem.to_file_value(problem.evaluate(a.assignment)) == a.upper_bound
        if k >= r.induced_width:  # no mini-bucket split: exact
            assert a.status == "optimal" and a.lower_bound == r.lower_bound


@pytest.mark.parametrize("topology, n, d", [("random", 12, 5), ("scalefree", 16, 5), ("grid", 16, 6)])
def test_dpop_matches_solve_on_the_journal_generators(topology, n, d):
    problem = generate(topology, n, d, 0.3, 0.3, seed=n)
    ref = solve(problem, Options(device="cpu"))
    r = inline(problem)
    assert (r.status, r.lower_bound, r.upper_bound) == (ref.status, ref.lower_bound, ref.upper_bound)
    # one message per tree edge each way, every agent holding one variable
    assert r.messages["util"] == r.messages["value"] == n - 1


def test_pseudo_tree_is_a_dfs_tree_and_messages_go_to_parents():
    problem = generate("random", 15, 3, 0.3, 0.5, seed=4)
    dp = dcop.plan_dcop(problem)
    tree = dp.tree

    def ancestors(v):
        out = set()
        while tree.parent[v] >= 0:
            v = tree.parent[v]
            out.add(v)
        return out
    for f in problem.functions:  # every constraint lies on one branch
        a, b = f.scope
        assert a in ancestors(b) or b in ancestors(a)
    for v, p in enumerate(tree.parent):  # tree edges are constraint edges
        if p >= 0:
            assert any(set(f.scope) == {v, p} for f in problem.functions)
    degree = [sum(v in f.scope for f in problem.functions) for v in range(15)]
    assert degree[tree.roots[0]] == max(degree)  # most connected first
    for mb in dp.plan.minibuckets:
        assert dp.dest(mb) == tree.parent[mb.var] and mb.scope == tree.context[mb.var]


def test_maximised_utilities_and_several_variables_per_agent(tmp_path):
    path = tmp_path / "col.yaml"
    path.write_text(CLEAN.format(objective="max"))
    problem = parsers.read(path)
    assert [v.agent for v in problem.variables] == ["a1", "a1", None]
    r = inline(problem)
    assert r.status == "optimal" and r.lower_bound == file_optimum(problem) == solve(problem, Options()).upper_bound
    assert r.agents == 2
    # v1 and v2 share agent a1: the message between them stays inside it
    assert r.messages["util"] + r.messages["value"] < 2 * (len(problem.variables) - 1)


def test_simulated_runtime_is_the_critical_path_with_agents_busy_one_thing_at_a_time():
    # star: root 0 held by agent A, leaves 1 and 2 held by agent B (busy one at a time), leaf 3 by C
    variables = [Variable("x0", 2, agent="A"), Variable("x1", 2, agent="B"), Variable("x2", 2, agent="B"),
                 Variable("x3", 2, agent="C")]
    functions = [CostFunction((0, v), np.zeros((2, 2), dtype=np.int64)) for v in (1, 2, 3)]
    dp = dcop.plan_dcop(Problem("star", variables, functions, top=10))
    leaf = {mb.var: mb.index for mb in dp.plan.minibuckets}
    util_s = {leaf[1]: 1.0, leaf[2]: 2.0, leaf[3]: 0.5, leaf[0]: 4.0}
    value_s = {0: 0.25, 1: 0.0, 2: 0.0, 3: 0.0}
    end, util_end = dcop.simulated_runtime(dp, util_s, value_s, latency=0.1)
    # B computes x1 and x2 one after the other (3 s), its second message arrives at 3.1, the root works 4 s
    assert util_end == pytest.approx(7.1)
    assert end == pytest.approx(7.1 + 0.25 + 0.1)


@pytest.fixture(scope="module")
def cluster():
    """A LocalCluster of two worker processes, as CI runs the Dask paths."""
    distributed = pytest.importorskip("dask.distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as c:
        yield c.scheduler_address


@pytest.mark.slow
def test_dask_processes_give_the_inline_result(cluster, shared_instances):
    problem = parsers.read(shared_instances / "gpube-rep_0_x_10.xml")
    ref = inline(problem)
    for algo, k in (("dpop", None), ("adpop", 2)):
        r = dcop.solve_dcop(problem, algo, k, device="cpu", scheduler=cluster)
        assert (r.lower_bound, r.upper_bound, r.assignment) == (inline(problem, algo, k).lower_bound,
                                                              inline(problem, algo, k).upper_bound,
                                                              inline(problem, algo, k).assignment)
        assert "2 workers" in r.executor and r.simulated_s > 0
    assert ref.lower_bound == 124 and ref.agents == 10


@pytest.mark.slow
def test_embedded_cluster_of_processes_for_larger_problems(monkeypatch):
    monkeypatch.setattr(dcop, "THREADS_BELOW", 0)
    problem = generate("scalefree", 12, 4, seed=2)
    r = dcop.solve_dcop(problem, workers=2, device="cpu")
    assert r.executor == "LocalCluster, 2 processes"
    assert (r.lower_bound, r.assignment) == (inline(problem).lower_bound, inline(problem).assignment)


def test_frodo_files_match_solve(shared_instances):
    for name, optimum in (("gpube-rep_0_x_10.xml", 124), ("8wqueens_wcsp.xml", 2)):
        problem = parsers.read(shared_instances / name)
        r = inline(problem)
        assert r.status == "optimal" and r.lower_bound == optimum == solve(problem, Options()).lower_bound
        a = inline(problem, "adpop", 2)
        assert a.lower_bound <= optimum and (a.upper_bound is None or a.upper_bound >= optimum)


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_dcop_command_json_and_embedded_cluster(tmp_path):
    path = tmp_path / "col.yaml"
    path.write_text(CLEAN.format(objective="min"))
    r = run("dcop", path, "--json", "--workers", 1)
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["status"] == "optimal" and data["lower_bound"] == file_optimum(parsers.read(path))
    assert "LocalCluster, 1 threads" in data["executor"]
    from test_output import valid
    assert valid(data)["task"] == "DCOP"
    assert valid(json.loads(run("dcop", tmp_path / "missing.yaml", "--json").stdout))["status"] == "error"
    r = run("dcop", path, "--scheduler", "inline", "--algo", "adpop", "--max-dim", 1)
    assert r.exit_code == 0 and "ADPOP (max-dim 1)" in r.stdout and "simulated" in r.stdout


@pytest.mark.parametrize("text, pattern", [
    ("objective: best\n", "objective must be min or max"),
    (COLORING.format(objective="min"), ":16: constraint diff_1_2: unknown variable len_hint"),
    (CLEAN.format(objective="min").replace("10 if v1 == v2", "__import__('os').system('x') if v1 == v2"),
     ":16: constraint diff_1_2: only abs, min"),
    (CLEAN.format(objective="min").replace("10 if v1 == v2", "10 if v1[0] == v2"), "Subscript is not allowed"),
    (COLORING.format(objective="min").replace("abs(len_hint)", "open(v1)"), "only abs, min"),
    (CLEAN.format(objective="min").replace("10: R R", "10: R Q"), "value Q is not in"),
    (CLEAN.format(objective="min").replace("    default: 0\n", ""), "no cost and there is no default"),
    (CLEAN.format(objective="min").replace("a1: [v1, v2]", "a9: [v1]"), "unknown agent a9"),
    ("name: x\nobjective: min\nvariables: [\n", "malformed YAML"),
])
def test_pydcop_reader_errors_are_one_line(tmp_path, text, pattern):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    r = run("dcop", path, "--scheduler", "inline")
    assert r.exit_code == 2 and pattern in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_dcop_command_usage_errors(tmp_path):
    path = tmp_path / "r.wcsp"
    assert run("generate", "random", "-n", 6, "-d", 3, "-o", path).exit_code == 0
    r = run("dcop", path, "--algo", "adpop", "--scheduler", "inline")
    assert r.exit_code == 2 and "--max-dim" in r.stderr
    r = run("dcop", path, "--algo", "adpop", "--max-dim", 0, "--scheduler", "inline")
    assert r.exit_code == 2 and "largest arity" in r.stderr
    r = run("dcop", path, "--scheduler", "inline", "--mem-limit", "100")
    assert r.exit_code == 3 and "try --algo adpop" in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.gpu
def test_util_computations_on_the_gpu_engine_match_the_cpu(cupy):
    for topology, n, d in (("random", 14, 8), ("grid", 16, 6), ("scalefree", 30, 6)):
        problem = generate(topology, n, d, 0.3, 0.3, seed=1)
        gpu = dcop.solve_dcop(problem, device="gpu", scheduler="inline")
        cpu = inline(problem)
        assert gpu.engines == ["cupy"]
        assert (gpu.status, gpu.lower_bound, gpu.assignment) == (cpu.status, cpu.lower_bound, cpu.assignment)
        a_gpu = dcop.solve_dcop(problem, "adpop", 3, device="gpu", scheduler="inline")
        a_cpu = inline(problem, "adpop", 3)
        assert (a_gpu.lower_bound, a_gpu.upper_bound) == (a_cpu.lower_bound, a_cpu.upper_bound)


def test_dcop_names_values_as_solve_does(tmp_path):
    """The assignment in the file's value names (R G B), text and JSON, as `solve` prints it."""
    path = tmp_path / "col.yaml"
    path.write_text(CLEAN.format(objective="min"))
    problem = parsers.read(path)
    r = inline(problem)
    assert r.values == [v.labels[a] for v, a in zip(problem.variables, r.assignment)]
    assert problem.to_file_value(problem.evaluate(r.assignment)) == file_optimum(problem)
    data = json.loads(run("dcop", path, "--scheduler", "inline", "--json").stdout)
    assert data["values"] == r.values and data["assignment"] == r.assignment
    line = next(row for row in run("dcop", path, "--scheduler", "inline").stdout.splitlines()
                if row.startswith("assignment"))
    assert line.split()[1:] == r.values


def generated_with_optimum(count, tmp_path):
    """(problem, toulbar2's optimum or None when infeasible): grids, random and scale-free networks of
    domain 3 tight enough that ADPOP's values often break a hard constraint, until `count` are feasible."""
    feasible = 0
    for seed in itertools.count():
        topology, n = [("grid", 16), ("grid", 25), ("random", 12), ("scalefree", 14), ("grid", 9)][seed % 5]
        problem = generate(topology, n, 3, 0.25, 0.25 + 0.05 * (seed % 3), seed)
        optimum = toulbar2_optimum(problem, tmp_path / "p.wcsp")
        yield problem, optimum
        feasible += optimum is not None
        if feasible == count:
            return


def test_adpop_repairs_its_values_into_a_feasible_upper_bound(tmp_path):
    """ADPOP's VALUE pass follows mini-bucket messages, which lose hard constraints: on a feasible problem
    the reported upper bound must still be finite and the cost of the reported assignment."""
    repaired = infeasible = 0
    for problem, optimum in generated_with_optimum(50, tmp_path):
        for k in (1, 2):
            r = inline(problem, "adpop", k)
            if optimum is None:  # MAC's exhausted search proves it
                assert r.status == "infeasible" and r.upper_bound is None, (problem.name, k)
                infeasible += 1
                continue
            assert r.upper_bound is not None, (problem.name, k, r.message)
            assert problem.to_file_value(problem.evaluate(r.assignment)) == r.upper_bound
            assert r.lower_bound <= optimum <= r.upper_bound
            repaired += r.message is not None
    assert repaired >= 10 and infeasible >= 5  # both paths ran


def test_adpop_says_when_the_repair_finds_nothing(tmp_path, monkeypatch):
    problem = generate("grid", 25, 3, 0.25, 0.3, seed=1)  # ADPOP(2)'s values break a hard constraint
    assert toulbar2_optimum(problem, tmp_path / "p.wcsp") is not None
    assert inline(problem, "adpop", 2).message is not None
    monkeypatch.setattr(dcop, "REPAIR_SWEEPS", 0)
    monkeypatch.setattr(dcop, "REPAIR_NODES", 0)
    r = inline(problem, "adpop", 2)
    assert r.status == "bounded" and r.upper_bound is None and r.assignment is None
    assert "no upper bound" in r.message
    out = run("dcop", tmp_path / "p.wcsp", "--algo", "adpop", "--max-dim", 2, "--scheduler", "inline").stdout
    assert ["why", r.message] in [line.split(None, 1) for line in out.splitlines()]
