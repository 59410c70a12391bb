"""Building a cost function network in Python, as pytoulbar2's CFN.AddVariable / AddFunction allow.

    m = gpusolve.Model("colouring")
    m.add_variable("a", ["red", "green"]); m.add_variable("b", 2)
    m.add_function(["a"], [0, 3])                                  # dense: one cost per value tuple
    m.add_function(["a", "b"], [(("red", 1), 5)], default=0)       # sparse: listed tuples, the rest default
    m.add_constraint(["a", "b"], forbidden=[("green", 0)])          # hard: allowed= or forbidden= tuples
    gpusolve.solve(m); m.write("colouring.cfn")

Costs are integers (`math.inf` forbids); the model becomes the solver's `Problem` in `problem()`.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from gpusolve.model.problem import FORBIDDEN, MAX_TOP, CostFunction, Problem, Variable, finalize_integer


class Model:
    def __init__(self, name: str = "model", top: int | None = None, maximize: bool = False):
        """`top`: costs (utilities when maximising, then a lower bound) at which an assignment is
        infeasible, as toulbar2's upper bound; `maximize` maximises the sum instead."""
        self.name, self.top, self.sense = name, top, -1 if maximize else 1
        self.variables: list[Variable] = []
        self.index: dict[str, int] = {}
        self.functions: list[CostFunction] = []
        self.offset = 0

    def add_variable(self, name: str, values) -> int:
        """A variable with `values` (a domain size, or a list of value names); returns its index."""
        if name in self.index:
            raise ValueError(f"variable {name} defined twice")
        labels = None if isinstance(values, (int, np.integer)) else tuple(str(v) for v in values)
        size = int(values) if labels is None else len(labels)
        if size < 1:
            raise ValueError(f"variable {name} has an empty domain")
        if labels is not None and len(set(labels)) != size:
            raise ValueError(f"variable {name} lists a value twice")
        self.index[name] = len(self.variables)
        self.variables.append(Variable(name, size, labels))
        return self.index[name]

    def add_function(self, scope, costs, default=None) -> None:
        """Costs over `scope` (variable names or indices): an array of the scope's domain sizes, or,
        with `default`, a list of (value tuple, cost) whose other tuples cost `default`."""
        scope = self._scope(scope)
        shape = tuple(self.variables[v].domain for v in scope)
        if default is None:
            table = self._costs(costs)
            if table.shape != shape:
                raise ValueError(f"costs of shape {table.shape} for a scope of shape {shape}")
        else:
            table = np.full(shape, self._costs(default), dtype=np.int64)
            for values, cost in costs:
                table[self._tuple(scope, values)] = self._costs(cost)
        if not scope:
            self.offset += int(table)
            return
        self.functions.append(CostFunction(scope, table))

    def add_constraint(self, scope, allowed=None, forbidden=None) -> None:
        """A hard constraint: only the `allowed` value tuples, or all but the `forbidden` ones."""
        if (allowed is None) == (forbidden is None):
            raise ValueError("give allowed= or forbidden= tuples")
        listed, other = (0, math.inf) if allowed is not None else (math.inf, 0)
        self.add_function(scope, [(t, listed) for t in (allowed if allowed is not None else forbidden)],
                          default=other)

    def add_constant(self, cost: int) -> None:
        self.offset += int(self._costs(cost))

    def values(self, assignment) -> dict[str, str | int]:
        """{variable name: value name (or index when unnamed)} of an assignment in value indices."""
        return {v.name: v.labels[a] if v.labels else int(a) for v, a in zip(self.variables, assignment)}

    def problem(self) -> Problem:
        """The solver's Problem (a copy: the model can grow afterwards)."""
        functions = [CostFunction(f.scope, f.table.copy()) for f in self.functions]
        problem = Problem(self.name, list(self.variables), functions, integer=True, offset=self.offset,
                          sense=self.sense, task="WCSP")
        top = None if self.top is None else self.sense * int(self.top)
        return finalize_integer(problem, top)

    def write(self, path: str | Path) -> None:
        """.wcsp, .uai or .cfn (value names kept), optionally compressed by suffix."""
        from .parsers import write
        write(self.problem(), path)

    def _scope(self, scope) -> tuple[int, ...]:
        out = []
        for v in scope:
            if isinstance(v, (int, np.integer)) and 0 <= v < len(self.variables):
                out.append(int(v))
            elif v in self.index:
                out.append(self.index[v])
            else:
                raise ValueError(f"unknown variable {v}")
        if len(set(out)) != len(out):
            raise ValueError(f"a variable appears twice in the scope {list(scope)}")
        return tuple(out)

    def _tuple(self, scope, values) -> tuple[int, ...]:
        if len(values) != len(scope):
            raise ValueError(f"tuple {values} for a scope of {len(scope)} variables")
        out = []
        for v, value in zip(scope, values):
            var = self.variables[v]
            if var.labels and str(value) in var.labels:
                out.append(var.labels.index(str(value)))
            elif isinstance(value, (int, np.integer)) and 0 <= value < var.domain:
                out.append(int(value))
            else:
                raise ValueError(f"value {value!r} is not in the domain of variable {var.name}")
        return tuple(out)

    def _costs(self, costs) -> np.ndarray:
        """Integer costs (utilities when maximising) as internal int64, math.inf as FORBIDDEN."""
        a = np.asarray(costs)
        if a.dtype.kind not in "iubf":
            raise ValueError(f"costs must be numbers, not {a.dtype}")
        forbidden = np.isposinf(a) if a.dtype.kind == "f" else np.zeros(a.shape, bool)
        finite = np.where(forbidden, 0, a)
        bad = ~np.isfinite(finite) | (finite != np.round(finite)) | (np.abs(finite) > MAX_TOP)
        if bad.any():
            raise ValueError(f"cost {finite[bad].reshape(-1)[0]!r} is not an integer (scale fractional costs) "
                             "or math.inf")
        return np.where(forbidden, FORBIDDEN, self.sense * finite.astype(np.int64))
