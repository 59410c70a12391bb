"""The files a solve writes (--solution, --uai-output), before any work: checked not to overwrite an
input, and an older run's removed."""
from __future__ import annotations

import os
from pathlib import Path


def check_outputs(file: str, fmt: str | None, solution: str | None, uai_output: str | None,
                  inputs: tuple = ()) -> str | None:
    """Why the output options cannot work, found before solving; None when they can. An output
    naming an input (FILE, `inputs`: the evidence or order file) would overwrite it."""
    from gpusolve.parsers import format_of
    if uai_output and format_of(file, fmt) != ".uai":
        return f"{file}: --uai-output applies to .uai files"
    outputs = [(option, path) for option, path in (("--solution", solution), ("--uai-output", uai_output)) if path]
    for option, path in outputs:
        folder = Path(path).parent
        if not folder.is_dir():
            return f"{option} {path}: folder {folder} does not exist"
        if not os.access(folder, os.W_OK):
            return f"{option} {path}: folder {folder} is not writable"
        for given in (file, *inputs):
            if given and _same_file(path, given):
                return f"{option} {path}: names the input file {given}: it would be overwritten"
    if len(outputs) == 2 and _same_file(solution, uai_output, existing=False):
        return f"--solution and --uai-output name the same file {solution}"
    return None


def _same_file(a: str, b: str, existing: bool = True) -> bool:
    """Whether paths `a` and `b` name one file (through links too); with `existing`, only a file
    that exists can be."""
    try:
        if os.path.exists(a) and os.path.exists(b):
            return os.path.samefile(a, b)
    except OSError:
        pass
    return not existing and os.path.abspath(a) == os.path.abspath(b)


def clear_outputs(*outputs: tuple[str, str | None]) -> str | None:
    """Remove the regular files the (option, path) outputs will be written to: a run that ends with
    nothing to write (no assignment, an error, a stop) must not leave an older run's file to be read
    as its own. The error line when one cannot be removed."""
    for option, path in outputs:
        try:
            if path and os.path.isfile(path):
                os.remove(path)
        except OSError as e:
            return f"{option} {path}: cannot replace the file: {e.strerror or e}"
    return None
