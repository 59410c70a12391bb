"""The Python API: gpusolve.read / solve / Model, round trips through .wcsp, .uai and .cfn, packaging."""
import math
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from helpers import brute_force, random_problem

import gpusolve

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = ROOT / "instances" / "random-n14-d10-s1.wcsp"


def test_version_read_and_solve_a_path():
    assert gpusolve.__version__ == "0.1.0"
    problem = gpusolve.read(BUNDLED)
    assert len(problem.variables) == 14
    by_path = gpusolve.solve(BUNDLED, device="cpu")
    by_problem = gpusolve.solve(problem, time_limit=3600)  # the keyword passed through; no speed assumed
    assert by_path.status == by_problem.status == "optimal"
    assert by_path.upper_bound == by_problem.upper_bound == by_path.lower_bound
    mbe = gpusolve.solve(BUNDLED, z=2, search=False)
    assert mbe.z == 2 and mbe.lower_bound <= by_path.upper_bound
    assert mbe.upper_bound is None or by_path.upper_bound <= mbe.upper_bound


def test_import_gpusolve_stays_light():
    code = "import sys, gpusolve; print(sorted(m for m in ('numpy', 'rich', 'networkx') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.stdout.strip() == "[]"


def colouring():
    """Three regions, three colours, neighbours differ; a preference for red on `a`."""
    m = gpusolve.Model("colouring")
    for name in "abc":
        m.add_variable(name, ["red", "green", "blue"])
    m.add_function(["a"], [0, 3, 4])
    m.add_function(["b", "c"], [(("green", "blue"), 1)], default=5)
    m.add_constraint(["a", "b"], forbidden=[(v, v) for v in ("red", "green", "blue")])
    m.add_constraint(["b", "c"], allowed=[("green", "blue"), ("blue", "green"), ("red", "blue")])
    m.add_function(["a", "c"], np.array([[math.inf, 0, 0], [0, math.inf, 0], [0, 0, math.inf]]))
    m.add_constant(2)
    return m


def test_model_built_in_python_solves_and_names_its_values():
    m = colouring()
    r = gpusolve.solve(m, device="cpu")
    assert r.status == "optimal" and r.upper_bound == 2 + 0 + 1
    assert m.values(r.assignment) == {"a": "red", "b": "green", "c": "blue"}


def test_model_errors_name_what_is_wrong():
    m = gpusolve.Model()
    m.add_variable("x", 2)
    with pytest.raises(ValueError, match="unknown variable y"):
        m.add_function(["y"], [0, 1])
    with pytest.raises(ValueError, match="shape"):
        m.add_function(["x"], [0, 1, 2])
    with pytest.raises(ValueError, match="integer"):
        m.add_function(["x"], [0.5, 1])
    with pytest.raises(ValueError, match="value 'z'"):
        m.add_constraint(["x"], allowed=[("z",)])


@pytest.mark.parametrize("suffix", [".wcsp", ".cfn", ".uai", ".cfn.gz", ".wcsp.xz"])
def test_round_trip_keeps_the_optimum(tmp_path, suffix):
    m = colouring()
    path = tmp_path / f"c{suffix}"
    m.write(path)
    back = gpusolve.read(path)
    expected = gpusolve.solve(m, device="cpu")
    got = gpusolve.solve(back, device="cpu")
    if suffix == ".uai":  # MPE of p = 10^-cost: the log10 probability is minus the cost
        assert got.upper_bound == pytest.approx(-expected.upper_bound)
    else:
        assert got.upper_bound == expected.upper_bound and got.assignment == expected.assignment
    if suffix.startswith(".cfn"):
        assert [v.labels for v in back.variables] == [("red", "green", "blue")] * 3


@pytest.mark.parametrize("seed", range(12))
def test_random_problems_round_trip_through_every_format(tmp_path, seed):
    problem = random_problem(np.random.default_rng(seed))
    best, _ = brute_force(problem)
    for suffix in (".wcsp", ".cfn"):
        path = tmp_path / f"p{suffix}"
        gpusolve.write(problem, path)
        back = gpusolve.read(path)
        got, _ = brute_force(back)
        if problem.is_forbidden(best):
            assert back.is_forbidden(got)
        else:
            assert back.to_file_value(got) == problem.to_file_value(best)


@pytest.mark.slow
def test_parsers_belong_to_gpusolve_in_the_wheel(tmp_path):
    """The readers are installed as gpusolve.parsers, so `import parsers` stays free for others."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
                   check=True, capture_output=True)
    wheel, = tmp_path.glob("gpusolve-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "gpusolve/parsers/wcsp.py" in names and "gpusolve/parsers/cfn.py" in names
    assert "gpusolve/schema.json" in names
    assert not any(n.startswith("parsers/") for n in names)


def test_license_and_gpu_test_target(tmp_path):
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    assert 'license = "MIT"' in (ROOT / "pyproject.toml").read_text()
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    with_venv = subprocess.run(["make", "-n", "-C", str(ROOT), "gpu-test", f"VENV={venv}"],
                               capture_output=True, text=True).stdout
    without = subprocess.run(["make", "-n", "-C", str(ROOT), "gpu-test", f"VENV={tmp_path / 'none'}"],
                             capture_output=True, text=True).stdout
    assert f"{venv}/bin/python -m pytest -q -m gpu" in with_venv
    assert "python3 -m pytest -q -m gpu" in without


@pytest.mark.parametrize("text, size", [("8G", 8 << 30), ("512M", 512 << 20), ("1000000", 10 ** 6),
                                        ("1.5k", 1536), ("2 GiB", 2 << 30), ("64mb", 64 << 20), ("0", 0)])
def test_sizes(text, size):
    from gpusolve.cli.commands import parse_size
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["lots", "", "-1G", "1e9", "8X", "nan"])
def test_not_sizes(text):
    import click

    from gpusolve.cli.commands import parse_size
    with pytest.raises(click.BadParameter, match="not a size"):
        parse_size(text)
