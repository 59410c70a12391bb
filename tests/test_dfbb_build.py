"""The search core built ahead of time (gpusolve/search/dfbb_build.py): its declared argument types match
what the driver passes, it searches exactly as numba's JIT does, and a change to its sources leaves it unused."""
import shutil

import numpy as np
import pytest

from gpusolve.model.problem import FORBIDDEN, CostFunction, Problem, finalize_integer
from gpusolve.search import dfbb, dfbb_build, dfbb_sources
from gpusolve.search.dfbb import DepthFirst
from gpusolve.search.dfbb_state import COMPLETE

from helpers import random_problem

pytest.importorskip("numba")
NUMBA = {"i8": np.int64, "i4": np.int32}


def jit_entry_points():
    from gpusolve.search.dfbb_search import replay, run
    return run, run, replay, "numba JIT"


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
    run, _, replay, _ = jit_entry_points()

    def recording(name, function):
        def record(*args):
            calls.setdefault(name, args)
            return function(*args)
        return record
    entry = (recording("run32", run), recording("run64", run), recording("replay", replay), "recorded")
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
        declared = dfbb_build.argument_types(functions[name], dfbb_build.TABLES.get(name, dfbb_build.VECTOR))
        assert len(declared) == len(args), name
        for kind, arg in zip(declared, args):
            if "[" in kind:
                assert isinstance(arg, np.ndarray) and arg.flags.c_contiguous, (name, kind)
                assert arg.ndim == kind.count(",") + 1 and arg.dtype == NUMBA[kind[:2]], (name, kind, arg.dtype)
            else:
                assert isinstance(arg, (int, np.integer)) and not isinstance(arg, np.ndarray), (name, kind)


def test_the_core_built_ahead_of_time_searches_as_the_jit_does(monkeypatch):
    """Node for node: the same incumbents, nodes, bounds. `make test` builds the core first."""
    built = dfbb_build.ahead_of_time()
    if built is None:
        pytest.skip("the core is not built ahead of time (python -m gpusolve.search.dfbb_build)")
    ahead = (built.run32, built.run64, built.replay, "ahead of time")
    for seed in range(40):
        rng = np.random.default_rng(700 + seed)
        problem = random_problem(rng, n_max=9, d_max=5, f_max=20, arity_max=3, p_hard=float(rng.uniform(0, 0.6)))
        a = search_with(lambda: ahead, problem, monkeypatch)
        b = search_with(jit_entry_points, problem, monkeypatch)
        assert (a.ub, a.nodes, a.lower_bound, a.replayed) == (b.ub, b.nodes, b.lower_bound, b.replayed), seed
        assert np.array_equal(a.best, b.best), seed


def test_a_changed_source_leaves_the_built_core_unused(tmp_path, monkeypatch):
    for source in dfbb_sources.SOURCES:
        shutil.copy(dfbb_sources.HERE / source, tmp_path / source)
    monkeypatch.setattr(dfbb_sources, "HERE", tmp_path)
    monkeypatch.setattr(dfbb_build, "folders", lambda: [tmp_path / "built"])
    dfbb_sources.name.cache_clear()  # computed once per process; here the sources change within it
    before = dfbb_sources.name()
    (tmp_path / "built").mkdir()
    suffix = dfbb_build.sysconfig.get_config_var("EXT_SUFFIX")
    (tmp_path / "built" / (before + suffix)).write_bytes(b"")  # found, but no module: the JIT serves
    assert dfbb_build.ahead_of_time() is None
    with open(tmp_path / "dfbb_kernels.py", "a") as f:
        f.write("\n")
    dfbb_sources.name.cache_clear()
    assert dfbb_sources.name() != before
    dfbb_sources.name.cache_clear()  # the installed sources' name again for the tests after this one


@pytest.mark.slow
def test_a_build_loads_and_proves(tmp_path, monkeypatch):
    """The whole build (10-20 s of compilation) into a fresh folder, then a proof with it."""
    path = dfbb_build.build(tmp_path)
    monkeypatch.setattr(dfbb_build, "folders", lambda: [tmp_path])
    module = dfbb_build.ahead_of_time()
    assert module is not None and path.parent == tmp_path
    problem = random_problem(np.random.default_rng(11), n_max=8, d_max=4, f_max=14, arity_max=3)
    entry = (module.run32, module.run64, module.replay, "ahead of time")
    assert search_with(lambda: entry, problem, monkeypatch).ub == search_with(jit_entry_points, problem,
                                                                              monkeypatch).ub
