"""The bucket profile of a plan as a picture (`gpusolve info FILE --plot out.png`).

One bar per mini-bucket along the elimination order: the bytes of its output
table on a log scale, dense, sparse (at the plan's row bound) or streamed (larger
than the device budget, so the GPU engine moves it through host memory), with
the memory budget as a line. matplotlib is an optional extra (`pip install
gpusolve[plot]`), imported only here.
"""
from __future__ import annotations

from pathlib import Path

from gpusolve.plan.buckets import Plan
from gpusolve.host import fmt_bytes

SPARSE_ROW_BYTES = 16  # an int64 key and an int64 cost


def table_bytes(plan: Plan, mb) -> int:
    return mb.rows * SPARSE_ROW_BYTES if mb.sparse else mb.out_entries * plan.itemsize


def plot_profile(plan: Plan, path: str | Path, budget: int, width: int, gpu_budget: int | None = None,
                 title: str = "") -> None:
    """Write the profile to `path` (any format matplotlib writes: .png, .svg, .pdf).

    `width` is the order's induced width, as `info` prints it: an MBE plan's own width is that of
    its mini-buckets, at most z - 1, and the title gives it apart."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    sizes = [max(table_bytes(plan, mb), 1) for mb in plan.minibuckets]
    fig, ax = plt.subplots(figsize=(9, 4))
    for sparse, colour in ((False, "tab:blue"), (True, "tab:green")):
        for streamed in (False, True):
            xs = [i for i, (mb, size) in enumerate(zip(plan.minibuckets, sizes))
                  if mb.sparse == sparse and (gpu_budget is not None and size > gpu_budget) == streamed]
            if xs:
                label = ("sparse (row bound)" if sparse else "dense") + (", streamed" if streamed else "")
                ax.bar(xs, [sizes[i] for i in xs], width=0.9, color=colour, hatch="//" if streamed else None,
                       edgecolor="tab:red" if streamed else colour, label=f"{label} ({len(xs)})")
    ax.axhline(budget, color="black", linestyle="--", label=f"memory budget {fmt_bytes(budget)}")
    if gpu_budget is not None:
        ax.axhline(gpu_budget, color="tab:red", linestyle=":", label=f"device budget {fmt_bytes(gpu_budget)}")
    ax.set_yscale("log")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # mini-buckets are counted
    ax.set_xlabel("mini-bucket, in elimination order")
    ax.set_ylabel("output table bytes")
    kind = "exact BE" if plan.z is None else f"MBE(z={plan.z})"
    messages = "" if plan.z is None else f", messages of at most {plan.induced_width} variables"
    ax.set_title(f"{title}: {kind}, induced width {width}{messages}, peak {fmt_bytes(plan.peak_bytes)}")
    ax.legend(loc="upper left", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
