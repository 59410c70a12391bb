"""The `gpusolve` program: a `solve` goes to a running `gpusolve serve` when there is one, else runs here."""
from __future__ import annotations

import os
import signal
import sys

from gpusolve.serve.client import hand_over


def main() -> None:
    code = hand_over(sys.argv)
    if code is None:
        from gpusolve.cli.commands import main as cli
        try:
            cli()
        except SystemExit as e:
            leave(e.code)
        leave(0)
    if code < 0:  # the served command ended as a SIGTERM ends a local one: die of it too
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


def leave(code) -> None:
    """Exit with `code`. A process that started CUDA skips the interpreter's finalization (CuPy's
    pools and handles freed one by one, 0.05 s on an H100; the driver frees them with the process)
    once its output is flushed; the command's own clean-up ran before it returned."""
    from gpusolve.cuda.runtime import cuda_started
    if isinstance(code, int | None) and cuda_started():
        for stream in (sys.stdout, sys.stderr):
            try:
                if stream is not None:
                    stream.flush()
            except (OSError, ValueError):  # a reader gone (`| head`) or a closed stream: nothing left to tell
                pass
        os._exit(code or 0)
    sys.exit(code)
