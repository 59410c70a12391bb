"""One stop request for every long loop: a deadline, an interrupt (Ctrl-C, SIGTERM), or its parent's.

Reading, elimination, cost shifting, local search and search all poll the
same object, so a Ctrl-C reaches whatever runs. It imports nothing from
gpusolve: every layer, the parsers included, may take one.
"""
from __future__ import annotations

import math
import time


class Stopped(Exception):
    """A loop was asked to stop (time limit, Ctrl-C, SIGTERM): not a fault of the input or the solver.
    `interrupted` is the signal's number (True without one), or False for a deadline. `lower`, when
    set (AND/OR search sets it as the exception unwinds), bounds from below the cost of the problem or
    subproblem searched: the least bound of its open nodes."""

    def __init__(self, interrupted: int | bool = False, lower=None):
        super().__init__("interrupted" if interrupted else "time limit reached")
        self.interrupted = interrupted
        self.lower = lower


class Stop:
    """True once its deadline (time.perf_counter()) has passed, it was interrupted, or its parent says so.

    A signal handler sets `interrupted` (to the signal's number) on the root; the stops that
    `within` makes for one phase see it through their parent.
    """

    def __init__(self, deadline: float | None = None, parent: "Stop | None" = None):
        self.deadline = deadline
        self.interrupted: int | bool = False
        self.parent = parent

    def __call__(self) -> bool:
        return bool(self.interrupted) or (self.parent is not None and self.parent()) or \
            (self.deadline is not None and time.perf_counter() >= self.deadline)

    def within(self, seconds: float, reserve: float = 0.0) -> "Stop":
        """A stop for one phase: after `seconds`, or while `reserve` seconds are left for later phases."""
        deadline = min(time.perf_counter() + seconds, (self.deadline or math.inf) - reserve)
        return Stop(deadline if math.isfinite(deadline) else None, self)

    def remaining(self) -> float:
        return math.inf if self.deadline is None else max(self.deadline - time.perf_counter(), 0.0)

    def signal(self) -> int | bool:
        """The interrupt that reached this stop (its own or an ancestor's), or False."""
        return self.interrupted or (self.parent is not None and self.parent.signal())

    def check(self) -> None:
        """Raise Stopped once this stop says so: for loops that unwind rather than return."""
        if self():
            raise Stopped(self.signal())
