"""Helpers shared by the readers: the size guard, tuple assignment, linear tables, the CSP/COP problem."""
from __future__ import annotations

import math
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from gpusolve.plan import fmt_bytes

if TYPE_CHECKING:
    from gpusolve.model import Problem

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


def charge(nbytes: int, what: str, transient: int = 0) -> str | None:
    """The error message when `what`, keeping `nbytes` (and holding `transient` more while it is made),
    does not fit what is left of the reading budget, else None: then `nbytes` are charged.

    Readers call it before they allocate what the file declares, so a short file cannot make them take
    memory out of proportion with its length unchecked."""
    allowance = _allowance.get()
    if allowance is None:
        return None
    if nbytes + transient > allowance.left:
        allowance.refused = True
        return (f"{what}: {fmt_bytes(nbytes + transient)} to read, more than the memory budget leaves "
                f"({fmt_bytes(allowance.left)}; see --mem-limit)")
    allowance.left -= nbytes
    return None


def too_large(shape: tuple[int, ...]) -> str | None:
    """The error message for a table of `shape` that must not be allocated, else None; a table that
    fits is charged to the reading budget."""
    size = math.prod(shape)
    if size > MAX_TABLE:
        return f"cost table too large: {size} entries (limit 2^31)"
    need = size * ENTRY_BYTES
    return charge(need, f"cost table of {size:,} entries", (COPIES - 1) * need)


def assign_tuples(table: np.ndarray, rows: np.ndarray, costs: np.ndarray) -> None:
    """Set table[row] = cost for each (row, cost); a repeated tuple keeps its last cost.

    numpy leaves the winner of repeated fancy-index assignments unspecified,
    hence the explicit de-duplication.
    """
    flat = np.ravel_multi_index(tuple(rows.T), table.shape)
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


def linear_sum(values: list[np.ndarray], coeffs: list[int]) -> np.ndarray | str:
    """sum_k coeffs[k] * values[k] on the grid of the domains (one axis per term: the values of each
    domain index), or the error message when that table would exceed MAX_LINEAR entries."""
    size = math.prod(len(v) for v in values)
    if size > MAX_LINEAR:
        return (f"linear constraint over {len(values)} variables: its table ({size:.3g} entries) is too "
                f"large (at most 2^24)")
    total = np.zeros((1,) * len(values), dtype=np.int64)
    for k, (vals, a) in enumerate(zip(values, coeffs)):
        shape = [1] * len(values)
        shape[k] = -1
        total = total + int(a) * vals.reshape(shape)
    return np.broadcast_to(total, tuple(len(v) for v in values))


def constraint_problem(path, variables, functions, sense: int, globals_) -> "Problem":
    """The problem of a CP model (XCSP3, FlatZinc): hard tables, an objective, its exact top."""
    from gpusolve.model import ModelError, Problem, finalize_integer

    from .errors import ParseError
    from .source import split_compression
    name = split_compression(path)[0].rsplit(".", 1)[0]
    problem = Problem(name, variables, functions, integer=True, sense=sense, task="WCSP", globals=globals_)
    try:
        return finalize_integer(problem, None)
    except ModelError as err:
        raise ParseError(path, None, str(err)) from None
