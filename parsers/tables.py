"""Dense-table helpers shared by the readers: the size guard and tuple assignment."""
from __future__ import annotations

import math

import numpy as np

MAX_TABLE = 1 << 31  # dense tables beyond this many entries are refused before allocation


def too_large(shape: tuple[int, ...]) -> str | None:
    """The error message for a table of `shape` that must not be allocated, else None."""
    size = math.prod(shape)
    if size > MAX_TABLE:
        return f"cost table too large: {size} entries (limit 2^31)"
    return None


def assign_tuples(table: np.ndarray, rows: np.ndarray, costs: np.ndarray) -> None:
    """Set table[row] = cost for each (row, cost); a repeated tuple keeps its last cost.

    numpy leaves the winner of repeated fancy-index assignments unspecified,
    hence the explicit de-duplication.
    """
    flat = np.ravel_multi_index(tuple(rows.T), table.shape)
    _, first_from_end = np.unique(flat[::-1], return_index=True)
    last = len(flat) - 1 - first_from_end
    table.reshape(-1)[flat[last]] = costs[last]
