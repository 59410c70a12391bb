"""The one JSON object every command reports per file, whatever the status (gpusolve/schema.json).

`record(file, status, ...)` builds it with every field present, null where unknown, so `solve
--json`, `batch` and any later command write the same shape; tests validate it against the schema.
"""
from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from . import __version__

SCHEMA_VERSION = 1
SCHEMA_PATH = Path(__file__).with_name("schema.json")


@cache
def schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text())


@cache
def fields() -> tuple[str, ...]:
    """Every field, in the schema's order."""
    return tuple(schema()["properties"])


def record(file: str, status: str, **known) -> dict:
    """The full object: `known` fields as given, every other one null (a command's own extra
    fields follow the schema's)."""
    out = dict.fromkeys(fields())
    out.update(known, schema_version=SCHEMA_VERSION, gpusolve_version=__version__, file=file, status=status)
    return out


def of_result(result, **override) -> dict:
    """record() of a command's result object (its to_json(), with `override` on top)."""
    fields = {**result.to_json(), **override}
    return record(fields.pop("file"), fields.pop("status"), **fields)
