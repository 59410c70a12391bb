"""`gpusolve dcop FILE`: DPOP or ADPOP, each agent's computation a Dask task."""
from __future__ import annotations

import functools
import os

import click

from gpusolve.cli.common import EXIT_INPUT, EXIT_MEMORY, SizeParam, report_failure, fmt_bound, one_line, out, progress_bar
from gpusolve.cuda.runtime import DeviceError
from gpusolve.engines.select import DEVICES
from gpusolve.host import BudgetError
from gpusolve.report import dumps


@click.command("dcop")
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

    from gpusolve.distributed.cluster import ClusterError
    try:
        problem = parsers.read(file)
        with progress_bar(not as_json, "agents") as (factory, _, _):
            progress = None if factory is None else (lambda total: functools.partial(factory(total), 1))
            result = solve_dcop(problem, algo, max_dim, device, scheduler, workers, latency, file, progress,
                                mem_limit)
    except ParseError as e:
        report_failure(file, str(e), EXIT_INPUT, as_json)
    except BudgetError as e:
        report_failure(file, f"{file}: {e}", EXIT_MEMORY, as_json)
    except (DcopError, ClusterError, DeviceError) as e:
        report_failure(file, f"{file}: {e}", EXIT_INPUT, as_json)
    except Exception as e:  # a worker's failure or a bug: one line (GPUSOLVE_DEBUG=1 shows the traceback)
        if os.environ.get("GPUSOLVE_DEBUG"):
            raise
        report_failure(file, f"{file}: {type(e).__name__}: {e}", 1, as_json)
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
    t.add_row("lower bound", fmt_bound(r.lower_bound))
    t.add_row("upper bound", fmt_bound(r.upper_bound))
    t.add_row("agents", f"{r.agents} holding {r.variables} variables, induced width {r.induced_width}")
    t.add_row("messages", f"{m['util']} UTIL ({m['util_entries']:,} entries, largest {m['largest_util']:,}), "
                          f"{m['value']} VALUE ({m['value_entries']:,} values)")
    t.add_row("executor", f"{r.executor}, started in {r.cluster_s:.2f} s; engines {', '.join(r.engines)}")
    t.add_row("time", f"wall {r.wall_s:.3f} s, simulated {r.simulated_s:.6f} s (UTIL phase {r.util_simulated_s:.6f} s, "
                      f"latency {r.latency_s:g} s per message), computations {r.compute_s:.6f} s in all, "
                      f"pseudo tree {r.pseudo_tree_s:.3f} s" + (f", repair {r.repair_s:.3f} s" if r.message else ""))
    if r.assignment is not None:
        t.add_row("assignment", one_line(r.values or r.assignment))
    out().print(t, markup=False)
