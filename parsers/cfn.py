"""toulbar2's CFN (.cfn, the format toulbar2 documents first): its reader and its writer (`write_cfn`).

A JSON-like object `{problem: {name, mustbe}, variables: {...}, functions: {...}}`
read as toulbar2 reads it (tb2reader.cpp, CFNStreamReader; the words: cfn_syntax.py): blanks, double quotes,
colons and commas all only separate words, so quotes and commas are optional
and `"type:"` is the word `type`; `{}` and `[]` are interchangeable; a line
starting with `#` and the rest of a line after `//` are comments. Every object
may also be written without its keys, in order (`{name <12.100}`, `[3 2]`,
`{[x y] 0 [a 1 5]}`); the closing brace of the whole object may be missing, as
in toulbar2's own tutorials (the functions' object must be closed).
`mustbe` is `<UB` (minimise; a total cost >= UB is forbidden) or `>LB`
(maximise; <= LB forbidden); its decimals set the precision of every cost
(finer costs are truncated, as toulbar2 does). `inf` is a forbidden cost.
Variables carry value names or a domain size, named or not; functions, named
or not, are dense cost lists, sparse `defaultcost` + tuples (value names or
indices), the table of a function defined later in the file, named in place of
the costs (toulbar2 reads a reference to an earlier one as no function at all;
we refuse it), or a `type` with `params`: the arithmetic functions (integer
costs, minimisation, as in toulbar2) and `salldiff`/`alldiff` are read, the
globals of decompose.TOULBAR2 become tables over auxiliary variables
(decompose.py), other global cost functions are refused by name. What the file declares is charged
to the reading budget before it is allocated (tables.charge): the tokens line
by line, the variables, and every table, sparse ones and references made dense
only once the whole file is charged.
"""
from __future__ import annotations

import json
import math
import re
from functools import partial
from pathlib import Path

import numpy as np

from . import decompose
from .decompose import ARITHMETIC, DecompositionError, Indices, Network, arithmetic
from gpusolve.model.problem import (FORBIDDEN, MAX_TOP, AllDifferent, CostFunction, ModelError, Problem, Variable,
                            finalize_integer)
from .errors import ParseError, quote
from .source import open_text, split_compression
from .tables import FUNCTION_BYTES, VARIABLE_BYTES, Listed, charge, too_large
from .wcsp import MAX_PARAM, expressible
from .cfn_syntax import NUMBER, Atom, Group, is_number, tree

INFINITY = "inf"  # the forbidden cost
PLAIN_INTEGERS = re.compile(r"[+-]?[0-9]+(?: [+-]?[0-9]+)*")  # a list of costs that `cost` reads as integers
MAX_DECIMALS = 18
COLUMNS_FROM = 64  # listed tuples looked up a column at once (_Reader._tuples)

# the global cost functions toulbar2 reads in CFN (tb2reader.cpp's GCFTemplates, and alldiff, gcc)
TOULBAR2_GLOBALS = ("clique", "knapsack", "knapsackv", "cfnconstraint", "salldiff", "sgcc", "ssame", "sregular",
                    "sregulardp", "sgrammar", "sgrammardp", "samong", "samongdp", "salldiffdp", "salldiffkp", "sgccdp",
                    "max", "smaxdp", "MST", "smstdp", "wregular", "walldiff", "wgcc", "wsame", "wsamegcc", "wamong",
                    "wvaramong", "woverlap", "wsum", "wvarsum", "wdiverse", "whdiverse", "wtdiverse", "alldiff", "gcc")


def read(path: str | Path) -> Problem:
    root = tree(path)
    return _Reader(path).problem(root)


class _Reader:
    def __init__(self, path):
        self.path = path
        self.precision = 0
        self.maximize = False
        self.top: int | None = None

    def error(self, where, message: str) -> ParseError:
        return ParseError(self.path, where.line if where is not None else None, message)

    def _fields(self, group: Group, keys: tuple[str, ...], what: str) -> dict:
        """A keyed object (`key value ...`, keys among `keys`) or the values alone, in the order of `keys`."""
        items = group.items
        if items and isinstance(items[0], Atom) and items[0].text in keys and len(items) % 2 == 0:
            out = {}
            for k, v in zip(items[::2], items[1::2]):
                if not isinstance(k, Atom) or k.text not in keys:
                    raise self.error(k, f"{what}: unexpected field {quote(getattr(k, 'text', '{...}'))} "
                                        f"(expected {', '.join(keys)})")
                out[k.text] = v
            return out
        if len(items) > len(keys):
            raise self.error(group, f"{what}: {len(items)} fields, expected at most {len(keys)} "
                                    f"({', '.join(keys)})")
        return dict(zip(keys, items))

    def problem(self, root: Group) -> Problem:
        parts = self._fields(root, ("problem", "variables", "functions"), "CFN")
        for key in ("problem", "variables", "functions"):
            if not isinstance(parts.get(key), Group):
                raise self.error(root, f"missing or malformed {key!r} object")
        name, top = self._header(parts["problem"])
        self.top = top
        variables = self._variables(parts["variables"])
        self.names = {v.name: i for i, v in enumerate(variables)}
        self.variables = variables
        self.positions = [{label: i for i, label in enumerate(v.labels or ())} for v in variables]
        functions, globals_, offset = self._functions(parts["functions"])
        problem = Problem(name, variables, functions, integer=True, offset=offset,
                          sense=-1 if self.maximize else 1, task="WCSP", precision=self.precision,
                          globals=globals_)
        try:
            return finalize_integer(problem, top)
        except ModelError as err:
            raise ParseError(self.path, None, str(err)) from None

    def _header(self, group: Group) -> tuple[str, int | None]:
        fields = self._fields(group, ("name", "mustbe"), "problem")
        name = fields.get("name")
        name = name.text if isinstance(name, Atom) else split_compression(self.path)[0].removesuffix(".cfn")
        mustbe = fields.get("mustbe")
        if mustbe is None:
            return name, None
        if not isinstance(mustbe, Atom) or mustbe.text[:1] not in "<>" or not mustbe.text[1:]:
            raise self.error(mustbe if isinstance(mustbe, Atom) else group,
                             "mustbe must be '<' or '>' followed by a number, e.g. \"<100.0\"")
        self.maximize = mustbe.text[0] == ">"
        number = mustbe.text[1:]
        if not NUMBER.fullmatch(number):
            raise self.error(mustbe, f"mustbe bound {quote(number)} is not a decimal number")
        self.precision = len(number.partition(".")[2])
        if self.precision > MAX_DECIMALS:
            raise self.error(mustbe, f"mustbe has {self.precision} decimals (at most {MAX_DECIMALS})")
        return name, self.cost(Atom(number, mustbe.line))

    def cost(self, atom, what: str = "cost") -> int:
        """A file cost (utility when maximising) as an internal integer at the file's precision; `inf`
        is FORBIDDEN."""
        if isinstance(atom, Atom) and atom.text == INFINITY:
            return FORBIDDEN
        if not isinstance(atom, Atom) or not NUMBER.fullmatch(atom.text):
            text = atom.text if isinstance(atom, Atom) else "{...}"
            raise self.error(atom, f"expected a {what} (a decimal number or inf), found {quote(text)}")
        whole, _, fraction = atom.text.lstrip("+-").partition(".")
        # the decimals beyond the precision are cut off, as toulbar2 does, on the digits themselves: no
        # arithmetic that rounds (Decimal keeps 28 digits) or wraps
        digits = (whole + fraction[:self.precision].ljust(self.precision, "0")).lstrip("0") or "0"
        if len(digits) > len(str(MAX_TOP)) or int(digits) > MAX_TOP:
            raise self.error(atom, f"{what} {atom.text} out of range (|cost| * 10^precision <= 2^62)")
        scaled = -int(digits) if atom.text.startswith("-") else int(digits)
        return -scaled if self.maximize else scaled

    def _costs(self, atoms: list) -> np.ndarray:
        """The costs of `atoms`, as `cost` reads each. At precision 0, minimising, a list of plain integers
        (checked whole by one regular expression) converts at once: CELAR6SUB1's 607,905 costs took 1.3 s
        one by one. Anything else (decimals, inf, a sign to flip, an error to name) goes atom by atom."""
        if self.precision == 0 and not self.maximize and all(isinstance(a, Atom) for a in atoms):
            texts = [a.text for a in atoms]
            if PLAIN_INTEGERS.fullmatch(" ".join(texts)):
                try:
                    values = np.array(texts, dtype=np.int64)
                except OverflowError:  # beyond int64: `cost` names it
                    values = None
                if values is not None and not ((values > MAX_TOP) | (values < -MAX_TOP)).any():
                    return values
        return np.fromiter((self.cost(a) for a in atoms), dtype=np.int64, count=len(atoms))

    def _variables(self, group: Group) -> list[Variable]:
        """`name domain` pairs or domains alone, mixed as toulbar2 allows: a domain is a group of value
        names or a size (a word starting as a number)."""
        entries, items, i = [], group.items, 0
        while i < len(items):
            if isinstance(items[i], Group) or is_number(items[i]):
                entries.append((None, items[i]))
                i += 1
            elif i + 1 == len(items):
                raise self.error(items[i], f"variable {items[i].text} without a domain")
            else:
                entries.append((items[i], items[i + 1]))
                i += 2
        self._charge(group, len(entries) * VARIABLE_BYTES, f"{len(entries):,} variables")
        variables: list[Variable] = []
        seen: set[str] = set()
        for i, (key, domain) in enumerate(entries):
            name = key.text if key is not None else str(i)
            if name in seen:
                raise self.error(key or domain, f"variable {name} defined twice")
            seen.add(name)
            if isinstance(domain, Group):
                labels = tuple(self._label(a, name) for a in domain.items)
                if len(set(labels)) != len(labels):
                    raise self.error(domain, f"variable {name} lists a value twice")
                size = len(labels)
            else:
                labels, size = None, self._int(domain, f"domain size of variable {name}")
                size = abs(size)  # negative: toulbar2's interval variable, values 0..|size|-1 all the same
            if size == 0:
                raise self.error(domain, f"variable {name} has an empty domain")
            variables.append(Variable(name, size, labels))
        return variables

    def _label(self, atom, var: str) -> str:
        if not isinstance(atom, Atom):
            raise self.error(atom, f"variable {var}: a value name must be a string")
        return atom.text

    def _int(self, atom, what: str) -> int:
        if not isinstance(atom, Atom) or not re.fullmatch(r"[-+]?\d{1,18}", atom.text):
            raise self.error(atom, f"expected {what} (an integer of at most 18 digits), found "
                                   f"{quote(atom.text if isinstance(atom, Atom) else '{...}')}")
        return int(atom.text)

    def _functions(self, group: Group) -> tuple[list[CostFunction], list[AllDifferent], int]:
        """The functions, named (`name {...}`) or not (`{...}`), mixed as toulbar2 allows."""
        declared: list[tuple[tuple[int, ...], np.ndarray | Listed]] = []  # (scope, table) in file order
        by_name: dict[str, list[int]] = {}  # a function's name -> its places in `declared`
        references: list[tuple[tuple[int, ...], Atom, int]] = []  # (scope, name, functions declared before)
        makers: list[tuple[tuple[int, ...], partial]] = []  # arithmetic functions' tables, made last
        globals_: list[AllDifferent] = []
        offset = 0
        self.net = Network(self.variables, Indices([v.domain for v in self.variables]), [])  # decomposed globals
        items, i = group.items, 0
        while i < len(items):
            key = items[i] if isinstance(items[i], Atom) else None
            body = items[i + 1] if key is not None and i + 1 < len(items) else items[i]
            i += 2 if key is not None else 1
            name = key.text if key is not None else f"f{len(declared) + len(references)}"
            if not isinstance(body, Group):
                raise self.error(body, f"cost function {name}: expected {{scope ... costs ...}}")
            scope, default, kind, costs = self._parts(body, name)
            self._charge(body, FUNCTION_BYTES, f"cost function {name}")
            if kind is not None:
                if default is not None:
                    raise self.error(body, f"cost function {name}: a {kind.text} function has no default cost")
                made = self._typed(scope, kind, costs, name)
                if isinstance(made, AllDifferent):
                    globals_.append(made)
                elif made is not None:  # None: decomposed into self.net
                    makers.append((scope, made))
            elif isinstance(costs, Atom):  # the table of the function of that name, defined later
                if default is not None:
                    raise self.error(costs, f"cost function {name}: a shared table has no default cost")
                self._shape(scope, costs, name)  # charges the copy
                references.append((scope, costs, len(declared)))
            elif not scope:
                cost = self._constant(default, costs, name)
                if cost == FORBIDDEN:
                    declared.append(((), np.full((), FORBIDDEN, dtype=np.int64)))
                else:
                    offset += cost
            else:
                if key is not None:
                    by_name.setdefault(name, []).append(len(declared))
                declared.append((scope, self._table(scope, default, costs, name)))
        sources = [self._reference(scope, ref, before, by_name, declared) for scope, ref, before in references]
        # every table is charged: now they are made
        tables = [table.table() if isinstance(table, Listed) else table for _, table in declared]
        functions = [CostFunction(scope, table) for (scope, _), table in zip(declared, tables)]
        functions += [CostFunction(scope, tables[i].copy()) for (scope, _, _), i in zip(references, sources)]
        functions += [CostFunction(scope, make()) for scope, make in makers]
        return functions + self.net.functions, globals_, offset

    def _parts(self, body: Group, name: str):
        """(scope, default cost, type, costs or params) of a function written with its keys
        (`scope [..] defaultcost c costs [..]`, `scope [..] type t params [..]`) or without them."""
        items, pos = body.items, 0

        def tag(word: str) -> bool:
            nonlocal pos
            if pos < len(items) and isinstance(items[pos], Atom) and items[pos].text == word:
                pos += 1
                return True
            return False

        tag("scope")
        if pos == len(items) or not isinstance(items[pos], Group):
            raise self.error(body, f"cost function {name}: no scope")
        scope = self._scope(items[pos], name)
        pos += 1
        default = kind = None
        if tag("defaultcost") or (pos < len(items) and is_number(items[pos])):  # without keys: a number
            if pos == len(items):
                raise self.error(body, f"cost function {name}: no default cost")
            default = items[pos]
            pos += 1
        if tag("type"):
            if pos == len(items):
                raise self.error(body, f"cost function {name}: no type")
            kind = items[pos]
            pos += 1
            tag("params")
        elif not tag("costs") and pos + 1 < len(items) and isinstance(items[pos], Atom):
            kind = items[pos]  # without keys: a type is followed by its parameters
            pos += 1
        if kind is not None and not isinstance(kind, Atom):
            raise self.error(body, f"cost function {name}: a type must be a word")
        if pos == len(items):
            raise self.error(body, f"cost function {name}: no {'params' if kind else 'costs'}")
        costs = items[pos]
        if pos + 1 < len(items):
            extra = items[pos + 1]
            raise self.error(extra, f"cost function {name}: unexpected "
                                    f"{quote(extra.text) if isinstance(extra, Atom) else '{...}'} after its costs")
        return scope, default, kind, costs

    def _constant(self, default, costs, name: str) -> int:
        """A function of no variable: its one cost, or its default cost over no tuple."""
        if not isinstance(costs, Group) or len(costs.items) > 1 or (not costs.items and default is None):
            raise self.error(costs, f"cost function {name}: a constant has one cost")
        return self.cost(costs.items[0] if costs.items else default)

    def _typed(self, scope, kind: Atom, params, name: str):
        """An arithmetic function's table maker, or an AllDifferent; other types are refused by name."""
        if kind.text in ARITHMETIC:
            return self._arithmetic(scope, kind, params, name)
        if kind.text in ("salldiff", "alldiff"):
            return self._alldiff(scope, kind, params, name)
        if kind.text in decompose.TOULBAR2:
            return self._decomposed(scope, kind, params, name)
        if kind.text in TOULBAR2_GLOBALS:
            raise self.error(kind, f"cost function {name}: global cost function {kind.text} is not supported")
        raise self.error(kind, f"cost function {name}: unknown type {quote(kind.text)}")

    def _arithmetic(self, scope, kind: Atom, params, name: str) -> partial:
        if self.precision or self.maximize:
            raise self.error(kind, f"cost function {name}: toulbar2 allows arithmetic functions ({kind.text}) "
                                   "only with integer costs to minimise")
        if len(scope) != 2:
            raise self.error(kind, f"cost function {name}: {kind.text} needs a scope of 2 variables")
        values = params.items if isinstance(params, Group) else [params]
        names = ARITHMETIC[kind.text]
        if len(values) != len(names):
            raise self.error(kind, f"cost function {name}: {kind.text} takes {len(names)} parameters "
                                   f"({', '.join(names)})")
        costs = ("penalty", "costx", "costy")
        ints = [self._int(v, f"parameter of {kind.text}") for v, n in zip(values, names) if n not in costs]
        if any(abs(v) > MAX_PARAM for v in ints):
            raise self.error(kind, f"cost function {name}: parameter out of range (|p| <= 2^60)")
        params = [self.cost(v, f"{kind.text} {n}") if n in costs else self._int(v, n) for v, n in zip(values, names)]
        shape = self._shape(scope, kind, name)
        return partial(arithmetic, kind.text, tuple(params), shape)

    def _decomposed(self, scope, kind: Atom, params, name: str) -> None:
        """A global of decompose.TOULBAR2, its keyed params read, as tables over auxiliary variables."""
        if self.maximize:
            raise self.error(kind, f"cost function {name}: global cost function {kind.text} in a maximisation "
                                   "problem is not supported")
        if not isinstance(params, Group):
            raise self.error(kind, f"cost function {name}: {kind.text} needs its params")
        try:
            decompose.toulbar2(self.net, kind.text, scope, self._params(params, name), name)
        except (DecompositionError, KeyError) as err:
            missing = f"its params lack {err}" if isinstance(err, KeyError) else str(err)
            raise self.error(kind, f"cost function {name}: {kind.text}: {missing}") from None

    def _params(self, group: Group, name: str) -> dict:
        """A global's keyed params in decompose.toulbar2's form: costs at the file's precision, variables
        by name or index."""
        if len(group.items) % 2 or not all(isinstance(k, Atom) for k in group.items[::2]):
            raise self.error(group, f"cost function {name}: params must be keyed (name: value ...)")
        p = {}
        for key, value in zip(group.items[::2], group.items[1::2]):
            field = key.text
            if field in ("metric", "comparator"):
                p[field] = self._word(value, field)
            elif field == "cost":
                p[field] = self.cost(value)
            elif field in ("vars1", "vars2"):
                p[field] = list(self._scope(self._group(value, field), name))
            elif field in ("values", "weights"):
                p[field] = [self._int(a, field) for a in self._group(value, field).items]
            elif field in ("bounds", "starts", "ends", "transitions"):
                p[field] = [self._row(row, field) for row in self._group(value, field).items]
            else:
                p[field] = self._int(value, field)
        return p

    def _row(self, row, field: str):
        """A row of integers whose trailing costs (bounds' weights, wregular's costs) are costs; a
        bare integer (sregular's states)."""
        if isinstance(row, Atom):
            return self._int(row, field)
        ints = {"bounds": 3, "starts": 1, "ends": 1, "transitions": 3}[field]
        return tuple(self._int(a, field) if i < ints else self.cost(a) for i, a in enumerate(row.items))

    def _group(self, value, field: str) -> Group:
        if not isinstance(value, Group):
            raise self.error(value, f"{field} must be a list")
        return value

    def _word(self, value, field: str) -> str:
        if not isinstance(value, Atom):
            raise self.error(value, f"{field} must be a word")
        return value.text

    def _alldiff(self, scope, kind: Atom, params, name: str) -> AllDifferent:
        """`salldiff {metric var|dec|decbi cost c}` or `alldiff {exceptedvalues [..] deltacosts []}`."""
        if self.maximize:
            raise self.error(kind, f"cost function {name}: {kind.text} is not supported when maximising")
        if not isinstance(params, Group):
            raise self.error(kind, f"cost function {name}: {kind.text} needs its params")
        self._charge(kind, 8 * sum(self.variables[v].domain for v in scope), "the values of an AllDifferent")
        values = tuple(np.arange(self.variables[v].domain, dtype=np.int64) for v in scope)
        if kind.text == "alldiff":
            fields = self._fields(params, ("exceptedvalues", "deltacosts"), f"cost function {name}")
            if any(isinstance(fields.get(k), Atom) for k in fields):
                raise self.error(params, f"cost function {name}: alldiff takes lists")
            if isinstance(fields.get("deltacosts"), Group) and fields["deltacosts"].items:
                raise self.error(params, f"cost function {name}: alldiff deltacosts are not supported")
            excepted = fields.get("exceptedvalues")
            exempt = frozenset(self._int(v, "excepted value") for v in (excepted.items if excepted else ()))
            return AllDifferent(scope, values, FORBIDDEN, "var", exempt)
        fields = self._fields(params, ("metric", "cost"), f"cost function {name}")
        metric = fields.get("metric")
        if not isinstance(metric, Atom) or metric.text not in ("var", "dec", "decbi"):
            raise self.error(metric or params, f"cost function {name}: salldiff metric is none of var, dec, decbi")
        cost = self.cost(fields.get("cost") or params, "salldiff cost")
        if cost < 0:
            raise self.error(params, f"cost function {name}: salldiff cost must not be negative")
        hard = cost == FORBIDDEN or (self.top is not None and cost >= self.top)
        return AllDifferent(scope, values, FORBIDDEN if hard else cost, "var" if metric.text == "var" else "dec")

    def _reference(self, scope, ref: Atom, before: int, by_name: dict[str, list[int]], declared) -> int:
        """The place in `declared` of the function whose table `ref` names (the first of that name after)."""
        if ref.text not in by_name:
            raise self.error(ref, f"shared cost table {quote(ref.text)} is not a cost function of this file")
        place = next((p for p in by_name[ref.text] if p >= before), None)
        if place is None:
            raise self.error(ref, f"shared cost table {quote(ref.text)} must be defined after the function "
                                  "using it, as toulbar2 requires")
        shape, table_shape = tuple(self.variables[v].domain for v in scope), declared[place][1].shape
        if table_shape != shape:
            raise self.error(ref, f"shared cost table {ref.text} has domain sizes {table_shape}, this scope {shape}")
        return place

    def _charge(self, where, nbytes: int, what: str) -> None:
        message = charge(nbytes, what)
        if message:
            raise self.error(where, message)

    def _shape(self, scope, where, name: str) -> tuple[int, ...]:
        shape = tuple(self.variables[v].domain for v in scope)
        message = too_large(shape)
        if message:
            raise self.error(where, f"cost function {name}: {message}")
        return shape

    def _scope(self, group: Group, name: str) -> tuple[int, ...]:
        scope = []
        for atom in group.items:
            if not isinstance(atom, Atom):
                raise self.error(group, f"cost function {name}: malformed scope")
            if atom.text in self.names:
                v = self.names[atom.text]
            elif re.fullmatch(r"\d{1,18}", atom.text) and int(atom.text) < len(self.variables):
                v = int(atom.text)
            else:
                raise self.error(atom, f"cost function {name}: unknown variable {atom.text}")
            if v in scope:
                raise self.error(atom, f"cost function {name}: variable {atom.text} appears twice in the scope")
            scope.append(v)
        return tuple(scope)

    def _table(self, scope, default, costs, name: str) -> np.ndarray | Listed:
        """A dense table as listed, or the default and tuples of a sparse one (made dense once all are
        charged)."""
        if not isinstance(costs, Group):
            raise self.error(costs, f"cost function {name}: no costs")
        shape = self._shape(scope, costs, name)
        entries = costs.items
        if default is None:  # dense: every tuple in lexicographic order
            if len(entries) != math.prod(shape):
                raise self.error(costs, f"cost function {name}: {len(entries)} costs, expected "
                                        f"{math.prod(shape)} for domain sizes {shape}")
            return self._costs(entries).reshape(shape)
        width = len(scope) + 1
        if len(entries) % width:
            raise self.error(costs, f"cost function {name}: {len(entries)} entries are not tuples of "
                                    f"{len(scope)} values and a cost")
        default_cost = self.cost(default, "default cost")
        rows, values = self._tuples(entries, scope, name)
        flat = np.ravel_multi_index(rows.T, shape) if len(rows) else np.empty(0, dtype=np.intp)
        order = np.argsort(flat, kind="stable")
        again = np.flatnonzero(flat[order][1:] == flat[order][:-1])
        if len(again):  # toulbar2 refuses a tuple given twice
            raise self.error(entries[int(order[again[0] + 1]) * width], f"cost function {name}: a tuple is given twice")
        return Listed(shape, default_cost, rows, values)

    def _tuples(self, entries: list, scope, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(the tuples' value indices, their costs): from COLUMNS_FROM tuples on, a column of value names or
        indices, all valid, at once (a dict lookup per entry: rlfap.py's CELAR6-SUB1 written as 269,000
        tuples reads in 1.7-1.8 CPU-s, 2.6-3.0 tuple by tuple, dev box); else tuple by tuple, which names the first bad entry (and
        costs less than the arrays for a few tuples: toulbar2's warehouse.py lists one per function)."""
        width = len(scope) + 1
        count = len(entries) // width
        if count >= COLUMNS_FROM and all(isinstance(a, Atom) for a in entries):
            columns = [self._indices([a.text for a in entries[c::width]], v) for c, v in enumerate(scope)]
            if all(column is not None for column in columns):
                return (np.stack(columns, 1) if columns else np.empty((count, 0), dtype=np.intp),
                        self._costs(entries[width - 1::width]))
        rows = np.empty((count, len(scope)), dtype=np.intp)
        values = np.empty(count, dtype=np.int64)
        for r in range(count):
            chunk = entries[r * width:(r + 1) * width]
            for c, v in enumerate(scope):
                rows[r, c] = self._value(chunk[c], v, name)
            values[r] = self.cost(chunk[-1])
        return rows, values

    def _indices(self, texts: list[str], v: int) -> np.ndarray | None:
        """The value indices of `texts` in variable v's domain, as `_value` reads each (a name first, else
        an index), or None where one is neither."""
        positions, domain = self.positions[v], self.variables[v].domain
        found = [positions.get(t, -1) for t in texts]
        for i, t in enumerate(texts):
            if found[i] < 0:
                if not (t.isascii() and t.isdigit() and len(t) <= 18 and int(t) < domain):
                    return None
                found[i] = int(t)
        return np.array(found, dtype=np.intp)

    def _value(self, atom, v: int, name: str) -> int:
        var = self.variables[v]
        if isinstance(atom, Atom):
            if atom.text in self.positions[v]:
                return self.positions[v][atom.text]
            if re.fullmatch(r"\d{1,18}", atom.text) and int(atom.text) < var.domain:
                return int(atom.text)
        text = atom.text if isinstance(atom, Atom) else "{...}"
        raise self.error(atom, f"cost function {name}: value {text} is not in the domain of variable {var.name}")


def write_cfn(problem: Problem, path: str | Path) -> None:
    """toulbar2's CFN: named variables and values (when the model has them), dense cost lists,
    `mustbe` "<top" (or ">bound" when maximising, see `_cfn_bound`), forbidden entries as `inf`, the
    offset as a 0-ary function, AllDifferents left out of the tables as toulbar2's `salldiff` (or
    `alldiff` with excepted values); ValueError for one toulbar2 cannot express (values other than the
    domain indices, a soft one with excepted values, any when maximising: toulbar2 takes no negative
    violation cost)."""
    if not problem.integer:
        raise ValueError(".cfn is written for integer costs: write this problem as .uai")
    globals_ = [g for g in problem.globals if not g.tabled]
    if globals_ and problem.sense < 0:
        raise ValueError("toulbar2 reads no AllDifferent in a maximisation .cfn")

    def cost(internal: int) -> _Number:
        """An internal cost as the file states it: utility when maximising, with the file's decimals,
        exact (digits moved, never a float)."""
        value = problem.sense * int(internal)
        if not problem.precision:
            return _Number(value)
        digits = str(abs(value)).rjust(problem.precision + 1, "0")
        return _Number(f"{'-' if value < 0 else ''}{digits[:-problem.precision]}.{digits[-problem.precision:]}")

    bound = cost(_cfn_bound(problem))
    names: list[str] = []
    for i, v in enumerate(problem.variables):  # CFN names scopes by variable name: unique and plain
        names.append(v.name if _plain(v.name) and v.name not in names else f"x{i}_")
    variables = {n: list(v.labels) if v.labels and all(_plain(x) for x in v.labels) else v.domain
                 for n, v in zip(names, problem.variables)}
    functions = {}
    for k, f in enumerate(problem.functions):
        functions[f"f{k}"] = {"scope": [names[v] for v in f.scope],
                              "costs": [cost(c) if c < problem.top else "inf" for c in f.table.reshape(-1)]}
    for k, g in enumerate(globals_):
        functions[f"g{k}"] = {"scope": [names[v] for v in g.scope], **_cfn_global(g, problem, cost)}
    if problem.offset:
        functions["offset"] = {"scope": [], "costs": [cost(int(problem.offset))]}
    doc = {"problem": {"name": problem.name if _plain(problem.name) else "problem",
                       "mustbe": ("<" if problem.sense > 0 else ">") + bound},
           "variables": variables, "functions": functions}
    with open_text(path) as out:
        out.write(_json(doc) + "\n")


class _Number(str):
    """A cost's decimal text, written as a JSON number."""


def _json(value) -> str:
    """Compact JSON where costs (_Number) keep their exact decimal text (json's floats would not)."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{_json(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_json(v) for v in value) + "]"
    return str(value) if isinstance(value, _Number) else json.dumps(value)


def _plain(name: str) -> bool:
    """Whether CFN can carry `name` as a string: not number-like, no delimiters or blanks."""
    return bool(name) and name[0] not in "0123456789-.+" and not any(c in name for c in '/#[]{}" \t\n,:')


def _cfn_global(g, problem: Problem, cost) -> dict:
    """The `type` and `params` of AllDifferent `g`; `cost` writes an internal cost as the file does."""
    expressible(g, problem.top, ".cfn")
    if g.exempt:
        return {"type": "alldiff", "params": {"exceptedvalues": sorted(int(v) for v in g.exempt), "deltacosts": []}}
    return {"type": "salldiff", "params": {"metric": g.semantics, "cost": "inf" if g.cost >= problem.top
                                           else cost(g.cost)}}


def _cfn_bound(problem: Problem) -> int:
    """The internal bound written in `mustbe`: top + offset. toulbar2 reads a bound strictly between -1
    and 0 as its opposite (the integer part "-0" loses the sign); such a bound is moved to the integer
    on its loose side when no total of finite costs reaches top (the forbidden entries are `inf`), and
    refused otherwise."""
    bound, unit = int(problem.top) + int(problem.offset), 10 ** problem.precision
    if not -unit < problem.sense * bound < 0:
        return bound
    reach = sum(int(np.max(f.table, where=f.table < problem.top, initial=0)) for f in problem.functions)
    reach += sum(int(g.cost) * g.worst() for g in problem.globals if not g.tabled and g.cost < problem.top)
    if reach >= problem.top:
        raise ValueError(f"toulbar2 cannot read this .cfn's bound ({problem.sense * bound / unit}: between -1 and 0)")
    return 0 if problem.sense > 0 else unit
