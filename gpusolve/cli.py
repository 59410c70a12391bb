"""Command line: solve, info, generate, dcop, batch.

Errors the user can fix print one line and exit 2 (bad input or usage), 3
(memory budget) or 4 (time limit with no bound); never a traceback.
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

from . import graph
from .engines import DEVICES, DeviceError
from .generate import TOPOLOGIES, GenerateError
from .graph import OrderError
from .plan import TABLES, fmt_bytes

if TYPE_CHECKING:
    from .solve import Options, Result

# NumPy, rich, the readers and the solver load inside the commands that use them:
# `--help` and `--version` answer without them, and a small solve pays only what it runs.
EXIT_INPUT, EXIT_MEMORY, EXIT_TIME = 2, 3, 4


@functools.cache
def console(stderr: bool):
    """rich's console for stdout or stderr, made on first use."""
    from rich.console import Console
    return Console(stderr=stderr, highlight=False)


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
        click.option("--time-limit", type=click.FloatRange(min=0), default=None, help="Seconds."),
        click.option("--mem-limit", type=SizeParam(), default=None,
                     help="Memory budget (e.g. 8G); default: available RAM."),
        click.option("--gpu-mem-limit", type=SizeParam(), default=None,
                     help="Device memory the GPU engine may hold before it streams tables through "
                          "host memory (e.g. 2G); default: free device memory."),
        click.option("--evidence", type=str, default=None, help="UAI evidence file (default: FILE.evid if present)."),
        click.option("--task", type=click.Choice(("MPE", "PR", "MAR"), case_sensitive=False), default=None,
                     help="For .uai files: MPE (default), PR (log10 Z) or MAR (marginals)."),
        click.option("--search/--no-search", default=True, show_default=True,
                     help="Beyond what exact elimination proves: cost shifting, local search and AND/OR "
                          "branch and bound until proof, time limit or Ctrl-C."),
    ]):
        f = opt(f)
    return f


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gpusolve")
def main():
    """gpusolve: bucket and mini-bucket elimination for WCSP, UAI and XCSP instances."""


class Failure(Exception):
    def __init__(self, message: str, code: int, status: str = "error"):
        super().__init__(message)
        self.code, self.status = code, status


def solve_file(path: str, options: Options, evidence=None, progress_factory=None, on_bounds=None,
               stop=None) -> Result:
    """Read and solve one file; every expected failure becomes a Failure with its exit code."""
    import parsers
    from parsers.errors import ParseError

    from .model import ModelError
    from .solve import BudgetError, TimeLimit, solve
    try:
        t0 = time.perf_counter()
        problem = parsers.read(path, evidence)
        read_time = time.perf_counter() - t0
        return solve(problem, options, file=path, progress_factory=progress_factory, read_time=read_time,
                     on_bounds=on_bounds, stop=stop)
    except (ParseError, OrderError, DeviceError) as e:
        raise Failure(str(e), EXIT_INPUT) from None
    except (ModelError, ValueError) as e:
        raise Failure(f"{path}: {e}", EXIT_INPUT) from None
    except BudgetError as e:
        raise Failure(f"{path}: {e}", EXIT_MEMORY) from None
    except MemoryError:
        raise Failure(f"{path}: out of memory despite the plan's estimate; lower --mem-limit or pass --z",
                      EXIT_MEMORY) from None
    except TimeLimit as e:
        raise Failure(f"{path}: {e}", EXIT_TIME, status="timeout") from None
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
    """Ctrl-C and SIGTERM ask the solver to stop and report what it holds; a second Ctrl-C aborts."""
    from .anytime import Stop
    stop = Stop()

    def ask(signum, frame):
        stop.interrupted = True
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
@click.option("--solution", type=click.Path(dir_okay=False), default=None,
              help="Write the assignment in toulbar2's solution format.")
@click.option("--uai-output", type=click.Path(dir_okay=False), default=None,
              help="Write the UAI competition result file (MPE, PR or MAR format).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout, nothing else.")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="AND/OR search subproblems on a LocalCluster of this many Dask worker processes.")
@click.option("--scheduler", default=None, help="AND/OR search subproblems on a running Dask cluster (tcp://host:8786).")
def solve_cmd(file, evidence, solution, uai_output, as_json, **solve_kw):
    """Solve FILE (.wcsp, .uai, .xml, optionally .gz/.xz/.bz2)."""
    from .solve import Options, write_solution
    options = Options(**solve_kw)
    try:
        with progress_bar(not as_json, "eliminating") as (factory, on_bounds), interruptible() as stop:
            result = solve_file(file, options, evidence, factory, on_bounds, stop)
    except Failure as f:
        if as_json:
            print(json.dumps({"file": file, "status": f.status, "message": str(f)}))
        err().print(str(f), markup=False, soft_wrap=True)
        sys.exit(f.code)
    if as_json and result.device_note and options.device == "auto" and result.engine == "numpy":
        # human output shows the engine choice in its table
        err().print(f"note: {result.device_note}", markup=False, soft_wrap=True)
    if solution and result.assignment is not None:
        write_solution(solution, result.assignment)
    if uai_output:
        from parsers.write import write_uai_result
        if result.task not in ("MPE", "PR", "MAR"):
            err().print(f"{file}: --uai-output applies to .uai files", markup=False)
            sys.exit(EXIT_INPUT)
        value = result.lower_bound if result.task == "PR" else None
        write_uai_result(uai_output, result.task, value, result.assignment, result.marginals)
    if as_json:
        print(json.dumps(result.to_json()))
    else:
        print_result(result)


def print_result(r: Result) -> None:
    from rich.table import Table
    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold")
    t.add_column()
    t.add_row("file", r.file)
    t.add_row("task", r.task)
    t.add_row("status", r.status)
    t.add_row("lower bound", _fmt(r.lower_bound))
    t.add_row("upper bound", _fmt(r.upper_bound))
    if r.lower_bound is not None and r.upper_bound is not None:
        t.add_row("gap", _fmt(r.upper_bound - r.lower_bound))
    t.add_row("method", method(r))
    t.add_row("induced width", str(r.induced_width))
    t.add_row("engine", r.engine + (f" ({r.device_note})" if r.device_note else ""))
    t.add_row("peak memory", fmt_bytes(r.peak_bytes) + " (predicted)")
    if r.largest_rows:
        t.add_row("sparse tables", f"largest message {r.largest_rows:,} rows")
    t.add_row("time", f"{r.time_s:.3f} s (" + ", ".join(f"{k} {v:.3f}" for k, v in r.phases.items()) + ")")
    if r.search:
        s = r.search
        t.add_row("search", f"{s['nodes']:,} OR nodes, {s['nodes_per_s']:,.0f} per s, {s['cache_hits']:,} cache hits, "
                            + ("complete" if s["complete"] else "stopped"))
    if len(r.trace) > 1:
        t.add_row("bounds over time", "; ".join(f"{tt:.2f} s [{_fmt(lo)}, {_fmt(hi)}] {ph}"
                                                 for tt, lo, hi, ph in r.trace[-6:]))
    if r.assignment is not None:
        shown = " ".join(map(str, r.assignment[:200])) + (" ..." if len(r.assignment) > 200 else "")
        t.add_row("assignment", shown)
    for i, m in enumerate((r.marginals or [])[:20]):
        t.add_row(f"P(x{i})", " ".join(f"{p:.4g}" for p in m))
    if r.marginals and len(r.marginals) > 20:
        t.add_row("", f"({len(r.marginals) - 20} more variables: use --json or --uai-output)")
    out().print(t)


def method(r: Result) -> str:
    """What was run, as the literature names it."""
    text = "exact BE" if r.z is None else f"MBE(z={r.z})" + (" (exact)" if r.exact else "")
    if r.search:
        text += " + FGLP + local search + AND/OR search"
    return text + (" + distribute pass" if r.task == "MAR" else "")


def _fmt(x) -> str:
    if x is None:
        return "none"
    return f"{x:.9g}" if isinstance(x, float) else str(x)


@main.command("info")
@click.argument("file")
@click.option("--evidence", type=str, default=None)
@click.option("--order", default="minfill", show_default=True)
@click.option("--tables", type=click.Choice(TABLES), default="auto", show_default=True)
@click.option("--z", type=click.IntRange(min=1), default=None, help="As for solve: the schedule with this z.")
@click.option("--time-limit", type=click.FloatRange(min=0), default=None, help="As for solve.")
@click.option("--mem-limit", type=SizeParam(), default=None, help="As for solve.")
def info_cmd(file, evidence, order, tables, z, time_limit, mem_limit):
    """Sizes, induced widths, predicted memory of BE and MBE(z), and the anytime schedule solve would run."""
    import parsers
    from parsers.errors import ParseError
    from rich.table import Table

    from .model import ModelError
    from .plan import BudgetError, build_plan
    from .solve import Options, available_memory, make_schedule
    try:
        problem = parsers.read(file, evidence)
        g = graph.primal_graph(problem)
        n_comp = len(graph.components(g))
        orders = {m: graph.elimination_order(problem, m, g) for m in graph.ORDERINGS}
        if order not in orders:
            orders[order] = graph.read_order(order, len(problem.variables))
    except (ParseError, OrderError) as e:
        err().print(str(e), markup=False, soft_wrap=True)
        sys.exit(EXIT_INPUT)
    except (ModelError, ValueError) as e:
        err().print(f"{file}: {e}", markup=False, soft_wrap=True)
        sys.exit(EXIT_INPUT)
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
    out().print(build_plan(problem, orders[order], None, n_comp, tables).describe(), markup=False)
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
        from .preprocess import preprocess
        reduced = preprocess(problem)  # solve plans the reduced problem (same graph, so same order)
        if reduced.infeasible:
            out().print("schedule: none (preprocessing proves the problem infeasible)")
            return
        options = Options(z=z, order=order, tables=tables, time_limit=time_limit, mem_limit=mem_limit)
        budget = mem_limit if mem_limit is not None else available_memory()
        try:
            schedule = make_schedule(reduced.problem, orders[order], options, budget, n_comp, "numpy")
        except (BudgetError, ValueError) as e:
            out().print(f"schedule: none ({e})", markup=False)
        else:
            out().print("schedule (CPU engine; on the GPU elimination phases are predicted faster):")
            out().print(schedule.describe(), markup=False)


@main.command("generate")
@click.argument("topology", type=click.Choice(TOPOLOGIES))
@click.option("-n", "--variables", "n", type=int, default=10, show_default=True)
@click.option("-d", "--domain", "d", type=int, default=10, show_default=True)
@click.option("--p1", type=float, default=0.3, show_default=True, help="Density (random topology).")
@click.option("--p2", type=float, default=0.5, show_default=True, help="Tightness: share of forbidden entries.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Output .wcsp (default: TOPOLOGY-nN-dD-sSEED.wcsp).")
def generate_cmd(topology, n, d, p1, p2, seed, output):
    """Write a random binary WCSP (GpuBE section 8.1 recipes)."""
    from parsers.write import write_wcsp

    from .generate import generate
    try:
        problem = generate(topology, n, d, p1, p2, seed)
    except GenerateError as e:
        err().print(f"generate: {e}", markup=False)
        sys.exit(EXIT_INPUT)
    path = output or f"{problem.name}.wcsp"
    write_wcsp(problem, path)
    err().print(f"wrote {path}: {n} variables, {len(problem.functions)} cost functions", markup=False)


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
    import parsers
    from parsers.errors import ParseError

    from .dcop import DcopError, solve_dcop
    from .plan import BudgetError
    from .scaleout import ClusterError
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
        print(json.dumps(result.to_json()))
        return
    from rich.table import Table
    r, m = result, result.messages
    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold")
    t.add_column()
    t.add_row("file", r.file)
    t.add_row("algorithm", "DPOP" if r.max_dim is None else f"ADPOP (max-dim {r.max_dim})")
    t.add_row("status", r.status)
    t.add_row("lower bound", _fmt(r.lower_bound))
    t.add_row("upper bound", _fmt(r.upper_bound))
    t.add_row("agents", f"{r.agents} holding {r.variables} variables, induced width {r.induced_width}")
    t.add_row("messages", f"{m['util']} UTIL ({m['util_entries']:,} entries, largest {m['largest_util']:,}), "
                          f"{m['value']} VALUE ({m['value_entries']:,} values)")
    t.add_row("executor", f"{r.executor}, started in {r.cluster_s:.2f} s; engines {', '.join(r.engines)}")
    t.add_row("time", f"wall {r.wall_s:.3f} s, simulated {r.simulated_s:.6f} s (UTIL phase {r.util_simulated_s:.6f} s, "
                      f"latency {r.latency_s:g} s per message), computations {r.compute_s:.6f} s in all, "
                      f"pseudo tree {r.pseudo_tree_s:.3f} s")
    if r.assignment is not None:
        t.add_row("assignment", " ".join(map(str, r.assignment[:200])) + (" ..." if len(r.assignment) > 200 else ""))
    out().print(t)


def _fail(file: str, message: str, code: int, as_json: bool):
    if as_json:
        print(json.dumps({"file": file, "status": "error", "message": message}))
    err().print(message, markup=False, soft_wrap=True)
    sys.exit(code)


@main.command("batch")
@click.argument("folder", type=click.Path(exists=True, file_okay=False))
@solve_options
@click.option("--out", "out_path", type=click.Path(dir_okay=False), default="results.jsonl", show_default=True)
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Spread instances over a LocalCluster of this many Dask worker processes.")
@click.option("--scheduler", default=None, help="Spread instances over a running Dask cluster (tcp://host:8786).")
def batch_cmd(folder, evidence, out_path, workers, scheduler, **solve_kw):
    """Solve every instance under FOLDER, one JSON line each; re-running resumes."""
    import parsers
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from .solve import Options
    options = Options(**solve_kw)
    files = sorted(str(p) for p in Path(folder).rglob("*")
                   if p.is_file() and p.name.endswith(parsers.SUPPORTED_SUFFIXES))
    done = _already_done(out_path)
    todo = [f for f in files if f not in done]
    records = [done[f] for f in files if f in done]
    err().print(f"{len(files)} instances, {len(files) - len(todo)} already in {out_path}", markup=False)
    if workers or scheduler:  # over Dask workers: gpusolve/scaleout.py
        from .scaleout import ClusterError, batch_on_dask
        try:
            records += batch_on_dask(todo, options, evidence or None, out_path, scheduler, workers, batch_record)
        except ClusterError as e:
            err().print(str(e), markup=False, soft_wrap=True)
            sys.exit(EXIT_INPUT)
        print_summary(records)
        return
    bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                   TimeElapsedColumn(), console=err(), transient=True, disable=not err().is_terminal)
    with bar, open(out_path, "a") as sink:
        if sink.tell() and not _ends_with_newline(out_path):
            sink.write("\n")  # a line cut short by a killed run stays alone on its line
        task = bar.add_task("solving", total=len(todo))
        for f in todo:
            bar.update(task, description=os.path.basename(f))
            record = batch_record(f, options, evidence if evidence else None)
            sink.write(json.dumps(record) + "\n")
            sink.flush()
            records.append(record)
            bar.advance(task)
    print_summary(records)


def batch_record(f: str, options: Options, evidence: str | None) -> dict:
    """One batch line: the result, or the failure recorded (a bug must not stop the batch)."""
    try:
        return solve_file(f, options, evidence).to_json()
    except Failure as e:
        return {"file": f, "status": e.status, "message": str(e)}
    except Exception as e:
        return {"file": f, "status": "error", "message": f"{type(e).__name__}: {e}"}


def _ends_with_newline(path: str) -> bool:
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


def _already_done(path: str) -> dict[str, dict]:
    done = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    rec = json.loads(line)
                    done[rec["file"]] = rec
                except (json.JSONDecodeError, KeyError, TypeError):
                    continue  # a line cut short by a killed run: solve that file again
    return done


def print_summary(records: list[dict]) -> None:
    from rich.table import Table
    t = Table(title="batch summary")
    for c in ("file", "status", "lower", "upper", "z", "time s"):
        t.add_column(c, justify="right" if c != "file" else "left")
    counts: dict[str, int] = {}
    for r in records:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
        t.add_row(os.path.basename(r["file"]), r["status"], _fmt(r.get("lower_bound")),
                  _fmt(r.get("upper_bound")), str(r.get("z")), f"{r.get('time_s', 0):.2f}")
    out().print(t)
    out().print(", ".join(f"{k}: {v}" for k, v in sorted(counts.items())))


if __name__ == "__main__":
    main()
