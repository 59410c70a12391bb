"""Global cost functions as bounded-arity tables over auxiliary state variables.

A global cost function's table is exponential in its arity, but the cost of many of them depends on
the assignment only through a small state read left to right: a partial sum, an automaton's state,
a counter. The decomposition adds one auxiliary variable per state (`Variable.auxiliary`: never
reported) and a ternary table (state, variable, next state) per position; the minimum over the
auxiliary variables of the sum of the tables is the global's cost (Allouche et al., "Tractability-
preserving transformations of global cost functions", AIJ 2016), so the optimum stays the same and
elimination works on tables of |states|^2 |domain| entries. The states of each position are the
ones reachable from the start that can still reach an allowed end, so a linear constraint's
partial sums are pruned to what can still satisfy the bound. A partial sum's step s' = s + w[x]
is functional: beyond Limits.listed_min entries it is kept as its allowed tuples (model.TupleFunction), so
reading takes |s| |domain| rows, not the dense table (elimination makes it dense if its plan fits).

Costs follow toulbar2 (src/core/tb2globaldecomposable.cpp, the flow- and DP-based globals'
evalOriginal): a violation `gap` costs `base` (hard), `base * gap` (lin, var, dec) or
`base * gap^2` (quad), FORBIDDEN from int64's end on. A decomposition that would take more than
MAX_STATES partial sums, or an automaton whose tables would have more than MAX_ENTRIES entries,
is refused (DecompositionError) with the reason. The CP models' constraints (XCSP3, FlatZinc) are
decomposed here too: `linear` (a sum and a condition), `reified` (its truth as a 0/1 variable),
`element` (a table per list entry).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from gpusolve.model.problem import FORBIDDEN, CostFunction, TupleFunction, Variable
from .source import reading_sizes
from .tables import MAX_LINEAR, Labels, charge, linear_sum, too_large

MAX_STATES = 1 << 20  # values of one auxiliary variable
MAX_ENTRIES = 1 << 24  # entries of one automaton table
DIRECT_ENTRIES = 1 << 12  # a linear constraint whose whole table is this small stays one table (whole_table)
MAX_WEIGHT = 1 << 62  # |sum| of a linear constraint: exact int64 arithmetic ends there
COMPARATORS = ("==", "!=", "<", "<=", ">", ">=")  # toulbar2's, in wsum, wvarsum, woverlap


class DecompositionError(ValueError):
    """A global whose decomposition is refused (the message says why)."""


class Indices(list):
    """Per variable, the integer of each domain index, where an int d stands for 0 .. d-1, made only
    when a decomposition asks (a wcsp file's values are its indices; domains may be huge)."""

    def __getitem__(self, v):
        got = super().__getitem__(v)
        return np.arange(got, dtype=np.int64) if isinstance(got, int) else got


class Network:
    """The variables, their values (the integer of each domain index) and the tables of a model
    being read; decompositions add auxiliary variables and tables to them (the reader's own lists)."""

    def __init__(self, variables: list[Variable], values: list[np.ndarray], functions: list[CostFunction]):
        self.variables, self.values, self.functions = variables, values, functions

    def auxiliary(self, name: str, values: np.ndarray) -> int:
        values = np.asarray(values, dtype=np.int64)
        self.variables.append(Variable(name, len(values), Labels(values), auxiliary=True))
        self.values.append(values)
        return len(self.variables) - 1

    def add(self, scope: Sequence[int], make: Callable[[], np.ndarray]) -> None:
        """The table `make()` over `scope`, charged to the reading budget before it is made."""
        shape = tuple(self.variables[v].domain for v in scope)
        message = too_large(shape)
        if message:
            raise DecompositionError(message)
        self.functions.append(CostFunction(tuple(scope), np.asarray(make(), dtype=np.int64).reshape(shape)))

    def add_allowed(self, scope: Sequence[int], rows: int, make: Callable[[], np.ndarray]) -> None:
        """A hard function over `scope` allowing the tuples `make()` lists (domain indices, at most
        `rows`): dense up to Limits.listed_min entries, else kept as its tuples, charged first."""
        shape = tuple(self.variables[v].domain for v in scope)
        if math.prod(shape) <= reading_sizes().listed_min:
            def dense() -> np.ndarray:
                table = np.full(shape, FORBIDDEN, dtype=np.int64)
                table[tuple(make().T)] = 0
                return table
            self.add(scope, dense)
            return
        message = charge(rows * 8 * (3 * len(scope) + 2), f"the {rows:,} tuples of a partial sum",
                         kept=rows * 8 * (len(scope) + 1))
        if message:
            raise DecompositionError(message)
        tuples = make()
        self.functions.append(TupleFunction(scope, shape, tuples, np.zeros(len(tuples), dtype=np.int64), FORBIDDEN))

    def forbid(self) -> None:
        """No assignment satisfies the global: a constant FORBIDDEN."""
        self.functions.append(CostFunction((), np.array(FORBIDDEN, dtype=np.int64)))


# --- costs ------------------------------------------------------------------------------------------

def scaled(units, base: int) -> np.ndarray:
    """base * units, FORBIDDEN where that reaches it (units >= 0)."""
    units = np.asarray(units, dtype=np.int64)
    if base == 0:
        return np.zeros(units.shape, dtype=np.int64)
    limit = FORBIDDEN // base
    return np.where(units > limit, FORBIDDEN, np.minimum(units, limit) * base)


def violation(gap, semantics: str, base: int) -> np.ndarray:
    """toulbar2's cost of a violation `gap` >= 0: base if any (hard), base * gap (lin, var, dec),
    base * gap^2 (quad)."""
    gap = np.minimum(np.asarray(gap, dtype=np.int64), 1 << 31)  # its square stays inside int64
    if semantics == "hard":
        return scaled(gap > 0, base)
    return scaled(gap * gap if semantics == "quad" else gap, base)


def gap(sums: np.ndarray, comparator: str, rhs) -> np.ndarray:
    """How far `sums` are from `sums comparator rhs` (a number, or an array broadcast with them), as
    toulbar2's wsum measures it."""
    if comparator == "==":
        return np.abs(sums - rhs)
    if comparator == "!=":
        return (sums == rhs).astype(np.int64)
    if comparator in ("<", "<="):
        return np.maximum(sums - (rhs - (comparator == "<")), 0)
    return np.maximum(rhs + (comparator == ">") - sums, 0)


def compare(op: str, right) -> Callable[[np.ndarray], np.ndarray]:
    """The hard cost of `sum op right`: op lt, le, gt, ge, eq, ne (a number), in, notin (values)."""
    tests = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "eq": np.equal,
             "ne": np.not_equal}
    if op in ("in", "notin"):
        return lambda sums: np.where(np.isin(sums, right) == (op == "in"), 0, FORBIDDEN)
    return lambda sums: np.where(tests[op](sums, right), 0, FORBIDDEN)


# --- chains -----------------------------------------------------------------------------------------

def linear(net: Network, scope: Sequence[int], values: Sequence[np.ndarray], coeffs: Sequence[int], cost: Callable,
           name: str) -> None:
    """cost(s) for s = sum_k coeffs[k] * values[k][x_k] (`values[k]`: an integer per domain index of
    scope[k]; cost maps an array of sums to costs, FORBIDDEN where forbidden): one table, its sums
    exact even beyond int64, where `whole_table` says so, else a chain of partial sums."""
    if whole_table(values, coeffs):
        sums = linear_sum(list(values), list(coeffs))
        if isinstance(sums, str):
            raise DecompositionError(sums)
        net.add(scope, lambda: cost(np.asarray(sums)))
        return
    total = partial_sums(net, scope, times(values, coeffs), name, lambda sums: cost(sums) < FORBIDDEN)
    net.add((total,), lambda: cost(net.values[total]))


def whole_table(values: Sequence[np.ndarray], coeffs: Sequence[int]) -> bool:
    """Whether a linear constraint is better as its whole table: one of at most DIRECT_ENTRIES
    entries, or, up to MAX_LINEAR, no larger than the largest step (s, x, s') of its chain before
    pruning (a binary x - y <= c over large domains), or whose chain's sums would leave int64 (the
    table's are exact)."""
    entries = math.prod(len(v) for v in values)
    if entries <= DIRECT_ENTRIES or len(values) < 2:
        return True
    if entries > MAX_LINEAR:  # linear_sum's limit
        return False
    try:
        weights = times(values, coeffs)
    except DecompositionError:
        return True
    reach, largest = np.unique(weights[0]), 0
    for w in weights[1:]:
        if len(reach) * len(w) > MAX_STATES:
            return False
        after = np.unique(reach[:, None] + w[None, :])
        largest = max(largest, len(reach) * len(w) * len(after))
        reach = after
    return entries <= largest


def partial_sums(net: Network, scope: Sequence[int], weights: Sequence[np.ndarray], name: str,
                 allowed: Callable[[np.ndarray], np.ndarray] | None = None) -> int:
    """An auxiliary variable s_n = sum_k weights[k][x_k], its values the reachable sums (those
    `allowed` if given), by the chain s_k = s_{k-1} + weights[k][x_k]: tables (x_1, x_2, s_2), then
    (s_{k-1}, x_k, s_k). Each s_k keeps the sums reachable from the left that can still reach an
    allowed total."""
    weights = [np.asarray(w, dtype=np.int64) for w in weights]
    reach = [np.unique(weights[0])]
    for w in weights[1:]:
        _states(len(reach[-1]) * len(w))
        reach.append(np.unique(reach[-1][:, None] + w[None, :]))
    live = [reach[-1][allowed(reach[-1])] if allowed is not None else reach[-1]]
    for k in range(len(weights) - 1, 0, -1):  # backwards: the sums from which an allowed total is reachable
        _states(len(live[0]) * len(weights[k]))
        live.insert(0, reach[k - 1][np.isin(reach[k - 1], (live[0][:, None] - weights[k][None, :]).ravel())])
    if not len(live[-1]):  # no allowed total is reachable (else every s_k keeps a sum)
        net.forbid()
        return net.auxiliary(f"{name}.s", np.zeros(1, np.int64))
    if len(weights) == 1:
        state = net.auxiliary(f"{name}.s1", live[0])
        net.add((scope[0], state), lambda: np.where(weights[0][:, None] == live[0][None, :], 0, FORBIDDEN))
        return state
    previous, before = scope[0], weights[0]  # x_1 stands for s_1: its sum is its weight
    for k in range(1, len(weights)):
        state = net.auxiliary(f"{name}.s{k + 1}", live[k])
        net.add_allowed((previous, scope[k], state), len(before) * len(weights[k]),
                        lambda b=before, w=weights[k], s=live[k]: _step(b, w, s))
        previous, before = state, live[k]
    return state


def _step(before: np.ndarray, w: np.ndarray, after: np.ndarray) -> np.ndarray:
    """The tuples (s, x, s') (domain indices) where s' = s + w[x]."""
    target = before[:, None] + w[None, :]
    at = np.minimum(np.searchsorted(after, target), len(after) - 1)
    i, j = np.nonzero(after[at] == target)
    return np.stack([i, j, at[i, j]], axis=1)


def _states(count: int) -> None:
    if count > MAX_STATES:
        raise DecompositionError(f"its partial sums would take {count:,} values (at most 2^20): the "
                                 f"decomposition would be exponential")


def automaton(net: Network, scope: Sequence[int], initial: np.ndarray, step: Callable[[int], np.ndarray],
              final: np.ndarray, name: str) -> None:
    """A weighted automaton read along `scope`: cost initial[q_0] + sum_k step(k)[q_{k-1}, x_k, q_k]
    + final[q_n], minimised over the state variables q_k (FORBIDDEN: no such start, move or end).
    Each q_k keeps the states reachable from a start that can still reach an end."""
    initial, final = np.asarray(initial, dtype=np.int64), np.asarray(final, dtype=np.int64)
    moves = [np.asarray(step(k), dtype=np.int64) for k in range(len(scope))]
    live = [initial < FORBIDDEN]
    for m in moves:
        live.append((m[live[-1]] < FORBIDDEN).any(axis=(0, 1)))
    live[-1] &= final < FORBIDDEN
    for k in range(len(moves) - 1, -1, -1):
        live[k] &= (moves[k][:, :, live[k + 1]] < FORBIDDEN).any(axis=(1, 2))
    if not live[0].any():
        net.forbid()
        return
    states = [np.flatnonzero(a) for a in live]
    q = [net.auxiliary(f"{name}.q{k}", s) for k, s in enumerate(states)]
    net.add((q[0],), lambda: initial[states[0]])
    for k, m in enumerate(moves):
        net.add((q[k], scope[k], q[k + 1]), lambda m=m, a=states[k], b=states[k + 1]: m[a][:, :, b])
    net.add((q[-1],), lambda: final[states[-1]])


# --- toulbar2's global cost functions -----------------------------------------------------------------

# The globals decomposed here, by their toulbar2 keyword; toulbar2's others are refused by name.
TOULBAR2 = ("wsum", "wvarsum", "wamong", "wvaramong", "samong", "walldiff", "walldifferent", "wgcc", "sgcc",
            "wsame", "ssame", "wsamegcc", "woverlap", "wregular", "sregular", "knapsack", "wdiverse", "whdiverse",
            "wtdiverse")
_SOFT = ("hard", "lin", "quad", "var")
# The violation measures read, per global that takes one.
METRICS = {"wsum": _SOFT, "wvarsum": _SOFT, "wamong": _SOFT, "wvaramong": ("hard",), "samong": ("var",),
           "walldiff": _SOFT, "walldifferent": _SOFT, "wgcc": _SOFT, "sgcc": ("var", "dec", "wdec"), "wsame": _SOFT,
           "sregular": ("var", "edit"), "wsamegcc": ("hard", "lin", "quad", "dec"), "woverlap": _SOFT}
MAX_EDIT = 1 << 27  # states^3 x domain: the work of sregular edit's insertions


def toulbar2(net: Network, keyword: str, scope: Sequence[int], p: dict, name: str) -> None:
    """Post toulbar2's global `keyword` over `scope` with the parameters `p`, named as toulbar2's CFN
    format names them (cfnformat.rst; the wcsp reader maps its positional ones to these names): values
    and symbols are the variables' values, `bounds` rows (value, min, max[, shortage, excess weight])."""
    _check(net, keyword, scope, p)
    values = [net.values[v] for v in scope]
    metric, base = p.get("metric", "hard"), p.get("cost", FORBIDDEN)
    if keyword == "wsum":
        linear(net, scope, values, [1] * len(scope),
               lambda s: violation(gap(s, p["comparator"], p["to"]), metric, base), name)
    elif keyword == "wvarsum":  # the last variable is the right-hand side
        total, last = partial_sums(net, scope[:-1], values[:-1], name), scope[-1]
        net.add((total, last), lambda: violation(gap(net.values[total][:, None], p["comparator"],
                                                     net.values[last][None, :]), metric, base))
    elif keyword in ("wamong", "samong"):
        count_cost(net, scope, p["values"], lambda c: violation(np.maximum(np.maximum(p["min"] - c, c - p["max"]), 0),
                                                                 metric, base), name)
    elif keyword == "wvaramong":
        count, last = counter(net, scope[:-1], p["values"], name), scope[-1]
        net.add((count, last), lambda: scaled(net.values[count][:, None] != net.values[last][None, :], base))
    elif keyword in ("walldiff", "walldifferent"):
        for x in np.unique(np.concatenate(values)):
            count_cost(net, scope, [x], lambda c: violation(np.maximum(c - 1, 0), metric, base), f"{name}.{x}")
    elif keyword == "wgcc" or keyword == "sgcc" and metric in ("dec", "wdec"):
        for row in p["bounds"]:
            count_cost(net, scope, [row[0]], lambda c, r=row: _cardinality(c, r, metric, base), f"{name}.{row[0]}")
    elif keyword == "sgcc":
        gcc_var(net, scope, p["bounds"], base, name)
    elif keyword in ("wsame", "ssame", "wsamegcc"):
        half = len(scope) // 2
        left, right = (p["vars1"], p["vars2"]) if keyword == "ssame" else (scope[:half], scope[half:])
        bounds = {row[0]: row for row in p.get("bounds", ())}  # wsamegcc: each side's cardinalities
        for x in np.unique(np.concatenate(values)):
            a, b = counter(net, left, [x], f"{name}.{x}.l"), counter(net, right, [x], f"{name}.{x}.r")
            diff = net.values[a][:, None] - net.values[b][None, :]
            net.add((a, b), lambda d=diff: scaled(np.maximum(d, 0), base) if keyword == "ssame"
                    else violation(np.abs(d), metric, base))  # ssame: sum |diff| / 2 = the sum of the excesses
            for side in (a, b) if x in bounds else ():
                net.add((side,), lambda c=side, r=bounds[x]: _cardinality(net.values[c], r, metric, base))
    elif keyword == "woverlap":  # pairs (x_i, y_i) equal on a value other than 0, counted
        half = len(scope) // 2
        equal = [_indicator(net, x, y, lambda u, v: (u == v) & (v != 0), f"{name}.o{k}")
                 for k, (x, y) in enumerate(zip(scope[:half], scope[half:]))]
        linear(net, equal, [np.arange(2)] * half, [1] * half,
               lambda s: violation(gap(s, p["comparator"], p["to"]), metric, base), name)
    elif keyword in ("wdiverse", "whdiverse", "wtdiverse"):  # a Hamming distance at least `distance`
        apart = [(net.values[v] != x).astype(np.int64) for v, x in zip(scope, p["values"])]
        linear(net, scope, apart, [1] * len(scope), compare("ge", p["distance"]), name)
    elif keyword == "wregular":
        _wregular(net, scope, p, name)
    elif keyword == "sregular":
        _sregular(net, scope, p, base, name)
    elif keyword == "knapsack":
        taken = [(v == 1).astype(np.int64) for v in values]  # an item is taken at value 1, as pytoulbar2 reads it
        linear(net, scope, taken, p["weights"], compare("ge", p["capacity"]), name)


def _check(net: Network, keyword: str, scope: Sequence[int], p: dict) -> None:
    """Refuse parameters toulbar2 would misread, and decompositions too large to make."""
    if keyword in METRICS and p.get("metric") not in METRICS[keyword]:
        raise DecompositionError(f"metric {p.get('metric')!r} is not supported (read: {', '.join(METRICS[keyword])})")
    if "comparator" in p and p["comparator"] not in COMPARATORS:
        raise DecompositionError(f"comparator {p['comparator']!r} is none of {' '.join(COMPARATORS)}")
    if keyword in ("wsame", "wsamegcc", "woverlap") and len(scope) % 2:
        raise DecompositionError(f"{keyword} needs a scope of even size, found {len(scope)}")
    if keyword in ("wdiverse", "whdiverse", "wtdiverse") and len(p["values"]) != len(scope):
        raise DecompositionError(f"{keyword} needs a value per variable ({len(scope)}), found {len(p['values'])}")
    if keyword == "ssame" and (len(p["vars1"]) != len(p["vars2"]) or sorted(p["vars1"] + p["vars2"]) != sorted(scope)):
        raise DecompositionError("ssame needs two lists of equal size that split its scope")
    if keyword == "knapsack" and len(p["weights"]) != len(scope):
        raise DecompositionError(f"knapsack needs a weight per variable ({len(scope)}), found {len(p['weights'])}")
    if keyword in ("wvarsum", "wvaramong") and len(scope) < 2:
        raise DecompositionError(f"{keyword} needs at least 2 variables")
    weighted = keyword == "wregular"
    widths = {"bounds": 5 if p.get("metric") == "wdec" else 3, "transitions": 4 if weighted else 3,
              "starts": 2 if weighted else 0, "ends": 2 if weighted else 0}  # 0: a bare state
    for field, width in widths.items():
        for row in p.get(field, ()):
            if (len(row) if isinstance(row, (tuple, list)) else 0) != width:
                raise DecompositionError(f"{field} rows are {width or 'single'} numbers, found {row}")
    if keyword in ("wregular", "sregular"):
        widest = max(net.variables[v].domain for v in scope)
        if p["nb_states"] ** 2 * widest > MAX_ENTRIES:
            raise DecompositionError(f"{p['nb_states']:,} states make tables of more than 2^24 entries")
        if p.get("metric") == "edit" and p["nb_states"] ** 3 * widest > MAX_EDIT:
            raise DecompositionError(f"edit distance over {p['nb_states']:,} states: more than 2^27 steps to "
                                     f"tabulate")
        states = [s[0] if weighted else s for s in p["starts"] + p["ends"]]
        states += [s for t in p["transitions"] for s in (t[0], t[2])]
        bad = [s for s in states if not 0 <= s < p["nb_states"]]
        if bad:
            raise DecompositionError(f"state {bad[0]} out of range (the automaton has {p['nb_states']} states)")
    if keyword in ("walldiff", "walldifferent", "wsame", "ssame", "wsamegcc"):  # a counter chain per value
        count = max(net.variables[v].domain for v in scope) * len(scope)  # at most the count: no values made
        if count <= MAX_STATES:
            count = len(np.unique(np.concatenate([net.values[v] for v in scope]))) * len(scope)
        if count > MAX_STATES:
            raise DecompositionError(f"its counters per value would take {count:,} auxiliary variables (at most "
                                     f"2^20)")


def _cardinality(count: np.ndarray, row, metric: str, base: int) -> np.ndarray:
    """The cost of `count` occurrences of a value whose bounds `row` are (value, min, max[, shortage
    weight, excess weight]): sgcc's dec counts each unit of shortage or excess at `base`, wdec at its
    weight, wgcc's hard, lin, quad measure the gap."""
    low, high = row[1], row[2]
    if metric == "wdec":
        short, excess = scaled(np.maximum(low - count, 0), row[3]), scaled(np.maximum(count - high, 0), row[4])
        return np.where((short == FORBIDDEN) | (excess == FORBIDDEN), FORBIDDEN, short + excess)
    return violation(np.maximum(np.maximum(low - count, count - high), 0), "lin" if metric == "dec" else metric, base)


def _indicator(net: Network, x: int, y: int, test: Callable, name: str) -> int:
    """An auxiliary variable (values 0, 1) equal to test(x's value, y's value)."""
    flag = net.auxiliary(name, np.arange(2))
    holds = test(net.values[x][:, None], net.values[y][None, :])
    net.add((x, y, flag), lambda: np.where(holds[:, :, None] == (np.arange(2) == 1), 0, FORBIDDEN))
    return flag


def counter(net: Network, scope: Sequence[int], chosen, name: str) -> int:
    """An auxiliary variable counting the variables of `scope` that take a value in `chosen`."""
    return partial_sums(net, scope, [np.isin(net.values[v], chosen).astype(np.int64) for v in scope], name)


def count_cost(net: Network, scope: Sequence[int], chosen, cost: Callable, name: str) -> None:
    """cost(c) of the number c of variables of `scope` taking a value in `chosen`."""
    linear(net, scope, [np.isin(net.values[v], chosen).astype(np.int64) for v in scope], [1] * len(scope), cost,
           name)


def gcc_var(net: Network, scope: Sequence[int], bounds, base: int, name: str) -> None:
    """sgcc's var measure, base * max(shortage, excess) summed over the bounded values (toulbar2's
    evalOriginal): a counter per value, a chain summing the shortages, one summing the excesses, and
    their maximum, a binary table. As toulbar2, the measure is refused (nothing satisfies it) when the
    scope cannot meet the minima or the maxima at all."""
    bounded = {int(row[0]) for row in bounds}
    free = any(int(x) not in bounded for v in scope for x in net.values[v])
    if sum(row[1] for row in bounds) > len(scope) or not free and sum(row[2] for row in bounds) < len(scope):
        net.forbid()
        return
    counts = [counter(net, scope, [row[0]], f"{name}.{row[0]}") for row in bounds]
    short = partial_sums(net, counts, [np.maximum(row[1] - net.values[c], 0) for c, row in zip(counts, bounds)],
                         f"{name}.short")
    excess = partial_sums(net, counts, [np.maximum(net.values[c] - row[2], 0) for c, row in zip(counts, bounds)],
                          f"{name}.excess")
    net.add((short, excess), lambda: scaled(np.maximum(net.values[short][:, None], net.values[excess][None, :]), base))


def _wregular(net: Network, scope: Sequence[int], p: dict, name: str) -> None:
    """A weighted automaton: costs on its starts, ends and transitions (start, symbol, end, cost)."""
    q = p["nb_states"]
    initial, final = _state_costs(q, p["starts"]), _state_costs(q, p["ends"])

    def step(k: int) -> np.ndarray:
        table = np.full((q, net.variables[scope[k]].domain, q), FORBIDDEN, dtype=np.int64)
        for start, symbol, end, cost in p["transitions"]:
            at = np.flatnonzero(net.values[scope[k]] == symbol)
            table[start, at, end] = cost  # a repeated transition: the last one counts, as in toulbar2
        return table

    automaton(net, scope, initial, step, final, name)


def _sregular(net: Network, scope: Sequence[int], p: dict, base: int, name: str) -> None:
    """sregular: base times the least number of variables to change (var: Hamming distance), or of
    symbols to substitute, delete or insert (edit: edit distance), for a word of the automaton. A
    move q -> q' reads its own symbols at no cost, any other at base; with edit a symbol may also be
    deleted (the state stays, at base) and symbols inserted along moves (base each): the least
    insertions between two states, `inserted`, come before each symbol read and after the last."""
    q, edit = p["nb_states"], p["metric"] == "edit"
    initial = _state_costs(q, [(s, 0) for s in p["starts"]])
    final = _state_costs(q, [(s, 0) for s in p["ends"]])
    if edit:
        inserted = _insertions(q, p["transitions"], base)
        final = np.min(_saturating_sum(inserted, final[None, :]), axis=1)

    def step(k: int) -> np.ndarray:
        table = np.full((q, net.variables[scope[k]].domain, q), FORBIDDEN, dtype=np.int64)
        for start, _, end in p["transitions"]:
            table[start, :, end] = min(base, FORBIDDEN)
        for start, symbol, end in p["transitions"]:
            table[start, net.values[scope[k]] == symbol, end] = 0
        if not edit:
            return table
        states = np.arange(q)
        table[states, :, states] = np.minimum(table[states, :, states], base)  # a deletion
        return np.min([_saturating_sum(inserted[:, s, None, None], table[s][None]) for s in states], axis=0)

    automaton(net, scope, initial, step, final, name)


def _insertions(q: int, transitions, base: int) -> np.ndarray:
    """(q, q) least cost of the symbols inserted to go from a state to another (Floyd-Warshall)."""
    cost = np.full((q, q), FORBIDDEN, dtype=np.int64)
    for start, _, end in transitions:
        cost[start, end] = min(base, FORBIDDEN)
    np.fill_diagonal(cost, 0)
    for k in range(q):
        cost = np.minimum(cost, _saturating_sum(cost[:, k, None], cost[None, k, :]))
    return cost


def _state_costs(q: int, pairs) -> np.ndarray:
    costs = np.full(q, FORBIDDEN, dtype=np.int64)
    for state, cost in pairs:
        costs[state] = cost
    return costs


# --- toulbar2's binary arithmetic functions (x, y: value indices) ------------------------------------------

ARITHMETIC = {">=": ("cst", "delta"), ">": ("cst", "delta"), "<=": ("cst", "delta"), "<": ("cst", "delta"),
              "=": ("cst", "delta"), "disj": ("cstx", "csty", "penalty"),
              "sdisj": ("cstx", "csty", "xinfty", "yinfty", "costx", "costy")}  # keyword -> its parameters


def arithmetic(keyword: str, params: tuple[int, ...], shape: tuple[int, int]) -> np.ndarray:
    """The table of toulbar2's arithmetic function `keyword` (tb2reader.cpp's semantics), Limits.chunk entries
    at a time."""
    table = np.empty(shape, dtype=np.int64)
    flat = table.reshape(-1)
    chunk = reading_sizes().chunk
    for start in range(0, flat.size, chunk):
        index = np.arange(start, min(start + chunk, flat.size), dtype=np.int64)
        flat[start:start + len(index)] = _arithmetic_costs(keyword, params, index // shape[1], index % shape[1])
    return table


def _arithmetic_costs(keyword: str, params: tuple[int, ...], x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if keyword == "disj":
        cstx, csty, penalty = params
        return np.where((x >= y + csty) | (y >= x + cstx), 0, penalty)
    if keyword == "sdisj":  # x <= xinfty, y <= yinfty, both below: disjoint; a cost for each at its infty
        cstx, csty, xinf, yinf, costx, costy = params
        apart = (x == xinf) | (y == yinf) | (x >= y + csty) | (y >= x + cstx)
        cost = _saturating_sum(np.where(x == xinf, costx, 0), np.where(y == yinf, costy, 0))
        return np.where((x <= xinf) & (y <= yinf) & apart, cost, FORBIDDEN)
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


def _geq(a: np.ndarray, b: np.ndarray, cst: int, delta: int) -> np.ndarray:
    """toulbar2's soft `a >= b + cst`: max(gap, 0) with gap = b + cst - a, forbidden if gap > delta."""
    gap = b + cst - a
    return np.where(gap <= delta, np.maximum(gap, 0), FORBIDDEN)


def _saturating_sum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.where((a == FORBIDDEN) | (b == FORBIDDEN), FORBIDDEN, np.minimum(a, FORBIDDEN - b) + b)


# --- CP models' constraints (XCSP3, FlatZinc) ------------------------------------------------------

def times(values: Sequence[np.ndarray], coeffs: Sequence[int]) -> list[np.ndarray]:
    """coeffs[k] * values[k], refused when a sum of them could leave exact int64 arithmetic."""
    if sum(abs(int(a)) * max(abs(int(v.min())), abs(int(v.max()))) for v, a in zip(values, coeffs)) > MAX_WEIGHT \
            or any(abs(int(a)) > MAX_WEIGHT for a in coeffs):
        raise DecompositionError("its sums reach beyond 2^62, where exact integer arithmetic ends")
    return [int(a) * v for v, a in zip(values, coeffs)]


def reified(net: Network, scope: Sequence[int], weights: Sequence[np.ndarray], holds: Callable, flag: int,
            name: str) -> None:
    """flag (values 0, 1) = 1 exactly when holds(sum of weights[k][x_k]): the sum's chain, then one
    binary table (sum, flag)."""
    total = partial_sums(net, scope, weights, name)
    truth = np.asarray(holds(net.values[total]), dtype=bool)
    net.add((total, flag), lambda: np.where(truth[:, None] == (net.values[flag][None, :] != 0), 0, FORBIDDEN))


def element(net: Network, index: int, start: int, items: Sequence[int], value: int) -> None:
    """items[index - start] = value (all variables): for each position k a table over index, items[k]
    and value (one axis per distinct variable) forbids index = start + k where items[k] != value; an
    index beyond the list is forbidden."""
    positions = net.values[index] - start
    net.add((index,), lambda: np.where((positions >= 0) & (positions < len(items)), 0, FORBIDDEN))
    for k, item in enumerate(items):
        scope = list(dict.fromkeys((index, item, value)))

        def table(k=k, item=item, scope=scope) -> np.ndarray:
            of = dict(zip(scope, np.meshgrid(*(net.values[v] for v in scope), indexing="ij")))
            return np.where((of[index] - start == k) & (of[item] != of[value]), FORBIDDEN, 0)

        net.add(scope, table)
