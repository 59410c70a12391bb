"""The CPU engine: NumPy arrays, the shared dense bucket step."""
from __future__ import annotations

import numpy as np

from .base import Engine, eliminate_dense


class NumpyEngine(Engine):
    name = "numpy"
    xp = np

    def put(self, table):
        return table

    def get(self, table):
        return np.asarray(table)

    def eliminate(self, mb, inputs, domains, top, integer, check=None, op="min", where=None):
        return eliminate_dense(np, mb.var, mb.scope, inputs, domains, top, integer, check, op)
