"""XCSP3 reading within bounds (issue 32): linear in the file, entity declarations and deep nesting
refused at their line, and memory charged to the reading budget before it is taken, in XCSP3 and
FlatZinc (peaks measured in a child process)."""
import os
import subprocess
import sys
import xml.parsers.expat
from pathlib import Path

import pytest
from test_hardening import PEAK, gpusolve

from gpusolve.parsers import ParseError, read, xcsp3
from gpusolve.parsers.intension import MAX_DEPTH

ROOT = Path(__file__).resolve().parents[1]


def cli(*args):
    """(exit code, stderr) of the command line in a child process, as a user runs it."""
    p = subprocess.run([sys.executable, "-m", "gpusolve", *map(str, args)], capture_output=True, text=True, cwd=ROOT,
                       env={**os.environ, "GPUSOLVE_NO_SERVE": "1"})
    return p.returncode, p.stderr


def nested(depth: int) -> str:
    """An expression `depth` operators deep: not(not(...eq(x,1)...))."""
    return "not(" * (depth - 1) + "eq(x,1)" + ")" * (depth - 1)


def model(path, constraint: str):
    path.write_text(f'<instance format="XCSP3" type="CSP">\n<variables> <var id="x"> 0..3 </var> </variables>\n'
                    f'<constraints> <intension> {constraint} </intension> </constraints>\n</instance>\n')
    return path


@pytest.mark.parametrize("command", ["solve", "info"])
def test_a_deep_expression_is_refused_at_its_line(tmp_path, command):
    """50,000 nested operators ended in 'internal error: RecursionError' (solve) and a traceback (info)."""
    path = model(tmp_path / "deep.xml", nested(50_000))
    code, err = cli(command, path)
    assert (code, err) == (2, f"{path}:3: the expression is nested more than {MAX_DEPTH} levels deep\n")


def test_deeply_nested_elements_are_refused_at_their_line(tmp_path):
    """5,000 nested blocks ended in 'internal error: RecursionError'."""
    path = tmp_path / "blocks.xml"
    path.write_text('<instance format="XCSP3" type="CSP">\n<variables> <var id="x"> 0..1 </var> </variables>\n'
                    '<constraints>\n' + "<block>\n" * 5000 + "<intension> eq(x,1) </intension>\n"
                    + "</block>\n" * 5000 + "</constraints>\n</instance>\n")
    code, err = cli("solve", path)
    line = 4 + xcsp3.MAX_NESTING - 2  # <instance> and <constraints> open, then a <block> a line from line 4
    assert (code, err) == (2, f"{path}:{line}: elements nested more than {xcsp3.MAX_NESTING} levels deep\n")


@pytest.mark.parametrize("depth", [MAX_DEPTH, MAX_DEPTH + 1])
def test_nesting_is_read_up_to_its_limit(tmp_path, depth):
    path = model(tmp_path / "n.xml", nested(depth))
    if depth > MAX_DEPTH:
        with pytest.raises(ParseError, match="nested more than"):
            read(path)
        return
    problem = read(path)
    negated = (depth - 1) % 2 == 1
    allowed = [x for x in range(4) if not problem.is_forbidden(problem.evaluate([x]))]
    assert allowed == [x for x in range(4) if (x == 1) != negated]


def test_entity_declarations_are_refused_at_once(tmp_path):
    """A few lines of nested entities expand to gigabytes (the 'billion laughs'): reading hung."""
    entities = "".join(f'<!ENTITY e{k} "{f"&e{k - 1};" * 10 if k else "lol"}">\n' for k in range(5))
    path = tmp_path / "laughs.xml"
    path.write_text(f'<?xml version="1.0"?>\n<!DOCTYPE i [\n{entities}]>\n'
                    '<instance format="XCSP3" type="CSP"><variables><var id="x">&e4;</var></variables></instance>\n')
    with pytest.raises(ParseError) as info:
        read(path)
    assert str(info.value) == f"{path}:3: entity declarations (<!ENTITY e0 ...>) are not supported"


class Counted(str):
    """Text handed to the reader: counts the characters every concatenation involving it copies."""
    copied = 0

    def __add__(self, other):
        Counted.copied += len(self) + len(other)
        return Counted(str.__add__(self, other))

    def __radd__(self, other):
        Counted.copied += len(self) + len(other)
        return Counted(str.__add__(other, self))


def test_element_text_is_joined_once_not_grown(tmp_path, monkeypatch):
    """An element's text comes in many pieces; grown piece by piece it copied the text so far each
    time (160,000 lines of tuples took 43 s). The pieces are counted instead of timed: reading the
    file copies, by concatenation, no more characters than it holds."""
    create = xml.parsers.expat.ParserCreate

    class Parser:
        def __init__(self):
            object.__setattr__(self, "parser", create())

        def __getattr__(self, name):
            return getattr(self.parser, name)

        def __setattr__(self, name, value):
            if name == "CharacterDataHandler":
                value = (lambda handler: lambda text: handler(Counted(text)))(value)
            setattr(self.parser, name, value)

    monkeypatch.setattr(xml.parsers.expat, "ParserCreate", Parser)
    tuples = [(i % 100, i * 7 % 100) for i in range(20_000)]
    path = tmp_path / "t.xml"
    path.write_text('<instance format="XCSP3" type="CSP"><variables><array id="x" size="[2]"> 0..99 </array>'
                    '</variables><constraints><extension><list> x[0] x[1] </list><supports>\n'
                    + "".join(f"({a},{b})\n" for a, b in tuples) + "</supports></extension></constraints></instance>\n")
    Counted.copied = 0
    table = xcsp3.read(path).functions[0].table
    assert Counted.copied <= path.stat().st_size
    assert {tuple(int(i) for i in t) for t in zip(*(table == 0).nonzero())} == set(tuples)


def read_in_child(path, mem_limit: int):
    """(the reading error or None, peak RSS in MiB) of reading `path` in a fresh process."""
    code = PEAK.replace("from gpusolve.cli.commands import main\nmain(sys.argv[1:])",
                        "from gpusolve.parsers import ParseError, read\n"
                        "try:\n    read(sys.argv[1], mem_limit=int(sys.argv[2]))\n"
                        "except ParseError as e:\n    print(e)")
    p = subprocess.run([sys.executable, "-c", code, str(path), str(mem_limit)], capture_output=True, text=True,
                       cwd=ROOT)
    *_, peak = p.stderr.splitlines()
    return p.stdout.strip() or None, int(peak.split()[1]) / 1024


INSTANCE = '<instance format="XCSP3" type="CSP"><variables>{}</variables><constraints>{}</constraints></instance>\n'


@pytest.mark.parametrize("name, text, refused", [
    ("array.xml", INSTANCE.format('<array id="x" size="[1000][1000]"> 0..1 </array>', ""),
     "array x of 1,000,000 variables"),
    ("domain.xml", INSTANCE.format('<var id="x"> 0..8000000 </var>', ""), "a domain of 8,000,001 values"),
    ("evaluation.xml", INSTANCE.format('<var id="x"> 0..3999 </var><var id="y"> 0..3999 </var>',
                                       "<intension> eq(add(mul(x,y),mul(x,x)),y) </intension>"),
     "the evaluation of an expression"),
    ("tree.xml", INSTANCE.format('<var id="x"> 0..1 </var>', "<block>" + "<annotations/>\n" * 300_000 + "</block>"),
     "the XML tree"),
    ("array.fzn", "array [1..1000000] of var 0..1: x;\nsolve satisfy;\n", "array x of 1,000,000 variables"),
])
def test_what_the_reader_builds_is_refused_before_it_is_taken(tmp_path, name, text, refused):
    """Variables, domains, the evaluation of an expression and the tree itself are charged before they
    are allocated: beyond --mem-limit the file is refused with one line and exit 3 (a 136-byte XCSP3
    file declaring 10^10 variables grew past 2.8 GB under --mem-limit 100M)."""
    path = tmp_path / name
    path.write_text(text)
    code, rec, err, rss = gpusolve(path, "--mem-limit", "400M" if name == "evaluation.xml" else "100M")
    assert code == 3 and refused in rec["message"] and "memory budget" in rec["message"], err
    assert err.count("\n") == 1 and rss < 300


@pytest.mark.parametrize("name, text", [
    ("shared.xml", INSTANCE.format('<array id="x" size="[100]"> 0..99999 </array>', "")),
    ("shared.fzn", "array [1..100] of var 0..99999: x;\nsolve satisfy;\n"),
])
def test_the_variables_of_a_domain_share_it(tmp_path, name, text):
    """Each variable had its own tuple of value names: 100 variables of 100,000 values took 10^7
    strings; now their labels are made when asked for, from one shared array."""
    path = tmp_path / name
    path.write_text(text)
    error, rss = read_in_child(path, 1 << 30)
    assert error is None and rss < 200
    problem = read(path)
    assert [problem.variables[7].label(k) for k in (0, 4321, 99999)] == ["0", "4321", "99999"]
