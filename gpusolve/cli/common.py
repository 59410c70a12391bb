"""What the commands share: exit codes, rich's consoles, size and time options, the options of
`solve` and `batch`, reading and solving one file, the live progress display and Ctrl-C.

Errors the user can fix print one line and exit 2 (bad input or usage), 3
(memory budget) or 4 (time limit with no bound); never a traceback (`solve
--help` lists every exit code).
"""
from __future__ import annotations

import functools
import os
import re
import signal
import sys
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING

import click

from gpusolve.cuda.runtime import DeviceError
from gpusolve.engines.select import DEVICES
from gpusolve.host import BudgetError, fmt_bytes
from gpusolve.order.graph import OrderError
from gpusolve.plan.buckets import TABLES
from gpusolve.report import dumps

if TYPE_CHECKING:
    from gpusolve.schedule.solve import Options, Result

# NumPy, rich, the readers and the solver load inside the commands that use them:
# `--help` and `--version` answer without them, and a small solve pays only what it runs.
EXIT_INPUT, EXIT_MEMORY, EXIT_TIME = 2, 3, 4
EXIT_INTERRUPT = 130  # 128 + SIGINT, as shells report it (SIGTERM: 0, a stop as at a time limit)
EXIT_PIPE = 141  # 128 + SIGPIPE: the reader of the output has gone (`gpusolve solve ... | head -1`)


@functools.cache
def console(stderr: bool):
    """rich's console for stdout or stderr, made on first use. Piped, lines are not wrapped at 80
    columns nor padded with the blanks rich fills tables with; a reader gone ends the command (141)."""
    from rich.console import Console
    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        made = Console(stderr=stderr, highlight=False)
    else:
        made = Console(file=_Unpadded(stderr), highlight=False, soft_wrap=True, width=1000)
    made.on_broken_pipe = reader_gone  # rich's own exits 1
    return made


class _Unpadded:
    """The current stdout (or stderr) for rich when piped: each line written without trailing blanks."""

    def __init__(self, stderr: bool):
        self.stderr, self.pending = stderr, ""

    def write(self, text: str) -> int:
        *lines, self.pending = (self.pending + text).split("\n")
        stream = sys.stderr if self.stderr else sys.stdout
        for line in lines:
            stream.write(line.rstrip() + "\n")
        return len(text)

    def flush(self) -> None:
        (sys.stderr if self.stderr else sys.stdout).flush()

    def isatty(self) -> bool:
        return False


def err():
    return console(True)


def out():
    return console(False)


_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kmgt]?)(i?b)?\s*", text.lower())
    if not m:
        raise click.BadParameter(f"{text!r} is not a size (examples: 8G, 512M, 1000000)")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


class SizeParam(click.ParamType):
    name = "SIZE"

    def convert(self, value, param, ctx):
        return value if isinstance(value, int) else parse_size(value)


class Seconds(click.ParamType):
    """A time limit: a non-negative number of seconds (nan is not "no limit": leave the option out)."""
    name = "SECONDS"

    def convert(self, value, param, ctx):
        try:
            seconds = float(value)
        except ValueError:
            self.fail(f"{value!r} is not a number of seconds")
        if not seconds >= 0:
            self.fail(f"{value!r} is not a non-negative number of seconds")
        return seconds


# A solving process holds about BASELINE_MIB before its first table (Python, NumPy, rich, gpusolve:
# the peak RSS of a CPU solve of the bundled instance); a budget below MEM_FLOOR cannot be kept.
BASELINE_MIB, MEM_FLOOR = 48, 64 << 20


def above_floor(ctx, param, value: int | None) -> int | None:
    """--mem-limit below MEM_FLOOR is refused (exit 2) rather than promised and exceeded."""
    if value is not None and value < MEM_FLOOR:
        raise click.BadParameter(f"{fmt_bytes(value)} is below the floor of {fmt_bytes(MEM_FLOOR)}: the process "
                                 f"alone takes about {BASELINE_MIB} MiB before any table")
    return value


def dask_options(work: str, workers_note: str = "", scheduler_note: str = ""):
    """--workers and --scheduler for a command that spreads `work` over Dask workers (solve, batch, csg)."""
    def add(f):
        f = click.option("--scheduler", default=None,
                         help=f"{work} on a running Dask cluster (tcp://host:8786){scheduler_note}.")(f)
        return click.option("--workers", type=click.IntRange(min=1), default=None,
                            help=f"{work} on an embedded LocalCluster of this many Dask worker processes"
                                 f"{workers_note}.")(f)
    return add


def solve_options(f):
    """Options shared by `solve` and `batch`."""
    for opt in reversed([
        click.option("--z", type=click.IntRange(min=1), default=None,
                     help="Mini-bucket bound: at most z variables per mini-bucket (eliminated one included)."),
        click.option("--order", default="minfill", show_default=True,
                     help="Elimination order: minfill, mindegree, or a file of variable indices."),
        click.option("--device", type=click.Choice(DEVICES), default="auto", show_default=True),
        click.option("--tables", type=click.Choice(TABLES), default="auto", show_default=True,
                     help="Per mini-bucket: dense tables, or sparse ones holding only feasible rows; "
                          "auto picks from the predicted feasible share."),
        click.option("--time-limit", type=Seconds(), default=None, help="Seconds."),
        click.option("--mem-limit", type=SizeParam(), default=None, callback=above_floor,
                     help=f"Memory budget (e.g. 8G), at least {MEM_FLOOR >> 20}M: the process alone takes "
                          f"about {BASELINE_MIB} MiB (Python, NumPy, gpusolve; CUDA adds its own); "
                          "default: available RAM."),
        click.option("--gpu-mem-limit", type=SizeParam(), default=None,
                     help="Device memory the GPU engine may hold before it streams tables through "
                          "host memory (e.g. 2G); default: free device memory."),
        click.option("--host-max", type=click.IntRange(min=0), default=None,
                     help="With --device gpu, a plan with fewer joint entries in all runs on the host, "
                          "more on the device; 0: always the device. Default: where it is predicted "
                          "to finish first, counting CUDA's start in a fresh process."),
        click.option("--threads", type=click.IntRange(min=1), default=None,
                     help="CPU engine threads for the dense buckets (default: one per core)."),
        click.option("--evidence", type=str, default=None, help="UAI evidence file (default: FILE.evid if present)."),
        click.option("--task", type=click.Choice(("MPE", "PR", "MAR"), case_sensitive=False), default=None,
                     help="For .uai files: MPE (default), PR (log10 Z) or MAR (marginals)."),
        click.option("--search/--no-search", default=True, show_default=True,
                     help="Beyond what exact elimination proves: cost shifting, local search and AND/OR "
                          "branch and bound until proof, time limit or Ctrl-C."),
    ]):
        f = opt(f)
    return f


def reader_gone():
    """The reader of stdout (or stderr) has gone: what is left to print goes nowhere, and the command
    exits as a process killed by SIGPIPE would, without a traceback."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(devnull, stream.fileno())
        except (AttributeError, OSError, ValueError):  # not a file (`gpusolve serve` runs the command)
            pass
    os.close(devnull)
    sys.exit(EXIT_PIPE)


class Failure(Exception):
    def __init__(self, message: str, code: int, status: str = "error"):
        super().__init__(message)
        self.code, self.status = code, status


def solve_file(path: str, options: Options, evidence=None, progress_factory=None, on_bounds=None,
               stop=None, fmt: str | None = None, on_phase=None) -> Result:
    """Read and solve one file; every expected failure becomes a Failure with its exit code. The time
    limit and `stop` (Ctrl-C, SIGTERM) apply while the file is read too."""
    from gpusolve import parsers
    from gpusolve.parsers.errors import OverBudget, ParseError

    from gpusolve.model.problem import ModelError
    from gpusolve.schedule.solve import solve
    from gpusolve.stop import Stop, Stopped

    t0 = time.perf_counter()
    stop = stop or Stop()
    if options.time_limit is not None:
        stop.deadline = t0 + options.time_limit
    read_time = None
    try:
        problem = parsers.read(path, evidence, fmt, options.mem_limit, stop)
        read_time = time.perf_counter() - t0
        return solve(problem, options, file=path, progress_factory=progress_factory, read_time=read_time,
                     on_bounds=on_bounds, stop=stop, on_phase=on_phase)
    except Stopped as e:  # while reading, or before PR's or MAR's elimination ends: no bound to report
        when = "while reading" if read_time is None else "during elimination"
        if e.interrupted == signal.SIGINT:
            raise Failure(f"{path}: interrupted {when}, before any bound", EXIT_INTERRUPT,
                          status="timeout") from None
        why = "stopped by SIGTERM" if e.interrupted else "time limit reached"
        raise Failure(f"{path}: {why} {when}, before any bound", EXIT_TIME, status="timeout") from None
    except OverBudget as e:
        raise Failure(str(e), EXIT_MEMORY) from None
    except (ParseError, OrderError, DeviceError) as e:
        raise Failure(str(e), EXIT_INPUT) from None
    except (ModelError, ValueError) as e:
        raise Failure(f"{path}: {e}", EXIT_INPUT) from None
    except BudgetError as e:
        raise Failure(f"{path}: {e}", EXIT_MEMORY) from None
    except MemoryError:
        raise Failure(f"{path}: out of memory despite the plan's estimate; lower --mem-limit or pass --z",
                      EXIT_MEMORY) from None
    except Exception as e:  # a bug: still one line, never a traceback (GPUSOLVE_DEBUG=1 shows it)
        if os.environ.get("GPUSOLVE_DEBUG"):
            raise
        raise Failure(f"{path}: internal error: {type(e).__name__}: {e}", 1) from None


class LiveLine:
    """The status of a solve on a terminal, made again at each refresh (a search's rate moves with no
    event): the time so far and the bounds held; the phase under way and for how long, a search's
    nodes and their rate (its node counters, the compiled core's included). `clock`: a test's own time."""

    def __init__(self, clock=time.perf_counter):
        self.clock = clock
        self.phase, self.nodes, self.start = "reading", None, clock()
        self.since = self.start
        self.bounds = "no bounds yet"

    def begin(self, phase: str, nodes=None) -> None:
        self.phase, self.nodes, self.since = phase, nodes, self.clock()

    def improved(self, lower, upper, phase: str) -> None:
        gap = "" if lower is None or upper is None else f", gap {fmt_bound(upper - lower)}"
        self.bounds = f"bounds [{fmt_bound(lower)}, {fmt_bound(upper)}]{gap} ({phase})"

    def lines(self) -> tuple[str, str]:
        now = self.clock()
        took, elapsed = now - self.since, int(now - self.start)
        what = f"{self.phase} for {took:.0f} s"
        if self.nodes is not None:
            n = self.nodes()
            what += f", {n:,} nodes" + (f" ({n / took:,.0f}/s)" if took > 0 else "")
        return f"{elapsed // 3600}:{elapsed // 60 % 60:02d}:{elapsed % 60:02d} {self.bounds}", what


@contextmanager
def progress_bar(enabled: bool, label: str, until_proof: bool = False, on=None):
    """A rich display on stderr (or the console `on`) when it is a terminal: a spinner and the
    LiveLine once a phase is heard, cut to the terminal's width, and below it a bar per
    elimination while it runs (a percentage only where the total is known). With `until_proof` (no
    time limit) the first search says once how the run ends.
    Yields (factory(total) -> advance(n), on_bounds, on_phase) or Nones."""
    on = on or err()
    if not (enabled and on.is_terminal):
        yield None, None, None
        return
    from rich.console import Group
    from rich.live import Live
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.spinner import Spinner
    from rich.text import Text
    line, heard, said = LiveLine(), [], []

    class Status:
        spinner = Spinner("dots")

        def __rich__(self):
            if not heard:
                return ""
            first, second = line.lines()
            shown = [self.spinner.render(on.get_time()).append(" " + first), Text("  " + second)]
            for text in shown:  # each one line whatever the terminal's width: cut, never wrapped
                text.no_wrap, text.overflow = True, "ellipsis"
            return Group(*shown)

    bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>5.1f}%"),
                   TimeElapsedColumn(), console=on)
    with Live(Group(Status(), bar), console=on, transient=True, refresh_per_second=8) as live:
        def factory(total):
            for t in bar.task_ids:  # one bar at a time: the elimination before is over
                bar.remove_task(t)
            task = bar.add_task(label, total=max(total, 1))
            live.refresh()  # drawn once at least, however short it runs
            return lambda n: bar.advance(task, n)

        def on_bounds(lower, upper, phase):  # shown at the next refresh: improvements may come by the hundred
            line.improved(lower, upper, phase)

        def on_phase(phase, nodes=None):
            for t in bar.task_ids:
                bar.remove_task(t)
            line.begin(phase, nodes)
            if until_proof and nodes is not None and not said:
                live.console.print("No --time-limit: the search runs until the optimum is proven; "
                                   "Ctrl-C stops it and prints the best solution found so far.")
                said.append(phase)
            heard.append(phase)
            live.refresh()
        yield factory, on_bounds, on_phase


@contextmanager
def interruptible():
    """Ctrl-C and SIGTERM ask the solver to stop and report what it holds (`stop.interrupted` keeps
    the signal's number: after Ctrl-C the command exits 130); a second Ctrl-C aborts."""
    from gpusolve.stop import Stop
    stop = Stop()

    def ask(signum, frame):
        stop.interrupted = signum
        signal.signal(signal.SIGINT, signal.default_int_handler)

    old = {s: signal.signal(s, ask) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def one_line(values: list) -> str:
    """An assignment on one line: value names where the file gives them, as solve and dcop print it."""
    return " ".join(map(str, values[:200])) + (" ..." if len(values) > 200 else "")


def fmt_bound(x) -> str:
    if x is None:
        return "none"
    return f"{x:.9g}" if isinstance(x, float) else str(x)


def report_failure(file: str, message: str, code: int, as_json: bool):
    if as_json:
        from gpusolve.report import record
        print(dumps(record(file, "error", message=message)))
    err().print(message, markup=False, soft_wrap=True)
    sys.exit(code)
