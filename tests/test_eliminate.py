"""Executing plans: engines that place sparse buckets on a small device, row limits of a run."""
import pytest
from helpers import brute_force, same_messages, tight_problem

from gpusolve.order import graph
from gpusolve.plan import buckets as plan_module
from gpusolve.engines import sparse
from gpusolve.engines.numpy_engine import NumpyEngine
from gpusolve.generate import generate
from gpusolve.inference.eliminate import assign, run_plan
from gpusolve.plan.buckets import build_plan
from gpusolve.schedule.solve import Options, solve


class SmallDevice(NumpyEngine):
    """The CPU engine given a device budget of a few rows, so that sparse buckets stream."""

    device_bytes = 0

    def __init__(self, budget):
        self.budget = budget


@pytest.mark.parametrize("budget, work_row_bytes", [(1, 80), (2000, 80), (200, 0)])
def test_plans_streamed_through_a_tiny_budget_equal_in_memory_runs(monkeypatch, budget, work_row_bytes):
    """Every message equal (bounds pruning included), and the assignment phase reads host tables.
    With no workspace predicted, some buckets start in memory and fall back to streaming."""
    monkeypatch.setattr(plan_module, "WORK_ROW_BYTES", work_row_bytes)
    in_memory = sparse.eliminate_sparse
    fell_back = []

    def spy(*args, **kwargs):
        try:
            return in_memory(*args, **kwargs)
        except sparse.DeviceFull:
            fell_back.append(args[1])
            raise
    monkeypatch.setattr(sparse, "eliminate_sparse", spy)
    streamed = 0
    for seed in range(40):
        problem = tight_problem(seed)
        plan = build_plan(problem, graph.elimination_order(problem), None, 1, "sparse")
        engine = SmallDevice(budget)
        ref, got = run_plan(problem, plan, NumpyEngine()), run_plan(problem, plan, engine)
        same_messages(ref, got)
        if not problem.is_forbidden(got[0]):
            assert assign(problem, plan, engine, got[1], got[2]) == assign(problem, plan, NumpyEngine(), ref[1], ref[2])
        streamed += len(engine.stream_log)
    assert streamed > 0 and (work_row_bytes or fell_back)


def test_forced_chunking_and_a_tiny_row_limit(monkeypatch):
    monkeypatch.setattr(plan_module, "CHUNK_ROWS", 2)
    for seed in range(30):
        problem = tight_problem(seed)
        best, _ = brute_force(problem)
        r = solve(problem, Options(device="cpu", tables="sparse"))
        assert (r.status == "infeasible") == (best >= problem.top)
        if r.status == "optimal":
            assert problem.evaluate(r.assignment) == pytest.approx(best, abs=1e-9)
    problem = generate("random", 8, 4, 0.5, 0.3, seed=1)
    plan = build_plan(problem, graph.elimination_order(problem), None, 1, "sparse")
    plan.row_limit = 5
    with pytest.raises(sparse.SparseOverflow):
        run_plan(problem, plan, NumpyEngine())
