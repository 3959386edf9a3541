"""``kalena compact``: the fewest nodes the workload fits on, with and without reclamation.

With ``--out DIR``: ``compaction.json`` (the figures ``--json`` prints) and ``compaction.png`` (the
arms as Borg's Fig. 10 draws its cells: the 90th percentile of the trials with min-max bars),
written together or not at all.

Exit codes: 0 done; 2 bad input (one line per problem, ``FILE: KEYPATH: MESSAGE (value: VALUE)``),
a workload that does not fit even sixteen times the cluster, or an unwritable ``--out``.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from kalena.cli.compact_trials import TrialFailed, TrialRunner
from kalena.cli.fanout import (
    MANIFESTS,
    SchedulerOpt,
    WorkersOpt,
    submitter,
    worker_cluster,
    worker_manifests,
    workers_of,
)
from kalena.cli.pack import manifest_figures, show_manifest_notes
from kalena.cli.screen import bad_input, command_line, progress_bar, table_console
from kalena.core.cluster import Cluster
from kalena.core.compaction import DEFAULT_TRIALS, PENDING_FRACTION, Compaction
from kalena.core.packing import pack
from kalena.data import irina_paths
from kalena.ir import IRError, load_cluster
from kalena.ir.write import write_files_atomic

if TYPE_CHECKING:  # the simulator is imported only when a run is asked for
    from kalena.sim.checkpoint import Checkpoint

#: Kuberina's own figures for Irina (its paper): full packing and the Pareto point.
KUBERINA_FULL, KUBERINA_PARETO = 152, 182
RECORD_FILE = "compaction.json"
PLOT_FILE = "compaction.png"
#: The arms in the order the table and the figure show them, with their labels.
ARM_LABELS = {
    "production": "production by requests",
    "reclaim_on": "+ batch, reclamation on (reservations)",
    "reclaim_off": "+ batch, reclamation off (requests)",
}


def _checkpoint(
    paths: list[str],
    cluster: Cluster,
    placed: Cluster | None,
    hours: float,
    seed: int,
    quiet: bool,
    validate: bool,
    runner: TrialRunner,
) -> tuple[Checkpoint, Cluster, dict[str, Any]]:
    """Simulate ``hours`` on the cluster as ``placed`` (its blueprint; without one, the packer's
    placement): the worst hourly checkpoint, the cluster as simulated and, with ``validate``, the
    day's SLO proxy (what the validation day is set beside; empty without). The batch arms of
    ``runner`` follow the worst checkpoint so far while the run goes on."""
    from kalena.sim import SimConfig, Simulation
    from kalena.sim.checkpoint import run_with_checkpoints, worst
    from kalena.sim.validation import slo_figures

    if placed is None:
        result = pack(cluster)
        if not result.complete:
            raise bad_input([f"{paths[-1]}: production does not pack: {len(result.pending)} pods pending"])
        placed = dataclasses.replace(cluster, placement=result.placement)
    # only the validation reads the day's figures: without it the run is kept for its checkpoints
    sim = Simulation(placed, SimConfig(hours=hours, seed=seed), measured=validate)
    so_far: list[Checkpoint] = []

    def taken(cp: Checkpoint) -> None:
        if not so_far or worst([so_far[0], cp], cluster) is cp:  # a new worst: the batch arms follow it
            so_far[:] = [cp]
            blob = pickle.dumps(cp.load)
            runner.start("reclaim_on", blob, True)
            runner.start("reclaim_off", blob, False)

    def tick(k: int, _total: int) -> None:
        bar.update(task, completed=k)
        runner.pump()

    with progress_bar("simulating for checkpoints", quiet) as bar:
        task = bar.add_task("ticks", total=sim.cfg.ticks)
        checkpoints = run_with_checkpoints(sim, cluster, progress=tick, taken=taken)
    try:
        found = worst(checkpoints, cluster)
    except ValueError as e:
        raise bad_input([f"--batch-hours: {e} (value: {hours:g})"]) from None
    assert found is so_far[0]
    return found, placed, slo_figures(sim) if validate else {}


def _validate(
    full: Cluster, day: dict[str, Any], result: Compaction, hours: float, seed: int, quiet: bool
) -> dict[str, Any]:
    """The validation day: the reclaiming arm's trial at the 90th percentile (the fewest nodes at
    or above it), its cluster simulated for ``hours`` with the full cluster's batch, beside the
    full cluster's own day (``day``)."""
    from kalena.core.compaction import compacted
    from kalena.sim import SimConfig
    from kalena.sim.validation import day as validation_day

    pick = min(
        (s for s, t in enumerate(result.trials) if t.nodes >= result.p90),
        key=lambda s: (result.trials[s].nodes, s),
    )
    small = compacted(full, result.trials[pick])
    config = SimConfig(hours=hours, seed=seed)
    with progress_bar("simulating the compacted cluster", quiet) as bar:
        task = bar.add_task("ticks", total=config.ticks)
        figures = validation_day(small, full, config, progress=lambda k, _t: bar.update(task, completed=k))
    return {"hours": hours, "trial": pick, "full": day, "compacted": figures}


#: the validation table's rows: label, key
VALIDATION_ROWS = (
    ("nodes", "nodes"),
    ("meets the SLO proxy", "meets_slo"),
    ("production OOM kills", "production_oom_kills"),
    ("production evictions", "production_evictions"),
    ("production cpu unmet, share of its use", "production_unmet_share"),
    ("production cpu used (core-hours)", "production_cpu_core_hours"),
    ("batch cpu used (core-hours)", "batch_cpu_core_hours"),
    ("batch tasks completed", "batch_tasks_completed"),
    ("batch tasks pending at the end", "batch_tasks_pending_at_end"),
    ("restoration violations", "restoration_violations"),
)


def _validation_table(v: dict[str, Any]) -> Table:
    table = Table(
        title=f"Validation: {v['hours']:g} simulated hours, the full cluster's batch (trial {v['trial']})",
        title_justify="left",
    )
    for col in ("", "full cluster", "compacted (reclamation on, p90)"):
        table.add_column(col, justify="left" if not col else "right")
    for label, key in VALIDATION_ROWS:
        cells = [v[side][key] for side in ("full", "compacted")]
        table.add_row(label, *(f"{c:.4%}" if key.endswith("share") else f"{c:,}" for c in cells))
    return table


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
    validate: Annotated[
        bool,
        typer.Option(
            "--validate",
            metavar="",
            help="Simulate the same day on the reclaiming arm's compacted cluster (its p90 trial) with "
            "the full cluster's batch, and report its SLO proxy beside the full cluster's.",
        ),
    ] = False,
    out: Annotated[
        Path | None,
        typer.Option(help="Folder for compaction.json and compaction.png (default: write no file)."),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", metavar="", help="Print the figures as JSON instead of a table.")
    ] = False,
    manifests: Annotated[
        list[Path] | None,
        typer.Option(
            "--manifests",
            help="Kubernetes YAML (Nodes and workloads; a folder: its *.yaml) instead of the IR files; "
            "repeatable. The full cluster is the packer's placement.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Compact the cluster (Borg §5.1): remove nodes in random orders until the workload, packed
    with every hard rule kept, no longer fits; production alone, then with a simulated day's batch
    packed by reservations (reclamation on) and by requests (off)."""
    if manifests and files:
        raise bad_input(["compact: give INFRA WORKLOADS [BLUEPRINT] or --manifests, not both"])
    paths = [str(p) for p in manifests or files or irina_paths()]
    if not manifests and len(paths) not in (2, 3):
        raise bad_input([f"compact: expected INFRA WORKLOADS [BLUEPRINT], got {len(paths)} files"])
    source = (MANIFESTS, *paths) if manifests else tuple(paths[:2])
    if validate and batch_hours == 0:
        raise bad_input(["--validate: the validation day is --batch-hours long; give at least 1 (value: 0)"])
    if 0 < batch_hours < 1:
        raise bad_input([f"--batch-hours: at least one hour (one checkpoint), or 0 (value: {batch_hours:g})"])
    try:
        cluster = worker_cluster(*source)
        placed = load_cluster(*paths) if len(paths) == 3 and not manifests else None  # the blueprint's
    except IRError as e:
        raise bad_input([p.render() for p in e.problems]) from None
    if not cluster.nodes:
        raise bad_input([f"{', '.join(paths)}: no nodes to compact"])
    if out is not None:  # said before the trials, not after them
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise bad_input(
                [f"--out: cannot make the folder: {e.strerror or e} (value: {str(out)!r})"]
            ) from None
    load, checkpoint, full, day = None, None, cluster, {}
    baseline = len({*placed.placement.values()}) if placed is not None else None
    wall: dict[str, float] = {}
    t0 = time.perf_counter()
    after = workers_of(workers) if not scheduler else 3 * trials  # (Dask: its cluster queues them)
    during = after - 1 if not scheduler and batch_hours > 0 else after  # the run keeps a CPU
    try:
        # (the stop files' folder outlives the workers: it is removed after they have ended)
        with tempfile.TemporaryDirectory(prefix="kalena-") as stops, submitter(workers, scheduler) as submit:
            stop_dir = None if scheduler else stops  # (a Dask worker does not see this machine's files)
            runner = TrialRunner(submit, source, trials, pending_fraction, during, stop_dir)
            runner.start("production", None, True)  # needs nothing from the run
            if batch_hours > 0:
                cp, full, day = _checkpoint(
                    paths, cluster, placed, batch_hours, seed, as_json, validate, runner
                )
                load = cp.load
                checkpoint = {
                    "time_h": cp.time / 3600.0,
                    "reserved_share": round(cp.share(cluster), 4),
                    "batch_pods": len(load.batch),
                }
                wall["checkpoint_run"] = round(time.perf_counter() - t0, 2)
                t0 = time.perf_counter()
            with progress_bar("compaction trials", as_json) as bar:
                task = bar.add_task("trials", total=trials * len(runner.arms))
                results = runner.finish(after, lambda k, _t: bar.update(task, completed=k))
    except TrialFailed as e:
        if isinstance(e.error, ValueError):  # the workload does not fit even a grown cluster
            raise bad_input([f"{source[-1]}: {e.error}"]) from None
        raise bad_input([f"trial {e.seed} of {e.arm}: the run failed ({e.error!r})"]) from None
    results = {name: results[name] for name in ARM_LABELS if name in results}  # the table's order
    wall["trials"] = round(time.perf_counter() - t0, 2)
    figures: dict[str, Any] = {
        "command": command_line(),
        "nodes": len(cluster.nodes),
        "workloads": len(cluster.workloads),
        "blueprint_active_nodes": baseline,
        "kuberina_paper": (
            {"full_packing": KUBERINA_FULL, "pareto": KUBERINA_PARETO} if not (files or manifests) else None
        ),
        "pending_fraction": pending_fraction,
        "checkpoint": checkpoint,
    }
    mc = worker_manifests(*paths) if manifests else None  # (read already: cached)
    if mc is not None:
        figures.update(manifest_figures(mc))
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
                    "capacity_bound": t.bound,
                }
                for s, t in enumerate(result.trials)
            ],
        }
    if load is not None:
        figures["extra_nodes_without_reclamation"] = results["reclaim_off"].p90 - results["reclaim_on"].p90
    if validate:
        t0 = time.perf_counter()
        figures["validation"] = _validate(full, day, results["reclaim_on"], batch_hours, seed, as_json)
        wall["validation"] = round(time.perf_counter() - t0, 2)
    figures["wall_seconds"] = wall
    if out is not None:
        try:  # both files or neither: written aside and renamed into place together
            write_files_atomic(
                {out / RECORD_FILE: json.dumps(figures, indent=2) + "\n", out / PLOT_FILE: plot(figures)}
            )
        except OSError as e:
            raise bad_input([f"--out: cannot write: {e.strerror or e} (value: {str(out)!r})"]) from None
    if as_json:
        typer.echo(json.dumps(figures, indent=2))
        return
    _show(figures, results, trials, pending_fraction)
    if mc is not None:
        show_manifest_notes(table_console(), mc)
    if out is not None:
        table_console().print(f"wrote {out / RECORD_FILE} and {out / PLOT_FILE}")


def _show(figures: dict[str, Any], results: dict[str, Compaction], trials: int, fraction: float) -> None:
    con = table_console()
    table = Table(title=f"Compaction: the smallest cluster, p90 of {trials} trials", title_justify="left")
    for col in ("workload", "p90", "min - max", "per trial"):
        table.add_column(col, justify="left" if col in ("workload", "per trial") else "right")
    for name, r in results.items():
        table.add_row(
            ARM_LABELS[name], f"{r.p90:g}", f"{r.low} - {r.high}", " ".join(str(t.nodes) for t in r.trials)
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
        for seed, t in enumerate(r.trials):
            if t.pending:
                con.print(
                    f"{name}, trial {seed}: {len(t.pending)} pending, within the {fraction:.1%} allowed"
                )
    if figures.get("validation"):
        con.print(_validation_table(figures["validation"]))


def plot(figures: dict[str, Any]) -> bytes:
    """``compaction.png``: each arm's nodes needed as Borg's Fig. 10 draws a cell, a bar at the
    90th percentile of the trials with min-max error bars; Kuberina's published figures (the
    bundled Irina) or the blueprint's active nodes as reference lines; the extra nodes without
    reclamation in the title (PNG)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = [name for name in ARM_LABELS if name in figures]
    p90 = [float(figures[a]["p90"]) for a in arms]
    low = [p - figures[a]["min"] for a, p in zip(arms, p90, strict=True)]
    high = [figures[a]["max"] - p for a, p in zip(arms, p90, strict=True)]
    colours = {"production": "0.55", "reclaim_on": "#1f77b4", "reclaim_off": "#ff7f0e"}
    fig, ax = plt.subplots(figsize=(10, 5))
    xs = list(range(len(arms)))
    ax.bar(xs, p90, width=0.55, color=[colours[a] for a in arms], alpha=0.8, zorder=2)
    ax.errorbar(xs, p90, yerr=[low, high], fmt="none", ecolor="k", capsize=8, lw=1.4, zorder=3)
    for x, p, hi in zip(xs, p90, high, strict=True):
        ax.annotate(f"{p:g}", (x, p + hi), textcoords="offset points", xytext=(0, 5), ha="center", fontsize=9)
    lines: list[tuple[float, str, str]] = [
        (figures["nodes"], f"nodes in the cluster: {figures['nodes']}", "0.3")
    ]
    paper = figures.get("kuberina_paper")
    if paper:
        lines += [
            (paper["full_packing"], f"Kuberina, full packing: {paper['full_packing']}", "#2ca02c"),
            (paper["pareto"], f"Kuberina, Pareto: {paper['pareto']}", "#9467bd"),
        ]
    elif figures.get("blueprint_active_nodes") is not None:
        active = figures["blueprint_active_nodes"]
        lines.append((active, f"the blueprint's active nodes: {active}", "#2ca02c"))
    for y, label, colour in lines:
        ax.axhline(y, color=colour, ls="--", lw=1.1, label=label, zorder=2.5)
    ax.set_xticks(xs, [ARM_LABELS[a].replace(", ", ",\n", 1) for a in arms], fontsize=9)
    ax.set_ylabel("nodes needed (p90 of the trials; bars: min - max)")
    ax.set_ylim(bottom=0)
    n = len(figures[arms[0]]["trials"])
    title = f"Compaction in the style of Borg's Fig. 10: {n} trials per arm"
    extra = figures.get("extra_nodes_without_reclamation")
    if extra is not None:
        title += f"\nextra nodes without reclamation (p90): {extra:g}"
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", alpha=0.3, zorder=0)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, title="reference", title_fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()
