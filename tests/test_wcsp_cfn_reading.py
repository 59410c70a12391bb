""".wcsp and .cfn reading: costs stay exact (refused, never wrapped or rounded, beyond int64), and what a
file declares is charged to the memory budget before it is allocated (peak RSS measured in a child)."""
import itertools
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpusolve.limits import Limits
from gpusolve.model.problem import MAX_TOP
from gpusolve.parsers import ParseError, read
from gpusolve.schedule.solve import Options, solve

ROOT = Path(__file__).resolve().parents[1]
INT64_MAX = (1 << 63) - 1

decimal = st.builds(lambda sign, whole, fraction: f"{sign}{whole}" + (f".{fraction}" if fraction is not None else ""),
                    st.sampled_from(["", "-", "+"]), st.from_regex(r"[0-9]{1,20}", fullmatch=True),
                    st.none() | st.from_regex(r"[0-9]{0,32}", fullmatch=True))


@settings(max_examples=150, deadline=None)
@given(text=decimal, precision=st.integers(0, 18))
@example(text="0.99999999999999999999999999999", precision=0)  # 29 nines: Decimal's 28 digits made it 1
@example(text="4.6116860184273879039", precision=18)
def test_cfn_costs_are_truncated_exactly_or_refused(tmp_path_factory, text, precision):
    """toulbar2 cuts the decimals beyond the precision: the cost is trunc(value * 10^precision), exactly
    (Fraction is the oracle), or the file is refused when that does not fit in 2^62."""
    path = tmp_path_factory.mktemp("c") / "c.cfn"
    digits = str(MAX_TOP)  # the largest bound: every cost that fits is below it
    bound = f"{digits[:len(digits) - precision]}.{digits[len(digits) - precision:]}" if precision else digits
    path.write_text(f"{{problem {{name p mustbe <{bound}}} variables {{x 2}} "
                    f"functions {{f {{scope [x] costs [{text} 0]}}}}}}\n")
    expected = int(Fraction(text) * 10 ** precision)  # int() of a Fraction truncates toward zero
    if abs(expected) > MAX_TOP:
        with pytest.raises(ParseError, match=r"c\.cfn:1: cost .* out of range"):
            read(path)
        return
    problem = read(path)
    assert problem.precision == precision
    assert problem.evaluate([0]) + problem.offset == expected  # internal integers: no float in between


big = st.integers(0, INT64_MAX) | st.integers(0, 40) | st.integers((1 << 62) - 40, (1 << 62) + 40)


@settings(max_examples=80, deadline=None)
@given(ub=big, constant=big, unary=st.lists(big, min_size=2, max_size=2),
       binary=st.lists(big, min_size=4, max_size=4))
def test_wcsp_costs_near_int64_are_exact_or_refused(tmp_path_factory, ub, constant, unary, binary):
    """Costs up to 2^63 - 1, a constant and a top anywhere: the optimum is the exact (Python integer)
    minimum over the assignments, or the file is refused in one ParseError, only where the top
    exceeds 2^62 (sums beyond it cannot be kept exact in int64)."""
    path = tmp_path_factory.mktemp("w") / "w.wcsp"
    path.write_text(f"w 2 2 3 {ub}\n2 2\n0 {constant} 0\n1 0 0 2\n0 {unary[0]}\n1 {unary[1]}\n"
                    f"2 0 1 0 4\n" + "".join(f"{a} {b} {c}\n" for (a, b), c in
                                             zip(itertools.product(range(2), repeat=2), binary)))
    totals = [constant + unary[a] + binary[2 * a + b] for a, b in itertools.product(range(2), repeat=2)]
    feasible = [t for t in totals if t < ub]  # costs are >= 0: a tuple costing ub or more is in no such sum
    try:
        problem = read(path)
    except ParseError as e:
        assert ub > MAX_TOP and "costs too large" in str(e)
        return
    r = solve(problem, Options(device="cpu", search=False))
    assert (r.status, r.upper_bound) == (("optimal", min(feasible)) if feasible else ("infeasible", None))


@pytest.mark.parametrize("variables, functions", [
    ("x " + "9" * 5000, ""),
    ("x 2", "f {scope [x] defaultcost 0 costs [" + "9" * 5000 + " 1]}"),
    ("x 2", "f {scope [" + "9" * 5000 + "] costs [0 1]}"),
])
def test_cfn_integers_of_thousands_of_digits_are_refused_at_their_line(tmp_path, variables, functions):
    """Not Python's limit on converting long digit strings (a ValueError without a line)."""
    path = tmp_path / "c.cfn"
    path.write_text(f"{{problem {{name p mustbe <10}}\nvariables {{{variables}}}\nfunctions {{{functions}}}}}\n")
    with pytest.raises(ParseError, match=r"c\.cfn:[23]: "):
        read(path)


# Peak RSS from VmHWM, the child's own: ru_maxrss would count the parent's, which the child shares up
# to its exec (vfork).
PEAK = ("import atexit, sys\n"
        "def peak():\n"
        "    with open('/proc/self/status') as f:\n"
        "        print('peak', next(line.split()[1] for line in f if line.startswith('VmHWM')), file=sys.stderr)\n"
        "atexit.register(peak)\n")
SOLVE = PEAK + "from gpusolve.cli.group import main\nmain(['solve', *sys.argv[1:]])"
READ = PEAK + ("from gpusolve.parsers import OverBudget, read\ntry:\n"
               "    read(sys.argv[1], mem_limit=int(sys.argv[2]))\n    print('read')\n"
               "except OverBudget as e:\n    print(e)")
MIB = 1 << 20


def child(code: str, *args) -> tuple[int, str, str, float]:
    """(exit code, stdout, stderr without the peak line, peak RSS in MiB) of `code` run in a child."""
    if not Path("/proc/self/status").exists():
        pytest.skip("peak RSS is read from /proc (Linux)")
    p = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, cwd=ROOT)
    *err, peak = p.stderr.splitlines()
    return p.returncode, p.stdout.strip(), "".join(line + "\n" for line in err), int(peak.split()[1]) / 1024


def test_many_variables_are_charged_before_they_are_made(tmp_path):
    """Each declared variable costs ~200 bytes once read: 400,000 of them do not fit 64 MiB (the
    smallest --mem-limit solve takes)."""
    path = tmp_path / "vars.wcsp"
    path.write_text("p 400000 2 0 10\n" + "2 " * 400000 + "\n")
    code, out, err, rss = child(SOLVE, path, "--mem-limit", "64M")
    assert code == 3 and err.count("\n") == 1, err
    assert f"{path}:1: 400,000 variables" in err and "memory budget" in err
    assert rss < 80  # MiB (~50 of them the interpreter's): refused from the header, domains never split


@pytest.mark.parametrize("name, text", [
    ("three.wcsp", "p 3 5000 3 10\n5000 5000 5000\n2 0 1 0 0\n2 1 2 0 0\n2 0 2 0 0\n"),
    ("three.cfn", "{problem {name p mustbe <10} variables {a 5000 b 5000 c 5000} functions {f {scope [a b] "
                  "defaultcost 0 costs []} g {scope [b c] defaultcost 0 costs []} h {scope [a c] defaultcost 0 "
                  "costs []}}}\n"),
])
def test_a_file_over_budget_is_refused_before_any_table_is_made(tmp_path, name, text):
    """Three default-filled tables of 25M entries (190 MiB each) under 500 MiB: the second is refused,
    and the first was not allocated either (tables are made only once the whole file is charged)."""
    path = tmp_path / name
    path.write_text(text)
    code, out, err, rss = child(SOLVE, path, "--mem-limit", "500M")
    assert code == 3 and err.count("\n") == 1 and "memory budget" in err, err
    assert rss < 25_000_000 * 8 / MIB  # less than one of the tables


@pytest.mark.parametrize("keyword", [">=", ">", "<=", "<", "=", "disj", "sdisj"])
def test_arithmetic_tables_are_made_in_chunks(tmp_path, keyword):
    """Chunk after chunk, the same table as in one piece (chunks of 7 entries against one of all)."""
    path = tmp_path / "a.wcsp"
    params = {"disj": "3 2 4", "sdisj": "3 2 9 8 4 6"}.get(keyword, "-2 5")
    path.write_text(f"p 2 13 3 20\n13 11\n2 0 1 -1 {keyword} {params}\n1 0 0 1\n4 7\n1 1 0 1\n3 5\n")
    whole = read(path).functions[0].table
    assert np.array_equal(read(path, limits=Limits(chunk=7)).functions[0].table, whole)


def test_arithmetic_table_is_made_without_large_temporaries(tmp_path):
    """`=` on 4000 x 4000 values: a 122 MiB table; numpy's temporaries over the whole of it took 4 more."""
    path = tmp_path / "eq.wcsp"
    path.write_text("p 2 4000 1 1000000\n4000 4000\n2 0 1 -1 = 0 5000\n")
    code, out, err, rss = child(READ, path, 400 * MIB)
    assert (code, out) == (0, "read") and rss < 400, err


def test_tuples_are_read_in_chunks(tmp_path):
    """Tuples converted 5 tokens at a time: the same table, and a bad value still named by its line."""
    rng = np.random.default_rng(1)
    flat = rng.choice(6 * 7 * 5, 60, replace=False)  # distinct tuples: the expected table is unambiguous
    rows = np.stack([*np.unravel_index(flat, (6, 7, 5)), rng.integers(0, 9, 60)], 1)
    expected = np.full((6, 7, 5), 3, dtype=np.int64)
    expected[tuple(rows[:, :3].T)] = rows[:, 3]
    chunks = Limits(chunk=5)
    path = tmp_path / "t.wcsp"
    lines = [" ".join(map(str, row)) for row in rows]
    path.write_text("p 3 7 1 100\n6 7 5\n3 0 1 2 3 60\n" + "\n".join(lines) + "\n")
    assert np.array_equal(read(path, limits=chunks).functions[0].table, expected)
    lines[41] = "0 9 0 1"  # line 3 + 42
    path.write_text("p 3 7 1 100\n6 7 5\n3 0 1 2 3 60\n" + "\n".join(lines) + "\n")
    with pytest.raises(ParseError, match=r"t\.wcsp:45: value 9 out of domain of variable 1"):
        read(path, limits=chunks)


def test_a_million_tuples_are_read_within_the_budget(tmp_path):
    """The tuples are converted a chunk at a time, not one Python string per token of the whole table."""
    rng = np.random.default_rng(0)
    rows = np.stack([rng.integers(0, 1000, 10 ** 6), rng.integers(0, 2000, 10 ** 6), rng.integers(0, 9, 10 ** 6)], 1)
    path = tmp_path / "tuples.wcsp"
    line = "%d %d %d " * 1000 + "\n"  # a thousand tuples a line: the tokens, not the lines, are many
    path.write_text(f"p 2 2000 1 10\n1000 2000\n2 0 1 0 {len(rows)}\n" + line * 1000 % tuple(rows.ravel().tolist()))
    code, out, err, rss = child(READ, path, 200 * MIB)
    assert (code, out) == (0, "read") and rss < 200, err


def test_alldifferent_values_are_charged(tmp_path):
    path = tmp_path / "alldiff.wcsp"
    path.write_text(f"p 2 {1 << 25} 1 10\n{1 << 25} {1 << 25}\n2 0 1 -1 salldiff var 5\n")
    code, out, err, rss = child(READ, path, 128 * MIB)
    assert out.startswith(f"{path}:3: the values of an AllDifferent") and "memory budget" in out and rss < 128


def test_cfn_tokens_are_charged_as_the_file_is_read(tmp_path):
    """Two million tokens (~150 bytes each once read) under 200 MiB: refused at the line that goes over."""
    path = tmp_path / "tokens.cfn"
    with path.open("w") as f:
        f.write("{problem {name p mustbe <10} variables {a 2000 b 1000} functions {f {scope [a b] costs [\n")
        f.writelines("0 " * 1000 + "\n" for _ in range(2000))
        f.write("]}}}\n")
    code, out, err, rss = child(READ, path, 200 * MIB)
    assert "tokens" in out and "memory budget" in out and rss < 200


@pytest.mark.parametrize("costs", [["+5", "05", "-0", "7"], ["1", "2.0", "3", "inf"], ["1", "1_000", "3", "4"],
                                   ["12", "-3", "4611686018427387904", "0"], [str(k) for k in range(36)]])
def test_a_dense_table_of_integers_reads_as_one_cost_at_a_time_does(tmp_path, costs, monkeypatch):
    """Plain integers convert at once; the result, or the error, is that of reading each cost (the oracle:
    the same file with the fast path turned off). 1_000, which Python and NumPy take, is refused."""
    from gpusolve.parsers import cfn
    side = 6 if len(costs) == 36 else 2
    path = tmp_path / "t.cfn"
    path.write_text(f"{{problem {{name p mustbe <1000000}} variables {{x {side} y {side}}} "
                    f"functions {{f {{scope [x y] costs [{' '.join(costs)}]}}}}}}\n")

    def outcome():
        try:
            problem = read(path)
        except ParseError as error:
            return str(error)
        return [problem.evaluate([a, b]) for a in range(side) for b in range(side)]
    fast = outcome()
    monkeypatch.setattr(cfn, "PLAIN_INTEGERS", __import__("re").compile(r"(?!)"))
    assert fast == outcome()
    if "1_000" in costs:
        assert "found '1_000'" in fast
