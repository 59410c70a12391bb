"""`gpusolve solve FILE`: one instance, its result as a table or one JSON object, and the files it writes."""
from __future__ import annotations

import signal
import sys
from typing import TYPE_CHECKING

import click

from gpusolve.cli.common import (EXIT_INPUT, EXIT_INTERRUPT, Failure, SizeParam, dask_options, err, fmt_bound,
                                 interruptible, one_line, out, progress_bar, solve_file, solve_options)
from gpusolve.engines import registry
from gpusolve.host import fmt_bytes
from gpusolve.parsers import COMPRESSIONS, FORMATS, READERS
from gpusolve.report import dumps

if TYPE_CHECKING:
    from gpusolve.schedule.solve import Result


# The formats and compressions are parsers' table: the command line keeps no copy of it.
SOLVE_HELP = f"""Solve FILE ({", ".join(READERS)}, optionally {"/".join(COMPRESSIONS)}; - reads standard input).

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


@click.command("solve", help=SOLVE_HELP)
@click.argument("file")
@solve_options
@click.option("--format", "fmt", type=click.Choice(FORMATS), default=None,
              help="Input format when FILE is - (standard input) or its suffix says otherwise.")
@click.option("--solution", type=click.Path(dir_okay=False), default=None,
              help="Write the assignment in toulbar2's solution format.")
@click.option("--uai-output", type=click.Path(dir_okay=False), default=None,
              help="Write the UAI competition result file (MPE, PR or MAR format).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout, nothing else.")
@dask_options("Exact BE's largest buckets in slices, and AND/OR search subproblems,")
@click.option("--slice-min", type=SizeParam(), default=None,
              help="With --workers or --scheduler: exact BE slices each bucket whose joint table exceeds this "
                   "(e.g. 4G) over the workers; default: the device budget of one GPU, else the memory budget.")
@click.option("--no-serve", is_flag=True,
              help="Solve in this process even when `gpusolve serve` is running (as GPUSOLVE_NO_SERVE=1).")
def solve_cmd(file, evidence, fmt, solution, uai_output, as_json, no_serve, **solve_kw):
    from gpusolve.cli.outputs import check_outputs, clear_outputs
    from gpusolve.report import record
    from gpusolve.schedule.solve import Options
    options = Options(**solve_kw)

    def fail(message: str, code: int, status: str = "error"):
        if as_json:
            print(dumps(record(file, status, message=message, options={**options.settings(), "evidence": evidence})))
        err().print(message, markup=False, soft_wrap=True)
        sys.exit(code)

    problem = check_outputs(file, fmt, solution, uai_output, (evidence, options.order)) \
        or clear_outputs(("--solution", solution), ("--uai-output", uai_output))  # before any work
    if problem:
        fail(problem, EXIT_INPUT)
    try:
        until_proof = options.time_limit is None and options.search
        with progress_bar(not as_json, "eliminating", until_proof) as (factory, on_bounds, on_phase), \
                interruptible() as stop:
            if on_phase:
                on_phase("reading")
            result = solve_file(file, options, evidence, factory, on_bounds, stop, fmt, on_phase)
    except Failure as f:
        fail(str(f), f.code, f.status)
    result.options = {**result.options, "evidence": evidence} if result.options else None
    if as_json and result.device_note and options.device == "auto" and registry.ran_on_host(result.engine):
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
    from gpusolve.parsers.uai import write_uai_result
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
    t.add_row("lower bound", fmt_bound(r.lower_bound))
    t.add_row("upper bound", fmt_bound(r.upper_bound))
    if r.lower_bound is not None and r.upper_bound is not None:
        t.add_row("gap", fmt_bound(r.upper_bound - r.lower_bound))
    t.add_row("method", r.method or "none")
    if r.z is not None:
        t.add_row("z", str(r.z))
    t.add_row("induced width", fmt_bound(r.induced_width) + (" (of the elimination order)" if r.z is not None else ""))
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
    elif r.search:  # AND/OR search, the compiled search beside it, or the compiled search alone
        s, core = r.search, r.search.get("dfbb")
        done = [f"{s['nodes']:,} OR nodes, {s['nodes_per_s']:,.0f} per s, {s['cache_hits']:,} cache hits"] \
            if "nodes" in s else []
        if core:
            polish = core.get("polish") or {}
            done.append(f"compiled {core['order']}: {core['nodes']:,} nodes, {core['nodes_per_s']:,.0f} per s"
                        + (f", polished {polish['runs']} times by VNS ({polish['better']} better, "
                           f"{polish['time_s']:.1f} s)" if polish.get("runs") else ""))
        t.add_row("search", "; ".join(done) + (", complete" if s["complete"] else ", stopped"))
    if len(r.trace) > 1:
        t.add_row("bounds over time", "; ".join(f"{tt:.2f} s [{fmt_bound(lo)}, {fmt_bound(hi)}] {ph}"
                                                 for tt, lo, hi, ph in r.trace[-6:]))
    if r.assignment is not None:
        t.add_row("assignment", one_line(r.values or r.assignment))
    for i, m in enumerate((r.marginals or [])[:20]):
        t.add_row(f"P(x{i})", " ".join(f"{p:.4g}" for p in m))
    if r.marginals and len(r.marginals) > 20:
        t.add_row("", f"({len(r.marginals) - 20} more variables: use --json or --uai-output)")
    if r.uai_output:
        t.add_row("uai output", f"{r.uai_output['path']} ({r.uai_output['bound']} bound)"
                  if r.uai_output["bound"] not in ("exact", "none") else r.uai_output["path"])
    out().print(t, markup=False)  # cells are text: a bound's or a name's '[' is no style tag
