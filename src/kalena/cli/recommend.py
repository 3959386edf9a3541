"""``kalena recommend``: the Stationkeeper's proposals (seed 002) from the usage archive.

For each declaration of a Workloads document, its three loops (cpu, memory, replicas) read a deep
window of the archive: the per-replica p99 of usage (the replicas' samples pooled) times the
class margin, proposed only when that moves the request by at least 10 %; with ``--replicas``,
the replica loop's 40/80 % dead band too. Shown as a table, or as JSON with the evidence (window,
samples, quantile, margin). Nothing is applied here.

Exit codes: 0 shown (with or without proposals); 2 bad input (as ``kalena archive export``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.table import Table

from kalena.archive import Window
from kalena.archive.export import plan_pods, pooled_quantiles
from kalena.cli.archive import (
    ArchiveOpt,
    UntilOpt,
    WindowOpt,
    WorkloadsOpt,
    duration_s,
    load_plan,
    open_archive,
    window_of,
)
from kalena.cli.screen import table_console
from kalena.core.estimators import MarginClass
from kalena.core.resources import CPU, RAM
from kalena.core.stationkeeper import (
    Adjustment,
    AdjustmentBook,
    Knob,
    Outcome,
    StationkeeperConfig,
    Workloads,
    propose,
)
from kalena.ir.document import DeclDoc, WorkloadsDoc

_UNIT = {Knob.CPU: "cores", Knob.MEMORY: "GiB", Knob.REPLICAS: "replicas"}


def recommendations(
    archive: str, workloads: Path, window: str, until: float | None, replicas: bool, accept: bool = False
) -> tuple[list[Adjustment], dict[str, float], list[Outcome] | None]:
    """The proposals, the window they were computed over (``since``/``until``) and, with
    ``accept``, what the archive's adjustment book made of each."""
    cfg = StationkeeperConfig()
    span_s = duration_s(window, "--window")
    doc, recorded_as = load_plan(workloads)
    ids, decl_of_pod = plan_pods(doc, recorded_as)
    names = [d.full_name for d in doc.declarations]
    with open_archive(archive) as a:
        start, end = window_of(a, archive, span_s, until)
        w = a.window(ids, start, end)
        book = a.book(names)
        out = _propose(doc, w, decl_of_pod, book, replicas, cfg)
        outcomes = a.accept(out, time.time()) if accept else None
    return out, {"since": start, "until": end}, outcomes


def _propose(
    doc: WorkloadsDoc, w: Window, decl_of_pod: np.ndarray, book: AdjustmentBook, replicas: bool,
    cfg: StationkeeperConfig,
) -> list[Adjustment]:  # fmt: skip
    """The loops over the plan's declarations, from each one's accepted setting (the plan's where
    none was accepted yet) at its current epoch."""
    seen, q, counts = pooled_quantiles(w, decl_of_pod, np.array([cfg.quantile]))
    n = len(doc.declarations)
    cpu_q = np.full(n, np.nan)
    mem_q = np.full(n, np.nan)
    samples = np.zeros(n, dtype=np.int64)
    cpu_q[seen], mem_q[seen] = q[:, 0, CPU], q[:, 0, RAM]
    samples[seen] = counts[:, CPU]
    names = [d.full_name for d in doc.declarations]

    def setting(d: DeclDoc, knob: Knob, planned: float) -> float:
        return book.settings.get((d.full_name, knob), planned)

    reps = np.array([setting(d, Knob.REPLICAS, d.replicas) for d in doc.declarations], dtype=np.int64)
    work = Workloads.of(
        names,
        classes=np.full(n, int(MarginClass.SERVICE)),  # a plan's declarations are production
        cpu_request=[setting(d, Knob.CPU, d.requests.get("cpu", 0.0)) for d in doc.declarations],
        memory_request=[setting(d, Knob.MEMORY, d.requests.get("ram", 0.0)) for d in doc.declarations],
        replicas=reps,
        managed=np.full(n, replicas),
        # the whole workload's quantile, bounded by its replicas' (their peaks need not coincide)
        total_cpu_quantile=cpu_q * reps,
        cpu_quantile=cpu_q,
        memory_quantile=mem_q,
        samples=samples,
        epochs=[book.epochs[x] for x in names],
    )
    return propose(work, cfg)


def recommend(
    archive: ArchiveOpt,
    workloads: WorkloadsOpt,
    window: WindowOpt = "7d",
    until: UntilOpt = None,
    replicas: Annotated[
        bool, typer.Option("--replicas", metavar="", help="Run the replica loop too (the 40/80 % dead band).")
    ] = False,
    accept: Annotated[
        bool,
        typer.Option(
            "--accept",
            metavar="",
            help="Record the proposals as accepted in the archive's adjustment book (each only at the "
            "epoch it was computed against); the next run starts from them.",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", metavar="", help="Print JSON and nothing else.")] = False,
) -> None:
    """The Stationkeeper's proposals for each declaration, with their evidence (nothing is applied)."""
    out, span, outcomes = recommendations(archive, workloads, window, until, replicas, accept)
    said = [o.value for o in outcomes] if outcomes is not None else [None] * len(out)
    if as_json:
        rows = [
            {
                "workload": a.workload, "knob": a.knob.value, "current": a.current, "proposed": a.proposed,
                "epoch": a.epoch, "outcome": o,
                "evidence": {"window": span, "samples": a.evidence.samples, "quantile": a.evidence.quantile,
                             "observed": a.evidence.observed, "margin": a.evidence.margin},
            }
            for a, o in zip(out, said, strict=True)
        ]  # fmt: skip
        typer.echo(json.dumps({"window": span, "adjustments": rows}, indent=2))
        return
    con = table_console()
    if not out:
        con.print("no proposals: every request is within 10 % of its p99 times its margin")
        return
    table = Table(title=f"Stationkeeper proposals ({len(out):,})")
    cols = ["workload", "knob", "current", "proposed", "change", "p99 seen", "margin", "samples"]
    for col in [*cols, *(["outcome"] if outcomes is not None else [])]:
        table.add_column(col, justify="left" if col in ("workload", "knob", "outcome") else "right")
    for a, o in zip(out, said, strict=True):
        change = (a.proposed / a.current - 1.0) if a.current else float("inf")
        margin = (
            f"{a.evidence.margin:.2f}" if a.knob is not Knob.REPLICAS else f"load {a.evidence.margin:.0%}"
        )
        table.add_row(
            a.workload, f"{a.knob.value} ({_UNIT[a.knob]})", f"{a.current:,.4g}", f"{a.proposed:,.4g}",
            f"{change:+.0%}", f"{a.evidence.observed:,.4g}", margin, f"{a.evidence.samples:,}",
            *([o] if o is not None else []),
        )  # fmt: skip
    con.print(table)
