"""The README's examples run as written, from a fresh clone's files, and its links lead somewhere.

A block the README marks `<!-- example -->` is run line by line in an empty folder holding only
the repository's `instances/`, with `gpusolve` on the PATH as this checkout's code."""
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BLOCK = re.compile(r"<!-- example -->\s*```(\w+)\n(.*?)```", re.S)


def examples() -> list[tuple[str, str]]:
    return [(lang, body) for lang, body in BLOCK.findall(README.read_text())]


def shell_lines() -> list[str]:
    lines = []
    for lang, body in examples():
        if lang == "sh":
            lines += [line for line in body.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return lines


@pytest.fixture(scope="module")
def fresh(tmp_path_factory) -> tuple[Path, dict]:
    """An empty folder with the shipped instances, and an environment whose `gpusolve` is this code."""
    folder = tmp_path_factory.mktemp("readme")
    (folder / "instances").symlink_to(ROOT / "instances")
    bin_dir = folder / ".bin"
    bin_dir.mkdir()
    shim = bin_dir / "gpusolve"
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -m gpusolve \"$@\"\n")
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "GPUSOLVE_NO_SERVE": "1"}
    return folder, env


def test_the_readme_has_runnable_examples_of_every_command():
    commands = {line.split()[1] for line in shell_lines()}
    assert {"solve", "info", "generate", "batch", "dcop", "csg"} <= commands
    assert any(lang == "python" for lang, _ in examples())


@pytest.mark.parametrize("line", shell_lines())
def test_a_readme_shell_example_runs(fresh, line):
    folder, env = fresh
    command = line.split("  #")[0].strip()
    run = subprocess.run(["bash", "-c", command], cwd=folder, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"{command}\n{run.stderr}"
    assert "Traceback" not in run.stderr


def test_the_readme_python_example_runs(fresh):
    folder, env = fresh
    for lang, body in examples():
        if lang == "python":
            run = subprocess.run([sys.executable, "-c", body], cwd=folder, env=env, capture_output=True, text=True,
                                 timeout=300)
            assert run.returncode == 0, run.stderr
            assert "optimal" in run.stdout


def test_the_readme_links_lead_to_files_and_anchors():
    text = README.read_text()
    anchors = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in re.findall(r"^## (.+)$", text, re.M)}
    for target in re.findall(r"\]\(([^)]+)\)", text):
        if target.startswith("#"):
            assert target[1:] in anchors, target
        elif not target.startswith("http"):
            assert (ROOT / target).exists(), target
