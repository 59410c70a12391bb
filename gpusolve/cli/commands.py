"""Command line: solve, info, generate, batch, dcop, csg.

Errors the user can fix print one line and exit 2 (bad input or usage), 3
(memory budget) or 4 (time limit with no bound); never a traceback (`solve
--help` lists every exit code).
"""
from __future__ import annotations

import functools
import json
import os
import re
import signal
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click

from gpusolve import __version__
from gpusolve.order import graph
from gpusolve.csg import dp as csg_names
from gpusolve.engines.select import DEVICES
from gpusolve.cuda.runtime import DeviceError
from gpusolve.generate import TOPOLOGIES, GenerateBudget, GenerateError
from gpusolve.order.graph import OrderError
from gpusolve.plan.buckets import TABLES
from gpusolve.host import fmt_bytes
from gpusolve.report import dumps

FORMATS = ("wcsp", "uai", "xml", "cfn", "fzn", "yaml", "yml")  # as gpusolve.parsers.FORMATS, without importing the readers
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
    made.on_broken_pipe = _reader_gone  # rich's own exits 1
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


class Commands(click.Group):
    """Usage errors as one line on stderr (and, with --json, an error object on stdout), exit 2;
    Ctrl-C outside a solve exits 130 without click's "Aborted!"; a reader of stdout gone (`| head`)
    ends the command quietly with 141."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:  # a caller that handles click's exceptions itself
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        args = sys.argv[1:] if args is None else list(args)
        try:
            try:
                code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
            except click.ClickException as e:
                ctx = getattr(e, "ctx", None)
                line = f"{ctx.command_path if ctx else 'gpusolve'}: {e.format_message()}"
                if "--json" in args:
                    from gpusolve.report import record
                    params = ctx.params if ctx else {}
                    print(dumps(record(str(params.get("file") or params.get("folder") or ""), "error",
                                       message=line)))
                err().print(line, markup=False, soft_wrap=True)
                sys.exit(e.exit_code)
            except click.Abort:
                sys.exit(EXIT_INTERRUPT)
            finally:  # here, not at the interpreter's exit, where a reader gone is reported as an error
                if sys.stdout is not None:
                    sys.stdout.flush()
            sys.exit(code if isinstance(code, int) else 0)
        except BrokenPipeError:
            _reader_gone()

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except BrokenPipeError:  # before click's own handling, which exits 1
            _reader_gone()


def _reader_gone():
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


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", package_name="gpusolve")
def main():
    """gpusolve: bucket and mini-bucket elimination for WCSP, UAI and XCSP instances."""


class Failure(Exception):
    def __init__(self, message: str, code: int, status: str = "error"):
        super().__init__(message)
        self.code, self.status = code, status


def solve_file(path: str, options: Options, evidence=None, progress_factory=None, on_bounds=None,
               stop=None, fmt: str | None = None) -> Result:
    """Read and solve one file; every expected failure becomes a Failure with its exit code. The time
    limit and `stop` (Ctrl-C, SIGTERM) apply while the file is read too."""
    from gpusolve import parsers
    from gpusolve.parsers.errors import OverBudget, ParseError

    from gpusolve.model.problem import ModelError
    from gpusolve.schedule.solve import BudgetError, solve
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
                     on_bounds=on_bounds, stop=stop)
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


@contextmanager
def progress_bar(enabled: bool, label: str):
    """A rich display on stderr when it is a terminal: a bar per elimination and a line with the
    bounds held (the gap shrinking live). Yields (factory(total) -> advance(n), on_bounds) or Nones."""
    if not (enabled and err().is_terminal):
        yield None, None
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>5.1f}%"),
                   TimeElapsedColumn(), console=err(), transient=True)
    with bar:
        held = bar.add_task("bounds: none yet", total=None)
        tasks = []

        def factory(total):
            for t in tasks:  # one bar at a time: the phase before is over
                bar.remove_task(t)
            tasks[:] = [bar.add_task(label, total=max(total, 1))]
            return lambda n: bar.advance(tasks[0], n)

        def on_bounds(lower, upper, phase):
            gap = "" if lower is None or upper is None else f", gap {_fmt(upper - lower)}"
            bar.update(held, description=f"bounds [{_fmt(lower)}, {_fmt(upper)}]{gap} ({phase})")
        yield factory, on_bounds


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


@main.command("solve")
@click.argument("file")
@solve_options
@click.option("--format", "fmt", type=click.Choice(FORMATS), default=None,
              help="Input format when FILE is - (standard input) or its suffix says otherwise.")
@click.option("--solution", type=click.Path(dir_okay=False), default=None,
              help="Write the assignment in toulbar2's solution format.")
@click.option("--uai-output", type=click.Path(dir_okay=False), default=None,
              help="Write the UAI competition result file (MPE, PR or MAR format).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout, nothing else.")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Exact BE's largest buckets in slices, and AND/OR search subproblems, on a LocalCluster of "
                   "this many Dask worker processes.")
@click.option("--scheduler", default=None,
              help="Exact BE's largest buckets in slices, and AND/OR search subproblems, on a running Dask "
                   "cluster (tcp://host:8786).")
@click.option("--slice-min", type=SizeParam(), default=None,
              help="With --workers or --scheduler: exact BE slices each bucket whose joint table exceeds this "
                   "(e.g. 4G) over the workers; default: the device budget of one GPU, else the memory budget.")
@click.option("--no-serve", is_flag=True,
              help="Solve in this process even when `gpusolve serve` is running (as GPUSOLVE_NO_SERVE=1).")
def solve_cmd(file, evidence, fmt, solution, uai_output, as_json, no_serve, **solve_kw):
    """Solve FILE (.wcsp, .uai, .xml, .cfn, .fzn, optionally .gz/.xz/.bz2; - reads standard input).

    The time limit, Ctrl-C and SIGTERM apply while the file is read too; SIGTERM stops a solve as the
    time limit does.

    \b
    Exit codes:
      0    solved, or bounds held at the time limit or SIGTERM
      1    internal error (a bug; GPUSOLVE_DEBUG=1 shows its traceback)
      2    bad input (FILE:LINE says what) or usage
      3    the memory budget cannot hold what the file or the plan needs
      4    time limit or SIGTERM before any bound (while reading; for PR and MAR, before Z)
      130  Ctrl-C (the best result held printed first)
      141  the reader of the output has gone (as SIGPIPE)"""
    from dataclasses import asdict

    from gpusolve.cli.outputs import check_outputs, clear_outputs
    from gpusolve.report import record
    from gpusolve.schedule.solve import Options
    options = Options(**solve_kw)

    def fail(message: str, code: int, status: str = "error"):
        if as_json:
            print(dumps(record(file, status, message=message, options={**asdict(options), "evidence": evidence})))
        err().print(message, markup=False, soft_wrap=True)
        sys.exit(code)

    problem = check_outputs(file, fmt, solution, uai_output, (evidence, options.order)) \
        or clear_outputs(("--solution", solution), ("--uai-output", uai_output))  # before any work
    if problem:
        fail(problem, EXIT_INPUT)
    try:
        with progress_bar(not as_json, "eliminating") as (factory, on_bounds), interruptible() as stop:
            result = solve_file(file, options, evidence, factory, on_bounds, stop, fmt)
    except Failure as f:
        fail(str(f), f.code, f.status)
    result.options = {**result.options, "evidence": evidence} if result.options else None
    if as_json and result.device_note and options.device == "auto" and result.engine == "numpy":
        # human output shows the engine choice in its table
        err().print(f"note: {result.device_note}", markup=False, soft_wrap=True)
    failed = write_outputs(result, solution, uai_output)
    if as_json:
        print(dumps(result.to_json()))
    else:
        print_result(result)
    if failed:  # the answer is printed above: only the file is lost
        err().print(failed, markup=False, soft_wrap=True)
        sys.exit(EXIT_INPUT)
    if stop.interrupted == signal.SIGINT:  # SIGTERM (a batch system's stop) ends as a time limit does: 0
        sys.exit(EXIT_INTERRUPT)


def write_outputs(result: Result, solution: str | None, uai_output: str | None) -> str | None:
    """Write --solution and --uai-output; returns the error line when a write failed."""
    if not solution and not uai_output:
        return None
    from gpusolve.parsers.write import write_uai_result
    from gpusolve.schedule.solve import write_solution
    try:
        if solution and result.assignment is not None:
            write_solution(solution, result)
        if uai_output:
            exact = result.status == "optimal"
            if result.task == "PR":  # one number fits: the lower bound, log10 Z itself when exact (-inf: Z = 0)
                bound = "exact" if exact or result.status == "infeasible" else \
                    "lower" if result.lower_bound is not None else "none"
            elif result.task == "MPE":  # an assignment: its value bounds the MPE from below
                bound = "none" if result.assignment is None else "exact" if exact else "lower"
            else:
                bound = "none" if result.marginals is None else "exact"
            write_uai_result(uai_output, result.task, result.lower_bound if result.task == "PR" else None,
                             result.assignment, result.marginals)
            result.uai_output = {"path": str(uai_output), "bound": bound}
    except OSError as e:
        return f"{e.filename or solution or uai_output}: cannot write: {e.strerror or e}"
    return None


def print_result(r: Result) -> None:
    from rich.table import Table
    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold")
    t.add_column()
    t.add_row("file", r.file)
    t.add_row("task", r.task)
    t.add_row("status", r.status)
    if r.message:
        t.add_row("why", r.message)
    t.add_row("lower bound", _fmt(r.lower_bound))
    t.add_row("upper bound", _fmt(r.upper_bound))
    if r.lower_bound is not None and r.upper_bound is not None:
        t.add_row("gap", _fmt(r.upper_bound - r.lower_bound))
    t.add_row("method", r.method or "none")
    if r.z is not None:
        t.add_row("z", str(r.z))
    t.add_row("induced width", _fmt(r.induced_width) + (" (of the elimination order)" if r.z is not None else ""))
    t.add_row("engine", (r.engine or "none") + (f" ({r.device_note})" if r.device_note else ""))
    if r.largest_rows:  # sparse tables: what they held, not what the plan feared
        t.add_row("peak memory", fmt_bytes(r.peak_bytes or 0) + " (measured: the sparse messages held)")
        t.add_row("sparse tables", f"largest message {r.largest_rows:,} rows")
    elif r.peak_bytes is not None:
        t.add_row("peak memory", fmt_bytes(r.peak_bytes) + " (predicted)")
    t.add_row("time", f"{r.time_s:.3f} s (" + ", ".join(f"{k} {v:.3f}" for k, v in r.phases.items()) + ")")
    if r.search and r.search.get("method") == "MAC":  # depth-first search on a CSP: no cache
        s = r.search
        t.add_row("search", f"MAC: {s['nodes']:,} nodes, {s['failures']:,} failures, {s['restarts']:,} restarts, "
                            + ("complete" if s["complete"] else "stopped"))
    elif r.search:
        s = r.search
        t.add_row("search", f"{s['nodes']:,} OR nodes, {s['nodes_per_s']:,.0f} per s, {s['cache_hits']:,} cache hits, "
                            + ("complete" if s["complete"] else "stopped"))
    if len(r.trace) > 1:
        t.add_row("bounds over time", "; ".join(f"{tt:.2f} s [{_fmt(lo)}, {_fmt(hi)}] {ph}"
                                                 for tt, lo, hi, ph in r.trace[-6:]))
    if r.assignment is not None:
        t.add_row("assignment", _shown(r.values or r.assignment))
    for i, m in enumerate((r.marginals or [])[:20]):
        t.add_row(f"P(x{i})", " ".join(f"{p:.4g}" for p in m))
    if r.marginals and len(r.marginals) > 20:
        t.add_row("", f"({len(r.marginals) - 20} more variables: use --json or --uai-output)")
    if r.uai_output:
        t.add_row("uai output", f"{r.uai_output['path']} ({r.uai_output['bound']} bound)"
                  if r.uai_output["bound"] not in ("exact", "none") else r.uai_output["path"])
    out().print(t, markup=False)  # cells are text: a bound's or a name's '[' is no style tag


def _shown(values: list) -> str:
    """An assignment on one line: value names where the file gives them, as solve and dcop print it."""
    return " ".join(map(str, values[:200])) + (" ..." if len(values) > 200 else "")


def _fmt(x) -> str:
    if x is None:
        return "none"
    return f"{x:.9g}" if isinstance(x, float) else str(x)


@main.command("serve")
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

    def log(line: str) -> None:
        stderr.write(line + "\n")
        stderr.flush()

    try:
        serve(path or socket_path(), device, idle_exit, log, main, console.cache_clear)
    except ServeError as e:
        err().print(str(e), markup=False, soft_wrap=True)
        sys.exit(EXIT_INPUT)


@main.command("info")
@click.argument("file")
@click.option("--evidence", type=str, default=None)
@click.option("--order", default="minfill", show_default=True)
@click.option("--tables", type=click.Choice(TABLES), default="auto", show_default=True)
@click.option("--z", type=click.IntRange(min=1), default=None, help="As for solve: the schedule with this z.")
@click.option("--time-limit", type=Seconds(), default=None, help="As for solve.")
@click.option("--mem-limit", type=SizeParam(), default=None, help="As for solve.")
@click.option("--gpu-mem-limit", type=SizeParam(), default=None,
              help="As for solve: print where each bucket of exact BE runs for this device budget "
                   "(on the device, or streamed through host memory in chunks); the plot marks them.")
@click.option("--plot", type=click.Path(dir_okay=False), default=None,
              help="Draw the bucket profile (exact BE, or MBE(z) with --z) into this picture (.png, .svg, .pdf); "
                   "needs matplotlib (pip install 'gpusolve[plot]').")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="As for solve: the buckets exact BE would slice over this many workers.")
@click.option("--slice-min", type=SizeParam(), default=None, help="As for solve (default: the memory budget).")
def info_cmd(file, evidence, order, tables, z, time_limit, mem_limit, gpu_mem_limit, plot, workers, slice_min):
    """Sizes, induced widths, predicted memory of BE and MBE(z), and the anytime schedule solve would run."""
    from gpusolve import parsers
    from gpusolve.parsers.errors import OverBudget, ParseError
    from rich.table import Table

    from gpusolve.model.problem import ModelError
    from gpusolve.plan.buckets import BudgetError, build_plan, place
    from gpusolve.schedule.solve import Options, make_schedule
    from gpusolve.host import available_memory
    try:
        problem = parsers.read(file, evidence, mem_limit=mem_limit)
        g = graph.primal_graph(problem)
        n_comp = len(graph.components(g))
        orders = {m: graph.elimination_order(problem, m, g) for m in graph.ORDERINGS}
        if order not in orders:
            orders[order] = graph.read_order(order, len(problem.variables))
    except (ParseError, OrderError) as e:
        err().print(str(e), markup=False, soft_wrap=True)
        sys.exit(EXIT_MEMORY if isinstance(e, OverBudget) else EXIT_INPUT)
    except (ModelError, ValueError) as e:
        err().print(f"{file}: {e}", markup=False, soft_wrap=True)
        sys.exit(EXIT_INPUT)
    except MemoryError:
        err().print(f"{file}: out of memory while reading its tables", markup=False, soft_wrap=True)
        sys.exit(EXIT_MEMORY)
    if plot:
        draw_profile(problem, orders[order], graph.induced_width(g, orders[order]), z, tables, n_comp, mem_limit,
                     gpu_mem_limit, plot)
    arities: dict[int, int] = {}
    for f in problem.functions:
        arities[f.arity] = arities.get(f.arity, 0) + 1
    dom = problem.domains
    out().print(f"[bold]{file}[/bold]  task {problem.task}, {len(dom)} variables "
              f"(domains {min(dom, default=0)}..{max(dom, default=0)}), {len(problem.functions)} cost functions, "
              f"{n_comp} component(s), evidence {len(problem.evidence)}")
    out().print("arities: " + ", ".join(f"{a}: {c}" for a, c in sorted(arities.items())))
    for name, o in orders.items():
        out().print(f"induced width ({name}): {graph.induced_width(g, o)}")
    plan = build_plan(problem, orders[order], None, n_comp)
    out().print(f"memory available: {fmt_bytes(available_memory())}")
    if problem.task == "MPE":
        cliques = sorted((mb.joint_entries, len(mb.scope) + 1) for mb in plan.minibuckets)
        out().print(f"junction tree (MAR): {len(cliques)} cliques, largest {cliques[-1][1] if cliques else 0} "
                  f"variables / {cliques[-1][0] if cliques else 0:,} entries, total "
                  f"{sum(c for c, _ in cliques):,} entries, propagation memory {fmt_bytes(plan.propagation_bytes)}")
    exact = build_plan(problem, orders[order], None, n_comp, tables)
    out().print(exact.describe(), markup=False)
    if gpu_mem_limit is not None:
        out().print(place(problem, exact, gpu_mem_limit).describe(exact, dom), markup=False)
    max_arity = max((f.arity for f in problem.functions), default=1)
    t = Table(title=f"MBE(z) with the {order} order")
    for c in ("z", "mini-buckets", "largest message", "peak memory"):
        t.add_column(c, justify="right")
    for zz in range(max(max_arity, 1), plan.induced_width + 2):
        p = build_plan(problem, orders[order], zz, n_comp)
        big = p.largest()
        t.add_row(str(zz), str(len(p.minibuckets)), f"{big.out_entries:,}" if big else "0",
                  fmt_bytes(p.peak_bytes))
    out().print(t)
    if problem.task in ("MPE", "WCSP"):
        from gpusolve.consistency.preprocess import preprocess
        reduced = preprocess(problem)  # solve plans the reduced problem (same graph, so same order)
        if reduced.infeasible:
            out().print("schedule: none (preprocessing proves the problem infeasible)")
            return
        if workers:
            print_slicing(build_plan(reduced.problem, orders[order], None, n_comp, tables), reduced.problem.domains,
                          workers, slice_min, mem_limit)
        options = Options(z=z, order=order, tables=tables, time_limit=time_limit, mem_limit=mem_limit)
        budget = mem_limit if mem_limit is not None else available_memory()
        try:
            schedule = make_schedule(reduced.problem, orders[order], options, budget, n_comp, "numpy")
        except (BudgetError, ValueError) as e:
            out().print(f"schedule: none ({e})", markup=False)
        else:
            out().print("schedule (CPU engine; on the GPU elimination phases are predicted faster):")
            out().print(schedule.describe(), markup=False)


def print_slicing(plan, domains, workers: int, slice_min: int | None, mem_limit: int | None) -> None:
    """`info --workers N`: the buckets `solve --workers N` would slice in exact BE of the preprocessed problem
    (the default threshold as for CPU workers)."""
    from gpusolve.host import available_memory
    from gpusolve.distributed.slicing import plan_slicing
    threshold = slice_min if slice_min is not None else mem_limit if mem_limit is not None else available_memory()
    out().print(plan_slicing(plan, domains, workers, threshold).describe(), markup=False)


def draw_profile(problem, order, width, z, tables, n_comp, mem_limit, gpu_mem_limit, path) -> None:
    """`info --plot`: the bucket profile of exact BE (or MBE(z)) into `path`; `width`: the order's."""
    from gpusolve.plan.buckets import build_plan
    from gpusolve.host import available_memory
    try:
        from gpusolve.plan.profile import plot_profile
        import matplotlib  # noqa: F401  (the optional extra; say so before any work)
    except ImportError:
        err().print("--plot needs matplotlib: pip install 'gpusolve[plot]'", markup=False)
        sys.exit(EXIT_INPUT)
    plan = build_plan(problem, order, z, n_comp, tables if z is None else "dense")
    budget = mem_limit if mem_limit is not None else available_memory()
    try:
        plot_profile(plan, path, budget, width, gpu_mem_limit, problem.name)
    except (OSError, ValueError) as e:
        err().print(f"--plot {path}: {e}", markup=False, soft_wrap=True)
        sys.exit(EXIT_INPUT)
    err().print(f"wrote the bucket profile to {path}", markup=False)


@main.command("generate")
@click.argument("topology", type=click.Choice(TOPOLOGIES))
@click.option("-n", "--variables", "n", type=int, default=10, show_default=True)
@click.option("-d", "--domain", "d", type=int, default=10, show_default=True)
@click.option("--p1", type=float, default=0.3, show_default=True, help="Density (random topology).")
@click.option("--p2", type=float, default=0.5, show_default=True, help="Tightness: share of forbidden entries.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Output .wcsp, .cfn or .uai, compressed when it ends in .gz, .xz or .bz2 "
                   "(default: TOPOLOGY-nN-dD-sSEED.wcsp).")
def generate_cmd(topology, n, d, p1, p2, seed, output):
    """Write a random binary WCSP (GpuBE section 8.1 recipes)."""
    from gpusolve.generate import generate
    from gpusolve.parsers.write import write
    try:
        problem = generate(topology, n, d, p1, p2, seed)
    except GenerateError as e:
        err().print(f"generate: {e}", markup=False)
        sys.exit(EXIT_MEMORY if isinstance(e, GenerateBudget) else EXIT_INPUT)
    path = output or f"{problem.name}.wcsp"
    try:
        write(problem, path)
    except (ValueError, OSError) as e:
        err().print(f"generate: {path}: {e}", markup=False)
        sys.exit(EXIT_INPUT)
    err().print(f"wrote {path}: {n} variables, {len(problem.functions)} cost functions", markup=False)


@main.command("generate-csp")
@click.argument("model", type=click.Choice(("queens", "langford")))
@click.argument("n", type=click.IntRange(min=1))
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Output XCSP3 file (default: MODEL-N.xml).")
def generate_csp_cmd(model, n, output):
    """Write N-queens (three AllDifferents) or Langford's L(2, N) as XCSP3, for `solve`."""
    from gpusolve.generate import csp_xcsp3
    path = output or f"{model}-{n}.xml"
    try:
        Path(path).write_text(csp_xcsp3(model, n))
    except OSError as e:
        err().print(f"generate-csp: {path}: {e}", markup=False)
        sys.exit(EXIT_INPUT)
    err().print(f"wrote {path}", markup=False)


@main.command("dcop")
@click.argument("file")
@click.option("--algo", type=click.Choice(("dpop", "adpop")), default="dpop", show_default=True,
              help="dpop: exact; adpop: UTIL messages of at most --max-dim variables, lower and upper bounds.")
@click.option("--max-dim", type=click.IntRange(min=0), default=None, help="ADPOP: separator variables per UTIL message.")
@click.option("--device", type=click.Choice(DEVICES), default="auto", show_default=True,
              help="Engine of each UTIL computation, on the worker that runs it.")
@click.option("--scheduler", default=None,
              help="Dask scheduler to join (tcp://host:8786); 'inline' runs every agent in this process without "
                   "Dask; default: an embedded LocalCluster.")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Workers of the embedded LocalCluster (default: one per CPU core).")
@click.option("--latency", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="Seconds per message between agents, for the simulated runtime.")
@click.option("--mem-limit", type=SizeParam(), default=None,
              help="Memory the UTIL messages may take (e.g. 8G); default: available RAM.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout, nothing else.")
def dcop_cmd(file, algo, max_dim, device, scheduler, workers, latency, mem_limit, as_json):
    """Solve the DCOP in FILE (FRODO XCSP, pyDCOP YAML, or any format solve reads: one agent per
    variable) with DPOP or ADPOP, each agent's computation a Dask task."""
    from gpusolve import parsers
    from gpusolve.dcop.dpop import DcopError, solve_dcop
    from gpusolve.parsers.errors import ParseError
    from gpusolve.plan.buckets import BudgetError
    from gpusolve.distributed.cluster import ClusterError
    try:
        problem = parsers.read(file)
        with progress_bar(not as_json, "agents") as (factory, _):
            progress = None if factory is None else (lambda total: functools.partial(factory(total), 1))
            result = solve_dcop(problem, algo, max_dim, device, scheduler, workers, latency, file, progress,
                                mem_limit)
    except ParseError as e:
        _fail(file, str(e), EXIT_INPUT, as_json)
    except BudgetError as e:
        _fail(file, f"{file}: {e}", EXIT_MEMORY, as_json)
    except (DcopError, ClusterError, DeviceError) as e:
        _fail(file, f"{file}: {e}", EXIT_INPUT, as_json)
    except Exception as e:  # a worker's failure or a bug: one line (GPUSOLVE_DEBUG=1 shows the traceback)
        if os.environ.get("GPUSOLVE_DEBUG"):
            raise
        _fail(file, f"{file}: {type(e).__name__}: {e}", 1, as_json)
    if as_json:
        from gpusolve.report import of_result
        print(dumps(of_result(result, task="DCOP")))
        return
    from rich.table import Table
    r, m = result, result.messages
    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold")
    t.add_column()
    t.add_row("file", r.file)
    t.add_row("algorithm", "DPOP" if r.max_dim is None else f"ADPOP (max-dim {r.max_dim})")
    t.add_row("status", r.status)
    if r.message:
        t.add_row("why", r.message)
    t.add_row("lower bound", _fmt(r.lower_bound))
    t.add_row("upper bound", _fmt(r.upper_bound))
    t.add_row("agents", f"{r.agents} holding {r.variables} variables, induced width {r.induced_width}")
    t.add_row("messages", f"{m['util']} UTIL ({m['util_entries']:,} entries, largest {m['largest_util']:,}), "
                          f"{m['value']} VALUE ({m['value_entries']:,} values)")
    t.add_row("executor", f"{r.executor}, started in {r.cluster_s:.2f} s; engines {', '.join(r.engines)}")
    t.add_row("time", f"wall {r.wall_s:.3f} s, simulated {r.simulated_s:.6f} s (UTIL phase {r.util_simulated_s:.6f} s, "
                      f"latency {r.latency_s:g} s per message), computations {r.compute_s:.6f} s in all, "
                      f"pseudo tree {r.pseudo_tree_s:.3f} s" + (f", repair {r.repair_s:.3f} s" if r.message else ""))
    if r.assignment is not None:
        t.add_row("assignment", _shown(r.values or r.assignment))
    out().print(t, markup=False)


def _fail(file: str, message: str, code: int, as_json: bool):
    if as_json:
        from gpusolve.report import record
        print(dumps(record(file, "error", message=message)))
    err().print(message, markup=False, soft_wrap=True)
    sys.exit(code)


EXIT_BATCH_ERROR = 1  # batch: an instance ended in error (its line and the summary say why)


@main.command("batch")
@click.argument("folder", type=click.Path(exists=True, file_okay=False))
@solve_options
@click.option("--out", "out_path", type=click.Path(dir_okay=False), default="results.jsonl", show_default=True)
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Spread instances over a LocalCluster of this many Dask worker processes.")
@click.option("--scheduler", default=None, help="Spread instances over a running Dask cluster (tcp://host:8786).")
@click.option("--resume", is_flag=True, help="Skip instances already in --out whatever options solved them.")
@click.option("--retry-errors", is_flag=True, help="Solve again the instances recorded as error or timeout.")
@click.option("--budget", type=Seconds(), default=None,
              help="Total seconds for the batch: no instance starts after it, each gets at most what is left.")
@click.option("--csv", "as_csv", is_flag=True, help="Also write the summary as CSV beside --out (same name, .csv).")
def batch_cmd(folder, evidence, out_path, resume, retry_errors, budget, as_csv, workers, scheduler, **solve_kw):
    """Solve every instance under FOLDER, one JSON line each (the schema of solve --json).

    Re-running resumes: an instance is skipped when --out holds its resolved path solved with the
    same options (any options with --resume; error and timeout lines are solved again with
    --retry-errors). Evidence is looked up per instance (FILE.uai.evid beside it).

    Exit 0 when no instance ended in error, 1 when one did (the summary says why), 2 for bad usage,
    130 after Ctrl-C: the instance under way is dropped, the summary so far is printed, and the same
    command run again resumes."""
    import dataclasses

    from gpusolve import parsers
    from gpusolve.schedule.solve import Options
    if evidence:
        raise click.UsageError("--evidence applies to one file: in batch each FILE.uai.evid beside its "
                               "instance is used")
    if budget is not None and (workers or scheduler):
        raise click.UsageError("--budget applies to a batch solved here, not over Dask workers")
    if not Path(out_path).parent.is_dir():
        raise click.UsageError(f"--out {out_path}: folder {Path(out_path).parent} does not exist")
    options = Options(**solve_kw)
    settings = {**dataclasses.asdict(options), "evidence": None}
    files = sorted(str(p.resolve()) for p in Path(folder).rglob("*")
                   if p.is_file() and p.name.endswith(parsers.SUPPORTED_SUFFIXES))
    done = _recorded(out_path, files, None if resume else settings)
    todo = [f for f in files if f not in done or (retry_errors and done[f]["status"] in ("error", "timeout"))]
    err().print(f"{len(files)} instances, {len(files) - len(todo)} already in {out_path}", markup=False)
    start = time.perf_counter()
    interrupted = False
    try:
        with _appender(out_path) as sink:
            if workers or scheduler:  # over Dask workers: gpusolve/cli/batch.py
                from gpusolve.cli.batch import batch_on_dask
                from gpusolve.distributed.cluster import ClusterError
                try:
                    batch_on_dask(todo, options, settings, sink, scheduler, workers, batch_record)
                except ClusterError as e:
                    err().print(str(e), markup=False, soft_wrap=True)
                    sys.exit(EXIT_INPUT)
            else:
                _batch_here(todo, options, settings, budget, sink)
    except KeyboardInterrupt:
        interrupted = True
    records = list(_recorded(out_path, files, None if resume else settings).values())
    print_summary(records, time.perf_counter() - start)
    if as_csv:
        write_csv(Path(out_path).with_suffix(".csv"), records)
    if interrupted:
        err().print(f"interrupted: {len(records)} of {len(files)} instances are in {out_path}; "
                    "run the same command again to resume", markup=False, soft_wrap=True)
        sys.exit(EXIT_INTERRUPT)
    if any(r["status"] == "error" for r in records):
        sys.exit(EXIT_BATCH_ERROR)


def _batch_here(todo: list[str], options, settings: dict, budget: float | None, sink) -> None:
    """Solve `todo` in this process, one after another, each line written to `sink` as it ends; with
    a `budget` (seconds), no instance starts after it and each gets at most what is left."""
    import dataclasses

    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    start = time.perf_counter()
    bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                   TimeElapsedColumn(), console=err(), transient=True, disable=not err().is_terminal)
    with bar:
        task = bar.add_task("solving", total=len(todo))
        for i, f in enumerate(todo):
            left = None if budget is None else budget - (time.perf_counter() - start)
            if left is not None and left <= 0:
                err().print(f"budget of {budget:g} s spent: {len(todo) - i} instances not started", markup=False)
                return
            limit = options.time_limit if left is None else min(options.time_limit or left, left)
            bar.update(task, description=os.path.basename(f))
            rec = batch_record(f, dataclasses.replace(options, time_limit=limit), settings)
            sink.write(dumps(rec) + "\n")
            sink.flush()
            bar.advance(task)


@contextmanager
def _appender(path: str):
    """--out opened for appending, a partial last line (a run killed mid-write) cut off first."""
    try:
        with open(path, "ab+") as f:
            _cut_partial_line(f)
        sink = open(path, "a", encoding="utf-8")
    except OSError as e:
        raise click.UsageError(f"--out {path}: {e.strerror or e}") from None
    with sink:
        yield sink


def _cut_partial_line(f, block: int = 1 << 20) -> None:
    """Truncate a binary file after its last newline, read backwards a block at a time: a cut line may
    be of any length."""
    end = pos = f.seek(0, os.SEEK_END)
    while pos > 0:
        start = max(pos - block, 0)
        f.seek(start)
        cut = f.read(pos - start).rfind(b"\n")
        if cut >= 0:
            if start + cut + 1 < end:
                f.truncate(start + cut + 1)
            return
        pos = start
    f.truncate(0)


def batch_record(f: str, options, settings: dict) -> dict:
    """One batch line: the result, or the failure recorded (a bug must not stop the batch), stamped
    with the batch's `settings` (not the per-instance share of --budget)."""
    from gpusolve.report import record
    try:
        rec = solve_file(f, options).to_json()
    except Failure as e:
        rec = record(f, e.status, message=str(e))
    except Exception as e:
        rec = record(f, "error", message=f"internal error: {type(e).__name__}: {e}")
    rec["options"] = settings
    return rec


def _recorded(path: str, files: list[str], settings: dict | None) -> dict[str, dict]:
    """The last record in --out of each of `files` (in their order) when solved with `settings`
    (None: whatever options)."""
    last = _already_done(path)
    return {f: last[f] for f in files if f in last and (settings is None or last[f].get("options") == settings)}


def _already_done(path: str) -> dict[str, dict]:
    """Records in --out by file; lines that are not a record (cut short, not UTF-8, no status) are
    not, so their instance is solved again."""
    done = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(rec, dict) and isinstance(rec.get("file"), str) and isinstance(rec.get("status"), str):
                    done[rec["file"]] = rec
    return done


SUMMARY = ("file", "status", "lower_bound", "upper_bound", "z", "method", "time_s", "message")
SHOWN = 200  # characters of a message in the summary table; --out and the CSV hold it whole


def print_summary(records: list[dict], elapsed: float) -> None:
    """The records as a table, a message column where any has one (why it ended in error or timeout),
    and the count of each status."""
    from rich.table import Table
    from rich.text import Text
    messages = [r.get("message") or "" for r in records]
    with_messages = any(messages)
    t = Table(title="batch summary")
    for c in ("file", "status", "lower", "upper", "z", "time s") + (("message",) if with_messages else ()):
        t.add_column(c, justify="left" if c in ("file", "message") else "right")
    counts: dict[str, int] = {}
    for r, message in zip(records, messages):
        counts[r["status"]] = counts.get(r["status"], 0) + 1
        row = [Text(os.path.basename(r["file"])), r["status"], _fmt(r.get("lower_bound")),
               _fmt(r.get("upper_bound")), _fmt(r.get("z")), f"{r.get('time_s') or 0:.2f}"]
        if with_messages:
            row.append(Text(message if len(message) <= SHOWN else message[:SHOWN - 3] + "..."))
        t.add_row(*row)
    out().print(t)
    statuses = ("optimal", "bounded", "infeasible", "timeout", "error")
    out().print(", ".join(f"{k}: {counts.get(k, 0)}" for k in statuses)
                + f"; total time {sum(r.get('time_s') or 0 for r in records):.2f} s of solving, "
                  f"{elapsed:.2f} s this run")


def write_csv(path: Path, records: list[dict]) -> None:
    import csv
    try:
        with open(path, "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, SUMMARY, extrasaction="ignore")
            w.writeheader()
            w.writerows(records)
    except OSError as e:
        raise click.UsageError(f"--csv {path}: {e.strerror or e}") from None
    err().print(f"wrote {path}", markup=False)


@main.command("csg")
@click.argument("file", required=False)
@click.option("--generate", "distribution", type=click.Choice(csg_names.DISTRIBUTIONS), default=None,
              help="Draw the values from a standard CSG distribution instead of reading FILE.")
@click.option("-n", "--agents", "n", type=int, default=None, help="Agents, with --generate.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--write", "write_path", type=click.Path(dir_okay=False), default=None,
              help="Also write the generated values (text, or .npy by its suffix).")
@click.option("--algorithm", type=click.Choice(csg_names.ALGORITHMS), default="idp", show_default=True,
              help="idp: only the splits IDP needs (about 40% of dp's); dp: every split.")
@click.option("--device", type=click.Choice(DEVICES), default="auto", show_default=True)
@click.option("--precision", type=click.Choice(("auto", *csg_names.PRECISIONS)), default="auto", show_default=True,
              help="f's values: single (float32, 4 bytes a coalition), double, or auto: single on the GPU, double "
                   "on the CPU engine. A finished double run is optimal; a single one where the values' grid "
                   "(integers, halves...) proves it, else bounded within float32's rounding.")
@click.option("--time-limit", type=click.FloatRange(min=0), default=None,
              help="Seconds; then the best structure found and an upper bound (status bounded).")
@click.option("--mem-limit", type=SizeParam(), default=None, help="Host memory budget; default: available RAM.")
@click.option("--gpu-mem-limit", type=SizeParam(), default=None, help="Device memory budget; default: free memory.")
@click.option("--threads", type=click.IntRange(min=1), default=None,
              help="CPU engine threads (default: one per core; on a Dask worker, its --nthreads).")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Cut each level's coalitions across this many Dask workers of an embedded cluster: one "
                   "process per GPU when the GPU is used, else CPU processes.")
@click.option("--scheduler", default=None,
              help="Cut each level's coalitions across the workers of a running Dask cluster (tcp://host:8786; "
                   "with --workers, its first N); FILE must be readable by every worker at the same path.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout, nothing else.")
def csg_cmd(file, distribution, n, seed, write_path, workers, scheduler, as_json, **options):
    """Optimal coalition structure: FILE holds n then 2^n coalition values (mask order; or a .npy)."""
    from gpusolve.csg import dp as csg
    from gpusolve.parsers.errors import ParseError
    from gpusolve.report import of_result
    from gpusolve.distributed.cluster import ClusterError
    name = file or (f"{distribution}-n{n}-s{seed}" if distribution else "")

    def fail(message, code):
        _fail(name, message, code, as_json)

    if (file is None) == (distribution is None):
        fail("csg: give a FILE or --generate DISTRIBUTION (one of them)", EXIT_INPUT)
    if distribution is not None and n is None:
        fail("csg: --generate needs -n (the number of agents)", EXIT_INPUT)
    try:
        t0 = time.perf_counter()
        spread = bool(workers or scheduler)
        if file is not None:
            values, phase = csg.read_values(file), "read"
        elif spread and not write_path:  # each worker draws them
            csg.check_agents(n)
            values, phase = None, None
        else:
            values, phase = csg.generate_values(distribution, n, seed), "generate"
            if write_path:
                csg.write_values(write_path, values)
        phases = {phase: time.perf_counter() - t0} if phase else {}
        with csg_progress(not as_json) as progress, interruptible() as stop:
            if spread:
                source = ("file", os.path.abspath(file)) if file else ("generate", distribution, n, seed)
                result = csg_on_workers(values, csg.Options(**options), source, workers, scheduler, name, phases,
                                        progress, stop)
            else:
                result = csg.solve(values, csg.Options(**options), file=name, phases=phases, progress=progress,
                                   stop=stop)
    except ParseError as e:
        fail(str(e), EXIT_INPUT)
    except (csg.CSGError, DeviceError, ClusterError) as e:
        fail(f"{name}: {e}", EXIT_INPUT)
    except (csg.BudgetError, MemoryError) as e:
        fail(f"{name}: {e or 'out of memory despite the prediction; lower --mem-limit'}", EXIT_MEMORY)
    except Exception as e:  # a bug: still one line (GPUSOLVE_DEBUG=1 shows the traceback)
        if os.environ.get("GPUSOLVE_DEBUG"):
            raise
        fail(f"{name}: internal error: {type(e).__name__}: {e}", 1)
    if as_json:
        # The schema's peak_bytes is one figure: the larger side; both sides follow as peak_bytes_by_memory.
        print(dumps(of_result(result, peak_bytes=max(result.peak_bytes.values(), default=0),
                              peak_bytes_by_memory=result.peak_bytes)))
        return
    from rich.table import Table
    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold")
    t.add_column()
    r = result
    for label, value in [
        ("file", r.file), ("agents", str(r.n)), ("status", r.status), ("value", _fmt(r.value)),
        ("upper bound", _fmt(r.upper_bound)), ("gap", _fmt(r.upper_bound - r.lower_bound)),
        ("method", r.method + ("" if r.status == "optimal" else f", stopped after size {r.levels_done}"
                                if r.levels_done < r.n else ", float32 rounding leaves the gap (--precision double)")),
        ("engine", f"{r.engine} ({r.device_note})"),
        *([("workers", f"{r.workers}, each in level steps " + ", ".join(f"{s:.3f}" for s in r.worker_compute_s)
            + " s")] if r.workers > 1 else []),
        ("memory", ", ".join(f"{k} {fmt_bytes(v)}" for k, v in r.peak_bytes.items() if v) + " (predicted)"),
        ("splits", f"{r.splits:,} evaluated, {r.splits_per_s:,.0f} per s"),
        ("time", f"{r.time_s:.3f} s (" + ", ".join(f"{k} {v:.3f}" for k, v in r.phases.items()) + ")"),
        ("structure", " ".join("{" + ",".join(map(str, c)) + "}" for c in r.structure)),
    ]:
        t.add_row(label, value)
    out().print(t, markup=False)


def csg_on_workers(values, options, source, workers, scheduler, name, phases, progress, stop):
    """csg.solve_on_workers on the cluster scaleout.executor opens: with the GPU, one process per GPU."""
    from gpusolve.csg import dp as csg
    from gpusolve.cuda.runtime import gpu_unavailable_reason
    from gpusolve.distributed.cluster import executor
    n = csg.source_agents(source, values)
    gpus = options.device == "gpu" or (options.device == "auto" and n >= csg.AUTO_GPU_AGENTS
                                       and gpu_unavailable_reason() is None)
    with executor(scheduler, workers, gpus=gpus) as (client, what, cluster_s):
        phases["cluster"] = cluster_s
        return csg.solve_on_workers(values, options, client, source, workers if scheduler else None, name, phases,
                                    progress, stop, executor=what)


@contextmanager
def csg_progress(enabled: bool):
    """A bar over the DP's split evaluations on a terminal's stderr; yields factory(total) -> advance(n)."""
    if not (enabled and err().is_terminal):
        yield None
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    bar = Progress(TextColumn("splits"), BarColumn(), TextColumn("{task.percentage:>5.1f}%"),
                   TimeElapsedColumn(), console=err(), transient=True)
    with bar:
        def factory(total):
            task = bar.add_task("dp", total=max(total, 1))
            return lambda k: bar.advance(task, k)
        yield factory


if __name__ == "__main__":
    main()
