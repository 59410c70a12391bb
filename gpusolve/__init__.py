"""gpusolve: bucket and mini-bucket elimination, AND/OR search, for WCSP, UAI, XCSP and CFN models.

    import gpusolve
    problem = gpusolve.read("net.uai")            # or gpusolve.Model() built in Python
    result = gpusolve.solve(problem, z=10, time_limit=60)
    result.status, result.lower_bound, result.upper_bound, result.assignment

Importing the package loads nothing heavy (no NumPy): each name below imports what it needs when
first used, so `import gpusolve.cli.group` stays fast.
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"
__all__ = ["Limits", "Model", "Options", "ParseError", "Problem", "Result", "__version__", "read", "solve", "write"]

# name -> module that defines it (`solve` is that module's `run`)
_LAZY = {"Limits": "limits", "Model": "build", "Options": "schedule.solve", "Result": "schedule.solve",
         "Problem": "model.problem", "ParseError": "parsers", "write": "parsers", "solve": "schedule.solve"}


def read(path, evidence=None, format: str | None = None, limits=None):
    """The problem in `path` (.wcsp, .uai, .xml, .cfn, optionally .gz/.xz/.bz2; "-" is standard input,
    which needs `format`); for .uai the evidence file FILE.evid beside it is applied when present.
    `limits`: a gpusolve.Limits for the readers (None: the defaults)."""
    from .limits import DEFAULT
    from .parsers import read as _read
    return _read(path, evidence, format, limits=limits or DEFAULT)


def __getattr__(name: str):
    if name in _LAZY:
        module = importlib.import_module(f".{_LAZY[name]}", __name__)
        return module.run if name == "solve" else getattr(module, name)
    raise AttributeError(f"module 'gpusolve' has no attribute {name!r}")
