"""Dense-table helpers shared by the readers: the size guard and tuple assignment."""
from __future__ import annotations

import math
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np

MAX_TABLE = 1 << 31  # dense tables beyond this many entries are refused before allocation
ENTRY_BYTES = 8  # int64 or float64
COPIES = 2  # a table being read is held twice for a moment (parsed values, then the final table)


class Allowance:
    """Bytes the tables of the file being read may still take, and whether one was refused."""

    def __init__(self, left: int):
        self.left, self.refused = left, False


# Set by `reading_budget` around one read, so every reader's `too_large` call checks the budget
# before it allocates.
_allowance: ContextVar[Allowance | None] = ContextVar("table_allowance", default=None)


@contextmanager
def reading_budget(limit: int):
    """Within this block, `too_large` refuses tables that would take more than what is left of `limit`."""
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
    allowance = _allowance.get()
    if allowance is not None:
        need = size * ENTRY_BYTES
        if COPIES * need > allowance.left:
            allowance.refused = True
            return (f"cost table of {size:,} entries needs {_mib(COPIES * need)} to read, more than the memory "
                    f"budget leaves ({_mib(allowance.left)}; see --mem-limit)")
        allowance.left -= need
    return None


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def assign_tuples(table: np.ndarray, rows: np.ndarray, costs: np.ndarray) -> None:
    """Set table[row] = cost for each (row, cost); a repeated tuple keeps its last cost.

    numpy leaves the winner of repeated fancy-index assignments unspecified,
    hence the explicit de-duplication.
    """
    flat = np.ravel_multi_index(tuple(rows.T), table.shape)
    _, first_from_end = np.unique(flat[::-1], return_index=True)
    last = len(flat) - 1 - first_from_end
    table.reshape(-1)[flat[last]] = costs[last]
