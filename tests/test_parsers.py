"""Readers: malformed inputs fail with `FILE:LINE: message`, small files parse value by value."""
import bz2
import csv
import gzip
import lzma
import math
import re

import numpy as np
import pytest

from gpusolve.parsers import SUPPORTED_SUFFIXES, ParseError, read, tokens
from gpusolve.parsers.wcsp import write_wcsp
from helpers import random_problem

F = None  # a forbidden entry in expected tables

WCSP = """\
t 2 3 1 10
3 3
2 0 1 0 2
0 0 4
1 2 12
"""

UAI = """\
MARKOV
2
2 3
2
1 0
2 0 1
2
0.5 0.5
6
0.1 0.2 0.3
0.4 0.5 0.6
"""

XCSP = """\
<?xml version="1.0"?>
<instance>
<presentation name="tiny" format="XCSP 2.1"/>
<domains nbDomains="1">
<domain name="D" nbValues="3">0..2</domain>
</domains>
<variables nbVariables="2">
<variable name="X" domain="D"/>
<variable name="Y" domain="D"/>
</variables>
<relations nbRelations="1">
<relation name="R" arity="2" nbTuples="2" semantics="soft" defaultCost="1">5:0 0|2 2</relation>
</relations>
<constraints nbConstraints="1" maximalCost="10">
<constraint name="C" arity="2" scope="X Y" reference="R"/>
</constraints>
</instance>
"""

COMPRESSORS = {".gz": gzip.compress, ".xz": lzma.compress, ".bz2": bz2.compress}


def write(tmp_path, name, content):
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def edit(text, old, new):
    assert old in text, old
    return text.replace(old, new, 1)


def check_error(info, path, line, fragment):
    message = str(info.value)
    prefix = f"{path}:{line}: " if line is not None else f"{path}: "
    assert message.startswith(prefix), message
    assert fragment in message, message
    assert "\n" not in message


def assert_table(problem, table, expected):
    """Compare a table with a nested list where F marks forbidden entries."""
    expected = np.array(expected, dtype=object)
    assert table.shape == expected.shape
    for index, want in np.ndenumerate(expected):
        if want is F:
            assert problem.is_forbidden(table[index]), (index, table[index])
        else:
            assert not problem.is_forbidden(table[index]) and table[index] == want, (index, table[index])


# ---------------------------------------------------------------- malformed inputs

MALFORMED = [
    # (file name, content, line or None, message fragment)
    ("truncated.wcsp", edit(WCSP, "1 2 12\n", ""), 4, "unexpected end of file"),
    ("empty.wcsp", "", None, "unexpected end of file"),
    ("extra.wcsp", WCSP + "1 0 0 0\n", 6, "unexpected data after the last cost function"),
    ("scope.wcsp", edit(WCSP, "2 0 1 0 2", "2 0 5 0 2"), 3, "scope variable 5 out of range (n=2)"),
    ("dupscope.wcsp", edit(WCSP, "2 0 1 0 2", "2 0 0 0 2"), 3, "appears twice"),
    ("value.wcsp", edit(WCSP, "1 2 12", "1 3 12"), 5, "value 3 out of domain of variable 1 (size 3)"),
    ("nonnumber.wcsp", edit(WCSP, "0 0 4", "0 zero 4"), 4, "found 'zero'"),
    ("header.wcsp", edit(WCSP, "t 2 3", "t two 3"), 1, "number of variables"),
    ("keyword.wcsp", edit(WCSP, "2 0 1 0 2\n0 0 4\n1 2 12\n", "2 0 1 -1 sgrammar var 1\n"), 3,
     "global cost function sgrammar is not supported"),
    ("metric.wcsp", edit(WCSP, "2 0 1 0 2\n0 0 4\n1 2 12\n", "2 0 1 -1 salldiff lin 1\n"), 3,
     "salldiff metric 'lin' is none of var, dec, decbi"),
    ("intension-arity.wcsp", edit(WCSP, "2 0 1 0 2\n0 0 4\n1 2 12\n", "1 0 -1 >= 0 0\n"), 3,
     "needs a scope of 2 variables"),
    ("negcost.wcsp", edit(WCSP, "0 0 4", "0 0 -4"), 4, "negative costs are not supported"),
    ("negdefault.wcsp", edit(WCSP, "2 0 1 0 2", "2 0 1 -5 2"), 3, "negative costs are not supported"),
    ("huge.wcsp", edit(WCSP, "0 0 4", "0 0 99999999999999999999"), 4, "does not fit in 64 bits"),
    ("noshared.wcsp", edit(WCSP, "2 0 1 0 2\n0 0 4\n1 2 12\n", "2 0 1 0 -1\n"), 3,
     "shared cost function 1 is not defined"),
    ("toolarge.wcsp", "t 2 50000 1 10\n50000 50000\n2 0 1 0 0\n", 3, "too large"),
    ("negative.uai", edit(UAI, "0.4 0.5 0.6", "0.4 -0.5 0.6"), 11, "non-negative"),
    ("nan.uai", edit(UAI, "0.4 0.5 0.6", "0.4 nan 0.6"), 11, "finite"),
    ("count.uai", edit(UAI, "6\n", "5\n"), 9, "table has 5 entries, expected 6"),
    ("nonnumber.uai", edit(UAI, "0.1 0.2", "0.1 abc"), 10, "found 'abc'"),
    ("type.uai", edit(UAI, "MARKOV", "MRF"), 1, "unknown network type 'MRF'"),
    ("scope.uai", edit(UAI, "2 0 1\n", "2 0 4\n"), 6, "scope variable 4 out of range (n=2)"),
    ("truncated.uai", edit(UAI, "0.4 0.5 0.6\n", ""), 10, "unexpected end of file"),
    ("extra.uai", UAI + "0.7\n", 12, "unexpected data after the last table"),
    ("broken.xml", edit(XCSP, '<variable name="Y" domain="D"/>', '<variable name="Y" domain="D">'), 10,
     "malformed XML: mismatched tag"),
    ("truncated.xml", XCSP[: XCSP.index("</constraints>")], 16, "malformed XML"),
    ("relation.xml", edit(XCSP, 'reference="R"', 'reference="Q"'), 15, "unknown relation Q"),
    ("variable.xml", edit(XCSP, 'scope="X Y"', 'scope="X Z"'), 15, "unknown variable Z"),
    ("domain.xml", edit(XCSP, 'name="Y" domain="D"', 'name="Y" domain="E"'), 9, "unknown domain E"),
    ("value.xml", edit(XCSP, "|2 2<", "|2 7<"), 15, "value 7 of relation R is not in the domain of variable Y"),
    ("predicate.xml", edit(XCSP, "</relations>", "</relations>\n<predicates nbPredicates=\"0\"/>"), 14,
     "intensional constraints"),
    ("global.xml", edit(XCSP, 'reference="R"', 'reference="global:allDifferent"'), 15,
     "global constraint allDifferent is not supported"),
    ("nbtuples.xml", edit(XCSP, 'nbTuples="2"', 'nbTuples="3"'), 12, "announces 3 tuples, found 2"),
    ("noninteger.xml", edit(XCSP, "5:0 0", "5.5:0 0"), 12, "cost '5.5' is not an integer"),
    ("minusinf.xml", edit(XCSP, 'defaultCost="1"', 'defaultCost="-infinity"'), 12, "best possible value"),
    ("arity.xml", edit(XCSP, "|2 2<", "|2<"), 12, "tuple of 1 values, arity is 2"),
    ("nbvariables.xml", edit(XCSP, 'nbVariables="2"', 'nbVariables="3"'), 7, "announces 3 entries, found 2"),
    ("interval.xml", edit(XCSP, ">0..2<", ">2..0<"), 5, "empty interval 2..0"),
    ("corrupt.wcsp.gz", b"this is not gzip data", None, "corrupt or truncated gz archive"),
    ("truncated.wcsp.xz", lzma.compress(WCSP.encode())[:30], None, "corrupt or truncated xz archive"),
    ("corrupt.uai.bz2", b"BZh91AY&SY garbage", None, "corrupt or truncated bz2 archive"),
    ("model.txt", "hello", None, "unsupported file type .txt"),
]


@pytest.mark.parametrize("name, content, line, fragment", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed(tmp_path, name, content, line, fragment):
    path = write(tmp_path, name, content)
    with pytest.raises(ParseError) as info:
        read(path)
    check_error(info, path, line, fragment)


def test_malformed_cases_are_many_and_distinct():
    assert len({m[0] for m in MALFORMED}) == len(MALFORMED) >= 25


def test_missing_file(tmp_path):
    path = tmp_path / "absent.wcsp"
    with pytest.raises(ParseError) as info:
        read(path)
    check_error(info, path, None, "file not found")


BAD_EVIDENCE = [
    ("1 5 0\n", 1, "evidence variable 5 out of range (n=2)"),
    ("1\n1 3\n", 2, "evidence value 3 out of domain of variable 1 (size 3)"),
    ("2 0 1 1\n", 1, "malformed or truncated evidence"),
    ("1 0 x\n", 1, "found 'x'"),
    ("2 0 0\n0 1\n", 2, "observed twice with different values"),
    ("-1\n", 1, "negative count"),
]


@pytest.mark.parametrize("content, line, fragment", BAD_EVIDENCE, ids=[b[2] for b in BAD_EVIDENCE])
def test_bad_evidence(tmp_path, content, line, fragment):
    model = write(tmp_path, "net.uai", UAI)
    evidence = write(tmp_path, "bad.evid", content)
    with pytest.raises(ParseError) as info:
        read(model, evidence)
    check_error(info, evidence, line, fragment)


def test_evidence_for_non_uai_is_refused(tmp_path):
    model = write(tmp_path, "p.wcsp", WCSP)
    evidence = write(tmp_path, "p.evid", "0\n")
    with pytest.raises(ParseError) as info:
        read(model, evidence)
    check_error(info, evidence, None, "evidence applies to .uai files only")


# ---------------------------------------------------------------- wcsp

def test_wcsp_tuples_defaults_forbidden_and_constants(tmp_path):
    path = write(tmp_path, "p.wcsp", """\
p 2 3 4 100
3 3
2 0 1 2 3
0 0 4
1 2 100
0 0 5
1 1 3 1
2 0
0 7 0
0 0 1
4
""")
    p = read(path)
    assert (p.name, p.task, p.sense, p.integer) == ("p", "WCSP", 1, True)
    assert [v.name for v in p.variables] == ["x0", "x1"] and p.domains == [3, 3]
    assert p.offset == 11  # both constants
    assert p.top == 9  # largest finite sum (5 + 3) + 1, below ub - offset
    assert [f.scope for f in p.functions] == [(0, 1), (1,)]
    assert_table(p, p.functions[0].table, [[5, 2, 2], [2, 2, F], [2, 2, 2]])  # duplicate: last wins
    assert_table(p, p.functions[1].table, [3, 3, 0])
    assert p.to_file_value(0) == 11


def test_wcsp_costs_at_or_above_ub_are_forbidden(tmp_path):
    p = read(write(tmp_path, "p.wcsp", "p 1 3 1 5\n3\n1 0 0 2\n1 5\n2 6\n"))
    assert_table(p, p.functions[0].table, [0, F, F])


def test_an_interval_variable_has_the_values_from_0_to_its_size_minus_1(tmp_path):
    """toulbar2 writes an interval variable's domain size negative (validation/default/10_1.wcsp and
    cfnformat.rst): the same values 0..|size|-1, which a table lists as any other."""
    for name, text in (("i.wcsp", edit(WCSP, "3 3\n", "3 -3\n")),
                       ("i.cfn", "{problem {name a mustbe <50} variables {x -3 y 2}\n"
                                 "functions {f {scope [x y] defaultcost 1 costs [2 1 0 0 0 4]}}}")):
        (tmp_path / name).write_text(text)
        problem = read(tmp_path / name)
        assert problem.domains == [3, 3] if name.endswith("wcsp") else [3, 2]
        positive = text.replace("-3", "3")
        (tmp_path / ("p" + name)).write_text(positive)
        assert [f.table.tolist() for f in problem.functions] == \
            [f.table.tolist() for f in read(tmp_path / ("p" + name)).functions]


def test_wcsp_shared_tables(tmp_path):
    p = read(write(tmp_path, "p.wcsp", """\
p 3 2 3 100
2 2 2
-2 0 1 0 2
0 1 3
1 0 4
2 1 2 0 -1
2 0 2 0 -1
"""))
    assert [f.scope for f in p.functions] == [(0, 1), (1, 2), (0, 2)]
    for f in p.functions:
        assert_table(p, f.table, [[0, 3], [4, 0]])
    assert not np.shares_memory(p.functions[0].table, p.functions[1].table)


INTENSION = [
    (">= 1 1", [[1, F, F], [0, 1, F], [0, 0, 1]]),  # x >= y + 1: gap = y + 1 - x
    ("> 0 2", [[1, 2, F], [0, 1, 2], [0, 0, 1]]),  # x > y
    ("<= 0 1", [[0, 0, 0], [1, 0, 0], [F, 1, 0]]),  # x <= y: gap = x - y
    ("< 1 5", [[0, 0, 0], [1, 0, 0], [2, 1, 0]]),  # x < y + 1
    ("= 1 1", [[1, F, F], [0, 1, F], [1, 0, 1]]),  # x = y + 1: |y + 1 - x|
    ("disj 1 2 7", [[7, 0, 0], [7, 7, 0], [0, 7, 7]]),  # x >= y + 2 or y >= x + 1
    ("disj 1 2 10", [[F, 0, 0], [F, F, 0], [0, F, F]]),  # penalty >= ub: hard
]


@pytest.mark.parametrize("keyword, expected", INTENSION, ids=[i[0] for i in INTENSION])
def test_wcsp_intension(tmp_path, keyword, expected):
    p = read(write(tmp_path, "p.wcsp", f"p 2 3 1 10\n3 3\n2 0 1 -1 {keyword}\n"))
    assert p.functions[0].scope == (0, 1)
    assert_table(p, p.functions[0].table, expected)


# ---------------------------------------------------------------- uai

BAYES = """\
c a comment line
BAYES
2
2 3
2
1 0
2 0 1
2
0.25 0.75
6 0.1 0.2
0.7 0.0
0.5 0.5
"""


def test_uai_c_order_and_minus_log10(tmp_path):
    p = read(write(tmp_path, "bn.uai", BAYES))
    assert (p.name, p.task, p.sense, p.integer, p.top) == ("bn", "MPE", -1, False, math.inf)
    assert p.functions[0].table.dtype == np.float64
    assert p.functions[0].table == pytest.approx([-math.log10(0.25), -math.log10(0.75)])
    table = p.functions[1].table
    assert p.functions[1].scope == (0, 1) and table.shape == (2, 3)
    assert table[0] == pytest.approx([1.0, -math.log10(0.2), -math.log10(0.7)])  # last variable fastest
    assert table[1, 0] == math.inf and p.is_forbidden(table[1, 0])
    assert table[1, 1:] == pytest.approx([-math.log10(0.5)] * 2)
    assert p.to_file_value(p.evaluate([0, 2])) == pytest.approx(math.log10(0.25 * 0.7))


def test_uai_markov_allows_potentials_above_one(tmp_path):
    p = read(write(tmp_path, "m.uai", "MARKOV\n1\n2\n1\n1 0\n2\n10 1\n"))
    assert p.functions[0].table == pytest.approx([-1.0, 0.0])


@pytest.mark.parametrize("evidence", ["1 1 2\n", "2\n1 1 2\n1 0 0\n"], ids=["single-sample", "multi-sample"])
def test_uai_evidence_conditions(tmp_path, evidence):
    model = write(tmp_path, "bn.uai", BAYES)
    p = read(model, write(tmp_path, "e.evid", evidence))
    assert p.evidence == {1: 2}
    assert [f.scope for f in p.functions] == [(0,), (0,)]
    assert p.functions[1].table == pytest.approx([-math.log10(0.7), -math.log10(0.5)])
    assert len(p.variables) == 2


def test_uai_evidence_file_beside_is_used(tmp_path):
    write(tmp_path, "bn.uai", BAYES)
    write(tmp_path, "bn.uai.gz", gzip.compress(BAYES.encode()))
    write(tmp_path, "bn.uai.evid", "1 0 1\n")
    for name in ("bn.uai", "bn.uai.gz"):
        assert read(tmp_path / name).evidence == {0: 1}


def test_uai_empty_evidence(tmp_path):
    p = read(write(tmp_path, "bn.uai", BAYES), write(tmp_path, "e.evid", "0\n"))
    assert p.evidence == {} and [f.scope for f in p.functions] == [(0,), (0, 1)]


# ---------------------------------------------------------------- xcsp

def test_xcsp_soft_relation(tmp_path):
    text = edit(XCSP, "5:0 0|2 2", "5:0 0|2 2|10:1 1")
    text = edit(text, 'nbTuples="2"', 'nbTuples="3"')
    text = edit(text, 'maximalCost="10"', 'maximalCost="10" initialCost="3"')
    p = read(write(tmp_path, "s.xml", text))
    assert (p.name, p.sense, p.offset) == ("tiny", 1, 3)
    assert [v.name for v in p.variables] == ["X", "Y"]
    assert p.variables[0].labels == ("0", "1", "2")
    assert_table(p, p.functions[0].table, [[5, 1, 1], [1, F, 1], [1, 1, 5]])  # 10 >= maximalCost


def test_xcsp_supports_conflicts_and_labels(tmp_path):
    text = XCSP.replace(">0..2<", ">1 3 5<").replace('nbRelations="1"', 'nbRelations="2"')
    text = edit(text, '<relation name="R" arity="2" nbTuples="2" semantics="soft" defaultCost="1">5:0 0|2 2',
                '<relation name="S" arity="2" nbTuples="2" semantics="supports">1 3|5 5</relation>\n'
                '<relation name="R" arity="2" nbTuples="1" semantics="conflicts">1 1')
    text = edit(text, 'nbConstraints="1" maximalCost="10">',
                'nbConstraints="2">\n<constraint name="D" arity="2" scope="Y X" reference="S"/>')
    p = read(write(tmp_path, "c.xml", text))
    assert p.variables[1].labels == ("1", "3", "5")
    assert p.functions[0].scope == (1, 0)
    assert_table(p, p.functions[0].table, [[F, 0, F], [F, F, F], [F, F, 0]])
    assert_table(p, p.functions[1].table, [[F, 0, 0], [0, 0, 0], [0, 0, 0]])


def test_xcsp_maximize(tmp_path):
    text = edit(XCSP, 'format="XCSP 2.1"', 'format="XCSP 2.1_FRODO" maximize="true"')
    text = edit(text, 'nbTuples="2" semantics="soft" defaultCost="1">5:0 0|2 2',
                'nbTuples="3" semantics="soft" defaultCost="0">5:0 0|-2:1 1|-infinity:2 2')
    text = edit(text, ' maximalCost="10"', "")
    text = edit(text, ">0..2<", ">0..1 7<")
    text = text.replace("2 2", "7 7")
    p = read(write(tmp_path, "m.xml", text))
    assert p.sense == -1 and p.offset == -5  # utilities u become costs -u, shifted to >= 0
    assert p.variables[0].labels == ("0", "1", "7")
    assert_table(p, p.functions[0].table, [[0, 5, 5], [5, 7, 5], [5, 5, F]])
    assert p.to_file_value(p.functions[0].table[0, 0]) == 5
    assert p.to_file_value(p.functions[0].table[1, 1]) == -2


# ---------------------------------------------------------------- compression

@pytest.mark.parametrize("suffix", list(COMPRESSORS))
@pytest.mark.parametrize("name, text", [("p.wcsp", WCSP), ("p.uai", UAI), ("p.xml", XCSP)])
def test_compression_round_trip(tmp_path, name, text, suffix):
    plain = read(write(tmp_path, name, text))
    packed = read(write(tmp_path, name + suffix, COMPRESSORS[suffix](text.encode())))
    assert (name + suffix).endswith(SUPPORTED_SUFFIXES)
    assert packed.name == plain.name and packed.top == plain.top and packed.offset == plain.offset
    assert [f.scope for f in packed.functions] == [f.scope for f in plain.functions]
    for a, b in zip(packed.functions, plain.functions):
        np.testing.assert_array_equal(a.table, b.table)


# ---------------------------------------------------------------- shared instances

def header_variables(path):
    """The variable count a file announces, read independently of the parsers."""
    text = path.read_text()
    if path.suffix == ".xml":
        return int(re.search(r'nbVariables="(\d+)"', text)[1])
    if path.suffix == ".uai":  # skip comment lines
        text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("c"))
    return int(text.split()[1])


def test_shared_instances_parse(shared_instances):
    with open(shared_instances / "optima.csv") as f:
        files = [row["file"] for row in csv.DictReader(f)]
    assert files
    for name in files:
        path = shared_instances / name
        p = read(path)
        assert len(p.variables) == header_variables(path), name
        assert p.functions, name
        for f in p.functions:
            assert f.table.shape == tuple(p.domains[v] for v in f.scope), name
            assert f.table.dtype == p.dtype, name


def test_wcsp_integers_written_together_read_as_toulbar2_reads_them(tmp_path):
    """toulbar2 reads .wcsp with C++'s `>>`, so `1-1` is 1 then -1 (its own lipa30a_invalldiff.wcsp.xz
    writes `29-1 alldiff 0`)."""
    glued, spaced = tmp_path / "glued.wcsp", tmp_path / "spaced.wcsp"
    glued.write_text("g 3 2 3 10\n2 2 2\n2 0 1-1 >= 0 0\n3 0 1 2-1 alldiff 0\n1 2 0 1\n1 3\n")
    spaced.write_text(glued.read_text().replace("1-1", "1 -1").replace("2-1", "2 -1"))
    a, b = read(glued), read(spaced)
    assert [(f.scope, f.table.tolist()) for f in a.functions] == [(f.scope, f.table.tolist()) for f in b.functions]
    assert [g.scope for g in a.globals] == [g.scope for g in b.globals] == [(0, 1, 2)]
    with pytest.raises(ParseError, match="found '1-x'"):
        glued.write_text("g 3 2 1 10\n2 2 2\n2 0 1-x >= 0 0\n")
        read(glued)


def read_both(path, monkeypatch) -> tuple:
    """(the problem read from the file's integers at once, the one read line by line, whether the first
    was read at once)."""
    made = []
    original = tokens.Integers.__init__

    def spy(self, *args):
        made.append(True)
        original(self, *args)
    with monkeypatch.context() as m:
        m.setattr(tokens.Integers, "__init__", spy)
        fast = read(path)
    with monkeypatch.context() as m:
        m.setattr(tokens, "WHOLE_CHARS", 0)
        slow = read(path)
    return fast, slow, bool(made)


def same_problem(a, b) -> bool:
    return (a.domains == b.domains and a.top == b.top and a.offset == b.offset
            and [f.scope for f in a.functions] == [f.scope for f in b.functions]
            and all(np.array_equal(f.table, g.table) for f, g in zip(a.functions, b.functions)))


SHARED_DEFINITIONS = "s 4 3 5 50\n3 3 3 3\n-2 0 1 7 2\n0 0 1\n2 2 60\n2 2 3 0 -1\n-4 0 1 2 3 0 1\n0 0 0 0 5\n" \
                     "4 1 2 3 0 2 -2\n0 4 1\n4\n"  # shared tables of arity 2 and 4, reused; a constant


def test_a_wcsp_read_at_once_is_the_wcsp_read_line_by_line(tmp_path, monkeypatch):
    """A .wcsp whose tokens after its name are all integers is converted at once (tokens.Integers): the
    same problem as the line-by-line reader's, on random networks with hard tuples and constants, and on
    shared definitions reused."""
    rng = np.random.default_rng(5)
    paths = [write(tmp_path, "shared.wcsp", SHARED_DEFINITIONS)]
    for i in range(60):
        paths.append(tmp_path / f"r{i}.wcsp")
        write_wcsp(random_problem(rng, n_max=7, d_max=6, f_max=12, arity_max=4), paths[-1])
    for path in paths:
        fast, slow, at_once = read_both(path, monkeypatch)
        assert at_once and same_problem(fast, slow), path.name
    assert read(paths[0]).offset == 4 and len(read(paths[0]).functions) == 4


def test_a_wcsp_past_the_whole_read_cap_is_read_on_line_by_line_from_where_it_passed_it(tmp_path, monkeypatch):
    """Lines are held a chunk of the file at a time (source.read_chunks); once WHOLE_CHARS is passed, several
    chunks into a file, the line-by-line reader takes the lines held, then the chunks left."""
    from gpusolve.model.problem import CostFunction, Problem, Variable, finalize_integer
    from gpusolve.parsers import source
    rng = np.random.default_rng(11)
    n = 30
    functions = [CostFunction(tuple(int(v) for v in rng.choice(n, 2, replace=False)),
                              rng.integers(0, 1000, (10, 10)).astype(np.int64)) for _ in range(400)]
    problem = finalize_integer(Problem("big", [Variable(f"x{i}", 10) for i in range(n)], functions), 10 ** 9)
    path = tmp_path / "big.wcsp"
    write_wcsp(problem, path)
    assert path.stat().st_size > 4 * source.CHUNK
    fast, slow, at_once = read_both(path, monkeypatch)
    with monkeypatch.context() as m:
        m.setattr(tokens, "WHOLE_CHARS", 2 * source.CHUNK)
        passed = read(path)
    assert at_once and same_problem(fast, slow) and same_problem(fast, passed)


def test_the_shared_wcsp_instances_read_at_once_as_line_by_line(shared_instances, monkeypatch):
    for path in sorted(shared_instances.glob("**/*.wcsp")):
        fast, slow, _ = read_both(path, monkeypatch)
        assert same_problem(fast, slow), path.name


@pytest.mark.parametrize("text, line, fragment", [
    ("p 2 3 1 10\n3 3\n2 0 1 0 2\n0 0 4\n1 3 12\n", 5, "value 3 out of domain of variable 1"),
    ("p 2 3 1 10\n3 3\n2 0 1 0 2\n0 0 4\n1 2 99999999999999999999\n", 5, "does not fit in 64 bits"),
    ("p 2 3 1 10\n3 3\n2 0 1 0 2\n0 0 4\n1 2 9223372036854775807\n", None, None),
    ("p 2 3 1 10\n3 3\n2 0 1 0 3\n0 0 4\n1 2 12\n", 5, "unexpected end of file"),
    ("p 2 3 2 10\n3 3\n2 0 0 0 2\n", 3, "variable 0 appears twice"),
])
def test_an_error_in_a_wcsp_of_integers_names_its_line(tmp_path, text, line, fragment):
    """Errors found while reading the integers at once are raised by the line-by-line reader, with their
    line; int64's largest value, which numpy's converter also returns for larger ones, is read as such."""
    path = write(tmp_path, "p.wcsp", text)
    if fragment is None:
        assert read(path).functions[0].table[1, 2] == read(path).top  # at or above ub: forbidden
        return
    with pytest.raises(ParseError) as info:
        read(path)
    check_error(info, path, line, fragment)


def big_table(rows_per_line: list[int], bad_row: int | None = None) -> str:
    """A .wcsp of two variables (domain 20) and one binary table of 400 tuples, written with the given
    numbers of tuples per line (cycled), tuple `bad_row` holding a value out of domain; then a unary."""
    tuples = [f"{a} {b} {(a * 7 + b) % 5}" if r != bad_row else f"{a} 99 1"
              for r, (a, b) in enumerate((a, b) for a in range(20) for b in range(20))]
    lines, i, k = [], 0, 0
    while i < len(tuples):
        n = rows_per_line[k % len(rows_per_line)]
        lines.append(" ".join(tuples[i:i + n]))
        i, k = i + n, k + 1
    body = "\n".join(lines)
    return f"big 2 20 2 1000\n20 20\n2 0 1 0 400\n{body}\n1 1 0 1\n3 4\n", lines


@pytest.mark.parametrize("rows_per_line", [[1], [1, 10], [3, 1, 1, 7], [50]])
def test_a_large_table_reads_whole_whatever_its_lines_hold(tmp_path, rows_per_line):
    """Lines of a table are read in batches sized by the line before: uneven lines (more tuples than the
    last one held) must neither lose a token nor take one of the next function's."""
    text, _ = big_table(rows_per_line)
    problem = read(write(tmp_path, "big.wcsp", text))
    table = next(f.table for f in problem.functions if f.scope == (0, 1))
    assert all(int(table[a, b]) == (a * 7 + b) % 5 for a in range(20) for b in range(20))
    unary = next(f.table for f in problem.functions if f.scope == (1,))
    assert int(unary[3]) == 4 and int(unary[0]) == 0


@pytest.mark.parametrize("rows_per_line", [[1], [3, 1, 1, 7]])
@pytest.mark.parametrize("bad_row", [2, 150, 399])
def test_an_error_deep_in_a_large_table_names_its_line(tmp_path, rows_per_line, bad_row):
    text, lines = big_table(rows_per_line, bad_row)
    path = write(tmp_path, "big.wcsp", text)
    line = 4 + next(i for i, t in enumerate(lines) if " 99 " in f" {t} ")
    with pytest.raises(ParseError) as info:
        read(path)
    check_error(info, path, line, "out of domain")
