"""XCSP 2.1 reader for extensional instances, including FRODO's DCOP flavour.

A root `<instance format="XCSP3">` is handed to xcsp3.py; any other format is refused.

Supported: domains (`0..9`, value lists, mixes), variables (a FRODO `agent`
is kept as the variable's agent, for `gpusolve dcop`), relations with
semantics `soft` (`cost:tuple|tuple|cost:tuple`, a cost applying to the
following tuples until the next one; `defaultCost`; `infinity`), `supports`
and `conflicts`, and constraints referencing them.
`maximalCost` is the forbidden threshold (like a wcsp ub) and `initialCost`
a constant. FRODO's `<presentation maximize="true">` turns utilities u into
costs -u with sense -1. Intensional predicates/functions and global
constraints are refused.

The XML is streamed (a pull parser fed line by line, entries dropped once
read), so large files never become a whole tree, and each element's line is
known for error messages.
"""
from __future__ import annotations

import itertools
import re
import xml.etree.ElementTree as ET
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from xml.parsers import expat

import numpy as np

from gpusolve.model.problem import FORBIDDEN, CostFunction, ModelError, Problem, Variable, finalize_integer

from .errors import ParseError, quote
from .source import read_lines, split_compression
from .tables import assign_tuples, too_large

MAX_COST = 1 << 62  # |cost| accepted from the file
MAX_DOMAIN = 1 << 24  # values per domain; tables over big domains are refused anyway
SECTIONS = {"domains": "nbDomains", "variables": "nbVariables", "relations": "nbRelations",
            "constraints": "nbConstraints"}  # section -> attribute announcing its size
INTERVAL = re.compile(r"(-?\d+)\.\.(-?\d+)")
TOKEN = re.compile(r"[^\s|:]+|[|:]")


class Values(Sequence):
    """A domain's values in file order, integer intervals kept as ranges: a domain that no table
    uses costs no memory however large. `get(key)` is the position of a value key (int or str)."""

    def __init__(self, parts: list):
        self.parts = parts
        self.starts = list(itertools.accumulate((len(p) if isinstance(p, range) else 1 for p in parts), initial=0))
        self.single = {_key(p): i for p, i in zip(parts, self.starts) if isinstance(p, str)}
        spans = sorted((p.start, p.stop) for p in parts if isinstance(p, range))
        self.repeated = len(self.single) < sum(isinstance(p, str) for p in parts) \
            or any(a[1] > b[0] for a, b in zip(spans, spans[1:])) \
            or any(isinstance(k, int) and self._in_range(k) is not None for k in self.single)

    def __len__(self) -> int:
        return self.starts[-1]

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and len(other) == len(self) and all(a == b for a, b in zip(self, other))

    __hash__ = object.__hash__  # Variables are hashed by identity of their values, never expanded

    def __getitem__(self, i: int) -> str:
        if not 0 <= i < len(self):
            raise IndexError(i)
        k = bisect_right(self.starts, i) - 1
        part = self.parts[k]
        return str(part[i - self.starts[k]]) if isinstance(part, range) else part

    def _in_range(self, key: int) -> int | None:
        for part, start in zip(self.parts, self.starts):
            if isinstance(part, range) and key in part:
                return start + key - part.start
        return None

    def get(self, key) -> int | None:
        if key in self.single:
            return self.single[key]
        return self._in_range(key) if isinstance(key, int) else None


@dataclass
class Domain:
    labels: Values
    index: Values  # value key (int, or str for non-numeric values) -> position, by .get


@dataclass
class Relation:
    arity: int
    default: int  # internal cost of tuples not listed (FORBIDDEN for forbidden)
    tuples: list[tuple]  # value keys
    costs: np.ndarray  # internal int64 cost of each listed tuple


class _Xcsp3(Exception):
    """The root says format="XCSP3": the file goes to the XCSP3 reader."""


def read(path: str | Path) -> Problem:
    """An XCSP 2.1 instance, or an XCSP3 one (handed to xcsp3.py); any other XML is refused."""
    reader = _Reader(path)
    parser = ET.XMLPullParser(events=("start", "end"))
    try:
        for line, chunk in enumerate(read_lines(path, binary=True), 1):
            parser.feed(chunk)
            for event, elem in parser.read_events():
                reader.handle(event, elem, line)
        parser.close()
    except ET.ParseError as err:
        raise ParseError(path, err.position[0], f"malformed XML: {expat.ErrorString(err.code)}") from None
    except _Xcsp3:
        from .xcsp3 import read as read_xcsp3
        return read_xcsp3(path)
    return reader.finish()


def _key(text: str):
    """Domain values and tuple entries compare as integers when they are integers."""
    try:
        return int(text)
    except ValueError:
        return text


class _Reader:
    """Builds the problem from pull-parser events; sections must come in XCSP order."""

    def __init__(self, path):
        self.path = path
        self.name = split_compression(path)[0].removesuffix(".xml")
        self.maximize = False
        self.domains: dict[str, Domain] = {}
        self.variables: list[Variable] = []
        self.var_index: dict[str, int] = {}
        self.var_domain: list[str] = []
        self.relations: dict[str, Relation] = {}
        self.functions: list[CostFunction] = []
        self.top: int | None = None
        self.offset = 0
        self.tables: dict[tuple, np.ndarray] = {}  # (relation, domain names) -> table
        self.open: list[tuple[ET.Element, int]] = []  # elements being read, with their start line
        self.declared: dict[str, tuple[int, int]] = {}  # section -> (announced count, line)
        self.entries = {"domain": self._domain, "variable": self._variable, "relation": self._relation,
                        "constraint": self._constraint}  # read when their element ends

    def error(self, line, message) -> ParseError:
        return ParseError(self.path, line, message)

    def handle(self, event: str, elem: ET.Element, line: int) -> None:
        tag = elem.tag.rpartition("}")[2]
        if event == "start":
            self._start(tag, elem, line)
            self.open.append((elem, line))
            return
        _, line = self.open.pop()
        if tag in self.declared:
            self._check_count(tag)
        entry = self.entries.get(tag)
        if entry:
            entry(elem, line)
            del self.open[-1][0][:]  # drop entries once read, so memory stays flat on big files

    def _start(self, tag: str, elem: ET.Element, line: int) -> None:
        if not self.open:
            if tag != "instance":
                raise self.error(line, f"not an XCSP instance: the root element is <{tag}>, not <instance>")
            fmt = elem.get("format")
            if fmt is not None and fmt.replace(" ", "").upper() == "XCSP3":
                raise _Xcsp3
            if fmt is not None:
                raise self.error(line, f"unknown XCSP format {quote(fmt)} (XCSP 2.1 or XCSP3 are read)")
        elif tag in ("predicates", "functions"):
            raise self.error(line, f"intensional constraints (<{tag}>) are not supported")
        elif tag == "presentation":
            self._presentation(elem, line)
        elif tag in SECTIONS:
            if SECTIONS[tag] in elem.attrib:
                self.declared[tag] = (self._int(elem, SECTIONS[tag], line), line)
            if tag == "constraints":
                self._costs(elem, line)

    def _attr(self, elem: ET.Element, name: str, line: int) -> str:
        value = elem.get(name)
        if value is None:
            raise self.error(line, f"<{elem.tag}> lacks the {name} attribute")
        return value

    def _int(self, elem: ET.Element, name: str, line: int) -> int:
        text = self._attr(elem, name, line)
        try:
            return int(text)
        except ValueError:
            raise self.error(line, f"{name}={quote(text)} is not an integer") from None

    def _check_count(self, section: str) -> None:
        announced, line = self.declared.pop(section)
        found = {"domains": len(self.domains), "variables": len(self.variables),
                 "relations": len(self.relations), "constraints": len(self.functions)}[section]
        if announced != found:
            raise self.error(line, f"<{section}> announces {announced} entries, found {found}")

    def _presentation(self, elem: ET.Element, line: int) -> None:
        if self.relations:
            raise self.error(line, "<presentation> must come before the relations")
        fmt = elem.get("format")
        if fmt is not None and not fmt.replace(" ", "").upper().startswith("XCSP2.1"):
            raise self.error(line, f"<presentation format={quote(fmt)}>: only XCSP 2.1 (or XCSP3) is read")
        maximize = elem.get("maximize", "false").lower()
        if maximize not in ("true", "false"):
            raise self.error(line, f"maximize={quote(maximize)} is neither true nor false")
        self.maximize = maximize == "true"
        if elem.get("type", "").upper() == "QCSP":
            raise self.error(line, "quantified CSPs (QCSP) are not supported")
        self.name = elem.get("name") or self.name

    def _costs(self, elem: ET.Element, line: int) -> None:
        """`maximalCost` (forbidden threshold) and `initialCost` (a constant) of <constraints>."""
        top = elem.get("maximalCost")
        if top is not None and top != "infinity":
            if self.maximize:
                raise self.error(line, "maximalCost is not supported with maximize=\"true\"")
            self.top = self._int(elem, "maximalCost", line)
            if self.top < 0:
                raise self.error(line, f"maximalCost {self.top} is negative")
        if "initialCost" in elem.attrib:
            initial = self._cost(self._attr(elem, "initialCost", line), line)
            if initial == FORBIDDEN:
                raise self.error(line, "initialCost must be finite")
            self.offset += initial

    def _cost(self, text: str, line: int) -> int:
        """A cost (or, when maximising, a utility) from the file, as an internal cost."""
        if text.lstrip("+-") == "infinity":
            if text.startswith("-") == self.maximize:
                return FORBIDDEN
            goal = "maximising" if self.maximize else "minimising"
            raise self.error(line, f"{text} is the best possible value when {goal}, not a cost")
        try:
            value = int(text)
        except ValueError:
            raise self.error(line, f"cost {quote(text)} is not an integer") from None
        if abs(value) > MAX_COST:
            raise self.error(line, f"cost {value} out of range (|cost| <= 2^62)")
        return -value if self.maximize else value

    def _domain(self, elem: ET.Element, line: int) -> None:
        name = self._attr(elem, "name", line)
        if name in self.domains:
            raise self.error(line, f"domain {name} defined twice")
        parts: list = []  # ranges for intervals (never expanded), labels for single values
        size = 0
        for token in (elem.text or "").split():
            match = INTERVAL.fullmatch(token)
            if match:
                low, high = int(match[1]), int(match[2])
                if low > high:
                    raise self.error(line, f"empty interval {token} in domain {name}")
                parts.append(range(low, high + 1))
            else:
                parts.append(str(_key(token)))
            size += len(parts[-1]) if isinstance(parts[-1], range) else 1
            if size > MAX_DOMAIN:
                raise self.error(line, f"domain {name} too large (limit 2^24 values)")
        labels = Values(parts)
        if labels.repeated:
            raise self.error(line, f"domain {name} lists a value twice")
        if not labels:
            raise self.error(line, f"domain {name} is empty")
        if "nbValues" in elem.attrib and self._int(elem, "nbValues", line) != len(labels):
            raise self.error(line, f"domain {name} announces {elem.get('nbValues')} values, found {len(labels)}")
        self.domains[name] = Domain(labels, labels)

    def _variable(self, elem: ET.Element, line: int) -> None:
        name = self._attr(elem, "name", line)
        domain = self._attr(elem, "domain", line)
        if name in self.var_index:
            raise self.error(line, f"variable {name} defined twice")
        if domain not in self.domains:
            raise self.error(line, f"unknown domain {domain} for variable {name}")
        if elem.get("type") == "random":
            raise self.error(line, f"random variable {name} is not supported")
        labels = self.domains[domain].labels
        self.var_index[name] = len(self.variables)
        self.variables.append(Variable(name, len(labels), labels, elem.get("agent")))
        self.var_domain.append(domain)

    def _relation(self, elem: ET.Element, line: int) -> None:
        name = self._attr(elem, "name", line)
        if name in self.relations:
            raise self.error(line, f"relation {name} defined twice")
        if len(elem):
            raise self.error(line, f"relation {name}: tagged (<tuple>) notation is not supported")
        arity = self._int(elem, "arity", line)
        if arity < 1:
            raise self.error(line, f"relation {name} has arity {arity}")
        semantics = self._attr(elem, "semantics", line)
        if semantics == "soft":
            listed = None
            default = self._cost(elem.get("defaultCost", "infinity" if not self.maximize else "-infinity"), line)
        elif semantics in ("supports", "conflicts"):
            listed = 0 if semantics == "supports" else FORBIDDEN
            default = FORBIDDEN if semantics == "supports" else 0
        else:
            raise self.error(line, f"relation {name}: unknown semantics {quote(semantics)}")
        tuples, costs = self._tuples(elem.text or "", line, name, arity, listed)
        if "nbTuples" in elem.attrib and self._int(elem, "nbTuples", line) != len(tuples):
            raise self.error(line, f"relation {name} announces {elem.get('nbTuples')} tuples, found {len(tuples)}")
        self.relations[name] = Relation(arity, default, tuples, np.array(costs, dtype=np.int64))

    def _tuples(self, text: str, line: int, name: str, arity: int, listed: int | None):
        """Parse `[cost:]v v|[cost:]v v|...`; `listed` is the cost of every tuple unless soft."""
        tuples: list[tuple] = []
        costs: list[int] = []
        current = listed
        values: list[str] = []
        pos = 0
        for match in TOKEN.finditer((text + "|") if text.strip() else ""):  # "|" ends the last tuple
            line += text.count("\n", pos, match.start())
            pos = match.start()
            token = match[0]
            if token == ":":
                if listed is not None:
                    raise self.error(line, f"relation {name}: costs are only allowed in soft relations")
                if len(values) != 1:
                    raise self.error(line, f"relation {name}: expected one cost before ':'")
                current = self._cost(values.pop(), line)
            elif token == "|":
                if len(values) != arity:
                    raise self.error(line, f"relation {name}: tuple of {len(values)} values, arity is {arity}")
                if current is None:
                    raise self.error(line, f"relation {name}: tuple without a cost")
                tuples.append(tuple(_key(v) for v in values))
                costs.append(current)
                values = []
            else:
                values.append(token)
        return tuples, costs

    def _constraint(self, elem: ET.Element, line: int) -> None:
        name = elem.get("name", "?")
        reference = self._attr(elem, "reference", line)
        if reference.startswith("global:"):
            raise self.error(line, f"global constraint {reference[7:]} is not supported")
        if reference not in self.relations:
            raise self.error(line, f"constraint {name}: unknown relation {reference}")
        relation = self.relations[reference]
        scope = []
        for var in self._attr(elem, "scope", line).split():
            if var not in self.var_index:
                raise self.error(line, f"constraint {name}: unknown variable {var}")
            if self.var_index[var] in scope:
                raise self.error(line, f"constraint {name}: variable {var} appears twice in the scope")
            scope.append(self.var_index[var])
        if "arity" in elem.attrib and self._int(elem, "arity", line) != len(scope):
            raise self.error(line, f"constraint {name}: arity {elem.get('arity')} but {len(scope)} scope variables")
        if relation.arity != len(scope):
            raise self.error(line, f"constraint {name}: relation {reference} has arity {relation.arity}, "
                                   f"the scope {len(scope)} variables")
        key = (reference, tuple(self.var_domain[v] for v in scope))
        if key not in self.tables:
            self.tables[key] = self._table(reference, relation, scope, name, line)
        self.functions.append(CostFunction(tuple(scope), self.tables[key].copy()))

    def _table(self, reference: str, relation: Relation, scope: list[int], name: str, line: int) -> np.ndarray:
        shape = tuple(self.variables[v].domain for v in scope)
        message = too_large(shape)
        if message:
            raise self.error(line, f"constraint {name}: {message}")
        table = np.full(shape, relation.default, dtype=np.int64)
        if relation.tuples:
            rows = np.empty((len(relation.tuples), len(scope)), dtype=np.intp)
            for col, v in enumerate(scope):
                index = self.domains[self.var_domain[v]].index
                for row, values in enumerate(relation.tuples):
                    position = index.get(values[col])
                    if position is None:
                        raise self.error(line, f"constraint {name}: value {values[col]} of relation {reference} "
                                               f"is not in the domain of variable {self.variables[v].name}")
                    rows[row, col] = position
            assign_tuples(table, rows, relation.costs)
        if self.top is not None:
            table[table >= self.top] = FORBIDDEN
        return table

    def finish(self) -> Problem:
        problem = Problem(self.name, self.variables, self.functions, integer=True, offset=self.offset,
                          sense=-1 if self.maximize else 1, task="WCSP")
        try:
            return finalize_integer(problem, self.top)
        except ModelError as err:
            raise self.error(None, str(err)) from None
