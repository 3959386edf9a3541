"""``kalena compact``: the fewest nodes the workload fits on, with and without reclamation.

Exit codes: 0 done; 2 bad input (one line per problem, ``FILE: KEYPATH: MESSAGE (value: VALUE)``),
or a workload that does not fit even sixteen times the cluster.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np
import typer
from rich.table import Table

from kalena.cli.fanout import JobFailed, SchedulerOpt, WorkersOpt, run_all, worker_cluster
from kalena.cli.screen import bad_input, progress_bar, table_console
from kalena.core.cluster import Cluster
from kalena.core.compaction import DEFAULT_TRIALS, PENDING_FRACTION, BatchLoad, Compaction, Trial, trial
from kalena.core.packing import pack
from kalena.data import irina_paths
from kalena.ir import IRError, load_cluster

if TYPE_CHECKING:  # the simulator is imported only when a run is asked for
    from kalena.sim.checkpoint import Checkpoint

#: Kuberina's own figures for Irina (its paper): full packing and the Pareto point.
KUBERINA_FULL, KUBERINA_PARETO = 152, 182


def _one(
    infra: str, workloads: str, seed: int, fraction: float, load: BatchLoad | None, reclaim: bool
) -> Trial:
    """One trial in a worker process (the cluster read once per process)."""
    return trial(worker_cluster(infra, workloads), np.random.default_rng(seed), fraction, load, reclaim)


def _checkpoint(
    paths: list[str], cluster: Cluster, placed: Cluster | None, hours: float, seed: int, quiet: bool
) -> Checkpoint:
    """Simulate ``hours`` on the cluster as ``placed`` (its blueprint; without one, the packer's
    placement) and return the worst hourly checkpoint."""
    from kalena.sim import SimConfig, Simulation
    from kalena.sim.checkpoint import run_with_checkpoints, worst

    if placed is None:
        result = pack(cluster)
        if not result.complete:
            raise bad_input(
                [f"{paths[1]}: production does not pack onto the cluster: {len(result.pending)} pods pending"]
            )
        placed = dataclasses.replace(cluster, placement=result.placement)
    sim = Simulation(placed, SimConfig(hours=hours, seed=seed))
    with progress_bar("simulating for checkpoints", quiet) as bar:
        task = bar.add_task("ticks", total=sim.cfg.ticks)
        checkpoints = run_with_checkpoints(sim, cluster, progress=lambda k, _t: bar.update(task, completed=k))
    try:
        return worst(checkpoints, cluster)
    except ValueError as e:
        raise bad_input([f"--batch-hours: {e} (value: {hours:g})"]) from None


def command(
    files: Annotated[
        list[Path] | None,
        typer.Argument(
            help="INFRA WORKLOADS [BLUEPRINT] (IR v1 or legacy); default: the bundled Irina benchmark.",
            show_default=False,
        ),
    ] = None,
    trials: Annotated[
        int, typer.Option(help="Trials (removal orders) per arm, seeds 0..N-1.", min=1)
    ] = DEFAULT_TRIALS,
    workers: WorkersOpt = 0,
    scheduler: SchedulerOpt = None,
    pending_fraction: Annotated[
        float,
        typer.Option(
            help="Share of workloads that may stay pending and still fit (Borg: 0.2 %).", min=0.0, max=1.0
        ),
    ] = PENDING_FRACTION,
    batch_hours: Annotated[
        float,
        typer.Option(
            help="Simulated hours whose worst hourly checkpoint gives the batch and the reservations "
            "(0: production alone).",
            min=0.0,
            max=8784.0,
        ),
    ] = 24.0,
    seed: Annotated[int, typer.Option(help="The simulation's seed.", min=0)] = 0,
    as_json: Annotated[
        bool, typer.Option("--json", metavar="", help="Print the figures as JSON instead of a table.")
    ] = False,
) -> None:
    """Compact the cluster (Borg §5.1): remove nodes in random orders until the workload, packed
    with every hard rule kept, no longer fits; production alone, then with a simulated day's batch
    packed by reservations (reclamation on) and by requests (off)."""
    paths = [str(p) for p in files] if files else [str(p) for p in irina_paths()]
    if len(paths) not in (2, 3):
        raise bad_input([f"compact: expected INFRA WORKLOADS [BLUEPRINT], got {len(paths)} files"])
    if 0 < batch_hours < 1:
        raise bad_input([f"--batch-hours: at least one hour (one checkpoint), or 0 (value: {batch_hours:g})"])
    try:
        cluster = worker_cluster(paths[0], paths[1])
        placed = load_cluster(*paths) if len(paths) == 3 else None  # the blueprint's
    except IRError as e:
        raise bad_input([p.render() for p in e.problems]) from None
    load, checkpoint = None, None
    baseline = len({*placed.placement.values()}) if placed is not None else None
    if batch_hours > 0:
        cp = _checkpoint(paths, cluster, placed, batch_hours, seed, as_json)
        load = cp.load
        checkpoint = {
            "time_h": cp.time / 3600.0,
            "reserved_share": round(cp.share(cluster), 4),
            "batch_pods": len(load.batch),
        }
    arms = [("production", None, True)] + (
        [("reclaim_on", load, True), ("reclaim_off", load, False)] if load else []
    )
    results = _run_trials(paths, arms, trials, workers, scheduler, pending_fraction, as_json)
    figures: dict[str, Any] = {
        "nodes": len(cluster.nodes),
        "workloads": len(cluster.workloads),
        "blueprint_active_nodes": baseline,
        "kuberina_paper": {"full_packing": KUBERINA_FULL, "pareto": KUBERINA_PARETO} if not files else None,
        "pending_fraction": pending_fraction,
        "checkpoint": checkpoint,
    }
    for name, result in results.items():
        figures[name] = {
            "p90": result.p90,
            "min": result.low,
            "max": result.high,
            "trials": [
                {
                    "seed": s,
                    "nodes": t.nodes,
                    "added": t.added,
                    "pending": list(t.pending),
                    "packs": t.packs,
                }
                for s, t in enumerate(result.trials)
            ],
        }
    if load is not None:
        figures["extra_nodes_without_reclamation"] = results["reclaim_off"].p90 - results["reclaim_on"].p90
    if as_json:
        typer.echo(json.dumps(figures, indent=2))
        return
    _show(figures, results, trials, pending_fraction)


def _run_trials(
    paths: list[str],
    arms: list[tuple[str, BatchLoad | None, bool]],
    trials: int,
    workers: int,
    scheduler: str | None,
    fraction: float,
    quiet: bool,
) -> dict[str, Compaction]:
    jobs = [(name, s, load, reclaim) for name, load, reclaim in arms for s in range(trials)]
    try:
        done = run_all(
            _one,
            [(paths[0], paths[1], s, fraction, load, reclaim) for _, s, load, reclaim in jobs],
            workers=workers,
            scheduler=scheduler,
            label="compaction trials",
            quiet=quiet,
        )
    except JobFailed as e:
        if isinstance(e.error, ValueError):  # the workload does not fit even a grown cluster
            raise bad_input([f"{paths[1]}: {e.error}"]) from None
        raise bad_input(
            [f"trial {jobs[e.index][1]} of {jobs[e.index][0]}: the run failed ({e.error!r})"]
        ) from None
    by_job = dict(zip([(name, s) for name, s, _, _ in jobs], done, strict=True))
    return {name: Compaction(tuple(by_job[(name, s)] for s in range(trials))) for name, _, _ in arms}


def _show(figures: dict[str, Any], results: dict[str, Compaction], trials: int, fraction: float) -> None:
    con = table_console()
    table = Table(title=f"Compaction: the smallest cluster, p90 of {trials} trials", title_justify="left")
    for col in ("workload", "p90", "min - max", "per trial"):
        table.add_column(col, justify="left" if col in ("workload", "per trial") else "right")
    label = {
        "production": "production by requests",
        "reclaim_on": "+ batch, reclamation on (reservations)",
        "reclaim_off": "+ batch, reclamation off (requests)",
    }
    for name, r in results.items():
        table.add_row(
            label[name], f"{r.p90:g}", f"{r.low} - {r.high}", " ".join(str(t.nodes) for t in r.trials)
        )
    con.print(table)
    con.print(f"nodes in the cluster: {figures['nodes']:,}")
    if figures["blueprint_active_nodes"] is not None:
        con.print(f"active nodes in the blueprint: {figures['blueprint_active_nodes']:,}")
    if figures["kuberina_paper"]:
        con.print(
            f"Kuberina's figures for Irina: {KUBERINA_FULL} nodes (full packing), {KUBERINA_PARETO} (Pareto)"
        )
    cp = figures["checkpoint"]
    if cp is not None:
        con.print(
            f"batch and reservations: the worst hourly checkpoint, at {cp['time_h']:g} h "
            f"({cp['batch_pods']:,} batch pods; {cp['reserved_share']:.1%} of capacity reserved "
            "on the most used dimension)"
        )
        con.print(
            f"extra nodes needed without reclamation (p90): {figures['extra_nodes_without_reclamation']:g}"
        )
    for name, r in results.items():
        for t in r.trials:
            if t.pending:
                con.print(
                    f"{name}, trial {t.seed}: {len(t.pending)} pending, within the {fraction:.1%} allowed"
                )
