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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

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

if TYPE_CHECKING:  # the Kubernetes client is imported only when --kubernetes asks for it
    from kalena.k8s.recommend import Written

_UNIT = {Knob.CPU: "cores", Knob.MEMORY: "GiB", Knob.REPLICAS: "replicas"}
EXIT_BAD_INPUT = 2
EXIT_CLUSTER = 3


def _say_bad(line: str, code: int = EXIT_BAD_INPUT) -> int:
    typer.echo(line, err=True)
    return code


def _to_kubernetes(
    settings: dict[str, dict[str, float]], kubeconfig: Path | None, apply: bool
) -> list[Written]:
    from kalena.cli.k8s import _core_api
    from kalena.k8s.recommend import RecommendError, publish

    api = _core_api(kubeconfig).api_client
    try:
        return publish(api, settings, apply)
    except RecommendError as e:
        raise typer.Exit(_say_bad(f"kalena recommend: {e}", EXIT_CLUSTER)) from None
    except Exception as e:  # the apiserver does not answer
        raise typer.Exit(_say_bad(f"kalena recommend: the apiserver: {e}", EXIT_CLUSTER)) from None


@dataclass(frozen=True, slots=True)
class Recommendations:
    adjustments: list[Adjustment]
    window: dict[str, float]  # since, until
    outcomes: list[Outcome] | None  # with accept: what the archive's adjustment book made of each
    settings: dict[str, dict[str, float]]  # per declaration: the cpu and memory it should have now


def recommendations(
    archive: str, workloads: Path, window: str, until: float | None, replicas: bool, accept: bool = False
) -> Recommendations:
    """The proposals over the window, what became of them, and each declaration's resulting per-pod
    cpu and memory (the accepted settings, with this run's proposals on top unless refused)."""
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
    now = {(w, k): v for (w, k), v in book.settings.items()}
    for i, adj in enumerate(out):
        if outcomes is None or outcomes[i] is Outcome.ACCEPTED:
            now[(adj.workload, adj.knob)] = adj.proposed
    settings: dict[str, dict[str, float]] = {}
    for (w, knob), v in now.items():
        if knob is not Knob.REPLICAS:
            settings.setdefault(w, {})["cpu" if knob is Knob.CPU else "memory"] = v
    return Recommendations(out, {"since": start, "until": end}, outcomes, settings)


def _propose(
    doc: WorkloadsDoc, w: Window, decl_of_pod: np.ndarray, book: AdjustmentBook, replicas: bool,
    cfg: StationkeeperConfig,
) -> list[Adjustment]:  # fmt: skip
    """The loops over the plan's declarations, from each one's accepted setting (the plan's where
    none was accepted yet) at its current epoch."""
    seen, q, counts, _ = pooled_quantiles(w, decl_of_pod, np.array([cfg.quantile]))
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
    kubernetes: Annotated[
        bool,
        typer.Option(
            "--kubernetes",
            metavar="",
            help="Write each Deployment's recommendation as a VerticalPodAutoscaler (updateMode Off).",
        ),
    ] = False,
    apply: Annotated[
        bool,
        typer.Option(
            "--apply",
            metavar="",
            help="With --kubernetes: patch the Deployments' requests instead (a rollout).",
        ),
    ] = False,
    kubeconfig: Annotated[
        Path | None,
        typer.Option("--kubeconfig", envvar="KUBECONFIG", help="The cluster (default: in-cluster config)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", metavar="", help="Print JSON and nothing else.")] = False,
) -> None:
    """The Stationkeeper's proposals for each declaration, with their evidence; with --kubernetes,
    written for the cluster (as VPA recommendations, or applied with --apply)."""
    if apply and not kubernetes:
        raise typer.Exit(_say_bad("--apply: only with --kubernetes (Kalena applies nowhere else yet)"))
    recs = recommendations(archive, workloads, window, until, replicas, accept)
    out, span, outcomes = recs.adjustments, recs.window, recs.outcomes
    said = [o.value for o in outcomes] if outcomes is not None else [None] * len(out)
    written = _to_kubernetes(recs.settings, kubeconfig, apply) if kubernetes else None
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
        doc: dict[str, object] = {"window": span, "adjustments": rows}
        if written is not None:
            doc["kubernetes"] = [{"workload": w.workload, "outcome": w.outcome, "containers": w.containers}
                                 for w in written]  # fmt: skip
        typer.echo(json.dumps(doc, indent=2))
        return
    con = table_console()
    if written is not None:
        done = sum(w.outcome in ("vpa", "applied") for w in written)
        verb = "applied to the Deployments' requests" if apply else "written as VerticalPodAutoscalers"
        con.print(f"{done:,} of {len(written):,} recommendations {verb}")
        for w in written:
            if w.outcome not in ("vpa", "applied"):
                con.print(f"  {w.workload}: {w.outcome}")
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
