"""``kalena simulate``: replay a day on a Kuberina-planned cluster through the real policy core.

With no arguments: 24 simulated hours on the bundled Irina benchmark and its blueprint. Writes
``report.json`` and PNG plots to ``--out`` and prints a summary table; ``--json`` prints the report
(and nothing else) to stdout. Exit codes: 0 done; 1 the run broke the restoration invariant (its
figures are invalid, seed 000 §6.3 metric 9); 2 bad input (one line per IR problem on stderr,
``FILE: KEYPATH: MESSAGE (value: VALUE)``), a bad option or an unwritable output folder.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kalena.archive import Archive, ArchiveError
from kalena.cli.fanout import finished, started
from kalena.cli.screen import command_line, table_console
from kalena.core.cluster import Cluster
from kalena.core.config import ESTIMATORS, PolicyConfig
from kalena.core.resources import CPU, DIMS, NDIM, RAM
from kalena.core.validate import ConfigError
from kalena.data import irina_paths
from kalena.ir import IRError, load_cluster
from kalena.ir.write import write_files_atomic
from kalena.sim import SimConfig, Simulation, build_report, compare_reports
from kalena.sim.arms import ArmSeries, compare_arm, compare_configs
from kalena.sim.batch import BatchTasks
from kalena.sim.recorded import Samples
from kalena.sim.report import OUTPUT_FILES, REPORT_FILE, task_index, task_story

EXIT_INVARIANT = 1
EXIT_BAD_INPUT = 2
#: ``--workers`` of the commands with ``--compare``
CompareWorkersOpt = Annotated[
    int,
    typer.Option(
        help="Processes for --compare's other two arms, running beside the first (0: one per CPU).", min=0
    ),
]


#: The core's estimator names as a Typer choice (one list: ``kalena.core.config.ESTIMATORS``).
Estimator = StrEnum("Estimator", {name: name for name in ESTIMATORS})  # type: ignore[misc]
DEFAULT_ESTIMATOR = Estimator(PolicyConfig().estimator)


def _fail(lines: list[str]) -> typer.Exit:
    for line in lines:
        typer.echo(line, err=True)
    return typer.Exit(EXIT_BAD_INPUT)


#: The longest run accepted: one leap year. A day takes about 300 MiB and two minutes here; far
#: longer runs are a typo (``--hours 1e12`` would grow until the machine is out of memory).
MAX_HOURS = 8784.0


def _load(value: float) -> float:
    if not (math.isfinite(value) and value > 0):
        raise typer.BadParameter(f"{value} is not a finite number > 0")
    return value


def _hours(value: float) -> float:
    if not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a finite number of hours")
    return value


def _check_out(out: Path) -> str | None:
    """Why ``--out`` cannot take this run's files (checked before the run), or None."""
    if out.exists():
        if not out.is_dir():
            return f"{out}: --out must be a folder, and this is a file"
        if not os.access(out, os.W_OK | os.X_OK):
            return f"{out}: --out is not writable"
        return None
    parent = out.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        return f"{out}: --out cannot be created ({parent} is not a writable folder)"
    return None


def write_outputs(
    out: Path,
    report: dict[str, Any],
    sim: Simulation | None,
    arms: list[tuple[str, ArmSeries]] | None = None,
    extra: Mapping[str, str | bytes] | None = None,
) -> list[Path]:
    """report.json, the plots (``sim`` None: no plots; ``arms``: the compared arms) and ``extra``
    files by name, into ``out``: all of them or none, and the outputs of an earlier run that this
    one did not write (plots after ``--no-plots``, a comparison after a plain run) removed, so the
    folder always holds one run's complete output (``write_files_atomic``)."""
    files: dict[Path, str | bytes] = {out / name: data for name, data in (extra or {}).items()}
    files[out / REPORT_FILE] = json.dumps(report, indent=2) + "\n"
    if sim is not None:
        from kalena.sim.plots import render_plots  # matplotlib loads only when plots are wanted

        files.update({out / name: png for name, png in render_plots(sim, arms).items()})
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    try:
        write_files_atomic(files, remove=[out / name for name in OUTPUT_FILES])
    except OSError:
        if created and not any(out.iterdir()):
            out.rmdir()
        raise
    return list(files)


def _cluster(infra: Path | None, workloads: Path | None, blueprint: Path | None) -> Cluster:
    given = [p for p in (infra, workloads, blueprint) if p is not None]
    if not given:
        return load_cluster(*irina_paths())
    if len(given) != 3:
        raise _fail(["simulate needs all three IR documents: --infra, --workloads and --blueprint"])
    try:
        cluster = load_cluster(infra, workloads, blueprint)  # type: ignore[arg-type]
    except IRError as e:
        raise _fail([p.render() for p in e.problems]) from None
    # IR v1 reads an omitted dimension of a node's allocatable as unconstrained; a node with no
    # cpu or ram bound would take any amount of batch, and a run on it would mean nothing
    alloc = np.array([n.allocatable.array() for n in cluster.nodes]).reshape(-1, NDIM)
    bad = [
        f"{infra}: nodes[{i}].allocatable.{DIMS[d]}: the simulator needs a finite {DIMS[d]} capacity on "
        f"every node (omitted, IR v1 reads it as unconstrained) (value: {cluster.nodes[i].name!r})"
        for d in (CPU, RAM)
        for i in np.flatnonzero(~np.isfinite(alloc[:, d])).tolist()
    ]
    if bad:
        raise _fail(bad)
    return cluster


def _simulation(
    cluster: Cluster,
    config: SimConfig,
    why: list[str] | None = None,
    *,
    tasks: BatchTasks | None = None,
    production: Samples | None = None,
) -> Simulation:
    """The run, made and checked (every problem said before any long work starts); ``tasks`` and
    ``production``: recorded inputs (``kalena replay``) instead of the generated ones."""
    try:
        sim = Simulation(cluster, config, tasks, production)
    except ValueError as e:  # a blueprint the ledger refuses (e.g. it overfills a node)
        raise _fail([f"cannot simulate this cluster: {e}"]) from None
    unknown = [t for t in why or [] if task_index(sim, t) is None]
    if unknown:
        some = ", ".join(spec.id for spec in sim.tasks.specs[:3])
        raise _fail(
            [f"--why: no batch pod {t!r} in this run (its pods are named like {some})" for t in unknown]
        )
    return sim


def _play(sim: Simulation, label: str, show: bool) -> Simulation:
    """``sim`` run to its end, with a progress bar when ``show``."""
    config = sim.cfg
    if not show:
        sim.run()
        return sim
    console = Console(stderr=True)
    with Progress(
        TextColumn(f"[bold]{label}"),
        BarColumn(),
        TextColumn("{task.completed:,.0f}/{task.total:,.0f} simulated min"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        refresh_per_second=4,  # the bar's render thread shares the GIL with the simulation
    ) as bar:
        task = bar.add_task(label, total=config.ticks * config.tick_s / 60.0)
        sim.run(lambda k, _total: bar.update(task, completed=k * config.tick_s / 60.0))
    return sim


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.4f}" if abs(value) < 10 else f"{value:,.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


ROWS: tuple[tuple[str, str], ...] = (
    ("Work enabled by reclamation (vs baseline)", "comparison.work_enabled_by_reclamation_fraction"),
    ("Work of pods placed by reclamation", "task_reclaimed_work_fraction"),
    ("Work in reclaimed capacity (upper bound)", "reclaimed_work_fraction"),
    ("Reclaimed cpu (core-hours)", "reclaimed_cpu_core_hours"),
    ("Reclaimed ram (GiB-hours)", "reclaimed_ram_gib_hours"),
    ("Batch cpu used (core-hours)", "batch_cpu_core_hours"),
    ("Production cpu used (core-hours)", "production_cpu_core_hours"),
    ("Batch tasks completed", "batch_tasks_completed"),
    ("Batch tasks pending at the end", "batch_tasks_pending_at_end"),
    ("Completion-time inflation p50", "completion_time_inflation.p50"),
    ("Completion-time inflation p90", "completion_time_inflation.p90"),
    ("Evictions: reservation ledger", "evictions.reservation-ledger-breach"),
    ("Evictions: limit breach", "evictions.limit-breach"),
    ("Evictions: escalation drain", "evictions.escalation-drain"),
    ("Production OOM kills", "production_oom_kills"),
    ("Production cpu unmet (core-seconds)", "production_unmet_cpu_core_seconds"),
    ("  of which anti-starvation caps", "production_capped_cpu_core_seconds"),
    ("Production cpu lost to interference (core-s)", "production_interference_cpu_core_seconds"),
    ("Production time above its reservation", "production_above_reservation_fraction"),
    ("Pareto reserve yield", "pareto_reserve_yield"),
    ("Restoration violations", "restoration_violations"),
    ("Wall seconds", "wall_seconds"),
)


#: The summary's column name of each arm (``SimConfig.arm``).
ARM_LABELS = {"kalena": "reclaim on", "kalena-no-reclaim": "reclaim off", "baseline": "baseline"}


def _headline(report: dict[str, Any]) -> str:
    """The sentence under the table: Borg's ~20 % beside what reclamation made possible (the
    baseline comparison where it ran, else the task-level count), never the per-node upper bound."""
    borg = "Borg: about 20 % of a median cell's workload ran in reclaimed resources"
    task = report["task_reclaimed_work_fraction"]
    enabled = report.get("comparison", {}).get("work_enabled_by_reclamation_fraction")
    if enabled is not None:
        return (
            f"Reclamation enabled {100 * enabled:.1f} % of all cpu work beyond the baseline arm's batch; "
            f"pods placed by reclamation did {100 * task:.1f} % ({borg})."
        )
    return f"Pods placed by reclamation did {100 * task:.1f} % of all cpu work ({borg}; --compare for more)."


def _story(story: dict[str, Any]) -> Table:
    """``--why``: one pod's steps as a table, its end and its why-pending answer in the title."""
    end = f"{story['state_at_end']}" + (f" on {story['node_at_end']}" if story["node_at_end"] else "")
    title = f"{story['task']}: {end}, {story['evictions']} evictions, {story['kernel_kills']} kernel kills"
    if "why_pending" in story:
        title += f"\nwhy pending: {story['why_pending']}"
    table = Table(title=title, title_justify="left")
    for col in ("simulated s", "state", "reason"):
        table.add_column(col)
    for step in story["history"]:
        table.add_row(f"{step['at']:,.0f}", step["state"], step["reason"])
    return table


def _get(report: dict[str, Any], path: str) -> Any:
    value: Any = report
    for part in path.split("."):
        value = value.get(part, "-") if isinstance(value, dict) else "-"
    return value


def _table(arms: list[tuple[str, dict[str, Any]]]) -> Table:
    first = arms[0][1]
    hours = first["simulated_seconds"] / 3600.0
    c = first["cluster"]
    title = (
        f"kalena simulate: {hours:g} h on {c['nodes']} nodes, {c['production_workloads']:,} production pods, "
        f"seed {first['seed']}, {first['estimator']} estimator"
    )
    table = Table(title=title, title_justify="left")
    table.add_column("metric", style="bold")
    for name, _ in arms:
        table.add_column(name, justify="right")
    for label, path in ROWS:
        table.add_row(label, *(_fmt(_get(r, path)) for _, r in arms))
    return table


def _policy(estimator: str, margin: float | None, half_life: float | None) -> PolicyConfig:
    """The policy with the estimator's margin and half-life as given (exit 2 naming a bad one)."""
    policy = PolicyConfig(estimator=estimator)
    params = getattr(policy, estimator)
    changes: dict[str, float] = {}
    if margin is not None:
        changes["margin_service" if estimator == "peak" else "margin"] = margin
    if half_life is not None:
        if not hasattr(params, "half_life_s"):
            raise _fail([f"--half-life: the {estimator} estimator has no half-life (it keeps a window)"])
        changes["half_life_s"] = half_life
    try:
        return dataclasses.replace(policy, **{estimator: dataclasses.replace(params, **changes)})
    except ConfigError as e:
        option = "--half-life" if e.key == "half_life_s" else "--margin"
        raise _fail([f"{option}: must be {e.rule} (value: {e.value!r})"]) from None


def simulate(
    hours: Annotated[
        float,
        typer.Option(
            help="Simulated hours (at most one leap year).", min=0.01, max=MAX_HOURS, callback=_hours
        ),
    ] = 24.0,
    seed: Annotated[int, typer.Option(help="Seed of every random draw (same seed, same report).", min=0)] = 0,
    estimator: Annotated[Estimator, typer.Option(help="Reservation estimator.")] = DEFAULT_ESTIMATOR,
    infra: Annotated[
        Path | None, typer.Option(help="Infrastructure document (default: bundled Irina).")
    ] = None,
    workloads: Annotated[Path | None, typer.Option(help="Workloads document.")] = None,
    blueprint: Annotated[Path | None, typer.Option(help="Blueprint document.")] = None,
    no_reclaim: Annotated[
        bool,
        typer.Option(
            "--no-reclaim", metavar="", help="Kalena's policy without reclamation (reservations at requests)."
        ),
    ] = False,
    baseline: Annotated[
        bool,
        typer.Option(
            "--baseline",
            metavar="",
            help="No Kalena: batch by requests into unallocated capacity, only the kernel's sharing.",
        ),
    ] = False,
    compare: Annotated[
        bool,
        typer.Option(
            "--compare", metavar="", help="Run all three arms (reclaim, no reclaim, baseline) side by side."
        ),
    ] = False,
    workers: CompareWorkersOpt = 0,
    out: Annotated[Path, typer.Option(help="Folder for report.json and the PNG plots.")] = Path("out"),
    as_json: Annotated[
        bool, typer.Option("--json", metavar="", help="Print report.json to stdout and nothing else.")
    ] = False,
    plots: Annotated[bool, typer.Option(metavar="", help="Write the PNG plots.")] = True,
    margin: Annotated[
        float | None,
        typer.Option(help="The estimator's margin over usage, >= 1 (peak: production's). Default: its own."),
    ] = None,
    half_life: Annotated[
        float | None,
        typer.Option(help="Seconds of the estimator's half-life, > 0 (decay, histogram). Default: its own."),
    ] = None,
    drop_empty_nodes: Annotated[
        bool,
        typer.Option(
            "--drop-empty-nodes",
            metavar="",
            help="Leave out the nodes the blueprint puts no production on (batch gets only what it leaves).",
        ),
    ] = False,
    why: Annotated[
        list[str] | None,
        typer.Option(
            "--why",
            metavar="TASK",
            help="A batch pod's story: its every step and reason, and why it waits (repeatable).",
        ),
    ] = None,
    batch_load: Annotated[
        float,
        typer.Option(help="The batch load offered, as a multiple of the fitted one (> 0).", callback=_load),
    ] = 1.0,
    archive: Annotated[
        str | None,
        typer.Option(
            metavar="WHERE",
            help="Record every pod's usage, reservation and events each simulated minute into this usage "
            "archive (an SQLite file or a postgresql:// URL), as a node agent would.",
        ),
    ] = None,
) -> None:
    """Replay a day on the cluster through the real policy core (default: 24 h on bundled Irina)."""
    arm_options = (("--compare", compare), ("--no-reclaim", no_reclaim), ("--baseline", baseline))
    given = [option for option, on in arm_options if on]
    if len(given) > 1:
        raise _fail([f"{' and '.join(given)}: give one of them (--compare runs every arm)"])
    bad_out = _check_out(out)
    if bad_out is not None:
        raise _fail([bad_out])
    policy = _policy(estimator.value, margin, half_life)
    cluster = _cluster(infra, workloads, blueprint)
    if drop_empty_nodes:
        cluster = cluster.without_empty_nodes()
    base = SimConfig(
        hours=hours,
        seed=seed,
        reclaim=not (no_reclaim or baseline),
        enforce=not baseline,
        batch_load_factor=batch_load,
        policy=policy,
    )
    show = not as_json
    sim = _simulation(cluster, base, why)
    try:
        sink = Archive(archive) if archive is not None else None
    except ArchiveError as e:
        raise _fail([f"--archive: {e}"]) from None
    sim.archive = sink
    try:
        with beside(compare, workers, cluster, base) as ahead:
            _play(sim, ARM_LABELS[base.arm], show)
            if sink is not None:  # every closed 5-minute slot and hour rolled up, as a daemon would have
                sink.compact(sim.now + sink.retention.grace_s + 3600.0)  # as `kalena archive compact`
            report = build_report(sim)
            if why:
                report["why"] = {t: task_story(sim, task_index(sim, t)) for t in why}  # type: ignore[arg-type]
            report, arms, runs = other_arms(base, sim, report, ahead, as_json)
    finally:
        if sink is not None:
            sink.close()
    report["command"] = command_line()  # what made the folder's figures (kalena report shows it)
    try:
        written = write_outputs(out, report, sim if plots else None, runs)
    except OSError as e:
        raise _fail([f"{out}: cannot write the report: {e.strerror or e}; nothing was written"]) from None
    if as_json:
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
    else:
        console = table_console()
        console.print(_table(arms))
        console.print("wrote " + ", ".join(str(p) for p in written))
        console.print(_headline(report))
        for story in report.get("why", {}).values():
            console.print(_story(story))
    exit_if_invalid(report)


def beside(
    compare: bool, workers: int, cluster: Cluster, base: SimConfig, *inputs: Any
) -> contextlib.AbstractContextManager[list[Future[Any]] | None]:
    """With ``compare``, the other two arms (:func:`compare_arm` on ``cluster``, each arm's config
    and ``inputs``) started in ``workers`` processes, to run while the first arm runs here."""
    if not compare:
        return contextlib.nullcontext(None)
    return started(compare_arm, [(cluster, cfg, *inputs) for cfg in compare_configs(base)], workers)


def other_arms(
    base: SimConfig,
    sim: Simulation,
    report: dict[str, Any],
    ahead: Sequence[Future[Any]] | None,
    quiet: bool,
) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]], list[tuple[str, ArmSeries]] | None]:
    """With ``ahead``, the other arms of a comparison (:func:`compare_arm` on
    :func:`compare_configs` of ``base``, started beside ``sim``), waited for, and the first arm's
    report turned into the comparison; the reports, and the plotted series (None without ``ahead``),
    by arm label."""
    arms = [(ARM_LABELS[base.arm], report)]
    if ahead is None:
        return report, arms, None
    runs = [(ARM_LABELS[base.arm], ArmSeries.of(sim))]
    try:
        done = finished(ahead, "other arms", quiet)
    except ValueError as e:  # as the first arm would have said it (its inputs are the same)
        raise _fail([f"cannot simulate this cluster: {e}"]) from None
    for cfg, (other, series) in zip(compare_configs(base), done, strict=True):
        runs.append((ARM_LABELS[cfg.arm], series))
        arms.append((ARM_LABELS[cfg.arm], other))
    report = compare_reports(arms[0][1], arms[1][1], arms[2][1])
    arms[0] = (arms[0][0], report)
    return report, arms, runs


def exit_if_invalid(report: dict[str, Any]) -> None:
    """Exit 1 saying so when the run broke the restoration invariant (its figures are invalid)."""
    if report["restoration_violations"]:
        typer.echo(
            f"restoration invariant violated {report['restoration_violations']} times: figures invalid",
            err=True,
        )
        raise typer.Exit(EXIT_INVARIANT)
