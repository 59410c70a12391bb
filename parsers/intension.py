"""XCSP3 intension expressions: `f(a, g(b, 3))` read into a tree and evaluated, exactly, on the grid
of its variables' domains.

A tree is an int, ("var", variable) or (operator, [arguments]). Before anything is computed, the
interval of every node (and of every partial sum or product of an n-ary operator) is found from the
domains' bounds with Python ints: where all of them fit int64 the grid is computed in int64, else in
Python ints (an object array), so nothing wraps; values beyond 2^MAX_BITS are refused. The same pass
checks operators and arities and gives the bytes the evaluation takes at its peak, for the reading
budget. Semantics are those of XCSP3's reference evaluator (Java longs, without their overflow):
`div` truncates toward zero, `mod` has the sign of the dividend, `xor` is the parity of its
arguments, `iff` says they are all equal; a division by zero or a negative exponent is refused.
"""
from __future__ import annotations

import math
import re

import numpy as np

from .errors import quote
from .tables import INT64_MAX, entry_bytes

MAX_DEPTH = 100  # nesting refused beyond this: evaluation recurses once per level
MAX_BITS = 1024  # |value| of any node refused beyond 2^MAX_BITS
TEMPORARIES = 4  # grid-sized arrays an operator holds at once (div: |a|, |b|, the quotient, its sign)
TOKEN = re.compile(r"\s*(?:(-?\d+)|([A-Za-z_][\w.]*(?:\[[^\]]*\])*)|([(),]))")
NARY = ("add", "mul", "min", "max", "and", "or", "xor", "eq", "iff")
FOLDS = ("add", "mul", "min", "max", "and", "or")  # n-ary operators that also take one argument
ARITY = {"neg": 1, "abs": 1, "sqr": 1, "not": 1, "sub": 2, "div": 2, "mod": 2, "pow": 2, "dist": 2,
         "lt": 2, "le": 2, "ge": 2, "gt": 2, "ne": 2, "imp": 2, "if": 3, "in": 2, "notin": 2}
BOOLEAN = ("lt", "le", "ge", "gt", "ne", "eq", "not", "and", "or", "xor", "iff", "imp", "in", "notin")


class ExpressionError(ValueError):
    """What is wrong with an expression; the reader adds the file and the line."""


def parse(text: str, variables: dict[str, int]):
    """The tree of `text`, whose names are `variables` (name -> variable) or true/false; read without
    recursion, so a deep nesting is refused by its depth, not by Python's stack."""
    text = (text or "").strip()
    stack: list[tuple[str, list]] = []  # operators whose arguments are being read
    tree, want_argument, pos = None, True, 0
    while pos < len(text):
        m = _token(text, pos)
        pos, token = m.end(), m[0].strip()
        if not stack and tree is not None:
            raise ExpressionError(f"unexpected {quote(token)} after the expression")
        if token in (",", ")"):
            if want_argument or not stack:
                raise ExpressionError(f"unexpected {quote(token)}")
            want_argument = token == ","
            if token == ",":
                continue
            node = stack.pop()
        elif not want_argument or token == "(":
            raise ExpressionError(f"unexpected {quote(token)}")
        elif m[2] is not None and pos < len(text) and _token(text, pos)[0].strip() == "(":
            if len(stack) == MAX_DEPTH:
                raise ExpressionError(f"the expression is nested more than {MAX_DEPTH} levels deep")
            stack.append((token, []))
            pos = _token(text, pos).end()
            continue
        else:
            node, want_argument = _leaf(m, variables), False
        if stack:
            stack[-1][1].append(node)
        else:
            tree = node
    if stack:
        raise ExpressionError(f"{stack[-1][0]}( is not closed")
    if tree is None:
        raise ExpressionError("empty expression")
    return tree


def _token(text: str, pos: int) -> re.Match:
    m = TOKEN.match(text, pos)
    if not m or m.end() == pos:
        raise ExpressionError(f"cannot read the expression at {text[pos:pos + 20]!r}")
    return m


def _leaf(m: re.Match, variables: dict[str, int]):
    if m[1] is not None:
        if len(m[1].lstrip("-")) > MAX_BITS // 3:  # more digits than 2^MAX_BITS has
            raise ExpressionError(f"integer {m[1][:20]}... beyond 2^{MAX_BITS}")
        return int(m[1])
    if m[2] in variables:
        return ("var", variables[m[2]])
    if m[2] in ("true", "false"):
        return int(m[2] == "true")
    raise ExpressionError(f"unknown variable {m[2]}")


def scope_of(tree) -> list[int]:
    """The variables of a tree, in order of first appearance."""
    scope: dict[int, None] = {}

    def collect(t):
        if isinstance(t, tuple):
            if t[0] == "var":
                scope[t[1]] = None
            else:
                for a in t[1]:
                    collect(a)
    collect(tree)
    return list(scope)


class Evaluation:
    """A tree on the grid of its scope's domains (`values[v]`: the integer of each domain index of v):
    checked and sized at construction (`peak` bytes), computed by `values()`."""

    def __init__(self, tree, values: list[np.ndarray]):
        self.tree, self.scope = tree, scope_of(tree)
        self.domains = {v: values[v] for v in self.scope}
        self.widest = 0
        self._span(tree)
        self.dtype = np.int64 if self.widest <= INT64_MAX else object
        self.item = entry_bytes(self.widest)
        self.shape = tuple(len(self.domains[v]) for v in self.scope)
        self.peak = self._peak(tree)[1]

    def values(self) -> np.ndarray:
        """The tree's value at every point of the grid (bool, int64 or Python ints). Every array has
        at least one axis: numpy makes Python scalars of 0-d results, which the next step would
        convert to int64 or uint64."""
        self.ndim = max(len(self.scope), 1)
        self.axes = {}
        for k, v in enumerate(self.scope):
            axis = [1] * self.ndim
            axis[k] = -1
            self.axes[v] = self.domains[v].astype(self.dtype, copy=False).reshape(axis)
        return np.broadcast_to(self._apply(self.tree), self.shape or (1,)).reshape(self.shape)

    # --- intervals ------------------------------------------------------------------------------
    def _seen(self, low: int, high: int) -> tuple[int, int]:
        self.widest = max(self.widest, -low, high)
        if self.widest.bit_length() > MAX_BITS:
            raise ExpressionError(f"values of the expression reach beyond 2^{MAX_BITS}")
        return low, high

    def _span(self, t) -> tuple[int, int]:
        """The interval of t's values, Python ints; also checks t's operators and arities."""
        if not isinstance(t, tuple):
            return self._seen(t, t)
        name, args = t
        if name == "var":
            d = self.domains[args]
            return self._seen(int(d.min()), int(d.max()))
        if name == "set":
            raise ExpressionError("set(...) only inside in(...)")
        if name not in NARY and name not in ARITY:
            raise ExpressionError(f"operator {name} is not supported")
        if name in ARITY and len(args) != ARITY[name]:
            raise ExpressionError(f"{name} takes {ARITY[name]} arguments, found {len(args)}")
        if name in NARY and len(args) < (1 if name in FOLDS else 2):
            raise ExpressionError(f"{name} needs {'an argument' if name in FOLDS else 'two arguments or more'}")
        if name in ("in", "notin"):
            if not (isinstance(args[1], tuple) and args[1][0] == "set"):
                raise ExpressionError(f"{name}: the second argument must be set(...)")
            for a in [args[0], *args[1][1]]:
                self._span(a)
            return 0, 1
        spans = [self._span(a) for a in args]
        if name in BOOLEAN:
            return 0, 1
        if name in ("add", "mul", "min", "max"):
            low, high = spans[0]
            for s in spans[1:]:
                low, high = self._seen(*SPANS[name]((low, high), s))
            return low, high
        if name == "dist":
            return self._seen(*SPANS["abs"](self._seen(*SPANS["sub"](*spans))))
        return self._seen(*SPANS[name](*spans))

    def _peak(self, t) -> tuple[frozenset, int]:
        """(t's variables, bytes its evaluation holds at its peak): the results of the arguments
        computed so far, then the operator's temporaries, each as large as its variables' grid."""
        if not isinstance(t, tuple):
            return frozenset(), 0
        if t[0] == "var":
            return frozenset([t[1]]), len(self.domains[t[1]]) * self.item
        args = t[1][:1] + t[1][1][1] if t[0] in ("in", "notin") else t[1]
        held, peak, scope = 0, 0, frozenset()
        for a in args:
            sub, need = self._peak(a)
            peak = max(peak, held + need)
            held += math.prod(len(self.domains[v]) for v in sub) * self.item
            scope |= sub
        grid = math.prod(len(self.domains[v]) for v in scope)
        return scope, max(peak, held + TEMPORARIES * grid * self.item)

    # --- values ---------------------------------------------------------------------------------
    def _apply(self, t):
        if not isinstance(t, tuple):
            return np.full((1,) * self.ndim, t, dtype=self.dtype)
        name, args = t
        if name == "var":
            return self.axes[args]
        if name in ("in", "notin"):
            x = self._apply(args[0])
            hit = np.zeros(np.shape(x), dtype=bool)
            for m in args[1][1]:
                hit = hit | (x == self._apply(m))
            return hit if name == "in" else ~hit
        vals = [self._apply(a) for a in args]  # arrays, bool or of self.dtype: so are the results
        if name in BOOLEAN:
            return np.asarray(OPS[name](*vals), dtype=bool)
        first = 1 if name == "if" else 0  # the condition stays as it is
        vals[first:] = [v.astype(self.dtype, copy=False) for v in vals[first:]]
        return np.asarray(OPS[name](*vals), dtype=self.dtype)


def _interval_mul(a, b):
    corners = [x * y for x in a for y in b]
    return min(corners), max(corners)


def _interval_abs(a):
    low, high = sorted((abs(a[0]), abs(a[1])))
    return (0 if a[0] <= 0 <= a[1] else low), high


def _interval_pow(a, b):
    base, exponent = max(-a[0], a[1]), max(b[1], 0)  # a negative exponent is refused when evaluated
    if base >= 2 and exponent * (base.bit_length() - 1) > MAX_BITS:
        raise ExpressionError(f"values of the expression reach beyond 2^{MAX_BITS}")
    top = max(base ** exponent, 1)
    return (0 if a[0] >= 0 else -top), top


SPANS = {  # operator -> the interval of its value from its arguments' intervals
    "neg": lambda a: (-a[1], -a[0]),
    "abs": _interval_abs,
    "sqr": lambda a: (_interval_abs(a)[0] ** 2, _interval_abs(a)[1] ** 2),
    "add": lambda a, b: (a[0] + b[0], a[1] + b[1]),
    "sub": lambda a, b: (a[0] - b[1], a[1] - b[0]),
    "mul": _interval_mul,
    "div": lambda a, b: (-max(-a[0], a[1]), max(-a[0], a[1])),  # |a / b| <= |a|
    "mod": lambda a, b: (-min(max(-a[0], a[1]), max(-b[0], b[1])), min(max(-a[0], a[1]), max(-b[0], b[1]))),
    "pow": _interval_pow,
    "min": lambda a, b: (min(a[0], b[0]), min(a[1], b[1])),
    "max": lambda a, b: (max(a[0], b[0]), max(a[1], b[1])),
    "if": lambda c, a, b: (min(a[0], b[0]), max(a[1], b[1])),
}


def _div(a, b):
    if np.any(b == 0):
        raise ExpressionError("division by zero for some values of the scope (undefined in XCSP3)")
    q = abs(a) // abs(b)
    return np.where((a < 0) != (b < 0), -q, q)


def _pow(a, b):
    if np.any(b < 0):
        raise ExpressionError("pow with a negative exponent for some values of the scope (not an integer)")
    return a ** b


def _chain(fn):
    """An n-ary comparison: every consecutive pair."""
    def apply(*vals):
        out = np.bool_(True)
        for a, b in zip(vals, vals[1:]):
            out = out & fn(a, b)
        return out
    return apply


def _fold(fn):
    def apply(*vals):
        out = vals[0]
        for v in vals[1:]:
            out = fn(out, v)
        return out
    return apply


def _b(x):
    return np.asarray(x).astype(bool)


OPS = {  # name -> function on broadcast arrays (arithmetic ones get int64 or object arrays)
    "neg": lambda a: -a,
    "abs": abs,
    "sqr": lambda a: a * a,
    "add": _fold(lambda a, b: a + b),
    "sub": lambda a, b: a - b,
    "mul": _fold(lambda a, b: a * b),
    "div": _div,
    "mod": lambda a, b: a - _div(a, b) * b,
    "pow": _pow,
    "min": _fold(np.minimum),
    "max": _fold(np.maximum),
    "dist": lambda a, b: abs(a - b),
    "lt": lambda a, b: np.asarray(a) < b,
    "le": lambda a, b: np.asarray(a) <= b,
    "ge": lambda a, b: np.asarray(a) >= b,
    "gt": lambda a, b: np.asarray(a) > b,
    "ne": lambda a, b: np.asarray(a) != b,
    "eq": _chain(lambda a, b: np.asarray(a) == b),
    "not": lambda a: ~_b(a),
    "and": _fold(lambda a, b: _b(a) & _b(b)),
    "or": _fold(lambda a, b: _b(a) | _b(b)),
    "xor": _fold(lambda a, b: _b(a) ^ _b(b)),
    "iff": _chain(lambda a, b: _b(a) == _b(b)),
    "imp": lambda a, b: ~_b(a) | _b(b),
    "if": lambda c, a, b: np.where(_b(c), a, b),
}
