"""pyDCOP's YAML DCOP format: domains, variables, constraints, agents.

Supported: `objective` min or max (utilities are maximised as costs -u with
sense -1, as for FRODO files); domains as value lists or `["0..9"]`;
variables with an optional unary `cost_function`; constraints of type
`extensional` (`values: {cost: "a b | c d"}`, `default`) and `intention`
(a Python expression over the variables' names, evaluated for every tuple of
their domains); `agents` as a list or a mapping; agents holding variables
through `distribution_hints: must_host`. A variable no agent is said to hold
gets an agent of its own, named after it.

Intentional expressions are checked before anything is evaluated: numbers,
strings, the variables, arithmetic, comparisons, `and`/`or`/`not`,
`x if c else y` and the builtins in SAFE_CALLS. Anything else (attributes,
subscripts, other calls, lambdas, comprehensions) is refused with one line,
never executed. Costs that are all integers give an integer problem (int64,
infinities forbidden); any fractional cost gives a float problem.
"""
from __future__ import annotations

import ast
import itertools
import math
from pathlib import Path

import numpy as np

from gpusolve.model.problem import FORBIDDEN, CostFunction, ModelError, Problem, Variable, finalize_integer

from .errors import ParseError, quote
from .source import read_lines, split_compression
from .tables import too_large

SAFE_CALLS = {"abs": abs, "min": min, "max": max, "round": round, "int": int, "float": float, "bool": bool}
SAFE_NODES = (ast.Expression, ast.Constant, ast.Name, ast.Load, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare,
              ast.IfExp, ast.Call, ast.Tuple, ast.List, ast.operator, ast.unaryop, ast.boolop, ast.cmpop)
MAX_INTENTIONAL = 1 << 22  # tuples an expression is evaluated on (one Python call each)
MAX_COST = 1 << 62
UNSUPPORTED = {"external_variables": "external variables", "scenario": "dynamic scenarios"}


def read(path: str | Path) -> Problem:
    try:
        import yaml
    except ImportError:
        raise ParseError(path, None, "reading pyDCOP YAML files needs PyYAML: pip install 'gpusolve[dask]'") from None
    text = "".join(read_lines(path))
    try:
        doc = yaml.load(text, Loader=_loader(yaml))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise ParseError(path, mark.line + 1 if mark else None,
                         f"malformed YAML: {getattr(e, 'problem', None) or e}") from None
    return _Reader(path, doc).problem()


class _Map(dict):
    """A YAML mapping that remembers the line of each key (and its own)."""

    line: int | None = None
    lines: dict


def _loader(yaml):
    class Loader(yaml.SafeLoader):
        pass

    def mapping(loader, node):
        out = _Map(loader.construct_mapping(node, deep=True))
        out.line = node.start_mark.line + 1
        out.lines = {loader.construct_object(k, deep=True): k.start_mark.line + 1 for k, _ in node.value}
        return out
    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    return Loader


class _Reader:
    def __init__(self, path, doc):
        self.path = path
        if not isinstance(doc, _Map):
            raise ParseError(path, None, "not a pyDCOP file: the document is not a mapping")
        self.doc = doc
        for key, what in UNSUPPORTED.items():
            if key in doc:
                raise self.error(doc, key, f"{what} are not supported")
        objective = doc.get("objective")
        if objective not in ("min", "max"):
            raise self.error(doc, "objective" if "objective" in doc else None,
                             f"objective must be min or max, not {quote(objective)}")
        self.maximize = objective == "max"
        self.domains: dict[str, list] = {}
        self.variables: list[Variable] = []
        self.index: dict[str, int] = {}
        self.values: list[list] = []  # each variable's domain values, as the expressions see them
        self.costs: list[tuple[tuple[int, ...], np.ndarray]] = []  # scope, objective values (object array)

    def error(self, where: _Map, key=None, message: str = "") -> ParseError:
        line = where.lines.get(key, where.line) if isinstance(where, _Map) and key is not None else \
            getattr(where, "line", None)
        return ParseError(self.path, line, message)

    def section(self, name: str) -> _Map:
        sec = self.doc.get(name) or _Map()
        if not isinstance(sec, dict):
            raise self.error(self.doc, name, f"{name} must be a mapping")
        return sec

    def problem(self) -> Problem:
        for name, d in self.section("domains").items():
            self._domain(name, d)
        for name, v in self.section("variables").items():
            self._variable(name, v)
        for name, c in self.section("constraints").items():
            self._constraint(name, c)
        self._agents()
        return self._finish()

    def _domain(self, name, d) -> None:
        sec = self.doc["domains"]
        values = d.get("values") if isinstance(d, dict) else None
        if not isinstance(values, list) or not values:
            raise self.error(sec, name, f"domain {name}: values must be a non-empty list")
        if len(values) == 1 and isinstance(values[0], str) and ".." in values[0]:
            low, _, high = values[0].partition("..")
            try:
                values = list(range(int(low), int(high) + 1))
            except ValueError:
                raise self.error(sec, name, f"domain {name}: {quote(values[0])} is not a range like 0..9") from None
        if len(set(map(str, values))) != len(values):
            raise self.error(sec, name, f"domain {name} lists a value twice")
        if not values:
            raise self.error(sec, name, f"domain {name} is empty")
        self.domains[name] = values

    def _variable(self, name, v) -> None:
        sec = self.doc["variables"]
        name = str(name)
        domain = v.get("domain") if isinstance(v, dict) else None
        if domain not in self.domains:
            raise self.error(sec, name, f"variable {name}: unknown domain {quote(domain)}")
        if "noise_level" in v:
            raise self.error(sec, name, f"variable {name}: noisy cost functions are not supported")
        values = self.domains[domain]
        self.index[name] = len(self.variables)
        self.variables.append(Variable(name, len(values), tuple(map(str, values))))
        self.values.append(values)
        if "cost_function" in v:
            self._intention(sec, name, str(v["cost_function"]), f"variable {name}'s cost_function")

    def _constraint(self, name, c) -> None:
        sec = self.doc["constraints"]
        kind = c.get("type") if isinstance(c, dict) else None
        if kind == "intention":
            if "function" not in c:
                raise self.error(sec, name, f"constraint {name}: an intention needs a function")
            self._intention(sec, name, str(c["function"]), f"constraint {name}")
        elif kind == "extensional":
            self._extension(sec, name, c)
        else:
            raise self.error(sec, name, f"constraint {name}: type must be intention or extensional, not {quote(kind)}")

    def _intention(self, sec, key, expression: str, what: str) -> None:
        try:
            tree = ast.parse(expression.strip(), mode="eval")
        except SyntaxError as e:
            raise self.error(sec, key, f"{what}: syntax error in {quote(expression)}: {e.msg}") from None
        names = set()
        for node in ast.walk(tree):
            if not isinstance(node, SAFE_NODES):
                raise self.error(sec, key, f"{what}: {type(node).__name__} is not allowed in an expression "
                                           f"(numbers, variables, arithmetic, comparisons, if-else and "
                                           f"{', '.join(SAFE_CALLS)} only)")
            if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in SAFE_CALLS):
                raise self.error(sec, key, f"{what}: only {', '.join(SAFE_CALLS)} may be called")
            if isinstance(node, ast.Name) and node.id not in SAFE_CALLS:
                if node.id not in self.index:
                    raise self.error(sec, key, f"{what}: unknown variable {node.id}")
                names.add(node.id)
        scope = tuple(sorted((self.index[n] for n in names)))
        shape = tuple(self.variables[v].domain for v in scope)
        if math.prod(shape) > MAX_INTENTIONAL:
            raise self.error(sec, key, f"{what}: {math.prod(shape):,} tuples to evaluate (limit {MAX_INTENTIONAL:,})")
        code = compile(tree, "<expression>", "eval")
        table = np.empty(shape, dtype=object)
        env = {"__builtins__": SAFE_CALLS}
        for idx in itertools.product(*(range(d) for d in shape)):
            local = {self.variables[v].name: self.values[v][i] for v, i in zip(scope, idx)}
            try:
                table[idx] = eval(code, env, local)  # checked above: no attribute, subscript or other call
            except Exception as e:
                raise self.error(sec, key, f"{what}: evaluating {quote(expression)} at {local}: {e}") from None
        self.costs.append((scope, self._numbers(sec, key, table, what)))

    def _extension(self, sec, name, c) -> None:
        names = c.get("variables")
        names = [names] if isinstance(names, str) else names
        if not isinstance(names, list) or not names:
            raise self.error(sec, name, f"constraint {name}: variables must be a list of names")
        for n in names:
            if str(n).strip() not in self.index:
                raise self.error(sec, name, f"constraint {name}: unknown variable {n}")
        scope = tuple(self.index[str(n).strip()] for n in names)
        if len(set(scope)) != len(scope):
            raise self.error(sec, name, f"constraint {name}: a variable appears twice")
        shape = tuple(self.variables[v].domain for v in scope)
        message = too_large(shape)
        if message:
            raise self.error(sec, name, f"constraint {name}: {message}")
        table = np.full(shape, c.get("default"), dtype=object)
        labels = [{lab: i for i, lab in enumerate(self.variables[v].labels)} for v in scope]
        values = c.get("values")
        if not isinstance(values, dict):
            raise self.error(sec, name, f"constraint {name}: values must map costs to assignments")
        for cost, tuples in values.items():
            for t in str(tuples).split("|"):
                tokens = t.split()
                if len(tokens) != len(scope):
                    raise self.error(sec, name, f"constraint {name}: assignment {quote(t.strip())} has {len(tokens)} "
                                                f"values for {len(scope)} variables")
                try:
                    table[tuple(lab[tok] for lab, tok in zip(labels, tokens))] = cost
                except KeyError as e:
                    raise self.error(sec, name, f"constraint {name}: value {e.args[0]} is not in its variable's "
                                                f"domain") from None
        if any(x is None for x in table.flat):
            raise self.error(sec, name, f"constraint {name}: some assignments have no cost and there is no default")
        self.costs.append((scope, self._numbers(sec, name, table, f"constraint {name}")))

    def _numbers(self, sec, key, table: np.ndarray, what: str) -> np.ndarray:
        for x in table.flat:
            if isinstance(x, bool) or not isinstance(x, (int, float)) or isinstance(x, float) and math.isnan(x):
                raise self.error(sec, key, f"{what}: cost {quote(x)} is not a number")
        return table

    def _agents(self) -> None:
        agents = self.doc.get("agents") or []
        names = {str(a) for a in agents}
        hints = self.doc.get("distribution_hints") or {}
        hosts = hints.get("must_host", {}) if isinstance(hints, dict) else {}
        for agent, held in hosts.items():
            if str(agent) not in names:
                raise self.error(hints, "must_host", f"must_host names an unknown agent {agent}")
            for n in held or ():
                v = self.index.get(str(n))
                if v is None:
                    continue  # a constraint's host: constraints sit with the variables here
                var = self.variables[v]
                if var.agent is not None and var.agent != str(agent):
                    raise self.error(hints, "must_host", f"variable {n} hosted by both {var.agent} and {agent}")
                self.variables[v] = Variable(var.name, var.domain, var.labels, str(agent))

    def _finish(self) -> Problem:
        flat = [x for _, t in self.costs for x in t.flat]
        integer = all(isinstance(x, int) or math.isinf(x) or float(x).is_integer() for x in flat)
        sign = -1 if self.maximize else 1
        functions = []
        for scope, table in self.costs:
            costs = np.array([sign * x for x in table.flat], dtype=np.float64).reshape(table.shape)
            if np.isneginf(costs).any():
                raise ParseError(self.path, None, f"an infinite {'utility' if self.maximize else 'cost'} of the "
                                                  f"wrong sign: the best value, not a cost")
            if integer:
                finite = np.isfinite(costs)
                if (np.abs(costs[finite]) > MAX_COST).any():
                    raise ParseError(self.path, None, "a cost out of range (|cost| <= 2^62)")
                exact = np.array([int(sign * x) if not math.isinf(x) else 0 for x in table.flat],
                                 dtype=np.int64).reshape(table.shape)
                costs = np.where(finite, exact, FORBIDDEN)
            functions.append(CostFunction(scope, costs))
        name = str(self.doc.get("name") or split_compression(self.path)[0].rsplit(".", 1)[0])
        problem = Problem(name, self.variables, functions, integer=integer, sense=sign, task="WCSP")
        if integer:
            try:
                return finalize_integer(problem, None)
            except ModelError as e:
                raise ParseError(self.path, None, str(e)) from None
        problem.top = math.inf
        for f in problem.functions:  # non-negative costs, the minimum of each table in the offset
            finite = f.table[np.isfinite(f.table)]
            low = float(finite.min()) if finite.size else 0.0
            f.table = f.table - low
            problem.offset += low
        return problem
