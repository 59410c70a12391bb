"""Every benchmark script runs: its --quick mode in a fresh process, results in a temporary folder.

The GPU scripts' quick runs need a CUDA device (marked gpu); on any machine
they at least import and parse their options (--help), so none can rot. Their
results are checked against the NumPy engine: by the test where the record
holds them, else by the script's own asserts (direct evaluation of message rows
in gpu_kernel and gpu_largest, the NumPy engine in gpu_end_to_end).
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

BENCH = Path(__file__).resolve().parents[1] / "bench"
CPU = ("cpu_engine", "probabilistic", "sparse", "shift", "anytime", "local_search", "startup", "unique", "csg",
       "alldiff", "dcop", "scaleout", "slicing", "serve", "search", "vac")
GPU = ("gpu_kernel", "gpu_largest", "gpu_streaming", "gpu_end_to_end", "gpube", "batch_gpu")


def run(script, *args, results: Path):
    env = dict(os.environ, GPUSOLVE_BENCH_RESULTS=str(results))
    return subprocess.run([sys.executable, str(BENCH / f"{script}.py"), *args], capture_output=True, text=True,
                          env=env, timeout=900)  # a guard against a hang, not a speed


def check_quick(script, tmp_path, *args, bench=None):
    bench = bench or script
    before = sorted((BENCH / "results").iterdir())
    p = run(script, "--quick", *args, results=tmp_path)
    assert p.returncode == 0, p.stderr
    (written,) = tmp_path.iterdir()
    record = json.loads(written.read_text())
    assert record["bench"] == bench and record["device"] and record["date"]
    assert written.name.startswith(f"{bench}-")
    assert sorted((BENCH / "results").iterdir()) == before
    return record


@pytest.mark.slow
@pytest.mark.parametrize("script", CPU)
def test_cpu_bench_quick_mode_writes_its_record(script, tmp_path):
    check_quick(script, tmp_path)


@pytest.mark.slow
def test_csg_workers_quick_mode_writes_its_record(tmp_path):
    pytest.importorskip("dask.distributed")
    check_quick("csg", tmp_path, "--workers", "2", bench="csg-workers")


@pytest.mark.slow
def test_local_search_sweeps_quick_mode_writes_its_record(tmp_path):
    check_quick("local_search", tmp_path, "--sweeps", "2", bench="local_search-sweeps")


@pytest.mark.parametrize("script", CPU + GPU)
def test_bench_imports_and_parses_options(script, tmp_path):
    p = run(script, "--help", results=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "--quick" in p.stdout and not any(tmp_path.iterdir())


def cpu_optimum(name: str, folder: Path):
    """The NumPy engine's optimum (None: infeasible) of a script's generated instance
    `topology-nN-dD-sS.wcsp`, made again."""
    from gpusolve import parsers
    from gpusolve.cli.commands import main
    from gpusolve.schedule.solve import Options, solve
    topology, n, d, seed = re.fullmatch(r"(\w+)-n(\d+)-d(\d+)-s(\d+)\.wcsp", name).groups()
    path = folder / name
    assert CliRunner().invoke(main, ["generate", topology, "-n", n, "-d", d, "--seed", seed, "-o", str(path)]).exit_code == 0
    r = solve(parsers.read(path), Options(device="cpu"))
    assert r.status in ("optimal", "infeasible")
    return r.upper_bound


def gpube_equals_the_cpu(record, folder):
    for row in record["rows"]:
        want = cpu_optimum(row["instance"], folder)
        for run in ("empty", "warm", "empty_on_device", "served", "warm_process"):
            assert row[run].get("error") is None and row[run]["upper"] == want, (row["instance"], run, row[run])


def batch_gpu_equals_the_cpu(record, folder):  # same_bounds: every GPU batch's against the CPU batch's
    rows = [r for run in record["runs"].values() for r in run["rows"]]
    assert rows and all(r["same_bounds"] and r["status"] in ("optimal", "infeasible") for r in rows), rows


def end_to_end_ran_the_cpu(record, folder):  # the script asserts the NumPy engine's result equals the GPU's
    rows = [r for r in record["instances"] if "skipped" not in r]
    assert rows and all("cpu" in r for r in rows), rows


CHECKS = {"gpube": gpube_equals_the_cpu, "batch_gpu": batch_gpu_equals_the_cpu,
          "gpu_end_to_end": end_to_end_ran_the_cpu}


@pytest.mark.gpu
@pytest.mark.parametrize("script", GPU)
def test_gpu_bench_quick_mode_writes_its_record(cupy, script, tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    record = check_quick(script, results)
    if script in CHECKS:
        CHECKS[script](record, tmp_path)
