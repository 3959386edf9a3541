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
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.table import Table

from kalena.archive.export import plan_pods, pooled_quantiles
from kalena.cli.archive import ArchiveOpt, duration_s, load_plan, open_archive, window_of
from kalena.cli.screen import table_console
from kalena.core.estimators import MarginClass
from kalena.core.resources import CPU, RAM
from kalena.core.stationkeeper import Adjustment, Knob, StationkeeperConfig, Workloads, propose

_UNIT = {Knob.CPU: "cores", Knob.MEMORY: "GiB", Knob.REPLICAS: "replicas"}


def recommendations(
    archive: str, workloads: Path, window: str, until: float | None, replicas: bool
) -> tuple[list[Adjustment], dict[str, float]]:
    """The proposals, and the window they were computed over (``since``/``until``)."""
    cfg = StationkeeperConfig()
    span_s = duration_s(window, "--window")
    doc, recorded_as = load_plan(workloads)
    ids, decl_of_pod = plan_pods(doc, recorded_as)
    with open_archive(archive) as a:
        start, end = window_of(a, archive, span_s, until)
        w = a.window(ids, start, end)
    seen, q, counts = pooled_quantiles(w, decl_of_pod, np.array([cfg.quantile]))
    n = len(doc.declarations)
    cpu_q = np.full(n, np.nan)
    mem_q = np.full(n, np.nan)
    samples = np.zeros(n, dtype=np.int64)
    cpu_q[seen], mem_q[seen] = q[:, 0, CPU], q[:, 0, RAM]
    samples[seen] = counts[:, CPU]
    reps = np.array([d.replicas for d in doc.declarations], dtype=np.int64)
    work = Workloads.of(
        [d.full_name for d in doc.declarations],
        classes=np.full(n, int(MarginClass.SERVICE)),  # a plan's declarations are production
        cpu_request=[d.requests.get("cpu", 0.0) for d in doc.declarations],
        memory_request=[d.requests.get("ram", 0.0) for d in doc.declarations],
        replicas=reps,
        managed=np.full(n, replicas),
        # the whole workload's quantile, bounded by its replicas' (their peaks need not coincide)
        total_cpu_quantile=cpu_q * reps,
        cpu_quantile=cpu_q,
        memory_quantile=mem_q,
        samples=samples,
        epochs=np.zeros(n, dtype=np.int64),
    )
    return propose(work, cfg), {"since": start, "until": end}


def recommend(
    archive: ArchiveOpt,
    workloads: Annotated[Path, typer.Option(help="The Kuberina Workloads document the plan was made from.")],
    window: Annotated[str, typer.Option(help="How deep a window the loops read: 90m, 24h, 7d, 2w.")] = "7d",
    until: Annotated[
        float | None,
        typer.Option(help="The window's end, Unix seconds (default: the archive's last sample)."),
    ] = None,
    replicas: Annotated[
        bool, typer.Option("--replicas", metavar="", help="Run the replica loop too (the 40/80 % dead band).")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", metavar="", help="Print JSON and nothing else.")] = False,
) -> None:
    """The Stationkeeper's proposals for each declaration, with their evidence (nothing is applied)."""
    out, span = recommendations(archive, workloads, window, until, replicas)
    if as_json:
        rows = [
            {
                "workload": a.workload, "knob": a.knob.value, "current": a.current, "proposed": a.proposed,
                "epoch": a.epoch,
                "evidence": {"window": span, "samples": a.evidence.samples, "quantile": a.evidence.quantile,
                             "observed": a.evidence.observed, "margin": a.evidence.margin},
            }
            for a in out
        ]  # fmt: skip
        typer.echo(json.dumps({"window": span, "adjustments": rows}, indent=2))
        return
    con = table_console()
    if not out:
        con.print("no proposals: every request is within 10 % of its p99 times its margin")
        return
    table = Table(title=f"Stationkeeper proposals ({len(out):,})")
    for col in ("workload", "knob", "current", "proposed", "change", "p99 seen", "margin", "samples"):
        table.add_column(col, justify="left" if col in ("workload", "knob") else "right")
    for a in out:
        change = (a.proposed / a.current - 1.0) if a.current else float("inf")
        margin = (
            f"{a.evidence.margin:.2f}" if a.knob is not Knob.REPLICAS else f"load {a.evidence.margin:.0%}"
        )
        table.add_row(
            a.workload, f"{a.knob.value} ({_UNIT[a.knob]})", f"{a.current:,.4g}", f"{a.proposed:,.4g}",
            f"{change:+.0%}", f"{a.evidence.observed:,.4g}", margin, f"{a.evidence.samples:,}",
        )  # fmt: skip
    con.print(table)
