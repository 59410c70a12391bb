"""XCSP3 reader (`<instance format="XCSP3" type="CSP|COP">`), the integer core of the format.

Read: integer variables and arrays (`size="[3][4]"`, per-cell `<domain for=...>`, `others`),
`extension` (supports/conflicts, `*`), `intension` (the functional expression language:
arithmetic, comparison, logic, `dist`, `if`, `in`/`set`), `allDifferent` (lists, `except`),
`sum` (coefficients, a condition on a value, a variable, a set or a range), `element` (a list
of variables or values, an index, a value), `group` (templates with `%i` / `%...`) and
`block`, and one objective, `minimize`/`maximize` over `sum` or an expression. A constraint
becomes a dense table (0 or forbidden), a long `sum` a chain of partial sums and `element` a
table per list entry, over auxiliary variables (decompose.py); a linear objective unary costs,
an objective expression a cost table; an allDifferent stays whole (model.AllDifferent).
Anything else is refused by name, at its line.
XCSP3 files are compact, so the whole tree is read at once (with each element's line). What the
reader builds (the tree, variables, domains, tables, the evaluation of expressions) is charged to
the reading budget before it is allocated; arithmetic is exact (intension.py).
"""
from __future__ import annotations

import copy
import itertools
import math
import re
import xml.etree.ElementTree as ET
from array import array
from pathlib import Path
from xml.parsers import expat

import numpy as np

from . import decompose
from .decompose import DecompositionError, Network
from gpusolve.model.problem import FORBIDDEN, AllDifferent, CostFunction, Problem, TupleFunction, Variable

from .errors import ParseError, quote
from .intension import Evaluation, ExpressionError, parse, scope_of
from .source import read_lines, reading_sizes
from .tables import (ENTRY_BYTES, INT64_MAX, CP_VARIABLE_BYTES, Labels, charge, constraint_problem, exact_costs,
                     too_large)

MAX_DOMAIN = 1 << 24
ELEMENT_BYTES = 512  # an XML element of the tree and its line (measured: 164 without attributes)
CHARGE_STEP = 1 << 20  # the tree is charged to the budget in steps of this many bytes
MAX_NESTING = 100  # elements nested deeper are refused: blocks are read recursively
REF = re.compile(r"([A-Za-z_][\w.]*)((?:\[[^\]]*\])*)")
SUPPORTED = ("extension", "intension", "allDifferent", "sum", "element", "group", "block")


def read(path: str | Path) -> Problem:
    root, lines = _parse(path)
    return _Reader(path, lines).instance(root)


def _parse(path):
    """The XML tree (element text only: XCSP3 puts no data in tails) and {id(element): line}.

    An element's text is joined once at its end, so reading stays linear in the file; the tree is
    charged to the reading budget as it grows; entity declarations (a few lines of them can expand
    to gigabytes) and a deep nesting are refused."""
    parser = expat.ParserCreate()
    parser.buffer_text = True
    lines: dict[int, int] = {}
    stack: list[tuple[ET.Element, list[str]]] = []  # open elements and the pieces of their text
    found: list[ET.Element] = []
    taken = 0  # bytes taken since the last charge

    def take(nbytes: int) -> None:
        nonlocal taken
        taken += nbytes
        if taken >= CHARGE_STEP:
            message, taken = charge(taken, "the XML tree"), 0
            if message:
                raise ParseError(path, parser.CurrentLineNumber, message)

    def start(tag, attrs):
        if len(stack) == MAX_NESTING:
            raise ParseError(path, parser.CurrentLineNumber, f"elements nested more than {MAX_NESTING} levels deep")
        elem = ET.Element(tag, attrs)
        lines[id(elem)] = parser.CurrentLineNumber
        (stack[-1][0].append if stack else found.append)(elem)
        stack.append((elem, []))
        take(ELEMENT_BYTES)

    def end(tag):
        elem, pieces = stack.pop()
        if pieces:
            elem.text = "".join(pieces)

    def data(text):
        if stack and not len(stack[-1][0]):
            stack[-1][1].append(text)
            take(2 * len(text))  # the pieces, then their join

    def entity(name, *_):
        raise ParseError(path, parser.CurrentLineNumber, f"entity declarations (<!ENTITY {name} ...>) are not "
                                                         f"supported")

    parser.StartElementHandler, parser.EndElementHandler = start, end
    parser.CharacterDataHandler, parser.EntityDeclHandler = data, entity
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
        self.net = Network(self.variables, self.values, self.functions)  # decompositions add to them

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
        self._charge(math.prod(sizes) * CP_VARIABLE_BYTES, f"array {ident} of {math.prod(sizes):,} variables")
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
        """The sorted distinct integers of `0..9 12 15..20`, charged before they are made (the words,
        then the values)."""
        self._charge(8 * len(text), "a domain's words", kept=0)  # two int64 per word, a word per 2 chars
        lows, highs, count = array("q"), array("q"), 0
        for m in re.finditer(r"\S+", text):
            try:
                low, high = (int(x) for x in m[0].split("..")) if ".." in m[0] else (int(m[0]),) * 2
            except ValueError:
                raise self.error(f"domain value {quote(m[0])} is not an integer or an interval") from None
            if not -INT64_MAX - 1 <= min(low, high) <= max(low, high) <= INT64_MAX:
                raise self.error(f"domain value {m[0]} beyond 64-bit integers")
            count += max(high - low + 1, 0)
            if count > MAX_DOMAIN:
                raise self.error(f"domain {m[0]} too large (at most 2^24 values)")
            lows.append(low)
            highs.append(high)
        if not count:
            raise self.error("empty domain")
        self._charge(8 * ENTRY_BYTES * count, f"a domain of {count:,} values", kept=ENTRY_BYTES * count)
        low, high = np.frombuffer(lows, dtype=np.int64), np.frombuffer(highs, dtype=np.int64)
        keep = high >= low
        low, lengths = low[keep], high[keep] - low[keep] + 1
        offsets = np.repeat(np.cumsum(lengths) - lengths, lengths)
        return np.unique(np.repeat(low, lengths) + (np.arange(count, dtype=np.int64) - offsets))

    def _add(self, name: str, dom: np.ndarray) -> int:
        if name in self.index:
            raise self.error(f"variable {name} declared twice")
        self.index[name] = len(self.variables)
        self.variables.append(Variable(name, len(dom), Labels(dom)))
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
                continue
            low, dots, high = part.partition("..")
            low, high = self._int(low), self._int(high if dots else low)
            if not 0 <= low <= high < size:
                raise self.error(f"{quote(word)} is outside array {ident} (size {''.join(f'[{s}]' for s in sizes)})")
            ranges.append(range(low, high + 1))
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
        try:
            getattr(self, "_" + c.tag.lower())(c)
        except DecompositionError as err:
            raise self.error(f"<{c.tag}>: {err}") from None

    def _block(self, c) -> None:
        for child in c:
            if child.tag != "annotations":
                self._constraint(child)

    def _group(self, c) -> None:
        template = c[0] if len(c) else None
        if template is None or template.tag == "args":
            raise self.error("<group> without a template constraint")
        wanted = max((_max_index(e.text or "") for e in template.iter()), default=-1)
        for args in c.findall("args"):
            values = [name for word in (args.text or "").split() for name in self._expanded(word)]
            if len(values) <= wanted:
                raise self.error(f"<args> gives {len(values)} arguments, the template uses %{wanted}", args)
            inst = copy.deepcopy(template)
            for e in inst.iter():
                e.text = _substitute(e.text, values)
            self.lines[id(inst)] = self.lines.get(id(template))
            self._constraint(inst)

    def _expanded(self, word: str) -> list[str]:
        """A group argument as the words it stands for: a compact array form (`m[0][]`) its variables."""
        m = REF.fullmatch(word)
        if m and m[1] in self.arrays and ("[]" in m[2] or ".." in m[2]):
            return [self.variables[v].name for v in self._list(word)]
        return [word]

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
                at = self._position(scope[0], int(x))
                if at is not None:
                    table[at] = mark
        else:
            for tup in re.finditer(r"\(([^)]*)\)", text):
                entries = [e.strip() for e in tup[1].split(",")]
                if len(entries) != len(scope):
                    raise self.error(f"tuple ({tup[1]}) has {len(entries)} values, the list {len(scope)}")
                index = [slice(None) if e == "*" else self._position(v, self._int(e)) for e, v in zip(entries, scope)]
                if None not in index:  # a value outside its domain: the tuple never applies
                    table[tuple(index)] = mark
        self._table(scope, table)

    def _position(self, v: int, x: int) -> int | None:
        """The domain index of value x of variable v, None when x is not in its domain."""
        at = int(self.values[v].searchsorted(x))
        return at if at < len(self.values[v]) and self.values[v][at] == x else None

    def _intension(self, c) -> None:
        text = c.text if not len(c) else self._child_text(c, "function")
        expr = self._expression(text)
        if self._functional(expr):
            return
        scope, value = self._evaluate(expr)
        self._table(scope, np.where(value.astype(bool), 0, FORBIDDEN))

    def _functional(self, tree) -> bool:
        """`eq(x, e)` (or `eq(e, x)`) with x a variable absent from e, over more than Limits.listed_min
        entries: kept as its allowed tuples (TupleFunction), found by evaluating e over its own
        variables only (Langford's gaps over 2n positions: 2n pairs instead of (2n)^2 entries)."""
        if not (isinstance(tree, tuple) and tree[0] == "eq" and len(tree[1]) == 2):
            return False
        for x, e in (tree[1], tree[1][::-1]):
            if not (isinstance(x, tuple) and x[0] == "var"):
                continue
            scope = scope_of(e)
            if x[1] in scope or not scope:
                continue
            dims = [self.variables[v].domain for v in scope]
            if math.prod(dims) * self.variables[x[1]].domain <= reading_sizes().listed_min:
                return False
            self._charge(math.prod(dims) * ENTRY_BYTES * (2 * len(scope) + 6), "the tuples of an intension",
                         kept=math.prod(dims) * ENTRY_BYTES * (len(scope) + 2))
            _, value = self._evaluate(e)
            value = value.reshape(-1)
            ranked = self.values[x[1]]  # sorted
            inside = (value >= ranked[0]) & (value <= ranked[-1])  # e's values beyond int64 are outside
            value = np.where(inside, value, ranked[0]).astype(np.int64)
            at = np.searchsorted(ranked, value)
            hit = inside & (ranked[np.minimum(at, len(ranked) - 1)] == value)  # e's value is in x's domain
            rest = np.stack(np.unravel_index(np.flatnonzero(hit), dims), axis=1)
            tuples = np.concatenate([rest, at[hit][:, None]], axis=1)
            self.functions.append(TupleFunction(tuple(scope) + (x[1],), dims + [self.variables[x[1]].domain], tuples,
                                                np.zeros(len(tuples), dtype=np.int64), FORBIDDEN))
            return True
        return False

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
            if value.dtype == object and (value.min() < -INT64_MAX - 1 or value.max() > INT64_MAX):
                raise self.error(f"allDifferent over {word}: values beyond 64-bit integers")
            scope.append(vars_[0])
            values.append(value.astype(np.int64))
        if len(set(scope)) != len(scope):
            raise self.error("allDifferent lists a variable twice")
        exempt_text = self._child_text(c, "except", required=False)
        exempt = frozenset(self._int(w) for w in exempt_text.split()) if exempt_text else frozenset()
        self.globals.append(AllDifferent(tuple(scope), tuple(values), FORBIDDEN, "var", exempt))

    def _sum(self, c) -> None:
        """A linear condition; a variable on its right moves left with coefficient -1."""
        scope = self._list(self._child_text(c, "list"))
        coeffs = self._coefficients(c, len(scope))
        op, right = self._condition(self._child_text(c, "condition"))
        if isinstance(right, tuple):  # ("var", v)
            scope, coeffs, right = scope + [right[1]], coeffs + [-1], 0
        merged: dict[int, int] = {}
        for v, a in zip(scope, coeffs):
            merged[v] = merged.get(v, 0) + a
        decompose.linear(self.net, list(merged), [self.values[v] for v in merged], list(merged.values()),
                         decompose.compare(op, right), f"sum{len(self.functions)}")

    def _element(self, c) -> None:
        """list[index - startIndex] = value: the list of variables or integers, the value a variable or
        an integer (or `<condition>` (eq, it))."""
        lists = c.findall("list")
        if len(lists) != 1 or c.find("index") is None:
            raise self.error("element without one <list> and an <index> is not supported")
        items = [self._operand(w) for w in (lists[0].text or "").split()]
        index = self._list(self._child_text(c, "index"))
        if len(index) != 1:
            raise self.error("element's <index> must be one variable")
        value = self._child_text(c, "value", required=False)
        if value is None:
            op, value = self._condition(self._child_text(c, "condition"))
            if op != "eq":
                raise self.error(f"element with a condition ({op}, ...) is not supported (eq is)")
            value = value[1] if isinstance(value, tuple) else self._constant(value)
        else:
            value = self._operand(value.strip())
        decompose.element(self.net, index[0], self._int(lists[0].get("startIndex", "0")), items, value)

    def _operand(self, word: str) -> int:
        """A variable, or an integer as an auxiliary variable of one value."""
        return self._constant(self._int(word)) if re.fullmatch(r"-?\d+", word) else self._one(word)

    def _one(self, word: str) -> int:
        found = self._list(word)
        if len(found) != 1:
            raise self.error(f"{quote(word)} is not one variable")
        return found[0]

    def _constant(self, x: int) -> int:
        if not -INT64_MAX - 1 <= x <= INT64_MAX:
            raise self.error(f"value {x} beyond 64-bit integers")
        return self.net.auxiliary(f"const{x}", np.array([x], dtype=np.int64))

    def _coefficients(self, c, count: int) -> list[int]:
        """The <coeffs> of c (1s without it), XCSP3's compact `3x4` (4 times 3) expanded; one per variable."""
        text = self._child_text(c, "coeffs", required=False)
        if text is None:
            return [1] * count
        words = [w.split("x") if re.fullmatch(r"-?\d+x\d+", w) else (w, "1") for w in text.split()]
        if sum(int(times) for _, times in words) != count:
            raise self.error(f"the coefficients are not one per variable ({count} variables)")
        return [self._int(value) for value, times in words for _ in range(int(times))]

    def _condition(self, text: str) -> tuple[str, object]:
        m = re.fullmatch(r"\s*\(\s*(\w+)\s*,\s*([^)]*?)\s*\)\s*", text)
        if not m or m[1] not in ("lt", "le", "ge", "gt", "eq", "ne", "in", "notin"):
            raise self.error(f"condition {quote(text.strip())} is not (op, value) with op lt, le, ge, gt, eq, ne, in")
        if m[1] in ("in", "notin"):
            return m[1], self._domain_text(m[2].replace(",", " ").strip("{} "))
        if m[2] in self.index:
            return m[1], ("var", self.index[m[2]])
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
            listed = self._list(self._child_text(o, "list") if o.find("list") is not None else o.text or "")
            for v, a in zip(listed, self._coefficients(o, len(listed))):
                self._guard((len(self.values[v]),))
                self.functions.append(CostFunction((v,), self._costs(self.values[v], self.sense * a)))
        elif kind == "expression":
            text = o.text if o.find("list") is None else self._child_text(o, "list")
            tree = self._expression(text)
            form = _linear(tree)
            if form is not None and len(form[0]) > 1:  # a sum of terms: a cost per variable, not one table
                terms = []
                for v, a in form[0].items():
                    self._guard((len(self.values[v]),))
                    terms.append(((v,), exact_costs(self.values[v], self.sense * a)))
                terms.append(((), exact_costs(np.array(form[1], dtype=object), self.sense)))
                if not any(isinstance(costs, str) for _, costs in terms):
                    self.functions += [CostFunction(scope, costs) for scope, costs in terms]
                    return
                # a term beyond exact costs (x - y, y near 2^62): one table, whose sums may be within them
            scope, value = self._evaluate(tree)
            self._table(scope, self._costs(value, self.sense))
        else:
            raise self.error(f"objective type {quote(kind)} is not supported (sum or an expression)")

    def _costs(self, values: np.ndarray, factor: int) -> np.ndarray:
        costs = exact_costs(values, factor)
        if isinstance(costs, str):
            raise self.error(costs)
        return costs

    # --- expressions --------------------------------------------------------------------------
    def _expression(self, text: str | None):
        try:
            return parse(text, self.index)
        except ExpressionError as e:
            raise self.error(str(e)) from None

    def _evaluate(self, tree) -> tuple[list[int], np.ndarray]:
        """The tree's scope and its values on their grid; the int64 table made of them and the
        evaluation's peak are charged first."""
        try:
            evaluation = Evaluation(tree, self.values)
            self._guard(evaluation.shape)
            self._charge(evaluation.peak, "the evaluation of an expression", kept=0)
            return evaluation.scope, evaluation.values()
        except ExpressionError as e:
            raise self.error(str(e)) from None

    # --- helpers ------------------------------------------------------------------------------
    def _guard(self, shape) -> None:
        message = too_large(shape)
        if message:
            raise self.error(message)

    def _charge(self, need: int, what: str, kept: int | None = None) -> None:
        message = charge(need, what, kept)
        if message:
            raise self.error(message)

    def _table(self, scope: list[int], table: np.ndarray) -> None:
        if len(set(scope)) != len(scope):
            raise self.error("a variable appears twice in one constraint's scope")
        self.functions.append(CostFunction(tuple(scope), np.asarray(table, dtype=np.int64, order="C")))  # 0-d kept

    def _int(self, text: str) -> int:
        try:
            return int(text)
        except ValueError:
            raise self.error(f"expected an integer, found {quote(text)}") from None


def _linear(tree) -> tuple[dict[int, int], int] | None:
    """({variable: coefficient}, constant) of an expression that is a linear form (add, sub, neg,
    mul by a constant), else None."""
    if isinstance(tree, int):
        return {}, tree
    if tree[0] == "var":
        return {tree[1]: 1}, 0
    forms = [_linear(arg) for arg in tree[1]]
    if None in forms:
        return None
    if tree[0] == "neg" and len(forms) == 1:
        return _scale(forms[0], -1)
    if tree[0] == "sub" and len(forms) == 2:
        return _plus([forms[0], _scale(forms[1], -1)])
    if tree[0] == "add":
        return _plus(forms)
    if tree[0] == "mul" and len(forms) == 2 and not (forms[0][0] and forms[1][0]):
        (terms, const), factor = (forms[0], forms[1][1]) if forms[0][0] else (forms[1], forms[0][1])
        return _scale((terms, const), factor)
    return None


def _plus(forms) -> tuple[dict[int, int], int]:
    terms: dict[int, int] = {}
    for t, _ in forms:
        for v, a in t.items():
            terms[v] = terms.get(v, 0) + a
    return terms, sum(c for _, c in forms)


def _scale(form, factor: int) -> tuple[dict[int, int], int]:
    return {v: a * factor for v, a in form[0].items()}, form[1] * factor


def _name(ident: str, cell: tuple) -> str:
    return ident + "".join(f"[{i}]" for i in cell)


def _substitute(text: str | None, values: list[str]) -> str | None:
    if text is None:
        return None
    text = text.replace("%...", " ".join(values[_max_index(text) + 1:]) if "%..." in text else "")
    return re.sub(r"%(\d+)", lambda m: values[int(m[1])], text)


def _max_index(text: str) -> int:
    return max((int(i) for i in re.findall(r"%(\d+)", text)), default=-1)
