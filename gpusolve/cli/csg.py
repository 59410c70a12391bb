"""`gpusolve csg`: the optimal coalition structure of a file's or a distribution's values."""
from __future__ import annotations

import os
import time
from contextlib import contextmanager

import click

from gpusolve.cli.common import (EXIT_INPUT, EXIT_MEMORY, SizeParam, dask_options, err, fmt_bound, interruptible, out,
                                 report_failure)
from gpusolve.csg.dp import ALGORITHMS
from gpusolve.csg.solve import PRECISIONS
from gpusolve.csg.values import DISTRIBUTIONS
from gpusolve.cuda.runtime import DeviceError
from gpusolve.engines.select import DEVICES
from gpusolve.host import BudgetError, fmt_bytes
from gpusolve.report import dumps


@click.command("csg")
@click.argument("file", required=False)
@click.option("--generate", "distribution", type=click.Choice(DISTRIBUTIONS), default=None,
              help="Draw the values from a standard CSG distribution instead of reading FILE.")
@click.option("-n", "--agents", "n", type=int, default=None, help="Agents, with --generate.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--write", "write_path", type=click.Path(dir_okay=False), default=None,
              help="Also write the generated values (text, or .npy by its suffix).")
@click.option("--algorithm", type=click.Choice(ALGORITHMS), default="idp", show_default=True,
              help="idp: only the splits IDP needs (about 40% of dp's); dp: every split.")
@click.option("--device", type=click.Choice(DEVICES), default="auto", show_default=True)
@click.option("--precision", type=click.Choice(("auto", *PRECISIONS)), default="auto", show_default=True,
              help="f's values: single (float32, 4 bytes a coalition), double, or auto: single on the GPU, double "
                   "on the CPU engine. A finished double run is optimal; a single one where the values' grid "
                   "(integers, halves...) proves it, else bounded within float32's rounding.")
@click.option("--time-limit", type=click.FloatRange(min=0), default=None,
              help="Seconds; then the best structure found and an upper bound (status bounded).")
@click.option("--mem-limit", type=SizeParam(), default=None, help="Host memory budget; default: available RAM.")
@click.option("--gpu-mem-limit", type=SizeParam(), default=None, help="Device memory budget; default: free memory.")
@click.option("--threads", type=click.IntRange(min=1), default=None,
              help="CPU engine threads (default: one per core; on a Dask worker, its --nthreads).")
@dask_options("Each level's coalitions cut across the workers", ": one per GPU when the GPU is used",
              "; with --workers, its first N; FILE must be readable by every worker at the same path")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout, nothing else.")
def csg_cmd(file, distribution, n, seed, write_path, workers, scheduler, as_json, **options):
    """Optimal coalition structure: FILE holds n then 2^n coalition values (mask order; or a .npy)."""
    from gpusolve.csg.solve import Options, solve
    from gpusolve.csg.values import CSGError, check_agents, generate_values, read_values, write_values
    from gpusolve.parsers.errors import ParseError
    from gpusolve.report import of_result
    from gpusolve.distributed.cluster import ClusterError
    name = file or (f"{distribution}-n{n}-s{seed}" if distribution else "")

    def fail(message, code):
        report_failure(name, message, code, as_json)

    if (file is None) == (distribution is None):
        fail("csg: give a FILE or --generate DISTRIBUTION (one of them)", EXIT_INPUT)
    if distribution is not None and n is None:
        fail("csg: --generate needs -n (the number of agents)", EXIT_INPUT)
    try:
        t0 = time.perf_counter()
        spread = bool(workers or scheduler)
        if file is not None:
            values, phase = read_values(file), "read"
        elif spread and not write_path:  # each worker draws them
            check_agents(n)
            values, phase = None, None
        else:
            values, phase = generate_values(distribution, n, seed), "generate"
            if write_path:
                write_values(write_path, values)
        phases = {phase: time.perf_counter() - t0} if phase else {}
        with csg_progress(not as_json) as progress, interruptible() as stop:
            if spread:
                source = ("file", os.path.abspath(file)) if file else ("generate", distribution, n, seed)
                result = csg_on_workers(values, Options(**options), source, workers, scheduler, name, phases,
                                        progress, stop)
            else:
                result = solve(values, Options(**options), file=name, phases=phases, progress=progress, stop=stop)
    except ParseError as e:
        fail(str(e), EXIT_INPUT)
    except (CSGError, DeviceError, ClusterError) as e:
        fail(f"{name}: {e}", EXIT_INPUT)
    except (BudgetError, MemoryError) as e:
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
        ("file", r.file), ("agents", str(r.n)), ("status", r.status), ("value", fmt_bound(r.value)),
        ("upper bound", fmt_bound(r.upper_bound)), ("gap", fmt_bound(r.upper_bound - r.lower_bound)),
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
    """solve_on_workers on the cluster gpusolve.distributed.cluster.executor opens: with the GPU, one process per
    GPU."""
    from gpusolve.csg.solve import pick_device
    from gpusolve.csg.workers import solve_on_workers, source_agents
    from gpusolve.distributed.cluster import executor
    n = source_agents(source, values)
    # each worker places its levels by the same policy, on its one thread unless --threads
    gpus = pick_device(options.device, n, options.algorithm, options.threads or 1, here=False)[0].on_device
    with executor(scheduler, workers, gpus=gpus) as (client, what, cluster_s):
        phases["cluster"] = cluster_s
        return solve_on_workers(values, options, client, source, workers if scheduler else None, name, phases,
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
