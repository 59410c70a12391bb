"""The `gpusolve serve` process: it warms up, then runs the `solve` commands clients hand it
(gpusolve/serve.py, the client half and the wire format).

Requests run one at a time in the main thread: CUDA contexts do not survive fork, and signal
handlers live there.
"""
from __future__ import annotations

import io
import json
import os
import signal
import socket
import sys

from .serve import FRAME, LENGTH, fingerprint, recv_exact


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
            head = recv_exact(conn, LENGTH.size)
            if head is None or LENGTH.unpack(head)[0] > 64 << 20:
                return
            body = recv_exact(conn, LENGTH.unpack(head)[0])
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
        conn.sendall(FRAME.pack(kind, len(payload)) + payload)


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
