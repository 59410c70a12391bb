"""toulbar2's CFN reader (.cfn, the format toulbar2 documents first).

A JSON-like object `{problem: {name, mustbe}, variables: {...}, functions: {...}}`
with toulbar2's freedoms: unquoted strings, optional commas and colons, `{}`
and `[]` interchangeable, `#` comment lines. `mustbe` is `<UB` (minimise; a
total cost >= UB is forbidden) or `>LB` (maximise; <= LB forbidden); its
decimals set the precision of every cost (finer costs are truncated, as
toulbar2 does). Variables carry value names or a
domain size; functions are dense cost lists, sparse `defaultcost` + tuples
(value names or indices), or the table of a function defined later in the
file, named in place of the costs (toulbar2 reads a reference to an earlier
one as no function at all; we refuse it).
Global and arithmetic functions (`type`) are not supported. What the file
declares is charged to the reading budget before it is allocated (tables.charge):
the tokens line by line, the variables, and every table, sparse ones and
references made dense only once the whole file is charged.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpusolve.model.problem import MAX_TOP, CostFunction, ModelError, Problem, Variable, finalize_integer

from .errors import ParseError, quote
from .source import read_lines, split_compression
from .tables import FUNCTION_BYTES, VARIABLE_BYTES, Listed, charge, too_large

TOKEN = re.compile(r'"([^"]*)"|([{}\[\]])|([^\s{}\[\]",:]+)')
NUMBER = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)")  # linear: no two ways to split the digits
MAX_DECIMALS = 18
# What the tree keeps per token (the Atom, its text, the list entry: ~150 bytes measured with
# tracemalloc), and a value name's index entry later.
TOKEN_BYTES = 192


@dataclass
class Atom:
    text: str
    line: int
    quoted: bool = False


@dataclass
class Group:
    items: list
    line: int


def read(path: str | Path) -> Problem:
    root = _tree(path)
    return _Reader(path).problem(root)


def _tree(path) -> Group:
    """The nested groups of the file; `{}` and `[]` both open a group, as toulbar2 allows."""
    stack = [Group([], 1)]
    for lineno, text in enumerate(read_lines(path), 1):
        if text.startswith("#"):
            continue
        count = 0
        for count, m in enumerate(TOKEN.finditer(text), 1):
            quoted, bracket, word = m.groups()
            if bracket in ("{", "["):
                stack.append(Group([], lineno))
            elif bracket:
                if len(stack) == 1:
                    raise ParseError(path, lineno, f"unbalanced {bracket!r}")
                group = stack.pop()
                stack[-1].items.append(group)
            else:
                stack[-1].items.append(Atom(quoted if quoted is not None else word, lineno, quoted is not None))
        message = charge(count * TOKEN_BYTES, f"{count:,} tokens")  # checked line by line: a line's worth late
        if message:
            raise ParseError(path, lineno, message)
    if len(stack) > 1:
        raise ParseError(path, stack[-1].line, "unclosed '{' or '[' opened here")
    if len(stack[0].items) != 1 or not isinstance(stack[0].items[0], Group):
        raise ParseError(path, 1, "a CFN file holds one object {problem, variables, functions}")
    return stack[0].items[0]


class _Reader:
    def __init__(self, path):
        self.path = path
        self.precision = 0
        self.maximize = False

    def error(self, where, message: str) -> ParseError:
        return ParseError(self.path, where.line if where is not None else None, message)

    def _fields(self, group: Group, keys: tuple[str, ...], what: str) -> dict:
        """A keyed object (`key value ...`, keys in this order, some optional) or the values alone."""
        items = group.items
        if items and isinstance(items[0], Atom) and items[0].text in keys and len(items) % 2 == 0:
            out = {}
            for k, v in zip(items[::2], items[1::2]):
                if not isinstance(k, Atom) or k.text not in keys:
                    raise self.error(k, f"{what}: unexpected field {quote(getattr(k, 'text', '{...}'))} "
                                        f"(expected {', '.join(keys)})")
                out[k.text] = v
            return out
        return dict(zip(keys, items))

    def problem(self, root: Group) -> Problem:
        parts = self._fields(root, ("problem", "variables", "functions"), "CFN")
        for key in ("problem", "variables", "functions"):
            if not isinstance(parts.get(key), Group):
                raise self.error(root, f"missing or malformed {key!r} object")
        name, top = self._header(parts["problem"])
        variables = self._variables(parts["variables"])
        self.names = {v.name: i for i, v in enumerate(variables)}
        self.variables = variables
        self.positions = [{label: i for i, label in enumerate(v.labels or ())} for v in variables]
        functions, offset = self._functions(parts["functions"])
        problem = Problem(name, variables, functions, integer=True, offset=offset,
                          sense=-1 if self.maximize else 1, task="WCSP", precision=self.precision)
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
        """A file cost (utility when maximising) as an internal integer at the file's precision."""
        if not isinstance(atom, Atom) or not NUMBER.fullmatch(atom.text):
            text = atom.text if isinstance(atom, Atom) else "{...}"
            raise self.error(atom, f"expected a {what} (a decimal number), found {quote(text)}")
        whole, _, fraction = atom.text.lstrip("+-").partition(".")
        # the decimals beyond the precision are cut off, as toulbar2 does, on the digits themselves: no
        # arithmetic that rounds (Decimal keeps 28 digits) or wraps
        digits = (whole + fraction[:self.precision].ljust(self.precision, "0")).lstrip("0") or "0"
        if len(digits) > len(str(MAX_TOP)) or int(digits) > MAX_TOP:
            raise self.error(atom, f"{what} {atom.text} out of range (|cost| * 10^precision <= 2^62)")
        scaled = -int(digits) if atom.text.startswith("-") else int(digits)
        return -scaled if self.maximize else scaled

    def _variables(self, group: Group) -> list[Variable]:
        items = group.items
        named = bool(items) and isinstance(items[0], Atom) and not NUMBER.fullmatch(items[0].text)
        pairs = zip(items[::2], items[1::2]) if named else ((None, d) for d in items)
        if named and len(items) % 2:
            raise self.error(items[-1], "variable without a domain")
        count = len(items) // 2 if named else len(items)
        self._charge(group, count * VARIABLE_BYTES, f"{count:,} variables")
        variables: list[Variable] = []
        seen: set[str] = set()
        for i, (key, domain) in enumerate(pairs):
            name = key.text if key is not None else str(i)
            if name in seen:
                raise self.error(key, f"variable {name} defined twice")
            seen.add(name)
            if isinstance(domain, Group):
                labels = tuple(self._label(a, name) for a in domain.items)
                if len(set(labels)) != len(labels):
                    raise self.error(domain, f"variable {name} lists a value twice")
                size = len(labels)
            else:
                labels, size = None, self._int(domain, f"domain size of variable {name}")
                if size < 0:
                    raise self.error(domain, f"interval variable {name} (domain size {size}) is not supported")
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

    def _functions(self, group: Group) -> tuple[list[CostFunction], int]:
        items = group.items
        named = bool(items) and isinstance(items[0], Atom)
        if named and len(items) % 2:
            raise self.error(items[-1], "cost function name without a definition")
        pairs = list(zip(items[::2], items[1::2])) if named else [(None, b) for b in items]
        declared: list[tuple[tuple[int, ...], np.ndarray | Listed]] = []  # (scope, table) in file order
        by_name: dict[str, int] = {}  # a function's name -> its place in `declared`
        references: list[tuple[tuple[int, ...], Atom, int]] = []  # (scope, name, functions declared before)
        offset = 0
        for k, (key, body) in enumerate(pairs):
            name = key.text if key is not None else f"f{k}"
            if not isinstance(body, Group):
                raise self.error(body, f"cost function {name}: expected {{scope ... costs ...}}")
            fields = self._fields(body, ("scope", "defaultcost", "type", "costs", "params"), f"cost function {name}")
            if "type" in fields or "params" in fields:
                kind = fields.get("type")
                raise self.error(body, f"cost function {name}: global or arithmetic functions "
                                       f"({kind.text if isinstance(kind, Atom) else 'type'}) are not supported")
            scope = self._scope(fields.get("scope"), name, body)
            self._charge(body, FUNCTION_BYTES, f"cost function {name}")
            costs = fields.get("costs")
            if isinstance(costs, Atom):  # the table of the function of that name, defined later
                self._shape(scope, costs, name)  # charges the copy
                references.append((scope, costs, len(declared)))
                continue
            if not isinstance(costs, Group):
                raise self.error(body, f"cost function {name}: no costs")
            if not scope:
                if len(costs.items) != 1:
                    raise self.error(costs, f"cost function {name}: a constant has one cost")
                offset += self.cost(costs.items[0])
                continue
            by_name[name] = len(declared)
            declared.append((scope, self._table(scope, fields.get("defaultcost"), costs, name)))
        sources = [self._reference(scope, ref, before, by_name, declared) for scope, ref, before in references]
        # every table is charged: now they are made
        tables = [table.table() if isinstance(table, Listed) else table for _, table in declared]
        functions = [CostFunction(scope, table) for (scope, _), table in zip(declared, tables)]
        functions += [CostFunction(scope, tables[i].copy()) for (scope, _, _), i in zip(references, sources)]
        return functions, offset

    def _reference(self, scope, ref: Atom, before: int, by_name: dict[str, int], declared) -> int:
        """The place in `declared` of the function whose table `ref` names."""
        if ref.text not in by_name:
            raise self.error(ref, f"shared cost table {quote(ref.text)} is not a cost function of this file")
        place = by_name[ref.text]
        if place < before:
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

    def _scope(self, group, name: str, body: Group) -> tuple[int, ...]:
        if not isinstance(group, Group):
            raise self.error(body, f"cost function {name}: no scope")
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

    def _table(self, scope, default, costs: Group, name: str) -> np.ndarray | Listed:
        """A dense table as listed, or the default and tuples of a sparse one (made dense once all are
        charged)."""
        shape = self._shape(scope, costs, name)
        entries = costs.items
        if default is None:  # dense: every tuple in lexicographic order
            if len(entries) != math.prod(shape):
                raise self.error(costs, f"cost function {name}: {len(entries)} costs, expected "
                                        f"{math.prod(shape)} for domain sizes {shape}")
            return np.fromiter((self.cost(a) for a in entries), dtype=np.int64, count=len(entries)).reshape(shape)
        width = len(scope) + 1
        if len(entries) % width:
            raise self.error(costs, f"cost function {name}: {len(entries)} entries are not tuples of "
                                    f"{len(scope)} values and a cost")
        default_cost = self.cost(default, "default cost")
        rows = np.empty((len(entries) // width, len(scope)), dtype=np.intp)
        values = np.empty(len(entries) // width, dtype=np.int64)
        for r in range(len(rows)):
            chunk = entries[r * width:(r + 1) * width]
            for c, v in enumerate(scope):
                rows[r, c] = self._value(chunk[c], v, name)
            values[r] = self.cost(chunk[-1])
        return Listed(shape, default_cost, rows, values)

    def _value(self, atom, v: int, name: str) -> int:
        var = self.variables[v]
        if isinstance(atom, Atom):
            if atom.text in self.positions[v]:
                return self.positions[v][atom.text]
            if re.fullmatch(r"\d{1,18}", atom.text) and int(atom.text) < var.domain:
                return int(atom.text)
        text = atom.text if isinstance(atom, Atom) else "{...}"
        raise self.error(atom, f"cost function {name}: value {text} is not in the domain of variable {var.name}")
