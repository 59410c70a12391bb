"""batch over Dask workers (gpusolve/distributed/cluster.py): same lines as the serial batch, and a worker killed
mid-instance loses none."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from click.testing import CliRunner

from gpusolve.order import graph
from gpusolve.cli.commands import main
from gpusolve.inference.eliminate import run_plan
from gpusolve.engines.numpy_engine import NumpyEngine
from gpusolve.plan.buckets import build_plan
from gpusolve.search.on_dask import search_on_dask
from gpusolve.search.andor import Heuristic

distributed = pytest.importorskip("dask.distributed")
from helpers import brute_force, random_problem  # noqa: E402


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def generate(folder, topology, n, d, seeds):
    folder.mkdir()
    for s in seeds:
        assert run("generate", topology, "-n", n, "-d", d, "--seed", s, "-o", folder / f"{topology}-{s}.wcsp").exit_code == 0


@pytest.mark.slow
def test_batch_on_a_local_cluster_matches_the_serial_batch(tmp_path):
    generate(tmp_path / "in", "random", 10, 4, range(5))
    serial, spread = tmp_path / "serial.jsonl", tmp_path / "spread.jsonl"
    assert run("batch", tmp_path / "in", "--out", serial, "--device", "cpu").exit_code == 0
    r = run("batch", tmp_path / "in", "--out", spread, "--device", "cpu", "--workers", 2)
    assert r.exit_code == 0, r.output
    key = lambda rec: (rec["file"], rec["status"], rec["lower_bound"], rec["upper_bound"])  # noqa: E731
    assert sorted(map(key, lines(spread))) == sorted(map(key, lines(serial)))
    r = run("batch", tmp_path / "in", "--out", spread, "--device", "cpu", "--workers", 2)  # same options: resumes
    assert r.exit_code == 0 and "5 already in" in r.stderr and len(lines(spread)) == 5


class KillFirstInstance(distributed.WorkerPlugin):
    """On every worker: notes each instance that starts executing (started-PID-N holds its key); the
    first worker to start one SIGKILLs itself there (`killed` holds its pid and key), mid-instance by
    construction, whatever the machine's speed."""

    def __init__(self, folder: str):
        self.folder = folder

    def transition(self, key, start, finish, **kwargs):
        if finish != "executing" or "solve-" not in str(key):
            return
        with open(os.path.join(self.folder, f"started-{os.getpid()}-{time.time_ns()}"), "w") as f:
            f.write(str(key))
        try:
            fd = os.open(os.path.join(self.folder, "killed"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.write(fd, f"{os.getpid()} {key}".encode())
        os.close(fd)
        os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.slow
def test_killing_a_worker_mid_instance_loses_no_line(tmp_path):
    generate(tmp_path / "in", "grid", 16, 3, range(4))
    out, marks = tmp_path / "out.jsonl", tmp_path / "marks"
    marks.mkdir()
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as client:
        client.register_plugin(KillFirstInstance(str(marks)))
        batch = subprocess.run([sys.executable, "-m", "gpusolve", "batch", str(tmp_path / "in"), "--out", str(out),
                                "--device", "cpu", "--scheduler", cluster.scheduler_address],
                               capture_output=True, text=True, timeout=600)  # a guard against a hang, not a speed
    assert batch.returncode == 0, batch.stderr
    pid, key = (marks / "killed").read_text().split(" ", 1)
    again = [p.name for p in marks.glob("started-*") if p.read_text() == key and not p.name.startswith(f"started-{pid}-")]
    assert again, "the killed instance never ran again"
    records = lines(out)
    assert sorted(os.path.basename(r["file"]) for r in records) == [f"grid-{s}.wcsp" for s in range(4)]
    assert all(r["status"] in ("optimal", "infeasible") for r in records), records


@pytest.mark.slow
def test_search_subproblems_on_workers_find_the_optimum(tmp_path):
    engine = NumpyEngine()
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as client:
        for seed in range(25):
            rng = np.random.default_rng(seed)
            problem = random_problem(rng, n_max=7, d_max=4, f_max=10, arity_max=3, n_components=1 + seed % 3)
            order = graph.elimination_order(problem)
            plan = build_plan(problem, order, max(max((f.arity for f in problem.functions), default=1), 2))
            _, _, messages = run_plan(problem, plan, engine)
            best, some = brute_force(problem)
            incumbent = list(some) if some is not None and seed % 2 else None  # with and without an incumbent
            cost, values, _ = search_on_dask(client, problem, order, Heuristic.from_run(plan, engine, messages),
                                             incumbent)
            if problem.is_forbidden(best):
                assert problem.is_forbidden(cost) and values is None
            else:
                assert cost == best == problem.evaluate(values)
        path = tmp_path / "g.wcsp"
        assert run("generate", "grid", "-n", 16, "-d", 4, "-o", path).exit_code == 0
        plain = json.loads(run("solve", path, "--json", "--z", 2, "--device", "cpu").stdout)
        spread = json.loads(run("solve", path, "--json", "--z", 2, "--device", "cpu",
                                "--scheduler", cluster.scheduler_address).stdout)
    assert spread["status"] == plain["status"] == "optimal" and spread["lower_bound"] == plain["lower_bound"]
    assert spread["search"]["executor"].startswith("scheduler") and spread["search"]["complete"]


def test_embedded_workers_share_the_host_memory():
    """Each of n embedded workers may use 1/n of the host, not Dask's memory x threads / cores."""
    from distributed.system import MEMORY_LIMIT
    from gpusolve.distributed.cluster import executor
    with executor(None, 1) as (client, _, _):
        limits = [w["memory_limit"] for w in client.scheduler_info()["workers"].values()]
    assert limits == [MEMORY_LIMIT]


def test_one_worker_per_gpu_needs_a_gpu(tmp_path):
    """Where a GPU is usable, test_gpu_workers_each_see_their_own_device runs the same batch."""
    from gpusolve.cuda.runtime import gpu_unavailable_reason
    if gpu_unavailable_reason() is None:
        pytest.skip("a GPU is usable here")
    generate(tmp_path / "in", "random", 6, 3, range(1))
    r = run("batch", tmp_path / "in", "--out", tmp_path / "o.jsonl", "--device", "gpu", "--workers", 2)
    assert r.exit_code == 2 and r.stderr.strip().splitlines()[-1].startswith("one worker per GPU: ")


@pytest.mark.gpu
def test_gpu_workers_each_see_their_own_device(cupy, tmp_path):
    from gpusolve.distributed.cluster import executor
    with executor(None, None, gpus=True) as (client, what, _):
        seen = sorted(client.run(lambda: os.environ["CUDA_VISIBLE_DEVICES"]).values())
        limits = {w["memory_limit"] for w in client.scheduler_info()["workers"].values()}
    from distributed.system import MEMORY_LIMIT
    assert limits == {int(1 / len(seen) * MEMORY_LIMIT)}  # Dask's reading of the fraction 1/n
    assert seen == [str(i) for i in range(cupy.cuda.runtime.getDeviceCount())] and "one GPU each" in what
    generate(tmp_path / "in", "random", 16, 8, range(4))
    r = run("batch", tmp_path / "in", "--out", tmp_path / "o.jsonl", "--device", "gpu", "--workers", 2,
            "--host-max", 0)
    assert r.exit_code == 0 and all(rec["engine"] == "cupy" for rec in lines(tmp_path / "o.jsonl"))
    assert run("batch", tmp_path / "in", "--out", tmp_path / "cpu.jsonl", "--device", "cpu").exit_code == 0
    key = lambda rec: (rec["file"], rec["status"], rec["lower_bound"], rec["upper_bound"])  # noqa: E731
    assert sorted(map(key, lines(tmp_path / "o.jsonl"))) == sorted(map(key, lines(tmp_path / "cpu.jsonl")))
