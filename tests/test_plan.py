"""The elimination plan without any engine: buckets, mini-buckets, message routing, sizes."""
import numpy as np
import pytest
from helpers import random_problem

from gpusolve.order import graph
from gpusolve.generate import generate
from gpusolve.plan.buckets import build_plan, place


def test_plan_buckets_sizes_and_message_routing():
    p = generate("random", 10, 4, 0.5, 0.5, seed=2)
    order = graph.elimination_order(p, "minfill")
    plan = build_plan(p, order)
    pos = {v: i for i, v in enumerate(order)}
    assert plan.exact and plan.z is None
    assert len(plan.minibuckets) == len(order)
    for mb in plan.minibuckets:
        assert mb.out_entries == 4 ** len(mb.scope) and mb.joint_entries == 4 * mb.out_entries
        assert all(pos[u] > pos[mb.var] for u in mb.scope)
        assert [pos[u] for u in mb.scope] == sorted((pos[u] for u in mb.scope), reverse=True)
        for j in mb.messages:
            src = plan.minibuckets[j]
            assert src.index < mb.index and src.scope[-1] == mb.var
        for i in mb.functions:
            assert min(p.functions[i].scope, key=pos.get) == mb.var
    assert sum(len(mb.functions) for mb in plan.minibuckets) == len(p.functions)
    assert plan.induced_width == graph.induced_width(graph.primal_graph(p), order)
    assert plan.message_bytes == 8 * sum(mb.out_entries for mb in plan.minibuckets)
    assert "exact BE" in plan.describe() and "peak" in plan.describe()


@pytest.mark.parametrize("z", [2, 3, 4, 5])
def test_minibuckets_respect_z_and_place_every_input_once(z):
    p = generate("scalefree", 14, 3, seed=4)
    plan = build_plan(p, graph.elimination_order(p, "mindegree"), z)
    for mb in plan.minibuckets:
        assert len(mb.scope) + 1 <= z
    assert sorted(i for mb in plan.minibuckets for i in mb.functions) == list(range(len(p.functions)))
    used = sorted(j for mb in plan.minibuckets for j in mb.messages)
    assert used == sorted(mb.index for mb in plan.minibuckets if mb.scope)
    assert len(plan.roots) == sum(1 for mb in plan.minibuckets if not mb.scope)
    smaller = build_plan(p, plan.order, z - 1) if z > 2 else None
    if smaller:
        assert smaller.peak_bytes <= plan.peak_bytes


def test_plan_reports_sparse_buckets_and_smaller_memory_for_tight_tables():
    rng = np.random.default_rng(4)
    problem = random_problem(rng, n_max=8, d_max=6, f_max=20, arity_max=3, p_hard=0.97)
    order = graph.elimination_order(problem)
    dense, tight = build_plan(problem, order), build_plan(problem, order, None, 1, "auto")
    assert tight.sparse and "sparse" in tight.describe()
    assert tight.message_bytes < dense.message_bytes
    assert all(mb.rows <= mb.out_entries and mb.joint_rows <= mb.joint_entries for mb in tight.minibuckets)


def test_placement_follows_the_device_budget():
    """Everything fits a large budget; a budget below the largest message streams it in chunks that
    fit half of what is left, and its message stays on the host; a small plan goes to the host."""
    problem = generate("grid", 16, 6, seed=2)
    plan = build_plan(problem, graph.elimination_order(problem, "minfill"), None)
    assert place(problem, plan, None).where == ("host",) * len(plan.minibuckets)
    total = sum(mb.joint_entries for mb in plan.minibuckets)
    assert set(place(problem, plan, 1 << 40, host_max=total + 1).where) == {"host"}
    roomy = place(problem, plan, 1 << 40, host_max=total)
    assert set(roomy.where) == {"device"} and set(roomy.lead) == {0}
    big = plan.largest()
    budget = plan.original_bytes + big.out_entries * plan.itemsize // 2
    tight = place(problem, plan, budget)
    assert tight.where[big.index] == "streamed" and "device" in tight.where
    k = tight.lead[big.index]
    assert 0 < k <= len(big.scope)
    rows = int(np.prod([problem.domains[u] for u in big.scope[k:]]))
    assert 2 * rows * plan.itemsize <= budget
    assert f"bucket {big.index} (variable {big.var}): streamed" in tight.describe(plan, problem.domains)


def test_info_prints_the_placement_for_a_device_budget(tmp_path):
    from click.testing import CliRunner

    from gpusolve.cli.group import main
    path = tmp_path / "g.wcsp"
    problem = generate("grid", 16, 6, seed=2)
    from gpusolve.parsers import write
    write(problem, path)
    r = CliRunner().invoke(main, ["info", str(path), "--gpu-mem-limit", "20K"])
    assert r.exit_code == 0 and "placement for a device budget of 20.0 KiB" in r.output and "streamed" in r.output
