"""What the user reads: one JSON schema for every status, the text printout, usage errors, signals, plots."""
import ast
import json
import math
import re
import signal
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner
from helpers import bounded_case
from hypothesis import example, given, settings
from hypothesis import strategies as st

import gpusolve
from gpusolve.cli import solve as solve_command
from gpusolve.generate import markov_grid
from gpusolve.cli.group import main
from gpusolve.engines.numpy_engine import NumpyEngine
from gpusolve.report import SCHEMA_PATH, dumps, fields, record

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
    ("below-floor", ["{grid}", "--mem-limit", "1K"], 2, "error"),
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


def test_the_api_page_documents_every_field():
    page = (ROOT / "docs" / "api.md").read_text()
    missing = [f for f in fields() if f"`{f}`" not in page]
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

    from gpusolve.inference.eliminate import bounded_sparse
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

    monkeypatch.setattr(solve_command, "solve_file", boom)
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
from gpusolve.schedule import bounds
from gpusolve.cli.group import main
offer = bounds.Bounds.offer


def marked(self, assignment, phase):
    taken = offer(self, assignment, phase)
    if taken:
        print("incumbent held", file=sys.stderr, flush=True)
    return taken


bounds.Bounds.offer = marked
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
    code = "import sys, gpusolve.cli.group; print('matplotlib' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT).stdout.strip() == "False"


def test_missing_output_folders_are_one_line(files, tmp_path):
    r = run("batch", files["grid"].parent, "--out", tmp_path / "no" / "r.jsonl")
    assert r.exit_code == 2 and "Traceback" not in r.output and re.search("no.r.jsonl", r.stderr)


def strict(text: str):
    """json.loads that refuses Infinity and NaN, as strict parsers (RFC 8259) do."""
    def reject(constant):
        raise AssertionError(f"JSON holds {constant}")
    return json.loads(text, parse_constant=reject)


def test_solve_and_batch_json_stay_strict_with_an_infinite_time_limit(files, tmp_path):
    """`--time-limit inf` is accepted; its options field was written as Infinity."""
    r = run("solve", files["infeasible"], "--time-limit", "inf", "--json")
    assert r.exit_code == 0, r.output
    assert valid(strict(r.stdout))["options"]["time_limit"] is None
    out = tmp_path / "r.jsonl"
    assert run("batch", files["grid"].parent, "--out", out, "--time-limit", "inf").exit_code == 0
    for line in out.read_text().splitlines():
        assert valid(strict(line))["options"]["time_limit"] is None


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.sampled_from([math.inf, -math.inf, math.nan])
    | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
    | st.dictionaries(st.text(max_size=5), inner, max_size=4), max_leaves=20)


@given(json_values)
@example({"z": [math.inf, (-math.inf, math.nan)], "n": 1.5})
@settings(max_examples=200, deadline=None)
def test_dumps_writes_strict_json_and_nulls_only_what_json_cannot_hold(value):
    text = dumps({"lower_bound": value, "extra": [value]})
    got = strict(text)

    def same(a, b):  # `a` as written, `b` as read back
        if isinstance(a, float) and not math.isfinite(a):
            return b is None
        if isinstance(a, (list, tuple)):
            return isinstance(b, list) and len(a) == len(b) and all(map(same, a, b))
        if isinstance(a, dict):
            return b.keys() == a.keys() and all(same(a[k], b[k]) for k in a)
        return a == b

    assert same(value, got["lower_bound"]) and same([value], got["extra"])


def test_records_hold_no_infinite_number():
    rec = record("f", "bounded", lower_bound=-math.inf, upper_bound=math.nan, trace=[[0.0, -math.inf, 1.5, "BE"]],
                 options={"time_limit": math.inf})
    valid(strict(json.dumps(rec)))
    assert rec["lower_bound"] is None and rec["upper_bound"] is None and rec["trace"] == [[0.0, None, 1.5, "BE"]]


def test_every_command_writes_its_json_through_report_dumps():
    """The one place that keeps JSON strict: no other module serialises a record itself (serve's
    client request, its own wire format with no numbers from a solve, aside)."""
    writers = []
    for path in sorted((ROOT / "gpusolve").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Call) and ast.unparse(node.func) in ("json.dumps", "json.dump"):
                    writers.append(f"{path.relative_to(ROOT / 'gpusolve').as_posix()}:{fn.name}")
    assert sorted(set(writers)) == ["report.py:dumps", "serve/client.py:_request"], writers
