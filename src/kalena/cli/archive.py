"""``kalena archive``: the usage archive's write-back to the planner, and its upkeep.

Exit codes: 0 done; 2 bad input (an archive that cannot be opened, a workloads document with
problems, a window that is empty or unreadable), one line per problem on stderr, never a
traceback.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from kalena.archive import Archive, ArchiveError
from kalena.archive.export import DEFAULT_DRIFT_THRESHOLD, export_observed
from kalena.ir import IRError
from kalena.ir.convert import to_v1
from kalena.ir.document import WorkloadsDoc
from kalena.ir.load import read_document
from kalena.ir.write import dump_workloads, write_files_atomic

app = typer.Typer(
    help="The usage archive: export observed usage for Kuberina, compact.", no_args_is_help=True
)

EXIT_BAD_INPUT = 2
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([smhdw])\s*$")


def _fail(lines: list[str]) -> typer.Exit:
    for line in lines:
        typer.echo(line, err=True)
    return typer.Exit(EXIT_BAD_INPUT)


def duration_s(text: str, option: str) -> float:
    """``90m``, ``24h``, ``7d``, ``2w``, ``3600s`` in seconds (> 0)."""
    m = _DURATION.match(text)
    if m is None or float(m[1]) <= 0:
        raise _fail([f"{option}: {text!r} is not a duration like 90m, 24h, 7d or 2w"])
    return float(m[1]) * _UNITS[m[2]]


def load_plan(workloads: Path) -> tuple[WorkloadsDoc, dict[str, str]]:
    """The Workloads document as IR v1, and the archive id of each pod whose v1 name differs (a
    legacy document's single pods are renamed by the conversion; the shells recorded the old)."""
    try:
        doc = read_document(workloads, expect="Workloads")
    except IRError as e:
        raise _fail([p.render() for p in e.problems]) from None
    assert isinstance(doc, WorkloadsDoc)
    if not doc.legacy:
        return doc, {}
    conv = to_v1(workloads=doc)
    assert conv.workloads is not None
    return conv.workloads, {new: old for old, new in conv.renames.items()}


def window_of(a: Archive, where: str, span_s: float, until: float | None) -> tuple[float, float]:
    """``[start, end)``: ``span_s`` back from ``until`` (default: one second past the last sample,
    so it counts), never before the archive's first sample."""
    held = a.span()
    if held is None:
        raise _fail([f"--archive: {where}: holds no samples yet"])
    end = held[1] + 1.0 if until is None else until
    if not math.isfinite(end):
        raise _fail([f"--until: must be a finite time (value: {until!r})"])
    start = max(end - span_s, held[0])  # the window says what it covers, not what was asked
    if not end > start:
        raise _fail([f"--until: {end:g} is before the archive's first sample ({held[0]:g})"])
    return start, end


def open_archive(where: str) -> Archive:
    if "://" not in where and not Path(where).exists():
        raise _fail([f"--archive: {where}: no such archive"])
    try:
        return Archive(where)
    except ArchiveError as e:
        raise _fail([f"--archive: {e}"]) from None


ArchiveOpt = Annotated[
    str,
    typer.Option("--archive", metavar="WHERE", help="The archive: an SQLite file or a postgresql:// URL."),
]
WorkloadsOpt = Annotated[Path, typer.Option(help="The Kuberina Workloads document the plan was made from.")]
WindowOpt = Annotated[str, typer.Option(help="How far back from --until: 90m, 24h, 7d, 2w.")]
UntilOpt = Annotated[
    float | None, typer.Option(help="The window's end, Unix seconds (default: the archive's last sample).")
]


@app.command()
def export(
    archive: ArchiveOpt,
    workloads: WorkloadsOpt,
    out: Annotated[Path, typer.Option(help="Where the document with observed blocks goes (IR v1).")],
    report: Annotated[
        Path | None, typer.Option(help="Where the JSON report goes (default: OUT with .report.json).")
    ] = None,
    window: WindowOpt = "7d",
    until: UntilOpt = None,
    drift_threshold: Annotated[
        float,
        typer.Option(help="Blueprint drift at or above this share of the requests recommends a re-plan."),
    ] = DEFAULT_DRIFT_THRESHOLD,
) -> None:
    """Write observed usage back into a Workloads document (IR v1 ``observed:`` blocks) and a report
    with reservations, bursts, evictions, throttled time and blueprint drift."""
    span_s = duration_s(window, "--window")
    if not (math.isfinite(drift_threshold) and drift_threshold > 0):
        raise _fail([f"--drift-threshold: must be a number > 0 (value: {drift_threshold!r})"])
    doc, recorded_as = load_plan(workloads)
    with open_archive(archive) as a:
        start, end = window_of(a, archive, span_s, until)
        ex = export_observed(a, doc, start, end, drift_threshold, recorded_as)
    report_path = report if report is not None else out.with_name(out.stem + ".report.json")
    try:
        for folder in {out.parent, report_path.parent}:
            folder.mkdir(parents=True, exist_ok=True)
        write_files_atomic(
            {
                out: dump_workloads(ex.document),
                report_path: json.dumps(ex.report, indent=2, sort_keys=True) + "\n",
            }
        )
    except OSError as e:
        raise _fail([f"{e.filename}: cannot write ({e.strerror or e})"]) from None
    con = Console(stderr=True, highlight=False)
    seen = sum(d.observed is not None for d in ex.document.declarations)
    con.print(
        f"wrote {out} ({seen:,} of {len(ex.document.declarations):,} declarations observed) and {report_path}"
    )
    drift = ", ".join(f"{k} {v:.2f}" for k, v in ex.report["drift"].items())
    con.print(f"blueprint drift: {drift or 'nothing requested was observed'}")
    if ex.report["replan_recommended"]:
        con.print(f"[bold]{ex.report['recommendation']}[/]")


@app.command()
def compact(archive: ArchiveOpt) -> None:
    """Roll up every 5-minute slot and hour and drop what retention allows, ages counted from the
    archive's newest sample (a daemon does this on its own; this is for an archive nobody writes
    any more, such as a simulator's, whose times start at 0)."""
    with open_archive(archive) as a:
        held = a.span()
        # past the newest sample by the grace and an hour: every slot it has is closed
        done = a.compact(held[1] + a.retention.grace_s + 3600.0 if held else 0.0)
    typer.echo(
        f"rolled {done.buckets_5m:,} 5-minute and {done.buckets_1h:,} hourly buckets; deleted "
        f"{done.deleted_samples:,} samples, {done.deleted_buckets:,} buckets, {done.deleted_events:,} events"
    )
