"""The one JSON object every command reports per file, whatever the status (gpusolve/schema.json).

`record(file, status, ...)` builds it with every field present, null where unknown, so `solve
--json`, `batch` and any later command write the same shape; tests validate it against the schema.
`dumps` is the one writer: strict JSON (RFC 8259 has no Infinity or NaN), so every parser reads it.
"""
from __future__ import annotations

import json
import math
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
    return finite(out)


def finite(value):
    """`value` with every infinite or NaN float as None, in nested dicts and lists too: JSON has no
    number for them, and the status and message say what a null bound means (schema.json)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def dumps(obj) -> str:
    """One JSON text for a record, fields added after record() included; never Infinity or NaN."""
    return json.dumps(finite(obj), allow_nan=False)


def of_result(result, **override) -> dict:
    """record() of a command's result object (its to_json(), with `override` on top)."""
    fields = {**result.to_json(), **override}
    return record(fields.pop("file"), fields.pop("status"), **fields)
