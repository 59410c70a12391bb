"""The search core built ahead of time (gpusolve/search/dfbb_build.py): its declared argument types match
what the driver passes, it searches exactly as numba's JIT does, and a change to its sources leaves it unused."""
import re
import shutil

import numpy as np
import pytest

from gpusolve.model.problem import FORBIDDEN, CostFunction, Problem, finalize_integer
from gpusolve.search import dfbb, dfbb_build, dfbb_sources
from gpusolve.search.dfbb import DepthFirst
from gpusolve.search.dfbb_state import COMPLETE

from helpers import random_problem

pytest.importorskip("numba")
NUMBA = {"i8": np.int64, "i4": np.int32, "b1": np.bool_, "u8": np.uint64}


jit_entry_points = dfbb_build.jit_core


def search_with(entry_points, problem, monkeypatch, z=1):
    monkeypatch.setattr(dfbb, "entry_points", entry_points)
    search = DepthFirst(problem, z=z)
    while search.run(7) != COMPLETE:
        pass
    return search


@pytest.mark.parametrize("wide", [False, True])
def test_the_declared_types_are_those_the_driver_passes(monkeypatch, wide):
    """pycc compiles for the declared types only: each argument of run and replay, as the driver passes it
    (int32 or int64 binary tables), has the dimension and type its signature says."""
    calls = {}
    run, _, replay, *vac_passes, _ = jit_entry_points()

    def recording(name, function):
        def record(*args):
            calls.setdefault(name, args)
            return function(*args)
        return record
    entry = dfbb_build.Core(recording("run32", run), recording("run64", run), recording("replay", replay),
                            *vac_passes, "recorded")
    for seed in range(50):  # until a search has replayed an open node
        problem = random_problem(np.random.default_rng(seed), n_max=8, d_max=4, f_max=14, arity_max=3, p_hard=0.3)
        if wide:  # costs beyond int32: int64 tables
            functions = [CostFunction(f.scope, np.where(f.table == FORBIDDEN, FORBIDDEN, f.table * (1 << 35)))
                         for f in problem.functions]
            problem = finalize_integer(Problem("wide", problem.variables, functions, integer=True), None)
        search_with(lambda: entry, problem, monkeypatch)
        if "replay" in calls:
            break
    assert ("run64" if wide else "run32") in calls and "replay" in calls
    functions = {"run32": run.py_func, "run64": run.py_func, "replay": replay.py_func}
    for name, args in calls.items():
        table = dfbb_build.TABLES.get(name, dfbb_build.VECTOR)
        assert_declared(name, dfbb_build.argument_types(functions[name], table), args)


def assert_declared(name, declared, args):
    assert len(declared) == len(args), name
    for kind, arg in zip(declared, args):
        if "[" in kind:
            assert isinstance(arg, np.ndarray) and arg.flags.c_contiguous, (name, kind)
            assert arg.ndim == kind.count(",") + 1 and arg.dtype == NUMBA[kind[:2]], (name, kind, arg.dtype)
        else:
            assert isinstance(arg, (int, np.integer)) and not isinstance(arg, np.ndarray), (name, kind)


def test_vacs_passes_get_their_declared_types():
    """VAC's compiled passes (vac_kernels.SIGNATURES, pycc's declarations) get the arrays they declare."""
    from gpusolve.inference import vac, vac_kernels
    core, calls = jit_entry_points(), {}

    def recording(name):
        def record(*args):
            calls.setdefault(name, args)
            return getattr(core, name)(*args)
        return record
    kernels = core._replace(**{name: recording(name) for name in dfbb_build.VAC_PASSES})
    for seed in range(20):
        problem = random_problem(np.random.default_rng(seed), n_max=8, d_max=5, f_max=16, arity_max=2)
        vac.vac(problem, kernels=kernels)
    assert set(calls) == set(vac_kernels.SIGNATURES) == set(dfbb_build.VAC_PASSES)
    for name, signature in vac_kernels.SIGNATURES.items():
        arguments = signature[signature.index("(") + 1:-1]
        assert_declared(name, [m.group(0) for m in re.finditer(r"\w\d(\[[^\]]*\])?", arguments)], calls[name])


def test_the_core_built_ahead_of_time_searches_as_the_jit_does(monkeypatch):
    """Node for node: the same incumbents, nodes, bounds; and VAC's passes give the same problem. `make test`
    builds the core first."""
    from gpusolve.inference.vac import vac
    built = dfbb_build.ahead_of_time()
    if built is None:
        pytest.skip("the core is not built ahead of time (python -m gpusolve.search.dfbb_build)")
    ahead = dfbb_build.entry_points.__wrapped__()
    assert ahead.how == "ahead of time"
    for seed in range(40):
        rng = np.random.default_rng(700 + seed)
        problem = random_problem(rng, n_max=9, d_max=5, f_max=20, arity_max=3, p_hard=float(rng.uniform(0, 0.6)))
        a = search_with(lambda: ahead, problem, monkeypatch)
        b = search_with(jit_entry_points, problem, monkeypatch)
        assert (a.ub, a.nodes, a.lower_bound, a.replayed) == (b.ub, b.nodes, b.lower_bound, b.replayed), seed
        assert np.array_equal(a.best, b.best), seed
        vac_a, vac_b = vac(problem, kernels=ahead), vac(problem, kernels=jit_entry_points())
        assert all(f.scope == g.scope and np.array_equal(f.table, g.table)
                   for f, g in zip(vac_a.functions, vac_b.functions)), seed


def test_a_changed_source_leaves_the_built_core_unused(tmp_path, monkeypatch):
    for source in dfbb_sources.SOURCES:
        (tmp_path / source).parent.mkdir(exist_ok=True)
        shutil.copy(dfbb_sources.PACKAGE / source, tmp_path / source)
    monkeypatch.setattr(dfbb_sources, "PACKAGE", tmp_path)
    monkeypatch.setattr(dfbb_build, "folders", lambda: [tmp_path / "built"])
    dfbb_sources.name.cache_clear()  # computed once per process; here the sources change within it
    before = dfbb_sources.name()
    (tmp_path / "built").mkdir()
    suffix = dfbb_build.sysconfig.get_config_var("EXT_SUFFIX")
    (tmp_path / "built" / (before + suffix)).write_bytes(b"")  # found, but no module: the JIT serves
    assert dfbb_build.ahead_of_time() is None
    for source in ("search/dfbb_kernels.py", "inference/vac_kernels.py"):
        with open(tmp_path / source, "a") as f:
            f.write("\n")
        dfbb_sources.name.cache_clear()
        assert dfbb_sources.name() != before
        before = dfbb_sources.name()
    dfbb_sources.name.cache_clear()  # the installed sources' name again for the tests after this one


@pytest.mark.slow
def test_a_build_loads_and_proves(tmp_path, monkeypatch):
    """The whole build (10-20 s of compilation) into a fresh folder, then a proof with it."""
    path = dfbb_build.build(tmp_path)
    monkeypatch.setattr(dfbb_build, "folders", lambda: [tmp_path])
    module = dfbb_build.ahead_of_time()
    assert module is not None and path.parent == tmp_path
    problem = random_problem(np.random.default_rng(11), n_max=8, d_max=4, f_max=14, arity_max=3)
    entry = dfbb_build.entry_points.__wrapped__()
    assert search_with(lambda: entry, problem, monkeypatch).ub == search_with(jit_entry_points, problem,
                                                                              monkeypatch).ub
