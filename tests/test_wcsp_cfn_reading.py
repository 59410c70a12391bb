""".wcsp and .cfn reading: costs stay exact (refused, never wrapped or rounded, beyond int64)."""
import itertools
from fractions import Fraction

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpusolve.model import MAX_TOP
from gpusolve.parsers import ParseError, read
from gpusolve.solve import Options, solve

INT64_MAX = (1 << 63) - 1

decimal = st.builds(lambda sign, whole, fraction: f"{sign}{whole}" + (f".{fraction}" if fraction is not None else ""),
                    st.sampled_from(["", "-", "+"]), st.from_regex(r"[0-9]{1,20}", fullmatch=True),
                    st.none() | st.from_regex(r"[0-9]{0,32}", fullmatch=True))


@settings(max_examples=150, deadline=None)
@given(text=decimal, precision=st.integers(0, 18))
@example(text="0.99999999999999999999999999999", precision=0)  # 29 nines: Decimal's 28 digits made it 1
@example(text="4.6116860184273879039", precision=18)
def test_cfn_costs_are_truncated_exactly_or_refused(tmp_path_factory, text, precision):
    """toulbar2 cuts the decimals beyond the precision: the cost is trunc(value * 10^precision), exactly
    (Fraction is the oracle), or the file is refused when that does not fit in 2^62."""
    path = tmp_path_factory.mktemp("c") / "c.cfn"
    digits = str(MAX_TOP)  # the largest bound: every cost that fits is below it
    bound = f"{digits[:len(digits) - precision]}.{digits[len(digits) - precision:]}" if precision else digits
    path.write_text(f"{{problem {{name p mustbe <{bound}}} variables {{x 2}} "
                    f"functions {{f {{scope [x] costs [{text} 0]}}}}}}\n")
    expected = int(Fraction(text) * 10 ** precision)  # int() of a Fraction truncates toward zero
    if abs(expected) > MAX_TOP:
        with pytest.raises(ParseError, match=r"c\.cfn:1: cost .* out of range"):
            read(path)
        return
    problem = read(path)
    assert problem.precision == precision
    assert problem.evaluate([0]) + problem.offset == expected  # internal integers: no float in between


big = st.integers(0, INT64_MAX) | st.integers(0, 40) | st.integers((1 << 62) - 40, (1 << 62) + 40)


@settings(max_examples=80, deadline=None)
@given(ub=big, constant=big, unary=st.lists(big, min_size=2, max_size=2),
       binary=st.lists(big, min_size=4, max_size=4))
def test_wcsp_costs_near_int64_are_exact_or_refused(tmp_path_factory, ub, constant, unary, binary):
    """Costs up to 2^63 - 1, a constant and a top anywhere: the optimum is the exact (Python integer)
    minimum over the assignments, or the file is refused in one ParseError, only where the top
    exceeds 2^62 (sums beyond it cannot be kept exact in int64)."""
    path = tmp_path_factory.mktemp("w") / "w.wcsp"
    path.write_text(f"w 2 2 3 {ub}\n2 2\n0 {constant} 0\n1 0 0 2\n0 {unary[0]}\n1 {unary[1]}\n"
                    f"2 0 1 0 4\n" + "".join(f"{a} {b} {c}\n" for (a, b), c in
                                             zip(itertools.product(range(2), repeat=2), binary)))
    totals = [constant + unary[a] + binary[2 * a + b] for a, b in itertools.product(range(2), repeat=2)]
    feasible = [t for t in totals if t < ub]  # costs are >= 0: a tuple costing ub or more is in no such sum
    try:
        problem = read(path)
    except ParseError as e:
        assert ub > MAX_TOP and "costs too large" in str(e)
        return
    r = solve(problem, Options(device="cpu", search=False))
    assert (r.status, r.upper_bound) == (("optimal", min(feasible)) if feasible else ("infeasible", None))


@pytest.mark.parametrize("variables, functions", [
    ("x " + "9" * 5000, ""),
    ("x 2", "f {scope [x] defaultcost 0 costs [" + "9" * 5000 + " 1]}"),
    ("x 2", "f {scope [" + "9" * 5000 + "] costs [0 1]}"),
])
def test_cfn_integers_of_thousands_of_digits_are_refused_at_their_line(tmp_path, variables, functions):
    """Not Python's limit on converting long digit strings (a ValueError without a line)."""
    path = tmp_path / "c.cfn"
    path.write_text(f"{{problem {{name p mustbe <10}}\nvariables {{{variables}}}\nfunctions {{{functions}}}}}\n")
    with pytest.raises(ParseError, match=r"c\.cfn:[23]: "):
        read(path)
