"""The `gpusolve` command group: how every command reports usage errors, Ctrl-C and a reader gone,
and the commands it holds (one module each in gpusolve/cli/)."""
from __future__ import annotations

import sys

import click

import importlib

from gpusolve import __version__
from gpusolve.cli import solve
from gpusolve.cli.common import EXIT_INTERRUPT, reader_gone, err
from gpusolve.report import dumps


# The commands but `solve`, imported when named (click's lazily loaded subcommands): a solve does not pay
# for their modules (20 ms of its start, dev box).
LAZY = {"info": ("info", "info_cmd"), "generate": ("generate", "generate_cmd"),
        "generate-csp": ("generate", "generate_csp_cmd"), "batch": ("batch", "batch_cmd"),
        "dcop": ("dcop", "dcop_cmd"), "csg": ("csg", "csg_cmd"), "serve": ("serve", "serve_cmd")}


class Commands(click.Group):
    """Usage errors as one line on stderr (and, with --json, an error object on stdout), exit 2;
    Ctrl-C outside a solve exits 130 without click's "Aborted!"; a reader of stdout gone (`| head`)
    ends the command quietly with 141."""

    def list_commands(self, ctx):
        return sorted({*super().list_commands(ctx), *LAZY})

    def get_command(self, ctx, name):
        if name in LAZY and name not in self.commands:
            module, attr = LAZY[name]
            self.add_command(getattr(importlib.import_module(f"gpusolve.cli.{module}"), attr))
        return super().get_command(ctx, name)

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
            reader_gone()

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except BrokenPipeError:  # before click's own handling, which exits 1
            reader_gone()


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", package_name="gpusolve")
def main():
    """gpusolve: bucket and mini-bucket elimination for WCSP, UAI and XCSP instances."""


main.add_command(solve.solve_cmd)


if __name__ == "__main__":
    main()
