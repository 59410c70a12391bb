"""toulbar2 .wcsp: its reader and its writer (`write_wcsp`).

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
the ones of decompose.TOULBAR2 (wsum, wamong, wregular, sgcc, knapsack, ...) are read
into the parameters toulbar2's CFN format names (`_global`) and decomposed into tables
over auxiliary variables (decompose.py); other global keywords are refused by name.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np

from . import decompose
from .decompose import ARITHMETIC, DecompositionError, Indices, Network, arithmetic
from gpusolve.model.problem import FORBIDDEN, AllDifferent, CostFunction, ModelError, Problem, Variable, finalize_integer

from .errors import ParseError, quote
from .source import open_text, read_chunks, reading_sizes
from .tables import FUNCTION_BYTES, VARIABLE_BYTES, Listed, charge, too_large
from .tokens import INT64_MAX, Tokens, read_tokens

DENSE_SHARED = 3  # toulbar2 keeps shared tables up to this arity dense, longer ones as tuples
MAX_PARAM = 1 << 60  # intension parameters; keeps value arithmetic (even `=`'s sums) inside int64
# toulbar2's global cost functions: the ones kept whole, then the ones refused by name (decompose.TOULBAR2
# are decomposed).
GLOBALS = ("salldiff", "alldiff")
OTHER_GLOBALS = ("sregulardp", "sgrammar", "sgrammardp", "samongdp", "salldiffdp", "sgccdp", "max", "smaxdp",
                 "MST", "smstdp", "knapsackp", "knapsackc", "knapsackv", "clique", "cfnconstraint", "slinear",
                 "salldiffkp", "gcc", "wcsp")


def read(path: str | Path) -> Problem:
    return read_tokens(path, read_chunks(path), partial(_read, path))


def _read(path: str | Path, t: Tokens) -> Problem:
    name = t.word("problem name")
    n = t.int("number of variables", low=0)
    _charge(t, n * VARIABLE_BYTES, f"{n:,} variables")
    t.int("maximum domain size")
    e = t.int("number of cost functions", low=0)
    ub = _cost(t, "upper bound")
    domains = []
    for i in range(n):
        d = t.int(f"domain size of variable {i}")
        d = abs(d)  # negative: toulbar2's interval variable, values 0..|d|-1 all the same
        if d == 0:
            raise t.error(f"variable {i} has an empty domain")
        domains.append(d)

    pending: list[tuple[tuple[int, ...], Callable[[], np.ndarray]]] = []  # (scope, its table's maker)
    globals_: list[AllDifferent] = []
    variables = [Variable(f"x{i}", d) for i, d in enumerate(domains)]
    net = Network(variables, Indices(domains), [])  # decompositions add to it
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
            elif keyword in decompose.TOULBAR2:
                _decompose(t, net, keyword, scope, _global(t, keyword, scope, domains))
            else:
                pending.append((scope, _intension(t, keyword, scope, domains)))
        elif default < 0:
            raise t.error("negative costs are not supported")
        else:
            listed = _extension(t, scope, domains, _check_cost(t, default), shared, is_shared)
            pending.append((scope, listed.table))
    t.expect_end(f"unexpected data after the last cost function (the header announces {e})")

    functions = [CostFunction(scope, _forbid(make(), ub)) for scope, make in pending]
    for f in net.functions:  # dense tables or a partial sum's tuples: costs >= ub are forbidden there too
        f.map_costs(lambda costs: np.where(costs >= ub, FORBIDDEN, costs))
    functions += net.functions
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
    """`ntuples` rows of domain indices and their costs, read Limits.chunk tokens at a time (the words of a
    whole large table would take ~60 bytes each)."""
    width = len(scope) + 1
    _charge(t, ntuples * width * 8, f"{ntuples:,} tuples")
    data = np.empty((ntuples, width), dtype=np.int64)
    step = max(reading_sizes().chunk // width, 1)
    for start in range(0, ntuples, step):
        part, lines = t.ints(min(step, ntuples - start) * width, "tuple entry")
        part = part.reshape(-1, width)
        values, costs = part[:, :-1], part[:, -1]
        outside = (values < 0) | (values >= shape)  # checked at once; the first column with one is reported
        if outside.any():
            col = int(np.flatnonzero(outside.any(axis=0))[0])
            row = int(np.flatnonzero(outside[:, col])[0])
            raise t.error(f"value {values[row, col]} out of domain of variable {scope[col]} (size {shape[col]})",
                          lines[row * width + col])
        if costs.min() < 0:
            raise t.error("negative costs are not supported", lines[(np.flatnonzero(costs < 0)[0] + 1) * width - 1])
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


def _global(t: Tokens, keyword: str, scope, domains) -> dict:
    """The parameters of a decomposed global, read in toulbar2's wcsp order (tb2reader.cpp) into
    the names of its CFN format."""
    p: dict = {}
    if keyword in decompose.METRICS:
        p["metric"] = t.word(f"{keyword} metric")
    if keyword not in ("wregular", "knapsack", "wdiverse", "whdiverse", "wtdiverse"):
        p["cost"] = _cost(t, f"{keyword} cost")
    if keyword in ("wsum", "wvarsum", "woverlap"):
        p["comparator"] = t.word("comparator")
        if keyword != "wvarsum":
            p["to"] = _param(t, "right-hand side")
    elif keyword == "samong":
        p["min"], p["max"] = _param(t, "lower bound"), _param(t, "upper bound")
        p["values"] = _list(t, "value", lambda: _param(t, "value"))
    elif keyword in ("wamong", "wvaramong"):
        p["values"] = _list(t, "value", lambda: _param(t, "value"))
        if keyword == "wamong":
            p["min"], p["max"] = _param(t, "lower bound"), _param(t, "upper bound")
    elif keyword in ("wgcc", "sgcc", "wsamegcc"):
        weights = 2 if p["metric"] == "wdec" else 0  # shortage and excess weights
        p["bounds"] = _list(t, "value", lambda: [_param(t, "value"), _param(t, "lower bound"), _param(t, "upper bound"),
                                                 *(_cost(t, "weight") for _ in range(weights))])
    elif keyword == "ssame":
        sizes = t.int("size of the first list", low=0), t.int("size of the second list", low=0)
        p["vars1"], p["vars2"] = [[t.int("variable", low=0) for _ in range(size)] for size in sizes]
    elif keyword in ("wregular", "sregular"):
        _automaton(t, keyword, p)
    elif keyword == "knapsack":
        p["capacity"] = _param(t, "capacity")
        p["weights"] = [_param(t, "weight") for _ in scope]
    elif keyword in ("wdiverse", "whdiverse", "wtdiverse"):
        p["distance"] = _param(t, "distance")
        p["values"] = [_param(t, "value") for _ in scope]
    return p


def _list(t: Tokens, what: str, read_one: Callable) -> list:
    """A count, then that many items."""
    return [read_one() for _ in range(t.int(f"number of {what}s", low=0))]


def _automaton(t: Tokens, keyword: str, p: dict) -> None:
    """wregular: states, (state cost) starts and ends, (start symbol end cost) transitions; sregular:
    the same without costs."""
    p["nb_states"] = t.int("number of states", low=1)
    width = 1 if keyword == "wregular" else 0

    def ends() -> list:
        return _list(t, "state", lambda: (t.int("state"), *(_cost(t, "state cost") for _ in range(width))))

    p["starts"], p["ends"] = ends(), ends()
    p["transitions"] = _list(t, "transition", lambda: (t.int("state"), _param(t, "symbol"), t.int("state"),
                                                       *(_cost(t, "transition cost") for _ in range(width))))
    if not width:
        p["starts"], p["ends"] = [s for s, in p["starts"]], [s for s, in p["ends"]]


def _decompose(t: Tokens, net: Network, keyword: str, scope, params: dict) -> None:
    try:
        decompose.toulbar2(net, keyword, scope, params, f"{keyword}{len(net.variables)}")
    except DecompositionError as err:
        raise t.error(f"global cost function {keyword}: {err}") from None


def _intension(t: Tokens, keyword: str, scope, domains) -> Callable[[], np.ndarray]:
    """The maker of a binary arithmetic function's table, its parameters read now."""
    if keyword in OTHER_GLOBALS:
        raise t.error(f"global cost function {keyword} is not supported")
    if keyword not in ARITHMETIC:
        raise t.error(f"unsupported cost function keyword {keyword}")
    if len(scope) != 2:
        raise t.error(f"keyword {keyword} needs a scope of 2 variables, found {len(scope)}")
    shape = _shape(t, scope, domains)
    costs = ("penalty", "costx", "costy")
    params = tuple(_cost(t, name) if name in costs else _param(t, name) for name in ARITHMETIC[keyword])
    return partial(arithmetic, keyword, params, shape)


def _param(t: Tokens, what: str) -> int:
    value = t.int(what)
    if abs(value) > MAX_PARAM:
        raise t.error(f"{what} {value} out of range (|{what}| <= 2^60)")
    return value


def write_wcsp(problem: Problem, path: str | Path) -> None:
    """toulbar2 .wcsp: every tuple listed (default cost 0), forbidden entries as top.

    Written for integer problems whose top is the file's upper bound; a negative
    offset (from negative costs) is spread as a constant the format allows: none
    below zero, so it raises. AllDifferents left out of the tables become
    toulbar2 global cost functions (`salldiff`, cost top when hard; `alldiff`
    for a hard one with exempt values); ValueError for one toulbar2 cannot
    express (values other than the domain indices).
    """
    _integer_minimisation(problem, ".wcsp")
    if problem.offset < 0:
        raise ValueError(".wcsp has no negative costs: write this problem as .cfn")
    top = int(problem.top) + int(problem.offset)
    globals_ = [_global_line(g, problem.top, top) for g in problem.globals if not g.tabled]
    lines = [f"{problem.name} {len(problem.variables)} {max(problem.domains, default=0)} "
             f"{len(problem.functions) + len(globals_) + (1 if problem.offset else 0)} {top}",
             " ".join(str(d) for d in problem.domains)] + globals_
    for f in problem.functions:
        lines.append(f"{f.arity} {' '.join(map(str, f.scope))} 0 {f.table.size}")
        for values in itertools.product(*(range(s) for s in f.table.shape)):
            cost = int(f.table[values])
            lines.append(" ".join(map(str, values)) + f" {top if cost >= problem.top else cost}")
    if problem.offset:
        lines.append(f"0 {int(problem.offset)} 0")
    with open_text(path) as out:
        out.write("\n".join(lines) + "\n")


def _integer_minimisation(problem: Problem, fmt: str) -> None:
    if not problem.integer or problem.sense != 1 or problem.precision:
        raise ValueError(f"{fmt} holds integer costs to minimise: write this problem as .cfn or .uai")


def _global_line(g, internal_top, top: int) -> str:
    expressible(g, internal_top, ".wcsp")
    head = f"{len(g.scope)} {' '.join(map(str, g.scope))} -1"
    if g.exempt:
        return f"{head} alldiff {len(g.exempt)}" + "".join(f" {v}" for v in sorted(g.exempt))
    return f"{head} salldiff {g.semantics} {top if g.cost >= internal_top else g.cost}"


def expressible(g, internal_top, fmt: str) -> None:
    """Raise unless toulbar2 has a form for AllDifferent `g`: over the domain indices, soft only
    without excepted values."""
    if any(not np.array_equal(vals, np.arange(len(vals))) for vals in g.values):
        raise ValueError(f"an AllDifferent over values other than the domain indices has no {fmt} form")
    if g.exempt and g.cost < internal_top:
        raise ValueError(f"a soft AllDifferent with exempt values has no {fmt} form")
