"""Every benchmark script runs: its --quick mode in a fresh process, results in a temporary folder.

The GPU scripts' quick runs need a CUDA device (marked gpu); on any machine
they at least import and parse their options (--help), so none can rot.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
CPU = ("cpu_engine", "probabilistic", "sparse", "shift", "anytime", "local_search", "startup", "unique", "csg",
       "alldiff", "dcop", "scaleout", "slicing", "serve", "search")
GPU = ("gpu_kernel", "gpu_largest", "gpu_streaming", "gpu_end_to_end", "gpube", "batch_gpu")


def run(script, *args, results: Path):
    env = dict(os.environ, GPUSOLVE_BENCH_RESULTS=str(results))
    return subprocess.run([sys.executable, str(BENCH / f"{script}.py"), *args], capture_output=True, text=True,
                          env=env, timeout=300)


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


@pytest.mark.parametrize("script", CPU)
def test_cpu_bench_quick_mode_writes_its_record(script, tmp_path):
    check_quick(script, tmp_path)


def test_csg_workers_quick_mode_writes_its_record(tmp_path):
    pytest.importorskip("dask.distributed")
    check_quick("csg", tmp_path, "--workers", "2", bench="csg-workers")


def test_local_search_sweeps_quick_mode_writes_its_record(tmp_path):
    check_quick("local_search", tmp_path, "--sweeps", "2", bench="local_search-sweeps")


@pytest.mark.parametrize("script", CPU + GPU)
def test_bench_imports_and_parses_options(script, tmp_path):
    p = run(script, "--help", results=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "--quick" in p.stdout and not any(tmp_path.iterdir())


@pytest.mark.gpu
@pytest.mark.parametrize("script", GPU)
def test_gpu_bench_quick_mode_writes_its_record(cupy, script, tmp_path):
    check_quick(script, tmp_path)
