"""Adversarial inputs: sizes checked against the budget before allocating, domains never materialised
when no table needs them, one-line errors, and never an infeasible assignment reported; reading
stopped by the time limit and signals, lines capped, and bad tokens quoted short."""
import gzip
import json
import signal
import subprocess
import sys
from pathlib import Path
from unittest.mock import patch

import numpy as np
import pytest
from helpers import random_problem
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusolve.model.problem import FORBIDDEN, CostFunction, Problem, Variable, finalize_integer
from gpusolve.parsers import ParseError, read, source
from gpusolve.schedule.solve import Options, solve

ROOT = Path(__file__).resolve().parents[1]


# The command line in a child process that prints its peak RSS (KiB) last on stderr: VmHWM, the peak of
# its own memory; getrusage's ru_maxrss would include the parent's RSS, inherited through fork and exec.
PEAK = ("import atexit, sys\n"
        "atexit.register(lambda: print('peak', next(int(line.split()[1]) for line in open('/proc/self/status')\n"
        "                                           if line.startswith('VmHWM:')), file=sys.stderr))\n"
        "from gpusolve.cli.commands import main\nmain(sys.argv[1:])")


def gpusolve(*args):
    """(exit code, JSON record or None, stderr without the peak line, peak RSS of the run in MiB)."""
    p = subprocess.run([sys.executable, "-c", PEAK, "solve", *map(str, args), "--json"],
                       capture_output=True, text=True, cwd=ROOT)
    *err, peak = p.stderr.splitlines()
    rec = json.loads(p.stdout) if p.stdout.strip() else None
    return p.returncode, rec, "".join(line + "\n" for line in err), int(peak.split()[1]) / 1024


def test_declared_table_beyond_the_budget_is_refused_before_allocation(tmp_path):
    huge = tmp_path / "huge.wcsp"
    huge.write_text("t 1 2147483648 1 10\n2147483648\n1 0 0 0\n")  # one unary table of 2^31 entries
    with pytest.raises(ParseError, match="memory budget"):
        read(huge, mem_limit=1 << 30)
    big = tmp_path / "big.wcsp"
    big.write_text("t 1 268435456 1 10\n268435456\n1 0 0 0\n")  # 2^28 entries: 2 GiB of int64
    code, rec, err, rss = gpusolve(big, "--mem-limit", "100M")
    assert code == 3 and rec["status"] == "error" and "memory budget" in rec["message"], err
    assert err.count("\n") == 1 and rss < 400


@pytest.mark.parametrize("domain", [10 ** 8, 10 ** 12])
def test_a_domain_no_table_needs_is_not_materialised(tmp_path, domain):
    path = tmp_path / "free.wcsp"
    path.write_text(f"t 2 {domain} 1 10\n{domain} 2\n1 1 0 1\n1 3\n")
    code, rec, err, rss = gpusolve(path)
    assert code == 0, err
    assert rec["status"] == "optimal" and rec["upper_bound"] == 0 and rec["assignment"] == [0, 0]
    assert rss < 400  # MiB: neither np.ones(d) nor np.arange(d)


def test_unused_large_xcsp_domains_stay_cheap(tmp_path):
    path = tmp_path / "big.xml"
    domains = "".join(f'<domain name="D{i}" nbValues="16777216">0..16777215</domain>' for i in range(3))
    path.write_text(f"""<instance><presentation name="b" format="XCSP 2.1"/>
<domains nbDomains="4">{domains}<domain name="S" nbValues="2">0 1</domain></domains>
<variables nbVariables="2"><variable name="X" domain="D0"/><variable name="Y" domain="S"/></variables>
<relations nbRelations="1"><relation name="R" arity="1" nbTuples="1" semantics="conflicts">0</relation></relations>
<constraints nbConstraints="1"><constraint name="C" arity="1" scope="Y" reference="R"/></constraints>
</instance>""")
    code, rec, err, rss = gpusolve(path)
    assert code == 0, err
    assert rec["status"] == "optimal" and rec["values"] == ["0", "1"]
    assert rss < 1024  # MiB: no value list of 2^24 strings per domain


def test_order_file_not_utf8_names_its_line(tmp_path):
    order = tmp_path / "order.txt"
    order.write_bytes(b"0 1\n2 \xff\n")
    code, rec, err, _ = gpusolve(ROOT / "instances" / "random-n14-d10-s1.wcsp", "--order", order)
    assert code == 2 and f"{order}:2:" in err and "UTF-8" in err


def test_never_an_assignment_that_violates_a_hard_constraint():
    """MBE's greedy assignment, local search and search: whatever is reported is feasible and its cost
    is the upper bound; no upper bound means no assignment."""
    for seed in range(60):
        rng = np.random.default_rng(seed)
        problem = random_problem(rng, n_max=7, d_max=4, f_max=12, arity_max=3, p_hard=0.6)
        for z, search in ((2, False), (2, True), (None, True)):
            arity = max([f.arity for f in problem.functions] + [1])
            r = solve(problem, Options(device="cpu", z=None if z is None else max(z, arity), search=search,
                                       time_limit=5))
            if r.assignment is None:
                continue
            cost = problem.evaluate(r.assignment)
            assert not problem.is_forbidden(cost), (seed, z)
            assert r.upper_bound == problem.to_file_value(cost)


def test_an_unsatisfiable_problem_reports_no_assignment():
    t = np.array([[0, FORBIDDEN], [FORBIDDEN, 0]], dtype=np.int64)
    u = np.array([[FORBIDDEN, 0], [0, FORBIDDEN]], dtype=np.int64)
    p = finalize_integer(Problem("x", [Variable("a", 2), Variable("b", 2)],
                                 [CostFunction((0, 1), t), CostFunction((0, 1), u)]), 10)
    for z in (None, 2):
        r = solve(p, Options(device="cpu", z=z))
        assert r.status == "infeasible" and r.assignment is None and r.upper_bound is None


# --- reading under limits: the stop, the line cap, the echo of bad tokens --------------------------

FILLER = "\n" * 300_000  # blank lines over several of the reader's chunks (parsers/source.py CHUNK)
# Per format: the start of a file, then (after FILLER) an error seen only by a reader that got there.
UNREAD_END = {
    "wcsp": ("p 2 2 1 10\n2 2\n", "1 0 0 oops\n"),
    "uai": ("MARKOV\n2\n2 2\n1\n", "2 0 oops\n"),
    "cfn": ('{"problem": {"name": "x", "mustbe": "<10"},\n', "]]]\n"),
    "fzn": ("var 0..1: x;\n", "constraint int_le(x, oops);\n"),
    "xml": ('<instance>\n<presentation name="x" format="XCSP 2.1"/>\n', "<<<\n"),
    "xml3": ('<instance format="XCSP3" type="CSP">\n', "<<<\n"),
    "yaml": ("name: x\nobjective: min\n", "domains: [: :\n"),
}


def unread_end(tmp_path, fmt: str, suffix: str = "") -> Path:
    head, tail = UNREAD_END[fmt]
    path = tmp_path / f"big.{fmt.rstrip('3')}{suffix}"
    text = head + FILLER + tail
    if suffix == ".gz":
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


@pytest.mark.parametrize("fmt, suffix", [(f, "") for f in UNREAD_END] + [("wcsp", ".gz")])
def test_the_time_limit_stops_reading(tmp_path, fmt, suffix):
    """The time limit counts the reading: with 0 s it stops a file of several chunks before its end
    (whose error a reader that got there would report), as a timeout with no bound (exit 4)."""
    path = unread_end(tmp_path, fmt, suffix)
    code, rec, err, _ = gpusolve(path)
    assert code == 2 and rec["status"] == "error", err  # read to the end: its last line is wrong
    code, rec, err, _ = gpusolve(path, "--time-limit", 0)
    assert code == 4 and rec["status"] == "timeout", err
    assert rec["message"] == f"{path}: time limit reached while reading, before any bound"
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 4), (signal.SIGINT, 130)])
def test_signals_stop_reading_from_a_pipe_still_open(signum, code):
    """SIGTERM (exit 4, as a time limit) and Ctrl-C (130) end a read of standard input whose end
    never comes: the signal is sent once the pipe has carried more than its capacity, so the reader
    is reading; the input is never closed before the process ends."""
    p = subprocess.Popen([sys.executable, "-c", PEAK, "solve", "-", "--format", "wcsp", "--json", "--no-serve"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    block = b"\n" * (1 << 16)
    p.stdin.write(b"p 2 2 1 10\n2 2\n")
    sent = 0
    try:
        for _ in range(16):  # 1 MiB: many times what a pipe holds
            p.stdin.write(block)
        p.send_signal(signum)
        for sent in range(1, 512):  # the stop is checked every chunk: it ends long before 32 MiB more
            p.stdin.write(block)
            p.stdin.flush()
    except BrokenPipeError:  # the reader ended and closed its end
        pass
    assert sent < 511, "still reading 32 MiB after the signal"
    out, err = p.communicate()  # closes stdin only now
    assert p.returncode == code, err
    rec = json.loads(out)
    assert rec["status"] == "timeout" and "while reading, before any bound" in rec["message"]
    assert "Traceback" not in err.decode()


def test_a_line_past_the_budget_share_is_refused_before_it_is_held(tmp_path):
    """A compressed file of one endless line (a decompression bomb) is refused at its line once the
    line runs past 1/32 of --mem-limit, never held whole."""
    path = tmp_path / "bomb.wcsp.gz"
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(b"p 2 2 1 10\n2 2\n")
        for _ in range(128):  # 128 MiB of blanks on line 3
            f.write(b" " * (1 << 20))
        f.write(b"\n1 0 0 1\n0 3\n")
    code, rec, err, rss = gpusolve(path, "--mem-limit", "256M")
    assert code == 3 and rec["message"].startswith(f"{path}:3: line longer than 8,388,608 bytes"), err
    assert rss < 128  # MiB: the line was not held


def test_a_long_line_within_the_share_is_read(tmp_path):
    """A table on one line longer than the cap of 64M (2 MiB), under that of 128M (4 MiB): read, and
    solved right."""
    d = 250_000
    costs = np.random.default_rng(3).integers(1, 1000, size=d)
    costs[123_456] = 0
    path = tmp_path / "long.wcsp"
    table = " ".join(f"{v} {c}" for v, c in enumerate(costs))
    path.write_text(f"long 1 {d} 1 1000\n{d}\n1 0 1000 {d}\n{table}\n")
    assert len(path.read_text().splitlines()[3]) > 2 << 20
    code, rec, err, _ = gpusolve(path, "--mem-limit", "128M")
    assert code == 0, err
    assert rec["status"] == "optimal" and rec["upper_bound"] == 0 and rec["assignment"] == [123_456]


# Line ends, what str.splitlines alone would also break at (form feed, U+2028, U+0085), a cut and an
# invalid UTF-8 sequence, and plain bytes.
PIECES = [b"\r", b"\n", b"\r\n", b"\x0c", "\u2028".encode(), "\x85".encode(), b"\xe2\x80", b"\xff", b"a", b"bc "]


@settings(max_examples=300, deadline=None)
@given(data=st.lists(st.sampled_from(PIECES), max_size=30).map(b"".join), chunk=st.integers(1, 9),
       binary=st.booleans())
def test_lines_are_cut_as_open_cuts_them(tmp_path_factory, data, chunk, binary):
    """Lines cut from chunks of any size are the lines of open(): text decoded as UTF-8 with invalid
    bytes replaced and CR LF or CR read as LF; binary lines broken at LF, CR LF and CR."""
    path = tmp_path_factory.mktemp("lines") / "f.txt"
    path.write_bytes(data)
    with patch.object(source, "CHUNK", chunk):
        got = list(source.read_lines(path, binary))
    if binary:
        assert got == data.splitlines(keepends=True)
    else:
        with open(path, encoding="utf-8", errors="replace") as f:
            assert got == list(f)


LONG = "9" * 100_000


@pytest.mark.parametrize("name, text, quoted", [
    ("tuple.wcsp", f"p 2 2 1 10\n2 2\n1 0 0 1\n0 {LONG}x\n", True),
    ("wide.wcsp", f"p 2 2 1 10\n2 2\n1 0 0 1\n0 {LONG[:4000]}\n", True),
    ("net.uai", f"{LONG}\n2\n2 2\n", True),
    ("f.cfn", f'{{"problem": {{"name": "x", "mustbe": "<{LONG}x"}}, "variables": {{}}, "functions": {{}}}}\n', True),
    ("p.xml", f'<instance><presentation name="x" format="{LONG}"/></instance>\n', True),
    ("p3.xml", f'<instance format="XCSP3" type="CSP"><variables><var id="x"> 0 {LONG}x </var></variables></instance>\n',
     True),
    ("d.yaml", f"name: x\nobjective: {LONG}x\n", True),
    ("m.fzn", f"var 0..1: x;\nconstraint int_le(x, {LONG}x);\n", False),  # a name: the message is cut
])
def test_errors_quote_at_most_80_characters_of_a_token(tmp_path, name, text, quoted):
    """A bad token is quoted cut to 80 characters; a message echoing a name whole is cut to 400."""
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ParseError) as e:
        read(path)
    message = str(e.value)
    assert message.startswith(f"{path}:") and "\n" not in message
    assert len(message) - len(str(path)) < (200 if quoted else 450), message[:500]
    assert ("9" * 81 not in message) == quoted and "9" * 80 in message
