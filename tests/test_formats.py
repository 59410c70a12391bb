"""toulbar2's CFN format, shared wcsp tables, compression on write, standard input, --solution values:
checked against pytoulbar2 where it can read the same file."""
import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import brute_force, random_problem, toulbar2_in_a_child as toulbar2

import gpusolve
from gpusolve.cli.group import main
from gpusolve.model.problem import FORBIDDEN, AllDifferent, CostFunction, Problem, Variable, finalize_integer
from gpusolve.parsers import ParseError, read

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = ROOT / "instances" / "random-n14-d10-s1.wcsp"


def optimum(problem):
    best, _ = brute_force(problem)
    return None if problem.is_forbidden(best) else problem.to_file_value(best)


def shared_wcsp(rng, path):
    """A wcsp whose later functions reuse shared tables (negative tuple count) with their own default."""
    n, d = 5, 3
    lines, count = [], 0
    for k in range(2):
        scope = rng.choice(n, 2, replace=False)
        tuples = [t for t in itertools.product(range(d), repeat=2) if rng.random() < 0.4]
        lines.append(f"-2 {scope[0]} {scope[1]} {rng.integers(0, 9)} {len(tuples)}")
        lines += [f"{a} {b} {rng.integers(0, 12)}" for a, b in tuples]
        count += 1
        for _ in range(2):
            scope = rng.choice(n, 2, replace=False)
            lines.append(f"2 {scope[0]} {scope[1]} {rng.integers(0, 30)} -{k + 1}")
            count += 1
    path.write_text(f"shared {n} {d} {count} 40\n" + " ".join([str(d)] * n) + "\n" + "\n".join(lines) + "\n")


@pytest.mark.parametrize("seed", range(6))
def test_shared_tables_with_their_own_default_follow_toulbar2(tmp_path, seed):
    """toulbar2 copies the shared table, default included; the reusing function's default is ignored."""
    path = tmp_path / "s.wcsp"
    shared_wcsp(np.random.default_rng(seed), path)
    ref = toulbar2(path)
    assert optimum(read(path)) == (None if ref is None else round(ref[0]))


@pytest.mark.parametrize("seed", range(10))
def test_cfn_written_by_toulbar2_reads_to_the_same_optimum(tmp_path, seed):
    pytoulbar2 = pytest.importorskip("pytoulbar2")
    rng = np.random.default_rng(seed)
    resolution = int(rng.integers(0, 3))
    cfn = pytoulbar2.CFN(60, resolution=resolution, verbose=-1)
    n = 4
    sizes = [int(rng.integers(1, 4)) for _ in range(n)]
    for i, size in enumerate(sizes):
        cfn.AddVariable(f"v{i}", [f"a{j}" for j in range(size)])
    for _ in range(5):
        scope = sorted(rng.choice(n, int(rng.integers(1, 3)), replace=False).tolist())
        shape = [sizes[v] for v in scope]
        costs = np.round(rng.random(int(np.prod(shape))) * 20, resolution)
        costs[rng.random(costs.size) < 0.15] = 60
        cfn.AddFunction([f"v{v}" for v in scope], costs.tolist())
    path = tmp_path / "t.cfn"
    cfn.Dump(str(path))
    ref = toulbar2(path)
    got = optimum(read(path))
    if ref is None:
        assert got is None
    else:
        assert got == pytest.approx(ref[0], abs=10 ** -resolution / 2)


@pytest.mark.parametrize("seed", range(8))
def test_cfn_we_write_is_read_by_toulbar2(tmp_path, seed):
    problem = random_problem(np.random.default_rng(seed))
    path = tmp_path / "p.cfn"
    gpusolve.write(problem, path)
    ref = toulbar2(path)
    expected = optimum(problem)
    assert (None if ref is None else round(ref[0])) == expected


def random_cfn_problem(rng):
    """A random integer model with what .cfn carries beyond .wcsp: value names, decimals, negative
    costs, maximisation, AllDifferents (soft, hard, with excepted values)."""
    base = random_problem(rng, n_max=5, d_max=4, f_max=7, arity_max=3)
    variables = [Variable(v.name, v.domain, tuple(f"{v.name}_{j}" for j in range(v.domain)) if rng.random() < 0.5
                          else None) for v in base.variables]
    functions = [CostFunction(f.scope, np.where(f.table >= base.top, FORBIDDEN, f.table - int(rng.integers(0, 10))))
                 for f in base.functions]
    sense = -1 if rng.random() < 0.3 else 1
    globals_ = []
    if sense > 0 and len(variables) >= 2 and rng.random() < 0.7:
        size = int(rng.integers(2, len(variables) + 1))
        scope = tuple(int(v) for v in rng.choice(len(variables), size, replace=False))
        hard = rng.random() < 0.5
        globals_.append(AllDifferent(scope, tuple(np.arange(variables[v].domain) for v in scope),
                                     FORBIDDEN if hard else int(rng.integers(1, 30)), str(rng.choice(["var", "dec"])),
                                     frozenset({0}) if hard and rng.random() < 0.5 else frozenset()))
    problem = Problem("r", variables, functions, offset=int(rng.integers(-40, 40)), sense=sense,
                      precision=int(rng.integers(0, 3)), globals=globals_)
    return finalize_integer(problem, None if rng.random() < 0.3 else int(rng.integers(20, 150)))


@pytest.mark.parametrize("seed", range(30))
def test_random_cfn_we_write_is_read_by_toulbar2_to_the_same_optimum(tmp_path, seed):
    problem = random_cfn_problem(np.random.default_rng(seed))
    path = tmp_path / "p.cfn"
    gpusolve.write(problem, path)
    expected, ref = optimum(problem), toulbar2(path)
    assert (None if ref is None else pytest.approx(ref[0], abs=1e-9)) == expected
    assert optimum(read(path)) == expected


def test_cfn_costs_are_written_exactly(tmp_path):
    """Decimal costs past a float's 15 digits keep every digit (JSON floats would round them)."""
    table = np.array([10 ** 17 + 1, 3], dtype=np.int64)
    problem = finalize_integer(Problem("e", [Variable("x", 2)], [CostFunction((0,), table.copy())], precision=2,
                                       offset=-(10 ** 16 + 7)), None)
    path = tmp_path / "e.cfn"
    gpusolve.write(problem, path)
    back = read(path)
    assert back.functions[0].table.tolist() == problem.functions[0].table.tolist()
    assert back.offset == problem.offset


def test_cfn_bound_toulbar2_misreads_is_loosened_or_refused(tmp_path):
    """toulbar2 reads "<-0.05" as "<0.05": written as "<0.00" when no finite total reaches it, else refused."""
    def problem(tables):
        functions = [CostFunction((v,), np.array(t, dtype=np.int64)) for v, t in enumerate(tables)]
        variables = [Variable(f"x{v}", 2) for v in range(len(tables))]
        return finalize_integer(Problem("b", variables, functions, precision=2, offset=-60), -5)
    path = tmp_path / "b.cfn"
    loose = problem([[0, 50]])
    gpusolve.write(loose, path)
    assert '"mustbe":"<0.00"' in path.read_text() and toulbar2(path)[0] == optimum(loose) == -0.6
    with pytest.raises(ValueError, match="between -1 and 0"):
        gpusolve.write(problem([[0, 50], [0, 50]]), path)


def test_cfn_freedoms_names_and_maximisation(tmp_path):
    """Unquoted strings, no commas or colons, [] for objects, # comments, sparse tuples by name,
    a shared table, a constant and `>` (maximise with a lower bound)."""
    path = tmp_path / "m.cfn"
    path.write_text("# a comment\n"
                    "{ problem { name m mustbe >-10.5 }\n"
                    "  variables [ x [ lo hi ] y 2 ]\n"
                    "  functions { g { scope [y x] costs f }\n"
                    "              f { scope [x y] defaultcost -1 costs [ hi 1 2.25  lo 0 0 ] }\n"
                    "              c { scope [] costs [ 0.5 ] } } }\n")
    p = read(path)
    assert [v.name for v in p.variables] == ["x", "y"] and p.variables[0].labels == ("lo", "hi")
    assert p.precision == 1
    # f(hi, 1) = 2.25 truncates to 2.2 at one decimal; g(y=1, x=hi) is f's entry (1, 1): 2.2 + 2.2 + 0.5
    assert optimum(p) == pytest.approx(4.9) == toulbar2(path)[0]
    backward = path.read_text().replace("g { scope [y x] costs f }", "").replace("c {", "g { scope [y x] costs f } c {")
    path.write_text(backward)
    with pytest.raises(ParseError, match="defined after"):
        read(path)


@pytest.mark.parametrize("text, message", [
    ("{problem {name a mustbe <5} variables {x 2} functions {f {scope [x] costs [1]}}}", "1 costs, expected 2"),
    ("{problem {name a mustbe <5} variables {x 2} functions {f {scope [z] costs [1 2]}}}", "unknown variable z"),
    ("{problem {name a mustbe <5} variables {x [a b]} functions {f {scope [x] defaultcost 0 costs [c 1]}}}",
     "value c is not in the domain"),
    ("{problem {name a mustbe <5} variables {x 2} functions {f {scope [x] costs [1 zz]}}}", "found 'zz'"),
    ("{problem {name a mustbe 5} variables {x 2} functions {}}", "mustbe"),
    ("{problem {name a mustbe <5} variables {x 2} functions {f {scope [x] type sgrammardp params []}}}",
     "global cost function sgrammardp is not supported"),
    ("{problem {name a mustbe <5} variables {x 2} functions {f {scope [x] costs [1 2]}", "unclosed"),
])
def test_cfn_errors_are_one_line_with_the_line(tmp_path, text, message):
    path = tmp_path / "bad.cfn"
    path.write_text(text.replace(" functions", "\n functions"))
    with pytest.raises(ParseError, match=message) as e:
        read(path)
    assert str(e.value).startswith(f"{path}:")


@pytest.mark.parametrize("suffix", [".wcsp.xz", ".wcsp.gz", ".cfn.bz2", ".cfn"])
def test_generate_honours_the_suffix_and_solve_reads_it(tmp_path, suffix):
    path = tmp_path / f"g{suffix}"
    r = CliRunner().invoke(main, ["generate", "random", "-n", "6", "-d", "3", "--seed", "2", "-o", str(path)])
    assert r.exit_code == 0, r.output
    if suffix != ".cfn":
        assert not path.read_bytes().startswith(b"random")  # compressed, not plain text
    plain = tmp_path / "g.wcsp"
    CliRunner().invoke(main, ["generate", "random", "-n", "6", "-d", "3", "--seed", "2", "-o", str(plain)])
    a = json.loads(CliRunner().invoke(main, ["solve", str(path), "--json"]).stdout)
    b = json.loads(CliRunner().invoke(main, ["solve", str(plain), "--json"]).stdout)
    assert a["upper_bound"] == b["upper_bound"] and a["status"] == "optimal"


def test_solve_reads_standard_input_with_a_format():
    text = BUNDLED.read_text()
    a = subprocess.run([sys.executable, "-m", "gpusolve", "solve", "-", "--format", "wcsp", "--json"],
                       input=text, capture_output=True, text=True, cwd=ROOT)
    assert a.returncode == 0, a.stderr
    b = json.loads(CliRunner().invoke(main, ["solve", str(BUNDLED), "--json"]).stdout)
    assert json.loads(a.stdout)["upper_bound"] == b["upper_bound"]
    bad = subprocess.run([sys.executable, "-m", "gpusolve", "solve", "-"], input=text, capture_output=True,
                         text=True, cwd=ROOT)
    assert bad.returncode == 2 and "--format" in bad.stderr


def test_solve_offers_what_the_readers_read():
    """--format and solve --help come from parsers/' table: every format it reads, every compression."""
    from gpusolve import parsers
    fmt = next(p for p in main.commands["solve"].params if p.name == "fmt")
    assert tuple(fmt.type.choices) == parsers.FORMATS
    text = " ".join(CliRunner().invoke(main, ["solve", "--help"]).stdout.split())
    assert all(suffix in text for suffix in (*parsers.READERS, *parsers.COMPRESSIONS)), text


def test_solution_file_holds_domain_values_for_xcsp(tmp_path):
    path = tmp_path / "v.xml"
    path.write_text("""<instance><presentation name="v" format="XCSP 2.1"/>
<domains nbDomains="1"><domain name="D" nbValues="3">5 7 9</domain></domains>
<variables nbVariables="2"><variable name="X" domain="D"/><variable name="Y" domain="D"/></variables>
<relations nbRelations="1"><relation name="R" arity="2" nbTuples="1" semantics="supports">9 5</relation></relations>
<constraints nbConstraints="1"><constraint name="C" arity="2" scope="X Y" reference="R"/></constraints>
</instance>""")
    sol = tmp_path / "v.sol"
    r = CliRunner().invoke(main, ["solve", str(path), "--solution", str(sol), "--json"])
    assert r.exit_code == 0, r.output
    assert sol.read_text().split() == ["9", "5"]
    assert json.loads(r.stdout)["assignment"] == [2, 0]  # the JSON keeps value indices
