"""`gpusolve batch FOLDER`: every instance solved, one JSON line each, resumable; here one after
another, or over Dask workers, every instance a task, each result written by this process as it arrives.

Results are written one JSON line as each instance finishes, so a worker that dies mid-instance
loses nothing: the scheduler runs the instance again on another worker (an instance whose workers
die `distributed.scheduler.allowed-failures` + 1 times is recorded as an error), and a killed batch
resumes from the lines written, as the serial batch does.
"""
from __future__ import annotations

import json
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import click

from gpusolve.cli.common import (EXIT_INPUT, EXIT_INTERRUPT, Failure, Seconds, dask_options, err, fmt_bound, out,
                                 solve_file, solve_options)
from gpusolve.distributed.cluster import executor
from gpusolve.report import dumps

if TYPE_CHECKING:
    from gpusolve.schedule.solve import Options


EXIT_BATCH_ERROR = 1  # batch: an instance ended in error (its line and the summary say why)


@click.command("batch")
@click.argument("folder", type=click.Path(exists=True, file_okay=False))
@solve_options
@click.option("--out", "out_path", type=click.Path(dir_okay=False), default="results.jsonl", show_default=True)
@dask_options("Instances spread")
@click.option("--resume", is_flag=True, help="Skip instances already in --out whatever options solved them.")
@click.option("--retry-errors", is_flag=True, help="Solve again the instances recorded as error or timeout.")
@click.option("--budget", type=Seconds(), default=None,
              help="Total seconds for the batch: no instance starts after it, each gets at most what is left.")
@click.option("--csv", "as_csv", is_flag=True, help="Also write the summary as CSV beside --out (same name, .csv).")
def batch_cmd(folder, evidence, out_path, resume, retry_errors, budget, as_csv, workers, scheduler, **solve_kw):
    """Solve every instance under FOLDER, one JSON line each (the schema of solve --json).

    Re-running resumes: an instance is skipped when --out holds its resolved path solved with the
    same options (any options with --resume; error and timeout lines are solved again with
    --retry-errors). Evidence is looked up per instance (FILE.uai.evid beside it).

    Exit 0 when no instance ended in error, 1 when one did (the summary says why), 2 for bad usage,
    130 after Ctrl-C: the instance under way is dropped, the summary so far is printed, and the same
    command run again resumes."""
    from gpusolve import parsers
    from gpusolve.schedule.solve import Options
    if evidence:
        raise click.UsageError("--evidence applies to one file: in batch each FILE.uai.evid beside its "
                               "instance is used")
    if budget is not None and (workers or scheduler):
        raise click.UsageError("--budget applies to a batch solved here, not over Dask workers")
    if not Path(out_path).parent.is_dir():
        raise click.UsageError(f"--out {out_path}: folder {Path(out_path).parent} does not exist")
    options = Options(**solve_kw)
    settings = {**options.settings(), "evidence": None}
    files = sorted(str(p.resolve()) for p in Path(folder).rglob("*")
                   if p.is_file() and p.name.endswith(parsers.SUPPORTED_SUFFIXES))
    done = _recorded(out_path, files, None if resume else settings)
    todo = [f for f in files if f not in done or (retry_errors and done[f]["status"] in ("error", "timeout"))]
    err().print(f"{len(files)} instances, {len(files) - len(todo)} already in {out_path}", markup=False)
    start = time.perf_counter()
    interrupted = False
    try:
        with _appender(out_path) as sink:
            if workers or scheduler:
                from gpusolve.distributed.cluster import ClusterError
                try:
                    batch_on_dask(todo, options, settings, sink, scheduler, workers, batch_record)
                except ClusterError as e:
                    err().print(str(e), markup=False, soft_wrap=True)
                    sys.exit(EXIT_INPUT)
            else:
                _batch_here(todo, options, settings, budget, sink)
    except KeyboardInterrupt:


        interrupted = True
    records = list(_recorded(out_path, files, None if resume else settings).values())
    print_summary(records, time.perf_counter() - start)
    if as_csv:
        write_csv(Path(out_path).with_suffix(".csv"), records)
    if interrupted:
        err().print(f"interrupted: {len(records)} of {len(files)} instances are in {out_path}; "
                    "run the same command again to resume", markup=False, soft_wrap=True)
        sys.exit(EXIT_INTERRUPT)
    if any(r["status"] == "error" for r in records):
        sys.exit(EXIT_BATCH_ERROR)


def _batch_here(todo: list[str], options, settings: dict, budget: float | None, sink) -> None:
    """Solve `todo` in this process, one after another, each line written to `sink` as it ends; with
    a `budget` (seconds), no instance starts after it and each gets at most what is left."""
    import dataclasses

    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    start = time.perf_counter()
    bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                   TimeElapsedColumn(), console=err(), transient=True, disable=not err().is_terminal)
    with bar:
        task = bar.add_task("solving", total=len(todo))
        for i, f in enumerate(todo):
            left = None if budget is None else budget - (time.perf_counter() - start)
            if left is not None and left <= 0:
                err().print(f"budget of {budget:g} s spent: {len(todo) - i} instances not started", markup=False)
                return
            limit = options.time_limit if left is None else min(options.time_limit or left, left)
            bar.update(task, description=os.path.basename(f))
            rec = batch_record(f, dataclasses.replace(options, time_limit=limit), settings)
            sink.write(dumps(rec) + "\n")
            sink.flush()
            bar.advance(task)


def batch_on_dask(files: list[str], options: Options, settings: dict, sink, scheduler: str | None,
                  workers: int | None, record: Callable[[str, Options, dict], dict],
                  progress: Callable[[], None] | None = None) -> list[dict]:
    """Solve `files` on Dask workers (`record(file, options, settings)` on each), writing each
    result to the open `sink` as it arrives. Returns the records in the order they finished.
    Each solve's CPU engine runs one thread unless --threads says otherwise: the workers are the
    parallelism."""
    from dataclasses import replace

    from dask.distributed import as_completed

    from gpusolve.report import dumps, record as failed
    out: list[dict] = []
    options = replace(options, threads=options.threads or 1)
    with executor(scheduler, workers, gpus=options.device == "gpu") as (client, _, _):
        futures = {client.submit(record, f, options, settings, key=f"solve-{f}-{time.time_ns()}",
                                 pure=False, retries=0): f for f in files}
        for future in as_completed(futures):
            f = futures[future]
            try:
                rec = future.result()
            except Exception as e:  # KilledWorker (its workers kept dying), or a bug in a worker
                rec = {**failed(f, "error", message=f"{type(e).__name__}: {e}"), "options": settings}
            sink.write(dumps(rec) + "\n")
            sink.flush()
            out.append(rec)
            if progress:
                progress()
    return out


@contextmanager
def _appender(path: str):
    """--out opened for appending, a partial last line (a run killed mid-write) cut off first."""
    try:
        with open(path, "ab+") as f:
            _cut_partial_line(f)
        sink = open(path, "a", encoding="utf-8")
    except OSError as e:
        raise click.UsageError(f"--out {path}: {e.strerror or e}") from None
    with sink:
        yield sink


def _cut_partial_line(f, block: int = 1 << 20) -> None:
    """Truncate a binary file after its last newline, read backwards a block at a time: a cut line may
    be of any length."""
    end = pos = f.seek(0, os.SEEK_END)
    while pos > 0:
        start = max(pos - block, 0)
        f.seek(start)
        cut = f.read(pos - start).rfind(b"\n")
        if cut >= 0:
            if start + cut + 1 < end:
                f.truncate(start + cut + 1)
            return
        pos = start
    f.truncate(0)


def batch_record(f: str, options, settings: dict) -> dict:
    """One batch line: the result, or the failure recorded (a bug must not stop the batch), stamped
    with the batch's `settings` (not the per-instance share of --budget)."""
    from gpusolve.report import record
    try:
        rec = solve_file(f, options).to_json()
    except Failure as e:
        rec = record(f, e.status, message=str(e))
    except Exception as e:
        rec = record(f, "error", message=f"internal error: {type(e).__name__}: {e}")
    rec["options"] = settings
    return rec


def _recorded(path: str, files: list[str], settings: dict | None) -> dict[str, dict]:
    """The last record in --out of each of `files` (in their order) when solved with `settings`
    (None: whatever options)."""
    last = _already_done(path)
    return {f: last[f] for f in files if f in last and (settings is None or last[f].get("options") == settings)}


def _already_done(path: str) -> dict[str, dict]:
    """Records in --out by file; lines that are not a record (cut short, not UTF-8, no status) are
    not, so their instance is solved again."""
    done = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(rec, dict) and isinstance(rec.get("file"), str) and isinstance(rec.get("status"), str):
                    done[rec["file"]] = rec
    return done


SUMMARY = ("file", "status", "lower_bound", "upper_bound", "z", "method", "time_s", "message")
SHOWN = 200  # characters of a message in the summary table; --out and the CSV hold it whole


def print_summary(records: list[dict], elapsed: float) -> None:
    """The records as a table, a message column where any has one (why it ended in error or timeout),
    and the count of each status."""
    from rich.table import Table
    from rich.text import Text
    messages = [r.get("message") or "" for r in records]
    with_messages = any(messages)
    t = Table(title="batch summary")
    for c in ("file", "status", "lower", "upper", "z", "time s") + (("message",) if with_messages else ()):
        t.add_column(c, justify="left" if c in ("file", "message") else "right")
    counts: dict[str, int] = {}
    for r, message in zip(records, messages):
        counts[r["status"]] = counts.get(r["status"], 0) + 1
        row = [Text(os.path.basename(r["file"])), r["status"], fmt_bound(r.get("lower_bound")),
               fmt_bound(r.get("upper_bound")), fmt_bound(r.get("z")), f"{r.get('time_s') or 0:.2f}"]
        if with_messages:
            row.append(Text(message if len(message) <= SHOWN else message[:SHOWN - 3] + "..."))
        t.add_row(*row)
    out().print(t)
    statuses = ("optimal", "bounded", "infeasible", "timeout", "error")
    out().print(", ".join(f"{k}: {counts.get(k, 0)}" for k in statuses)
                + f"; total time {sum(r.get('time_s') or 0 for r in records):.2f} s of solving, "
                  f"{elapsed:.2f} s this run")


def write_csv(path: Path, records: list[dict]) -> None:
    import csv
    try:
        with open(path, "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, SUMMARY, extrasaction="ignore")
            w.writeheader()
            w.writerows(records)
    except OSError as e:
        raise click.UsageError(f"--csv {path}: {e.strerror or e}") from None
    err().print(f"wrote {path}", markup=False)
