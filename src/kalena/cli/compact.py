"""``kalena compact``: the fewest nodes production still fits on, by trials in worker processes.

Exit codes: 0 done; 2 bad input (one line per problem, ``FILE: KEYPATH: MESSAGE (value: VALUE)``),
or a workload that does not fit even the whole cluster.
"""

from __future__ import annotations

import functools
import json
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kalena.cli.screen import table_console
from kalena.core.cluster import Cluster
from kalena.core.compaction import DEFAULT_TRIALS, PENDING_FRACTION, Compaction, Trial, trial
from kalena.data import irina_paths
from kalena.ir import IRError, load_cluster

EXIT_BAD_INPUT = 2


def _fail(lines: list[str]) -> typer.Exit:
    for line in lines:
        typer.echo(line, err=True)
    return typer.Exit(EXIT_BAD_INPUT)


@functools.cache
def _cluster(infra: str, workloads: str) -> Cluster:
    return load_cluster(infra, workloads)


def _one(infra: str, workloads: str, seed: int, pending_fraction: float) -> Trial:
    """One trial in a worker process (the cluster read once per process)."""
    return trial(_cluster(infra, workloads), seed, pending_fraction)


def _blueprint_nodes(infra: str, workloads: str, blueprint: str) -> int | None:
    try:
        return len({*load_cluster(infra, workloads, blueprint).placement.values()})
    except IRError:
        return None


def command(
    files: Annotated[
        list[Path] | None,
        typer.Argument(
            help="INFRA WORKLOADS [BLUEPRINT] (IR v1 or legacy); default: the bundled Irina benchmark.",
            show_default=False,
        ),
    ] = None,
    trials: Annotated[
        int, typer.Option(help="Trials (removal orders), seeds 0..N-1.", min=1)
    ] = DEFAULT_TRIALS,
    workers: Annotated[int, typer.Option(help="Worker processes (0: one per CPU).", min=0)] = 0,
    pending_fraction: Annotated[
        float,
        typer.Option(
            help="Share of workloads that may stay pending and still fit (Borg: 0.2 %).", min=0.0, max=1.0
        ),
    ] = PENDING_FRACTION,
    as_json: Annotated[
        bool, typer.Option("--json", metavar="", help="Print the figures as JSON instead of a table.")
    ] = False,
) -> None:
    """Compact the cluster: remove nodes in random orders until production (packed by requests,
    hard rules kept) no longer fits; report the 90th percentile and min-max over the trials."""
    paths = [str(p) for p in files] if files else [str(p) for p in irina_paths()]
    if len(paths) not in (2, 3):
        raise _fail([f"compact: expected INFRA WORKLOADS [BLUEPRINT], got {len(paths)} files"])
    try:
        cluster = _cluster(paths[0], paths[1])
    except IRError as e:
        raise _fail([p.render() for p in e.problems]) from None
    baseline = _blueprint_nodes(*paths) if len(paths) == 3 else None
    n_workers = workers or os.cpu_count() or 1
    results: dict[int, Trial] = {}
    try:
        with (
            ProcessPoolExecutor(max_workers=min(n_workers, trials)) as pool,
            Progress(
                TextColumn("compaction trials"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                transient=True,
                disable=as_json,
                console=Console(stderr=True),
            ) as bar,
        ):
            task = bar.add_task("trials", total=trials)
            futures = {pool.submit(_one, paths[0], paths[1], s, pending_fraction): s for s in range(trials)}
            for f in as_completed(futures):
                results[futures[f]] = f.result()
                bar.advance(task)
    except ValueError as e:  # the workload does not fit the whole cluster
        raise _fail([f"{paths[1]}: {e}"]) from None
    result = Compaction(tuple(results[s] for s in range(trials)))
    figures = {
        "nodes": len(cluster.nodes),
        "workloads": len(cluster.workloads),
        "trials": [
            {"seed": t.seed, "nodes": t.nodes, "pending": list(t.pending), "packs": t.packs}
            for t in result.trials
        ],
        "p90": result.p90,
        "min": result.low,
        "max": result.high,
        "blueprint_active_nodes": baseline,
        "pending_fraction": pending_fraction,
    }
    if as_json:
        typer.echo(json.dumps(figures, indent=2))
        return
    con = table_console()
    table = Table(title="Compaction: production packed by requests", show_header=False, title_justify="left")
    table.add_column("what")
    table.add_column("value", justify="right")
    table.add_row("nodes in the cluster", f"{len(cluster.nodes):,}")
    if baseline is not None:
        table.add_row("active nodes in the blueprint", f"{baseline:,}")
    table.add_row(f"smallest cluster, p90 of {trials} trials", f"{result.p90:g}")
    table.add_row("min - max", f"{result.low} - {result.high}")
    table.add_row("per trial", " ".join(str(t.nodes) for t in result.trials))
    con.print(table)
    for t in result.trials:
        for w in t.pending:
            con.print(f"pending in trial {t.seed} (within the {pending_fraction:.1%} allowed): {w}")
