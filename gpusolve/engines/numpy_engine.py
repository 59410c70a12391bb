"""The CPU engine: NumPy arrays, the shared dense bucket step on one thread per core."""
from __future__ import annotations

import numpy as np

from .base import Engine
from .dense import eliminate_dense


class NumpyEngine(Engine):
    name = "numpy"
    xp = np

    def __init__(self, threads: int | None = None):
        from gpusolve.host import host_threads
        self.threads = host_threads(threads)

    def put(self, table):
        return table

    def get(self, table):
        return np.asarray(table)

    def eliminate(self, mb, inputs, domains, top, integer, check=None, op="min", where=None):
        return eliminate_dense(np, mb.var, mb.scope, inputs, domains, top, integer, check, op, threads=self.threads)
