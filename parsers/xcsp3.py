"""XCSP3 reader (`<instance format="XCSP3" type="CSP|COP">`), the integer core of the format.

Read: integer variables and arrays (`size="[3][4]"`, per-cell `<domain for=...>`, `others`),
`extension` (supports/conflicts, `*`), `intension` (the functional expression language:
arithmetic, comparison, logic, `dist`, `if`, `in`/`set`), `allDifferent` (lists, `except`),
`sum` (coefficients, a condition), `group` (templates with `%i` / `%...`) and `block`, and
one objective, `minimize`/`maximize` over `sum` or an expression. A constraint becomes a dense
table (0 or forbidden), a linear objective unary costs, an objective expression a cost table;
an allDifferent stays whole (model.AllDifferent). Anything else is refused by name, at its line.
XCSP3 files are compact, so the whole tree is read at once (with each element's line).
"""
from __future__ import annotations

import copy
import itertools
import math
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from xml.parsers import expat

import numpy as np

from gpusolve.model import FORBIDDEN, AllDifferent, CostFunction, Problem, TupleFunction, Variable

from .errors import ParseError, quote
from .source import read_lines
from .tables import COMPARE, constraint_problem, linear_sum, too_large

MAX_DOMAIN = 1 << 24
LISTED_MIN = 1 << 16  # entries above which a functional intension constraint is kept as its tuples
TOKEN = re.compile(r"\s*(?:(-?\d+)|([A-Za-z_][\w.]*(?:\[[^\]]*\])*)|([(),]))")
REF = re.compile(r"([A-Za-z_][\w.]*)((?:\[[^\]]*\])*)")
SUPPORTED = ("extension", "intension", "allDifferent", "sum", "group", "block")


def read(path: str | Path) -> Problem:
    root, lines = _parse(path)
    return _Reader(path, lines).instance(root)


def _parse(path):
    """The XML tree (element text only: XCSP3 puts no data in tails) and {id(element): line}."""
    parser = expat.ParserCreate()
    lines: dict[int, int] = {}
    stack: list[ET.Element] = []
    found: list[ET.Element] = []

    def start(tag, attrs):
        elem = ET.Element(tag, attrs)
        lines[id(elem)] = parser.CurrentLineNumber
        (stack[-1].append if stack else found.append)(elem)
        stack.append(elem)

    def data(text):
        if stack and not len(stack[-1]):
            stack[-1].text = (stack[-1].text or "") + text

    parser.StartElementHandler = start
    parser.EndElementHandler = lambda tag: stack.pop()
    parser.CharacterDataHandler = data
    try:
        for chunk in read_lines(path, binary=True):
            parser.Parse(chunk, False)
        parser.Parse(b"", True)
    except expat.ExpatError as err:
        raise ParseError(path, err.lineno, f"malformed XML: {expat.ErrorString(err.code)}") from None
    return found[0], lines


class _Reader:
    def __init__(self, path, lines):
        self.path, self.lines = path, lines
        self.variables: list[Variable] = []
        self.values: list[np.ndarray] = []  # per variable: the integer value of each domain index
        self.index: dict[str, int] = {}  # "x[1][2]" -> variable
        self.arrays: dict[str, tuple[tuple[int, ...], dict]] = {}  # array id -> (sizes, {cell: variable})
        self.functions: list[CostFunction] = []
        self.globals: list[AllDifferent] = []
        self.sense = 1
        self.elem = None  # element being read, for error lines

    def error(self, message: str, elem=None) -> ParseError:
        elem = self.elem if elem is None else elem
        return ParseError(self.path, self.lines.get(id(elem)) if elem is not None else None, message)

    # --- instance, variables ------------------------------------------------------------------
    def instance(self, root) -> Problem:
        self.elem = root
        kind = root.get("type", "CSP")
        if kind not in ("CSP", "COP"):
            raise self.error(f"XCSP3 instance type {kind} is not supported (CSP or COP)")
        for child in root:
            self.elem = child
            if child.tag == "variables":
                for v in child:
                    self.elem = v
                    self._declare(v)
            elif child.tag == "constraints":
                for c in child:
                    self._constraint(c)
            elif child.tag == "objectives":
                self._objectives(child)
            elif child.tag not in ("annotations",):
                raise self.error(f"<{child.tag}> is not supported")
        return constraint_problem(self.path, self.variables, self.functions, self.sense, self.globals)

    def _declare(self, v) -> None:
        if v.tag not in ("var", "array"):
            raise self.error(f"<{v.tag}> in <variables> is not supported")
        if v.get("type", "integer") != "integer":
            raise self.error(f"variables of type {v.get('type')} are not supported (integer only)")
        ident = v.get("id")
        if not ident:
            raise self.error(f"<{v.tag}> lacks the id attribute")
        if v.tag == "var":
            self._add(ident, self._var_domain(v))
            return
        sizes = tuple(int(s) for s in re.findall(r"\[(\d+)\]", v.get("size", "")))
        if not sizes:
            raise self.error(f"array {ident}: size {quote(v.get('size'))} is not like [3][4]")
        cells: dict[tuple, int] = {}
        parts = [d for d in v if d.tag == "domain"]
        if not parts:
            dom = self._domain_text(v.text or "")
            for cell in itertools.product(*(range(s) for s in sizes)):
                cells[cell] = self._add(_name(ident, cell), dom)
        for d in parts:
            self.elem = d
            dom = self._domain_text(d.text or "")
            for word in d.get("for", "").split():
                chosen = [c for c in itertools.product(*(range(s) for s in sizes)) if c not in cells] \
                    if word == "others" else self._cells(word, ident, sizes)
                for cell in chosen:
                    cells[cell] = self._add(_name(ident, cell), dom)
        self.arrays[ident] = (sizes, cells)

    def _var_domain(self, v) -> np.ndarray:
        alias = v.get("as")
        if alias is not None:
            if alias not in self.index:
                raise self.error(f"unknown variable {alias} in as={quote(alias)}")
            return self.values[self.index[alias]]
        return self._domain_text(v.text or "")

    def _domain_text(self, text: str) -> np.ndarray:
        vals: list[int] = []
        for word in text.split():
            try:
                if ".." in word:
                    low, high = (int(x) for x in word.split(".."))
                    if high - low + len(vals) >= MAX_DOMAIN:
                        raise self.error(f"domain {word} too large (at most 2^24 values)")
                    vals.extend(range(low, high + 1))
                else:
                    vals.append(int(word))
            except ValueError:
                raise self.error(f"domain value {quote(word)} is not an integer or an interval") from None
        if not vals:
            raise self.error("empty domain")
        return np.unique(np.array(vals, dtype=np.int64))

    def _add(self, name: str, dom: np.ndarray) -> int:
        if name in self.index:
            raise self.error(f"variable {name} declared twice")
        self.index[name] = len(self.variables)
        self.variables.append(Variable(name, len(dom), tuple(str(x) for x in dom.tolist())))
        self.values.append(dom)
        return self.index[name]

    def _cells(self, word: str, ident: str, sizes) -> list[tuple]:
        m = REF.fullmatch(word)
        if not m or m[1] != ident:
            raise self.error(f"{quote(word)} is not a part of array {ident}")
        parts = re.findall(r"\[([^\]]*)\]", m[2])
        if len(parts) != len(sizes):
            raise self.error(f"{quote(word)}: array {ident} has {len(sizes)} dimensions")
        ranges = []
        for part, size in zip(parts, sizes):
            if part == "":
                ranges.append(range(size))
            elif ".." in part:
                low, high = (int(x) for x in part.split(".."))
                ranges.append(range(low, high + 1))
            else:
                ranges.append(range(int(part), int(part) + 1))
        return list(itertools.product(*ranges))

    # --- lists and references -----------------------------------------------------------------
    def _list(self, text: str) -> list[int]:
        """Variables of a list, compact array forms (`x[]`, `x[0..3][2]`) expanded in order."""
        out = []
        for word in text.split():
            m = REF.fullmatch(word)
            if m and m[1] in self.arrays and (m[2] == "" or "[]" in m[2] or ".." in m[2]):
                sizes, cells = self.arrays[m[1]]
                chosen = self._cells(word if m[2] else word + "[]" * len(sizes), m[1], sizes)
                out.extend(cells[c] for c in chosen if c in cells)
            elif word in self.index:
                out.append(self.index[word])
            else:
                raise self.error(f"unknown variable {word}")
        return out

    # --- constraints --------------------------------------------------------------------------
    def _constraint(self, c) -> None:
        self.elem = c
        if c.tag not in SUPPORTED:
            raise self.error(f"constraint <{c.tag}> is not supported (read: {', '.join(SUPPORTED)})")
        getattr(self, "_" + c.tag.lower())(c)

    def _block(self, c) -> None:
        for child in c:
            if child.tag != "annotations":
                self._constraint(child)

    def _group(self, c) -> None:
        template = c[0] if len(c) else None
        if template is None or template.tag == "args":
            raise self.error("<group> without a template constraint")
        for args in c.findall("args"):
            values = (args.text or "").split()
            inst = copy.deepcopy(template)
            for e in inst.iter():
                e.text = _substitute(e.text, values)
            self.lines[id(inst)] = self.lines.get(id(template))
            self._constraint(inst)

    def _child_text(self, c, tag: str, required: bool = True) -> str | None:
        e = c.find(tag)
        if e is None:
            if required:
                raise self.error(f"<{c.tag}> lacks <{tag}>")
            return None
        return e.text or ""

    def _extension(self, c) -> None:
        scope = self._list(self._child_text(c, "list"))
        supports, conflicts = c.find("supports"), c.find("conflicts")
        if (supports is None) == (conflicts is None):
            raise self.error("<extension> needs exactly one of <supports>, <conflicts>")
        listed = supports if supports is not None else conflicts
        shape = tuple(self.variables[v].domain for v in scope)
        self._guard(shape)
        table = np.full(shape, FORBIDDEN if supports is not None else 0, dtype=np.int64)
        mark = 0 if supports is not None else FORBIDDEN
        text = listed.text or ""
        if len(scope) == 1:
            for x in self._domain_text(text) if text.strip() else []:
                hit = np.flatnonzero(self.values[scope[0]] == x)
                table[hit] = mark
        else:
            for tup in re.findall(r"\(([^)]*)\)", text):
                entries = [e.strip() for e in tup.split(",")]
                if len(entries) != len(scope):
                    raise self.error(f"tuple ({tup}) has {len(entries)} values, the list {len(scope)}")
                index = []
                for e, v in zip(entries, scope):
                    if e == "*":
                        index.append(slice(None))
                        continue
                    hit = np.flatnonzero(self.values[v] == self._int(e))
                    if not hit.size:
                        break  # a value outside the domain: the tuple never applies
                    index.append(int(hit[0]))
                else:
                    table[tuple(index)] = mark
        self._table(scope, table)

    def _intension(self, c) -> None:
        text = c.text if not len(c) else self._child_text(c, "function")
        expr = self._expression(text)
        if self._functional(expr):
            return
        scope, value = self._evaluate(expr)
        self._table(scope, np.where(np.asarray(value).astype(bool), 0, FORBIDDEN).astype(np.int64))

    def _functional(self, tree) -> bool:
        """`eq(x, e)` (or `eq(e, x)`) with x a variable absent from e, over more than LISTED_MIN
        entries: kept as its allowed tuples (TupleFunction), found by evaluating e over its own
        variables only (Langford's gaps over 2n positions: 2n pairs instead of (2n)^2 entries)."""
        if not (isinstance(tree, tuple) and tree[0] == "eq" and len(tree[1]) == 2):
            return False
        for x, e in (tree[1], tree[1][::-1]):
            if not (isinstance(x, tuple) and x[0] == "var"):
                continue
            scope = self._scope_of(e)
            if x[1] in scope or not scope:
                continue
            dims = [self.variables[v].domain for v in scope]
            if math.prod(dims) * self.variables[x[1]].domain <= LISTED_MIN:
                return False
            self._guard(tuple(dims))
            _, value = self._evaluate(e)
            value = np.asarray(value, dtype=np.int64).reshape(-1)
            order = np.argsort(self.values[x[1]])
            ranked = self.values[x[1]][order]
            at = np.minimum(np.searchsorted(ranked, value), len(ranked) - 1)
            hit = ranked[at] == value  # e's value is in x's domain
            rest = np.stack(np.unravel_index(np.flatnonzero(hit), dims), axis=1)
            tuples = np.concatenate([rest, order[at[hit]][:, None]], axis=1)
            self.functions.append(TupleFunction(tuple(scope) + (x[1],), dims + [self.variables[x[1]].domain], tuples,
                                                np.zeros(len(tuples), dtype=np.int64), FORBIDDEN))
            return True
        return False

    def _scope_of(self, tree) -> list[int]:
        """The variables of an expression, in order of first appearance."""
        scope: list[int] = []

        def collect(t):
            if isinstance(t, tuple):
                if t[0] == "var":
                    if t[1] not in scope:
                        scope.append(t[1])
                else:
                    for a in t[1]:
                        collect(a)
        collect(tree)
        return scope

    def _alldifferent(self, c) -> None:
        lists = c.findall("list")
        if len(lists) > 1 or c.find("matrix") is not None:
            raise self.error("allDifferent over several lists or a matrix is not supported")
        scope, values = [], []
        for word in (lists[0].text or "" if lists else c.text or "").split():
            if "(" not in word:  # variables
                for v in self._list(word):
                    scope.append(v)
                    values.append(self.values[v])
                continue
            # an expression of one variable (pycsp3 writes add(q[1],1) for N-queens' diagonals)
            vars_, value = self._evaluate(self._expression(word))
            if len(vars_) != 1:
                raise self.error(f"allDifferent over {word}: only expressions of one variable are supported")
            scope.append(vars_[0])
            values.append(np.asarray(value, dtype=np.int64).reshape(-1))
        if len(set(scope)) != len(scope):
            raise self.error("allDifferent lists a variable twice")
        exempt_text = self._child_text(c, "except", required=False)
        exempt = frozenset(self._int(w) for w in exempt_text.split()) if exempt_text else frozenset()
        self.globals.append(AllDifferent(tuple(scope), tuple(values), FORBIDDEN, "var", exempt))

    def _sum(self, c) -> None:
        scope = self._list(self._child_text(c, "list"))
        coeffs_text = self._child_text(c, "coeffs", required=False)
        coeffs = [self._int(w) for w in _expand_coeffs(coeffs_text)] if coeffs_text else [1] * len(scope)
        if len(coeffs) != len(scope):
            raise self.error(f"{len(coeffs)} coefficients for {len(scope)} variables")
        merged: dict[int, int] = {}
        for v, a in zip(scope, coeffs):
            merged[v] = merged.get(v, 0) + a
        total = linear_sum([self.values[v] for v in merged], list(merged.values()))
        if isinstance(total, str):
            raise self.error(total)
        op, right = self._condition(self._child_text(c, "condition"))
        if op in ("in", "notin"):
            holds = np.isin(total, right) == (op == "in")
        else:
            holds = COMPARE[op](total, right)
        self._table(list(merged), np.where(holds, 0, FORBIDDEN).astype(np.int64))

    def _condition(self, text: str) -> tuple[str, object]:
        m = re.fullmatch(r"\s*\(\s*(\w+)\s*,\s*([^)]*?)\s*\)\s*", text)
        if not m or m[1] not in ("lt", "le", "ge", "gt", "eq", "ne", "in", "notin"):
            raise self.error(f"condition {quote(text.strip())} is not (op, value) with op lt, le, ge, gt, eq, ne, in")
        if m[1] in ("in", "notin"):
            return m[1], self._domain_text(m[2].replace(",", " ").strip("{} "))
        if m[2] in self.index:
            raise self.error("a condition on a variable is not supported (an integer is)")
        return m[1], self._int(m[2])

    # --- objectives ---------------------------------------------------------------------------
    def _objectives(self, objs) -> None:
        found = [o for o in objs if o.tag in ("minimize", "maximize")]
        others = [o for o in objs if o.tag not in ("minimize", "maximize")]
        if others:
            raise self.error(f"objective <{others[0].tag}> is not supported", others[0])
        if len(found) != 1:
            raise self.error(f"{len(found)} objectives: exactly one is supported", objs)
        o = self.elem = found[0]
        self.sense = 1 if o.tag == "minimize" else -1
        kind = o.get("type", "expression")
        if kind == "sum":
            coeffs_text = self._child_text(o, "coeffs", required=False)
            coeffs = [self._int(w) for w in _expand_coeffs(coeffs_text)] if coeffs_text else None
            listed = self._list(self._child_text(o, "list") if o.find("list") is not None else o.text or "")
            for k, v in enumerate(listed):
                weight = coeffs[k] if coeffs else 1
                self.functions.append(CostFunction((v,), self.sense * weight * self.values[v]))
        elif kind == "expression":
            text = o.text if o.find("list") is None else self._child_text(o, "list")
            scope, value = self._evaluate(self._expression(text))
            self._table(scope, self.sense * np.asarray(value, dtype=np.int64))
        else:
            raise self.error(f"objective type {quote(kind)} is not supported (sum or an expression)")

    # --- expressions --------------------------------------------------------------------------
    def _expression(self, text: str | None):
        """Parse `f(a, g(b, 3))` into nested tuples (name, args); leaves are ints and variable ids."""
        text = (text or "").strip()
        tokens, pos = [], 0
        while pos < len(text):
            m = TOKEN.match(text, pos)
            if not m or m.end() == pos:
                raise self.error(f"cannot read the expression at {text[pos:pos + 20]!r}")
            tokens.append(m.group(1) or m.group(2) or m.group(3))
            pos = m.end()
        tree, at = self._parse_expr(tokens, 0)
        if at != len(tokens):
            raise self.error(f"unexpected {quote(tokens[at])} after the expression")
        return tree

    def _parse_expr(self, tokens, at):
        if at >= len(tokens):
            raise self.error("the expression ends too early")
        tok = tokens[at]
        if re.fullmatch(r"-?\d+", tok):
            return int(tok), at + 1
        if at + 1 < len(tokens) and tokens[at + 1] == "(":
            args, at = [], at + 2
            while tokens[at] != ")":
                arg, at = self._parse_expr(tokens, at)
                args.append(arg)
                if at < len(tokens) and tokens[at] == ",":
                    at += 1
                if at >= len(tokens):
                    raise self.error(f"{tok}( is not closed")
            return (tok, args), at + 1
        if tok in self.index:
            return ("var", self.index[tok]), at + 1
        if tok in ("true", "false"):
            return int(tok == "true"), at + 1
        raise self.error(f"unknown variable {tok}")

    def _evaluate(self, tree) -> tuple[list[int], np.ndarray]:
        scope = self._scope_of(tree)
        self._guard(tuple(self.variables[v].domain for v in scope))
        axes = {v: self._axis(k, len(scope), v) for k, v in enumerate(scope)}
        value = self._apply(tree, axes)
        shape = tuple(self.variables[v].domain for v in scope)
        return scope, np.broadcast_to(np.asarray(value, dtype=np.int64), shape)

    def _apply(self, t, axes):
        if not isinstance(t, tuple):
            return np.int64(t)
        name, args = t
        if name == "var":
            return axes[args]
        if name == "set":
            raise self.error("set(...) only inside in(...)")
        if name in ("in", "notin"):
            x = self._apply(args[0], axes)
            if not (isinstance(args[1], tuple) and args[1][0] == "set"):
                raise self.error(f"{name}: the second argument must be set(...)")
            members = [self._apply(a, axes) for a in args[1][1]]
            hit = np.zeros(np.shape(x), dtype=bool)
            for m in members:
                hit = hit | (x == m)
            return hit if name == "in" else ~hit
        vals = [self._apply(a, axes) for a in args]
        op = OPS.get(name)
        if op is None:
            raise self.error(f"operator {name} is not supported")
        arity, fn = op
        if arity is not None and len(vals) != arity:
            raise self.error(f"{name} takes {arity} arguments, found {len(vals)}")
        if arity is None and len(vals) < 2 and name not in ("add", "mul", "and", "or", "min", "max"):
            raise self.error(f"{name} needs two arguments or more")
        return fn(*vals)

    # --- helpers ------------------------------------------------------------------------------
    def _axis(self, k: int, n: int, v: int) -> np.ndarray:
        shape = [1] * n
        shape[k] = -1
        return self.values[v].reshape(shape)

    def _guard(self, shape) -> None:
        message = too_large(shape)
        if message:
            raise self.error(message)

    def _table(self, scope: list[int], table: np.ndarray) -> None:
        if len(set(scope)) != len(scope):
            raise self.error("a variable appears twice in one constraint's scope")
        self.functions.append(CostFunction(tuple(scope), np.ascontiguousarray(table, dtype=np.int64)))

    def _int(self, text: str) -> int:
        try:
            return int(text)
        except ValueError:
            raise self.error(f"expected an integer, found {quote(text)}") from None


def _name(ident: str, cell: tuple) -> str:
    return ident + "".join(f"[{i}]" for i in cell)


def _substitute(text: str | None, values: list[str]) -> str | None:
    if text is None:
        return None
    text = text.replace("%...", " ".join(values[_max_index(text) + 1:]) if "%..." in text else "")
    return re.sub(r"%(\d+)", lambda m: values[int(m[1])], text)


def _max_index(text: str) -> int:
    return max((int(i) for i in re.findall(r"%(\d+)", text)), default=-1)


def _expand_coeffs(text: str) -> list[str]:
    """Coefficients, with XCSP3's compact `3x4` (4 times 3) expanded."""
    out = []
    for w in text.split():
        if re.fullmatch(r"-?\d+x\d+", w):
            value, times = w.split("x")
            out.extend([value] * int(times))
        else:
            out.append(w)
    return out


def _div(a, b):
    """Integer division rounding toward zero (XCSP3 follows Java); 0 where b is 0."""
    a, b = np.broadcast_arrays(np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64))
    safe = np.where(b == 0, 1, b)
    q = np.abs(a) // np.abs(safe)
    return np.where(b == 0, 0, np.sign(a) * np.sign(safe) * q)


def _mod(a, b):
    a, b = np.broadcast_arrays(np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64))
    return np.where(b == 0, 0, a - _div(a, b) * np.where(b == 0, 1, b))


def _chain(fn):
    """An n-ary comparison: every consecutive pair."""
    def apply(*vals):
        out = np.bool_(True)
        for a, b in zip(vals, vals[1:]):
            out = out & fn(a, b)
        return out
    return apply


def _fold(fn):
    def apply(*vals):
        out = vals[0]
        for v in vals[1:]:
            out = fn(out, v)
        return out
    return apply


def _b(x):
    return np.asarray(x).astype(bool)


OPS = {  # name -> (arity or None for n-ary, function on broadcast int64/bool arrays)
    "neg": (1, lambda a: -np.asarray(a, dtype=np.int64)),
    "abs": (1, lambda a: np.abs(np.asarray(a, dtype=np.int64))),
    "add": (None, _fold(lambda a, b: np.asarray(a, dtype=np.int64) + b)),
    "sub": (2, lambda a, b: np.asarray(a, dtype=np.int64) - b),
    "mul": (None, _fold(lambda a, b: np.asarray(a, dtype=np.int64) * b)),
    "div": (2, _div),
    "mod": (2, _mod),
    "sqr": (1, lambda a: np.asarray(a, dtype=np.int64) ** 2),
    "pow": (2, lambda a, b: np.asarray(a, dtype=np.int64) ** np.asarray(b, dtype=np.int64)),
    "min": (None, _fold(np.minimum)),
    "max": (None, _fold(np.maximum)),
    "dist": (2, lambda a, b: np.abs(np.asarray(a, dtype=np.int64) - b)),
    "lt": (2, lambda a, b: np.asarray(a) < b),
    "le": (2, lambda a, b: np.asarray(a) <= b),
    "ge": (2, lambda a, b: np.asarray(a) >= b),
    "gt": (2, lambda a, b: np.asarray(a) > b),
    "ne": (2, lambda a, b: np.asarray(a) != b),
    "eq": (None, _chain(lambda a, b: np.asarray(a) == b)),
    "not": (1, lambda a: ~_b(a)),
    "and": (None, _fold(lambda a, b: _b(a) & _b(b))),
    "or": (None, _fold(lambda a, b: _b(a) | _b(b))),
    "xor": (None, _fold(lambda a, b: _b(a) ^ _b(b))),
    "iff": (None, _chain(lambda a, b: _b(a) == _b(b))),
    "imp": (2, lambda a, b: ~_b(a) | _b(b)),
    "if": (3, lambda c, a, b: np.where(_b(c), a, b)),
}
