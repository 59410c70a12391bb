"""What every benchmark shares: the checkout on sys.path, where results go, device names, timers.

Results are JSON records naming their benchmark, device and date first, written to
bench/results/ (or $GPUSOLVE_BENCH_RESULTS: the CPU test of the benchmarks' quick
modes writes to a temporary folder).
"""
from __future__ import annotations

import contextlib
import datetime
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout's gpusolve and parsers, installed or not
SHARED = Path(os.environ.get("GPUSOLVE_INSTANCES") or ROOT.parent / "shared" / "instances")


def results_dir() -> Path:
    return Path(os.environ.get("GPUSOLVE_BENCH_RESULTS") or ROOT / "bench" / "results")


def write_result(bench: str, device: str, **fields) -> Path:
    """<results>/<bench>-<device>-<date>.json, the record naming its device and date first."""
    date = datetime.date.today().isoformat()
    tag = "".join(c if c.isalnum() else "-" for c in device).strip("-")
    path = results_dir() / f"{bench}-{tag}-{date}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"bench": bench, "device": device, "date": date, **fields}, indent=2) + "\n")
    print(f"wrote {path}")
    return path


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), else what platform knows."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def cache_bytecode(folder: Path) -> dict:
    """Let this process's children cache compiled Python as an installed package does, and say
    what was changed. Some container images set PYTHONDONTWRITEBYTECODE and ship packages
    without .pyc files (the H100's of 2026-11-24: every process compiled NumPy and gpusolve from
    source, 0.3-0.4 s); pip compiles them at install, so the children keep theirs under `folder`
    (warmed by `warm_bytecode`)."""
    was = os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = str(folder)
    return {"PYTHONDONTWRITEBYTECODE_was": was, "PYTHONPYCACHEPREFIX": str(folder)}


def warm_bytecode(*modules: str) -> None:
    """Compile `modules` and what they import into the bytecode cache (`cache_bytecode`) once."""
    subprocess.run([sys.executable, "-c", "; ".join(f"import {m}" for m in modules)], cwd=ROOT, capture_output=True)


def gpu_name() -> str:
    """Name of CUDA device 0 (imports CuPy)."""
    import cupy as cp
    name = cp.cuda.runtime.getDeviceProperties(0)["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


def process_wall(cmd, env=None) -> float:
    """Seconds of one fresh process running `cmd` in the checkout (RuntimeError when it fails)."""
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {p.stderr.strip()[-400:]}")
    return time.perf_counter() - t


def summary(times) -> dict:
    return {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times), "runs": times}


def tiny_instance(folder: Path, env=None) -> Path:
    """The fresh-process benchmarks' instance (random, 10 variables, domain 10, seed 1), generated into `folder`."""
    path = folder / "tiny.wcsp"
    subprocess.run([sys.executable, "-m", "gpusolve", "generate", "random", "-n", "10", "-d", "10", "--seed", "1",
                    "-o", str(path)], check=True, capture_output=True, cwd=ROOT, env=env)
    return path


def gpu_present() -> bool:
    """Whether CuPy sees a CUDA device, asked in a fresh process (this one keeps no CUDA context)."""
    p = subprocess.run([sys.executable, "-c", "import cupy; assert cupy.cuda.runtime.getDeviceCount() > 0"],
                       capture_output=True)
    return p.returncode == 0


def best_time(fn, sync, repeat):
    """(fastest seconds of `repeat` runs of fn(), the last result); `sync` waits for the device."""
    times = []
    for _ in range(repeat):
        sync()
        t = time.perf_counter()
        out = fn()
        sync()
        times.append(time.perf_counter() - t)
    return min(times), out


def time_events(cp, fn, repeat):
    """Median milliseconds of fn() over `repeat` runs, CUDA events, after one warm-up."""
    fn()
    times = []
    for _ in range(repeat):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end))
    return float(np.median(times)), times


@contextlib.contextmanager
def server(device: str, env: dict, log: Path):
    """A `gpusolve serve --device DEVICE` process for the body, with `env` (which must name its
    GPUSOLVE_SERVE_SOCKET); yields its warm-up seconds once it listens. Its log goes to `log`:
    a served solve adds one "gpusolve serve: exit" line."""
    with open(log, "wb") as f:
        proc = subprocess.Popen([sys.executable, "-m", "gpusolve", "serve", "--device", device], env=env, cwd=ROOT,
                                stdout=f, stderr=f)
    try:
        while b"listening" not in log.read_bytes():
            if proc.poll() is not None:
                raise RuntimeError(f"gpusolve serve --device {device} failed: {log.read_text().strip()[-400:]}")
            time.sleep(0.05)
        yield float(re.search(r"warm in ([\d.]+) s", log.read_text()).group(1))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def served_count(log: Path) -> int:
    """Solves a server has answered so far (`server`'s log)."""
    return log.read_text().count("gpusolve serve: exit")
