"""``kalena recommend``: the Stationkeeper's proposals (seed 002) from the usage archive.

For each declaration of a Workloads document (or, with ``--docker``, each Swarm service and plain
production container of an engine), its three loops (cpu, memory, replicas) read a deep window of
the archive: the per-replica p99 of usage (the replicas' samples pooled) times the class margin,
proposed only when that moves the request by at least 10 %; with ``--replicas``, the replica
loop's 40/80 % dead band too. Shown as a table, or as JSON with the evidence (window, samples,
quantile, margin). Written for a cluster only when asked: ``--kubernetes`` (VPA objects, or the
Deployments' requests with ``--apply``), ``--docker --apply`` (``docker update`` /
``docker service update``, each write an archive event).

Exit codes: 0 shown (with or without proposals); 2 bad input (as ``kalena archive export``);
3 the cluster or engine cannot take them.
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

from kalena.archive import ArchiveEvent, Window
from kalena.archive.export import plan_pods, pooled_quantiles
from kalena.cli import agent as agent_cli
from kalena.cli.archive import (
    ArchiveOpt,
    UntilOpt,
    WindowOpt,
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
from kalena.docker import DEFAULT_ENDPOINT
from kalena.ir.document import DeclDoc, WorkloadsDoc

if TYPE_CHECKING:  # the Kubernetes client and the Docker SDK are imported only when asked for
    from kalena.docker.engine import Engine, TlsFiles
    from kalena.docker.sizing import Applied, DockerPlan
    from kalena.k8s.recommend import Written

_UNIT = {Knob.CPU: "cores", Knob.MEMORY: "GiB", Knob.REPLICAS: "replicas"}
EXIT_BAD_INPUT = 2
EXIT_CLUSTER = 3


def _say_bad(line: str, code: int = EXIT_BAD_INPUT) -> int:
    typer.echo(line, err=True)
    return code


def _to_kubernetes(
    settings: dict[str, dict[str, float]], kubeconfig: Path | None, apply: bool, archive: str
) -> list[Written]:
    """Write the settings as VPA recommendations, or with ``apply`` into the Deployments' requests;
    each request write an archive event ``resize`` (the audit, as on Docker)."""
    from kalena.cli.k8s import core_api
    from kalena.k8s.recommend import RecommendError, publish

    api = core_api(kubeconfig).api_client
    sizes = {w: {k: v for k, v in s.items() if k != Knob.REPLICAS.value} for w, s in settings.items()}
    try:
        written = publish(api, {w: s for w, s in sizes.items() if s}, apply)
    except RecommendError as e:
        raise typer.Exit(_say_bad(f"kalena recommend: {e}", EXIT_CLUSTER)) from None
    except Exception as e:  # the apiserver does not answer
        raise typer.Exit(_say_bad(f"kalena recommend: the apiserver: {e}", EXIT_CLUSTER)) from None
    if apply:
        _audit_resizes(archive, [
            (w.workload, w.outcome,
             {"target": f"deployment/{w.workload.partition('/')[2]}", "containers": w.containers})
            for w in written if w.outcome == "applied"
        ])  # fmt: skip
    return written


def _audit_resizes(archive: str, writes: list[tuple[str, str, dict[str, object]]]) -> None:
    """Each write to a cluster (workload, outcome, what was written) as an archive event
    ``resize``, all in one transaction: the audit of ``--apply``, on every cluster alike."""
    if not writes:
        return
    now = time.time()
    with open_archive(archive) as a:
        a.record_events([ArchiveEvent(now, "resize", None, w, cause, data) for w, cause, data in writes])


@dataclass(frozen=True, slots=True)
class Plan:
    """What is sized: the declarations, the archive id of each of their pods and its declaration,
    and which declarations the replica loop may move (``None``: all of them, with --replicas)."""

    doc: WorkloadsDoc
    ids: list[str]
    decl_of_pod: np.ndarray
    replicable: np.ndarray | None = None


def file_plan(workloads: Path) -> Plan:
    doc, recorded_as = load_plan(workloads)
    ids, decl_of_pod = plan_pods(doc, recorded_as)
    return Plan(doc, ids, decl_of_pod)


@dataclass(frozen=True, slots=True)
class Recommendations:
    adjustments: list[Adjustment]
    window: dict[str, float]  # since, until
    outcomes: list[Outcome] | None  # with accept: what the archive's adjustment book made of each
    settings: dict[str, dict[str, float]]  # per declaration: the cpu, memory (and replicas) it should have


def recommendations(
    archive: str, plan: Plan | Path, window: str, until: float | None, replicas: bool, accept: bool = False
) -> Recommendations:
    """The proposals over the window, what became of them, and each declaration's resulting per-pod
    cpu and memory, and replica count (the accepted settings, with this run's proposals on top
    unless refused). ``plan``: a Workloads document's path, or the plan itself."""
    cfg = StationkeeperConfig()
    span_s = duration_s(window, "--window")
    if isinstance(plan, Path):
        plan = file_plan(plan)
    names = [d.full_name for d in plan.doc.declarations]
    with open_archive(archive) as a:
        start, end = window_of(a, archive, span_s, until)
        w = a.window(plan.ids, start, end)
        book = a.book(names)
        out = _propose(plan, w, book, replicas, cfg)
        outcomes = a.accept(out, time.time()) if accept else None
    now = {(w, k): v for (w, k), v in book.settings.items()}
    for i, adj in enumerate(out):
        if outcomes is None or outcomes[i] is Outcome.ACCEPTED:
            now[(adj.workload, adj.knob)] = adj.proposed
    settings: dict[str, dict[str, float]] = {}
    for (w, knob), v in now.items():
        settings.setdefault(w, {})[knob.value] = v
    return Recommendations(out, {"since": start, "until": end}, outcomes, settings)


def _propose(
    plan: Plan, w: Window, book: AdjustmentBook, replicas: bool, cfg: StationkeeperConfig
) -> list[Adjustment]:
    """The loops over the plan's declarations, from each one's accepted setting (the plan's where
    none was accepted yet) at its current epoch."""
    doc = plan.doc
    seen, q, counts, _ = pooled_quantiles(w, plan.decl_of_pod, np.array([cfg.quantile]))
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
        managed=np.full(n, replicas) & (plan.replicable if plan.replicable is not None else True),
        # the whole workload's quantile, bounded by its replicas' (their peaks need not coincide)
        total_cpu_quantile=cpu_q * reps,
        cpu_quantile=cpu_q,
        memory_quantile=mem_q,
        samples=samples,
        epochs=[book.epochs[x] for x in names],
    )
    return propose(work, cfg)


def _docker_plan(endpoint: str, tls: TlsFiles | None, archive: str) -> tuple[Engine, DockerPlan]:
    from kalena.docker.engine import Engine, EngineError, connect
    from kalena.docker.sizing import docker_plan

    with open_archive(archive) as a:
        archived = a.workloads()
    try:
        engine = Engine(connect(endpoint, tls), endpoint)
        return engine, docker_plan(engine, archived)
    except EngineError as e:
        raise typer.Exit(_say_bad(f"kalena recommend: {e}", EXIT_CLUSTER)) from None


def _to_docker(
    engine: Engine, plan: DockerPlan, archive: str, settings: dict[str, dict[str, float]]
) -> list[Applied]:
    """Write the settings onto the engine, each write an archive event ``resize`` (the audit)."""
    from kalena.docker.engine import EngineError
    from kalena.docker.sizing import apply_sizes

    try:
        done = apply_sizes(engine, plan, settings)
    except EngineError as e:
        raise typer.Exit(_say_bad(f"kalena recommend: {e}", EXIT_CLUSTER)) from None
    _audit_resizes(archive, [
        (d.workload, d.outcome.split(":")[0], {"target": plan.targets[d.workload].name, **d.fields})
        for d in done if d.outcome != "unchanged" and d.workload in plan.targets
    ])  # fmt: skip
    return done


def recommend(
    archive: ArchiveOpt,
    workloads: Annotated[
        Path | None,
        typer.Option(help="The Kuberina Workloads document the plan was made from (not with --docker)."),
    ] = None,
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
            help="With --kubernetes: patch the Deployments' requests instead (a rollout). With --docker: "
            "accept the proposals and write the accepted sizes (docker update / docker service update).",
        ),
    ] = False,
    docker: Annotated[
        bool,
        typer.Option(
            "--docker",
            metavar="",
            help="Size the engine's production: each Swarm service (on a manager) and plain container.",
        ),
    ] = False,
    docker_host: agent_cli.DockerHost = DEFAULT_ENDPOINT,
    tls_ca: agent_cli.TlsCa = None,
    tls_cert: agent_cli.TlsCert = None,
    tls_key: agent_cli.TlsKey = None,
    kubeconfig: Annotated[
        Path | None,
        typer.Option("--kubeconfig", envvar="KUBECONFIG", help="The cluster (default: in-cluster config)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", metavar="", help="Print JSON and nothing else.")] = False,
) -> None:
    """The Stationkeeper's proposals for each declaration, with their evidence; with --kubernetes,
    written for the cluster (as VPA recommendations, or applied with --apply); with --docker --apply,
    written onto the engine's services and containers."""
    if kubernetes and docker:
        raise typer.Exit(_say_bad("--kubernetes, --docker: one cluster at a time"))
    if apply and not (kubernetes or docker):
        raise typer.Exit(_say_bad("--apply: only with --kubernetes or --docker"))
    if workloads is None and not docker:
        raise typer.Exit(_say_bad("--workloads: required (or --docker: the engine's production is the plan)"))
    if workloads is not None and docker:
        raise typer.Exit(_say_bad("--workloads: not with --docker (the engine's production is the plan)"))
    tls = agent_cli.tls_files(tls_ca, tls_cert, tls_key)
    engine, plan = _docker_plan(docker_host, tls, archive) if docker else (None, None)
    if apply:
        accept = True  # only what the adjustment book accepts at its epoch is written
    given = Plan(plan.doc, plan.ids, plan.decl_of_pod, plan.replicable) if plan is not None else workloads
    assert given is not None
    recs = recommendations(archive, given, window, until, replicas, accept)
    out, span, outcomes = recs.adjustments, recs.window, recs.outcomes
    said = [o.value for o in outcomes] if outcomes is not None else [None] * len(out)
    written = _to_kubernetes(recs.settings, kubeconfig, apply, archive) if kubernetes else None
    resized = _to_docker(engine, plan, archive, recs.settings) if plan is not None and apply else None
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
        if resized is not None:
            doc["docker"] = [
                {"workload": d.workload, "outcome": d.outcome, "fields": d.fields} for d in resized
            ]
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
    if resized is not None:
        done = sum(d.outcome == "applied" for d in resized)
        con.print(
            f"{done:,} of {len(resized):,} sizes written to the engine (the rest already in force or refused)"
        )
        for d in resized:
            if d.outcome not in ("applied", "unchanged"):
                con.print(f"  {d.workload}: {d.outcome}")
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
