"""The `gpusolve serve` process: it warms up, then runs the `solve` commands clients hand it
(gpusolve/serve/client.py, the client half and the wire format).

Commands run one at a time in the main thread: CUDA contexts do not survive fork, and signal
handlers live there. Each connection's request is read and checked (REQUEST) on a thread of its
own, within READ_S, so a client that trickles bytes holds only itself; a request that arrives
while a command runs or waits is declined, and its client solves in its own process rather than
wait behind a long solve.
"""
from __future__ import annotations

import codecs
import contextlib
import gc
import io
import json
import os
import select
import signal
import socket
import stat
import sys
import tempfile
import threading
import time
import traceback
import warnings

from gpusolve.serve.client import FRAME, HANDED, LENGTH, fingerprint, recv_exact, servable

DECLINED = (b"n", b"")  # the frame that tells a client to solve by itself
EXIT_INPUT = 2  # a bad request ends as a command given bad input (cli.EXIT_INPUT)
REQUEST_MAX = 64 << 20  # bytes; a request is a command line and an environment
READ_S = 10.0  # seconds for a whole request to arrive, however its bytes trickle (serve --help says it)


# -- requests --------------------------------------------------------------------------------

def _text(value) -> bool:
    """A string the OS takes as an argument, a path or a variable: no NUL, encodable."""
    if not isinstance(value, str) or "\0" in value:
        return False
    try:
        os.fsencode(value)
    except UnicodeEncodeError:
        return False
    return True


def _known(check):
    """A name that `check` (a codec or error handler lookup) accepts."""
    def valid(value) -> bool:
        try:
            check(value)
        except (LookupError, ValueError, TypeError):
            return False
        return True
    return valid


def _flag(value) -> bool:
    return type(value) is bool


def _integer(low: int, high: int):
    return lambda value: type(value) is int and low <= value <= high


def wrong(schema: dict, value) -> str | None:
    """What is wrong with a JSON object against `schema` (its first failing field), or None when valid."""
    if not isinstance(value, dict):
        return "not a JSON object"
    for name, (valid, expected) in schema.items():
        if name not in value:
            return f"{name} missing"
        if not valid(value[name]):
            return f"{name}: expected {expected}"
    extra = sorted(set(value) - set(schema))
    return f"unknown field {extra[0]}" if extra else None


# Each field of a request: its check and what it expects. The fingerprint is compared whole first:
# a request from another installation or version is declined, not judged by this schema.
STREAM = {"tty": (_flag, "true or false"), "encoding": (_known("".encode), "a text encoding"),
          "errors": (_known(codecs.lookup_error), "an error handler"), "line_buffering": (_flag, "true or false"),
          "write_through": (_flag, "true or false"), "buffered": (_flag, "true or false"),
          "buffer_size": (_integer(1, 1 << 24), "bytes, 1 to 16 MiB")}
REQUEST = {
    "argv": (lambda v: isinstance(v, list) and all(map(_text, v)) and servable(v),
             f"a `{HANDED}` command line of strings, none that must run in the client"),
    "prog": (_text, "a string"),
    "cwd": (lambda v: _text(v) and os.path.isabs(v), "an absolute path"),
    "env": (lambda v: isinstance(v, dict) and all(k and "=" not in k and _text(k) and _text(x) for k, x in v.items()),
            "an object of strings, names without ="),
    "umask": (_integer(0, 0o777), "0 to 0o777"),
    "streams": (lambda v: isinstance(v, list) and len(v) == 2 and not any(wrong(STREAM, s) for s in v),
                "stdout's and stderr's set-up, each with " + ", ".join(STREAM)),
    "fingerprint": (lambda v: isinstance(v, dict), "an object"),
}


class BadRequest(Exception):
    """A request the server cannot read or run: the one line its client is answered with."""


def read_request(conn, deadline: float):
    """The client's request, whole by `deadline` (time.monotonic; TimeoutError after it), decoded.
    ConnectionError when the client leaves before sending it all."""
    head = recv_exact(conn, LENGTH.size, deadline)
    if head is None:
        raise ConnectionError("the client left before its request")
    size = LENGTH.unpack(head)[0]
    if size > REQUEST_MAX:
        raise BadRequest(f"{size:,} bytes, over {REQUEST_MAX >> 20} MiB")
    body = recv_exact(conn, size, deadline)
    if body is None:
        raise ConnectionError("the client left before its request was whole")
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        raise BadRequest("not JSON") from None


# -- server ----------------------------------------------------------------------------------

class ServeError(Exception):
    """The server cannot start: one line for the user (exit 2)."""


class _Terminated(BaseException):
    """A SIGTERM outside the solve's own handler: the command ends, as a local process would die."""


def serve(path: str, device: str, idle_exit: float | None, log, cli, fresh_streams) -> None:
    """Warm up for `device`, then run requests on `path` until SIGTERM, Ctrl-C or `idle_exit` seconds idle.
    `log` takes one line at a time, from any thread. `cli` is the click command a request runs, and
    `fresh_streams()` drops what the command keeps of the streams of the moment (its rich consoles)."""
    Server(path, log, cli, fresh_streams).run(device, idle_exit)


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
    def __init__(self, path: str, log, cli, fresh_streams):
        self.path, self.log = os.path.abspath(path), log
        self.cli, self.fresh_streams = cli, fresh_streams
        self.fingerprint = fingerprint(os.environ)
        self.in_command = False
        self.forwarded = {signal.SIGINT: 0, signal.SIGTERM: 0}  # by watchers, not yet seen on the wakeup fd
        self.inode = None
        # The one request admitted, waiting for the main thread (`admitted`) or running there (`taken`);
        # once the server stops (not `open`) none is.
        self.lock = threading.Lock()
        self.open, self.taken, self.admitted = True, False, None

    def run(self, device: str, idle_exit: float | None) -> None:
        if alive(self.path):
            raise ServeError(f"gpusolve serve: a server is already running on {self.path}")
        t0 = time.perf_counter()
        warm = self.warm(device)
        listener = self.listen()
        self.admitted_r, self.admitted_w = socket.socketpair()  # a byte for each request admitted
        acceptor = threading.Thread(target=self.accept, args=(listener,), name="gpusolve-serve-accept", daemon=True)
        wake_r, wake_w = socket.socketpair()
        wake_r.setblocking(False)
        wake_w.setblocking(False)
        old_wakeup = signal.set_wakeup_fd(wake_w.fileno())
        old = {s: signal.signal(s, self.on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            acceptor.start()
            self.log(f"gpusolve serve: warm in {time.perf_counter() - t0:.2f} s ({warm}); listening on {self.path}")
            why = self.loop(wake_r, idle_exit)
        finally:
            for s, h in old.items():
                signal.signal(s, h)
            signal.set_wakeup_fd(old_wakeup)
            try:
                if os.stat(self.path).st_ino == self.inode:  # still ours
                    os.unlink(self.path)
            except OSError:
                pass
            self.close(listener, acceptor)
            for s in (wake_r, wake_w, self.admitted_r, self.admitted_w):
                s.close()
        self.log(f"gpusolve serve: stopped ({why})")

    def close(self, listener, acceptor) -> None:
        """Stop accepting; a request admitted but not run is dropped (its client solves by itself)."""
        with self.lock:
            self.open, admitted, self.admitted = False, self.admitted, None
        if admitted:
            admitted[0].close()
        try:
            listener.shutdown(socket.SHUT_RDWR)  # wakes the acceptor's accept
        except OSError:
            pass
        acceptor.join()
        listener.close()

    def listen(self) -> socket.socket:
        """The listening socket, mode 0600, in a folder made 0700 when missing; a stale socket file replaced."""
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
        """Import the solve pipeline by solving a tiny problem through the command itself, and load the
        compiled search, which that solve (exact BE) leaves out: without the core built ahead of time, numba's
        import and on-disk cache take most of a second, which a network the compiled search proves first
        would pay in its first request. With
        a GPU, also solve on the device, and load every shape-generic and assignment kernel. Says what was
        warmed."""
        from gpusolve.cuda.runtime import gpu_unavailable_reason
        from gpusolve.generate import generate
        from gpusolve.parsers import write
        from gpusolve.search.dfbb import DepthFirst
        reason = None if device == "cpu" else gpu_unavailable_reason()
        if device == "gpu" and reason:
            raise ServeError(f"gpusolve serve --device gpu: {reason}")
        problem = generate("random", 10, 4, 0.5, 0.2, 1)
        DepthFirst(problem).run(0)
        with tempfile.TemporaryDirectory(prefix="gpusolve-warm-") as tmp:
            path = os.path.join(tmp, "warm.wcsp")
            write(problem, path)
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

    def loop(self, wake_r, idle_exit: float | None) -> str:
        """Admitted requests one at a time until a signal not forwarded by a client, or the idle time; says which."""
        last = time.monotonic()
        while True:
            timeout = None if idle_exit is None else max(0.0, last + idle_exit - time.monotonic())
            ready = select.select([self.admitted_r, wake_r], [], [], timeout)[0]
            if self.signalled(wake_r):
                return "signal"
            if not ready:
                return f"idle for {idle_exit:g} s"
            if self.admitted_r in ready:
                self.admitted_r.recv(1)
                with self.lock:
                    (conn, request), self.admitted = self.admitted, None
                with conn:
                    self.handle(conn, request)
                last = time.monotonic()

    def accept(self, listener) -> None:
        """Take connections until the listener is shut, each read and answered on a thread of its own."""
        while True:
            try:
                conn = listener.accept()[0]
            except OSError:
                if not self.open:
                    return
                time.sleep(0.1)  # out of file descriptors or memory for now: let connections end
                continue
            threading.Thread(target=self.admit, args=(conn,), name="gpusolve-serve-read", daemon=True).start()

    def admit(self, conn) -> None:
        """Read one request within READ_S and answer it: with an error line when it is malformed; declined
        (its client solves by itself) when it comes from another installation or version, names a folder
        not seen here, does not arrive in time, or finds a command running or waiting; else it waits for
        the main thread, which answers it."""
        try:
            request = read_request(conn, time.monotonic() + READ_S)
            if isinstance(request, dict) and request.get("fingerprint") != self.fingerprint:
                _answer(conn, DECLINED)
                return
            problem = wrong(REQUEST, request)
            if problem:
                raise BadRequest(problem)
            if not (os.path.isdir(request["cwd"]) and self.offer(conn, request)):
                _answer(conn, DECLINED)
        except TimeoutError:
            _answer(conn, DECLINED)
        except BadRequest as e:
            line = f"gpusolve serve: bad request: {e}"
            self.log(line)
            _answer(conn, (b"2", line.encode() + b"\n"), (b"x", str(EXIT_INPUT).encode()))
        except OSError:  # the client has gone
            conn.close()

    def offer(self, conn, request) -> bool:
        """Hand a request to the main thread, unless one runs or waits there, or the server stops."""
        with self.lock:
            if self.taken or not self.open:
                return False
            self.taken, self.admitted = True, (conn, request)
        self.admitted_w.send(b".")
        return True

    def free(self) -> None:
        with self.lock:
            self.taken = False

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

    def handle(self, conn, request: dict) -> None:
        """Run an admitted request. The server is free again before the client has its exit code, so
        what the client runs next is served; memory is released after."""
        lock = threading.Lock()  # frames from the command's thread and rich's refresh thread
        conn.settimeout(None)
        try:
            t0 = time.perf_counter()
            code = self.execute(request, conn, lock)
            self.log(f"gpusolve serve: exit {code} in {time.perf_counter() - t0:.3f} s: {' '.join(request['argv'])}")
            self.free()
            _frame(conn, lock, b"x", str(code).encode())  # after the log line: the client's exit follows it
        except OSError:  # the client has gone; it solves for itself or no longer needs to
            pass
        finally:
            self.free()
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
        self.fresh_streams()
        try:
            with warnings.catch_warnings():  # warnings shown once per process are shown once per request
                self.in_command = True
                try:
                    self.cli.main(args=argv, prog_name=prog)
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
            self.fresh_streams()


def release() -> None:
    """Leave memory as a finished process would, once the client has its answer: what cycles hold is
    collected, and CuPy's pools give their blocks back (the next request's device budget, and other
    processes, see the memory free)."""
    gc.collect()
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        cupy.get_default_memory_pool().free_all_blocks()
        cupy.get_default_pinned_memory_pool().free_all_blocks()


def load_kernels() -> tuple[str, int]:
    """Load (prebuilt, from CuPy's disk cache, or compiled) the GPU engine's kernels that serve every
    plan shape (kernels.shape_generic_specs). (device name, how many)."""
    from gpusolve.cuda.runtime import device_info, import_cupy
    from gpusolve.engines.kernels import load, shape_generic_specs
    specs = shape_generic_specs()
    for spec in specs:
        load(spec)
    return device_info(import_cupy().cuda.runtime.getDevice())[0], len(specs)


def _frame(conn, lock, kind: bytes, payload: bytes) -> None:
    with lock:
        conn.sendall(FRAME.pack(kind, len(payload)) + payload)


def _answer(conn, *frames: tuple[bytes, bytes]) -> None:
    """Send these frames and close: a whole answer to a client that may have gone."""
    with conn:
        try:
            conn.sendall(b"".join(FRAME.pack(kind, len(payload)) + payload for kind, payload in frames))
        except OSError:
            pass


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
