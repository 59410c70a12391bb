"""toulbar2's own files (tutorials, examples, validation sets): gpusolve solves each to the optimum that
pytoulbar2 proves or its .ub file gives, or refuses it by name, one line and exit code 2 (a global
cost function it does not support). Never a traceback, never a wrong value: a
run the time limit cuts short must bracket the optimum with its bounds. The files come from a copy
of toulbar2's repository ($GPUSOLVE_TOULBAR2, default ../cache/toulbar2 beside the checkout); the
helpers are bench/toulbar2_files.py's, which tabulates the same runs."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import toulbar2_files as tf  # noqa: E402

TIME_LIMIT = 30  # each solver's, per file: a run cut short is checked by its bounds, not failed
SLOW_BYTES = 40_000  # files longer than this (decompressed) are marked slow
# What a refusal names: the global cost function or keyword, or the global cost function whose
# parameters break the format (B1-LU04-test.wcsp's automaton of 2 states has a transition into
# state 2: toulbar2 writes that cost past its table, out of bounds).
REFUSAL = re.compile(r"(global cost function (?P<name>\S+) is not supported|unsupported cost function keyword "
                     r"(?P<keyword>\S+)|global cost function (?P<broken>\S+): "
                     r"[^:]* out of range)")


def cases():
    root = tf.toulbar2_root()
    if not root.is_dir():
        return [pytest.param(None, id="no-toulbar2-copy")]
    return [pytest.param(name, id=name, marks=[pytest.mark.slow] if size(root / name) > SLOW_BYTES else [])
            for name in tf.instances(root)]


def size(path: Path) -> int:
    with tf.COMPRESSIONS[tf.split(path)[2]](path, "rb") as f:
        return len(f.read())


@pytest.fixture(scope="module")
def toulbar2_folder():
    root = tf.toulbar2_root()
    if not root.is_dir():
        pytest.skip(f"no copy of toulbar2's repository at {root} (set GPUSOLVE_TOULBAR2)")
    pytest.importorskip("pytoulbar2")
    return root


def close(got, expected) -> bool:
    return abs(got - expected) <= 1e-9 * max(1.0, abs(expected))


@pytest.mark.parametrize("name", cases())
def test_toulbar2_file_is_solved_to_its_optimum_or_refused_by_name(name, toulbar2_folder, tmp_path):
    path = toulbar2_folder / name
    ours = tf.run_gpusolve(path, TIME_LIMIT)
    assert not ours["traceback"], "\n".join(ours["stderr"])
    if ours["rc"] == 2:
        assert ours["status"] == "error" and ours["stderr"] == [ours["message"]]
        assert re.match(rf"{re.escape(str(path))}:\d+: ", ours["message"]), ours["message"]
        refused = REFUSAL.search(ours["message"])
        assert refused, ours["message"]
        named = refused.group("name") or refused.group("keyword") or refused.group("broken")
        with tf.COMPRESSIONS[tf.split(path)[2]](path, "rt") as f:
            assert named is None or re.search(rf"\b{re.escape(named)}\b", f.read())  # the file's own
        return
    assert ours["rc"] in (0, 4), ours["stderr"]  # solved, or the time limit cut it short
    theirs = tf.run_toulbar2(path, TIME_LIMIT)
    expected, source = tf.reference(path, theirs, tmp_path, TIME_LIMIT)
    if source is None:  # toulbar2 proved nothing: its solution's value still bounds the optimum above
        if ours["status"] == "optimal" and theirs["value"] is not None:
            assert ours["value"] <= theirs["value"] + 1e-9 * max(1.0, abs(theirs["value"]))
        return
    if ours["status"] in ("optimal", "infeasible"):
        assert (ours["value"] is None) == (expected is None), (ours, expected, source)
        assert expected is None or close(ours["value"], expected), (ours, expected, source)
    else:  # cut short: the bounds found bracket the optimum
        assert expected is not None, (ours, source)
        assert ours["lower"] is None or ours["lower"] <= expected + 1e-9 * max(1.0, abs(expected)), ours
        assert ours["value"] is None or ours["value"] >= expected - 1e-9 * max(1.0, abs(expected)), ours


def test_toulbar2_misreads_wide_dense_tables_and_the_reference_corrects_it(tmp_path):
    """The case `toulbar2_form` exists for, on a small file: a dense table over 4 variables whose least
    cost is 1 counts 2 in toulbar2; written sparse, it counts 1, as brute force says."""
    pytest.importorskip("pytoulbar2")
    path = tmp_path / "wide.cfn"
    costs = [1 + (i % 3) for i in range(16)]
    path.write_text('{"problem": {"name": "w", "mustbe": "<100"}, "variables": {"a": 2, "b": 2, "c": 2, "d": 2}, '
                    f'"functions": {{"f": {{"scope": ["a", "b", "c", "d"], "costs": {costs}}}}}}}')
    assert tf.run_toulbar2(path, 10)["value"] == 2  # toulbar2's reading, not the file's optimum
    assert tf.run_toulbar2(tf.toulbar2_form(path, tmp_path), 10)["value"] == min(costs) == 1
    assert tf.run_gpusolve(path, 10)["value"] == 1


@pytest.mark.slow
def test_the_bench_tabulates_the_quick_files_as_json_and_markdown(toulbar2_folder, tmp_path):
    env = dict(os.environ, GPUSOLVE_BENCH_RESULTS=str(tmp_path / "results"))
    p = subprocess.run([sys.executable, str(Path(tf.__file__)), "--quick", "--time-limit", str(TIME_LIMIT)],
                       capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    (record,) = (tmp_path / "results").glob("*.json")
    rows = json.loads(record.read_text())["rows"]
    assert sorted(r["file"] for r in rows) == sorted(tf.QUICK)
    assert all(r["agrees"] or r["gpusolve"]["rc"] == 2 for r in rows), rows
    table = record.with_suffix(".md").read_text()
    assert all(f"| {name} |" in table for name in tf.QUICK)
