"""XCSP3 and FlatZinc readers: models written by pycsp3 (and by hand) solved to the optimum that an
independent Python check of the same model finds by enumeration; refusals name what they refuse."""
import importlib.util
import itertools
import subprocess
import sys
import textwrap

import pytest

from gpusolve.model import CostFunction
from gpusolve.solve import Options, solve
from gpusolve.parsers import ParseError, read


def solved(path):
    r = solve(read(path), Options(device="cpu"))
    return r.status, r.upper_bound


def enumerate_best(domains, feasible, objective=None, maximize=False):
    """(status, optimum) of a model given as Python callables, by enumeration."""
    best = None
    for a in itertools.product(*domains):
        if feasible(a):
            value = objective(a) if objective else 0
            if best is None or (value > best if maximize else value < best):
                best = value
    return ("infeasible", None) if best is None else ("optimal", best)


PYCSP3_MODELS = {
    "queens": ("""
        n = 6
        q = VarArray(size=n, dom=range(n))
        satisfy(AllDifferent(q), AllDifferent(q[i] + i for i in range(n)), AllDifferent(q[i] - i for i in range(n)))
        minimize(Sum(q[i] * (i + 1) for i in range(n)))
        """, [range(6)] * 6,
        lambda q: len(set(q)) == 6 and len({q[i] + i for i in range(6)}) == 6 and len({q[i] - i for i in range(6)}) == 6,
        lambda q: sum(q[i] * (i + 1) for i in range(6)), False),
    "mixed": ("""
        x = VarArray(size=5, dom=range(-2, 4))
        satisfy(
            AllDifferent(x[1:], excepting=0),
            Sum(x[0], x[2], x[3]) <= 4,
            Sum([2, -1, 3] * x[:3]) >= 1,
            Table(scope=(x[0], x[4]), supports=[(0, 1), (1, ANY), (-2, 3)]),
            (x[0] > x[1]) | (x[2] == 3),
            abs(x[3] - x[4]) != 1,
            x[1] % 2 == 0,
        )
        maximize(x[0] * x[4] + max(x[1], x[2]) - abs(x[3] - 2))
        """, [range(-2, 4)] * 5,
        lambda x: len([v for v in x[1:] if v]) == len({v for v in x[1:] if v}) and x[0] + x[2] + x[3] <= 4
        and 2 * x[0] - x[1] + 3 * x[2] >= 1 and ((x[0], x[4]) in [(0, 1), (-2, 3)] or x[0] == 1)
        and (x[0] > x[1] or x[2] == 3) and abs(x[3] - x[4]) != 1 and x[1] % 2 == 0,
        lambda x: x[0] * x[4] + max(x[1], x[2]) - abs(x[3] - 2), True),
    "infeasible": ("""
        x = VarArray(size=4, dom=range(3))
        satisfy(AllDifferent(x))
        """, [range(3)] * 4, lambda x: len(set(x)) == 4, None, False),
    "grid": ("""
        m = VarArray(size=[2, 3], dom=range(1, 5))
        satisfy(AllDifferent(m[0]), [m[0][j] < m[1][j] for j in range(3)], Sum(m[1]) == 9)
        minimize(Sum(m[0]) + m[1][2])
        """, [range(1, 5)] * 6,
        lambda m: len(set(m[:3])) == 3 and all(m[j] < m[3 + j] for j in range(3)) and sum(m[3:]) == 9,
        lambda m: sum(m[:3]) + m[5], False),
}


@pytest.mark.parametrize("name", sorted(PYCSP3_MODELS))
def test_pycsp3_models_solve_to_the_enumerated_optimum(name, tmp_path):
    if importlib.util.find_spec("pycsp3") is None:  # not imported here: it compiles a model at exit
        pytest.skip("pycsp3 is not installed")
    body, domains, feasible, objective, maximize = PYCSP3_MODELS[name]
    script = tmp_path / f"{name}.py"
    script.write_text("from pycsp3 import *\n" + textwrap.dedent(body))
    out = tmp_path / f"{name}.xml"
    p = subprocess.run([sys.executable, str(script), f"-output={out}"], capture_output=True, text=True,
                       cwd=tmp_path, timeout=120)
    assert out.is_file(), p.stdout + p.stderr
    assert solved(out) == enumerate_best(domains, feasible, objective, maximize)


XCSP3 = """\
<instance format="XCSP3" type="COP">
  <variables>
    <var id="y"> 0..3 </var>
    <array id="x" size="[2][2]">
      <domain for="x[0][]"> 1 3 5 </domain>
      <domain for="others"> 0..2 </domain>
    </array>
  </variables>
  <constraints>
    <block>
      <group>
        <intension> ne(%0,%1) </intension>
        <args> x[0][0] x[0][1] </args>
        <args> x[1][0] x[1][1] </args>
      </group>
    </block>
    <intension> imp(gt(y,1),eq(mod(x[0][0],3),0)) </intension>
    <intension><function> if(eq(y,0),ge(x[1][0],1),le(x[1][1],y)) </function></intension>
    <extension> <list> y </list> <conflicts> 2 </conflicts> </extension>
  </constraints>
  <objectives>
    <maximize> add(x[0][0],mul(2,x[1][1]),y) </maximize>
  </objectives>
</instance>
"""


def test_hand_written_xcsp3(tmp_path):
    path = tmp_path / "h.xml"
    path.write_text(XCSP3)

    def feasible(a):
        y, x00, x01, x10, x11 = a
        return x00 != x01 and x10 != x11 and (y <= 1 or x00 % 3 == 0) and y != 2 and \
            (x10 >= 1 if y == 0 else x11 <= y)

    expected = enumerate_best([range(4), (1, 3, 5), (1, 3, 5), range(3), range(3)], feasible,
                              lambda a: a[1] + 2 * a[4] + a[0], maximize=True)
    assert solved(path) == expected


@pytest.mark.parametrize("change, line, fragment", [
    ("<intension> ne(%0,%1) </intension>", 12, "constraint <element> is not supported"),
    ("<intension> imp(gt(y,1),eq(mod(x[0][0],3),0)) </intension>", 17, "unknown variable z"),
    ("<maximize>", 22, "objective <maximise> is not supported"),
])
def test_xcsp3_refusals_name_the_element(tmp_path, change, line, fragment):
    replacement = {"<intension> ne(%0,%1) </intension>": "<element> <list> y </list> </element>",
                   "<intension> imp(gt(y,1),eq(mod(x[0][0],3),0)) </intension>": "<intension> eq(z,1) </intension>",
                   "<maximize>": "<maximise>"}[change]
    text = XCSP3.replace(change, replacement)
    if change == "<maximize>":
        text = text.replace("</maximize>", "</maximise>")
    path = tmp_path / "bad.xml"
    path.write_text(text)
    with pytest.raises(ParseError) as info:
        read(path)
    assert str(info.value).startswith(f"{path}:{line}:") and fragment in str(info.value)


def test_other_xml_formats_are_refused(tmp_path):
    path = tmp_path / "other.xml"
    path.write_text('<instance format="XCSP4"><variables/></instance>\n')
    with pytest.raises(ParseError, match="unknown XCSP format 'XCSP4'"):
        read(path)


# ------------------------------------------------------------------ FlatZinc

FZN = """\
% a model as MiniZinc flattens it
int: n = 4;
array [1..2] of int: c = [1, -1];
array [1..4] of var 1..4: q :: output_array([1..4]);
var 0..3: d1 :: is_defined_var;
var {1, 3, 5}: s;
var bool: b;
var 1..4: alias = q[2];
constraint all_different_int(q);
constraint int_lin_eq([1, -1, -1], [d1, alias, 3], -4) :: defines_var(d1);
constraint int_ne(q[1], 2);
constraint int_le(s, q[3]);
constraint int_lin_le(c, [q[1], q[4]], 0);
constraint int_lin_ne([1, 1], [b, q[1]], 2);
solve :: int_search(q, input_order, indomain_min, complete) maximize d1;
"""


def test_flatzinc_model_solves_to_the_enumerated_optimum(tmp_path):
    path = tmp_path / "m.fzn"
    path.write_text(FZN)

    def feasible(a):
        q, d1, s, b = a[:4], a[4], a[5], a[6]
        return len(set(q)) == 4 and d1 - q[1] - 3 == -4 and q[0] != 2 and s <= q[2] and q[0] <= q[3] \
            and b + q[0] != 2

    domains = [range(1, 5)] * 4 + [range(4), (1, 3, 5), range(2)]
    assert solved(path) == enumerate_best(domains, feasible, lambda a: a[4], maximize=True)


def flat_queens(n: int) -> str:
    """N-queens as MiniZinc flattens alldifferent(q), alldifferent(q[i] + i), alldifferent(q[i] - i)."""
    lines = [f"array [1..{n}] of var 1..{n}: q :: output_array([1..{n}]);"]
    for sign, tag in ((1, "u"), (-1, "d")):
        for i in range(1, n + 1):
            lo, hi = 1 + sign * i, n + sign * i
            lines.append(f"var {min(lo, hi)}..{max(lo, hi)}: {tag}{i} :: var_is_introduced :: is_defined_var;")
            lines.append(f"constraint int_lin_eq([1, -1], [{tag}{i}, q[{i}]], {sign * i}) :: defines_var({tag}{i});")
        lines.append(f"constraint all_different_int([{', '.join(f'{tag}{i}' for i in range(1, n + 1))}]);")
    lines.append("constraint all_different_int(q);")
    lines.append("solve satisfy;")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("n, status", [(3, "infeasible"), (6, "optimal")])
def test_flatzinc_queens(tmp_path, n, status):
    path = tmp_path / f"q{n}.fzn"
    path.write_text(flat_queens(n))
    problem = read(path)
    r = solve(problem, Options(device="cpu"))
    assert r.status == status
    if status == "optimal":
        q = [int(problem.variables[v].labels[r.assignment[v]]) for v in range(n)]
        assert len({x + i for i, x in enumerate(q)}) == len({x - i for i, x in enumerate(q)}) == len(set(q)) == n


@pytest.mark.parametrize("change, line, fragment", [
    ("constraint int_ne(q[1], 2);", 11, "constraint int_times is not supported"),
    ("var {1, 3, 5}: s;", 6, "var int without a domain is not supported"),
    ("var bool: b;", 7, "unknown identifier x"),
])
def test_flatzinc_refusals(tmp_path, change, line, fragment):
    replacement = {"constraint int_ne(q[1], 2);": "constraint int_times(q[1], q[2], q[3]);",
                   "var {1, 3, 5}: s;": "var int: s;", "var bool: b;": "var bool: b = x;"}[change]
    path = tmp_path / "bad.fzn"
    path.write_text(FZN.replace(change, replacement))
    with pytest.raises(ParseError) as info:
        read(path)
    assert str(info.value).startswith(f"{path}:{line}:") and fragment in str(info.value)


@pytest.mark.parametrize("constraint, holds", [
    ("eq(p[1],add(p[0],3))", lambda p: p[1] == p[0] + 3),
    ("eq(add(p[0],3),p[1])", lambda p: p[1] == p[0] + 3),
    ("eq(p[2],add(p[0],mul(p[1],2)))", lambda p: p[2] == p[0] + 2 * p[1]),
    ("eq(sub(p[1],p[2]),p[0])", lambda p: p[1] - p[2] == p[0]),
    ("eq(p[0],dist(p[1],p[2]))", lambda p: p[0] == abs(p[1] - p[2])),
    ("eq(p[0],add(p[0],1))", lambda p: False),
    ("eq(p[0],p[1])", lambda p: p[0] == p[1]),
])
def test_functional_intension_kept_as_its_tuples_allows_what_the_constraint_does(constraint, holds, tmp_path,
                                                                                  monkeypatch):
    """eq(x, e) with x not in e, read as its allowed tuples (TupleFunction, above LISTED_MIN entries) or
    as a dense table, allows exactly the assignments the constraint, evaluated in Python, allows, over
    domains with holes and negative values; an expression with x on both sides stays dense."""
    from gpusolve.model import TupleFunction
    from gpusolve.parsers import xcsp3
    values = (-2, 0, 1, 3, 4, 7, 9)
    path = tmp_path / "f.xml"
    path.write_text(f'<instance format="XCSP3" type="CSP"><variables>'
                    f'<array id="p" size="[3]"> {" ".join(map(str, values))} </array></variables>'
                    f'<constraints><intension> {constraint} </intension></constraints></instance>')
    dense = read(path)
    monkeypatch.setattr(xcsp3, "LISTED_MIN", 0)
    listed = read(path)
    kinds = {type(f) for f in listed.functions}
    assert kinds == ({CostFunction} if constraint == "eq(p[0],add(p[0],1))" else {TupleFunction})
    for problem in (dense, listed):
        for a in itertools.product(range(len(values)), repeat=3):
            assert problem.is_forbidden(problem.evaluate(a)) != holds([values[i] for i in a]), a


@pytest.mark.parametrize("low, high", [(-(1 << 62), 1 << 62), (-(1 << 60), 1 << 60)])
def test_xcsp21_costs_are_shifted_without_wrapping(tmp_path, low, high):
    """Negative costs are shifted into the offset; in int64, 2^62 - (-2^62) wrapped to -2^63 and the
    costlier value was reported optimal at -1.4e19. Costs spanning more than 2^62 are refused."""
    path = tmp_path / "soft.xml"
    path.write_text(f"""<instance><presentation name="s" format="XCSP 2.1"/>
<domains nbDomains="1"><domain name="D" nbValues="2">0 1</domain></domains>
<variables nbVariables="1"><variable name="X" domain="D"/></variables>
<relations nbRelations="1"><relation name="R" arity="1" nbTuples="2" semantics="soft">{low}:0|{high}:1</relation>
</relations><constraints nbConstraints="1"><constraint name="C" arity="1" scope="X" reference="R"/></constraints>
</instance>""")
    if high - low > (1 << 62) - 2:  # beyond model.MAX_TOP, with the top above it
        with pytest.raises(ParseError, match="costs too large"):
            read(path)
    else:
        assert solved(path) == ("optimal", low)
