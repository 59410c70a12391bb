"""batch: resume by resolved path and options, retries, evidence per instance, budgets, summary, CSV."""
import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import gpusolve
from gpusolve.cli.batch import SHOWN
from gpusolve.cli.group import main
from gpusolve.generate import markov_grid

ROOT = Path(__file__).resolve().parents[1]

def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def folder(tmp_path):
    folder = tmp_path / "set"
    folder.mkdir()
    for i in range(3):
        run("generate", "random", "-n", 6, "-d", 3, "--p2", 0.2, "--seed", i, "-o", folder / f"g{i}.wcsp")
    return folder


def lines(path):
    return [json.loads(x) for x in Path(path).read_text().splitlines()]


def test_resume_matches_the_resolved_path(folder, tmp_path, monkeypatch):
    out = tmp_path / "r.jsonl"
    assert run("batch", folder, "--out", out).exit_code == 0
    monkeypatch.chdir(folder.parent)
    r = run("batch", "set", "--out", out)
    assert r.exit_code == 0 and "3 already in" in r.stderr
    assert len(lines(out)) == 3
    assert all(Path(x["file"]).is_absolute() for x in lines(out))


def test_other_options_solve_again_unless_resume(folder, tmp_path):
    out = tmp_path / "r.jsonl"
    run("batch", folder, "--out", out)
    r = run("batch", folder, "--out", out, "--z", 2, "--no-search")
    assert "0 already in" in r.stderr and len(lines(out)) == 6
    assert {x["options"]["z"] for x in lines(out)} == {None, 2}
    r = run("batch", folder, "--out", out, "--z", 3, "--resume")
    assert "3 already in" in r.stderr and len(lines(out)) == 6


def test_retry_errors(folder, tmp_path):
    out = tmp_path / "r.jsonl"
    (folder / "broken.wcsp").write_text("x 1 1 1\n")
    run("batch", folder, "--out", out)
    assert sum(x["status"] == "error" for x in lines(out)) == 1
    (folder / "broken.wcsp").write_text("x 1 1 0 10\n2\n")
    r = run("batch", folder, "--out", out)
    assert "4 already in" in r.stderr
    r = run("batch", folder, "--out", out, "--retry-errors")
    assert "3 already in" in r.stderr
    assert [x["status"] for x in lines(out) if x["file"].endswith("broken.wcsp")] == ["error", "optimal"]


@pytest.mark.parametrize("cut", [b'{"file": "cut-sh', b'{"file": "' + b"7" * (3 << 20)], ids=["short", "over 1 MiB"])
def test_a_line_cut_by_a_kill_is_truncated_whatever_its_length(folder, tmp_path, cut):
    """A run killed while writing its third line (a long error message makes one of any length): the
    next run cuts the partial line off before it appends, so no line is glued to it."""
    out = tmp_path / "r.jsonl"
    run("batch", folder, "--out", out)
    whole = out.read_bytes().splitlines(keepends=True)
    out.write_bytes(b"".join(whole[:2]) + cut)
    r = run("batch", folder, "--out", out)
    assert r.exit_code == 0 and "2 already in" in r.stderr
    assert out.read_bytes().startswith(b"".join(whole[:2])) and out.read_bytes().endswith(b"\n")
    assert sorted(x["file"] for x in lines(out)) == sorted(str(p) for p in folder.iterdir())


def test_unreadable_records_are_solved_again(folder, tmp_path):
    out = tmp_path / "r.jsonl"
    out.write_bytes(b'\xff\xfe not utf-8\n{"file": "x"}\n[1, 2]\n')
    r = run("batch", folder, "--out", out)
    assert r.exit_code == 0, r.output
    assert sum(1 for x in out.read_bytes().splitlines() if b"optimal" in x or b"infeasible" in x) == 3


def test_evidence_is_looked_up_per_instance(tmp_path):
    folder = tmp_path / "nets"
    folder.mkdir()
    gpusolve.write(markov_grid(2, seed=1), folder / "a.uai")
    (folder / "a.uai.evid").write_text("1 0 1\n")
    gpusolve.write(markov_grid(2, seed=2), folder / "b.uai")
    run("generate", "random", "-n", 4, "-d", 2, "--p2", 0, "-o", folder / "c.wcsp")
    out = tmp_path / "r.jsonl"
    r = run("batch", folder, "--out", out)
    assert r.exit_code == 0
    assert all(x["status"] == "optimal" for x in lines(out))
    alone = gpusolve.solve(folder / "a.uai")
    assert [x for x in lines(out) if x["file"].endswith("a.uai")][0]["upper_bound"] == alone.upper_bound
    r = run("batch", folder, "--out", tmp_path / "s.jsonl", "--evidence", folder / "a.uai.evid")
    assert r.exit_code == 2 and "--evidence" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_summary_csv_and_budget(folder, tmp_path):
    out = tmp_path / "r.jsonl"
    r = run("batch", folder, "--out", out, "--csv", "--time-limit", 5)
    assert r.exit_code == 0
    assert "optimal" in r.stdout and "total time" in r.stdout
    rows = list(csv.DictReader(open(out.with_suffix(".csv"))))
    assert len(rows) == 3 and {"file", "status", "lower_bound", "upper_bound", "time_s"} <= set(rows[0])
    assert all(x["options"]["time_limit"] == 5 for x in lines(out))
    r = run("batch", folder, "--out", tmp_path / "b.jsonl", "--budget", 0)
    assert r.exit_code == 0 and "budget" in r.stderr
    assert not (tmp_path / "b.jsonl").exists() or lines(tmp_path / "b.jsonl") == []


def test_out_in_a_missing_folder_is_one_line(folder, tmp_path):
    r = run("batch", folder, "--out", tmp_path / "no" / "r.jsonl")
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.output
    assert os.listdir(tmp_path) == ["set"]


def test_an_instance_in_error_exits_1_with_its_message_in_the_summary(folder, tmp_path):
    broken = [folder / "broken.wcsp", folder / ("long" * 50 + ".wcsp")]  # the second's message is over SHOWN
    for path in broken:
        path.write_text("x 1 1 1\n")
    out = tmp_path / "r.jsonl"
    r = run("batch", folder, "--out", out, "--csv")
    assert r.exit_code == 1, r.output
    failed = [x for x in lines(out) if x["status"] == "error"]
    assert sorted(Path(x["file"]).name for x in failed) == sorted(p.name for p in broken)
    assert max(len(x["message"]) for x in failed) > SHOWN
    for x in failed:
        (row,) = [line for line in r.stdout.splitlines() if f" {Path(x['file']).name} " in line]
        shown = x["message"] if len(x["message"]) <= SHOWN else x["message"][:SHOWN - 3] + "..."
        assert x["message"] and shown in row
    assert sorted(x["message"] for x in csv.DictReader(open(out.with_suffix(".csv"))) if x["status"] == "error") \
        == sorted(x["message"] for x in failed)  # whole
    for path in broken:
        path.unlink()
    assert run("batch", folder, "--out", tmp_path / "s.jsonl").exit_code == 0


def test_ctrl_c_prints_the_summary_so_far_and_the_same_command_resumes(folder, tmp_path):
    """Ctrl-C once the first instance's line is written, while the second (which no schedule closes)
    runs: that one is dropped, not recorded, and solved when the batch runs again."""
    hard = folder / "g1.wcsp"
    assert run("generate", "random", "-n", 60, "-d", 5, "--p1", 0.15, "--p2", 0.3, "--seed", 4,
               "-o", hard).exit_code == 0
    out = tmp_path / "r.jsonl"
    command = [sys.executable, "-m", "gpusolve", "batch", str(folder), "--out", str(out)]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    # A shell without job control starts a background job with SIGINT ignored, and the batch would
    # inherit that (a suite run with `&`): the child gets Ctrl-C's default, as a terminal gives it.
    p = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    while not (out.exists() and out.read_bytes().endswith(b"\n")):  # g0's line is written
        assert p.poll() is None, p.communicate()
        time.sleep(0.01)
    p.send_signal(signal.SIGINT)
    stdout, stderr = p.communicate(timeout=120)
    assert p.returncode == 130, stderr
    (first,) = lines(out)
    assert Path(first["file"]).name == "g0.wcsp"
    assert "g0.wcsp" in stdout and "g1.wcsp" not in stdout and f"{first['status']}: 1" in stdout
    assert "interrupted: 1 of 3 instances are in" in stderr and "run the same command again" in stderr
    assert "Traceback" not in stderr
    run("generate", "random", "-n", 6, "-d", 3, "--p2", 0.2, "--seed", 1, "-o", hard)  # solvable at once now
    r = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "1 already in" in r.stderr, r.stderr
    assert sorted(Path(x["file"]).name for x in lines(out)) == ["g0.wcsp", "g1.wcsp", "g2.wcsp"]
