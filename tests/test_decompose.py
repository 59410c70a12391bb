"""Decompositions of global cost functions (parsers/decompose.py) against their whole tables.

Each random global is written in its file format and read; its decomposition, the auxiliary
variables minimised out by plain enumeration (`projection`), must give every assignment of the
file's variables the cost the global's definition gives it (toulbar2's evalOriginal semantics,
written out here), and pytoulbar2, which reads the same file, the same optimum.
"""
import functools
import itertools
import math
import os
from pathlib import Path

import numpy as np
import pytest

from gpusolve.order import graph
from gpusolve.parsers import decompose
from gpusolve.limits import Limits
from gpusolve.parsers import ParseError, read
from gpusolve.plan.buckets import build_plan
from gpusolve.schedule.solve import run

from helpers import toulbar2_file_optimum

INF = math.inf
SEEDS = range(200)


def projection(problem) -> np.ndarray:
    """The cost of each assignment of the file's variables: every table summed (saturating at top),
    the auxiliary variables minimised out one by one."""
    top = problem.top
    shown = [i for i, v in enumerate(problem.variables) if not v.auxiliary]
    tables = [(list(f.scope), f.table.astype(np.int64)) for f in problem.functions]
    for v in (i for i, var in enumerate(problem.variables) if var.auxiliary):
        bucket = [t for t in tables if v in t[0]]
        tables = [t for t in tables if v not in t[0]]
        scope, table = _join(bucket, problem, top)
        tables.append(([u for u in scope if u != v], table.min(axis=scope.index(v))))
    scope, table = _join(tables, problem, top)
    full = np.zeros([problem.variables[v].domain for v in shown], dtype=np.int64)
    order = [scope.index(v) for v in shown if v in scope]
    table = np.transpose(table, order).reshape([problem.variables[v].domain if v in scope else 1 for v in shown])
    return np.minimum(full + table, top)


def _join(tables, problem, top):
    scope = sorted({v for s, _ in tables for v in s})
    total = np.zeros([problem.variables[v].domain for v in scope], dtype=np.int64)
    for s, t in tables:
        order = sorted(range(len(s)), key=lambda k: s[k])
        shape = [problem.variables[v].domain if v in s else 1 for v in scope]
        total = np.minimum(total + np.transpose(t, order).reshape(shape), top)
    return scope, total


def oracle_table(problem, cost) -> np.ndarray:
    """cost(assignment) over the file's variables, clipped to the problem's top (inf: forbidden)."""
    domains = [v.domain for v in problem.variables if not v.auxiliary]
    out = np.empty(domains, dtype=np.int64)
    for a in itertools.product(*map(range, domains)):
        c = cost(a)
        out[a] = problem.top if c == INF or c >= problem.top else c
    return out


# --- toulbar2's globals -------------------------------------------------------------------------------

def unit(gap, metric, base):
    """toulbar2's cost of a violation gap."""
    if gap == 0:
        return 0
    return base if metric == "hard" else base * gap if metric in ("lin", "var", "dec") else base * gap * gap


def wsum_gap(total, comparator, rhs):
    return {"==": abs(total - rhs), "!=": int(total == rhs), "<=": max(0, total - rhs),
            "<": max(0, total - rhs + 1), ">=": max(0, rhs - total), ">": max(0, rhs - total + 1)}[comparator]


def random_global(rng, kind, n, domains):
    """(the wcsp text of the global's parameters, its cost of an assignment)."""
    metric = str(rng.choice(["hard", "lin", "quad"]))
    base = int(rng.integers(1, 6))
    values = sorted({int(x) for x in rng.integers(0, max(domains), size=int(rng.integers(1, 3)))})
    if kind == "wsum":
        comparator, rhs = str(rng.choice(list(decompose.COMPARATORS))), int(rng.integers(0, 2 * n + 1))
        return f"wsum {metric} {base} {comparator} {rhs}", lambda a: unit(wsum_gap(sum(a), comparator, rhs),
                                                                          metric, base)
    if kind in ("wamong", "samong"):
        low = int(rng.integers(0, n))
        high = int(rng.integers(low, n + 1))
        metric = metric if kind == "wamong" else "var"

        def among(a):
            c = sum(x in values for x in a)
            return unit(max(0, low - c, c - high), metric, base)

        listed = f"{len(values)} {' '.join(map(str, values))}"
        text = f"wamong {metric} {base} {listed} {low} {high}" if kind == "wamong" \
            else f"samong var {base} {low} {high} {listed}"
        return text, among
    if kind == "walldiff":
        return f"walldiff {metric} {base}", lambda a: sum(unit(max(0, a.count(x) - 1), metric, base) for x in set(a))
    if kind in ("wgcc", "sgcc"):
        if kind == "sgcc":
            metric = str(rng.choice(["var", "dec", "wdec"]))
        rows = []
        for x in values:
            low = int(rng.integers(0, 3))
            rows.append((x, low, low + int(rng.integers(0, 2)), *rng.integers(0, 4, size=2 if metric == "wdec" else 0)))
        text = f"{kind} {metric} {base} {len(rows)} " + " ".join(" ".join(map(str, r)) for r in rows)

        def cardinality(a):
            short = [max(0, r[1] - a.count(r[0])) for r in rows]
            excess = [max(0, a.count(r[0]) - r[2]) for r in rows]
            if kind == "wgcc":
                return sum(unit(s + e, metric, base) for s, e in zip(short, excess))
            if metric == "var":  # toulbar2 refuses a scope that cannot meet the bounds at all
                free = any(x not in values for d in domains for x in range(d))
                if sum(r[1] for r in rows) > n or not free and sum(r[2] for r in rows) < n:
                    return INF
                return base * max(sum(short), sum(excess))
            if metric == "dec":
                return base * (sum(short) + sum(excess))
            return sum(s * r[3] + e * r[4] for s, e, r in zip(short, excess, rows))

        return text, cardinality
    if kind in ("wsame", "ssame", "wsamegcc"):
        half = n // 2
        rows = [(x, low, low + int(rng.integers(0, 2))) for x, low in zip(values, rng.integers(0, 2, len(values)))]

        def same(a):
            left, right = a[:half], a[half:]
            diffs = [left.count(x) - right.count(x) for x in set(a)]
            if kind == "ssame":
                return base * sum(abs(d) for d in diffs) // 2
            cost = sum(unit(abs(d), metric, base) for d in diffs)
            if kind == "wsamegcc":  # each side within the bounds
                cost += sum(unit(max(0, r[1] - side.count(r[0]), side.count(r[0]) - r[2]), metric, base)
                            for r in rows for side in (left, right))
            return cost

        text = {"wsame": f"wsame {metric} {base}",
                "ssame": f"ssame {base} {half} {half} {' '.join(map(str, range(n)))}",
                "wsamegcc": f"wsamegcc {metric} {base} {len(rows)} " + " ".join(" ".join(map(str, r)) for r in rows)}
        return text[kind], same
    if kind == "woverlap":
        comparator, rhs = str(rng.choice(list(decompose.COMPARATORS))), int(rng.integers(0, n // 2 + 2))
        return (f"woverlap {metric} {base} {comparator} {rhs}",
                lambda a: unit(wsum_gap(sum(x == y != 0 for x, y in zip(a[:n // 2], a[n // 2:])), comparator, rhs),
                               metric, base))
    if kind == "wdiverse":
        # distance >= 1: at 0 (no constraint) pytoulbar2's wtdiverse forces the given values
        given, distance = [int(rng.integers(0, d)) for d in domains], int(rng.integers(1, n + 1))
        return (f"{rng.choice(['wdiverse', 'whdiverse', 'wtdiverse'])} {distance} {' '.join(map(str, given))}",
                lambda a: 0 if sum(x != g for x, g in zip(a, given)) >= distance else INF)
    if kind in ("wregular", "sregular"):
        q = int(rng.integers(1, 4))
        starts = sorted({int(s) for s in rng.integers(0, q, size=int(rng.integers(1, 3)))})
        ends = sorted({int(s) for s in rng.integers(0, q, size=int(rng.integers(1, 3)))})
        moves = {(int(s), int(x), int(e)) for s, x, e in zip(rng.integers(0, q, 6), rng.integers(0, max(domains), 6),
                                                               rng.integers(0, q, 6))}
        if kind == "wregular":
            start_cost = {s: int(rng.integers(0, 4)) for s in starts}
            end_cost = {s: int(rng.integers(0, 4)) for s in ends}
            move_cost = {m: int(rng.integers(0, 4)) for m in moves}
            text = (f"wregular {q} {len(starts)} " + " ".join(f"{s} {start_cost[s]}" for s in starts)
                    + f" {len(ends)} " + " ".join(f"{s} {end_cost[s]}" for s in ends)
                    + f" {len(moves)} " + " ".join(f"{s} {x} {e} {move_cost[(s, x, e)]}" for s, x, e in moves))

            def regular(a):
                best = INF
                for path in itertools.product(range(q), repeat=n + 1):
                    steps = [(path[k], a[k], path[k + 1]) for k in range(n)]
                    if path[0] in start_cost and path[-1] in end_cost and all(m in move_cost for m in steps):
                        best = min(best, start_cost[path[0]] + end_cost[path[-1]] + sum(move_cost[m] for m in steps))
                return best

            return text, regular
        metric = str(rng.choice(["var", "edit"]))
        text = (f"sregular {metric} {base} {q} {len(starts)} {' '.join(map(str, starts))} {len(ends)} "
                f"{' '.join(map(str, ends))} {len(moves)} " + " ".join(f"{s} {x} {e}" for s, x, e in moves))
        if metric == "edit":
            return text, lambda a: edit_distance(a, q, starts, ends, moves, base)
        symbols = sorted({x for _, x, _ in moves})

        def accepted(word):
            states = set(starts)
            for x in word:
                states = {e for s, y, e in moves if s in states and y == x}
            return bool(states & set(ends))

        words = [w for w in itertools.product(symbols, repeat=n) if accepted(w)]
        return text, lambda a: min((base * sum(x != y for x, y in zip(a, w)) for w in words), default=INF)
    if kind == "knapsack":
        weights = [int(w) for w in rng.integers(-3, 6, size=n)]
        capacity = int(rng.integers(0, 3 * n))
        return (f"knapsack {capacity} {' '.join(map(str, weights))}",  # items taken at value 1 (checked on toulbar2)
                lambda a: 0 if sum(w * (x == 1) for w, x in zip(weights, a)) >= capacity else INF)
    if kind == "wvarsum":
        comparator = str(rng.choice(list(decompose.COMPARATORS)))
        return f"wvarsum {metric} {base} {comparator}", lambda a: unit(wsum_gap(sum(a[:-1]), comparator, a[-1]),
                                                                       metric, base)
    if kind == "wvaramong":
        return (f"wvaramong hard {base} {len(values)} {' '.join(map(str, values))}",
                lambda a: base if sum(x in values for x in a[:-1]) != a[-1] else 0)
    raise AssertionError(kind)


def edit_distance(a, q, starts, ends, moves, base):
    """base times the least substitutions, deletions and insertions turning `a` into a word of the
    automaton: shortest paths over (symbols read, state), insertions moving the state in place."""
    dist = [[INF] * q for _ in range(len(a) + 1)]
    for s in starts:
        dist[0][s] = 0
    for i in range(len(a) + 1):
        for _ in range(q):  # insertions: Bellman-Ford along the moves
            for s, _, e in moves:
                dist[i][e] = min(dist[i][e], dist[i][s] + base)
        if i == len(a):
            break
        for s in range(q):
            dist[i + 1][s] = min(dist[i + 1][s], dist[i][s] + base)  # a[i] deleted
            for s2, x, e in moves:
                if s2 == s:
                    dist[i + 1][e] = min(dist[i + 1][e], dist[i][s] + (0 if x == a[i] else base))
    return min(dist[len(a)][f] for f in ends)


KINDS = ["wsum", "wamong", "samong", "walldiff", "wgcc", "sgcc", "wsame", "ssame", "wsamegcc", "woverlap", "wregular",
         "sregular", "knapsack", "wvarsum", "wvaramong", "wdiverse"]


def global_instance(kind, seed, tmp_path):
    """A random wcsp file of unary costs and one `kind` global over every variable; its cost of each
    assignment."""
    rng = np.random.default_rng(seed)
    paired = kind in ("wsame", "ssame", "wsamegcc", "woverlap")
    n = int(rng.integers(2, 6)) // 2 * 2 if paired else int(rng.integers(1, 5))
    n = max(n, 2)
    domains = [int(d) for d in rng.integers(2, 4, size=n)]
    text, cost = random_global(rng, kind, n, domains)
    unary = [rng.integers(0, 4, size=d) for d in domains]
    lines = [f"g {n} {max(domains)} {n + 1} 1000", " ".join(map(str, domains))]
    for i, u in enumerate(unary):
        lines.append(f"1 {i} 0 {len(u)}\n" + "\n".join(f"{k} {c}" for k, c in enumerate(u)))
    lines.append(f"{n} {' '.join(map(str, range(n)))} -1 {text}")
    path = tmp_path / f"{kind}{seed}.wcsp"
    path.write_text("\n".join(lines) + "\n")

    def total(a):
        c = cost(list(a))
        return c + sum(int(u[x]) for u, x in zip(unary, a)) if c != INF else INF

    return path, total


@pytest.mark.parametrize("kind", KINDS)
def test_toulbar2_globals_equal_their_whole_table(kind, tmp_path, monkeypatch):
    """Sums and counts as chains (two seeds in three; one of them with steps kept as tuples) or, as
    these small ones are read, as one table."""
    as_read = decompose.whole_table
    for seed in SEEDS:
        monkeypatch.setattr(decompose, "whole_table", lambda values, coeffs: seed % 3 == 0 and as_read(values, coeffs))
        limits = Limits(listed_min=0 if seed % 3 == 2 else 1 << 16)
        path, cost = global_instance(kind, seed, tmp_path)
        problem = read(path, limits=limits)
        expected = oracle_table(problem, cost)
        assert np.array_equal(projection(problem), expected), (kind, seed, path.read_text())


@pytest.mark.parametrize("kind", KINDS)
def test_toulbar2_globals_solve_to_pytoulbar2s_optimum(kind, tmp_path):
    """pytoulbar2 reads the same file; BE on the decomposition reports the file's variables only."""
    for seed in range(10):
        path, cost = global_instance(kind, seed, tmp_path)
        result = run(path)
        problem = read(path)
        n = sum(not v.auxiliary for v in problem.variables)
        best = oracle_table(problem, cost).min()
        assert toulbar2_file_optimum(path) == (None if best >= problem.top else best), (kind, seed)
        if result.status == "optimal":
            assert result.upper_bound == best and len(result.assignment) == n
            assert cost(result.assignment) == best
        else:
            assert result.status == "infeasible" and best >= problem.top


@pytest.mark.parametrize("keyword, params", [("sdisj", "1 2 2 1 3 4"), ("disj", "1 2 5"), (">=", "1 1")])
def test_arithmetic_functions_follow_toulbar2(keyword, params, tmp_path):
    path = tmp_path / "a.wcsp"
    path.write_text(f"a 2 4 1 100\n4 3\n2 0 1 -1 {keyword} {params}\n")
    got = read(path).functions[0].table
    p = [int(x) for x in params.split()]
    for x, y in itertools.product(range(4), range(3)):
        if keyword == "sdisj":
            cstx, csty, xinf, yinf, cx, cy = p
            ok = x <= xinf and y <= yinf and (x == xinf or y == yinf or x >= y + csty or y >= x + cstx)
            want = (cx if x == xinf else 0) + (cy if y == yinf else 0) if ok else INF
        elif keyword == "disj":
            want = 0 if x >= y + p[1] or y >= x + p[0] else p[2]
        else:
            gap = y + p[0] - x
            want = max(gap, 0) if gap <= p[1] else INF
        assert got[x, y] == (want if want != INF else read(path).top), (x, y)


# --- linear sums and element (XCSP3, FlatZinc) --------------------------------------------------------

OPS = {"lt": lambda s, r: s < r, "le": lambda s, r: s <= r, "gt": lambda s, r: s > r, "ge": lambda s, r: s >= r,
       "eq": lambda s, r: s == r, "ne": lambda s, r: s != r, "in": lambda s, r: s in r,
       "notin": lambda s, r: s not in r}


def xcsp3(tmp_path, domains, constraints):
    variables = "".join(f'<var id="x{i}"> {" ".join(map(str, d))} </var>' for i, d in enumerate(domains))
    path = tmp_path / "m.xml"
    path.write_text(f'<instance format="XCSP3" type="CSP"><variables>{variables}</variables>'
                    f'<constraints>{constraints}</constraints></instance>')
    return path


def test_linear_chains_equal_their_whole_table(tmp_path, monkeypatch):
    """Every sum decomposed (no whole table), pruned partial sums included, against Python's sum; every
    other one with its steps kept as tuples."""
    monkeypatch.setattr(decompose, "whole_table", lambda values, coeffs: False)
    for seed in SEEDS:
        limits = Limits(listed_min=0 if seed % 2 else 1 << 16)
        rng = np.random.default_rng(seed)
        n = int(rng.integers(1, 5))
        domains = [sorted({int(x) for x in rng.integers(-4, 8, size=int(rng.integers(1, 4)))}) for _ in range(n)]
        coeffs = [int(a) for a in rng.integers(-3, 4, size=n)]
        op = str(rng.choice(list(OPS)))
        rhs, right = int(rng.integers(-10, 20)), None
        if op in ("in", "notin") and seed % 3:  # a set
            rhs = sorted({int(x) for x in rng.integers(-10, 20, size=3)})
            right = "{" + ",".join(map(str, rhs)) + "}"
        elif op in ("in", "notin"):  # a range
            right, rhs = f"{rhs}..{rhs + 4}", range(rhs, rhs + 5)
        path = xcsp3(tmp_path, domains, f'<sum><list> {" ".join(f"x{i}" for i in range(n))} </list>'
                                        f'<coeffs> {" ".join(map(str, coeffs))} </coeffs>'
                                        f'<condition> ({op},{rhs if right is None else right}) </condition></sum>')
        problem = read(path, limits=limits)
        expected = oracle_table(problem, lambda a: 0 if OPS[op](sum(c * domains[k][x] for k, (c, x) in
                                                                    enumerate(zip(coeffs, a))), rhs) else INF)
        assert np.array_equal(projection(problem), expected), (seed, path.read_text())


def test_element_equals_its_whole_table(tmp_path):
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        n = int(rng.integers(1, 4))
        domains = [sorted({int(x) for x in rng.integers(0, 4, size=int(rng.integers(1, 4)))}) for _ in range(n + 2)]
        items = [f"x{k}" if rng.random() < 0.7 else int(rng.integers(0, 4)) for k in range(n)]
        start = int(rng.integers(0, 2))
        value = f"x{n + 1}" if rng.random() < 0.7 else int(rng.integers(0, 4))
        path = xcsp3(tmp_path, domains, f'<element><list startIndex="{start}"> {" ".join(map(str, items))} </list>'
                                        f'<index> x{n} </index><value> {value} </value></element>')

        def holds(a):
            of = {f"x{k}": domains[k][x] for k, x in enumerate(a)}
            position = of[f"x{n}"] - start
            return 0 <= position < n and of.get(items[position], items[position]) == of.get(value, value)

        problem = read(path)
        assert np.array_equal(projection(problem), oracle_table(problem, lambda a: 0 if holds(a) else INF)), seed


def test_sum_with_a_variable_on_the_right(tmp_path):
    path = xcsp3(tmp_path, [range(4), range(4), range(6)],
                 "<sum><list> x0 x1 </list><coeffs> 2 1 </coeffs><condition> (le,x2) </condition></sum>")
    problem = read(path)
    expected = oracle_table(problem, lambda a: 0 if 2 * a[0] + a[1] <= a[2] else INF)
    assert np.array_equal(projection(problem), expected)


FZN_CHECKS = {
    "int_lin_le_reif([2, -1, 3], [x, y, z], 4, b)": lambda x, y, z, b: b == (2 * x - y + 3 * z <= 4),
    "int_lin_eq_reif([1, 1, 1], [x, y, z], 5, b)": lambda x, y, z, b: b == (x + y + z == 5),
    "int_lin_ne([1, 2, 3], [x, y, z], 6)": lambda x, y, z, b: x + 2 * y + 3 * z != 6,
    "int_le_reif(x, y, b)": lambda x, y, z, b: b == (x <= y),
    "int_times(x, y, z)": lambda x, y, z, b: x * y == z,
    "array_int_element(x, [3, -1, 2, 0], z)": lambda x, y, z, b: 1 <= x <= 4 and [3, -1, 2, 0][x - 1] == z,
    "array_var_int_element(x, [y, z, 2], y)": lambda x, y, z, b: 1 <= x <= 3 and [y, z, 2][x - 1] == y,
}


@pytest.mark.parametrize("constraint", sorted(FZN_CHECKS))
def test_flatzinc_constraints_equal_their_whole_table(constraint, tmp_path, monkeypatch):
    monkeypatch.setattr(decompose, "whole_table", lambda values, coeffs: False)
    path = tmp_path / "m.fzn"
    path.write_text(f"var -1..3: x;\nvar -2..2: y;\nvar -3..4: z;\nvar bool: b;\nconstraint {constraint};\n"
                    "solve satisfy;\n")
    problem = read(path)
    values = [[-1, 0, 1, 2, 3], [-2, -1, 0, 1, 2], list(range(-3, 5)), [0, 1]]
    expected = oracle_table(problem, lambda a: 0 if FZN_CHECKS[constraint](*(v[i] for v, i in zip(values, a)))
                            else INF)
    assert np.array_equal(projection(problem), expected)


def test_six_variable_int_lin_le_is_no_longer_refused(tmp_path):
    """int_lin_le over 6 variables of 17 values: 2.4e7 entries as one table, refused before."""
    path = tmp_path / "lin.fzn"
    path.write_text("array [1..6] of var 1..17: x;\nconstraint int_lin_le([3, 5, 7, 2, 4, 6], x, 100);\n"
                    "constraint int_lin_eq([1, 1, 1, 1, 1, 1], x, 30);\nsolve maximize x[3];\n")
    best = max(x[2] for x in itertools.product(range(1, 18), repeat=5) if 1 <= 30 - sum(x) <= 17
               and 3 * x[0] + 5 * x[1] + 7 * x[2] + 2 * x[3] + 4 * x[4] + 6 * (30 - sum(x)) <= 100)
    result = run(path)
    assert result.status == "optimal" and result.upper_bound == best and len(result.assignment) == 6


def test_twenty_variable_sum_solves_by_elimination_on_small_tables(tmp_path):
    """sum a_i x_i = 150 over 20 variables of 50 values (a table of 50^20 entries), minimising
    sum c_i x_i: BE on the chain of partial sums, each bucket small, finds the optimum a dynamic
    program over the partial sums finds."""
    rng = np.random.default_rng(7)
    coeffs, costs, rhs = [int(a) for a in rng.integers(1, 4, size=20)], [int(c) for c in rng.integers(-5, 6, 20)], 150
    names = " ".join(f"x{i}" for i in range(20))
    path = xcsp3(tmp_path, [range(50)] * 20, f"<sum><list> {names} </list><coeffs> {' '.join(map(str, coeffs))} "
                                             f"</coeffs><condition> (eq,{rhs}) </condition></sum>")
    path.write_text(path.read_text().replace('type="CSP"', 'type="COP"').replace(
        "</instance>", f'<objectives><minimize type="sum"><list> {names} </list><coeffs> {" ".join(map(str, costs))} '
                       "</coeffs></minimize></objectives></instance>"))
    best = {0: 0}  # the least objective of each partial sum that can still reach rhs
    for a, c in zip(coeffs, costs):
        nxt = {}
        for s, v in best.items():
            for x in range(50):
                if s + a * x <= rhs:
                    nxt[s + a * x] = min(nxt.get(s + a * x, INF), v + c * x)
        best = nxt
    problem = read(path)
    plan = build_plan(problem, graph.elimination_order(problem), None)
    assert max(mb.joint_entries for mb in plan.minibuckets) <= 1 << 22
    result = run(path)
    assert result.status == "optimal" and result.upper_bound == best[rhs] and len(result.assignment) == 20
    assert sum(a * x for a, x in zip(coeffs, result.assignment)) == rhs


# --- toulbar2's validation files ----------------------------------------------------------------------

def toulbar2_folder() -> Path:
    """toulbar2's repository folders (GPUSOLVE_TOULBAR2, default ../cache/toulbar2 beside the checkout)."""
    return Path(os.environ.get("GPUSOLVE_TOULBAR2") or Path(__file__).resolve().parents[2] / "cache" / "toulbar2")


VALIDATION = ["decomposable/B1-LU04-dec.wcsp", "decomposable/walldiff_simple.wcsp", "decomposable/wamong_hard.wcsp",
              "decomposable/wamong_lin.wcsp", "decomposable/wamong_quad.wcsp", "decomposable/wgcc_simple.wcsp",
              "decomposable/wregular.wcsp", "decomposable/wsame_simple.wcsp", "decomposable/wsum_hard.wcsp",
              "decomposable/wsum_lin.wcsp", "decomposable/wsum_quad.wcsp", "decomposable/wvaramong.wcsp",
              "decomposable/walldiff.cfn", "decomposable/wamong_hardc.cfn", "decomposable/wamong_linc.cfn",
              "decomposable/wamong_quadc.cfn", "decomposable/wgcc.cfn", "decomposable/wregular2.cfn",
              "decomposable/wsum_hardc.cfn", "decomposable/wsum_linc.cfn", "decomposable/wsum_quadc.cfn",
              "decomposable/wvaramongc.cfn", "decomposable/wvarsum.cfn", "default/knapsack.wcsp",
              "default/knapsackc.cfn", "default/latin.wcsp", "default/sgcc1.cfn", "default/sgcc2.cfn",
              "default/ssame.cfn", "default/sregular.cfn", "default/samong.cfn", "decomposable/wdiverse.wcsp",
              "decomposable/wdiversec.cfn", "decomposable/woverlap.wcsp", "decomposable/woverlapc.cfn",
              "decomposable/wsamegcc_simple.wcsp", "decomposable/wsamegcc.cfn"]


@pytest.mark.parametrize("name", VALIDATION)
def test_toulbar2_validation_files_solve_to_their_ub(name):
    path = toulbar2_folder() / "validation" / name
    if not path.is_file():
        pytest.skip(f"toulbar2's validation files not found at {path.parent} (set GPUSOLVE_TOULBAR2)")
    expected = float(path.with_suffix(".ub").read_text().split()[0])
    result = run(path)
    assert result.status == "optimal" and result.upper_bound == pytest.approx(expected), result


# A file of each format around one function: toulbar2's .wcsp (the function on line 3) and CFN.
AROUND = {".wcsp": ("b 2 2 1 10\n2 2\n{}\n", ":3:"),
          ".cfn": ('{{problem:{{name:t mustbe:"<10"}} variables:{{a:2 b:2}}\nfunctions:{{f:{{scope:[a b] {}}}}}}}',
                   ":2: cost function f:")}


def refusal(path) -> str:
    with pytest.raises(ParseError) as info:
        read(path)
    return str(info.value)


@pytest.mark.parametrize("suffix, function, fragment", [
    (".wcsp", "2 0 1 -1 wgrammar hard 10 == 1", "unsupported cost function keyword wgrammar"),
    (".wcsp", "2 0 1 -1 sgrammar var 1", "global cost function sgrammar is not supported"),
    (".wcsp", "2 0 1 -1 sregular hamming 1 1 1 0 1 0 1 0 0 0", "metric 'hamming' is not supported"),
    (".wcsp", "2 0 1 -1 wregular 2 1 0 0 1 3 0 1 0 0 0 0", "state 3 out of range"),
    (".wcsp", "2 0 1 -1 wsum lin 1 =< 2", "comparator '=<' is none of"),
    (".cfn", "type:wgcc params:{metric:lin cost:1 bounds:[[0 1]]}", "wgcc: bounds rows are 3 numbers, found (0, 1)"),
    (".cfn", "type:wsum params:{metric:lin cost:1 comparator:\"<=\"}", "wsum: its params lack 'to'"),
    (".cfn", "type:wregular params:{nb_states:2 starts:[0] ends:[[1 0]] transitions:[]}", "starts rows are 2 numbers"),
    (".cfn", "type:\">=\" params:[1]", ">= takes 2 parameters (cst, delta)"),
    (".cfn", "type:sgrammar params:{metric:var cost:1}", "global cost function sgrammar is not supported"),
])
def test_refusals_name_the_function(suffix, function, fragment, tmp_path):
    path = tmp_path / f"bad{suffix}"
    text, where = AROUND[suffix]
    path.write_text(text.format(function))
    message = refusal(path)
    assert message.startswith(f"{path}{where}") and fragment in message


def test_large_decompositions_are_refused_before_they_are_made(tmp_path):
    """An automaton of 10^9 states, a walldiff over two variables of 2^24 values (2^25 counters)."""
    for text, fragment in [("2 2\n2 0 1 -1 wregular 1000000000 1 0 0 1 0 0 0", "states make tables of more than"),
                           (f"{1 << 24} {1 << 24}\n2 0 1 -1 walldiff lin 1", "33,554,432 auxiliary variables")]:
        path = tmp_path / "big.wcsp"
        path.write_text(f"b 2 2 1 10\n{text}\n")
        message = refusal(path)
        assert message.startswith(f"{path}:3:") and fragment in message


def test_exponential_partial_sums_are_refused(tmp_path):
    """Coefficients 2^k make every partial sum distinct: 2^24 sums, refused by name."""
    terms = " ".join(f"x{i}" for i in range(24))
    coeffs = " ".join(str(1 << k) for k in range(24))
    path = xcsp3(tmp_path, [range(2)] * 24, f"<sum><list> {terms} </list><coeffs> {coeffs} </coeffs>"
                                            f"<condition> (ne,5) </condition></sum>")
    with pytest.raises(ParseError) as info:
        read(path)
    assert "exponential" in str(info.value)


# --- whole models: pycsp3's XCSP3 and the same hand-written in FlatZinc -------------------------------

WEIGHTS, PROFITS, CAPACITY = [3, 4, 5, 6, 2, 7, 3, 5], [4, 5, 7, 8, 2, 9, 3, 6], 21
DURATIONS, PRIORITY = [3, 2, 4, 2], [2, 1, 3, 1]


def knapsack_best():
    return max(sum(p * x for p, x in zip(PROFITS, a)) for a in itertools.product(range(4), repeat=8)
               if sum(w * x for w, x in zip(WEIGHTS, a)) <= CAPACITY)


@functools.cache
def magic_best():
    """The least x[0][0] + 2 x[0][1] + 3 x[1][0] over the 3 x 3 magic squares of 1..9 (sums 15)."""
    lines = [(0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6)]
    return min(m[0] + 2 * m[1] + 3 * m[3] for m in itertools.permutations(range(1, 10))
               if all(sum(m[i] for i in line) == 15 for line in lines))


def schedule_best():
    """Four tasks on one machine, task 0 before task 2, least sum of priority * start."""
    best = INF
    for s in itertools.product(range(11), repeat=4):
        apart = all(s[i] + DURATIONS[i] <= s[j] or s[j] + DURATIONS[j] <= s[i]
                    for i, j in itertools.combinations(range(4), 2))
        if apart and s[0] + DURATIONS[0] <= s[2] and all(s[i] + DURATIONS[i] <= 11 for i in range(4)):
            best = min(best, sum(p * x for p, x in zip(PRIORITY, s)))
    return best


OBJECTIVE = [1, 2, -1, 3, -1, 1, -2, 1, 1, -1, 1, 2]  # pycsp3 writes x[0] + 2 * x[1] - ... as an expression


def expression_best():
    """min sum OBJECTIVE[i] x_i + 3 with sum x_i = 20, x_i in 0..4: a dynamic program over the sums."""
    best = {0: 0}
    for c in OBJECTIVE:
        nxt = {}
        for total, value in best.items():
            for x in range(5):
                nxt[total + x] = min(nxt.get(total + x, INF), value + c * x)
        best = nxt
    return best[20] + 3


PYCSP3 = {
    "expression": (f"""
        x = VarArray(size=12, dom=range(5))
        satisfy(Sum(x) == 20)
        minimize(x[0] + 2 * x[1] - x[2] + 3 * x[3] - x[4] + x[5] - 2 * x[6] + x[7] + x[8] - x[9] + x[10]
                 + 2 * x[11] + 3)
        """, expression_best),
    "knapsack": (f"""
        x = VarArray(size=8, dom=range(4))
        satisfy(Sum(x[i] * {WEIGHTS}[i] for i in range(8)) <= {CAPACITY})
        maximize(Sum(x[i] * {PROFITS}[i] for i in range(8)))
        """, knapsack_best),
    "magic": ("""
        m = VarArray(size=[3, 3], dom=range(1, 10))
        satisfy(AllDifferent(m), [Sum(row) == 15 for row in m], [Sum(col) == 15 for col in columns(m)],
                Sum(diagonal_down(m)) == 15, Sum(diagonal_up(m)) == 15)
        minimize(Sum([m[0][0], m[0][1] * 2, m[1][0] * 3]))
        """, magic_best),
    "schedule": (f"""
        d, w = {DURATIONS}, {PRIORITY}
        s = VarArray(size=4, dom=range(11))
        satisfy([(s[i] + d[i] <= s[j]) | (s[j] + d[j] <= s[i]) for i in range(4) for j in range(i + 1, 4)],
                s[0] + d[0] <= s[2], [s[i] + d[i] <= 11 for i in range(4)])
        minimize(Sum(s[i] * w[i] for i in range(4)))
        """, schedule_best),
}


@pytest.mark.parametrize("name", sorted(PYCSP3))
def test_pycsp3_sum_models_solve_to_the_enumerated_optimum(name, tmp_path):
    """The knapsack's and the schedule's objective and constraint sums are chains of partial sums
    (their whole tables have more than DIRECT_ENTRIES entries); the magic square's are tables; the
    expression's objective, a linear form, costs per variable."""
    pytest.importorskip("pycsp3")  # compiled in a child: pycsp3 writes its file at exit
    import subprocess
    import sys
    import textwrap
    body, best = PYCSP3[name]
    script = tmp_path / f"{name}.py"
    script.write_text("from pycsp3 import *\n" + textwrap.dedent(body))
    out = tmp_path / f"{name}.xml"
    p = subprocess.run([sys.executable, str(script), f"-output={out}"], capture_output=True, text=True, cwd=tmp_path,
                       timeout=120)
    assert out.is_file(), p.stdout + p.stderr
    result = run(out)
    assert result.status == "optimal" and result.upper_bound == best(), result


FLATZINC = {
    "knapsack": ("array [1..8] of var 0..3: x;\nvar 0..1000: profit;\n"
                 f"constraint int_lin_le({WEIGHTS}, x, {CAPACITY});\n"
                 f"constraint int_lin_eq({PROFITS + [-1]}, [{', '.join(f'x[{i}]' for i in range(1, 9))}, profit], 0);\n"
                 "solve maximize profit;\n", knapsack_best),
    "magic": ("array [1..9] of var 1..9: m;\nvar 0..100: obj;\nconstraint all_different_int(m);\n"
              + "".join(f"constraint int_lin_eq([1, 1, 1], [m[{a + 1}], m[{b + 1}], m[{c + 1}]], 15);\n" for a, b, c in
                        [(0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6)])
              + "constraint int_lin_eq([1, 2, 3, -1], [m[1], m[2], m[4], obj], 0);\nsolve minimize obj;\n", magic_best),
    "schedule": ("array [1..4] of var 0..10: s;\nvar 0..1000: obj;\n"
                 + "".join(f"var bool: b{i}{j};\nvar bool: c{i}{j};\n"
                           f"constraint int_lin_le_reif([1, -1], [s[{i + 1}], s[{j + 1}]], {-DURATIONS[i]}, b{i}{j});\n"
                           f"constraint int_lin_le_reif([1, -1], [s[{j + 1}], s[{i + 1}]], {-DURATIONS[j]}, c{i}{j});\n"
                           f"constraint int_lin_le([-1, -1], [b{i}{j}, c{i}{j}], -1);\n"
                           for i, j in itertools.combinations(range(4), 2))
                 + f"constraint int_lin_le([1, -1], [s[1], s[3]], {-DURATIONS[0]});\n"
                 + "".join(f"constraint int_le(s[{i + 1}], {11 - DURATIONS[i]});\n" for i in range(4))
                 + f"constraint int_lin_eq({PRIORITY + [-1]}, [s[1], s[2], s[3], s[4], obj], 0);\n"
                 + "solve minimize obj;\n",
                 schedule_best),
}


@pytest.mark.parametrize("name", sorted(FLATZINC))
def test_flatzinc_sum_models_solve_to_the_enumerated_optimum(name, tmp_path):
    text, best = FLATZINC[name]
    path = tmp_path / f"{name}.fzn"
    path.write_text(text)
    result = run(path)
    assert result.status == "optimal" and result.upper_bound == best(), result


def test_binary_comparisons_over_large_domains_stay_one_table(tmp_path):
    """x <= y and y - x <= 3 over 100 values: a binary table of 10^4 entries is smaller than any chain
    (one with 199 partial sums has a step of 2 x 10^6): no auxiliary variable."""
    path = tmp_path / "b.fzn"
    path.write_text("var 0..99: x;\nvar 0..99: y;\nconstraint int_le(x, y);\n"
                    "constraint int_lin_le([1, -1], [y, x], 3);\nsolve maximize y;\n")
    problem = read(path)
    assert not any(v.auxiliary for v in problem.variables) and sorted(f.arity for f in problem.functions) == [1, 2, 2]
