"""`gpusolve info FILE`: sizes, induced widths, the plans' predicted memory and the schedule `solve` would run."""
from __future__ import annotations

import sys

import click

from gpusolve.cli.common import EXIT_INPUT, EXIT_MEMORY, Seconds, SizeParam, err, out
from gpusolve.engines import registry
from gpusolve.host import BudgetError, fmt_bytes
from gpusolve.order import graph
from gpusolve.order.graph import OrderError
from gpusolve.plan.buckets import TABLES


@click.command("info")
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
    from gpusolve.plan.buckets import build_plan, place

    from gpusolve.schedule.solve import Options, elimination_order, make_schedule
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
        from gpusolve.schedule.anytime import exact_predictions
        reduced = preprocess(problem)  # solve plans the reduced problem
        if reduced.infeasible:
            out().print("schedule: none (preprocessing proves the problem infeasible)")
            return
        out().print(f"preprocessing: {reduced.removed} values removed, {len(reduced.functional)} variables "
                    "eliminated as functions of others (functional elimination)")
        planned, n_left = orders[order], n_comp
        if reduced.functional:  # the graph changed: solve orders (and counts the components of) the one left
            left = graph.primal_graph(reduced.problem)
            planned, n_left = elimination_order(reduced.problem, order, left), len(graph.components(left))
        if workers:
            print_slicing(build_plan(reduced.problem, planned, None, n_left, tables), reduced.problem.domains,
                          workers, slice_min, mem_limit)
        options = Options(z=z, order=order, tables=tables, time_limit=time_limit, mem_limit=mem_limit)
        budget = mem_limit if mem_limit is not None else available_memory()
        try:
            schedule = make_schedule(reduced.problem, planned, options, budget, n_left,
                                     registry.for_place(on_device=False))
        except (BudgetError, ValueError) as e:
            out().print(f"schedule: none ({e})", markup=False)
        else:
            out().print("schedule (CPU engine; on the GPU elimination phases are predicted faster):")
            out().print(schedule.describe(), markup=False)
            out().print("exact methods (CPU engine):")
            lines = exact_predictions(reduced.problem, planned, budget, schedule.engine, schedule.threads,
                                      n_left) + list(schedule.choice)
            out().print("\n".join(f"  {line}" for line in lines), markup=False)


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
