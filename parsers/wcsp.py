"""toulbar2 .wcsp reader.

Follows the format as documented in toulbar2's reader (src/tb2reader.cpp,
"Weighted Constraint Satisfaction Problem file format"): header
`name n maxdomain e ub`, n domain sizes, then e cost functions in extension
(`arity scope... default ntuples` + tuples) or in intension (`default` = -1
followed by a keyword). Costs >= ub are forbidden. Shared tables: a negative
arity marks a table as shared (numbered 1, 2, ... in order of appearance) and
a negative tuple count `-k` reuses shared table k whole, its default
included: the reusing function's own default cost is ignored, as toulbar2
does (checked with pytoulbar2 in tests/test_formats.py). Duplicate tuples: the last
one wins, as in toulbar2.
Global cost functions (`arity scope -1 keyword ...`):
`salldiff var|dec|decbi cost` (a soft AllDifferent, cost per variable to change or
per pair of equal variables; hard when cost >= ub) and `alldiff k v1 .. vk` (hard,
values v1..vk exempt, as toulbar2 writes it) are kept whole (model.AllDifferent);
other global keywords are refused by name.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from gpusolve.model import FORBIDDEN, AllDifferent, CostFunction, ModelError, Problem, Variable, finalize_integer

from .errors import ParseError, quote
from .source import read_lines
from .tables import assign_tuples, too_large
from .tokens import INT64_MAX, Tokens

MAX_PARAM = 1 << 60  # intension parameters; keeps value arithmetic (even `=`'s sums) inside int64
ARITHMETIC = (">=", ">", "<=", "<", "=", "disj")
# toulbar2's global cost functions: the ones read, then the ones refused by name.
GLOBALS = ("salldiff", "alldiff")
OTHER_GLOBALS = ("sgcc", "ssame", "sregular", "sregulardp", "sgrammar", "sgrammardp", "samong", "samongdp",
                 "salldiffdp", "sgccdp", "max", "smaxdp", "MST", "smstdp", "wregular", "walldiff", "wgcc",
                 "wsame", "wsamegcc", "wamong", "wvaramong", "woverlap", "wsum", "wvarsum", "wdiverse",
                 "whdiverse", "wtdiverse", "knapsack", "knapsackp", "knapsackc", "knapsackv", "clique",
                 "cfnconstraint", "slinear", "sdisj")


def read(path: str | Path) -> Problem:
    t = Tokens(path, read_lines(path))
    name = t.word("problem name")
    n = t.int("number of variables", low=0)
    t.int("maximum domain size")
    e = t.int("number of cost functions", low=0)
    ub = _cost(t, "upper bound")
    domains = []
    for i in range(n):
        d = t.int(f"domain size of variable {i}")
        if d < 0:
            raise t.error(f"interval domain (size {d}) of variable {i} is not supported")
        if d == 0:
            raise t.error(f"variable {i} has an empty domain")
        domains.append(d)

    functions: list[CostFunction] = []
    globals_: list[AllDifferent] = []
    shared: list[np.ndarray] = []  # tables of the shared definitions, in order
    offset = 0
    for _ in range(e):
        arity = t.int("cost function arity")
        is_shared = arity < 0
        arity = abs(arity)
        scope = t.scope(arity, n)
        if arity == 0:
            offset += _constant(t)
            continue
        default = t.int("default cost")
        if default == -1:
            if is_shared:
                raise t.error("cost functions in intension cannot be shared")
            keyword = t.word("cost function keyword")
            if keyword in GLOBALS:
                globals_.append(_alldiff(t, keyword, scope, domains, ub))
                continue
            table = _intension(t, keyword, scope, domains, ub)
        elif default < 0:
            raise t.error("negative costs are not supported")
        else:
            table = _extension(t, scope, domains, _check_cost(t, default), ub, shared, is_shared)
            if is_shared:
                shared.append(table)
        functions.append(CostFunction(scope, table))
    t.expect_end(f"unexpected data after the last cost function (the header announces {e})")

    variables = [Variable(f"x{i}", d) for i, d in enumerate(domains)]
    problem = Problem(name, variables, functions, integer=True, offset=offset, sense=1, task="WCSP",
                      globals=globals_)
    try:
        return finalize_integer(problem, ub)
    except ModelError as err:
        raise ParseError(path, None, str(err)) from None


def _check_cost(t: Tokens, value: int) -> int:
    if value < 0:
        raise t.error("negative costs are not supported")
    if value > INT64_MAX:
        raise t.error(f"cost {value} does not fit in 64 bits")
    return value


def _cost(t: Tokens, what: str) -> int:
    return _check_cost(t, t.int(what))


def _constant(t: Tokens) -> int:
    """Zero-arity function `0 default ntuples [cost]`: a constant added to every solution."""
    default = _cost(t, "default cost")
    ntuples = t.int("number of tuples")
    if ntuples not in (0, 1):
        raise t.error(f"a zero-arity cost function has 0 or 1 tuple, found {ntuples}")
    return _cost(t, "cost") if ntuples else default


def _shape(t: Tokens, scope: tuple[int, ...], domains: list[int]) -> tuple[int, ...]:
    shape = tuple(domains[v] for v in scope)
    message = too_large(shape)
    if message:
        raise t.error(message)
    return shape


def _extension(t: Tokens, scope, domains, default: int, ub: int, shared: list, is_shared: bool) -> np.ndarray:
    shape = _shape(t, scope, domains)
    ntuples = t.int("number of tuples")
    if ntuples < 0:
        k = -ntuples
        if is_shared:
            raise t.error("a shared cost function must list its own tuples, not reuse another")
        if k > len(shared):
            raise t.error(f"shared cost function {k} is not defined (only {len(shared)} so far)")
        table = shared[k - 1]
        if table.shape != shape:
            raise t.error(f"shared cost function {k} has domain sizes {table.shape}, this scope {shape}")
        return table.copy()  # toulbar2 copies the whole table: this function's own default is ignored

    table = np.full(shape, default, dtype=np.int64)
    data, lines = t.ints(ntuples * (len(scope) + 1), "tuple entry")
    data = data.reshape(ntuples, len(scope) + 1)
    values, costs = data[:, :-1], data[:, -1]
    for col, size in enumerate(shape):
        bad = np.flatnonzero((values[:, col] < 0) | (values[:, col] >= size))
        if bad.size:
            row = bad[0]
            raise t.error(f"value {values[row, col]} out of domain of variable {scope[col]} (size {size})",
                          lines[row * (len(scope) + 1) + col])
    negative = np.flatnonzero(costs < 0)
    if negative.size:
        raise t.error("negative costs are not supported", lines[(negative[0] + 1) * (len(scope) + 1) - 1])
    assign_tuples(table, values, costs)
    table[table >= ub] = FORBIDDEN
    return table


def _alldiff(t: Tokens, keyword: str, scope, domains, ub: int) -> AllDifferent:
    """`salldiff var|dec|decbi cost` or `alldiff k v1 .. vk`; the values are the domain indices."""
    values = tuple(np.arange(domains[v], dtype=np.int64) for v in scope)
    if keyword == "alldiff":
        count = t.int("number of exempt values", low=0)
        exempt = frozenset(t.int("exempt value") for _ in range(count))
        return AllDifferent(scope, values, FORBIDDEN, "var", exempt)
    metric = t.word("salldiff metric (var, dec or decbi)")
    if metric not in ("var", "dec", "decbi"):
        raise t.error(f"salldiff metric {quote(metric)} is none of var, dec, decbi")
    cost = _cost(t, "salldiff cost")
    return AllDifferent(scope, values, FORBIDDEN if cost >= ub else cost, "var" if metric == "var" else "dec")


def _intension(t: Tokens, keyword: str, scope, domains, ub: int) -> np.ndarray:
    if keyword in OTHER_GLOBALS:
        raise t.error(f"global cost function {keyword} is not supported (only salldiff and alldiff)")
    if keyword not in ARITHMETIC:
        raise t.error(f"unsupported cost function keyword {keyword}")
    if len(scope) != 2:
        raise t.error(f"keyword {keyword} needs a scope of 2 variables, found {len(scope)}")
    dx, dy = _shape(t, scope, domains)
    x = np.arange(dx, dtype=np.int64)[:, None]
    y = np.arange(dy, dtype=np.int64)[None, :]
    if keyword == "disj":
        cstx, csty = _param(t, "cstx"), _param(t, "csty")
        penalty = _cost(t, "penalty")
        table = np.where((x >= y + csty) | (y >= x + cstx), 0, penalty)
    else:
        cst, delta = _param(t, "cst"), _param(t, "delta")
        if keyword == ">=":
            table = _geq(x, y, cst, delta)
        elif keyword == ">":
            table = _geq(x, y, cst + 1, delta)
        elif keyword == "<=":
            table = _geq(y, x, -cst, delta)
        elif keyword == "<":
            table = _geq(y, x, -cst + 1, delta)
        else:  # "=": both directions, as toulbar2 posts it
            table = _saturating_sum(_geq(x, y, cst, delta), _geq(y, x, -cst, delta))
    table = table.astype(np.int64)  # a fresh, writable (dx, dy) array
    table[table >= ub] = FORBIDDEN
    return table


def _param(t: Tokens, what: str) -> int:
    value = t.int(what)
    if abs(value) > MAX_PARAM:
        raise t.error(f"{what} {value} out of range (|{what}| <= 2^60)")
    return value


def _geq(a: np.ndarray, b: np.ndarray, cst: int, delta: int) -> np.ndarray:
    """toulbar2's soft `a >= b + cst`: max(gap, 0) with gap = b + cst - a, forbidden if gap > delta."""
    gap = b + cst - a
    return np.where(gap <= delta, np.maximum(gap, 0), FORBIDDEN)


def _saturating_sum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.where((a == FORBIDDEN) | (b == FORBIDDEN), FORBIDDEN, a + b)
