"""``kalena sweep``: sweeps over simulated days (``pareto``: the planner's capacity threshold;
``seeds``: the three arms over seeds and batch loads).

Exit codes: 0 done; 1 a run broke the restoration invariant (its figures are invalid); 2 bad
input (IR problem lines, a bad point list, an unwritable folder).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from kalena.cli.fanout import JobFailed, SchedulerOpt, WorkersOpt, run_all, worker_cluster
from kalena.cli.screen import bad_input, command_line, number_list, table_console
from kalena.data import irina_paths
from kalena.ir import IRError
from kalena.ir.write import write_files_atomic
from kalena.sim.pareto import DEFAULT_MAX_UNMET, DEFAULT_POINTS, Point, optimum, plot, run_point

EXIT_INVARIANT = 1
PLOT_FILE = "pareto.png"
RECORD_FILE = "pareto.json"

app = typer.Typer(help="Sweeps over simulated days.", no_args_is_help=True)


def _one(infra: str, workloads: str, x: int, hours: float, seed: int) -> Point:
    """One point in a worker process (the cluster read once per process)."""
    return run_point(worker_cluster(infra, workloads), x, hours, seed)


def _points(text: str) -> tuple[int, ...]:
    return tuple(sorted(int(x) for x in number_list("--points", text, whole=True, lo=1, hi=100)))


def _inputs(command: str, files: list[Path] | None, kinds: tuple[str, ...], out: Path) -> tuple[str, ...]:
    """A sweep's IR files (default: the bundled Irina's first ``len(kinds)``), read once here so
    that a bad one is said before any run, and ``out`` made; exit 2 naming what is wrong."""
    paths = tuple(str(p) for p in files) if files else tuple(str(p) for p in irina_paths()[: len(kinds)])
    if len(paths) != len(kinds):
        raise bad_input([f"{command}: expected {' '.join(kinds)}, got {len(paths)} files"])
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise bad_input([f"--out: cannot make the folder: {e.strerror or e} (value: {str(out)!r})"]) from None
    try:
        worker_cluster(*paths)
    except IRError as e:
        raise bad_input([p.render() for p in e.problems]) from None
    return paths


@app.command("pareto")
def pareto(
    files: Annotated[
        list[Path] | None,
        typer.Argument(
            help="INFRA WORKLOADS (IR v1 or legacy); default: the bundled Irina.", show_default=False
        ),
    ] = None,
    points: Annotated[
        str, typer.Option(help="The caps X to pack at, % of each node's capacity, comma-separated.")
    ] = ",".join(str(x) for x in DEFAULT_POINTS),
    hours: Annotated[float, typer.Option(help="Simulated hours at each point.", min=1.0, max=8784.0)] = 24.0,
    seed: Annotated[int, typer.Option(help="The simulations' seed (the same at every point).", min=0)] = 0,
    max_unmet: Annotated[
        float,
        typer.Option(help="The SLO: production cpu unmet, as a share of what it used.", min=0.0, max=1.0),
    ] = DEFAULT_MAX_UNMET,
    workers: WorkersOpt = 0,
    scheduler: SchedulerOpt = None,
    out: Annotated[Path, typer.Option(help="Folder for pareto.json and pareto.png.")] = Path("out"),
    as_json: Annotated[
        bool, typer.Option("--json", metavar="", help="Print the figures as JSON instead of a table.")
    ] = False,
) -> None:
    """Pack production at each cap X (as Kuberina's Pareto plans do), simulate the day with
    reclamation on, and find the X with the most useful work within the SLO; plot the curve."""
    xs = _points(points)
    paths = _inputs("sweep pareto", files, ("INFRA", "WORKLOADS"), out)
    try:
        result: list[Point] = run_all(
            _one,
            [(paths[0], paths[1], x, hours, seed) for x in xs],
            workers=workers,
            scheduler=scheduler,
            label="pareto points",
            quiet=as_json,
        )
    except JobFailed as e:
        raise bad_input([f"X = {xs[e.index]} %: the run failed ({e.error!r}); nothing was written"]) from None
    best = optimum(result, max_unmet)
    record = _record(result, best, max_unmet, hours, seed)
    try:  # both files or neither: written aside and renamed into place together
        write_files_atomic(
            {
                out / RECORD_FILE: json.dumps(record, indent=2) + "\n",
                out / PLOT_FILE: plot(result, best, max_unmet),
            }
        )
    except OSError as e:
        raise bad_input([f"--out: cannot write: {e.strerror or e} (value: {str(out)!r})"]) from None
    if as_json:
        typer.echo(json.dumps(record, indent=2))
    else:
        _show(result, best, max_unmet, out)
    if any(p.ran and p.figures["restoration_violations"] for p in result):
        raise typer.Exit(EXIT_INVARIANT)


def _record(
    points: list[Point], best: Point | None, max_unmet: float, hours: float, seed: int
) -> dict[str, Any]:
    return {
        "command": command_line(),
        "hours": hours,
        "seed": seed,
        "max_unmet": max_unmet,
        "points": [
            {
                "x": p.x,
                "active_nodes": p.active_nodes,
                "pending": p.pending,
                "useful_cpu_core_hours": round(p.useful_core_hours, 3) if p.ran else None,
                "unmet_share": round(p.unmet_share(), 6) if p.ran else None,
                "meets_slo": p.meets_slo(max_unmet),
                **p.figures,
            }
            for p in points
        ],
        "optimum": best.x if best is not None else None,
    }


def _show(points: list[Point], best: Point | None, max_unmet: float, out: Path) -> None:
    con = table_console()
    table = Table(title="Pareto threshold sweep (reclamation on)", title_justify="left")
    for col in (
        "X %",
        "active nodes",
        "useful cpu core-h",
        "batch cpu core-h",
        "unmet",
        "prod OOM / evicted",
        "SLO",
    ):
        table.add_column(col, justify="right")
    for p in points:
        if not p.ran:
            table.add_row(str(p.x), "-", f"production does not pack: {p.pending} pods left", "", "", "", "")
            continue
        f = p.figures
        table.add_row(
            str(p.x) + (" *" if best is not None and p.x == best.x else ""),
            str(p.active_nodes),
            f"{p.useful_core_hours:,.0f}",
            f"{f['batch_cpu_core_hours']:,.0f}",
            f"{p.unmet_share():.2%}",
            f"{f['production_oom_kills']} / {f['production_evictions']}",
            "meets" if p.meets_slo(max_unmet) else "breaks",
        )
    con.print(table)
    if best is None:
        con.print(
            f"no point meets the SLO (unmet cpu <= {max_unmet:.1%}, no production OOM kill or eviction)"
        )
    else:
        work = f"{best.useful_core_hours:,.0f} core-hours"
        con.print(f"optimum: X = {best.x} % ({best.active_nodes} active nodes, {work})")
    con.print(f"wrote {out / RECORD_FILE} and {out / PLOT_FILE}")


SEEDS_FILE = "seeds.json"


def _arm_run(
    paths: tuple[str, ...], drop: bool, hours: float, seed: int, load: float, arm: str
) -> dict[str, Any]:
    """One arm's run in a worker process (the cluster read once per process)."""
    from kalena.sim.arms import run

    cluster = worker_cluster(*paths)
    return run(cluster.without_empty_nodes() if drop else cluster, hours, seed, load, arm)


def _loads(text: str) -> tuple[float, ...]:
    return tuple(sorted(number_list("--loads", text, lo=0.0, lo_open=True)))


@app.command("seeds")
def seeds(
    files: Annotated[
        list[Path] | None,
        typer.Argument(
            help="INFRA WORKLOADS BLUEPRINT (IR v1 or legacy); default: the bundled Irina.",
            show_default=False,
        ),
    ] = None,
    count: Annotated[int, typer.Option("--seeds", help="Seeds 0..N-1 per load and arm.", min=1)] = 5,
    hours: Annotated[float, typer.Option(help="Simulated hours of each run.", min=0.1, max=8784.0)] = 6.0,
    loads: Annotated[
        str, typer.Option(help="Batch loads, multiples of the fitted one, comma-separated.")
    ] = "1",
    drop_empty_nodes: Annotated[
        bool,
        typer.Option(
            "--drop-empty-nodes",
            metavar="",
            help="Leave out the nodes the blueprint puts no production on (batch gets only what it leaves).",
        ),
    ] = False,
    workers: WorkersOpt = 0,
    scheduler: SchedulerOpt = None,
    out: Annotated[Path, typer.Option(help="Folder for seeds.json.")] = Path("out"),
    as_json: Annotated[
        bool, typer.Option("--json", metavar="", help="Print the record as JSON instead of a table.")
    ] = False,
) -> None:
    """The three arms (reclamation on, off, no Kalena) over seeds and batch loads: what
    reclamation makes possible and production's harm, each with a 95 % interval over the seeds."""
    from kalena.sim.arms import ARMS, summarise

    load_list = _loads(loads)
    paths = _inputs("sweep seeds", files, ("INFRA", "WORKLOADS", "BLUEPRINT"), out)
    keys = [(load, s, arm) for load in load_list for s in range(count) for arm in ARMS]
    try:
        done = run_all(
            _arm_run,
            [(paths, drop_empty_nodes, hours, s, load, arm) for load, s, arm in keys],
            workers=workers,
            scheduler=scheduler,
            label="runs (load x seed x arm)",
            quiet=as_json,
        )
    except JobFailed as e:
        load, s, arm = keys[e.index]
        raise bad_input(
            [f"load {load:g}, seed {s}, {arm}: the run failed ({e.error!r}); nothing was written"]
        ) from None
    runs = dict(zip(keys, done, strict=True))
    record = {
        "command": command_line(),
        "hours": hours,
        "seeds": count,
        "loads": list(load_list),
        "drop_empty_nodes": drop_empty_nodes,
        "summary": summarise(runs),
        "runs": [{"load": k[0], "seed": k[1], "arm": k[2], **v} for k, v in runs.items()],
    }
    try:
        write_files_atomic({out / SEEDS_FILE: json.dumps(record, indent=2) + "\n"})
    except OSError as e:
        raise bad_input([f"--out: cannot write: {e.strerror or e} (value: {str(out)!r})"]) from None
    if as_json:
        typer.echo(json.dumps(record, indent=2))
    else:
        _show_seeds(record, out)
    if any(r["restoration_violations"] for r in runs.values()):
        raise typer.Exit(EXIT_INVARIANT)


def seeds_table(summary: dict[str, Any], title: str) -> Table:
    """The summary of :func:`kalena.sim.arms.summarise` as a table (also ``bench/bench_arms.py``'s)."""
    from kalena.sim.arms import ARMS, interval_text

    table = Table(title=title, title_justify="left")
    for col in (
        "batch load",
        "(a) enabled vs baseline",
        "(b) task-level",
        "(c) per-node bound",
        "unmet prod. cpu (core-s): on / off / baseline",
        "prod. cpu lost to interference (core-s)",
        "prod. OOM kills",
    ):
        table.add_column(col)
    for load, s in summary.items():
        unmet = s["production_unmet_cpu_core_seconds"]
        slow = s["production_interference_cpu_core_seconds"]
        table.add_row(
            f"x{load}",
            interval_text(s["work_enabled_by_reclamation"]),
            interval_text(s["task_level"]),
            interval_text(s["per_node_upper_bound"]),
            " / ".join(f"{unmet[arm]['mean']:,.0f}" for arm in ARMS),
            " / ".join(f"{slow[arm]['mean']:,.0f}" for arm in ARMS),
            " / ".join(str(s["production_oom_kills"][arm]) for arm in ARMS),
        )
    return table


def _show_seeds(record: dict[str, Any], out: Path) -> None:
    where = " without its empty nodes" if record["drop_empty_nodes"] else ""
    title = f"The arms{where}, {record['hours']:g} h, seeds 0-{record['seeds'] - 1}: mean [95 % interval]"
    con = table_console()
    con.print(seeds_table(record["summary"], title))
    con.print(f"wrote {out / SEEDS_FILE}")
