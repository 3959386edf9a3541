"""``kalena calibrate``: the calibration protocol (seed 000 §6.4) on the simulator.

Sweeps the decay estimator's margin and half-life over full simulated days of the bundled Irina
(every setting on the same seeds, in worker processes, with a progress bar), prints the settings
with their reclaimed capacity, disruptions and SLO proxy, plots the safety curve and names its
knee (:mod:`kalena.sim.calibration`). ``--write-defaults`` makes the knee the shipped defaults:
``kalena/core/estimators/calibrated.py`` (the constants, with the command that produced them) and
``kalena/sim/params/calibration.json`` (every run), written together or not at all.

Exit codes: 0 done; 1 a run broke the restoration invariant (its figures are invalid); 2 bad input
(a grid value out of range, an unwritable folder).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from kalena.cli.fanout import JobFailed, SchedulerOpt, WorkersOpt, run_all, worker_cluster
from kalena.cli.screen import WHERE_OPTIONS, command_line, number_list, table_console
from kalena.cli.simulate import EXIT_BAD_INPUT, EXIT_INVARIANT, _check_out, _fail, _policy
from kalena.data import irina_paths
from kalena.ir.write import write_files_atomic
from kalena.sim.calibration import (
    DEFAULT_HALF_LIVES_S,
    DEFAULT_HOURS,
    DEFAULT_MARGINS,
    DEFAULT_SEEDS,
    KEEP,
    Setting,
    knee,
    summarise,
)

RECORD_FILE = "calibration.json"
PLOT_FILE = "safety.png"
SRC_ROOT = Path(__file__).resolve().parents[2]  # the folder holding the kalena package
DEFAULTS_MODULE = Path("kalena/core/estimators/calibrated.py")
SHIPPED_RECORD = Path("kalena/sim/params/calibration.json")


def _one(hours: float, seed: int, margin: float, half_life_s: float) -> dict[str, Any]:
    """One run (in a worker process): the kept figures of its report, and its invariant count."""
    from kalena.sim import SimConfig, Simulation, build_report

    sim = Simulation(
        worker_cluster(*map(str, irina_paths())),
        SimConfig(hours=hours, seed=seed, policy=_policy("decay", margin, half_life_s)),
    )
    sim.run()
    report = build_report(sim)
    kept = {k: report[k] for k in KEEP}
    kept["restoration_violations"] = report["restoration_violations"]
    kept["wall_seconds"] = report["wall_seconds"]
    return kept


#: Options that say where the output goes, not what runs: left out of the recorded command, so a
#: record names no folder of the machine that made it.
_WHERE = (*WHERE_OPTIONS, "--defaults-root")


def _defaults_module(setting: Setting, command: str, date: str) -> str:
    return f'''"""The decay estimator's shipped defaults: the calibration protocol's knee (seed 000 §6.4).

Generated on {date} by

    {command}

Every run is in ``kalena/sim/params/calibration.json``; how the knee is chosen, in
:mod:`kalena.sim.calibration`. Do not edit by hand: run it again.
"""

DEFAULT_MARGIN = {setting.margin!r}
DEFAULT_HALF_LIFE_S = {setting.half_life_s!r}
'''


def calibrate(
    margins: Annotated[str, typer.Option(help="Margins to sweep, comma-separated, each >= 1.")] = ",".join(
        f"{m:g}" for m in DEFAULT_MARGINS
    ),
    half_lives: Annotated[
        str, typer.Option(help="Half-lives to sweep (seconds), comma-separated, each > 0.")
    ] = ",".join(f"{h:g}" for h in DEFAULT_HALF_LIVES_S),
    seeds: Annotated[
        int, typer.Option(help="Seeds each setting runs on (the same for all).", min=1)
    ] = DEFAULT_SEEDS,
    hours: Annotated[
        float, typer.Option(help="Simulated hours per run (a full diurnal cycle: 24).", min=0.01, max=8784.0)
    ] = DEFAULT_HOURS,
    workers: WorkersOpt = 0,
    scheduler: SchedulerOpt = None,
    out: Annotated[Path, typer.Option(help="Folder for calibration.json and safety.png.")] = Path(
        "calibration"
    ),
    write_defaults: Annotated[
        bool,
        typer.Option(
            "--write-defaults", metavar="", help="Make the knee the shipped defaults (a source checkout)."
        ),
    ] = False,
    defaults_root: Annotated[
        Path,
        typer.Option(
            help="The folder holding the kalena package whose defaults --write-defaults writes.",
            show_default="the one this kalena runs from",
        ),
    ] = SRC_ROOT,
) -> None:
    """Sweep margin x half-life over simulated days; plot the safety curve; name (and ship) its knee."""
    grid_m = number_list("--margins", margins, lo=1.0)
    grid_h = number_list("--half-lives", half_lives, lo=0.0, lo_open=True)
    bad = _check_out(out)
    if bad is None and write_defaults:
        targets = [defaults_root / DEFAULTS_MODULE, defaults_root / SHIPPED_RECORD]
        missing = [t.parent for t in targets if not t.parent.is_dir() or not os.access(t.parent, os.W_OK)]
        if missing:
            bad = (
                f"--defaults-root {defaults_root}: no writable {missing[0]} "
                "(--write-defaults needs a source checkout)"
            )
    if bad is not None:
        raise _fail([bad])
    settings = [Setting(m, h) for m in grid_m for h in grid_h]
    jobs = [(seed, s) for seed in range(seeds) for s in settings]  # seed-major: A/B/A/B
    n_workers = min(workers or os.cpu_count() or 1, len(jobs))
    t0 = time.monotonic()
    try:
        done = run_all(
            _one,
            [(hours, seed, s.margin, s.half_life_s) for seed, s in jobs],
            workers=workers,
            scheduler=scheduler,
            label="calibrate runs",
        )
    except JobFailed as e:  # a run that broke: say which, stop the rest, write nothing
        seed, s = jobs[e.index]
        raise _fail(
            [f"{s.label()}, seed {seed}: the run failed ({e.error!r}); nothing was written"]
        ) from None
    runs: dict[tuple[Setting, int], dict[str, Any]] = {
        (s, seed): r for (seed, s), r in zip(jobs, done, strict=True)
    }
    elapsed = time.monotonic() - t0
    ordered = [(s, seed, runs[(s, seed)]) for seed, s in jobs]
    rows = summarise(ordered, hours)
    best = knee([r["disruptions_per_hour"] for r in rows], [r["reclaimed_cpu_core_hours"] for r in rows])
    chosen = Setting(rows[best]["margin"], rows[best]["half_life_s"])
    command = command_line(leave_out=_WHERE)
    date = time.strftime("%Y-%m-%d", time.gmtime())
    record = {
        "command": command,
        "date": date,
        "machine": {"cpus": os.cpu_count(), "workers": n_workers},
        "wall_seconds": round(elapsed, 1),
        "hours": hours,
        "seeds": seeds,
        "margins": list(grid_m),
        "half_lives_s": list(grid_h),
        "knee": {"margin": chosen.margin, "half_life_s": chosen.half_life_s},
        "settings": rows,
        "runs": [
            {"margin": s.margin, "half_life_s": s.half_life_s, "seed": seed, **kept}
            for s, seed, kept in ordered
        ],
    }
    text = json.dumps(record, indent=1) + "\n"
    from kalena.sim.plots import safety_curve  # matplotlib loads only once a sweep has ended

    files: dict[Path, str | bytes] = {out / RECORD_FILE: text, out / PLOT_FILE: safety_curve(rows, best)}
    if write_defaults:
        files[defaults_root / DEFAULTS_MODULE] = _defaults_module(chosen, command, date)
        files[defaults_root / SHIPPED_RECORD] = text
    out.mkdir(parents=True, exist_ok=True)
    try:
        write_files_atomic(files)
    except OSError as e:
        raise _fail(
            [f"{out}: cannot write the calibration: {e.strerror or e}; nothing was written"]
        ) from None
    screen = table_console()
    table = Table(
        title=f"Calibration: {len(settings)} settings x {seeds} seeds x {hours:g} h ({elapsed:.0f} s)"
    )
    for col in ("margin", "half-life s", "reclaimed core-h", "disruptions/h", "batch core-h",
                "prod unmet core-s", "prod interference core-s", "OOM kills", "knee"):  # fmt: skip
        table.add_column(col, justify="right")
    for i, r in enumerate(rows):
        table.add_row(
            f"{r['margin']:g}", f"{r['half_life_s']:g}", f"{r['reclaimed_cpu_core_hours']:,.0f}",
            f"{r['disruptions_per_hour']:,.1f}", f"{r['batch_cpu_core_hours']:,.0f}",
            f"{r['production_unmet_cpu_core_seconds']:,.0f}",
            f"{r['production_interference_cpu_core_seconds']:,.0f}",
            f"{r['production_oom_kills'] + r['batch_oom_kills']:,.1f}", "<-" if i == best else "",
        )  # fmt: skip
    screen.print(table)
    screen.print(f"knee: margin {chosen.margin:g}, half-life {chosen.half_life_s:g} s")
    screen.print("wrote " + ", ".join(str(p) for p in files))
    if any(r["restoration_violations"] for r in runs.values()):
        typer.echo("restoration invariant violated in a run: figures invalid", err=True)
        raise typer.Exit(EXIT_INVARIANT)


__all__ = ["EXIT_BAD_INPUT", "calibrate"]
