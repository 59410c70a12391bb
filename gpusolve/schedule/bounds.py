"""The bounds held by the anytime schedule: best lower bound and incumbent, only ever tightened."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from gpusolve.model.problem import Problem


@dataclass
class Bounds:
    """Best lower bound and incumbent so far (internal costs), and the trace of improvements."""

    problem: Problem
    t0: float
    lower: object
    upper: object
    assignment: list[int] | None = None
    proven: bool = False  # lower == upper by proof (or infeasibility)
    trivial: object = 0  # the bound before any phase: each function's minimum
    trace: list[tuple[float, object, object, str]] = field(default_factory=list)
    # Hears each improvement as (lower, upper, phase) in the file's objective (upper None before any
    # incumbent): a live display or a log reads the file's numbers, as the result reports them.
    on_bounds: Callable[[object, object, str], None] | None = None
    # A live display: hears each phase as it starts and, for a search, how to count its nodes so far.
    on_phase: Callable[[str, Callable[[], int] | None], None] | None = None

    @classmethod
    def start(cls, problem: Problem, t0: float, on_bounds=None) -> "Bounds":
        """The trivial lower bound (each function's minimum) before any phase runs."""
        lower = problem.least
        b = cls(problem, t0, lower, problem.top, trivial=lower, on_bounds=on_bounds)
        b._record("trivial")
        return b

    @property
    def closed(self) -> bool:
        return self.proven or self.lower >= self.upper or self.problem.is_forbidden(self.lower)

    def raise_lower(self, lower, phase: str) -> None:
        lower = min(lower, self.upper) if self.assignment is not None else lower
        if lower > self.lower:
            self.lower = lower
            self._record(phase)

    def offer(self, assignment, phase: str) -> bool:
        """Take an assignment as the incumbent if it is feasible and cheaper."""
        if assignment is None:
            return False
        assignment = [int(a) for a in assignment]
        cost = self.problem.evaluate(assignment)
        if self.problem.is_forbidden(cost) or cost >= self.upper:
            return False
        self.upper, self.assignment = cost, assignment
        if self.lower > cost:  # float summation order: the evaluated cost is the truth
            self.lower = cost
        self._record(phase)
        return True

    def begin(self, phase: str, nodes: Callable[[], int] | None = None) -> None:
        """A phase starts (nothing is recorded: the trace holds improvements)."""
        if self.on_phase:
            self.on_phase(phase, nodes)

    def prove(self, phase: str) -> None:
        """The incumbent is optimal (or, with none, the problem is infeasible)."""
        self.proven = True
        if self.lower != self.upper:
            self.lower = self.upper
            self._record(phase)

    def _record(self, phase: str) -> None:
        self.trace.append((time.perf_counter() - self.t0, self.lower, self.upper, phase))
        if self.on_bounds:
            self.on_bounds(*self.problem.file_bounds(self.lower, None if self.assignment is None else self.upper),
                           phase)
