"""What the user reads: one JSON schema for every status, the text printout, usage errors, signals, plots."""
import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner
from helpers import bounded_case

import gpusolve
from gpusolve import cli
from gpusolve.generate import markov_grid
from gpusolve.cli import main
from gpusolve.engines.numpy_engine import NumpyEngine
from gpusolve.report import SCHEMA_PATH, fields

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = ROOT / "instances" / "random-n14-d10-s1.wcsp"
SCHEMA = json.loads(SCHEMA_PATH.read_text())


def run(*args, **kw):
    return CliRunner().invoke(main, [str(a) for a in args], **kw)


def valid(obj: dict) -> dict:
    jsonschema.validate(obj, SCHEMA)
    assert list(obj)[:len(fields())] == list(fields())
    return obj


@pytest.fixture
def files(tmp_path):
    infeasible = tmp_path / "inf.wcsp"
    infeasible.write_text("inf 2 2 2 10\n2 2\n1 0 10 0\n2 0 1 0 0\n")
    uai = tmp_path / "net.uai"
    gpusolve.write(markov_grid(4, seed=1), uai)  # width 4: MBE(z=2) gives PR bounds, not Z
    grid = tmp_path / "grid.wcsp"
    assert run("generate", "grid", "-n", 36, "-d", 3, "--p2", 0.1, "--seed", 1, "-o", grid).exit_code == 0
    return {"infeasible": infeasible, "uai": uai, "grid": grid}


@pytest.mark.parametrize("case, args, code, status", [
    ("ok", ["{grid}", "--z", 2, "--search"], 0, None),
    ("infeasible", ["{infeasible}"], 0, "infeasible"),
    ("missing", ["nope.wcsp"], 2, "error"),
    ("budget", ["{grid}", "--mem-limit", "1K"], 3, "error"),
    ("mar", ["{uai}", "--task", "MAR"], 0, "optimal"),
    ("pr-bounds", ["{uai}", "--task", "PR", "--z", 2], 0, "bounded"),
    ("usage", ["{grid}", "--mem-limit", "lots"], 2, "error"),
])
def test_every_status_has_every_field(files, case, args, code, status):
    args = [str(a).format(**files) for a in args]
    r = run("solve", *args, "--json", "--time-limit", 20)
    assert r.exit_code == code, r.output
    obj = valid(json.loads(r.stdout))
    assert obj["schema_version"] == 1 and obj["gpusolve_version"] == "0.1.0"
    if status:
        assert obj["status"] == status
    if obj["status"] == "error":
        assert obj["message"] and "\n" not in obj["message"]


def test_batch_lines_follow_the_schema(files, tmp_path):
    out = tmp_path / "r.jsonl"
    r = run("batch", files["grid"].parent, "--out", out)
    assert r.exit_code == 0, r.output
    lines = [valid(json.loads(line)) for line in out.read_text().splitlines()]
    assert {line["status"] for line in lines} >= {"infeasible", "optimal"}


def test_readme_documents_every_field():
    readme = (ROOT / "README.md").read_text()
    missing = [f for f in fields() if f"`{f}`" not in readme]
    assert not missing, missing


def test_induced_width_is_the_orders_not_z(files):
    r = json.loads(run("solve", files["grid"], "--z", 2, "--json", "--no-search").stdout)
    assert r["z"] == 2 and r["induced_width"] == 6  # 6x6 grid, min-fill


def test_text_output_has_no_none_nor_trailing_spaces(files):
    for args in ([files["infeasible"]], [files["grid"], "--z", 2, "--no-search"], [files["uai"], "--task", "MAR"]):
        r = run("solve", *args)
        assert r.exit_code == 0
        assert "None" not in r.stdout
        assert not [line for line in r.stdout.splitlines() if line != line.rstrip()]
    text = run("solve", files["infeasible"]).stdout
    assert "preprocessing" in text and "exact BE" not in text
    info = run("info", files["grid"]).stdout
    assert not [line for line in info.splitlines() if line != line.rstrip()]


def test_bounded_sparse_be_is_named_and_advances_a_bar():
    problem, order, fallback = bounded_case(3)
    totals, done = [], []

    def factory(total):
        totals.append(total)
        return done.append

    from gpusolve.eliminate import bounded_sparse
    bounded_sparse(problem, order, fallback, 1 << 30, NumpyEngine(), None, progress_factory=factory)
    assert totals and sum(done) > 0


def test_pr_uai_output_says_which_bound(files, tmp_path):
    out = tmp_path / "r.PR"
    r = json.loads(run("solve", files["uai"], "--task", "PR", "--z", 2, "--uai-output", out, "--json").stdout)
    assert r["uai_output"] == {"path": str(out), "bound": "lower"}
    assert float(out.read_text().split()[1]) == pytest.approx(r["lower_bound"])
    exact = json.loads(run("solve", files["uai"], "--task", "PR", "--uai-output", out, "--json").stdout)
    assert exact["uai_output"]["bound"] == "exact"


def test_options_are_checked_before_any_work(files, tmp_path, monkeypatch):
    def boom(*a, **k):
        raise AssertionError("solved before checking the options")

    monkeypatch.setattr(cli, "solve_file", boom)
    for args in (["--uai-output", tmp_path / "x.MPE"], ["--solution", tmp_path / "no" / "dir" / "x.sol"],
                 ["--uai-output", tmp_path / "missing" / "x.MPE"]):
        r = run("solve", files["grid"], *args, "--json")
        assert r.exit_code == 2, r.output
        assert len(r.stderr.strip().splitlines()) == 1
        valid(json.loads(r.stdout))


@pytest.mark.parametrize("args, pattern", [
    (["--mem-limit", "lots"], "not a size"),
    (["--z", "0"], "--z"),
    (["--time-limit", "-1"], "--time-limit"),
    (["--time-limit", "nan"], "--time-limit"),
    (["--solution", "{dir}"], "--solution"),
    (["--device", "tpu"], "--device"),
    (["--nosuch"], "--nosuch"),
])
def test_usage_errors_are_one_line_and_json(files, tmp_path, args, pattern):
    args = [a.replace("{dir}", str(tmp_path)) for a in args]
    for json_flag in ([], ["--json"]):
        r = run("solve", files["grid"], *args, *json_flag)
        assert r.exit_code == 2, r.output
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and pattern in lines[0], r.stderr
        if json_flag:
            obj = valid(json.loads(r.stdout))
            assert obj["status"] == "error" and pattern in obj["message"]
        else:
            assert r.stdout == ""


def test_short_version_flag():
    for flag in ("-V", "--version"):
        r = run(flag)
        assert r.exit_code == 0 and "0.1.0" in r.stdout


# The command line, with a line on stderr once the solver holds an incumbent: a signal sent after it
# lands mid-solve, however loaded the machine.
MARKED = """import sys
from gpusolve import anytime
from gpusolve.cli import main
offer = anytime.Bounds.offer


def marked(self, assignment, phase):
    taken = offer(self, assignment, phase)
    if taken:
        print("incumbent held", file=sys.stderr, flush=True)
    return taken


anytime.Bounds.offer = marked
main(sys.argv[1:], prog_name="gpusolve")
"""


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 0)])
def test_sigint_exits_130_sigterm_0_with_the_best_result(tmp_path, sig, code):
    """Ctrl-C: 130 (issue 12); SIGTERM ends as a time limit does, exit 0 (the anytime issue)."""
    grid = tmp_path / "g.wcsp"  # width 10, domain 10: no proof in sight
    assert run("generate", "grid", "-n", 100, "-d", 10, "--seed", 4, "-o", grid).exit_code == 0
    proc = subprocess.Popen([sys.executable, "-c", MARKED, "solve", str(grid), "--json", "--device", "cpu"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    seen = []
    while "incumbent held\n" not in seen:
        line = proc.stderr.readline()
        assert line, "the solver ended before holding an incumbent: " + "".join(seen)
        seen.append(line)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=300)  # a guard against a hang, not a speed
    assert proc.returncode == code, err
    r = valid(json.loads(out))
    assert r["status"] == "bounded" and "interrupted" in r["device_note"]


@pytest.mark.slow
def test_info_plot_draws_the_bucket_profile(files, tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "profile.png"
    r = run("info", files["grid"], "--plot", png, "--mem-limit", "1M")
    assert r.exit_code == 0, r.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    code = "import sys, gpusolve.cli; print('matplotlib' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT).stdout.strip() == "False"


def test_missing_output_folders_are_one_line(files, tmp_path):
    r = run("batch", files["grid"].parent, "--out", tmp_path / "no" / "r.jsonl")
    assert r.exit_code == 2 and "Traceback" not in r.output and re.search("no.r.jsonl", r.stderr)
