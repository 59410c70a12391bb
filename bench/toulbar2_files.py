"""toulbar2's own files through gpusolve and pytoulbar2: its tutorials, examples and validation sets.

Every .cfn and .wcsp (plain, .gz or .xz) in web/TUTORIALS, web/EXAMPLES, validation/default and
validation/decomposable of a copy of toulbar2's repository ($GPUSOLVE_TOULBAR2, default
../cache/toulbar2 beside the checkout): gpusolve's status, value and time (`python -m gpusolve solve F
--json --time-limit T`, a fresh process), pytoulbar2's value, whether it proved it, and its time (a
fresh process too), the `.ub` file's value (toulbar2's optimum for its validation runs) and the
reference they give. Writes bench/results/toulbar2_files-<cpu>-<date>.json and .md.
tests/test_toulbar2_files.py checks the same outcomes with these helpers.

toulbar2 misreads one kind of table: a dense one of arity > 3 whose least cost is not 0 has that
cost counted twice (tb2reader.cpp, readNaryCostFunction shifts neither the tuples nor the default
but takes the least cost off the lower bound). Its value for such a file (and the .ub made from
it) is not the file's optimum; the reference is then pytoulbar2's on the same model with those
tables written sparse (`toulbar2_form`).
"""
from __future__ import annotations

import argparse
import gzip
import itertools
import json
import lzma
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, cpu_name, write_result  # noqa: E402

FOLDERS = ("web/TUTORIALS", "web/EXAMPLES", "validation/default", "validation/decomposable")
FORMATS = (".cfn", ".wcsp")
COMPRESSIONS = {"": open, ".gz": gzip.open, ".xz": lzma.open}
QUICK = ("web/TUTORIALS/simple.cfn", "web/TUTORIALS/latin4.cfn", "validation/default/alarm.cfn.gz",
         "validation/default/max.cfn", "validation/default/example.wcsp")
TOULBAR2 = """import json, sys, time, pytoulbar2
t = time.perf_counter()
c = pytoulbar2.CFN(verbose=-1)
try:
    c.Read(sys.argv[1])
    r = c.Solve(timeLimit=int(sys.argv[2]))
    out = {"value": None if r is None else r[1], "proved": r is None or c.GetDDualBound() >= r[1] - 1e-9}
except pytoulbar2.pytb2.Contradiction:
    out = {"value": None, "proved": True}
print(json.dumps({**out, "time_s": time.perf_counter() - t}))
"""


def toulbar2_root() -> Path:
    return Path(os.environ.get("GPUSOLVE_TOULBAR2") or ROOT.parent / "cache" / "toulbar2")


def split(path: Path) -> tuple[str, str, str]:
    """(stem, format, compression): `alarm.cfn.gz` -> (alarm, .cfn, .gz)."""
    name, compression = path.name, ""
    for suffix in (".gz", ".xz"):
        if name.endswith(suffix):
            name, compression = name[:-len(suffix)], suffix
    stem, _, fmt = name.rpartition(".")
    return stem, f".{fmt}", compression


def instances(root: Path) -> list[str]:
    """The files read, relative to `root`, sorted."""
    return sorted(str(p.relative_to(root)) for folder in FOLDERS if (root / folder).is_dir()
                  for p in (root / folder).iterdir() if p.is_file() and split(p)[1] in FORMATS)


def ub(path: Path) -> str | None:
    """The value in toulbar2's `.ub` file beside `path`, as written."""
    beside = path.with_name(split(path)[0] + ".ub")
    return beside.read_text().split()[0] if beside.is_file() and beside.read_text().split() else None


def toulbar2_form(path: Path, folder: Path) -> Path | None:
    """`path` rewritten in `folder` with its dense tables of arity > 3 sparse (every tuple listed, by
    index), when it has one that toulbar2 misreads (least cost not 0); None otherwise (nor for a CFN
    file that is not strict JSON: toulbar2's own are)."""
    stem, fmt, compression = split(path)
    if fmt != ".cfn":
        return None
    try:
        with COMPRESSIONS[compression](path, "rt") as f:
            doc = json.load(f)
    except ValueError:
        return None
    sizes = {k: v if isinstance(v, int) else len(v) for k, v in doc["variables"].items()}
    changed = False
    for name, f in doc["functions"].items():
        costs = f.get("costs")
        if len(f["scope"]) > 3 and "defaultcost" not in f and isinstance(costs, list) and min(map(float, costs)):
            tuples = itertools.product(*(range(sizes[v]) for v in f["scope"]))
            doc["functions"][name] = {"scope": f["scope"], "defaultcost": 0,  # the order toulbar2 requires
                                      "costs": [x for t, c in zip(tuples, costs) for x in (*t, c)]}
            changed = True
    if not changed:
        return None
    out = folder / f"{stem}-sparse.cfn"
    out.write_text(json.dumps(doc))
    return out


def run_toulbar2(path: Path, time_limit: int) -> dict:
    """pytoulbar2's value (None: infeasible), whether it proved it, and its time; `error` when it
    could not read the file."""
    p = subprocess.run([sys.executable, "-c", TOULBAR2, str(path), str(time_limit)], capture_output=True, text=True)
    if p.returncode != 0:
        return {"value": None, "proved": False, "time_s": None, "error": p.stderr.strip().splitlines()[-1]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def run_gpusolve(path: Path, time_limit: float) -> dict:
    """gpusolve's exit code, status, bounds, message (an error's one line) and wall time, in a fresh
    process; `traceback` when its standard error holds one."""
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "gpusolve", "solve", str(path), "--json", "--time-limit",
                        str(time_limit)], capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t
    try:
        out = json.loads(p.stdout)
    except ValueError:
        out = {}
    return {"rc": p.returncode, "status": out.get("status"), "value": out.get("upper_bound"),
            "lower": out.get("lower_bound"), "message": out.get("message"), "time_s": wall,
            "stderr": p.stderr.strip().splitlines(), "traceback": "Traceback" in p.stderr}


def reference(path: Path, toulbar2: dict, folder: Path, time_limit: int) -> tuple[float | None, str | None]:
    """The file's optimum (None: infeasible) and where it comes from: pytoulbar2 on the form it reads
    right, else pytoulbar2's proved value, else the .ub file; (None, None) when none is known."""
    rewritten = toulbar2_form(path, folder)
    if rewritten is not None:
        run = run_toulbar2(rewritten, time_limit)
        if run.get("proved"):
            return run["value"], "pytoulbar2 (wide tables sparse)"
    elif toulbar2.get("proved"):
        return toulbar2["value"], "pytoulbar2"
    bound = ub(path)
    return (float(bound), ".ub") if bound is not None else (None, None)


def agrees(got, expected, tolerance=1e-6) -> bool:
    return (got is None) == (expected is None) and (got is None or abs(got - expected) <= tolerance)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    ap.add_argument("--time-limit", type=int, default=60, help="seconds for each solver on each file")
    ap.add_argument("--jobs", type=int, default=1, help="files solved at once (1: times as a lone user meets them; "
                                                         "more share the cores and the GPU)")
    args = ap.parse_args()
    root = toulbar2_root()
    names = [n for n in instances(root) if not args.quick or n in QUICK]
    scratch = Path(os.environ.get("TMPDIR", "/tmp")) / f"toulbar2_files-{os.getpid()}"
    scratch.mkdir(exist_ok=True)

    def one(name: str) -> dict:
        path = root / name
        ours, theirs = run_gpusolve(path, args.time_limit), run_toulbar2(path, args.time_limit)
        value, source = reference(path, theirs, scratch, args.time_limit)
        row = {"file": name, "gpusolve": {k: ours[k] for k in ("rc", "status", "value", "lower", "message",
                                                              "time_s", "traceback")},
               "pytoulbar2": theirs, "ub": ub(path), "reference": value, "reference_from": source}
        row["agrees"] = (ours["status"] == "optimal" and source is not None and agrees(ours["value"], value))
        print(f"{name}: gpusolve {ours['status']} {ours['value']} ({ours['time_s']:.1f} s), pytoulbar2 "
              f"{theirs.get('value')} proved {theirs.get('proved')}, .ub {row['ub']}, reference {value} ({source})",
              flush=True)
        return row

    with ThreadPoolExecutor(args.jobs) as pool:  # each job is two child processes, one after the other
        rows = list(pool.map(one, names))
    note = None if root.is_dir() else f"no copy of toulbar2's repository at {root} (set GPUSOLVE_TOULBAR2)"
    record = write_result("toulbar2_files", cpu_name(), time_limit_s=args.time_limit, jobs=args.jobs,
                          root=str(root), note=note, rows=rows)
    record.with_suffix(".md").write_text(markdown(rows, args.time_limit, args.jobs))
    print(f"wrote {record.with_suffix('.md')}")


def markdown(rows: list[dict], time_limit: int, jobs: int = 1) -> str:
    """The table: file, gpusolve's status/value/time, pytoulbar2's value/time, the .ub, the reference."""
    def cell(x):
        return "" if x is None else str(x)

    def seconds(x):
        return "" if x is None else f"{x:.1f}"

    lines = [f"time limit {time_limit} s per solver and file, {jobs} file(s) at once; gpusolve's value is its upper bound, the "
             "reference is the file's optimum (see bench/toulbar2_files.py)", "",
             "| file | gpusolve status | gpusolve value | gpusolve s | pytoulbar2 value | proved | pytoulbar2 s "
             "| .ub | reference (from) | note |", "|" + "---|" * 10]
    for r in rows:
        ours, theirs = r["gpusolve"], r["pytoulbar2"]
        note = ours["message"].split(": ", 1)[1] if ours["rc"] == 2 and ours["message"] else ""
        lines.append(f"| {r['file']} | {ours['status']} | {cell(ours['value'])} | {seconds(ours['time_s'])} "
                     f"| {'error' if 'error' in theirs else cell(theirs['value'])} | {theirs['proved']} "
                     f"| {seconds(theirs['time_s'])} | {cell(r['ub'])} "
                     f"| {cell(r['reference'])} ({r['reference_from'] or '-'}) | {note} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
