"""`gpusolve serve`: a warm process that runs the `solve` commands handed to it."""
from __future__ import annotations

import sys

import click

from gpusolve.cli.common import EXIT_INPUT, Seconds, console, err
from gpusolve.engines.select import DEVICES


@click.command("serve")
@click.option("--socket", "path", type=click.Path(dir_okay=False), default=None,
              help="Unix socket to listen on (default: $GPUSOLVE_SERVE_SOCKET, else $XDG_RUNTIME_DIR/gpusolve.sock, "
                   "else /tmp/gpusolve-UID/serve.sock); `solve` looks where GPUSOLVE_SERVE_SOCKET says, or the default.")
@click.option("--device", type=click.Choice(DEVICES), default="auto", show_default=True,
              help="What to warm: cpu (the pipeline), gpu (also the CUDA context and the GPU kernels; exit 2 "
                   "without a GPU), auto (gpu when there is one). Each request still runs with its own --device.")
@click.option("--idle-exit", type=Seconds(), default=None, help="Stop after this many seconds without a request.")
def serve_cmd(path, device, idle_exit):
    """Keep a warm process: `gpusolve solve` calls hand it their work while it runs, with the output they
    would print themselves (GPUSOLVE_NO_SERVE=1 or solve --no-serve opt out). Stops on SIGTERM or Ctrl-C.

    It runs one solve at a time. A solve started while another runs is not queued: it runs in its own
    process, as with no server, so a short solve never waits behind a long one. A request that is
    malformed is answered with one line and exit 2, one that does not arrive whole within 10 s is left
    to its client; neither stops the server."""
    from gpusolve.serve.client import socket_path
    from gpusolve.serve.server import ServeError, serve
    stderr = sys.stderr  # the server's own: while a request runs, sys.stderr is its client's
    group = click.get_current_context().find_root().command  # what a request runs: `gpusolve` itself

    def log(line: str) -> None:
        stderr.write(line + "\n")
        stderr.flush()

    try:
        serve(path or socket_path(), device, idle_exit, log, group, console.cache_clear)
    except ServeError as e:
        err().print(str(e), markup=False, soft_wrap=True)
        sys.exit(EXIT_INPUT)
