"""toulbar2 .wcsp reader.

Follows the format as documented in toulbar2's reader (src/tb2reader.cpp,
"Weighted Constraint Satisfaction Problem file format"): header
`name n maxdomain e ub`, n domain sizes, then e cost functions in extension
(`arity scope... default ntuples` + tuples) or in intension (`default` = -1
followed by a keyword). Costs >= ub are forbidden. Shared tables: a negative
arity marks a table as shared (numbered 1, 2, ... in order of appearance) and
a negative tuple count `-k` reuses shared table k. As in toulbar2, a reused
table of arity <= 3 comes whole, its default included (the reusing function's
own default is ignored), while from arity 4 on only its tuples are reused,
over the reusing function's own default, and a shared definition of arity >= 4
with no tuple and default 0 takes no number (see `_extension`; checked against
pytoulbar2 in tests/test_wcsp_shared.py). Duplicate tuples: the last one wins,
as in toulbar2. Tables are made dense only once the whole file is read and
each one charged to the reading budget (tables.charge), so a file that does
not fit is refused before any is allocated.
Global cost functions (`arity scope -1 keyword ...`):
`salldiff var|dec|decbi cost` (a soft AllDifferent, cost per variable to change or
per pair of equal variables; hard when cost >= ub) and `alldiff k v1 .. vk` (hard,
values v1..vk exempt, as toulbar2 writes it) are kept whole (model.AllDifferent);
other global keywords are refused by name.
"""
from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np

from gpusolve.model.problem import (
    FORBIDDEN, AllDifferent, CostFunction, ModelError, Problem, Variable, finalize_integer
)

from .errors import ParseError, quote
from .source import read_lines
from .tables import FUNCTION_BYTES, VARIABLE_BYTES, Listed, charge, too_large
from .tokens import INT64_MAX, Tokens

DENSE_SHARED = 3  # toulbar2 keeps shared tables up to this arity dense, longer ones as tuples
CHUNK = 1 << 18  # tokens (or table entries) converted at a time, bounding the temporaries
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
    _charge(t, n * VARIABLE_BYTES, f"{n:,} variables")
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

    pending: list[tuple[tuple[int, ...], Callable[[], np.ndarray]]] = []  # (scope, its table's maker)
    globals_: list[AllDifferent] = []
    shared: list[Listed] = []  # the shared definitions toulbar2 numbers, in order
    offset = 0
    for _ in range(e):
        arity = t.int("cost function arity")
        is_shared = arity < 0
        arity = abs(arity)
        scope = t.scope(arity, n)
        if arity == 0:
            offset += _constant(t)
            continue
        _charge(t, FUNCTION_BYTES, "a cost function")
        default = t.int("default cost")
        if default == -1:
            if is_shared:
                raise t.error("cost functions in intension cannot be shared")
            keyword = t.word("cost function keyword")
            if keyword in GLOBALS:
                globals_.append(_alldiff(t, keyword, scope, domains, ub))
            else:
                pending.append((scope, _intension(t, keyword, scope, domains)))
        elif default < 0:
            raise t.error("negative costs are not supported")
        else:
            listed = _extension(t, scope, domains, _check_cost(t, default), shared, is_shared)
            pending.append((scope, listed.table))
    t.expect_end(f"unexpected data after the last cost function (the header announces {e})")

    functions = [CostFunction(scope, _forbid(make(), ub)) for scope, make in pending]
    variables = [Variable(f"x{i}", d) for i, d in enumerate(domains)]
    problem = Problem(name, variables, functions, integer=True, offset=offset, sense=1, task="WCSP",
                      globals=globals_)
    try:
        return finalize_integer(problem, ub)
    except ModelError as err:
        raise ParseError(path, None, str(err)) from None


def _charge(t: Tokens, nbytes: int, what: str) -> None:
    message = charge(nbytes, what)
    if message:
        raise t.error(message)


def _forbid(table: np.ndarray, ub: int) -> np.ndarray:
    table[table >= ub] = FORBIDDEN
    return table


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


def _extension(t: Tokens, scope, domains, default: int, shared: list[Listed], is_shared: bool) -> Listed:
    """The function's default and tuples, or those of the shared table it reuses (`ntuples` = -k).

    toulbar2 (tb2reader.cpp) keeps a shared table of arity <= 3 as its dense cost vector, reused whole:
    the reusing function's own default is ignored. From arity 4 on (its n-ary tables) it keeps the
    listed tuples, posted over the reusing function's own default, and a definition with no tuple and
    default 0 posts nothing, so it takes no number."""
    shape = _shape(t, scope, domains)
    ntuples = t.int("number of tuples")
    if ntuples < 0:
        k = -ntuples
        if is_shared:
            raise t.error("a shared cost function must list its own tuples, not reuse another")
        if k > len(shared):
            raise t.error(f"shared cost function {k} is not defined (only {len(shared)} so far)")
        listed = shared[k - 1]
        if listed.shape != shape:
            raise t.error(f"shared cost function {k} has domain sizes {listed.shape}, this scope {shape}")
        return listed if len(scope) <= DENSE_SHARED else listed._replace(default=default)
    rows, costs = _tuples(t, scope, shape, ntuples)
    listed = Listed(shape, default, rows, costs)
    if is_shared and (len(scope) <= DENSE_SHARED or default or ntuples):
        shared.append(listed)
    return listed


def _tuples(t: Tokens, scope, shape, ntuples: int) -> tuple[np.ndarray, np.ndarray]:
    """`ntuples` rows of domain indices and their costs, read CHUNK tokens at a time (the words of a
    whole large table would take ~60 bytes each)."""
    width = len(scope) + 1
    _charge(t, ntuples * width * 8, f"{ntuples:,} tuples")
    data = np.empty((ntuples, width), dtype=np.int64)
    step = max(CHUNK // width, 1)
    for start in range(0, ntuples, step):
        part, lines = t.ints(min(step, ntuples - start) * width, "tuple entry")
        part = part.reshape(-1, width)
        values, costs = part[:, :-1], part[:, -1]
        for col, size in enumerate(shape):
            bad = np.flatnonzero((values[:, col] < 0) | (values[:, col] >= size))
            if bad.size:
                row = bad[0]
                raise t.error(f"value {values[row, col]} out of domain of variable {scope[col]} (size {size})",
                              lines[row * width + col])
        negative = np.flatnonzero(costs < 0)
        if negative.size:
            raise t.error("negative costs are not supported", lines[(negative[0] + 1) * width - 1])
        data[start:start + len(part)] = part
    return data[:, :-1], data[:, -1]


def _alldiff(t: Tokens, keyword: str, scope, domains, ub: int) -> AllDifferent:
    """`salldiff var|dec|decbi cost` or `alldiff k v1 .. vk`; the values are the domain indices."""
    _charge(t, 8 * sum(domains[v] for v in scope), "the values of an AllDifferent")
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


def _intension(t: Tokens, keyword: str, scope, domains) -> Callable[[], np.ndarray]:
    """The maker of a binary arithmetic function's table, its parameters read now."""
    if keyword in OTHER_GLOBALS:
        raise t.error(f"global cost function {keyword} is not supported (only salldiff and alldiff)")
    if keyword not in ARITHMETIC:
        raise t.error(f"unsupported cost function keyword {keyword}")
    if len(scope) != 2:
        raise t.error(f"keyword {keyword} needs a scope of 2 variables, found {len(scope)}")
    shape = _shape(t, scope, domains)
    if keyword == "disj":
        params = (_param(t, "cstx"), _param(t, "csty"), _cost(t, "penalty"))
    else:
        params = (_param(t, "cst"), _param(t, "delta"))
    return partial(_arithmetic, keyword, params, shape)


def _arithmetic(keyword: str, params: tuple[int, ...], shape: tuple[int, int]) -> np.ndarray:
    """The table, CHUNK entries at a time: numpy's temporaries take several times what they compute."""
    table = np.empty(shape, dtype=np.int64)
    flat = table.reshape(-1)
    for start in range(0, flat.size, CHUNK):
        index = np.arange(start, min(start + CHUNK, flat.size), dtype=np.int64)
        flat[start:start + len(index)] = _arithmetic_costs(keyword, params, index // shape[1], index % shape[1])
    return table


def _arithmetic_costs(keyword: str, params: tuple[int, ...], x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if keyword == "disj":
        cstx, csty, penalty = params
        return np.where((x >= y + csty) | (y >= x + cstx), 0, penalty)
    cst, delta = params
    if keyword == ">=":
        return _geq(x, y, cst, delta)
    if keyword == ">":
        return _geq(x, y, cst + 1, delta)
    if keyword == "<=":
        return _geq(y, x, -cst, delta)
    if keyword == "<":
        return _geq(y, x, -cst + 1, delta)
    return _saturating_sum(_geq(x, y, cst, delta), _geq(y, x, -cst, delta))  # "=": both ways, as toulbar2


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
