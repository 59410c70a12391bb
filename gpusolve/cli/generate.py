"""`gpusolve generate` (random binary WCSPs) and `gpusolve generate-csp` (N-queens, Langford as XCSP3)."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from gpusolve.cli.common import EXIT_INPUT, EXIT_MEMORY, err
from gpusolve.generate import TOPOLOGIES, GenerateBudget, GenerateError


@click.command("generate")
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
    from gpusolve.parsers import write
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


@click.command("generate-csp")
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
