"""FlatZinc reader (`.fzn`): what MiniZinc flattens an AllDifferent model into.

Read: parameters (`int: n = 5;`, arrays of int), `var` integers with a domain (`1..8`,
`{1,3,5}`) or `bool`, arrays of variables, the constraints `int_eq`, `int_ne`, `int_le`,
`int_lt`, `int_lin_eq`, `int_lin_le`, `int_lin_ne`, `all_different_int` (also as
`fzn_all_different_int`), and `solve satisfy | minimize x | maximize x`. Annotations are
ignored. A linear constraint becomes a table over its variables (refused beyond
tables.MAX_LINEAR entries), an all_different_int a model.AllDifferent. Anything else is
refused with the constraint's name and line; `var int` without a domain too.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from gpusolve.model.problem import FORBIDDEN, AllDifferent, CostFunction, Problem, Variable

from .errors import ParseError, quote
from .source import read_lines
from .tables import COMPARE, ENTRY_BYTES, INT64_MAX, CP_VARIABLE_BYTES, Labels, charge, constraint_problem, \
    exact_costs, linear_sum

ANNOTATION = re.compile(r"::\s*[\w]+(\s*\((?:[^()]|\([^()]*\))*\))?")
VAR = re.compile(r"var\s+(.+?)\s*:\s*(\w+)\s*(?:=\s*(.+))?", re.S)
ARRAY = re.compile(r"array\s*\[\s*(\d+)\s*\.\.\s*(\d+)\s*\]\s*of\s+(var\s+)?(.+?)\s*:\s*(\w+)\s*(?:=\s*(.+))?", re.S)
PARAM = re.compile(r"(int|bool)\s*:\s*(\w+)\s*=\s*(.+)", re.S)
CONSTRAINT = re.compile(r"constraint\s+(\w+)\s*\((.*)\)", re.S)
SOLVE = re.compile(r"solve\s+(satisfy|minimize|maximize)\s*(.*)", re.S)
LINEAR = {"int_lin_eq": "eq", "int_lin_le": "le", "int_lin_ne": "ne"}
BINARY = {"int_eq": "eq", "int_ne": "ne", "int_le": "le", "int_lt": "lt"}
ALLDIFF = ("all_different_int", "fzn_all_different_int")


def read(path: str | Path) -> Problem:
    return _Reader(path).read()


class _Reader:
    def __init__(self, path):
        self.path = path
        self.line = None
        self.variables: list[Variable] = []
        self.values: list[np.ndarray] = []
        self.names: dict[str, object] = {}  # name -> variable index | int | list (array)
        self.functions: list[CostFunction] = []
        self.globals: list[AllDifferent] = []
        self.sense = 1

    def error(self, message: str) -> ParseError:
        return ParseError(self.path, self.line, message)

    def read(self) -> Problem:
        for self.line, item in _items(self.path):
            item = ANNOTATION.sub("", item).strip()
            if item.startswith("predicate"):
                raise self.error(f"predicate declarations are not supported: {item.split('(')[0]}")
            if item.startswith("constraint"):
                self._constraint(item)
            elif item.startswith("solve"):
                self._solve(item)
            elif item.startswith("array"):
                self._array(item)
            elif item.startswith("var"):
                self._var(item)
            else:
                self._param(item)
        return constraint_problem(self.path, self.variables, self.functions, self.sense, self.globals)

    # --- declarations -------------------------------------------------------------------------
    def _domain(self, text: str) -> np.ndarray:
        text = text.strip()
        if text == "bool":
            return np.array([0, 1], dtype=np.int64)
        m = re.fullmatch(r"(-?\d+)\s*\.\.\s*(-?\d+)", text)
        if m:
            low, high = self._value(int(m[1])), self._value(int(m[2]))
            if high < low:
                raise self.error(f"empty domain {text}")
            if high - low >= 1 << 24:
                raise self.error(f"domain {text} too large (at most 2^24 values)")
            self._charge((high - low + 1) * ENTRY_BYTES, f"a domain of {high - low + 1:,} values")
            return np.arange(low, high + 1, dtype=np.int64)
        m = re.fullmatch(r"\{([^}]*)\}", text)
        if m:
            vals = [self._value(self._int(w)) for w in m[1].split(",") if w.strip()]
            if not vals:
                raise self.error("empty domain {}")
            return np.unique(np.array(vals, dtype=np.int64))
        if text == "int":
            raise self.error("var int without a domain is not supported (bounded domains only)")
        raise self.error(f"variable type {text} is not supported (int domains and bool)")

    def _value(self, x: int) -> int:
        """x, when it is a 64-bit integer: the values of variables are int64."""
        if not -INT64_MAX - 1 <= x <= INT64_MAX:
            raise self.error(f"value {x} beyond 64-bit integers")
        return x

    def _charge(self, need: int, what: str, kept: int | None = None) -> None:
        message = charge(need, what, kept)
        if message:
            raise self.error(message)

    def _new(self, name: str, dom: np.ndarray) -> int:
        """A variable, charged to the reading budget first; variables of one domain share its labels."""
        self._charge(CP_VARIABLE_BYTES, f"variable {name}")
        self.variables.append(Variable(name, len(dom), Labels(dom)))
        self.values.append(dom)
        return len(self.variables) - 1

    def _var(self, item: str) -> None:
        m = VAR.fullmatch(item)
        if not m:
            raise self.error(f"cannot read the variable declaration {item[:40]!r}")
        dom, name, value = m[1], m[2], m[3]
        if name in self.names:
            raise self.error(f"{name} declared twice")
        if value is not None:  # an alias of another variable, or fixed to a constant
            target = self._term(value)
            if isinstance(target, tuple):
                self.names[name] = self._new(name, np.array([self._value(target[1])], dtype=np.int64))
                self._unary(self.names[name], self._domain(dom))
            elif isinstance(target, int):
                self.names[name] = target
                self._unary(target, self._domain(dom))
            else:
                raise self.error(f"variable {name} cannot equal an array")
            return
        self.names[name] = self._new(name, self._domain(dom))

    def _unary(self, v: int, allowed: np.ndarray) -> None:
        """Only `allowed` values for v (a declaration's domain on an alias or a constant)."""
        table = np.where(np.isin(self.values[v], allowed), 0, FORBIDDEN).astype(np.int64)
        self.functions.append(CostFunction((v,), table))

    def _array(self, item: str) -> None:
        m = ARRAY.fullmatch(item)
        if not m:
            raise self.error(f"cannot read the array declaration {item[:40]!r}")
        low, high, is_var, kind, name, value = int(m[1]), int(m[2]), m[3], m[4], m[5], m[6]
        if value is None:
            if not is_var:
                raise self.error(f"parameter array {name} has no value")
            dom = self._domain(kind)
            self._charge((high - low + 1) * CP_VARIABLE_BYTES, f"array {name} of {high - low + 1:,} variables", kept=0)
            self.names[name] = [self._new(f"{name}[{i}]", dom) for i in range(low, high + 1)]
            return
        entries = self._list(value)
        if len(entries) != high - low + 1:
            raise self.error(f"array {name} declares {high - low + 1} entries, lists {len(entries)}")
        self.names[name] = entries

    def _param(self, item: str) -> None:
        m = PARAM.fullmatch(item)
        if not m:
            raise self.error(f"cannot read {item[:40]!r}")
        self.names[m[2]] = self._term(m[3].strip())

    # --- terms: a variable index, ("c", value) for a constant, or a list of them ----------------
    def _int(self, text: str) -> int:
        text = text.strip()
        if text in ("true", "false"):
            return int(text == "true")
        try:
            return int(text)
        except ValueError:
            raise self.error(f"expected an integer, found {quote(text)}") from None

    def _term(self, text: str):
        text = text.strip()
        if text.startswith("["):
            return self._list(text)
        m = re.fullmatch(r"(\w+)\s*\[\s*(\d+)\s*\]", text)
        if m:
            arr = self.names.get(m[1])
            if not isinstance(arr, list) or not 1 <= int(m[2]) <= len(arr):
                raise self.error(f"{text}: no such array entry")
            return arr[int(m[2]) - 1]
        if re.fullmatch(r"-?\d+|true|false", text):
            return ("c", self._int(text))
        if text not in self.names:
            raise self.error(f"unknown identifier {text}")
        return self.names[text]

    def _list(self, text: str) -> list:
        text = text.strip()
        if not (text.startswith("[") and text.endswith("]")):
            term = self._term(text)
            if not isinstance(term, list):
                raise self.error(f"{text} is not an array")
            return term
        inner = text[1:-1].strip()
        return [self._term(w) for w in inner.split(",")] if inner else []

    def _const(self, term) -> int:
        if not isinstance(term, tuple):
            raise self.error("an integer constant is expected, not a variable or an array")
        return term[1]

    def _as_var(self, term) -> int:
        """A variable index; a constant in a scope becomes a variable of one value."""
        if isinstance(term, list):
            raise self.error("an array where a variable is expected")
        if isinstance(term, tuple):
            return self._new(f"const{term[1]}", np.array([self._value(term[1])], dtype=np.int64))
        return term

    # --- constraints and objective ------------------------------------------------------------
    def _constraint(self, item: str) -> None:
        m = CONSTRAINT.fullmatch(item)
        if not m:
            raise self.error(f"cannot read the constraint {item[:40]!r}")
        name, args = m[1], _split_args(m[2])
        if name in LINEAR:
            if len(args) != 3:
                raise self.error(f"{name} takes 3 arguments")
            coeffs = [self._const(t) for t in self._list(args[0])]
            self._compare(LINEAR[name], coeffs, self._list(args[1]), self._const(self._term(args[2])))
        elif name in BINARY:
            if len(args) != 2:
                raise self.error(f"{name} takes 2 arguments")
            self._compare(BINARY[name], [1, -1], [self._term(args[0]), self._term(args[1])], 0)
        elif name in ALLDIFF:
            scope = [self._as_var(t) for t in self._list(args[0])]
            if len(set(scope)) != len(scope):
                raise self.error(f"{name} lists a variable twice")
            self.globals.append(AllDifferent(tuple(scope), tuple(self.values[v] for v in scope), FORBIDDEN))
        else:
            raise self.error(f"constraint {name} is not supported (read: {', '.join([*LINEAR, *BINARY, *ALLDIFF])})")

    def _compare(self, op: str, coeffs: list[int], terms: list, rhs: int) -> None:
        """sum coeffs * terms <op> rhs as a table over the variables (constants moved right)."""
        merged: dict[int, int] = {}
        for a, t in zip(coeffs, terms, strict=True):
            if isinstance(t, tuple):  # a constant
                rhs -= a * t[1]
            else:
                merged[t] = merged.get(t, 0) + a
        if not merged:
            if not COMPARE[op](0, rhs):
                self.functions.append(CostFunction((), np.array(FORBIDDEN, dtype=np.int64)))
            return
        total = linear_sum([self.values[v] for v in merged], list(merged.values()))
        if isinstance(total, str):
            raise self.error(total)
        self.functions.append(CostFunction(tuple(merged), np.where(COMPARE[op](total, rhs), 0, FORBIDDEN)))

    def _solve(self, item: str) -> None:
        m = SOLVE.fullmatch(item)
        if not m:
            raise self.error(f"cannot read {item[:40]!r}")
        if m[1] == "satisfy":
            return
        term = self._term(m[2])
        if not isinstance(term, int):
            raise self.error("the objective must be a variable")
        self.sense = 1 if m[1] == "minimize" else -1
        costs = exact_costs(self.values[term], self.sense)
        if isinstance(costs, str):
            raise self.error(costs)
        self.functions.append(CostFunction((term,), costs))


def _items(path):
    """(line, text) of each `;`-terminated item, comments (`%` to the end of a line) removed."""
    buffer, start = [], None
    for number, line in enumerate(read_lines(path), 1):
        line = line.split("%", 1)[0]
        while ";" in line:
            head, line = line.split(";", 1)
            buffer.append(head)
            text = " ".join(buffer).strip()
            if text:
                yield (start or number), text
            buffer, start = [], None
        if line.strip():
            buffer.append(line)
            start = start or number
    if " ".join(buffer).strip():
        raise ParseError(path, start, "the last item is not ended by ';'")


def _split_args(text: str) -> list[str]:
    """Top-level comma-separated arguments (commas inside [..], {..}, (..) kept)."""
    out, depth, current = [], 0, []
    for ch in text:
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(current))
            current = []
        else:
            current.append(ch)
    if "".join(current).strip():
        out.append("".join(current))
    return out
