"""Helpers shared by the readers: the size guard, tuple assignment, linear tables, the CSP/COP problem."""
from __future__ import annotations

import math
from collections.abc import Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from gpusolve.host import fmt_bytes

if TYPE_CHECKING:
    from gpusolve.model.problem import Problem

MAX_TABLE = 1 << 31  # dense tables beyond this many entries are refused before allocation
ENTRY_BYTES = 8  # int64 or float64
COPIES = 2  # a table being read is held twice for a moment (parsed values, then the final table)
# What a reader holds per variable and per cost function beside the tables (the Variable, its name and
# domain: ~200 bytes; the function, its scope, tuples' and tables' headers: ~900 at the peak), measured
# with tracemalloc and rounded up.
VARIABLE_BYTES = 256
FUNCTION_BYTES = 1024


class Allowance:
    """Bytes the file being read may still take, and whether something was refused."""

    def __init__(self, left: int):
        self.left, self.refused = left, False


# Set by `reading_budget` around one read, so every reader's `charge` and `too_large` calls check the
# budget before it allocates.
_allowance: ContextVar[Allowance | None] = ContextVar("table_allowance", default=None)


@contextmanager
def reading_budget(limit: int):
    """Within this block, `charge` and `too_large` refuse what would take more than is left of `limit`."""
    allowance = Allowance(int(limit))
    token = _allowance.set(allowance)
    try:
        yield allowance
    finally:
        _allowance.reset(token)


def too_large(shape: tuple[int, ...]) -> str | None:
    """The error message for a table of `shape` that must not be allocated, else None; a table that
    fits is charged to the reading budget."""
    size = math.prod(shape)
    if size > MAX_TABLE:
        return f"cost table too large: {size} entries (limit 2^31)"
    return charge(COPIES * size * ENTRY_BYTES, f"cost table of {size:,} entries", kept=size * ENTRY_BYTES)


def charge(need: int, what: str, kept: int | None = None) -> str | None:
    """The error message when `what` needs `need` bytes at its peak, more than the reading budget
    leaves, else None: then `kept` of them (default all), what stays taken once it is read, are charged.

    Readers call it before they allocate what the file declares, so a short file cannot make them take
    memory out of proportion with its length unchecked."""
    allowance = _allowance.get()
    if allowance is None:
        return None
    if need > allowance.left:
        allowance.refused = True
        return (f"{what}: {fmt_bytes(need)} to read, more than the memory budget leaves "
                f"({fmt_bytes(allowance.left)}; see --mem-limit)")
    allowance.left -= need if kept is None else kept
    return None


def assign_tuples(table: np.ndarray, rows: np.ndarray, costs: np.ndarray) -> None:
    """Set table[row] = cost for each (row, cost); a repeated tuple keeps its last cost.

    numpy leaves the winner of repeated fancy-index assignments unspecified,
    hence the explicit de-duplication.
    """
    flat = np.ravel_multi_index(tuple(rows.T), table.shape)
    if len(flat) <= 1:  # nothing repeated (cap131: 2,500 tables of one tuple)
        table.reshape(-1)[flat] = costs
        return
    _, first_from_end = np.unique(flat[::-1], return_index=True)
    last = len(flat) - 1 - first_from_end
    table.reshape(-1)[flat[last]] = costs[last]


class Listed(NamedTuple):
    """A table as a file lists it: a default cost and the tuples that differ (rows of domain indices,
    their costs). Readers keep each table so until the whole file is read and every table charged, then
    make it dense (`table`): a file that does not fit is refused before any table is allocated."""

    shape: tuple[int, ...]
    default: int
    rows: np.ndarray
    costs: np.ndarray

    def table(self) -> np.ndarray:
        table = np.full(self.shape, self.default, dtype=np.int64)
        assign_tuples(table, self.rows, self.costs)
        return table


# Entries of the table a linear constraint (XCSP3 `sum`, FlatZinc `int_lin_*`) becomes; larger ones
# are refused: no model-level linear constraint exists yet.
MAX_LINEAR = 1 << 24
COMPARE = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
           "eq": np.equal, "ne": np.not_equal}
INT64_MAX = int(np.iinfo(np.int64).max)
MAX_COST = 1 << 62  # |cost| of an objective term: exact costs end there (model.MAX_TOP)
CP_VARIABLE_BYTES = 1024  # a variable of a CP model, its name and index entries (measured: about 600)


def entry_bytes(magnitude: int) -> int:
    """Bytes per entry of an array of integers up to `magnitude` in absolute value: int64 where they
    fit, else an object array (a pointer and a Python int of that many digits)."""
    return ENTRY_BYTES if magnitude <= INT64_MAX else ENTRY_BYTES + 32 + 4 * (magnitude.bit_length() // 30 + 1)


def linear_sum(values: list[np.ndarray], coeffs: list[int]) -> np.ndarray | str:
    """sum_k coeffs[k] * values[k] on the grid of the domains (one axis per term: the values of each
    domain index), exact: int64 where no partial sum can leave int64, else Python ints. The sum and
    the int64 table made of it are charged to the reading budget; the error message instead when
    that table would exceed MAX_LINEAR entries or the budget."""
    shape = tuple(len(v) for v in values)
    size = math.prod(shape)
    if size > MAX_LINEAR:
        return (f"linear constraint over {len(values)} variables: its table ({size:.3g} entries) is too "
                f"large (at most 2^24)")
    widest = max([sum(abs(int(a)) * max(abs(int(v.min())), abs(int(v.max()))) for v, a in zip(values, coeffs)),
                  *(abs(int(a)) for a in coeffs)])  # a partial sum, or a coefficient
    message = charge(size * (2 * entry_bytes(widest) + ENTRY_BYTES + 1),
                     f"linear constraint over {len(values)} variables", kept=size * ENTRY_BYTES)
    if message:
        return message
    dtype = np.int64 if widest <= INT64_MAX else object
    total = np.zeros((1,) * len(values), dtype=dtype)
    for k, (vals, a) in enumerate(zip(values, coeffs)):
        axis = [1] * len(values)
        axis[k] = -1
        total = total + int(a) * vals.astype(dtype, copy=False).reshape(axis)
    return np.broadcast_to(total, shape)


def exact_costs(values: np.ndarray, factor: int) -> np.ndarray | str:
    """`factor * values` (integers: int64, or Python ints in an object array) as int64 costs, or the
    error message when one is beyond MAX_COST in magnitude."""
    low, high = sorted((factor * int(values.min()), factor * int(values.max())))
    if max(-low, high) > MAX_COST:
        return f"objective costs from {low} to {high}: beyond 2^62 in magnitude, where exact costs end"
    if factor == 0 or abs(factor) > MAX_COST:  # then every cost is 0
        return np.zeros(values.shape, dtype=np.int64)
    return values.astype(np.int64) * factor


class Labels(Sequence):
    """A CP variable's values as labels, made when asked for from its int64 domain: a large domain
    costs no strings, and variables of one domain share it."""

    def __init__(self, values: np.ndarray):
        self.values = values

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, i: int) -> str:
        return str(int(self.values[i]))

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and len(other) == len(self) and all(a == b for a, b in zip(self, other))

    __hash__ = object.__hash__  # Variables are hashed by identity of their labels, never expanded


def constraint_problem(path, variables, functions, sense: int, globals_) -> "Problem":
    """The problem of a CP model (XCSP3, FlatZinc): hard tables, an objective, its exact top."""
    from gpusolve.model.problem import ModelError, Problem, finalize_integer

    from .errors import ParseError
    from .source import split_compression
    name = split_compression(path)[0].rsplit(".", 1)[0]
    problem = Problem(name, variables, functions, integer=True, sense=sense, task="WCSP", globals=globals_)
    try:
        return finalize_integer(problem, None)
    except ModelError as err:
        raise ParseError(path, None, str(err)) from None
