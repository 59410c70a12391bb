""".wcsp shared tables of every arity against pytoulbar2, which tells the semantics: toulbar2 reuses a
table of arity <= 3 whole (its default included) but one of arity >= 4 as tuples over the reusing
function's own default, and does not number an n-ary shared definition with no tuple and default 0."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gpusolve.parsers import read
from gpusolve.schedule.solve import Options, solve

FILES = 240
ORACLE = """import json, sys, pytoulbar2
out = []
for path in sys.argv[1:]:
    cfn = pytoulbar2.CFN(verbose=-1)
    try:  # reading may already prove it infeasible
        cfn.Read(path)
        res = cfn.Solve()
    except pytoulbar2.pytb2.Contradiction:
        res = None
    out.append(None if res is None else res[1])
print(json.dumps(out))
"""


def toulbar2_optima(paths) -> list:
    """pytoulbar2's optimum of each file (None: infeasible), all in one fresh process."""
    pytest.importorskip("pytoulbar2")
    run = subprocess.run([sys.executable, "-c", ORACLE, *map(str, paths)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def shared_wcsp(rng) -> str:
    """A small .wcsp of arities 1..5: shared definitions (some empty, some with default 0), functions
    reusing them (`-k`) with defaults of their own, plain functions and constants."""
    n = int(rng.integers(5, 8))
    domains = [int(rng.integers(2, 4)) for _ in range(n)]  # toulbar2 1.x can crash on domains of size 1
    ub = int(rng.choice([25, 60, 1000]))
    blocks = []  # one text block per cost function
    numbered = []  # the shapes of the shared tables toulbar2 numbers, in order

    def cost():
        return ub + int(rng.integers(0, 3)) if rng.random() < 0.08 else int(rng.integers(0, 12))

    def table(arity, shared):
        scope = [int(v) for v in rng.choice(n, arity, replace=False)]
        shape = [domains[v] for v in scope]
        default = 0 if rng.random() < 0.35 else cost()
        k = 0 if rng.random() < 0.25 else int(rng.integers(1, 7))
        rows = [[int(rng.integers(0, d)) for d in shape] + [cost()] for _ in range(k)]
        head = [-arity if shared else arity, *scope, default, k]
        blocks.append("\n".join(" ".join(map(str, line)) for line in [head, *rows]))
        if shared and (arity <= 3 or default or k):
            numbered.append(shape)

    def reuse():
        k = int(rng.integers(1, len(numbered) + 1))
        scope, free = [], [int(v) for v in rng.permutation(n)]
        for d in numbered[k - 1]:
            match = [v for v in free if domains[v] == d]
            if not match:
                return
            scope.append(match[0])
            free.remove(match[0])
        default = 0 if rng.random() < 0.3 else cost()
        blocks.append(" ".join(map(str, [len(scope), *scope, default, -k])))

    for _ in range(int(rng.integers(3, 9))):
        pick = rng.random()
        if pick < 0.05:
            blocks.append(f"0 {int(rng.integers(0, 5))} 0")
        elif pick < 0.55 or not numbered:
            table(int(rng.integers(1, min(5, n) + 1)), shared=pick >= 0.2)
        else:
            reuse()
    return f"shared {n} 3 {len(blocks)} {ub}\n{' '.join(map(str, domains))}\n" + "\n".join(blocks) + "\n"


def test_shared_tables_of_every_arity_follow_toulbar2(tmp_path):
    paths = []
    for seed in range(FILES):
        paths.append(tmp_path / f"s{seed}.wcsp")
        paths[-1].write_text(shared_wcsp(np.random.default_rng(seed)))
    for path, ref in zip(paths, toulbar2_optima(paths)):
        r = solve(read(path), Options(device="cpu", search=False))
        got = None if r.status == "infeasible" else r.upper_bound
        assert r.status in ("optimal", "infeasible") and got == (None if ref is None else round(ref)), \
            (path.read_text(), got, ref)


@pytest.fixture
def shared_repro() -> Path:
    """The reproducers beside the checkout (`../shared/repro`), as `shared_instances` finds the instances."""
    path = Path(__file__).resolve().parents[2] / "shared" / "repro"
    if not path.is_dir():
        pytest.skip(f"reproducers not found at {path}")
    return path


def test_the_reproducers_of_shared_tables_follow_toulbar2(shared_repro):
    paths = [shared_repro / f"{name}.wcsp" for name in ("shared_nary_default", "shared_empty_nary_numbering",
                                                        "nary_reuse_random10", "shared_ternary_default")]
    got = [solve(read(path), Options(device="cpu", search=False)).upper_bound for path in paths]
    assert got == [round(ref) for ref in toulbar2_optima(paths)]
