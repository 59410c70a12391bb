"""`gpusolve serve`: one warm process that `gpusolve solve` calls hand their work to.

A fresh GPU solve spends most of its second on importing CuPy, creating the CUDA context and
loading kernels. The server pays that once; a `gpusolve solve` started while it listens sends
its arguments, working directory, environment and how its stdout and stderr are set up over
a Unix socket, and the server runs the same click command in its own process with that
directory and environment, through streams built as Python builds a process's own (same
encoding, buffering, isatty), so the bytes and their order are those of a local run. The
client writes them out and exits with the command's code; Ctrl-C and SIGTERM are forwarded
to the server's main thread, where the solve takes them as it takes its own signals.

This module is the client half (`hand_over`) and the wire format; it imports only the standard
library, so a program with no server running pays a failed connect, not click and NumPy twice.
The server half is gpusolve/serve/server.py; the program that tries the server first is
gpusolve/cli/entry.py.

Wire format: the client sends a 4-byte length and a JSON request (server.REQUEST), then one byte
per signal (`i` SIGINT, `t` SIGTERM); the server answers frames of a kind byte, a 4-byte length
and a payload: `1` stdout bytes, `2` stderr bytes, `x` the exit code, `n` declined (run locally).
A malformed request is answered as a command that failed on bad input: one line on stderr, exit 2.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys
import time

HANDED = "solve"  # the one command handed over; the others gain little and run here
# Variables read once per process (by CUDA, CuPy, BLAS threads, Python itself): a request whose
# values differ from the server's would not run as it would locally, so it runs locally.
PROCESS_WIDE = ("CUDA_", "CUPY_", "OMP_", "MKL_", "OPENBLAS_", "NUMPY_", "PYTHON", "LD_")
# Arguments the server cannot honour as a local run would: standard input, help, Dask clusters.
LOCAL_ONLY = ("-", "-h", "--help", "--no-serve", "--workers", "--scheduler")
FRAME = struct.Struct("!cI")  # a frame's kind and payload length
LENGTH = struct.Struct("!I")  # a request's length


def socket_path() -> str:
    """$GPUSOLVE_SERVE_SOCKET, else one per user: $XDG_RUNTIME_DIR/gpusolve.sock or /tmp/gpusolve-UID/serve.sock."""
    if os.environ.get("GPUSOLVE_SERVE_SOCKET"):
        return os.environ["GPUSOLVE_SERVE_SOCKET"]
    if os.environ.get("XDG_RUNTIME_DIR"):
        return os.path.join(os.environ["XDG_RUNTIME_DIR"], "gpusolve.sock")
    return f"/tmp/gpusolve-{os.getuid()}/serve.sock"


def fingerprint(environ) -> dict:
    """What must match between client and server for a served run to equal a local one."""
    from gpusolve import __version__
    return {"executable": sys.executable, "package": os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
            "version": __version__, "warnoptions": sys.warnoptions,
            "env": {k: v for k, v in sorted(environ.items()) if k.startswith(PROCESS_WIDE)}}


# -- client ----------------------------------------------------------------------------------

def hand_over(argv: list[str]) -> int | None:
    """Run argv on the server and return its exit code; None when it must run here (no server,
    a stale socket, a server that declined or died before answering)."""
    if not servable(argv[1:]) or os.environ.get("GPUSOLVE_NO_SERVE") or None in (sys.stdout, sys.stderr):
        return None
    path = socket_path()
    try:
        st = os.lstat(path)
        if st.st_uid != os.getuid():  # another user's socket: never hand it our work
            return None
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(path)
    except OSError:
        return None
    with conn:
        try:
            _send(conn, _request(argv))
        except OSError:
            return None
        return _relay(conn)


def servable(args) -> bool:
    """Whether a command line (the program's name left out) runs on the server as it would here."""
    return (isinstance(args, list) and bool(args) and args[0] == HANDED
            and not any(a in LOCAL_ONLY or a.startswith(("--workers=", "--scheduler=")) for a in args[1:]))


def _request(argv: list[str]) -> bytes:
    mask = os.umask(0)
    os.umask(mask)
    env = dict(os.environ)
    size = _terminal_size()
    if size:  # rich reads the size from fds 0, 1, 2 (0 meaning 80 by 25) unless these say it
        env.setdefault("COLUMNS", str(size[0] or 80))
        env.setdefault("LINES", str(size[1] or 25))
    return json.dumps({"argv": argv[1:], "prog": _prog_name(argv[0]), "cwd": os.getcwd(), "env": env,
                       "umask": mask, "streams": [_stream(sys.stdout, 1), _stream(sys.stderr, 2)],
                       "fingerprint": fingerprint(os.environ)}).encode()


def _stream(stream, fd: int) -> dict:
    """How Python set up this standard stream (the server builds its copy alike)."""
    try:
        blksize = os.fstat(fd).st_blksize
    except OSError:
        blksize = 0
    return {"tty": stream.isatty(), "encoding": stream.encoding, "errors": stream.errors,
            "line_buffering": stream.line_buffering, "write_through": stream.write_through,
            "buffered": hasattr(stream.buffer, "raw"), "buffer_size": blksize if blksize > 1 else 8192}


def _terminal_size() -> tuple[int, int] | None:
    for fd in (0, 1, 2):
        try:
            return tuple(os.get_terminal_size(fd))
        except OSError:
            continue
    return None


def _prog_name(argv0: str) -> str:
    """click's program name for help and errors ("gpusolve", or "python -m gpusolve")."""
    package = getattr(sys.modules["__main__"], "__package__", None)
    if not package:
        return os.path.basename(argv0)
    name = os.path.splitext(os.path.basename(argv0))[0]
    return f"python -m {package if name == '__main__' else f'{package}.{name}'}"


def _relay(conn) -> int | None:
    """Copy the server's frames to our stdout and stderr until the exit code. Output to a
    terminal is shown as it comes; other output is held until the code arrives, so a server
    that dies mid-request leaves nothing behind and the solve runs here instead (unless it was
    asked to stop: then it ends as an interrupted solve, 130)."""
    held: list[tuple[int, bytes]] = []
    live = {1: sys.stdout.isatty(), 2: sys.stderr.isatty()}
    signals = []

    def forward(signum, frame):
        signals.append(signum)
        if len(signals) >= 3:  # the server does not answer: give up as a third Ctrl-C would
            raise SystemExit(130)
        try:
            conn.sendall(b"i" if signum == signal.SIGINT else b"t")
        except OSError:
            pass

    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        while True:
            frame = _recv_frame(conn)
            if frame is None or frame[0] == b"n":
                return 130 if signals else None
            kind, payload = frame
            if kind == b"x":
                for fd, data in held:
                    _write(fd, data)
                return int(payload)
            fd = 1 if kind == b"1" else 2
            if live[fd]:
                _write(fd, payload)
            else:
                held.append((fd, payload))
    except OSError:
        return 130 if signals else None
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _write(fd: int, data: bytes) -> None:
    try:
        while data:
            data = data[os.write(fd, data):]
    except OSError:  # a closed pipe: the reader has gone
        pass


def _send(conn, payload: bytes) -> None:
    conn.sendall(LENGTH.pack(len(payload)) + payload)


def recv_exact(conn, n: int, deadline: float | None = None) -> bytes | None:
    """n bytes, or None at end of stream; past `deadline` (time.monotonic) raises TimeoutError."""
    chunks = []
    while n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            conn.settimeout(left)
        chunk = conn.recv(n)
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _recv_frame(conn) -> tuple[bytes, bytes] | None:
    head = recv_exact(conn, FRAME.size)
    if head is None:
        return None
    kind, n = FRAME.unpack(head)
    payload = recv_exact(conn, n)
    return None if payload is None else (kind, payload)
