"""`gpusolve serve`: a solve handed to the warm server prints what the same solve prints by itself.

Every comparison runs the same command line twice in fresh processes, once served and once with
GPUSOLVE_NO_SERVE=1, and compares stdout, stderr (also both through one pipe, to check their
order) and the exit code byte for byte once timings are masked (they differ between any two runs).
The server's log line per request shows the served run was served, not solved by the client.
Where a test needs a solve to be under way, its instance is a FIFO the test writes into, or it
waits for the bounds the solve shows on a terminal: never for a time that assumes a speed.
"""
import errno
import json
import os
import pty
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpusolve.serve.client import fingerprint
from gpusolve.serve.server import REQUEST, REQUEST_MAX, STREAM, read_request

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = ROOT / "instances" / "random-n14-d10-s1.wcsp"


def gpusolve(*args, env, cwd=None, merge=False, **kw):
    return subprocess.run([sys.executable, "-m", "gpusolve", *map(str, args)], env=env, cwd=cwd, capture_output=not merge,
                          stdout=subprocess.PIPE if merge else None, stderr=subprocess.STDOUT if merge else None,
                          timeout=60, **kw)


def masked(data: bytes) -> bytes:
    """Output with its timings masked, every other number (bounds, marginals) kept: in a table the time
    row, when each bound came and the search's rate; in a JSON line time_s, phases, the trace's times
    and the search's time and rate."""
    lines = []
    for line in data.splitlines(keepends=True):
        if line.startswith(b"{"):
            line = json.dumps(masked_record(json.loads(line))).encode() + b"\n"
        elif re.match(rb"time +\d", line):
            line = re.sub(rb"\d+\.\d+", b"#", line)
        lines.append(re.sub(rb"[\d,]+ per s", b"# per s", re.sub(rb"\d+\.\d+ s \[", b"# s [", line)))
    return b"".join(lines)


def masked_record(r: dict) -> dict:
    r = dict(r)
    if r.get("time_s") is not None:
        r["time_s"] = "#"
    if r.get("phases"):
        r["phases"] = dict.fromkeys(r["phases"], "#")
    if r.get("trace"):
        r["trace"] = [["#", *entry[1:]] for entry in r["trace"]]
    if r.get("search"):
        r["search"] = dict(r["search"], time_s="#", nodes_per_s="#")
    return r


def start_server(path: Path, env, log: Path, *extra, device="cpu"):
    with open(log, "ab") as f:
        proc = subprocess.Popen([sys.executable, "-m", "gpusolve", "serve", "--device", device, "--socket", str(path),
                                 *extra], env=env, stdout=f, stderr=f)
    deadline = time.monotonic() + 120  # a GPU server may compile its kernels first
    while b"listening" not in log.read_bytes():
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)
    return proc


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A CPU server on a socket of its own; yields (env of a client that uses it, its log file)."""
    folder = tmp_path_factory.mktemp("serve")
    path, log = folder / "s.sock", folder / "serve.log"
    env = {k: v for k, v in os.environ.items() if k != "GPUSOLVE_NO_SERVE"}
    env.update(GPUSOLVE_SERVE_SOCKET=str(path), PYTHONPATH=str(ROOT))
    proc = start_server(path, env, log)
    yield env, log
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0
    assert not path.exists()


def served_and_local(server, args, cwd=None, merge=False):
    env, log = server
    before = log.read_text().count("gpusolve serve: exit")
    served = gpusolve(*args, env=env, cwd=cwd, merge=merge)
    assert log.read_text().count("gpusolve serve: exit") == before + 1, "not served"
    local = gpusolve(*args, env=dict(env, GPUSOLVE_NO_SERVE="1"), cwd=cwd, merge=merge)
    assert log.read_text().count("gpusolve serve: exit") == before + 1, "served despite GPUSOLVE_NO_SERVE"
    return served, local


def same(served, local):
    assert served.returncode == local.returncode
    assert masked(served.stdout) == masked(local.stdout)
    assert masked(served.stderr or b"") == masked(local.stderr or b"")


@pytest.fixture(scope="module")
def generated(tmp_path_factory, server):
    folder = tmp_path_factory.mktemp("instances")
    env = dict(server[0], GPUSOLVE_NO_SERVE="1")
    for name, topology in (("r.wcsp", "random"), ("g.uai", "grid")):
        assert gpusolve("generate", topology, "-n", 9, "-d", 3, "--p2", 0.1, "--seed", 2, "-o", folder / name,
                        env=env).returncode == 0
    (folder / "bad.wcsp").write_text("bad 2 2 1 10\n2 2\n1 0 0 x\n")
    return folder


@pytest.mark.parametrize("args", [
    [BUNDLED],
    [BUNDLED, "--json"],
    [BUNDLED, "--z", "3", "--no-search", "--device", "cpu"],
    [BUNDLED, "--time-limit", "0"],
    ["{g}/r.wcsp", "--json", "--tables", "sparse"],
    ["{g}/g.uai", "--task", "PR"],
    ["{g}/g.uai", "--task", "MAR", "--json"],
    ["{g}/bad.wcsp"],
    ["{g}/bad.wcsp", "--json"],
    ["{g}/missing.wcsp", "--json"],
    [BUNDLED, "--z", "0"],
    [BUNDLED, "--uai-output", "x.uai"],
], ids=lambda a: " ".join(map(str, a)).replace(str(ROOT) + "/", ""))
def test_served_output_equals_local(server, generated, args):
    args = ["solve"] + [str(a).replace("{g}", str(generated)) for a in args]
    same(*served_and_local(server, args))
    if "--json" in args:  # stdout and stderr both written, into one pipe: in the same order
        same(*served_and_local(server, args, merge=True))


def test_shared_instances_served_as_solved_locally(server, shared_instances):
    for name, extra in (("4queens.wcsp", []), ("example.wcsp", ["--json"]), ("network.uai", ["--json"])):
        same(*served_and_local(server, ["solve", shared_instances / name, *extra]))


WARMED = """
from gpusolve.cli.common import console
from gpusolve.cli.group import main
from gpusolve.serve.server import Server
Server("unused.sock", print, main, console.cache_clear).warm("cpu")
from gpusolve.search.dfbb_build import entry_points
print("compiled search loaded:", entry_points.cache_info().currsize)
"""


def test_the_warm_up_loads_the_compiled_search():
    """A network the compiled search proves first (CELAR6-SUB0) paid its load (numba's import and cache,
    most of a second, when it was not built ahead of time) in its first served solve: the warm-up loads it."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-c", WARMED], capture_output=True, text=True, env=env, cwd=ROOT,
                       timeout=600)  # a guard against a hang (a cold numba cache compiles), not a speed
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[-1] == "compiled search loaded: 1", p.stdout


def test_relative_paths_resolve_in_the_clients_folder(server, generated, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    env, log = server
    args = ["solve", os.path.relpath(BUNDLED, work), "--solution", "out.sol", "--json"]
    before = log.read_text().count("gpusolve serve: exit")
    served = gpusolve(*args, env=env, cwd=work)
    assert log.read_text().count("gpusolve serve: exit") == before + 1
    files = [(work / "out.sol").read_bytes()]
    (work / "out.sol").unlink()
    local = gpusolve(*args, env=dict(env, GPUSOLVE_NO_SERVE="1"), cwd=work)
    files.append((work / "out.sol").read_bytes())
    same(served, local)
    assert served.returncode == 0 and files[0] == files[1] and files[0].strip()
    assert not (ROOT / "out.sol").exists()


def hard_instance(env, folder: Path) -> Path:
    """An instance no schedule closes in any reasonable time (the solve runs until stopped)."""
    big = folder / "big.wcsp"
    assert gpusolve("generate", "random", "-n", 60, "-d", 5, "--p1", 0.15, "--p2", 0.3, "--seed", 4, "-o", big,
                    env=dict(env, GPUSOLVE_NO_SERVE="1")).returncode == 0
    return big


def interrupt_once_bounded(args, env) -> tuple[int, dict[str, str], int]:
    """Run a solve whose stderr is a terminal, where it shows its bounds as they come; press Ctrl-C once it
    shows one (it is solving by then, not starting up). Its exit code, its result table (row: value)
    and the lower bound it showed."""
    master, slave = pty.openpty()
    p = subprocess.Popen([sys.executable, "-m", "gpusolve", *map(str, args)], env=env, stdout=subprocess.PIPE,
                         stderr=slave)
    os.close(slave)
    shown, bounded = bytearray(), threading.Event()

    def read():  # until the solve's end (EIO); also keeps the terminal from filling up
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                return
            if not chunk:
                return
            shown.extend(chunk)
            if re.search(rb"bounds \[\d", shown):
                bounded.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        while not bounded.wait(0.05):
            assert p.poll() is None, "the solve ended before it showed a bound"
        p.send_signal(signal.SIGINT)
        out = p.communicate(timeout=60)[0]
        reader.join(timeout=60)
    finally:
        os.close(master)
    rows = dict(re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in out.decode().splitlines() if line.strip())
    return p.returncode, rows, int(re.search(rb"bounds \[(\d+)", shown)[1])


def test_ctrl_c_is_forwarded_and_the_partial_result_printed(server, tmp_path):
    """The same Ctrl-C on a served and a local solve: both print the result held and exit 130. Where the
    signal lands differs between runs, so only what does not depend on it is compared."""
    env, log = server
    args = ["solve", hard_instance(env, tmp_path), "--z", "3"]
    before = log.read_text().count("gpusolve serve: exit 130")
    served = interrupt_once_bounded(args, env)
    assert log.read_text().count("gpusolve serve: exit 130") == before + 1
    local = interrupt_once_bounded(args, dict(env, GPUSOLVE_NO_SERVE="1"))
    for code, rows, shown_lower in (served, local):
        assert code == 130 and rows["status"] == "bounded" and "interrupted" in rows["engine"]
        assert int(rows["lower bound"]) >= shown_lower
    for row in ("file", "task", "status"):
        assert served[1][row] == local[1][row]
    # the width alone: the row names it "of the elimination order" once an MBE has completed (a z to tell apart)
    assert served[1]["induced width"].split()[0] == local[1]["induced width"].split()[0]


def test_opt_outs_and_other_environments_run_locally(server):
    env, log = server
    before = log.read_text().count("gpusolve serve: exit")
    assert gpusolve("solve", BUNDLED, "--no-serve", env=env).returncode == 0
    threads = str(int(env.get("OMP_NUM_THREADS", "1")) + 1)  # read once per process: not as the server's
    assert gpusolve("solve", BUNDLED, env=dict(env, OMP_NUM_THREADS=threads)).returncode == 0
    assert gpusolve("info", BUNDLED, env=env).returncode == 0
    assert log.read_text().count("gpusolve serve: exit") == before


def test_second_server_refuses(server):
    env, _ = server
    p = gpusolve("serve", "--device", "cpu", env=env)
    assert p.returncode == 2
    assert p.stderr.decode().strip() == f"gpusolve serve: a server is already running on {env['GPUSOLVE_SERVE_SOCKET']}"


def test_stale_socket_falls_back_then_is_replaced_and_removed_on_sigterm(tmp_path):
    path = tmp_path / "stale.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(path))
    dead.close()  # the file stays, nobody listens: a server that was killed
    env = dict(os.environ, GPUSOLVE_SERVE_SOCKET=str(path), PYTHONPATH=str(ROOT))
    env.pop("GPUSOLVE_NO_SERVE", None)
    fallback = gpusolve("solve", BUNDLED, "--json", env=env)
    same(fallback, gpusolve("solve", BUNDLED, "--json", env=dict(env, GPUSOLVE_NO_SERVE="1")))
    log = tmp_path / "serve.log"
    proc = start_server(path, env, log)
    assert path.stat().st_mode & 0o777 == 0o600
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0
    assert not path.exists() and "stopped (signal)" in log.read_text()


def test_idle_exit(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    path, log = tmp_path / "d" / "s.sock", tmp_path / "serve.log"
    proc = start_server(path, env, log, "--idle-exit", "0.2")
    assert proc.wait(timeout=20) == 0
    assert not path.exists() and (path.parent.stat().st_mode & 0o777) == 0o700


def same_answer(gpu: dict, cpu: dict) -> None:
    """A GPU result against the NumPy engine's: the same status, integer costs equal, probabilities
    (log10 bounds, marginals) equal to rounding."""
    assert gpu["status"] == cpu["status"]
    for bound in ("lower_bound", "upper_bound"):
        if isinstance(cpu[bound], float):
            assert gpu[bound] == pytest.approx(cpu[bound], rel=1e-9, abs=1e-9)
        else:
            assert gpu[bound] == cpu[bound]
    assert (gpu["marginals"] is None) == (cpu["marginals"] is None)
    if cpu["marginals"] is not None:
        for g, c in zip(gpu["marginals"], cpu["marginals"], strict=True):
            np.testing.assert_allclose(g, c, rtol=1e-9, atol=1e-12)


@pytest.mark.gpu
def test_gpu_solves_served_by_a_gpu_server_print_what_local_ones_do(cupy, tmp_path):
    """The server warmed the GPU: only the local run's note of its kernel compilation differs. The
    served GPU answers are checked against the CPU engine's, the reference."""
    env = dict(os.environ, GPUSOLVE_SERVE_SOCKET=str(tmp_path / "g.sock"), PYTHONPATH=str(ROOT))
    env.pop("GPUSOLVE_NO_SERVE", None)
    local_env = dict(env, GPUSOLVE_NO_SERVE="1")
    log = tmp_path / "serve.log"
    proc = start_server(tmp_path / "g.sock", env, log, device="gpu")
    try:
        assert "kernels loaded" in log.read_text()
        uai = tmp_path / "g.uai"
        gpusolve("generate", "grid", "-n", 16, "-d", 3, "--seed", 1, "-o", uai, env=local_env)
        compiled = re.compile(rb"; kernels compiled or loaded in \d+\.\d+ s \(within eliminate\)")
        cases = ([BUNDLED, "--json"], [BUNDLED, "--z", "3", "--no-search"], [uai, "--task", "PR", "--json"],
                 [uai, "--task", "MAR"])
        for args in cases:
            gpu = ["solve", *args, "--device", "gpu", "--host-max", "0"]
            served = gpusolve(*gpu, env=env)
            local = gpusolve(*gpu, env=local_env)
            assert served.returncode == local.returncode == 0, local.stderr
            for a, b in ((served.stdout, local.stdout), (served.stderr, local.stderr)):
                assert compiled.sub(b"", masked(a)) == compiled.sub(b"", masked(b))
            plain = [a for a in args if a != "--json"]
            answer = gpusolve("solve", *plain, "--json", "--device", "gpu", "--host-max", "0", env=env)
            reference = gpusolve("solve", *plain, "--json", "--device", "cpu", env=local_env)
            assert answer.returncode == reference.returncode == 0, reference.stderr
            same_answer(json.loads(answer.stdout), json.loads(reference.stdout))
        assert log.read_text().count("gpusolve serve: exit 0") == 2 * len(cases)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


def open_writer(fifo: Path, reader: subprocess.Popen):
    """The FIFO's write end, once some process opened it to read (`reader` must still be running then)."""
    while True:
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as e:
            assert e.errno == errno.ENXIO and reader.poll() is None, e  # ENXIO: nobody reads it yet
            time.sleep(0.01)
            continue
        os.set_blocking(fd, True)
        return os.fdopen(fd, "wb")


def test_a_server_killed_mid_request_leaves_the_client_to_solve_alone(tmp_path):
    """The served solve reads a FIFO: it is mid-request for as long as the test feeds it nothing."""
    env = dict(os.environ, GPUSOLVE_SERVE_SOCKET=str(tmp_path / "k.sock"), PYTHONPATH=str(ROOT))
    env.pop("GPUSOLVE_NO_SERVE", None)
    fifo = tmp_path / "fed.wcsp"
    os.mkfifo(fifo)
    log = tmp_path / "serve.log"
    proc = start_server(tmp_path / "k.sock", env, log)
    client = subprocess.Popen([sys.executable, "-m", "gpusolve", "solve", str(fifo), "--json"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    open_writer(fifo, client).close()  # the server's command opened it: the request is under way
    proc.kill()
    proc.wait()
    with open_writer(fifo, client) as w:  # the client, solving by itself, reads it now
        w.write(BUNDLED.read_bytes())
    out, err = client.communicate(timeout=60)
    assert client.returncode == 0, err
    assert "exit" not in log.read_text().split("listening")[-1]
    (line,) = out.decode().splitlines()  # the local solve's one object, nothing of the dead server's
    alone = json.loads(gpusolve("solve", BUNDLED, "--json", env=dict(env, GPUSOLVE_NO_SERVE="1")).stdout)
    assert masked_record(json.loads(line)) == masked_record(alone) | {"file": str(fifo)}


def test_a_solve_arriving_while_another_runs_runs_locally_at_once(server, tmp_path):
    """The first solve is served and waits on its FIFO; the second must not wait behind it."""
    env, log = server
    fifo = tmp_path / "fed.wcsp"
    os.mkfifo(fifo)
    before = log.read_text().count("gpusolve serve: exit")
    first = subprocess.Popen([sys.executable, "-m", "gpusolve", "solve", str(fifo), "--json"], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    w = open_writer(fifo, first)  # the server's command reads it: the server is busy until it is fed
    try:
        second = gpusolve("solve", BUNDLED, "--json", env=env)
        assert log.read_text().count("gpusolve serve: exit") == before, "the second solve was served"
        same(second, gpusolve("solve", BUNDLED, "--json", env=dict(env, GPUSOLVE_NO_SERVE="1")))
        w.write(BUNDLED.read_bytes())
    finally:
        w.close()
    out, err = first.communicate(timeout=60)
    assert first.returncode == 0 and log.read_text().count("gpusolve serve: exit 0") >= 1, err
    assert log.read_text().count("gpusolve serve: exit") == before + 1
    assert masked_record(json.loads(out)) == masked_record(json.loads(second.stdout)) | {"file": str(fifo)}


def test_a_client_trickling_its_request_holds_up_no_one(server):
    env, _ = server
    trickler = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    trickler.connect(env["GPUSOLVE_SERVE_SOCKET"])
    trickler.sendall(struct.pack("!I", 1 << 20))
    stop = threading.Event()

    def trickle():  # a byte at a time, never the whole request
        while not stop.wait(0.2):
            try:
                trickler.sendall(b" ")
            except OSError:
                return

    thread = threading.Thread(target=trickle)
    thread.start()
    try:
        same(*served_and_local(server, ["solve", BUNDLED, "--json"]))
    finally:
        stop.set()
        thread.join()
        trickler.close()


def test_a_request_must_arrive_whole_by_its_deadline():
    """However its bytes trickle: one a millisecond would keep any per-read timeout from firing."""
    ours, theirs = socket.socketpair()
    theirs.sendall(struct.pack("!I", 1 << 20))

    def trickle():
        try:
            while True:
                theirs.sendall(b" ")
                time.sleep(0.001)
        except OSError:
            return

    thread = threading.Thread(target=trickle)
    thread.start()
    try:
        with pytest.raises(TimeoutError):
            read_request(ours, time.monotonic() + 0.2)
    finally:
        theirs.close()
        thread.join()
        ours.close()


STREAM_OK = {"tty": False, "encoding": "utf-8", "errors": "strict", "line_buffering": False, "write_through": False,
             "buffered": True, "buffer_size": 8192}
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
                    max_leaves=12)


def good_request(env) -> dict:
    """A request as a client of the module's server builds one (its solve fails at once: no such file)."""
    return {"argv": ["solve", "no-such-file.wcsp"], "prog": "gpusolve", "cwd": str(ROOT), "env": env, "umask": 0o22,
            "streams": [STREAM_OK, STREAM_OK], "fingerprint": fingerprint(env)}


def exchange(path: str, payload: bytes) -> list[tuple[bytes, bytes]]:
    """Send raw bytes to the server; the frames it answers with until it closes."""
    from gpusolve.serve.client import _recv_frame
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(60)
        conn.connect(path)
        conn.sendall(payload)
        frames = []
        while (frame := _recv_frame(conn)) is not None:
            frames.append(frame)
        return frames


@st.composite
def malformed(draw, env):
    """Bytes a broken or hostile client might send: a length over the limit, noise, JSON of any shape, or
    the good request with one field (of the request or of a stream) missing or any JSON value."""
    kind = draw(st.sampled_from(["length", "noise", "json", "field", "stream field"]))
    if kind == "length":
        return struct.pack("!I", draw(st.integers(REQUEST_MAX + 1, (1 << 32) - 1)))
    if kind == "noise":
        body = draw(st.binary(max_size=64))
    elif kind == "json":
        body = json.dumps(draw(JSON)).encode()
    else:
        request = good_request(env)
        if kind == "field":
            target, fields = request, REQUEST
        else:
            request["streams"] = [dict(STREAM_OK), dict(STREAM_OK)]
            target, fields = request["streams"][draw(st.integers(0, 1))], STREAM
        name = draw(st.sampled_from(sorted(fields)))
        if draw(st.booleans()):
            del target[name]
        else:
            target[name] = draw(JSON)
        body = json.dumps(request).encode()
    return struct.pack("!I", len(body)) + body


def test_malformed_requests_are_answered_and_the_server_stays_up(server):
    env, log = server
    path = env["GPUSOLVE_SERVE_SOCKET"]
    good = json.dumps(good_request(env)).encode()
    answer = exchange(path, struct.pack("!I", len(good)) + good)
    assert answer[-1] == (b"x", b"2") and b"file not found" in b"".join(p for k, p in answer if k == b"2")

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(payload=malformed(env))
    def answered(payload):
        frames = exchange(path, payload)
        assert frames and frames[-1][0] in (b"x", b"n")
        if frames[-1][0] == b"x" and b"bad request" in b"".join(p for k, p in frames if k == b"2"):
            assert frames == [(b"2", frames[0][1]), (b"x", b"2")] and frames[0][1].count(b"\n") == 1

    answered()
    assert "Traceback" not in log.read_text()
    same(*served_and_local(server, ["solve", BUNDLED, "--json"]))


@pytest.mark.parametrize("cuda", [False, True])
def test_leave_flushes_and_skips_finalization_only_after_cuda(cuda):
    """A process that started CUDA leaves with os._exit once its output is flushed: same code and
    output, no interpreter finalization (atexit handlers); others exit as usual."""
    code = ("import atexit, sys; from gpusolve.cuda import runtime as engines; from gpusolve.cli import entry\n"
            + ("engines._warming.append(None)\n" if cuda else "")
            + "atexit.register(lambda: print('finalized', file=sys.stderr))\n"
              "print('out', end=''); print('err', end='', file=sys.stderr); entry.leave(3)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 3 and p.stdout == "out"
    assert p.stderr == ("err" if cuda else "errfinalized\n")


def test_leave_after_cuda_with_the_reader_gone():
    """Output to a pipe nobody reads any more: leave still exits with the command's code, no traceback."""
    code = ("import os, sys; from gpusolve.cuda import runtime as engines; from gpusolve.cli import entry\n"
            "engines._warming.append(None)\n"
            "r, w = os.pipe(); os.close(r); sys.stdout = os.fdopen(w, 'w')\n"
            "print('lost'); entry.leave(0)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0 and p.stderr == ""
