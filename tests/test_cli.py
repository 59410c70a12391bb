"""The command line: solve, info, generate, batch, exit codes and one-line errors."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpusolve.cli import main

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = ROOT / "instances" / "random-n14-d10-s1.wcsp"


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def small(tmp_path):
    path = tmp_path / "r.wcsp"
    assert run("generate", "random", "-n", 8, "-d", 4, "--seed", 3, "-o", path).exit_code == 0
    return path


def test_solve_json_fields_and_solution_file(small, tmp_path):
    sol = tmp_path / "r.sol"
    r = run("solve", small, "--json", "--device", "cpu", "--solution", sol)
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    for key in ("file", "task", "status", "lower_bound", "upper_bound", "assignment", "z",
                "induced_width", "time_s"):
        assert key in data
    assert data["status"] == "optimal" and data["lower_bound"] == data["upper_bound"]
    assert data["task"] == "WCSP" and data["z"] is None
    assert [int(x) for x in sol.read_text().split()] == data["assignment"]


def test_json_output_is_one_object_and_auto_notice_on_stderr(small):
    r = run("solve", small, "--json")
    assert r.exit_code == 0
    assert len(r.stdout.strip().splitlines()) == 1 and json.loads(r.stdout)
    assert "note:" in r.stderr


def test_human_output_names_bounds_and_phases(small):
    r = run("solve", small, "--z", 2, "--device", "cpu")
    assert r.exit_code == 0
    for word in ("lower bound", "upper bound", "gap", "MBE(z=2)", "induced width", "eliminate", "assignment",
                 "bounds over time"):
        assert word in r.stdout


@pytest.mark.parametrize("args, code, pattern", [
    (["solve", "missing.wcsp"], 2, "missing.wcsp"),
    (["solve", "{small}", "--z", "1"], 2, "largest arity"),
    (["solve", "{small}", "--order", "nosuchfile"], 2, "nosuchfile"),
    (["solve", "{small}", "--order", "random"], 2, "random"),
    (["solve", "{small}", "--mem-limit", "1K"], 3, "memory budget"),
    (["solve", "{small}", "--z", "3", "--mem-limit", "1500", "--tables", "dense"], 3, "largest bucket"),
    (["solve", "{small}", "--mem-limit", "lots"], 2, "not a size"),
    (["solve", "{small}", "--gpu-mem-limit", "lots"], 2, "not a size"),
])
def test_errors_are_one_line_with_exit_code(small, args, code, pattern):
    args = [a.replace("{small}", str(small)) for a in args]
    r = run(*args)
    assert r.exit_code == code, (r.output, r.stderr)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert any(pattern in line for line in lines), r.stderr
    assert "Traceback" not in r.stderr + r.stdout


def test_device_gpu_solves_on_the_device_or_exits_2_without_one(small):
    """Exit 2 and one line only where no GPU is usable; on a GPU host the brute-force optimum, from the device."""
    from gpusolve import parsers
    from gpusolve.engines import gpu_unavailable_reason
    from helpers import brute_force
    r = run("solve", small, "--device", "gpu", "--host-max", 0, "--json")
    if gpu_unavailable_reason() is None:
        assert r.exit_code == 0, r.output
        data = json.loads(r.stdout)
        problem = parsers.read(small)
        assert data["engine"] == "cupy" and data["status"] == "optimal"
        assert data["lower_bound"] == data["upper_bound"] == problem.to_file_value(brute_force(problem)[0])
    else:
        assert r.exit_code == 2, r.output
        assert any("--device gpu" in line for line in r.stderr.splitlines()) and "Traceback" not in r.output


def test_time_limit_reports_the_bounds_held(small):
    """Exit 4 is only for no bound at all: a zero time limit still reports the trivial lower bound."""
    r = run("solve", small, "--time-limit", "0", "--json")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["status"] == "bounded" and out["lower_bound"] is not None
    assert out["trace"][0][3] == "trivial" and "time limit reached" in out["device_note"]


def test_subprocess_bad_input_prints_file_line_and_exits_2(tmp_path):
    bad = tmp_path / "bad.wcsp"
    bad.write_text("bad 2 2 1 10\n2 2\n2 0 1 0 1\n0 0 oops\n")
    p = subprocess.run([sys.executable, "-m", "gpusolve", "solve", str(bad)], capture_output=True, text=True)
    assert p.returncode == 2
    assert p.stderr.strip().startswith(f"{bad}:4:") and len(p.stderr.strip().splitlines()) == 1


def test_info_reports_widths_and_memory(small):
    r = run("info", small)
    assert r.exit_code == 0
    for word in ("induced width (minfill)", "induced width (mindegree)", "peak", "MBE(z)"):
        assert word in r.stdout


def test_batch_resumes_and_records_errors(tmp_path):
    folder = tmp_path / "set"
    (folder / "sub").mkdir(parents=True)
    for i in range(3):
        run("generate", "random", "-n", 6, "-d", 3, "--seed", i, "-o", folder / "sub" / f"g{i}.wcsp")
    (folder / "broken.wcsp").write_text("x 1 1 1\n")
    (folder / "notes.txt").write_text("ignored\n")
    out = tmp_path / "res.jsonl"
    r = run("batch", folder, "--out", out, "--device", "cpu")
    assert r.exit_code == 0, r.output
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) == 4
    status = {Path(x["file"]).name: x["status"] for x in lines}
    assert status["broken.wcsp"] == "error" and "broken.wcsp" in lines[0]["message"]
    assert all(status[f"g{i}.wcsp"] in ("optimal", "infeasible") for i in range(3))
    assert "batch summary" in r.stdout
    # a killed run leaves a partial line; a re-run solves only what is missing
    kept = out.read_text().splitlines()[:2]
    out.write_text("\n".join(kept) + '\n{"file": "trunc')
    r = run("batch", folder, "--out", out, "--device", "cpu")
    assert r.exit_code == 0
    assert "2 already in" in r.stderr
    records = [json.loads(x) for x in out.read_text().splitlines()]  # the cut line was truncated
    assert sorted(Path(x["file"]).name for x in records) == sorted(status)


def test_bundled_instance_solves():
    from helpers import toulbar2_file_optimum
    r = run("solve", BUNDLED, "--json", "--device", "cpu")
    data = json.loads(r.stdout)
    assert data["status"] == "optimal" and data["lower_bound"] == data["upper_bound"] == toulbar2_file_optimum(BUNDLED)


def test_import_and_help_load_no_heavy_module():
    """Start-up stays cheap: importing the command line or asking for --help loads neither NumPy,
    networkx, rich, the readers nor the solver (they load inside the commands that use them)."""
    heavy = ("numpy", "networkx", "rich", "parsers", "gpusolve.solve")
    code = ("import sys; from gpusolve.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            f"print([m for m in {heavy!r} if m in sys.modules])")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().splitlines()[-1] == "[]"


def test_solving_a_wcsp_loads_only_what_it_runs(small):
    """A CPU solve of a .wcsp orders on adjacency sets (no networkx), and loads neither the GPU
    engine nor the other formats' readers."""
    unused = ("networkx", "gpusolve.engines.cupy_engine", "gpusolve.parsers.xcsp", "gpusolve.parsers.uai",
              "gpusolve.parsers.cfn")
    code = ("import sys; from gpusolve.cli import main\n"
            f"main(['solve', {str(small)!r}, '--json'], standalone_mode=False)\n"
            f"print([m for m in {unused!r} if m in sys.modules])")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout.splitlines()[0])["status"] == "optimal"
    assert p.stdout.strip().splitlines()[-1] == "[]"
