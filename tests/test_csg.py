"""Coalition structure generation: DP and IDP against brute force over all set partitions, the IDP
rule's completeness, the level step against a plain loop, anytime bounds, the file reader and the CLI;
the CUDA kernel against the reference (GPU-marked)."""
import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from gpusolve.csg import dp as csg
from gpusolve.cli.commands import main


def brute_force(v, n):
    """The best structure's value over all set partitions (Bell(n) of them), by recursion on agent sets."""
    best = -math.inf

    def extend(rest, acc):
        nonlocal best
        if not rest:
            best = max(best, acc)
            return
        low = rest & -rest
        others = sub = rest ^ low
        while True:
            extend(rest ^ (sub | low), acc + v[sub | low])
            if not sub:
                return
            sub = (sub - 1) & others
    extend((1 << n) - 1, 0.0)
    return best


def check_answer(r, v, n, optimum):
    agents = sorted(a for c in r.structure for a in c)
    assert agents == list(range(n))  # a partition of all agents
    assert r.value == pytest.approx(math.fsum(v[sum(1 << a for a in c)] for c in r.structure), abs=1e-12)
    assert r.lower_bound == r.value
    assert r.lower_bound <= optimum + 1e-9 and optimum <= r.upper_bound + 1e-9
    if r.status == "optimal":  # proven: the bounds meet at the structure's value
        assert r.upper_bound == r.lower_bound == pytest.approx(optimum, rel=1e-13, abs=1e-13)


@pytest.mark.parametrize("distribution", csg.DISTRIBUTIONS)
def test_optimal_against_brute_force(distribution):
    for n, seeds in ((1, 2), (2, 2), (3, 2), (5, 2), (7, 2), (9, 2), (11, 1)):  # Bell(11) = 678,570
        for seed in range(seeds):
            v = csg.generate_values(distribution, n, seed)
            optimum = brute_force(v, n)
            for algorithm in csg.ALGORITHMS:
                for precision in ("single", "double"):
                    r = csg.solve(v, csg.Options(algorithm=algorithm, device="cpu", precision=precision))
                    assert r.status == "optimal" or precision == "single"  # real values: within float32 rounding
                    check_answer(r, v, n, optimum)
                    assert r.value == pytest.approx(optimum, rel=1e-5 if precision == "single" else 1e-12)


@pytest.mark.parametrize("algorithm", csg.ALGORITHMS)
def test_float32_ties_never_pass_for_optimal(algorithm):
    """Every structure worth n plus a perturbation of 1e-9: all tie in float32, so the single-precision
    DP picks one at random. It may say `optimal` only with bounds equal to the brute-force optimum;
    else `bounded`, bracketing it. Double precision separates them."""
    for n in range(2, 9):
        for seed in range(3):
            rng = np.random.default_rng(seed)
            v = csg.popcount(np, np.arange(1 << n)) + 1e-9 * rng.uniform(0, 1, 1 << n)
            optimum = brute_force(v, n)
            statuses = {}
            for precision in ("single", "double", "auto"):
                r = csg.solve(v, csg.Options(algorithm=algorithm, device="cpu", precision=precision))
                check_answer(r, v, n, optimum)
                statuses[precision] = r.status
            assert statuses["double"] == statuses["auto"] == "optimal", (n, seed)  # auto: double on the CPU


def test_single_precision_proves_games_on_a_grid():
    """Values that are multiples of 2^-k: structures differ by 2^-k at least, so an upper bound within
    2^-k of the structure's value proves it optimal; large integers leave the rounding allowance above 1."""
    for n in (3, 6, 9):
        for seed in range(3):
            rng = np.random.default_rng(seed)
            for scale, step in ((100, 1.0), (100, 0.25), (3e9, 1.0)):
                v = np.round(rng.uniform(0, scale, 1 << n) / step) * step
                optimum = brute_force(v, n)
                r = csg.solve(v, csg.Options(device="cpu", precision="single"))
                check_answer(r, v, n, optimum)
                assert (r.status == "optimal") == (scale < 1e9), (n, seed, scale, r.upper_bound - r.lower_bound)


@pytest.mark.parametrize("n", range(1, 13))
def test_idp_rule_reaches_every_structure_shape(n):
    assert csg.idp_shapes_reachable(n)


@pytest.mark.parametrize("n", (7, 8))
def test_idp_finds_every_planted_shape(n):
    """For each integer partition of n, a game whose unique optimum has that shape: IDP must find it."""
    rng = np.random.default_rng(n)
    sizes = csg.popcount(np, np.arange(1 << n))
    for shape in csg.integer_partitions(n):
        v = rng.uniform(0, 1, 1 << n) * sizes  # every coalition below its size...
        perm, planted, at = rng.permutation(n), [], 0
        for s in shape:
            planted.append(int(sum(1 << int(a) for a in perm[at:at + s])))
            at += s
        v[planted] = sizes[planted] + 1.0  # ...but the planted ones: optimum n + parts, unique
        r = csg.solve(v, csg.Options(algorithm="idp", device="cpu", precision="double"))
        assert r.value == pytest.approx(n + len(shape))
        assert sorted(sum(1 << a for a in c) for c in r.structure) == sorted(planted)


@pytest.mark.parametrize("distribution", ("ndcs", "agent-based"))
def test_idp_equals_full_dp(distribution):
    for n in (10, 12, 13):
        v = csg.generate_values(distribution, n, n)
        idp, dp = (csg.solve(v, csg.Options(algorithm=a, device="cpu", precision="double")) for a in ("idp", "dp"))
        assert idp.value == pytest.approx(dp.value, rel=1e-12)
        assert idp.splits < 0.75 * dp.splits


def test_split_counts():
    # full DP: every unordered split of every coalition, sum over C of 2^(|C|-1) - 1 = (3^n + 1)/2 - 2^n
    for n in range(2, 12):
        assert csg.total_splits(n, "dp") == (3 ** n + 1) // 2 - 2 ** n
    assert 0.35 < csg.total_splits(25, "idp") / csg.total_splits(25, "dp") < 0.45


def test_split_range_is_the_rule():
    for n in range(2, 33):
        for k in range(2, n + 1):
            for algorithm in csg.ALGORITHMS:
                lo, hi = csg.split_range(n, k, algorithm)
                assert [a for a in range(k) if lo <= a <= hi] == \
                    [a for a in range(k) if csg.split_allowed(n, k, a, algorithm)], (n, k, algorithm)


def plain_level(f, n, k, algorithm):
    """One level by a loop over coalitions and all their submasks: the level step's reference."""
    out = f.copy()
    for c in range(1 << n):
        if bin(c).count("1") != k:
            continue
        for a in range(1, c):
            b = c ^ a
            if a & c == a and a < b and csg.split_allowed(n, k, bin(a).count("1"), algorithm):
                out[c] = max(out[c], f[a] + f[b])
    return out


@pytest.mark.parametrize("algorithm", csg.ALGORITHMS)
def test_level_step_equals_plain_loop(algorithm):
    n = 9
    f = csg.generate_values("normal", n, 5).astype(np.float32)
    f[0] = 1e3  # the empty coalition's value is never used: no split has an empty part
    sizes = csg.popcount(np, np.arange(1 << n))
    g = f.copy()
    for k in range(2, n + 1):
        want = plain_level(f, n, k, algorithm)
        csg.level_step(np, f, csg.level_masks(np, sizes, k), n, k, algorithm, block=64)  # many small blocks
        csg.level_step(np, g, csg.level_masks(np, sizes, k), n, k, algorithm, block=64, threads=3)
        assert np.array_equal(f, want) and np.array_equal(g, want)


def test_stopped_runs_bound_the_optimum():
    n = 9
    v = csg.generate_values("modified-uniform", n, 4)
    optimum = brute_force(v, n)
    for calls in range(0, 30, 3):
        seen = []
        r = csg.solve(v, csg.Options(device="cpu"), stop=lambda: seen.append(1) or len(seen) > calls)
        check_answer(r, v, n, optimum)
        assert (r.status == "optimal") == (r.levels_done == n)
    r = csg.solve(v, csg.Options(device="cpu", time_limit=0))
    assert r.status == "bounded" and r.levels_done == 1
    check_answer(r, v, n, optimum)


def test_level_step_stops_between_blocks_with_valid_values():
    n = 8
    v = csg.generate_values("uniform", n, 1)
    f = v.copy()
    sizes = csg.popcount(np, np.arange(1 << n))
    for k in range(2, 6):
        csg.level_step(np, f, csg.level_masks(np, sizes, k), n, k, "dp")
    calls = []
    assert not csg.level_step(np, f, csg.level_masks(np, sizes, 6), n, 6, "dp", block=32,
                              stop=lambda: calls.append(1) or len(calls) > 2)
    full = v.copy()
    for k in range(2, n + 1):
        csg.level_step(np, full, csg.level_masks(np, sizes, k), n, k, "dp")
    assert np.all(f >= v) and np.all(f <= full)  # partition values of each coalition, at most its optimum
    assert 0 < np.count_nonzero(f[sizes == 6] > v[sizes == 6]) < np.count_nonzero(full[sizes == 6] > v[sizes == 6])


def test_partition_bound():
    assert csg.partition_bound([0, 1, 5, 4], 3) == 6  # 2 + 1 beats 3 and 1 + 1 + 1
    assert len(list(csg.integer_partitions(10))) == 42


def test_memory_prediction_and_refusal():
    need = csg.predict_memory(30, "single", on_gpu=True)
    assert need["device"] >= 4 << 30 and need["host"] >= 8 << 30
    with pytest.raises(csg.BudgetError, match="device memory.*--precision single"):
        csg.check_memory(30, "double", True, 1 << 40, 6 << 30)
    with pytest.raises(csg.BudgetError, match="host memory"):
        csg.check_memory(20, "single", False, 1 << 20, None)
    with pytest.raises(csg.BudgetError, match="--precision single"):
        csg.check_memory(20, "double", False, 1 << 20, None)
    csg.check_memory(20, "single", False, 1 << 33, None)


def test_generators_are_seeded_and_shaped():
    for d in csg.DISTRIBUTIONS:
        a, b = csg.generate_values(d, 8, 7), csg.generate_values(d, 8, 7)
        assert a.shape == (256,) and a[0] == 0 and np.array_equal(a, b)
        assert not np.array_equal(a, csg.generate_values(d, 8, 8))
    sizes = csg.popcount(np, np.arange(1 << 12))
    v = csg.generate_values("ndcs", 12, 1)
    assert abs(v[sizes == 6].mean() - 6) < 0.2  # N(|C|, sqrt|C|)
    v = csg.generate_values("uniform", 12, 1)
    assert np.all(v <= sizes) and abs(v[sizes == 6].mean() - 3) < 0.2


def run(*args):
    return CliRunner().invoke(main, ["csg", *map(str, args)])


def test_cli_generate_write_and_read_back(tmp_path):
    for suffix in (".txt", ".npy"):
        path = tmp_path / f"g{suffix}"
        r = run("--generate", "agent-based", "-n", 8, "--seed", 3, "--write", path, "--json", "--device", "cpu")
        assert r.exit_code == 0, r.output
        made = json.loads(r.stdout)
        r = run(path, "--json", "--device", "cpu")
        assert r.exit_code == 0, r.output
        read = json.loads(r.stdout)
        assert read["value"] == made["value"] and read["structure"] == made["structure"]
        for key in ("file", "task", "status", "lower_bound", "upper_bound", "structure", "time_s", "phases", "engine"):
            assert key in read
        assert read["status"] == "optimal" and "read" in read["phases"] and "generate" in made["phases"]
        assert read["method"] == "IDP over subsets, double precision"  # auto: double on the CPU engine


def test_cli_human_output_and_time_limit():
    r = run("--generate", "normal", "-n", 7, "--device", "cpu")
    assert r.exit_code == 0
    for word in ("status", "optimal", "upper bound", "structure", "IDP", "splits"):
        assert word in r.stdout
    r = run("--generate", "normal", "-n", 7, "--time-limit", 0, "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["status"] == "bounded"
    from test_output import valid
    valid(json.loads(r.stdout))
    valid(json.loads(run("--generate", "normal", "-n", 7, "--json").stdout))
    valid(json.loads(run("missing.txt", "--json").stdout))


@pytest.mark.parametrize("content, pattern", [
    ("", ":1: empty file"),
    ("x\n", ":1: expected the number of agents"),
    ("40\n1\n", ":1: n = 40"),
    ("2\n0\n1\n2\n", ":4: n = 2 needs 4 values"),
    ("2\n0 1\n2 zz\n", ":3: coalition 3: 'zz' is not a number"),
    ("2\n0 1\nnan 2\n", ":3: coalition 2"),
    ("2\n0 1 2 3 4\n", ":2: n = 2 needs 4 values"),
])
def test_cli_bad_files_one_line_exit_2(tmp_path, content, pattern):
    path = tmp_path / "bad.csg"
    path.write_text(content)
    r = run(path)
    assert r.exit_code == 2 and pattern in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.output


def test_cli_usage_errors_and_memory_refusal(tmp_path):
    bad = tmp_path / "bad.npy"
    np.save(bad, np.zeros(6))
    for args, code, pattern in [
        ((), 2, "give a FILE or --generate"),
        ((bad, "--generate", "uniform", "-n", 4), 2, "one of them"),
        (("--generate", "uniform"), 2, "needs -n"),
        (("--generate", "uniform", "-n", 0), 2, "1 to 32 agents"),
        ((tmp_path / "missing.txt",), 2, "missing.txt"),
        ((bad,), 2, "6 values"),
        (("--generate", "uniform", "-n", 12, "--mem-limit", "1M"), 3, "host memory"),
    ]:
        r = run(*args)
        assert r.exit_code == code and pattern in r.stderr, (args, r.output)
    r = run("--generate", "uniform", "-n", 12, "--mem-limit", "1M", "--json")
    assert json.loads(r.stdout)["status"] == "error"


def test_cli_device_gpu_without_one_exits_2():
    from gpusolve.cuda.runtime import gpu_unavailable_reason
    if gpu_unavailable_reason() is None:
        pytest.skip("a GPU is present")
    r = run("--generate", "uniform", "-n", 5, "--device", "gpu")
    assert r.exit_code == 2 and "--device gpu" in r.stderr


# -- GPU ------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("precision", ("single", "double"))
@pytest.mark.parametrize("algorithm", csg.ALGORITHMS)
def test_kernel_equals_reference_per_level(cupy, algorithm, precision):
    """Bit-identical f after every level, from the same f: ranges and atomics exercised at high k."""
    for n in (5, 11, 16):
        f = cupy.asarray(csg.generate_values("ndcs", n, n).astype(csg.PRECISIONS[precision]))
        g = f.copy()
        sizes = csg.popcount(cupy, cupy.arange(1 << n, dtype=cupy.int64))
        for k in range(2, n + 1):
            assert csg.cuda_level(f, n, k, algorithm)
            csg.level_step(cupy, g, csg.level_masks(cupy, sizes, k), n, k, algorithm)
            assert cupy.array_equal(f, g), (n, k)


@pytest.mark.gpu
def test_gpu_equals_cpu_up_to_22_agents(cupy):
    for n, distribution in ((12, "normal"), (18, "agent-based"), (20, "modified-uniform"), (22, "uniform")):
        v = csg.generate_values(distribution, n, 1)
        gpu = csg.solve(v, csg.Options(device="gpu"))
        assert gpu.engine == "cupy" and gpu.precision == "single" and gpu.levels_done == n  # auto on the GPU
        if n <= 18:  # the NumPy engine itself
            cpu = csg.solve(v, csg.Options(device="cpu"))
        else:  # the reference level step on CuPy arrays: the same code, faster
            f = cupy.asarray(v.astype(np.float32))
            sizes = csg.popcount(cupy, cupy.arange(1 << n, dtype=cupy.int64))
            for k in range(2, n + 1):
                csg.level_step(cupy, f, csg.level_masks(cupy, sizes, k), n, k, "idp")
            cpu = csg.Result(**{**gpu.to_json(), "value": float(f[-1])})
        assert gpu.value == pytest.approx(cpu.value, rel=1e-6), n


@pytest.mark.gpu
def test_gpu_float32_ties_never_pass_for_optimal(cupy):
    """As on the CPU: structures tied in float32 make a single-precision answer bounded unless proven;
    double precision on the device is optimal at the brute-force optimum."""
    for n in (4, 7, 9):
        v = csg.popcount(np, np.arange(1 << n)) + 1e-9 * np.random.default_rng(n).uniform(0, 1, 1 << n)
        optimum = brute_force(v, n)
        for precision in ("single", "double"):
            r = csg.solve(v, csg.Options(device="gpu", precision=precision))
            assert r.engine == "cupy" and (r.status == "optimal") == (precision == "double")
            check_answer(r, v, n, optimum)
        w = np.round(v * 100)  # integers: the grid proves the float32 answer
        r = csg.solve(w, csg.Options(device="gpu", precision="single"))
        assert r.status == "optimal"
        check_answer(r, w, n, brute_force(w, n))


@pytest.mark.gpu
def test_gpu_time_limit_bounds(cupy):
    n = 16
    v = csg.generate_values("normal", n, 3)
    exact = csg.solve(v, csg.Options(device="cpu", precision="double")).value
    for calls in (0, 3, 9, 20):
        seen = []
        r = csg.solve(v, csg.Options(device="gpu"), stop=lambda: seen.append(1) or len(seen) > calls)
        check_answer(r, v, n, exact)


# -- over Dask workers -------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster():
    """Two single-threaded worker processes, shared by the tests below (a cluster takes seconds to start)."""
    distributed = pytest.importorskip("dask.distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as c, \
            distributed.Client(c) as client:
        yield c, client


@pytest.mark.slow
@pytest.mark.parametrize("distribution", csg.DISTRIBUTIONS)
def test_workers_equal_one_process(cluster, distribution):
    """Levels cut across two worker processes: the same f entry by entry, so the same value and structure."""
    _, client = cluster
    for n, algorithm, source in ((1, "idp", None), (4, "dp", "generate"), (9, "idp", None), (13, "idp", "generate")):
        v = csg.generate_values(distribution, n, n)
        one = csg.solve(v, csg.Options(algorithm=algorithm, device="cpu"))
        source = source and ("generate", distribution, n, n)  # rebuilt on each worker, or scattered
        two = csg.solve_on_workers(v, csg.Options(algorithm=algorithm, device="cpu"), client, source)
        assert (two.status, two.value, two.structure, two.splits) == (one.status, one.value, one.structure, one.splits)
        assert two.workers == 2 and two.engine == "numpy"
        check_answer(two, v, n, brute_force(v, n) if n <= 9 else one.value)


@pytest.mark.slow
def test_worker_too_small_for_the_values_refuses_before_drawing_them():
    """A worker past 80% of its memory limit stops taking tasks: the run must be refused, not hang."""
    distributed = pytest.importorskip("dask.distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0",
                                  memory_limit="300MiB") as c, distributed.Client(c) as client:
        with pytest.raises(csg.BudgetError, match="n = 26 needs .* host memory"):
            csg.solve_on_workers(None, csg.Options(device="cpu"), client, ("generate", "uniform", 26, 1))
        r = csg.solve_on_workers(None, csg.Options(device="cpu"), client, ("generate", "uniform", 12, 1))
        assert r.status == "optimal"


@pytest.mark.slow
def test_workers_stopped_runs_bound_the_optimum(cluster):
    _, client = cluster
    n = 9
    v = csg.generate_values("modified-uniform", n, 4)
    optimum = brute_force(v, n)
    for calls in (0, 3, 6):
        seen = []
        r = csg.solve_on_workers(v, csg.Options(device="cpu"), client, stop=lambda: seen.append(1) or len(seen) > calls)
        check_answer(r, v, n, optimum)
        assert (r.status == "optimal") == (r.levels_done == n)
    r = csg.solve_on_workers(v, csg.Options(device="cpu", time_limit=0), client)
    assert r.status == "bounded" and r.levels_done == 1
    check_answer(r, v, n, optimum)


@pytest.mark.slow
def test_cli_scheduler_and_workers(cluster, tmp_path):
    c, _ = cluster
    path = tmp_path / "g.npy"
    gen = ("--generate", "ndcs", "-n", 12, "--seed", 2)
    alone = json.loads(run(*gen, "--write", path, "--json", "--device", "cpu").stdout)
    for args, count in (((path, "--scheduler", c.scheduler_address), 2),  # the workers read the file
                        ((*gen, "--scheduler", c.scheduler_address, "--workers", 1), 1),
                        ((*gen, "--workers", 2), 2)):  # an embedded cluster
        r = run(*args, "--json", "--device", "cpu")
        assert r.exit_code == 0, r.output
        spread = json.loads(r.stdout)
        assert (spread["value"], spread["structure"], spread["status"]) == (alone["value"], alone["structure"],
                                                                            "optimal")
        assert spread["workers"] == count and "Dask worker" in spread["device_note"]
        assert "cluster" in spread["phases"] and spread["time_s"] >= spread["phases"]["cluster"]
    from test_output import valid
    valid(spread)


@pytest.mark.gpu
def test_kernel_shares_equal_the_whole_level(cupy):
    """A level computed as two ranges of colex ranks (two workers' shares) gives f bit for bit, the
    NumPy level step's."""
    for n in (11, 16):
        h = csg.generate_values("uniform", n, n).astype(np.float32)
        f = cupy.asarray(h)
        g = f.copy()
        sizes = csg.popcount(np, np.arange(1 << n, dtype=np.int64))
        for k in range(2, n + 1):
            assert csg.cuda_level(f, n, k, "idp")
            cut = math.comb(n, k) // 3
            assert csg.cuda_level(g, n, k, "idp", hi=cut) and csg.cuda_level(g, n, k, "idp", lo=cut)
            csg.level_step(np, h, csg.level_masks(np, sizes, k), n, k, "idp")
            assert cupy.array_equal(f, g) and np.array_equal(cupy.asnumpy(g), h), (n, k)


@pytest.mark.gpu
def test_gpu_workers_equal_one_process(cupy, cluster):
    """Two worker processes, each with its own f on the device (the same GPU here), exchanging shares:
    one process's structure, and the NumPy engine's value."""
    _, client = cluster
    for n, distribution in ((12, "ndcs"), (19, "agent-based")):
        v = csg.generate_values(distribution, n, 1)
        one = csg.solve(v, csg.Options(device="gpu"))
        two = csg.solve_on_workers(v, csg.Options(device="gpu"), client, ("generate", distribution, n, 1))
        cpu = csg.solve(v, csg.Options(device="cpu"))
        assert two.engine == "cupy" and (two.value, two.structure) == (one.value, one.structure)
        assert two.value == pytest.approx(cpu.value, rel=1e-6)
        check_answer(two, v, n, cpu.value)
