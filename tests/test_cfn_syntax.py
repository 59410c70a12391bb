"""toulbar2's CFN freedoms (docs/source/formats/cfnformat.rst): each one written by hand and read back
as the same model as the strict JSON file, a property test over random models in randomly free
syntax, and the errors, one line naming FILE:LINE."""
import gzip
import json
import lzma
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_formats import optimum, toulbar2

from gpusolve.parsers import ParseError, read

ROOT = Path(__file__).resolve().parents[1]

STRICT = {"problem": {"name": "m", "mustbe": "<40.5"},
          "variables": {"x": ["a", "b", "c"], "y": ["lo", "hi"], "z": ["p", "q"]},
          "functions": {"f": {"scope": ["x", "y"], "costs": [1.5, 0, 2, 3.25, 0, 4]},
                        "g": {"scope": ["y", "z"], "defaultcost": 1, "costs": ["lo", "q", 2.5, "hi", "p", 0]},
                        "h": {"scope": ["z"], "costs": [0.5, 0]},
                        "c": {"scope": [], "costs": [0.5]}}}
# STRICT, free: no quotes, no commas or colons, [] and {} swapped, comments, and the whole object's
# closing brace left out (as in toulbar2's tutorials)
FREE = """# free syntax
[ problem [ name m mustbe <40.5 ]
  variables [ x { a b c } y { lo hi } z { p q } ]   // value names
# a comment line
  functions [ f [ scope { x y } costs { 1.5 0 2 3.25 0 4 } ]
              g [ scope { y z } defaultcost 1 costs { lo q 2.5 hi p 0 } ]
              h [ scope { z } costs { 0.5 0 } ]
              c [ scope { } costs { 0.5 } ] ]
"""


def write(tmp_path, text, name="m.cfn"):
    path = tmp_path / name
    opener = {".gz": gzip.open, ".xz": lzma.open}.get(path.suffix, open)
    with opener(path, "wt") as out:
        out.write(text if isinstance(text, str) else json.dumps(text))
    return path


def model(problem):
    """What a model is, names and order of functions aside: compared between readings."""
    functions = sorted((f.scope, f.table.shape, f.table.tobytes()) for f in problem.functions)
    globals_ = sorted((g.scope, g.cost, g.semantics, tuple(sorted(g.exempt))) for g in problem.globals)
    return (problem.domains, int(problem.top), int(problem.offset), problem.precision, functions, globals_)


def same(tmp_path, free, strict, labels=True):
    a, b = read(write(tmp_path, free, "free.cfn")), read(write(tmp_path, strict, "strict.cfn"))
    assert model(a) == model(b)
    assert a.sense == b.sense
    if labels:
        assert [(v.name, v.labels) for v in a.variables] == [(v.name, v.labels) for v in b.variables]
    return a


def edit(doc, **functions):
    """STRICT with some functions replaced (None removes one)."""
    doc = json.loads(json.dumps(doc))
    for name, body in functions.items():
        if body is None:
            del doc["functions"][name]
        else:
            doc["functions"][name] = body
    return doc


def test_every_freedom_at_once_reads_as_strict_json_and_as_toulbar2_reads_it(tmp_path):
    p = same(tmp_path, FREE, STRICT)
    assert optimum(p) == pytest.approx(toulbar2(tmp_path / "free.cfn")[0])


@pytest.mark.parametrize("change", [
    lambda t: t.replace('"', ""),  # quotes around strings optional
    lambda t: t.replace(", ", " ").replace(",", " "),  # commas optional
    lambda t: t.replace(",", "\n,"),  # any separator, line breaks included
    lambda t: t.replace(": ", " ").replace(":", " "),  # colons optional
    lambda t: t.replace("{", "(").replace("[", "{").replace("(", "[").replace("}", ")")
               .replace("]", "}").replace(")", "]"),  # {} and [] interchangeable
    lambda t: "# a comment\n" + t.replace("\n", "\n#, } ] :\n"),  # '#' comments whole lines
    lambda t: t.replace("\n", " // ] a JSON comment\n"),  # '//' comments the rest of a line
    lambda t: t.rstrip()[:-1],  # the whole object's closing brace may be missing
    lambda t: t.replace("1.5", '"1.5"').replace("3.25", '"3.25"'),  # quotes around numbers allowed
    lambda t: t.replace('"scope"', '"scope:"'),  # toulbar2's own files write "type:"
], ids=["unquoted", "no-commas", "line-breaks", "no-colons", "braces", "hash-comments", "slash-comments",
        "unclosed-root", "quoted-numbers", "colon-in-quotes"])
def test_each_freedom_reads_as_strict_json(tmp_path, change):
    strict = json.dumps(STRICT, indent=1)
    same(tmp_path, change(strict), STRICT)


def test_compact_header_and_positional_objects(tmp_path):
    """`{name <ub}`, `[3 2 2]` (unnamed variables, scopes by index) and functions without their keys
    (`{[scope] [costs]}`, `{[scope] default [tuples]}`), as strict JSON arrays."""
    strict = {"problem": {"name": "m", "mustbe": "<40.5"}, "variables": [3, 2, 2],
              "functions": {"f": {"scope": [0, 1], "costs": [1.5, 0, 2, 3.25, 0, 4]},
                            "g": {"scope": [1, 2], "defaultcost": 1, "costs": [0, 1, 2.5, 1, 0, 0]}}}
    free = "{ {m <40.5} [3 2 2] { f {[0 1] [1.5 0 2 3.25 0 4]} {[1 2] 1 [0 1 2.5 1 0 0]} } }"
    same(tmp_path, free, strict)
    mixed = "{ {m <40.5} [[a b c] 2 2] { {[0 1] [1.5 0 2 3.25 0 4]} g {[1 2] 1 [0 1 2.5 1 0 0]} } }"
    assert model(read(write(tmp_path, mixed))) == model(read(write(tmp_path, strict, "s.cfn")))


def test_default_costs_fill_the_missing_tuples(tmp_path):
    dense = edit(STRICT, g={"scope": ["y", "z"], "costs": [1, 2.5, 0, 1]})
    same(tmp_path, STRICT, dense)
    constant = edit(STRICT, c={"scope": [], "defaultcost": 0.5, "costs": []})
    same(tmp_path, constant, STRICT)


def test_domains_as_sizes_read_values_as_indices(tmp_path):
    sizes = json.loads(json.dumps(STRICT))
    sizes["variables"] = {"x": 3, "y": 2, "z": 2}
    sizes["functions"]["g"]["costs"] = [0, 1, 2.5, 1, 0, 0]
    same(tmp_path, sizes, STRICT, labels=False)
    indices = edit(STRICT, g={"scope": ["y", "z"], "defaultcost": 1, "costs": [0, "q", 2.5, 1, "p", 0]})
    same(tmp_path, indices, STRICT)


def test_a_shared_table_is_the_later_function_s_table(tmp_path):
    """`costs: "f"` names a function defined later; toulbar2 reads it so (and only so)."""
    explicit = json.loads(json.dumps(STRICT))
    explicit["functions"] = {"e": {"scope": ["z", "y"], "costs": [0, 1, 2, 3]},
                             "s": {"scope": ["y", "z"], "costs": [0, 1, 2, 3]}, **explicit["functions"]}
    shared = json.loads(json.dumps(STRICT))
    shared["functions"] = {"e": {"scope": ["z", "y"], "costs": "s"},
                           "s": {"scope": ["y", "z"], "costs": [0, 1, 2, 3]}, **shared["functions"]}
    p = same(tmp_path, shared, explicit)
    assert optimum(p) == pytest.approx(toulbar2(tmp_path / "free.cfn")[0])


@pytest.mark.parametrize("suffix", [".cfn.gz", ".cfn.xz"])
def test_compressed_files_read_as_plain_ones(tmp_path, suffix):
    a = read(write(tmp_path, FREE, "m" + suffix))
    assert model(a) == model(read(write(tmp_path, STRICT, "s.cfn")))


def test_maximisation_is_minimisation_of_the_opposite(tmp_path):
    """`>lb` maximises: the same internal model as `<-lb` with every utility negated."""
    maxi = json.loads(json.dumps(STRICT))
    maxi["problem"]["mustbe"] = ">-40.5"
    for body in maxi["functions"].values():
        body["costs"] = [c if isinstance(c, str) else -c for c in body["costs"]]
        body["defaultcost"] = -body["defaultcost"] if "defaultcost" in body else None
        if body["defaultcost"] is None:
            del body["defaultcost"]
    a, b = read(write(tmp_path, maxi, "max.cfn")), read(write(tmp_path, STRICT, "min.cfn"))
    assert model(a) == model(b) and (a.sense, b.sense) == (-1, 1)
    assert optimum(a) == pytest.approx(toulbar2(tmp_path / "max.cfn")[0]) == -optimum(b)


def test_precision_is_the_bound_s_decimals_and_finer_costs_are_cut(tmp_path):
    fine = json.dumps(STRICT).replace('"<40.5"', '"<40.50"').replace("3.25", "3.259").replace("2.5,", "2.501,")
    exact = json.dumps(STRICT).replace('"<40.5"', '"<40.50"')
    a = same(tmp_path, fine, exact)
    assert a.precision == 2
    assert optimum(a) == pytest.approx(toulbar2(tmp_path / "free.cfn")[0])


def test_inf_is_forbidden(tmp_path):
    text = json.dumps(edit(STRICT, h={"scope": ["z"], "costs": ["inf", 0]}))
    p = read(write(tmp_path, text))
    assert p.is_forbidden(next(f for f in p.functions if f.scope == (2,)).table[0])
    assert optimum(p) == pytest.approx(toulbar2(tmp_path / "m.cfn")[0])


@pytest.mark.parametrize("params, hard", [('{metric: var cost: 1.5}', False), ("[metric dec cost 45]", True),
                                          ('{"metric": "decbi", "cost": 2}', False)])
def test_salldiff_and_alldiff_types_are_read_free_or_strict(tmp_path, params, hard):
    free = FREE.replace("c [ scope { } costs { 0.5 } ]", f'a [ scope {{ y z }} "type:" salldiff params {params} ]')
    p = read(write(tmp_path, free))
    (g,) = p.globals
    assert g.scope == (1, 2) and p.is_forbidden(g.cost) == hard
    assert optimum(p) == pytest.approx(toulbar2(tmp_path / "m.cfn")[0])
    alldiff = FREE.replace("c [ scope { } costs { 0.5 } ]", "a [ scope { x y z } type alldiff params "
                                                             "{ exceptedvalues [1] deltacosts [] } ]")
    p = read(write(tmp_path, alldiff))
    assert p.globals[0].exempt == {1} and p.is_forbidden(p.globals[0].cost)


def test_arithmetic_types_read_as_their_wcsp_keywords(tmp_path):
    cfn = "{ {m <100} [4 5] { {[0 1] >= [1 2]} d {[1 0] disj {1 2 7}} } }"
    wcsp = "m 2 5 2 100\n4 5\n2 0 1 -1 >= 1 2\n2 1 0 -1 disj 1 2 7\n"
    (tmp_path / "m.wcsp").write_text(wcsp)
    assert model(read(write(tmp_path, cfn))) == model(read(tmp_path / "m.wcsp"))
    assert optimum(read(tmp_path / "m.cfn")) == toulbar2(tmp_path / "m.cfn")[0]


# ---- random models in random free syntax ----

@st.composite
def documents(draw):
    """A strict CFN document: named variables (value names or sizes), dense and sparse tables, a constant."""
    decimals = draw(st.integers(0, 2))
    number = st.integers(-400, 400).map(lambda k: f"{k / 10 ** decimals:.{decimals}f}")
    sizes = draw(st.lists(st.integers(1, 3), min_size=1, max_size=4))
    named = [draw(st.booleans()) for _ in sizes]
    variables = {f"v{i}": [f"a{i}_{j}" for j in range(d)] if n else d for i, (d, n) in enumerate(zip(sizes, named))}
    functions = {}
    for k in range(draw(st.integers(0, 5))):
        scope = draw(st.lists(st.integers(0, len(sizes) - 1), unique=True, max_size=3))
        tuples = [[]]
        for v in scope:
            tuples = [t + [j] for t in tuples for j in range(sizes[v])]
        body = {"scope": [f"v{v}" for v in scope]}
        if scope and draw(st.booleans()):
            listed = draw(st.lists(st.sampled_from(tuples), unique_by=tuple))
            value = (lambda v, j: variables[f"v{v}"][j] if named[v] else j)
            body["defaultcost"] = draw(number)
            body["costs"] = [x for t in listed for x in [value(v, j) for v, j in zip(scope, t)] + [draw(number)]]
        else:
            body["costs"] = [draw(number) for _ in tuples]
        functions[f"f{k}"] = body
    bound = f"{10_000:.{decimals}f}"
    return {"problem": {"name": "r", "mustbe": draw(st.sampled_from(["<", ">-"])) + bound},
            "variables": variables, "functions": functions}


def free_text(doc, draw) -> str:
    """`doc` in toulbar2's free syntax, every choice drawn: quotes, separators, colons, braces, keys
    left out where the format allows (the header, function bodies), comment lines."""
    def sep():
        return draw(st.sampled_from([" ", ", ", ",", "\n", "\t", " ,\n"]))

    def word(text):
        return f'"{text}"' if draw(st.booleans()) else text

    def group(parts):
        left, right = draw(st.sampled_from(["{}", "[]", "{]", "[}"]))
        return left + sep().lstrip(",") + sep().join(parts) + " " + right

    def keyed(obj, positional):
        if positional and draw(st.booleans()):
            return group([value(v) for v in obj.values()])
        colon = draw(st.sampled_from([":", " : ", " ", ":"]))
        return group([f"{word(k)}{colon}{value(v)}" for k, v in obj.items()])

    def value(v, positional=False):
        if isinstance(v, dict):
            return keyed(v, positional)
        if isinstance(v, list):
            return group([value(x) for x in v])
        return word(str(v))

    body = {"problem": keyed(doc["problem"], True), "variables": keyed(doc["variables"], False),
            "functions": group([f"{word(k)} {keyed(f, True)}" for k, f in doc["functions"].items()])}
    root = group([f"{word(k)}{draw(st.sampled_from([':', ' ']))}{v}" for k, v in body.items()])
    lines = root.split("\n")
    out = []
    for line in lines:
        if draw(st.integers(0, 4)) == 0:
            out.append("# a comment { [ ,")
        out.append(line)
    return "\n".join(out) + "\n"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_models_in_free_syntax_read_as_strict_json(tmp_path_factory, data):
    doc = data.draw(documents())
    text = free_text(doc, data.draw)
    folder = tmp_path_factory.mktemp("free")
    a, b = read(write(folder, text, "free.cfn")), read(write(folder, doc, "strict.cfn"))
    assert model(a) == model(b), text
    assert [(v.name, v.labels) for v in a.variables] == [(v.name, v.labels) for v in b.variables]


HEAD = "{ problem { name e mustbe <10 }\n  variables { x [a b] y 2 }\n  functions {\n"


@pytest.mark.parametrize("functions, line, message", [
    ("    f { scope [x y] costs [1 2 3 4] }\n", 3, "unclosed"),
    ("    f { scope [x z] costs [1 2] } } }\n", 4, "unknown variable z"),
    ("    f { scope [x]\n costs [1 2 3] } } }\n", 5, "3 costs, expected 2"),
    ("    f { scope [x] costs [1 1e5] } } }\n", 4, "found '1e5'"),
    ("    f { scope [x y] type foo params [] } } }\n", 4, "unknown type 'foo'"),
    ("    f { scope [x y] type } } }\n", 4, "no type"),
    ("    f { scope [x y]\n type sgrammar params {metric var cost 1} } } }\n", 5,
     "global cost function sgrammar is not supported"),
    ("    f { scope [x y] defaultcost 0 costs [a 1 5\n a 1 6] } } }\n", 5, "a tuple is given twice"),
    ("    f { scope [x y] defaultcost 0 costs [a 1 5\n c 0 6] } } }\n", 5,
     "value c is not in the domain of variable x"),
    ("    f { scope [x y] defaultcost 0 costs [a 1 5\n b 2 6] } } }\n", 5,
     "value 2 is not in the domain of variable y"),
    ("    f { scope [x y] defaultcost 0 costs [a 1 5\n b 1 x] } } }\n", 5, "found 'x'"),
    ("    f { scope [x] costs [1 2] } } } }\n", 4, "unbalanced"),
    ("    f { scope [x] costs [1 2] extra } } }\n", 4, "unexpected 'extra'"),
    ("    f { scope [x y] costs [1 2 3 4] }\n    g { scope [y x] costs f } } }\n", 5, "defined after"),
    ("    f { scope [x y] type >= params [0 0] } } }\n", None, None),
])
def test_errors_name_the_file_and_line(tmp_path, functions, line, message):
    path = tmp_path / "bad.cfn"
    if message is None:  # arithmetic functions with decimal costs: toulbar2 refuses them, so do we
        path.write_text(HEAD.replace("<10", "<1.0") + functions)
        line, message = 4, "only with integer costs"
    else:
        path.write_text(HEAD + functions)
    with pytest.raises(ParseError, match=message) as e:
        read(path)
    assert str(e.value).startswith(f"{path}:{line}: ")


def test_tuples_read_a_column_at_once_as_one_entry_at_a_time(tmp_path, monkeypatch):
    """A listed table's value names and indices are looked up a column at once (cfn._Reader._indices): the
    same tables as entry by entry, on random tables of labelled and unlabelled variables, values given
    by name or by index (every table looked up at once here, not only those of COLUMNS_FROM tuples)."""
    from gpusolve.parsers import cfn
    monkeypatch.setattr(cfn, "COLUMNS_FROM", 1)
    rng = np.random.default_rng(4)
    for case in range(25):
        sizes = [int(rng.integers(1, 6)) for _ in range(3)]
        labelled = [bool(rng.integers(2)) for _ in sizes]
        variables = " ".join(f"v{i} [" + " ".join(f"l{i}_{a}" for a in range(d)) + "]" if named else f"v{i} {d}"
                             for i, (d, named) in enumerate(zip(sizes, labelled)))
        functions = []
        for k in range(3):
            scope = [int(v) for v in rng.choice(3, int(rng.integers(1, 3)), replace=False)]
            tuples = {tuple(int(rng.integers(sizes[v])) for v in scope) for _ in range(6)}
            entries = " ".join(" ".join(f"l{v}_{a}" if labelled[v] and rng.integers(2) else str(a)
                                        for v, a in zip(scope, t)) + f" {int(rng.integers(0, 9))}" for t in tuples)
            functions.append(f"f{k} {{ scope [{' '.join(f'v{v}' for v in scope)}] defaultcost {int(rng.integers(9))} "
                             f"costs [{entries}] }}")
        path = write(tmp_path, "{ problem { name t mustbe <100 } variables { " + variables + " } functions { "
                     + " ".join(functions) + " } }", f"t{case}.cfn")
        at_once = read(path)
        with monkeypatch.context() as m:
            m.setattr(cfn._Reader, "_indices", lambda self, texts, v: None)
            one_by_one = read(path)
        assert model(at_once) == model(one_by_one), case


def test_the_cli_refuses_a_bad_file_with_one_line_and_exit_code_2(tmp_path):
    path = tmp_path / "bad.cfn"
    path.write_text(HEAD + "    f { scope [x y] type sgrammar params [] } } }\n")
    r = subprocess.run([sys.executable, "-m", "gpusolve", "solve", str(path)], capture_output=True, text=True,
                       cwd=ROOT)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [f"{path}:4: cost function f: global cost function sgrammar is not "
                                             "supported"]


WORDS = ["{", "}", "[", "]", "problem", "variables", "functions", "name", "mustbe", "scope", "costs", "defaultcost",
         "type", "params", "x", "y", "z", "a", "f", "0", "1", "2", "-1", "0.5", "<10", ">-1.5", "inf", "salldiff",
         "alldiff", ">=", "disj", "metric", "var", "cost", "exceptedvalues", "deltacosts", "wregular", "1e3", "#"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 200), st.sampled_from(["delete", "insert", "replace"]),
                          st.sampled_from(WORDS)), max_size=6),
       st.sampled_from([" ", "\n", ":", ",", '"', "\n# c\n"]))
def test_a_mangled_file_is_read_or_refused_with_file_and_line(tmp_path_factory, edits, separator):
    """Words deleted, inserted or replaced anywhere in a good file: a model or a ParseError, nothing else."""
    words = re.findall(r'[{}\[\]]|[^\s":,{}\[\]]+', json.dumps(edit(STRICT, a={"scope": ["x", "y", "z"],
                                                                              "type": "salldiff",
                                                                              "params": {"metric": "var", "cost": 2}})))
    for at, op, word in edits:
        at %= len(words) + 1
        if op == "insert":
            words.insert(at, word)
        elif words[at:]:
            words[at:at + 1] = [] if op == "delete" else [word]
    path = tmp_path_factory.mktemp("mangled") / "m.cfn"
    path.write_text(separator.join(words) + "\n")
    try:
        read(path)
    except ParseError as e:
        assert str(e).startswith(f"{path}")
