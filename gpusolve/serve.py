"""`gpusolve serve`: one warm process that `gpusolve solve` calls hand their work to.

A fresh GPU solve spends most of its second on importing CuPy, creating the CUDA context and
loading kernels. The server pays that once; a `gpusolve solve` started while it listens sends
its arguments, working directory, environment and how its stdout and stderr are set up over
a Unix socket, and the server runs the same click command in its own process with that
directory and environment, through streams built as Python builds a process's own (same
encoding, buffering, isatty), so the bytes and their order are those of a local run. The
client writes them out and exits with the command's code; Ctrl-C and SIGTERM are forwarded
to the server's main thread, where the solve takes them as it takes its own signals.

The client half (`main`, `hand_over`) imports only the standard library, so a program with no
server running pays a failed connect, not click and NumPy twice. Requests run one at a time
in the main thread: CUDA contexts do not survive fork, and signal handlers live there.

Wire format: the client sends a 4-byte length and a JSON request, then one byte per signal
(`i` SIGINT, `t` SIGTERM); the server answers frames of a kind byte, a 4-byte length and a
payload: `1` stdout bytes, `2` stderr bytes, `x` the exit code, `n` declined (run locally).
"""
from __future__ import annotations

import io
import json
import os
import signal
import socket
import struct
import sys

HANDED = "solve"  # the one command handed over; the others gain little and run here
# Variables read once per process (by CUDA, CuPy, BLAS threads, Python itself): a request whose
# values differ from the server's would not run as it would locally, so it runs locally.
PROCESS_WIDE = ("CUDA_", "CUPY_", "OMP_", "MKL_", "OPENBLAS_", "NUMPY_", "PYTHON", "LD_")
# Arguments the server cannot honour as a local run would: standard input, help, Dask clusters.
LOCAL_ONLY = ("-", "-h", "--help", "--no-serve", "--workers", "--scheduler")
_HEAD = struct.Struct("!cI")
_LEN = struct.Struct("!I")


def socket_path() -> str:
    """$GPUSOLVE_SERVE_SOCKET, else one per user: $XDG_RUNTIME_DIR/gpusolve.sock or /tmp/gpusolve-UID/serve.sock."""
    if os.environ.get("GPUSOLVE_SERVE_SOCKET"):
        return os.environ["GPUSOLVE_SERVE_SOCKET"]
    if os.environ.get("XDG_RUNTIME_DIR"):
        return os.path.join(os.environ["XDG_RUNTIME_DIR"], "gpusolve.sock")
    return f"/tmp/gpusolve-{os.getuid()}/serve.sock"


def fingerprint(environ) -> dict:
    """What must match between client and server for a served run to equal a local one."""
    from . import __version__
    return {"executable": sys.executable, "package": os.path.dirname(os.path.abspath(__file__)),
            "version": __version__, "warnoptions": sys.warnoptions,
            "env": {k: v for k, v in sorted(environ.items()) if k.startswith(PROCESS_WIDE)}}


# -- client ----------------------------------------------------------------------------------

def main() -> None:
    """The `gpusolve` program: a `solve` goes to a running server when there is one, else runs here."""
    code = hand_over(sys.argv)
    if code is None:
        from .cli import main as cli
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
    from .engines import cuda_started
    if isinstance(code, int | None) and cuda_started():
        for stream in (sys.stdout, sys.stderr):
            try:
                if stream is not None:
                    stream.flush()
            except (OSError, ValueError):  # a reader gone (`| head`) or a closed stream: nothing left to tell
                pass
        os._exit(code or 0)
    sys.exit(code)


def hand_over(argv: list[str]) -> int | None:
    """Run argv on the server and return its exit code; None when it must run here (no server,
    a stale socket, a server that declined or died before answering)."""
    if len(argv) < 2 or argv[1] != HANDED or os.environ.get("GPUSOLVE_NO_SERVE") or None in (sys.stdout, sys.stderr):
        return None
    if any(a in LOCAL_ONLY or a.startswith(("--workers=", "--scheduler=")) for a in argv[2:]):
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
    conn.sendall(_LEN.pack(len(payload)) + payload)


def _recv_exact(conn, n: int) -> bytes | None:
    chunks = []
    while n:
        chunk = conn.recv(n)
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _recv_frame(conn) -> tuple[bytes, bytes] | None:
    head = _recv_exact(conn, _HEAD.size)
    if head is None:
        return None
    kind, n = _HEAD.unpack(head)
    payload = _recv_exact(conn, n)
    return None if payload is None else (kind, payload)


# -- server ----------------------------------------------------------------------------------

class ServeError(Exception):
    """The server cannot start: one line for the user (exit 2)."""


class _Terminated(BaseException):
    """A SIGTERM outside the solve's own handler: the command ends, as a local process would die."""


def serve(path: str, device: str, idle_exit: float | None, log) -> None:
    """Warm up for `device`, then run requests on `path` until SIGTERM, Ctrl-C or `idle_exit` seconds idle."""
    Server(path, log).run(device, idle_exit)


def alive(path: str) -> bool:
    """Whether a server answers on `path` (a socket file left by a dead one does not)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
        return True
    except OSError:
        return False
    finally:
        probe.close()


class Server:
    def __init__(self, path: str, log):
        self.path, self.log = os.path.abspath(path), log
        self.fingerprint = fingerprint(os.environ)
        self.in_command = False
        self.forwarded = {signal.SIGINT: 0, signal.SIGTERM: 0}  # by watchers, not yet seen on the wakeup fd
        self.inode = None

    def run(self, device: str, idle_exit: float | None) -> None:
        import time
        if alive(self.path):
            raise ServeError(f"gpusolve serve: a server is already running on {self.path}")
        t0 = time.perf_counter()
        warm = self.warm(device)
        listener = self.listen()
        wake_r, wake_w = socket.socketpair()
        wake_r.setblocking(False)
        wake_w.setblocking(False)
        old_wakeup = signal.set_wakeup_fd(wake_w.fileno())
        old = {s: signal.signal(s, self.on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            self.log(f"gpusolve serve: warm in {time.perf_counter() - t0:.2f} s ({warm}); listening on {self.path}")
            why = self.loop(listener, wake_r, idle_exit)
        finally:
            for s, h in old.items():
                signal.signal(s, h)
            signal.set_wakeup_fd(old_wakeup)
            listener.close()
            try:
                if os.stat(self.path).st_ino == self.inode:  # still ours
                    os.unlink(self.path)
            except OSError:
                pass
            wake_r.close()
            wake_w.close()
        self.log(f"gpusolve serve: stopped ({why})")

    def listen(self) -> socket.socket:
        """The listening socket, mode 0600, in a folder made 0700 when missing; a stale socket file replaced."""
        import stat
        folder = os.path.dirname(self.path)
        try:
            if not os.path.isdir(folder):
                os.makedirs(folder, mode=0o700)
            if os.path.lexists(self.path):
                if not stat.S_ISSOCK(os.lstat(self.path).st_mode):
                    raise ServeError(f"gpusolve serve: {self.path} exists and is not a socket")
                os.unlink(self.path)  # nobody answered on it: left by a server that died
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            mask = os.umask(0o177)
            try:
                listener.bind(self.path)
            finally:
                os.umask(mask)
            listener.listen(16)
            self.inode = os.stat(self.path).st_ino
        except OSError as e:
            raise ServeError(f"gpusolve serve: {self.path}: {e.strerror or e}") from None
        return listener

    def warm(self, device: str) -> str:
        """Import the solve pipeline by solving a tiny problem through the command itself; with a GPU, also
        on the device, and load every shape-generic and assignment kernel. Says what was warmed."""
        import contextlib
        import tempfile

        from .engines import gpu_unavailable_reason
        from .generate import generate
        from .parsers.write import write
        reason = None if device == "cpu" else gpu_unavailable_reason()
        if device == "gpu" and reason:
            raise ServeError(f"gpusolve serve --device gpu: {reason}")
        with tempfile.TemporaryDirectory(prefix="gpusolve-warm-") as tmp:
            path = os.path.join(tmp, "warm.wcsp")
            write(generate("random", 10, 4, 0.5, 0.2, 1), path)
            runs = [["solve", path, "--device", "cpu"]]
            if device != "cpu" and reason is None:
                runs.append(["solve", path, "--device", "gpu", "--host-max", "0"])
            for argv in runs:
                sink = io.StringIO()
                with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                    code = self.command(argv, "gpusolve")
                if code:
                    raise ServeError(f"gpusolve serve: the warm-up solve failed: {sink.getvalue().strip()[-300:]}")
        if device == "cpu":
            return "cpu"
        if reason:
            return f"cpu; GPU not warmed: {reason}"
        name, count = load_kernels()
        release()
        return f"cpu and {name}, {count} kernels loaded"

    def loop(self, listener, wake_r, idle_exit: float | None) -> str:
        """Requests one at a time until a signal not forwarded by a client, or the idle time; says which."""
        import select
        import time
        last = time.monotonic()
        while True:
            timeout = None if idle_exit is None else max(0.0, last + idle_exit - time.monotonic())
            ready = select.select([listener, wake_r], [], [], timeout)[0]
            if self.signalled(wake_r):
                return "signal"
            if not ready:
                return f"idle for {idle_exit:g} s"
            if listener in ready:
                conn = listener.accept()[0]
                with conn:
                    self.handle(conn)
                last = time.monotonic()

    def signalled(self, wake_r) -> bool:
        """Whether SIGINT or SIGTERM reached this process other than from a client (drains the wakeup fd)."""
        stop = False
        while True:
            try:
                data = wake_r.recv(4096)
            except BlockingIOError:
                return stop
            for signum in data:
                if signum in self.forwarded:
                    if self.forwarded[signum]:
                        self.forwarded[signum] -= 1
                    else:
                        stop = True

    def on_signal(self, signum, frame):
        """Outside a command a signal only wakes the loop (it reads the wakeup fd); inside one it acts as on a
        local process: Ctrl-C raises KeyboardInterrupt, SIGTERM ends it (the solve installs its own handlers)."""
        if self.in_command:
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            raise _Terminated

    def handle(self, conn) -> None:
        import threading
        import time
        conn.settimeout(10)  # a client that connects and says nothing must not hold the server
        try:
            head = _recv_exact(conn, _LEN.size)
            if head is None or _LEN.unpack(head)[0] > 64 << 20:
                return
            body = _recv_exact(conn, _LEN.unpack(head)[0])
            request = json.loads(body) if body else None
        except (OSError, ValueError):
            return
        conn.settimeout(None)
        if not isinstance(request, dict):
            return
        lock = threading.Lock()  # frames from the command's thread and rich's refresh thread
        try:
            if request.get("fingerprint") != self.fingerprint or not os.path.isdir(request.get("cwd", "")):
                _frame(conn, lock, b"n", b"")
                return
            t0 = time.perf_counter()
            code = self.execute(request, conn, lock)
            self.log(f"gpusolve serve: exit {code} in {time.perf_counter() - t0:.3f} s: {' '.join(request['argv'])}")
            _frame(conn, lock, b"x", str(code).encode())  # after the log line: the client's exit follows it
        except OSError:  # the client has gone; it solves for itself or no longer needs to
            pass
        finally:
            release()

    def execute(self, request: dict, conn, lock) -> int:
        """Run the request's command with its cwd, environment, umask and standard streams; its exit code."""
        out = _text_stream(request["streams"][0], _Sink(conn, lock, b"1", request["streams"][0]["tty"]))
        err = _text_stream(request["streams"][1], _Sink(conn, lock, b"2", request["streams"][1]["tty"]))
        watcher = _Watcher(conn, self)
        saved = sys.stdout, sys.stderr, os.getcwd(), dict(os.environ), os.umask(request["umask"])
        try:
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(request["env"])
            sys.stdout, sys.stderr = out, err
            watcher.start()
            code = self.command(request["argv"], request["prog"])
            for stream in (out, err):  # as at a process's exit: stdout first
                stream.flush()
        finally:
            watcher.stop()
            sys.stdout, sys.stderr = saved[0], saved[1]
            os.chdir(saved[2])
            os.environ.clear()
            os.environ.update(saved[3])
            os.umask(saved[4])
        return code

    def command(self, argv: list[str], prog: str) -> int:
        """The click command line on argv, in this process: its exit code, as Python's exit would give it."""
        import traceback
        import warnings

        from .cli import console
        from .cli import main as cli
        console.cache_clear()  # rich consoles are made for the streams of the moment
        try:
            with warnings.catch_warnings():  # warnings shown once per process are shown once per request
                self.in_command = True
                try:
                    cli.main(args=argv, prog_name=prog)
                finally:
                    self.in_command = False
            return 0
        except SystemExit as e:
            if e.code is None or isinstance(e.code, int):
                return e.code or 0
            print(e.code, file=sys.stderr)
            return 1
        except _Terminated:
            return -signal.SIGTERM
        except BaseException:  # what a local process would print before exiting 1 (GPUSOLVE_DEBUG=1)
            traceback.print_exc()
            return 1
        finally:
            console.cache_clear()


def release() -> None:
    """Leave memory as a finished process would, once the client has its answer: what cycles hold is
    collected, and CuPy's pools give their blocks back (the next request's device budget, and other
    processes, see the memory free)."""
    import gc
    gc.collect()
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        cupy.get_default_memory_pool().free_all_blocks()
        cupy.get_default_pinned_memory_pool().free_all_blocks()


def load_kernels() -> tuple[str, int]:
    """Load (prebuilt, from CuPy's disk cache, or compiled) the GPU engine's kernels that serve every
    plan shape (kernels.shape_generic_specs). (device name, how many)."""
    from .engines.cupy_engine import CupyEngine
    from .engines.kernels import shape_generic_specs
    engine = CupyEngine()
    specs = shape_generic_specs()
    for spec in specs:
        engine.kernel(spec)
    return engine.device_name, len(specs)


def _frame(conn, lock, kind: bytes, payload: bytes) -> None:
    with lock:
        conn.sendall(_HEAD.pack(kind, len(payload)) + payload)


def _text_stream(spec: dict, sink):
    """A standard stream as Python builds one for the client's fd: same encoding, errors, buffer and
    line buffering, so what it sends and when match the client's own writes."""
    buffer = io.BufferedWriter(sink, spec["buffer_size"]) if spec["buffered"] else sink
    return io.TextIOWrapper(buffer, encoding=spec["encoding"], errors=spec["errors"], newline="\n",
                            line_buffering=spec["line_buffering"], write_through=spec["write_through"])


class _Sink(io.RawIOBase):
    """The raw layer under a served standard stream: each write becomes one frame to the client
    (dropped once the client has gone, as a local process's writes to a closed pipe are lost)."""

    def __init__(self, conn, lock, kind: bytes, tty: bool):
        self.conn, self.lock, self.kind, self.tty, self.gone = conn, lock, kind, tty, False

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return self.tty

    def write(self, data) -> int:
        data = bytes(data)
        if not self.gone:
            try:
                _frame(self.conn, self.lock, self.kind, data)
            except OSError:
                self.gone = True
        return len(data)


class _Watcher:
    """Reads the client's signal bytes while its command runs and raises each signal in the main thread,
    where the command's handlers take it; a client that disconnects counts as Ctrl-C."""

    def __init__(self, conn, server: Server):
        import threading
        self.conn, self.server, self.done = conn, server, False
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self.watch, daemon=True)
        self.main = threading.main_thread().ident

    def start(self) -> None:
        self.thread.start()

    def watch(self) -> None:
        while True:
            try:
                data = self.conn.recv(64)
            except OSError:
                data = b""
            with self.lock:
                if self.done:
                    return
                for byte in data or b"i":
                    signum = signal.SIGTERM if byte == ord("t") else signal.SIGINT
                    self.server.forwarded[signum] += 1
                    signal.pthread_kill(self.main, signum)
            if not data:
                return

    def stop(self) -> None:
        with self.lock:
            self.done = True
        if self.thread.is_alive():
            try:
                self.conn.shutdown(socket.SHUT_RD)  # wakes the blocked recv
            except OSError:
                pass
            self.thread.join()
