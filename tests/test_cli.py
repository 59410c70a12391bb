"""The command line: solve, info, generate, batch, exit codes and one-line errors."""
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_hardening import PEAK

from gpusolve.cli.common import LiveLine, progress_bar
from gpusolve.cli.group import main

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = ROOT / "instances" / "random-n14-d10-s1.wcsp"


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def small(tmp_path):
    path = tmp_path / "r.wcsp"
    assert run("generate", "random", "-n", 8, "-d", 4, "--seed", 3, "-o", path).exit_code == 0
    return path


@pytest.fixture
def wide(tmp_path):
    """A triangle of 500-value variables: MBE(z=3) needs a 500^3 bucket."""
    path = tmp_path / "wide.wcsp"
    tables = "".join(f"2 {a} {b} 0 1\n0 0 1\n" for a, b in ((0, 1), (1, 2), (0, 2)))
    path.write_text("wide 3 500 3 10\n500 500 500\n" + tables)
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


def test_a_proof_by_the_compiled_search_alone_prints_its_search_line(tmp_path, monkeypatch):
    """The table read AND/OR search's counters, which a proof by the compiled search alone (scheduled
    first where exact BE does not fit) does not have: a KeyError. Its boxes unbounded: no clock involved."""
    from gpusolve.schedule import anytime
    monkeypatch.setattr(anytime, "CORE_LOAD_S", float("inf"))
    monkeypatch.setattr(anytime, "CORE_FIRST_S", float("inf"))
    path = tmp_path / "r.wcsp"
    generated = run("generate", "random", "-n", 16, "-d", 8, "--p1", 0.4, "--p2", 0.3, "--seed", 1, "-o", path)
    assert generated.exit_code == 0
    r = run("solve", path, "--device", "cpu", "--mem-limit", "64M")  # exact BE needs 291 MiB
    assert r.exit_code == 0, r.output
    assert re.search(r"method +HBFS \(EDAC\*\)", r.output)
    assert re.search(r"search +compiled HBFS: [\d,]+ nodes, [\d,]+ per s, complete", r.output), r.output


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
    (["solve", "{small}", "--mem-limit", "1K"], 2, "below the floor of 64.0 MiB"),
    (["solve", "{small}", "--mem-limit", "lots"], 2, "not a size"),
    (["solve", "{small}", "--gpu-mem-limit", "lots"], 2, "not a size"),
])
def test_errors_are_one_line_with_exit_code(small, wide, args, code, pattern):
    args = [a.replace("{small}", str(small)).replace("{wide}", str(wide)) for a in args]
    r = run(*args)
    assert r.exit_code == code, (r.output, r.stderr)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert any(pattern in line for line in lines), r.stderr
    assert "Traceback" not in r.stderr + r.stdout


def test_device_gpu_solves_on_the_device_or_exits_2_without_one(small):
    """Exit 2 and one line only where no GPU is usable; on a GPU host the brute-force optimum, from the device."""
    from gpusolve import parsers
    from gpusolve.cuda.runtime import gpu_unavailable_reason
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


def test_info_over_the_memory_budget_exits_3_as_solve_does(tmp_path):
    big = tmp_path / "big.wcsp"
    big.write_text("t 1 268435456 1 10\n268435456\n1 0 0 0\n")  # 2^28 entries: 2 GiB of int64
    for command in ("info", "solve"):
        r = run(command, big, "--mem-limit", "100M")
        assert r.exit_code == 3 and "memory budget" in r.stderr, (command, r.output)


def test_info_reports_widths_and_memory(small):
    r = run("info", small)
    assert r.exit_code == 0
    for word in ("induced width (minfill)", "induced width (mindegree)", "peak", "MBE(z)"):
        assert word in r.stdout


def test_info_prints_the_exact_methods_predictions_and_the_choice(small):
    """Why exact BE or bounded sparse BE is or is not in the schedule, with the figures it was decided on."""
    from gpusolve import parsers
    from gpusolve.consistency.preprocess import preprocess
    from gpusolve.host import fmt_bytes
    from gpusolve.order import graph
    from gpusolve.plan.buckets import build_plan
    problem = preprocess(parsers.read(str(small))).problem
    order = graph.elimination_order(problem)
    r = run("info", small, "--time-limit", 10)
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    for tables, kind in (("dense", "dense"), ("sparse", "all sparse")):
        peak = fmt_bytes(build_plan(problem, order, None, 1, tables).peak_bytes)
        assert any(f"exact BE ({kind}): predicted" in line and f"peak {peak}, fits" in line for line in lines), r.stdout
    assert any(line.strip().startswith("exact BE (") and line.endswith(": scheduled alone") for line in lines)
    r = run("info", small, "--z", 2)
    assert "exact BE: not scheduled, a --z asks for mini-buckets" in r.stdout
    assert "bounded sparse BE: not scheduled, a --z asks for mini-buckets" in r.stdout


def test_batch_resumes_and_records_errors(tmp_path):
    folder = tmp_path / "set"
    (folder / "sub").mkdir(parents=True)
    for i in range(3):
        run("generate", "random", "-n", 6, "-d", 3, "--seed", i, "-o", folder / "sub" / f"g{i}.wcsp")
    (folder / "broken.wcsp").write_text("x 1 1 1\n")
    (folder / "notes.txt").write_text("ignored\n")
    out = tmp_path / "res.jsonl"
    r = run("batch", folder, "--out", out, "--device", "cpu")
    assert r.exit_code == 1, r.output  # broken.wcsp ended in error
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
    assert r.exit_code == 1
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
    networkx, rich, the readers nor the solver (they load inside the commands that use them); the
    readers' table in gpusolve.parsers may load."""
    from gpusolve.parsers import READERS
    readers = tuple(f"gpusolve.parsers.{module}" for module in sorted(set(READERS.values())))
    heavy = ("numpy", "networkx", "rich", *readers, "gpusolve.parsers.tables", "gpusolve.schedule.solve")
    code = ("import sys; from gpusolve.cli.group import main\n"
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
    code = ("import sys; from gpusolve.cli.group import main\n"
            f"main(['solve', {str(small)!r}, '--json'], standalone_mode=False)\n"
            f"print([m for m in {unused!r} if m in sys.modules])")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout.splitlines()[0])["status"] == "optimal"
    assert p.stdout.strip().splitlines()[-1] == "[]"


# --- outputs, generate, the memory floor, exit codes, a closed pipe ----------------------------------

@pytest.mark.parametrize("option", ["--solution", "--uai-output"])
def test_an_output_naming_an_input_is_refused(tmp_path, option):
    """--solution or --uai-output naming FILE (itself or through a link) or the evidence file would
    overwrite it: refused before any work, the input left as it was."""
    net = tmp_path / "net.uai"
    net.write_text("MARKOV\n1\n2\n1\n1 0\n2\n0.25 0.75\n")
    evid = tmp_path / "net.evid"
    evid.write_text("0\n")
    link = tmp_path / "link.uai"
    link.symlink_to(net)
    for target, extra in ((net, ()), (link, ()), (evid, ("--evidence", evid))):
        r = run("solve", net, option, target, *extra)
        assert r.exit_code == 2 and "names the input file" in r.stderr, r.output
    assert net.read_text().startswith("MARKOV") and evid.read_text() == "0\n"


def test_solution_and_uai_output_naming_one_file_are_refused(tmp_path):
    net = tmp_path / "net.uai"
    net.write_text("MARKOV\n1\n2\n1\n1 0\n2\n0.25 0.75\n")
    r = run("solve", net, "--solution", tmp_path / "out", "--uai-output", tmp_path / "." / "out")
    assert r.exit_code == 2 and "name the same file" in r.stderr


@pytest.mark.parametrize("text, code", [
    ("p 1 2 1 10\n2\n1 0 10 0\n", 0),  # infeasible: no assignment
    ("p 1 2 1 10\n2\n1 0 0 x\n", 2),  # bad input
])
def test_a_run_without_an_assignment_leaves_no_older_solution(small, tmp_path, text, code):
    sol = tmp_path / "s.txt"
    assert run("solve", small, "--solution", sol).exit_code == 0 and sol.read_text().strip()
    bad = tmp_path / "bad.wcsp"
    bad.write_text(text)
    r = run("solve", bad, "--solution", sol, "--json")
    assert r.exit_code == code, r.output
    assert json.loads(r.stdout)["status"] in ("infeasible", "error") and not sol.exists()


@pytest.mark.parametrize("args, code, pattern", [
    (["-n", 5, "-d", 100_000], 2, "more than a file may declare (2^31)"),
    (["-n", 10, "-d", 46_000], 3, "available: lower -d or -n"),  # 13 tables of 2.1e9 entries: terabytes
])
def test_generate_refuses_tables_too_large_before_allocating(tmp_path, args, code, pattern):
    p = subprocess.run([sys.executable, "-c", PEAK, "generate", "random", *map(str, args), "-o", tmp_path / "g.wcsp"],
                       capture_output=True, text=True, cwd=ROOT)
    *err, peak = p.stderr.splitlines()
    assert p.returncode == code and len(err) == 1 and pattern in err[0], p.stderr
    assert int(peak.split()[1]) < 100 << 10 and not (tmp_path / "g.wcsp").exists()  # KiB: nothing allocated


def test_the_memory_floor_is_stated_and_holds_for_a_small_solve():
    """--mem-limit below the floor is refused, the floor stated (exit 2); --help states it; a small
    CPU solve given the floor stays under it (peak RSS of the whole process)."""
    r = run("solve", BUNDLED, "--mem-limit", "32M")
    assert r.exit_code == 2 and "32.0 MiB is below the floor of 64.0 MiB" in r.stderr
    assert "at least 64M" in " ".join(run("solve", "--help").stdout.split())
    p = subprocess.run([sys.executable, "-c", PEAK, "solve", BUNDLED, "--mem-limit", "64M", "--device", "cpu",
                        "--json"], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0 and json.loads(p.stdout)["status"] == "optimal", p.stderr
    assert int(p.stderr.splitlines()[-1].split()[1]) < 64 << 10  # KiB


def test_solve_help_lists_every_exit_code():
    from gpusolve.cli import common as cli
    text = run("solve", "--help").stdout
    listed = {int(line.split()[0]) for line in text.split("Exit codes:")[1].split("Options:")[0].strip().splitlines()}
    assert listed == {0, 1} | {v for k, v in vars(cli).items() if k.startswith("EXIT_")}


@pytest.mark.parametrize("args", [
    ["solve", BUNDLED, "--device", "cpu"],
    ["solve", BUNDLED, "--device", "cpu", "--json"],
    ["solve", "missing.wcsp", "--json"],
    ["info", BUNDLED],
])
def test_a_closed_stdout_ends_quietly(args):
    """The reader of stdout gone before the first byte (`| head -1` a moment later): exit 141 as
    SIGPIPE, nothing on stderr but what the command says before its output."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    local = ["--no-serve"] if args[0] == "solve" else []
    p = subprocess.run([sys.executable, "-m", "gpusolve", *map(str, args), *local], stdout=write_end,
                       stderr=subprocess.PIPE, text=True, cwd=ROOT)
    os.close(write_end)
    assert p.returncode == 141, p.stderr
    assert "Traceback" not in p.stderr and "Exception" not in p.stderr and "Error" not in p.stderr


# -- the human report: bounds, the bucket profile (issue 36, items 11 and 12) -----------------------

MAXIMISE_FZN = """\
var 0..3: x :: output_var;
var 0..3: y :: output_var;
var 0..6: s :: output_var;
constraint int_lin_eq([1,1,-1],[x,y,s],0);
constraint int_lin_le([1,1],[x,y],5);
solve maximize s;
"""


def test_bounds_over_time_shows_a_maximisations_bounds(tmp_path):
    """A maximisation's first bounds are [none, U]: rich took the bracket for markup and dropped it."""
    path = tmp_path / "max.fzn"
    path.write_text(MAXIMISE_FZN)
    data = json.loads(run("solve", path, "--json", "--device", "cpu").stdout)
    assert data["status"] == "optimal" and data["upper_bound"] == 5  # x + y <= 5 with x, y <= 3
    r = run("solve", path, "--device", "cpu")
    assert r.exit_code == 0, r.output
    line = next(row for row in r.stdout.splitlines() if row.startswith("bounds over time"))
    shown = re.findall(r"s \[([^]]*)\] (\w+)", line)
    want = [(", ".join("none" if b is None else str(b) for b in (lo, hi)), phase)
            for _, lo, hi, phase in data["trace"][-6:]]
    assert shown == want and want[0][0].startswith("none, "), line


def test_profile_plot_names_the_orders_width_on_integer_ticks(tmp_path, monkeypatch):
    """MBE's title said the width of its mini-buckets (z - 1) where `info` says the order's; the
    mini-bucket axis had ticks at 2.5, 7.5."""
    figure = pytest.importorskip("matplotlib.figure")
    drawn = []
    monkeypatch.setattr(figure.Figure, "savefig", lambda fig, *args, **kw: drawn.append(fig))
    path = tmp_path / "r.wcsp"
    assert run("generate", "random", "-n", 7, "-d", 2, "--p1", 0.8, "-o", path).exit_code == 0
    for z in (None, 2, 3):
        r = run("info", path, "--plot", tmp_path / "p.png", *(("--z", z) if z else ()))
        assert r.exit_code == 0, r.output
        width = int(re.search(r"induced width \(minfill\): (\d+)", r.stdout).group(1))
        ax = drawn.pop().axes[0]
        assert f"induced width {width}," in ax.get_title() and ("MBE(z=" in ax.get_title()) == bool(z)
        low, high = ax.get_xlim()
        ticks = [t for t in ax.get_xticks() if low <= t <= high]
        assert len(ticks) > 1 and all(float(t).is_integer() for t in ticks), ticks


def test_a_z_over_the_memory_budget_runs_the_largest_that_fits(wide):
    """Where MBE(z=3) needs 1 GB, --mem-limit 100M runs z=2 and says so (it exited 3: issue 36.1)."""
    r = run("solve", wide, "--z", "3", "--mem-limit", "100M", "--tables", "dense", "--device", "cpu", "--json")
    assert r.exit_code == 0, r.output
    rec = json.loads(r.stdout)
    assert rec["z"] == 2 and rec["status"] in ("optimal", "bounded")
    assert "MBE(z=3) needs" in rec["device_note"] and "running z=2" in rec["device_note"]


def terminal():
    """A console that takes itself for a terminal, what it draws kept."""
    from rich.console import Console
    return Console(file=io.StringIO(), force_terminal=True, width=200)


def frames(console) -> list[str]:
    """The lines a live display drew, control codes removed."""
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", console.file.getvalue())
    return [line for line in re.split(r"[\r\n]", text) if line.strip()]


def test_the_live_line_shows_the_time_the_bounds_the_phase_and_a_search_s_node_rate():
    now, nodes = [100.0], [0]
    line = LiveLine(clock=lambda: now[0])
    line.begin("AND/OR search + DFBB (EDAC*)", lambda: nodes[0])
    line.improved(3984, 4675, "local search")
    now[0], nodes[0] = 104.0, 10_000
    assert line.lines() == ("0:00:04 bounds [3984, 4675], gap 691 (local search)",
                            "AND/OR search + DFBB (EDAC*) for 4 s, 10,000 nodes (2,500/s)")
    line.begin("MBE(z=5)")
    now[0] = 3704.0
    assert line.lines() == ("1:00:04 bounds [3984, 4675], gap 691 (local search)", "MBE(z=5) for 3600 s")


@pytest.mark.parametrize("time_limit", [None, 3600.0])
def test_a_long_search_shows_its_phases_and_nodes_on_a_terminal(time_limit, monkeypatch):
    """A search interrupted at its 4th check (no clock involved): the live display went through the
    phases and showed the search's nodes; no line but an elimination's bar carries a percentage (the
    status once sat at 0.0% for minutes). With no time limit the run said once how it ends."""
    from test_anytime import StopAt, hard_grid

    from gpusolve.search.dfbb import Beside
    from gpusolve.schedule.solve import Options, solve
    con = terminal()
    stop = StopAt(lambda: stop.search_checks >= 4, monkeypatch, interrupt=True)
    with progress_bar(True, "eliminating", time_limit is None, on=con) as (factory, on_bounds, on_phase):
        solve(hard_grid(), Options(device="cpu", z=5, time_limit=time_limit), progress_factory=factory,
              on_bounds=on_bounds, on_phase=on_phase, stop=stop)
    lines = frames(con)
    phases = {m.group(1) for m in (re.match(r"  (.+?) for \d+ s", line) for line in lines) if m}
    assert {"MBE(z=5)", "local search", f"AND/OR search + {Beside.LABEL}"} <= phases
    assert any(re.match(rf"  AND/OR search \+ {re.escape(Beside.LABEL)} for \d+ s, [\d,]+ nodes \(", line)
               for line in lines)
    assert any(re.search(r" bounds \[\d+, \d+\], gap \d+ \(", line) for line in lines)
    eliminations = [line for line in lines if line.startswith("eliminating")]
    assert eliminations and all("%" in line for line in eliminations)
    assert not any("%" in line for line in lines if line not in eliminations)
    assert len([line for line in lines if "Ctrl-C" in line]) == (time_limit is None)


def test_json_keeps_the_terminal_quiet(monkeypatch, small):
    shown, quiet = terminal(), terminal()
    for module in ("gpusolve.cli.common", "gpusolve.cli.solve"):  # the live display's, and solve's own lines
        monkeypatch.setattr(f"{module}.err", lambda: shown)
    assert run("solve", small, "--device", "cpu", "--no-serve").exit_code == 0
    assert frames(shown)  # on a terminal, the live display draws
    for module in ("gpusolve.cli.common", "gpusolve.cli.solve"):
        monkeypatch.setattr(f"{module}.err", lambda: quiet)
    r = run("solve", small, "--device", "cpu", "--no-serve", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["status"] == "optimal"
    assert quiet.file.getvalue() == ""
