"""Exact BE with buckets sliced over Dask workers (gpusolve/distributed/slicing.py): the sliced message is the unsliced
one, a solve with slicing is the solve without, and the slicing plan is what it says."""
import itertools
import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from gpusolve.order import graph
from gpusolve.cli.commands import main
from gpusolve.engines.numpy_engine import NumpyEngine
from gpusolve.generate import generate
from gpusolve.model.problem import CostFunction, Problem, Variable, finalize_integer
from gpusolve.plan.buckets import build_plan
from gpusolve.distributed.slicing import Slice, eliminate_sliced, plan_slicing
from gpusolve.schedule.solve import Options, solve

distributed = pytest.importorskip("dask.distributed")
from helpers import random_problem  # noqa: E402


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as c, \
            distributed.Client(c) as cl:
        yield cl


def test_boxes_hold_their_ranges_and_are_contiguous():
    for dims in [(5,), (2, 3), (1, 4, 2), (3, 1, 2, 2)]:
        p = math.prod(dims)
        assignments = list(itertools.product(*(range(d) for d in dims)))
        for start in range(p):
            for stop in range(start + 1, p + 1):
                s = Slice(0, 0, tuple(range(len(dims))), dims, 1, ((start, stop),), 0)
                box = s.box(start, stop)
                inside = [i for i, a in enumerate(assignments) if all(lo <= x < hi for x, (lo, hi) in zip(a, box))]
                assert inside == list(range(s.first(box), s.first(box) + len(inside)))
                assert inside[0] <= start and stop - 1 <= inside[-1]
                if len(dims) == 1:
                    assert inside == list(range(start, stop))


def test_the_slicing_plan_is_plain_data():
    # a chain x0 - ... - x5 of domain 4 and a function over x0..x3: the bucket of x0 has a 3-variable separator
    variables = [Variable(f"x{i}", 4) for i in range(6)]
    functions = [CostFunction((0, 1, 2, 3), np.arange(256, dtype=np.int64).reshape(4, 4, 4, 4))] + \
        [CostFunction((i, i + 1), np.ones((4, 4), dtype=np.int64)) for i in range(5)]
    problem = finalize_integer(Problem("chain", variables, functions), 10**6)
    plan = build_plan(problem, list(range(6)), None)
    first = plan.minibuckets[0]
    assert first.joint_entries == 256
    slicing = plan_slicing(plan, problem.domains, 2, 256 * 8 - 1)
    (s,) = slicing.slices
    assert (s.bucket, s.var, s.lead, s.dims, s.rows, s.ranges) == (0, 0, (first.scope[0],), (4,), 16, ((0, 2), (2, 4)))
    assert plan_slicing(plan, problem.domains, 2, 256 * 8).slices == ()  # not above the threshold
    many = plan_slicing(plan, problem.domains, 3, 200).of(0)  # 2048 bytes / 200: 11 slices over two variables
    assert len(many.ranges) == 11 and many.dims == (4, 4) and many.rows == 4
    text = slicing.describe()
    assert "slicing over 2 worker(s)" in text and "bucket 0 (var 0): joint 2.0 KiB, 2 slices of at most 32 rows" in text


@pytest.mark.parametrize("integer", [True, False])
def test_a_sliced_message_is_the_unsliced_one(client, integer):
    engine = NumpyEngine()
    checked = 0
    for seed in range(12):
        problem = random_problem(np.random.default_rng(seed), n_max=7, d_max=4, f_max=12, arity_max=3,
                                 integer=integer)
        plan = build_plan(problem, graph.elimination_order(problem), None)
        dom = problem.domains
        tables = [f.table for f in problem.functions]
        messages = {}
        for mb in plan.minibuckets:
            inputs = plan.inputs(problem, mb, tables, messages)
            messages[mb.index] = want = engine.eliminate(mb, inputs, dom, problem.top, problem.integer)
            if not mb.scope:
                continue
            for k in {2, 3, 5, mb.out_entries}:  # up to one row a slice: ranges over every separator variable
                s = plan_slicing(plan, dom, k, mb.joint_entries * plan.itemsize - 1).of(mb.index)
                assert s is not None and len(s.ranges) == min(k, mb.out_entries)
                got, record = eliminate_sliced(client, s, mb, inputs, dom, problem.top, problem.integer, "cpu")
                assert got.shape == want.shape and got.dtype == want.dtype
                if integer:
                    np.testing.assert_array_equal(got, want)
                    assert (got <= problem.top).all()
                else:
                    np.testing.assert_allclose(got, want, rtol=1e-12)
                assert record["slices"] == len(s.ranges) and record["engines"] == ["numpy"]
                checked += 1
    assert checked > 50


@pytest.mark.slow
def test_solve_with_slicing_is_solve_without(client):
    address = client.scheduler.address
    sliced = 0
    for seed in range(8):
        topology, n = [("random", 10 + seed), ("scalefree", 12), ("grid", 16)][seed % 3]
        problem = generate(topology, n, 4, 0.4, (0.1, 0.2, 0.3)[seed % 3], seed)
        plain = solve(problem, Options(device="cpu"))
        spread = solve(problem, Options(device="cpu", scheduler=address, slice_min=4096))
        assert spread.method == plain.method
        assert (spread.status, spread.lower_bound, spread.upper_bound, spread.assignment) == \
            (plain.status, plain.lower_bound, plain.upper_bound, plain.assignment)
        sliced += "sliced into" in spread.device_note
    assert sliced >= 6  # the others: preprocessing decided


def test_mpe_with_slicing_agrees_to_rounding(client, shared_instances):
    from gpusolve import parsers
    problem = parsers.read(str(shared_instances / "water.uai"))
    plain = solve(problem, Options(device="cpu"))
    spread = solve(problem, Options(device="cpu", scheduler=client.scheduler.address, slice_min=64 << 10))
    assert "4 bucket(s) sliced into 13 slices" in spread.device_note
    assert spread.status == plain.status == "optimal" and spread.assignment == plain.assignment
    assert spread.lower_bound == pytest.approx(plain.lower_bound, rel=1e-12)


@pytest.mark.slow
def test_solve_and_info_with_workers_on_processes(tmp_path):
    path = tmp_path / "r.wcsp"
    run = CliRunner().invoke
    assert run(main, ["generate", "random", "-n", "14", "-d", "6", "--p2", "0.1", "--seed", "3", "-o", str(path)]).exit_code == 0
    plain = json.loads(run(main, ["solve", str(path), "--json", "--device", "cpu"]).stdout)
    r = run(main, ["solve", str(path), "--json", "--device", "cpu", "--workers", "2", "--slice-min", "100K"])
    assert r.exit_code == 0, r.output
    spread = json.loads(r.stdout)
    assert spread["status"] == plain["status"] == "optimal" and spread["assignment"] == plain["assignment"]
    assert spread["lower_bound"] == plain["lower_bound"] and "LocalCluster, 2 processes" in spread["device_note"]
    info = run(main, ["info", str(path), "--workers", "2", "--slice-min", "100K"])
    assert info.exit_code == 0 and "slicing over 2 worker(s), buckets whose joint table exceeds 100.0 KiB:" in info.stdout
    # without --slice-min the threshold is the memory budget: nothing this small is sliced, no cluster starts
    quiet = json.loads(run(main, ["solve", str(path), "--json", "--device", "cpu", "--workers", "2"]).stdout)
    assert quiet["lower_bound"] == plain["lower_bound"] and "sliced" not in quiet["device_note"]


@pytest.mark.gpu
def test_sliced_buckets_on_gpu_workers_match_numpy(cupy, client):
    # the client's engine on the GPU too: its device (or host-streamed) inputs go to the workers, the rows come back
    from gpusolve.engines.cupy_engine import CupyEngine
    from gpusolve.inference.eliminate import run_plan
    from gpusolve.distributed.slicing import SlicedStep
    engine = CupyEngine()
    for seed in range(4):
        problem = generate("random", 14, 6, 0.4, 0.1, seed)
        plan = build_plan(problem, graph.elimination_order(problem), None)
        lower, _, want = run_plan(problem, plan, NumpyEngine())
        step = SlicedStep(client, plan_slicing(plan, problem.domains, 2, 4096), engine, "gpu")
        got_lower, _, got = run_plan(problem, plan, engine, dense_step=step)
        assert got_lower == lower and step.log and all(r["engines"] == ["cupy"] for r in step.log)
        for i, m in want.items():
            np.testing.assert_array_equal(engine.get(got[i]), m)
